"""Exact softmax attention with the same interface as FavorAttention (Transformer baseline)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def exact_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``softmax(q kᵀ / sqrt(D)) v`` via ``scaled_dot_product_attention``.

    ``q``: ``(B, H, Lq, D)``, ``k``: ``(B, H, Lk, D)``, ``v``: ``(B, H, Lk, Dv)`` ->
    ``(B, H, Lq, Dv)``. ``key_padding_mask``: ``(B, Lk)`` bool, True = padded key (ignored).
    A query row with no visible key (all its keys padded) returns zeros, with zero
    gradient, instead of NaN.
    """
    if key_padding_mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    lq, lk = q.shape[-2], k.shape[-2]
    if key_padding_mask.shape != (k.shape[0], lk):
        raise ValueError(
            f"key_padding_mask must be (B, Lk) = {(k.shape[0], lk)}, "
            f"got {tuple(key_padding_mask.shape)}"
        )
    allowed = ~key_padding_mask.bool()[:, None, None, :]  # (B, 1, 1, Lk)
    if causal:
        # top-left aligned, like is_causal=True
        tril = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
        allowed = allowed & tril
    empty = ~allowed.any(-1, keepdim=True)  # (B, 1, Lq or 1, 1)
    if bool(empty.any()):
        # Let empty rows attend to everything (finite values), then zero them below.
        allowed = allowed | empty
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return out.masked_fill(empty, 0.0) if bool(empty.any()) else out
