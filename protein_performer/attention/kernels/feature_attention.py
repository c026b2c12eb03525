"""Linear attention with a deterministic feature map: ``φ(Q) (φ(K)ᵀ [V, 1])``.

Shared by the kinds whose features are exact rather than random (the Taylor features of
``exp``, Hedgehog's learned maps). The map ``phi`` turns raw ``(B, H, L, D)`` queries or keys
into ``(B, H, L, F)`` non-negative features and ``kernel(q, k)`` gives the same kernel
explicitly, ``(B, H, Lq, Lk)`` = ``phi(q) phi(k)ᵀ`` (or a cheaper formula for it).

Bidirectional: one ``(F, Dv+1)`` key summary, O(L·F·Dv). Causal: chunks of ``chunk_size``
rows, the kernel explicit inside a chunk and a running ``(F, Dv+1)`` summary across chunks,
so memory stays O(L·F) instead of the O(L·F·Dv) of plain prefix sums. Plain torch (autograd
does the backward), in float32 at least with autocast off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ..base import gather_rows
from .common import den_floor

FeatureMap = Callable[[torch.Tensor], torch.Tensor]
Kernel = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def work_dtype(t: torch.Tensor) -> torch.dtype:
    """float64 stays float64; everything else is computed in float32."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _normalise(na: torch.Tensor) -> torch.Tensor:
    """``[numerator, normaliser]`` ``(..., Dv+1)`` -> their ratio; 0 where no key is visible
    (normaliser below :func:`den_floor`). A NaN normaliser stays NaN: a diverging step must
    show, not read as "no visible key"."""
    den = na[..., -1:]
    hidden = den < den_floor(den.dtype)
    return torch.where(hidden, 0.0, na[..., :-1] / torch.where(hidden, 1.0, den))


def feature_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    phi_q: FeatureMap,
    phi_k: FeatureMap,
    kernel: Kernel,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    chunk_size: int = 256,
) -> torch.Tensor:
    """``(B, H, L, D)`` q/k/v -> ``(B, H, L, Dv)``: each query's output is the kernel-weighted
    mean of the values of its visible keys (``key_padding_mask`` ``(B, L)`` True = padded key;
    causal: keys at or before the query). A query with no visible key gets zeros."""
    out_dtype = q.dtype
    work = work_dtype(q)
    with torch.autocast(device_type=q.device.type, enabled=False):
        q, k, v = q.to(work), k.to(work), v.to(work)
        va = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # [v, 1]: numerator, normaliser
        if key_padding_mask is not None:
            # padded keys leave both sums whatever they hold (a NaN there must not reach a row)
            padded = key_padding_mask.to(torch.bool)[:, None, :, None]
            k, va = k.masked_fill(padded, 0.0), va.masked_fill(padded, 0.0)
        if not causal:
            na = torch.matmul(phi_q(q), torch.matmul(phi_k(k).transpose(-1, -2), va))
        else:
            na = _causal(q, k, va, phi_q, phi_k, kernel, chunk_size)
        out = _normalise(na)
    return out.to(out_dtype)


def _causal(q, k, va, phi_q, phi_k, kernel, chunk_size) -> torch.Tensor:
    n = q.shape[-2]
    state = None  # (B, H, F, Dv+1): summary of the keys of earlier chunks
    parts = []
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        qc, kc, vc = q[..., start:stop, :], k[..., start:stop, :], va[..., start:stop, :]
        part = torch.matmul(kernel(qc, kc).tril(), vc)  # keys of the chunk at or before each query
        if state is not None:
            part = part + torch.matmul(phi_q(qc), state)
        parts.append(part)
        if stop < n:
            update = torch.matmul(phi_k(kc).transpose(-1, -2), vc)
            state = update if state is None else state + update
    return torch.cat(parts, dim=-2)


def feature_attention_at(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    phi_q: FeatureMap,
    phi_k: FeatureMap,
    kernel: Kernel,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The rows ``positions`` ``(B, P)`` of :func:`feature_attention` ``(B, H, P, Dv)``, for
    ``q`` ``(B, H, Lq, D)``: bidirectional, the chosen queries' features against the one key
    summary; causal, the kernel explicit against the keys up to each query (O(P·Lk)), where the
    forward's running summary would need every earlier row."""
    chosen = gather_rows(q, positions)
    if not causal:
        return feature_attention(chosen, k, v, phi_q, phi_k, kernel, False, key_padding_mask)
    out_dtype = q.dtype
    work = work_dtype(q)
    with torch.autocast(device_type=q.device.type, enabled=False):
        chosen, k, v = chosen.to(work), k.to(work), v.to(work)
        va = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
        if key_padding_mask is not None:
            padded = key_padding_mask.to(torch.bool)[:, None, :, None]
            k, va = k.masked_fill(padded, 0.0), va.masked_fill(padded, 0.0)
        a = kernel(chosen, k)  # (B, H, P, Lk)
        cols = torch.arange(k.shape[-2], device=q.device)[None, None, None, :]
        later = cols > positions.to(device=q.device, dtype=torch.long)[:, None, :, None]
        out = _normalise(torch.matmul(a.masked_fill(later, 0.0), va))
    return out.to(out_dtype)


def feature_attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    kernel: Kernel,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    chunk_size: int = 256,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, rows)``: the attention rows ``(B, H, rows, L)`` that
    :func:`feature_attention` applies to the values, ``chunk_size`` query rows at a time."""
    n = k.shape[-2]
    for start in range(0, q.shape[-2], chunk_size):
        stop = min(start + chunk_size, q.shape[-2])
        with torch.autocast(device_type=q.device.type, enabled=False):  # as the forward
            a = kernel(q[..., start:stop, :].to(work_dtype(q)), k.to(work_dtype(k)))
        if key_padding_mask is not None:  # (a NaN in a padded key is replaced, not multiplied)
            a = a.masked_fill(key_padding_mask.to(torch.bool)[:, None, None, :], 0.0)
        if causal:
            rows = torch.arange(start, stop, device=q.device)[:, None]
            a = a.masked_fill(torch.arange(n, device=q.device)[None, :] > rows, 0.0)
        den = a.sum(-1, keepdim=True)
        hidden = den < den_floor(den.dtype)
        yield start, torch.where(hidden, 0.0, a / torch.where(hidden, 1.0, den))
