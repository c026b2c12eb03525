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

from collections.abc import Iterator, Sequence

import torch

from .base import AttentionKind, AttentionOptions, Rows, check_positions, select_heads
from .feature_maps import HedgehogFeatureMaps
from .kernels.feature_attention import (
    feature_attention,
    feature_attention_at,
    feature_attention_rows,
)


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


class HedgehogAttention(HedgehogFeatureMaps, AttentionKind):
    """The ``hedgehog`` kind: :func:`hedgehog_attention` with its own maps (its parameters),
    one per head of the block (``heads``), of which it computes the heads from ``first`` on
    (the heads before are local ones: plain and hybrid blocks share the maps' shapes)."""

    slot = "maps"

    def __init__(
        self, heads: int, dim_head: int, half: int, first: int = 0, causal: bool = False
    ) -> None:
        super().__init__(heads, dim_head, half)
        self.first = first
        self.causal = causal

    @classmethod
    def from_options(cls, name: str, options: AttentionOptions) -> HedgehogAttention:
        return cls(
            options.heads,
            options.dim_head,
            options.nb_features // 2,
            options.first_head,
            options.causal,
        )

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return hedgehog_attention(q, k, v, self, self.first, self.causal, key_padding_mask)

    def forward_at(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        check_positions(positions, q.shape[2], q.shape[0])
        first = self.first
        return feature_attention_at(
            q,
            k,
            v,
            positions,
            lambda x: self.query(x, first),
            lambda x: self.key(x, first),
            lambda a, b: self.kernel(a, b, first),
            self.causal,
            key_padding_mask,
        )

    def rows(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        *,
        chunk_size: int = 256,
        heads: Sequence[int] | None = None,
    ) -> Rows:
        # every head (each has its own map), then the chosen
        rows = hedgehog_attention_rows(
            q, k, self, self.first, self.causal, key_padding_mask, chunk_size
        )
        yield from select_heads(rows, heads)

    def extra_repr(self) -> str:
        heads, dim, half = self.q_weight.shape
        return (
            f"heads={heads}, dim_head={dim}, half={half}, first={self.first}, causal={self.causal}"
        )


__all__ = [
    "HedgehogAttention",
    "HedgehogFeatureMaps",
    "hedgehog_attention",
    "hedgehog_attention_rows",
]
