"""Explicit (quadratic) reference computations for the attention tests."""

from __future__ import annotations

import math

import torch

from protein_performer.attention.feature_maps import FeatureParams, KernelSpec


def explicit_from_features(
    phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, causal: bool
) -> torch.Tensor:
    """``normalize(φq φkᵀ [masked]) v`` from ``(B, H, L, m)`` features; empty rows give 0."""
    scores = phi_q @ phi_k.transpose(-1, -2)
    if causal:
        scores = scores.tril()
    den = scores.sum(-1, keepdim=True)
    return (scores @ v) / torch.where(den > 0, den, torch.ones_like(den))


def explicit_from_kernel(
    a: torch.Tensor, v: torch.Tensor, causal: bool, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unnormalised weights ``a`` ``(B, H, L, L)`` -> (output ``(B, H, L, Dv)``, the rows):
    future keys (causal) and padded keys (``mask`` ``(B, L)`` True) zeroed, rows normalised,
    rows with no visible key all 0."""
    n = a.shape[-1]
    if causal:
        a = a.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), 0.0)
    if mask is not None:
        a = a.masked_fill(mask[:, None, None, :], 0.0)
    den = a.sum(-1, keepdim=True)
    weights = torch.where(den > 0, a / den, 0.0)
    return weights @ v, weights


def explicit_softmax(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Textbook ``softmax(q kᵀ / sqrt(D)) v`` with masks, written out by hand."""
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    allowed = torch.ones(logits.shape[-2:], dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    allowed = allowed.expand(q.shape[0], 1, *logits.shape[-2:])
    if key_padding_mask is not None:
        allowed = allowed & ~key_padding_mask[:, None, None, :]
    weights = torch.exp(logits - logits.amax(-1, keepdim=True)) * allowed
    den = weights.sum(-1, keepdim=True)
    return (weights @ v) / torch.where(den > 0, den, torch.ones_like(den))


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """``||approx - exact||_F / ||exact||_F``."""
    return ((approx.double() - exact.double()).norm() / exact.double().norm()).item()


def gradcheck_inputs(
    kind: str, masked: bool, lq: int, lk: int, n: int = 2, d: int = 4, m: int = 6
) -> tuple[FeatureParams, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random float64 ``(params, mask, q, k, v)`` for gradchecks of the chunked kernels.

    ``q`` ``(n, lq, d)``, ``k``/``v`` ``(n, lk, d)`` require grad; ``mask`` ``(n, lk)`` pads one
    key of row 0 and the last three of row 1 when ``masked``.
    """
    g = torch.Generator().manual_seed(4)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    wq = rnd(n, m, d)
    if kind == "softmax":  # [scaled W, 1 (row term), per-feature bias]
        wk = torch.cat([rnd(n, m, d), torch.ones(n, m, 1, dtype=torch.float64), rnd(n, m, 1)], -1)
    else:
        wk = wq
    params = FeatureParams(spec=KernelSpec(kind=kind), wq=wq, wk=wk, k_sq_coef=0.3)
    mask = None
    if masked:
        mask = torch.zeros(n, lk, dtype=torch.bool)
        mask[0, 1] = mask[1, -3:] = True
    q, k, v = (rnd(n, length, d).requires_grad_() for length in (lq, lk, lk))
    return params, mask, q, k, v
