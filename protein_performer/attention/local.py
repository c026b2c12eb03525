"""Exact softmax attention inside a sliding window: ``|i − j| <= window`` (causal: ``0 <= i − j
<= window``), in O(L · window) time and memory.

The local half of the hybrid attention (exact local heads beside FAVOR heads, the recipe of
"Based", Arora et al. 2024): random features are poor at sharp, position-precise attention,
which a small exact window does cheaply.

Queries are cut into blocks of ``window`` rows; block ``b`` attends to the keys of blocks
``b − 1 … b + 1``, masked to the band, so each score tensor is ``(B, H, L/window, window,
3·window)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from .base import (
    AttentionKind,
    AttentionOptions,
    Rows,
    check_positions,
    gather_rows,
    masked_sdpa,
    select_heads,
    visible_keys,
    zero_padded,
)


def _band(window: int, causal: bool, device: torch.device) -> torch.Tensor:
    """``(window, 3·window)`` bool: query row ``r`` of a block may see key column ``c`` of the
    block's three-block key span (offset ``c − window − r``)."""
    rows = torch.arange(window, device=device)[:, None]
    cols = torch.arange(3 * window, device=device)[None, :]
    offset = cols - window - rows  # key position − query position
    allowed = offset.abs() <= window
    return allowed & (offset <= 0) if causal else allowed


def local_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(B, H, L, D)`` q/k/v -> ``(B, H, L, Dv)``: softmax over the keys within ``window`` of
    each query. ``key_padding_mask`` ``(B, L)`` True = padded key. A query with no visible key
    gets zeros (as :func:`~protein_performer.attention.exact.exact_attention`)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if key_padding_mask is not None:
        key_padding_mask = key_padding_mask.to(torch.bool)
        k, v = zero_padded(k, v, key_padding_mask)
    b, h, n, d = q.shape
    if n <= 2 * window + 1:  # the band is no smaller than the whole matrix
        band = torch.ones(n, n, dtype=torch.bool, device=q.device)
        band = band.triu(-window).tril(0 if causal else window)
        allowed = band if key_padding_mask is None else band & ~key_padding_mask[:, None, None, :]
        return masked_sdpa(q, k, v, allowed)
    blocks = -(-n // window)
    pad_to = blocks * window
    # keys/values padded by one block before and enough after; pads are masked out
    extra = (window, pad_to - n + window)
    kp, vp = F.pad(k, (0, 0, *extra)), F.pad(v, (0, 0, *extra))
    valid = torch.ones(b, n, dtype=torch.bool, device=q.device)
    if key_padding_mask is not None:
        valid = ~key_padding_mask
    valid = F.pad(valid, extra, value=False)  # (B, pad_to + 2·window)
    qb = F.pad(q, (0, 0, 0, pad_to - n)).view(b, h, blocks, window, d)
    kb = kp.unfold(2, 3 * window, window).transpose(-1, -2)  # (B, H, blocks, 3w, D)
    vb = vp.unfold(2, 3 * window, window).transpose(-1, -2)
    key_ok = valid.unfold(1, 3 * window, window)[:, None, :, None, :]  # (B, 1, blocks, 1, 3w)
    allowed = key_ok & _band(window, causal, q.device)
    out = masked_sdpa(qb, kb, vb, allowed)
    return out.reshape(b, h, pad_to, -1)[:, :, :n]


def local_attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    window: int,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    chunk_size: int = 256,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, rows)``: the attention rows ``(B, H, rows, L)`` of :func:`local_attention`
    (zero outside the window), ``chunk_size`` query rows at a time (for analysis)."""
    lq, lk = q.shape[2], k.shape[2]
    scale = q.shape[-1] ** -0.5
    cols = torch.arange(lk, device=q.device)[None, :]
    for start in range(0, lq, chunk_size):
        stop = min(start + chunk_size, lq)
        rows = torch.arange(start, stop, device=q.device)[:, None]
        offset = cols - rows
        outside = (offset.abs() > window) | ((offset > 0) if causal else False)
        scores = torch.einsum("bhid,bhjd->bhij", q[:, :, start:stop], k) * scale
        scores = scores.masked_fill(outside, float("-inf"))
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        yield start, torch.softmax(scores, dim=-1).nan_to_num(0.0)


class LocalAttention(AttentionKind):
    """The ``local`` kind: exact softmax attention within ``window`` positions (the local
    heads of a hybrid block). No state; :meth:`forward_at` costs O(P·L) for P queries."""

    slot = "local"

    def __init__(self, window: int, causal: bool = False) -> None:
        super().__init__()
        self.window = window
        self.causal = causal

    @classmethod
    def from_options(cls, name: str, options: AttentionOptions) -> LocalAttention:
        return cls(options.window, options.causal)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return local_attention(q, k, v, self.window, self.causal, key_padding_mask)

    def forward_at(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        check_positions(positions, q.shape[2], q.shape[0])
        k, v = zero_padded(k, v, key_padding_mask)  # as local_attention
        allowed = visible_keys(positions, k.shape[2], key_padding_mask, self.causal, self.window)
        return masked_sdpa(gather_rows(q, positions), k, v, allowed)

    def rows(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        *,
        chunk_size: int = 256,
        heads: Sequence[int] | None = None,
    ) -> Rows:
        rows = local_attention_rows(q, k, self.window, self.causal, key_padding_mask, chunk_size)
        yield from select_heads(rows, heads)

    def extra_repr(self) -> str:
        return f"window={self.window}, causal={self.causal}"


__all__ = ["LocalAttention", "local_attention", "local_attention_rows"]
