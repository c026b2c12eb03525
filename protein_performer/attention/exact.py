"""Exact softmax attention (the Transformer baseline): :func:`exact_attention`, its rows, and
the ``transformer`` kind :class:`ExactAttention`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .base import (
    AttentionKind,
    AttentionOptions,
    Rows,
    check_positions,
    gather_rows,
    masked_sdpa,
    query_key_heads,
    visible_keys,
    zero_padded,
)


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
    # padded rows may hold anything: zeroed, as FAVOR zeroes their features
    k, v = zero_padded(k, v, key_padding_mask)
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


def exact_attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    chunk_size: int = 256,
    length_base: int = 0,
) -> Rows:
    """Yield ``(start, rows)``: softmax attention rows ``(B, H, rows, Lk)`` for ``(B, H, L, D)``
    queries/keys, ``chunk_size`` query rows at a time. A row with no visible key is all zeros.
    ``length_base``: Scalable-Softmax as in :func:`exact_attention`."""
    lq, lk = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    if length_base:
        factor = length_scale(
            lq,
            lk,
            length_base,
            causal=causal,
            key_padding_mask=key_padding_mask,
            batch=q.shape[0],
            device=q.device,
            dtype=q.dtype,
        )
        q = q * factor
    for start in range(0, lq, chunk_size):
        stop = min(start + chunk_size, lq)
        scores = torch.einsum("bhid,bhjd->bhij", q[:, :, start:stop], k) * scale
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        if causal:
            rows = torch.arange(start, stop, device=q.device)[:, None]
            cols = torch.arange(lk, device=q.device)[None, :]
            scores = scores.masked_fill(cols > rows, float("-inf"))
        yield start, torch.softmax(scores, dim=-1).nan_to_num(0.0)


def exact_attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    length_base: int = 0,
) -> torch.Tensor:
    """Softmax attention matrix ``(B, H, L, L)`` for ``(B, H, L, D)`` queries/keys."""
    rows = exact_attention_rows(
        q, k, causal, key_padding_mask, chunk_size=max(1, q.shape[2]), length_base=length_base
    )
    return next(rows)[1]


class ExactAttention(AttentionKind):
    """The ``transformer`` kind: exact softmax attention, Scalable-Softmax when
    ``length_base`` > 1 (:func:`length_scale`). No state. Its :meth:`forward_at` costs
    O(P·Lk) for P chosen queries instead of the forward's O(Lq·Lk)."""

    slot = "exact"

    def __init__(self, causal: bool = False, length_base: int = 0) -> None:
        super().__init__()
        self.causal = causal
        self.length_base = length_base

    @classmethod
    def from_options(cls, name: str, options: AttentionOptions) -> ExactAttention:
        return cls(options.causal, options.length_base)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return exact_attention(q, k, v, self.causal, key_padding_mask, self.length_base)

    def forward_at(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        _check_inputs(q, k, v, key_padding_mask)
        check_positions(positions, q.shape[2], q.shape[0])
        chosen = gather_rows(q, positions)
        if self.length_base:
            factor = length_scale(
                q.shape[-2],
                k.shape[-2],
                self.length_base,
                causal=self.causal,
                key_padding_mask=key_padding_mask,
                batch=q.shape[0],
                device=q.device,
                dtype=q.dtype,
            )
            chosen = chosen * (factor if factor.shape[2] == 1 else gather_rows(factor, positions))
        k, v = zero_padded(k, v, key_padding_mask)  # as exact_attention
        allowed = visible_keys(positions, k.shape[2], key_padding_mask, self.causal)
        return masked_sdpa(chosen, k, v, allowed)

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
        yield from exact_attention_rows(
            q, k, self.causal, key_padding_mask, chunk_size, length_base=self.length_base
        )

    def extra_repr(self) -> str:
        return f"causal={self.causal}, length_base={self.length_base}"


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
