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

import math
from collections.abc import Iterator

import torch

from .kernels.feature_attention import feature_attention, feature_attention_rows


def taylor_feature_dim(dim: int) -> int:
    """Number of Taylor features ``F`` for a head size ``dim``."""
    return 1 + dim + dim * (dim + 1) // 2


def taylor_features(x: torch.Tensor) -> torch.Tensor:
    """``(..., L, D)`` (already scaled) -> ``(..., L, F)`` with ``φ(x)·φ(y) = 1 + x·y + (x·y)²/2``."""
    d = x.shape[-1]
    i, j = torch.triu_indices(d, d, device=x.device)
    weight = torch.ones(len(i), dtype=x.dtype, device=x.device)
    weight[i == j] = 1 / math.sqrt(2)
    quad = x[..., i] * x[..., j] * weight
    return torch.cat([torch.ones_like(x[..., :1]), x, quad], dim=-1)


def taylor_kernel(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``(..., Lq, D)``, ``(..., Lk, D)`` raw queries/keys -> ``(..., Lq, Lk)`` kernel
    ``1 + s + s²/2`` with ``s = q·k / sqrt(D)`` (the unnormalised attention weights)."""
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return 1 + s + s * s / 2


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
    scale = q.shape[-1] ** -0.25

    def phi(x: torch.Tensor) -> torch.Tensor:
        return taylor_features(x * scale)

    return feature_attention(q, k, v, phi, phi, taylor_kernel, causal, key_padding_mask, chunk_size)


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
