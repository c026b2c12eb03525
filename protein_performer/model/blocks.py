"""Pre-LayerNorm transformer blocks whose attention is exact softmax or FAVOR+.

The three attention kinds share one parameterization (``qkv`` and ``out`` projections); FAVOR+
only adds random-projection buffers, which are not learned. So weights trained with one kind
load into another.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from protein_performer.attention import FavorAttention, exact_attention
from protein_performer.attention.exact import length_scale
from protein_performer.attention.hedgehog import (
    HedgehogFeatureMaps,
    hedgehog_attention,
    hedgehog_attention_rows,
)
from protein_performer.attention.local import local_attention, local_attention_rows
from protein_performer.attention.taylor import taylor_attention, taylor_attention_rows
from protein_performer.model.rotary import apply_rotary, rotate_packed


def exact_attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    chunk_size: int = 256,
    length_base: int = 0,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, rows)``: softmax attention rows ``(B, H, rows, Lk)`` for ``(B, H, L, D)``
    queries/keys, ``chunk_size`` query rows at a time. A row with no visible key is all zeros.
    ``length_base``: Scalable-Softmax as in :func:`~protein_performer.attention.exact_attention`."""
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


class SelfAttention(nn.Module):
    """Multi-head self-attention on ``(B, L, dim)``; the kernel is exact, FAVOR+, Taylor or
    Hedgehog.

    ``attention="taylor"``: linear attention with the exact second-order Taylor features of
    ``exp`` (:mod:`protein_performer.attention.taylor`); ``"hedgehog"``: linear attention with
    learned feature maps, ``nb_features`` per head (:mod:`protein_performer.attention.hedgehog`).
    With ``local_heads`` > 0 the first ``local_heads`` heads are exact softmax attention within
    ``local_window`` positions and the others use ``attention`` (a hybrid block).
    ``length_base`` > 1: the exact global heads use Scalable-Softmax (scores times
    ``log(n) / log(length_base)``, n the keys a query sees); other heads are unaffected.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        *,
        attention: str,
        causal: bool,
        nb_features: int,
        orthogonal: bool,
        redraw_interval: int,
        feature_seed: int,
        layer_idx: int,
        local_heads: int = 0,
        local_window: int = 64,
        qkv_conv: int = 0,
        length_base: int = 0,
        save_features: bool = False,
    ) -> None:
        super().__init__()
        self.heads = heads
        self.length_base = length_base if attention == "transformer" else 0
        self.dim_head = dim // heads
        self.causal = causal
        self.attention = attention
        self.local_heads = local_heads
        self.local_window = local_window
        # FAVOR reads the fused projection in place on the CPU (False: the (B·H, L, D)
        # route of views and copies, kept for comparisons: benchmarks/model_scaling.py)
        self.packed = True
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        # depthwise over positions, one filter per q/k/v channel; padded by hand in _packed
        self.conv = nn.Conv1d(3 * dim, 3 * dim, qkv_conv, groups=3 * dim) if qkv_conv else None
        self.reset_conv()
        # one map per head, local heads included, so that plain and hybrid models share shapes;
        # none when every head is local (parameters without gradients stop DDP)
        self.maps = (
            HedgehogFeatureMaps(heads, self.dim_head, nb_features // 2)
            if attention == "hedgehog" and local_heads < heads
            else None
        )
        self.favor: FavorAttention | None = None
        if attention.startswith("performer_") and local_heads < heads:
            kernel = attention.removeprefix("performer_")
            self.favor = FavorAttention(
                self.dim_head,
                nb_features=nb_features,
                kernel=kernel,
                causal=causal,
                orthogonal=orthogonal,
                redraw_interval=redraw_interval,
                seed=feature_seed,
                layer_idx=layer_idx,
                save_features=save_features,
            )

    def reset_conv(self) -> None:
        """The identity filter: a fresh ``qkv_conv`` block computes what one without it does."""
        if self.conv is None:
            return
        with torch.no_grad():
            self.conv.weight.zero_()
            self.conv.weight[:, 0, self._conv_pad()[0]] = 1.0
            self.conv.bias.zero_()

    def _conv_pad(self) -> tuple[int, int]:
        """(left, right) padding: centred, or only earlier positions for a causal model."""
        width = self.conv.kernel_size[0]
        return (width - 1, 0) if self.causal else ((width - 1) // 2, width // 2)

    def _split(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None):
        """Queries, keys, values ``(B, H, L, D)``: views of :meth:`_packed`."""
        return self._packed(x, padding_mask).permute(2, 0, 3, 1, 4)

    def _packed(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The q/k/v projection of ``x`` ``(B, L, dim)`` as ``(B, L, 3, H, D)``."""
        b, n, _ = x.shape
        h = self.qkv(x)
        if self.conv is not None:
            if padding_mask is not None:  # padding must not leak into the last residues
                h = h.masked_fill(padding_mask[..., None], 0.0)
            h = self.conv(F.pad(h.transpose(1, 2), self._conv_pad()))
            # channels last again: SDPA's fused kernels need stride 1 in the head dimension
            h = h.transpose(1, 2).contiguous()
        return h.view(b, n, 3, self.heads, self.dim_head)

    @torch.no_grad()
    def attention_rows(
        self,
        x: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        *,
        heads: Sequence[int] | None = None,
        chunk_size: int = 256,
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield ``(start, rows)``: attention rows ``(B, H', rows, L)`` of the heads in
        ``heads`` (all: None) for the normalised input ``x`` ``(B, L, dim)``, a block of
        ``chunk_size`` query rows at a time (exact softmax, or the matrix FAVOR+ implies)."""
        yield from self._rows(x, padding_mask, rotary, heads, chunk_size)

    def head_attention(
        self,
        x: torch.Tensor,
        head: int,
        padding_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``(B, L, L)``: the attention matrix of one head for the normalised input ``x``, with
        gradients (attention supervision; O(L²) memory for that head)."""
        rows = [r for _, r in self._rows(x, padding_mask, rotary, [head], x.shape[1])]
        return torch.cat(rows, dim=2)[:, 0]

    def _rows(self, x, padding_mask, rotary, heads, chunk_size):
        q, k, _ = self._split(x, padding_mask)
        if rotary is not None:
            q, k = apply_rotary(q, k, *rotary)
        lh = self.local_heads
        if lh:
            local = local_attention_rows(
                q[:, :lh], k[:, :lh], self.local_window, self.causal, padding_mask, chunk_size
            )
            rest = self._global_rows(q[:, lh:], k[:, lh:], padding_mask, chunk_size, None)
            index = None
            if heads is not None:
                index = torch.as_tensor(list(heads), dtype=torch.long, device=q.device)
            for (start, a), (_, g) in zip(local, rest, strict=True):
                rows = torch.cat([a, g], dim=1)
                yield start, rows if index is None else rows.index_select(1, index)
            return
        yield from self._global_rows(q, k, padding_mask, chunk_size, heads)

    def _global_rows(self, q, k, padding_mask, chunk_size, heads):
        if self.favor is not None:
            yield from self.favor.attention_rows(
                q, k, padding_mask, chunk_size=chunk_size, heads=heads
            )
            return
        index = None
        if heads is not None:
            index = torch.as_tensor(list(heads), dtype=torch.long, device=q.device)
        if self.maps is not None:  # every global head (each has its own map), then the chosen
            first = self.local_heads
            rows = hedgehog_attention_rows(
                q, k, self.maps, first, self.causal, padding_mask, chunk_size
            )
            for start, a in rows:
                yield start, a if index is None else a.index_select(1, index)
            return
        if index is not None:
            q, k = q.index_select(1, index), k.index_select(1, index)
        if self.attention == "taylor":
            yield from taylor_attention_rows(q, k, self.causal, padding_mask, chunk_size)
            return
        yield from exact_attention_rows(
            q, k, self.causal, padding_mask, chunk_size, length_base=self.length_base
        )

    def forward(
        self,
        x: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x`` ``(B, L, dim)``, ``padding_mask`` ``(B, L)`` True at padding. Returns the output
        ``(B, L, dim)`` and, if ``need_weights``, the attention matrix ``(B, H, L, L)``."""
        b, n, _ = x.shape
        favor = self.favor
        # on the CPU only: elsewhere copies are cheap, and a loop over batch elements is not
        packed = (
            self.packed and x.device.type == "cpu" and not self.local_heads and not need_weights
        )
        if favor is not None and packed:
            # q, k, v read in place from the projection, the output written as self.out reads it
            qkv = self._packed(x, padding_mask)
            if rotary is not None:
                qkv = rotate_packed(qkv, *rotary)
            o = favor.forward_packed(qkv, padding_mask)
            return self.out(o.reshape(b, n, -1)), None
        q, k, v = self._split(x, padding_mask)
        if rotary is not None:
            q, k = apply_rotary(q, k, *rotary)
        lh = self.local_heads
        parts = []
        if lh:
            parts.append(
                local_attention(
                    q[:, :lh], k[:, :lh], v[:, :lh], self.local_window, self.causal, padding_mask
                )
            )
        if lh < self.heads:
            qg, kg, vg = (q, k, v) if not lh else (q[:, lh:], k[:, lh:], v[:, lh:])
            if self.attention == "taylor":
                parts.append(
                    taylor_attention(qg, kg, vg, causal=self.causal, key_padding_mask=padding_mask)
                )
            elif self.maps is not None:
                parts.append(
                    hedgehog_attention(
                        qg, kg, vg, self.maps, lh, causal=self.causal, key_padding_mask=padding_mask
                    )
                )
            elif self.favor is None:
                parts.append(
                    exact_attention(
                        qg,
                        kg,
                        vg,
                        causal=self.causal,
                        key_padding_mask=padding_mask,
                        length_base=self.length_base,
                    )
                )
            else:
                parts.append(self.favor(qg, kg, vg, key_padding_mask=padding_mask))
        o = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        weights = None
        if need_weights:
            with torch.no_grad():
                if lh or self.attention in ("taylor", "hedgehog"):
                    weights = torch.cat(
                        [r for _, r in self.attention_rows(x, padding_mask, rotary, chunk_size=n)],
                        dim=2,
                    )
                elif self.favor is None:
                    weights = exact_attention_weights(
                        q, k, self.causal, padding_mask, length_base=self.length_base
                    )
                else:
                    weights = self.favor.attention_matrix(q, k, key_padding_mask=padding_mask)
        o = o.transpose(1, 2).reshape(b, n, -1)
        return self.out(o), weights


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(F.gelu(self.fc1(x))))


class Block(nn.Module):
    """Pre-LN block: ``x + drop(attn(LN(x)))`` then ``x + drop(ffn(LN(x)))``."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, dropout: float, **attn_kwargs) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, **attn_kwargs)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, ffn_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h, weights = self.attn(self.norm1(x), padding_mask, rotary, need_weights)
        x = x + self.dropout(h)
        x = x + self.dropout(self.ffn(self.norm2(x)))
        return x, weights
