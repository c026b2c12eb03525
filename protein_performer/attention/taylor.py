"""Linear attention with the second-order Taylor feature map of ``exp`` ("Based", Arora et al.
2024, arXiv 2402.18668).

The kernel replaces ``exp(s)``, ``s = q·k / sqrt(D)``, by its Taylor polynomial
``1 + s + s²/2``, which is strictly positive (its minimum is 1/2) and, unlike random features,
exact: ``φ(x)·φ(y) = 1 + x·y + (x·y)²/2`` for the deterministic map

    φ(x) = [1, x, x_i²/√2 (i), x_i·x_j (i < j)],   x = q · D^(-1/4),

of ``F = 1 + D + D(D+1)/2`` features (561 for a head size of 32). The quadratic term lets one
key take far more of a row than a random-feature estimate of softmax can at the same cost, which
is what recall needs (Based pairs it with a small exact sliding window: ``model.local_heads``).

Bidirectional: ``φ(Q) (φ(K)ᵀ [V, 1])`` in O(L·F·D). Causal: chunks of ``chunk_size`` rows, the
kernel evaluated explicitly inside a chunk and a running ``(F, D+1)`` summary across chunks, so
memory stays O(L·F) instead of the O(L·F·D) of plain prefix sums. Everything is plain torch
(autograd does the backward); computed in float32 at least, with autocast off.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch


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


def _work_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


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
    out_dtype = q.dtype
    work = _work_dtype(q)
    with torch.autocast(device_type=q.device.type, enabled=False):
        q, k, v = q.to(work), k.to(work), v.to(work)
        scale = q.shape[-1] ** -0.25
        va = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # [v, 1]: numerator, normaliser
        if key_padding_mask is not None:
            va = va.masked_fill(key_padding_mask.to(torch.bool)[:, None, :, None], 0.0)
        if not causal:
            summary = torch.matmul(taylor_features(k * scale).transpose(-1, -2), va)
            na = torch.matmul(taylor_features(q * scale), summary)
        else:
            na = _causal(q, k, va, scale, chunk_size)
        den = na[..., -1:]
        visible = den > 0  # the kernel is >= 1/2: 0 only when no key is visible
        out = torch.where(visible, na[..., :-1] / torch.where(visible, den, 1.0), 0.0)
    return out.to(out_dtype)


def _causal(
    q: torch.Tensor, k: torch.Tensor, va: torch.Tensor, scale: float, chunk_size: int
) -> torch.Tensor:
    n = q.shape[-2]
    state = None  # (B, H, F, Dv+1): summary of the keys of earlier chunks
    parts = []
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        qc, kc, vc = q[..., start:stop, :], k[..., start:stop, :], va[..., start:stop, :]
        within = taylor_kernel(qc, kc).tril()  # keys of the chunk at or before each query
        part = torch.matmul(within, vc)
        if state is not None:
            part = part + torch.matmul(taylor_features(qc * scale), state)
        parts.append(part)
        if stop < n:
            update = torch.matmul(taylor_features(kc * scale).transpose(-1, -2), vc)
            state = update if state is None else state + update
    return torch.cat(parts, dim=-2)


def taylor_attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    chunk_size: int = 256,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, rows)``: the attention rows ``(B, H, rows, L)`` that
    :func:`taylor_attention` applies to the values, ``chunk_size`` query rows at a time."""
    n = k.shape[-2]
    for start in range(0, q.shape[-2], chunk_size):
        stop = min(start + chunk_size, q.shape[-2])
        with torch.autocast(device_type=q.device.type, enabled=False):  # as the forward
            a = taylor_kernel(q[..., start:stop, :].to(_work_dtype(q)), k.to(_work_dtype(k)))
        if key_padding_mask is not None:
            a = a.masked_fill(key_padding_mask.to(torch.bool)[:, None, None, :], 0.0)
        if causal:
            rows = torch.arange(start, stop, device=q.device)[:, None]
            a = a.masked_fill(torch.arange(n, device=q.device)[None, :] > rows, 0.0)
        den = a.sum(-1, keepdim=True)
        yield start, torch.where(den > 0, a / torch.where(den > 0, den, 1.0), 0.0)
