"""Exact softmax attention with the same interface as FavorAttention (Transformer baseline)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def length_scale(
    lq: int,
    lk: int,
    base: int,
    *,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    batch: int = 1,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Scalable-Softmax's factor ``log(n) / log(base)`` for the scores of each query, ``n`` the
    number of keys it sees (non-padded; causal: up to itself): ``(B, 1, Lq, 1)``, or
    ``(B, 1, 1, 1)`` when every query sees the same keys. 1 where ``n == base``.

    Why: the weight a fixed score margin buys a match among n unrelated keys falls as 1/n, so
    a lookup learned in short windows fades among thousands of keys; with the scores scaled by
    ``log(n) / log(base)`` a margin ``d`` gives the match ``n^a / (n^a + n)``,
    ``a = d / log(base)``, which holds or grows with n once ``d >= log(base)``
    (Scalable-Softmax, Nakanishi 2025)."""
    # counted and logged in float64 (small): a float32 factor put 1e-7 errors into float64
    # runs (MPS has no float64: float32 there)
    dev = key_padding_mask.device if key_padding_mask is not None else torch.device(device or "cpu")
    wide = torch.float32 if dev.type == "mps" else torch.float64
    if key_padding_mask is None:
        visible = torch.ones(batch, lk, device=device, dtype=wide)
    else:
        visible = (~key_padding_mask.bool()).to(wide)  # (B, Lk)
    # causal: query i sees keys 0..i (top-left aligned, like is_causal=True): (B, Lq, 1)
    seen = torch.cumsum(visible, -1)[:, :lq, None] if causal else visible.sum(-1)[:, None, None]
    factor = torch.log(seen.clamp(min=1.0)) / math.log(base)
    return factor[:, None].to(dtype)


def exact_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    length_base: int = 0,
) -> torch.Tensor:
    """``softmax(q kᵀ / sqrt(D)) v`` via ``scaled_dot_product_attention``.

    ``q``: ``(B, H, Lq, D)``, ``k``: ``(B, H, Lk, D)``, ``v``: ``(B, H, Lk, Dv)`` ->
    ``(B, H, Lq, Dv)``. ``key_padding_mask``: ``(B, Lk)`` bool, True = padded key (ignored).
    A query row with no visible key (all its keys padded) returns zeros, with zero
    gradient, instead of NaN. ``length_base`` > 1: Scalable-Softmax, the scores of each query
    times ``log(n) / log(length_base)`` (:func:`length_scale`).
    """
    _check_inputs(q, k, v, key_padding_mask)
    if length_base:
        q = q * length_scale(
            q.shape[-2],
            k.shape[-2],
            length_base,
            causal=causal,
            key_padding_mask=key_padding_mask,
            batch=q.shape[0],
            device=q.device,
            dtype=q.dtype,
        )
    if key_padding_mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    lq, lk = q.shape[-2], k.shape[-2]
    # padded rows may hold anything: a NaN there would reach every score (NaN - inf is NaN)
    # and every output (0 · NaN), so they are zeroed, as FAVOR zeroes their features
    pad = key_padding_mask.bool()[:, None, :, None]
    k, v = k.masked_fill(pad, 0.0), v.masked_fill(pad, 0.0)
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


def _check_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> None:
    """The shapes and mask :func:`exact_attention` takes, as :class:`FavorAttention` checks
    them (the two are swapped for one another)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k and v must be (B, H, L, D), got {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    if q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share (B, H) and the head dim: {tuple(q.shape)} vs {tuple(k.shape)}"
        )
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must be (B, H, Lk, Dv) matching k, got {tuple(v.shape)}")
    check_key_padding_mask(mask, k)


def check_key_padding_mask(mask: torch.Tensor | None, k: torch.Tensor) -> None:
    """``mask`` is None or ``(B, Lk)`` bool (True = padded key) for keys ``k`` ``(B, H, Lk,
    D)``: the one mask contract of every attention kind."""
    if mask is None:
        return
    if tuple(mask.shape) != (k.shape[0], k.shape[2]):
        raise ValueError(
            f"key_padding_mask must be (B, Lk) = {(k.shape[0], k.shape[2])}, "
            f"got {tuple(mask.shape)}"
        )
    if mask.dtype != torch.bool:
        # a float "keep" mask (1 = attend) would silently mean the opposite
        raise TypeError(f"key_padding_mask must be bool (True = padded key), got {mask.dtype}")
    if mask.device != k.device:
        raise ValueError(f"key_padding_mask is on {mask.device}, the keys on {k.device}")
