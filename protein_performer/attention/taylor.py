"""Linear attention with the second-order Taylor feature map of ``exp`` ("Based", Arora et al.
2024, arXiv 2402.18668).

The kernel replaces ``exp(s)``, ``s = q·k / sqrt(D)``, by its Taylor polynomial
``1 + s + s²/2``, which is strictly positive (its minimum is 1/2) and, unlike random features,
exact: ``φ(x)·φ(y) = 1 + x·y + (x·y)²/2`` for the deterministic map

    φ(x) = [1, x, x_i²/√2 (i), x_i·x_j (i < j)],   x = q · D^(-1/4),

of ``F = 1 + D + D(D+1)/2`` features (561 for a head size of 32). The quadratic term lets one
key take far more of a row than a random-feature estimate of softmax can at the same cost, which
is what recall needs (Based pairs it with a small exact sliding window: ``model.local_heads``).

Computed by :mod:`protein_performer.attention.kernels.feature_attention` (bidirectional in O(L·F·D);
causal by chunks, the kernel explicit inside a chunk).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from .base import AttentionKind, AttentionOptions, Rows, check_positions, query_key_heads
from .feature_maps import taylor_feature_dim, taylor_features, taylor_kernel
from .kernels.feature_attention import (
    feature_attention,
    feature_attention_at,
    feature_attention_rows,
)


def _phi(x: torch.Tensor) -> torch.Tensor:
    return taylor_features(x * x.shape[-1] ** -0.25)


def taylor_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    chunk_size: int = 256,
) -> torch.Tensor:
    """``(B, H, L, D)`` q/k/v -> ``(B, H, L, Dv)``: each query's output is the kernel-weighted
    mean of the values of its visible keys (``key_padding_mask`` ``(B, L)`` True = padded key;
    causal: keys at or before the query). A query with no visible key gets zeros."""
    return feature_attention(
        q, k, v, _phi, _phi, taylor_kernel, causal, key_padding_mask, chunk_size
    )


def taylor_attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    chunk_size: int = 256,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, rows)``: the attention rows ``(B, H, rows, L)`` that
    :func:`taylor_attention` applies to the values, ``chunk_size`` query rows at a time."""
    yield from feature_attention_rows(q, k, taylor_kernel, causal, key_padding_mask, chunk_size)


class TaylorAttention(AttentionKind):
    """The ``taylor`` kind (:func:`taylor_attention`). No state."""

    slot = "taylor"

    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.causal = causal

    @classmethod
    def from_options(cls, name: str, options: AttentionOptions) -> TaylorAttention:
        return cls(options.causal)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return taylor_attention(q, k, v, self.causal, key_padding_mask)

    def forward_at(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        check_positions(positions, q.shape[2], q.shape[0])
        return feature_attention_at(
            q, k, v, positions, _phi, _phi, taylor_kernel, self.causal, key_padding_mask
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
        q, k = query_key_heads(q, k, heads)
        yield from taylor_attention_rows(q, k, self.causal, key_padding_mask, chunk_size)

    def extra_repr(self) -> str:
        return f"causal={self.causal}"


__all__ = [
    "TaylorAttention",
    "taylor_attention",
    "taylor_attention_rows",
    "taylor_feature_dim",
    "taylor_features",
    "taylor_kernel",
]
