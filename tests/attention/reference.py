"""Explicit (quadratic) reference computations for the attention tests."""

from __future__ import annotations

import math

import torch


def explicit_from_features(
    phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, causal: bool
) -> torch.Tensor:
    """``normalize(φq φkᵀ [masked]) v`` from ``(B, H, L, m)`` features; empty rows give 0."""
    scores = phi_q @ phi_k.transpose(-1, -2)
    if causal:
        scores = scores.tril()
    den = scores.sum(-1, keepdim=True)
    return (scores @ v) / torch.where(den > 0, den, torch.ones_like(den))


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
