"""Linear attention with learned feature maps ("Hedgehog", Zhang et al. 2024, arXiv 2402.04347).

Each head has its own trainable maps for queries and keys,

    φ(x) = [softmax(x W + b), softmax(−(x W + b))],   W: (D, m),  F = 2m features,

softmax over the ``m`` features. The kernel ``φ(q)·φ(k)`` is a sum of two products of
probability vectors: a query and a key that put their mass on the same feature score up to 2,
keys elsewhere close to 0. That is the spiky, low-entropy attention that random features of
``exp`` cannot estimate at the norms a sharp row needs (docs/results.md, the transfer table),
learned instead of drawn. ``W`` starts as the identity (columns past ``D`` small and random),
``b`` at 0. Computed by :mod:`protein_performer.attention.kernels.feature_attention`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from .kernels.feature_attention import feature_attention, feature_attention_rows


class HedgehogFeatureMaps(nn.Module):
    """Query and key maps of ``heads`` heads of size ``dim_head``, ``2·half`` features each.

    ``forward``-free: :meth:`query` and :meth:`key` map ``(B, H', L, D)`` rows of the heads
    ``first, …, first + H' − 1`` to ``(B, H', L, 2·half)`` features."""

    def __init__(self, heads: int, dim_head: int, half: int) -> None:
        super().__init__()
        self.q_weight = nn.Parameter(torch.empty(heads, dim_head, half))
        self.q_bias = nn.Parameter(torch.zeros(heads, half))
        self.k_weight = nn.Parameter(torch.empty(heads, dim_head, half))
        self.k_bias = nn.Parameter(torch.zeros(heads, half))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _, dim, half = self.q_weight.shape
        with torch.no_grad():
            for w in (self.q_weight, self.k_weight):
                w.normal_(0.0, dim**-0.5)  # the columns past D
                w[:, :, : min(dim, half)] = torch.eye(dim, min(dim, half))
            self.q_bias.zero_()
            self.k_bias.zero_()

    @staticmethod
    def _map(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        z = torch.matmul(x, w.to(x.dtype)) + b.to(x.dtype)[:, None, :]
        return torch.cat([torch.softmax(z, dim=-1), torch.softmax(-z, dim=-1)], dim=-1)

    def query(self, x: torch.Tensor, first: int = 0) -> torch.Tensor:
        h = x.shape[1]
        return self._map(x, self.q_weight[first : first + h], self.q_bias[first : first + h])

    def key(self, x: torch.Tensor, first: int = 0) -> torch.Tensor:
        h = x.shape[1]
        return self._map(x, self.k_weight[first : first + h], self.k_bias[first : first + h])

    def kernel(self, q: torch.Tensor, k: torch.Tensor, first: int = 0) -> torch.Tensor:
        """``(B, H', Lq, Lk)``: the unnormalised attention weights ``φ(q)·φ(k)``."""
        return torch.matmul(self.query(q, first), self.key(k, first).transpose(-1, -2))


def hedgehog_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    maps: HedgehogFeatureMaps,
    first: int = 0,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    chunk_size: int = 256,
) -> torch.Tensor:
    """``(B, H', L, D)`` q/k/v of the heads ``first…first+H'−1`` -> ``(B, H', L, Dv)``: the
    kernel-weighted mean of the visible keys' values (``key_padding_mask`` ``(B, L)`` True =
    padded; causal: keys at or before the query)."""
    return feature_attention(
        q,
        k,
        v,
        lambda x: maps.query(x, first),
        lambda x: maps.key(x, first),
        lambda a, b: maps.kernel(a, b, first),
        causal,
        key_padding_mask,
        chunk_size,
    )


def hedgehog_attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    maps: HedgehogFeatureMaps,
    first: int = 0,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    chunk_size: int = 256,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, rows)``: the attention rows ``(B, H', rows, L)`` that
    :func:`hedgehog_attention` applies to the values."""
    kernel = lambda a, b: maps.kernel(a, b, first)  # noqa: E731
    yield from feature_attention_rows(q, k, kernel, causal, key_padding_mask, chunk_size)
