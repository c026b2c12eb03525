"""Pre-LayerNorm transformer blocks; the attention is any kind of
:mod:`protein_performer.attention`, looked up by name.

Every kind shares one parameterization (``qkv`` and ``out`` projections); FAVOR+ only adds
random-projection buffers, which are not learned, and Hedgehog its feature maps. So weights
trained with one kind load into another.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from protein_performer.attention import AttentionKind, AttentionOptions
from protein_performer.attention.base import gather_rows, head_index
from protein_performer.attention.exact import (  # noqa: F401  (their old home, for one release)
    exact_attention_rows,
    exact_attention_weights,
)
from protein_performer.attention.registry import attention_slots, build_attention
from protein_performer.model.rotary import apply_rotary, rotate_packed


class SelfAttention(nn.Module):
    """Multi-head self-attention on ``(B, L, dim)`` with the attention kind named
    ``attention`` (:data:`~protein_performer.attention.ATTENTION_CLASSES`: FAVOR+, exact,
    Taylor, Hedgehog).

    With ``local_heads`` > 0 the first ``local_heads`` heads are exact softmax attention within
    ``local_window`` positions (the ``local`` kind) and the others use ``attention`` (a hybrid
    block). ``length_base`` > 1: the exact global heads use Scalable-Softmax (scores times
    ``log(n) / log(length_base)``, n the keys a query sees); other kinds ignore it.

    The kind's module sits in the attribute its class names (``favor``, ``maps``, ...: its
    checkpoint keys); the other kinds' attributes read None.
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
        self.dim_head = dim // heads
        self.causal = causal
        self.attention = attention
        self.local_heads = local_heads
        # FAVOR reads the fused projection in place on the CPU (False: the (B·H, L, D)
        # route of views and copies, kept for comparisons: benchmarks/model_scaling.py)
        self.packed = True
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        # depthwise over positions, one filter per q/k/v channel; padded by hand in _packed
        self.conv = nn.Conv1d(3 * dim, 3 * dim, qkv_conv, groups=3 * dim) if qkv_conv else None
        self.reset_conv()
        options = AttentionOptions(
            dim_head=self.dim_head,
            heads=heads,
            first_head=local_heads,
            causal=causal,
            nb_features=nb_features,
            orthogonal=orthogonal,
            redraw_interval=redraw_interval,
            seed=feature_seed,
            layer_idx=layer_idx,
            save_features=save_features,
            length_base=length_base,
            window=local_window,
        )
        for slot in attention_slots():
            self.register_module(slot, None)
        # (module, its heads): the local heads first, then the kind's; none when every head is
        # local (parameters without gradients stop DDP)
        self._slots: list[tuple[str, slice]] = []
        for name, heads_of in (
            ("local", slice(0, local_heads)),
            (attention, slice(local_heads, heads)),
        ):
            if heads_of.stop > heads_of.start:
                module = build_attention(name, options)
                self.register_module(module.slot, module)
                self._slots.append((module.slot, heads_of))

    def kinds(self) -> list[tuple[AttentionKind, slice]]:
        """The attention modules and the heads each computes, first head first."""
        return [(getattr(self, slot), heads) for slot, heads in self._slots]

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

    def _qkv(self, x, padding_mask, rotary):
        q, k, v = self._split(x, padding_mask)
        if rotary is not None:
            q, k = apply_rotary(q, k, *rotary)
        return q, k, v

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
        q, k, _ = self._qkv(x, padding_mask, rotary)
        kinds = self.kinds()
        if len(kinds) == 1:
            module, of = kinds[0]
            yield from module.rows(
                q[:, of], k[:, of], padding_mask, chunk_size=chunk_size, heads=heads
            )
            return
        streams = [m.rows(q[:, of], k[:, of], padding_mask, chunk_size=chunk_size)
                   for m, of in kinds]  # fmt: skip
        index = head_index(heads, q.device)
        for blocks in zip(*streams, strict=True):
            rows = torch.cat([r for _, r in blocks], dim=1)
            yield blocks[0][0], rows if index is None else rows.index_select(1, index)

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
        kinds = self.kinds()
        # on the CPU only: elsewhere copies are cheap, and a loop over batch elements is not
        if (
            len(kinds) == 1
            and kinds[0][0].reads_packed
            and self.packed
            and x.device.type == "cpu"
            and not need_weights
        ):
            # q, k, v read in place from the projection, the output written as self.out reads it
            qkv = self._packed(x, padding_mask)
            if rotary is not None:
                qkv = rotate_packed(qkv, *rotary)
            o = kinds[0][0].forward_packed(qkv, padding_mask)
            return self.out(o.reshape(b, n, -1)), None
        q, k, v = self._qkv(x, padding_mask, rotary)
        parts = [m(q[:, of], k[:, of], v[:, of], key_padding_mask=padding_mask)
                 for m, of in kinds]  # fmt: skip
        o = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        weights = None
        if need_weights:
            with torch.no_grad():
                weights = torch.cat(
                    [m.matrix(q[:, of], k[:, of], padding_mask) for m, of in kinds], dim=1
                )
        o = o.transpose(1, 2).reshape(b, n, -1)
        return self.out(o), weights

    def forward_at(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """:meth:`forward`'s output at ``positions`` ``(B, P)`` only: ``(B, P, dim)``. Queries,
        keys and values are projected at every position (the convolution reads neighbours,
        keys and values serve every query); the attention computes the chosen rows
        (:meth:`~protein_performer.attention.AttentionKind.forward_at`)."""
        b, p = positions.shape
        q, k, v = self._qkv(x, padding_mask, rotary)
        parts = [m.forward_at(q[:, of], k[:, of], v[:, of], positions, padding_mask)
                 for m, of in self.kinds()]  # fmt: skip
        o = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return self.out(o.transpose(1, 2).reshape(b, p, -1))


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

    def forward_at(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """:meth:`forward`'s output at ``positions`` ``(B, P)`` only, ``(B, P, dim)``: attention
        rows, residual and feed-forward for the chosen positions (keys from all of ``x``)."""
        h = self.attn.forward_at(self.norm1(x), positions, padding_mask, rotary)
        x = gather_rows(x[:, None], positions)[:, 0] + self.dropout(h)
        return x + self.dropout(self.ffn(self.norm2(x)))
