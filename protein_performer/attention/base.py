"""The one interface every attention kind has, and what building one takes.

A kind is an :class:`AttentionKind` (a module: FAVOR's projection and Hedgehog's maps are its
state) with the same calls on ``(B, H, L, D)`` queries, keys and values:

* :meth:`~AttentionKind.forward` — the output ``(B, H, Lq, Dv)``;
* :meth:`~AttentionKind.forward_at` — the output at chosen query positions only, ``(B, H, P,
  Dv)``, equal to ``forward(...)`` gathered there, at the cost of those rows where the kind
  allows it (a read-out needs one row of the last layer, not all of them);
* :meth:`~AttentionKind.rows` — the attention weights, a block of query rows at a time;
* :meth:`~AttentionKind.matrix` — the whole ``(B, H, Lq, Lk)`` matrix.

:mod:`.registry` maps each kind's name to its class; a block builds its attention from there
and never asks which kind it holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

Rows = Iterator[tuple[int, torch.Tensor]]


@dataclass(frozen=True)
class AttentionOptions:
    """Everything a block may tell the attention it builds; each kind reads what it uses.

    ``heads``: the block's heads (Hedgehog keeps a map per block head); ``first_head``: the
    block head this module's first head is (the heads before it are local); ``window``: the
    local kind's half-width; ``length_base``: Scalable-Softmax of the exact kind (0 = off);
    the rest are FAVOR's (:class:`~protein_performer.attention.favor.FavorAttention`)."""

    dim_head: int
    heads: int = 1
    first_head: int = 0
    causal: bool = False
    nb_features: int = 256
    orthogonal: bool = True
    redraw_interval: int = 0
    seed: int = 0
    layer_idx: int = 0
    save_features: bool = False
    length_base: int = 0
    window: int = 64


class AttentionKind(nn.Module):
    """Base class of the attention kinds (see the module docstring for the calls).

    ``slot``: the attribute a block keeps the module under, i.e. the prefix of its checkpoint
    keys (``favor``, ``maps``; kinds without state have their own, which stores nothing).
    ``reads_packed``: :meth:`forward_packed` reads a fused ``(B, L, 3, H, D)`` projection in
    place on a CPU (faster there than :meth:`forward` of its views)."""

    slot: ClassVar[str]
    reads_packed: ClassVar[bool] = False

    @classmethod
    def from_options(cls, name: str, options: AttentionOptions) -> AttentionKind:
        """The kind registered as ``name`` built for a block (see :class:`AttentionOptions`)."""
        raise NotImplementedError

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``q`` ``(B, H, Lq, D)``, ``k`` ``(B, H, Lk, D)``, ``v`` ``(B, H, Lk, Dv)`` ->
        ``(B, H, Lq, Dv)``; ``key_padding_mask`` ``(B, Lk)`` bool, True = padded key."""
        raise NotImplementedError

    def forward_at(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The output ``(B, H, P, Dv)`` of the queries at ``positions`` ``(B, P)`` (long, in
        ``0..Lq-1``) of ``q`` ``(B, H, Lq, D)``: ``forward(q, k, v, mask)`` gathered there. All
        queries are given, as a kind may take statistics over them. This default computes
        every row; kinds override it to compute the chosen ones."""
        return gather_rows(self.forward(q, k, v, key_padding_mask), positions)

    def rows(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        *,
        chunk_size: int = 256,
        heads: Sequence[int] | None = None,
    ) -> Rows:
        """Yield ``(start, rows)``: the attention weights ``(B, H', rows, Lk)`` of query rows
        ``start:start + chunk_size`` for the heads in ``heads`` (all: None), the matrix the
        kind applies to the values. A row with no visible key is all zeros."""
        raise NotImplementedError

    def matrix(
        self, q: torch.Tensor, k: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The attention matrix ``(B, H, Lq, Lk)`` (O(Lq·Lk) memory)."""
        parts = [r for _, r in self.rows(q, k, key_padding_mask, chunk_size=max(1, q.shape[2]))]
        if not parts:
            return q.new_zeros(q.shape[0], q.shape[1], 0, k.shape[2])
        return torch.cat(parts, dim=2)

    def forward_packed(
        self, qkv: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``qkv`` ``(B, L, 3, H, D)`` (a fused projection) -> ``(B, L, H, D)``: :meth:`forward`
        of its queries, keys and values in the layout an output projection reads."""
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        return self.forward(q, k, v, key_padding_mask).transpose(1, 2)

    def reset_parameters(self) -> None:
        """Start values of the kind's own parameters (none by default)."""


def check_positions(positions: torch.Tensor, length: int, batch: int) -> None:
    """``positions`` must be ``(B, P)`` integer indices into ``0..length-1``."""
    if positions.dim() != 2 or positions.shape[0] != batch:
        raise ValueError(f"positions must be (B, P) with B = {batch}, got {tuple(positions.shape)}")
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be integer indices, got {positions.dtype}")
    if positions.numel() and not (int(positions.min()) >= 0 and int(positions.max()) < length):
        raise ValueError(f"positions must lie in 0..{length - 1}")


def gather_rows(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rows ``positions`` ``(B, P)`` of ``x`` ``(B, H, L, X)`` (or ``(B, 1, L, X)``) ->
    ``(B, H, P, X)``."""
    b, h, _, d = x.shape
    index = positions.to(device=x.device, dtype=torch.long)[:, None, :, None]
    return x.gather(2, index.expand(b, h, -1, d))


def select_heads(rows: Rows, heads: Sequence[int] | None) -> Rows:
    """``rows`` with only the heads in ``heads`` (all: None) kept."""
    if heads is None:
        yield from rows
        return
    index = None
    for start, block in rows:
        if index is None:
            index = torch.as_tensor(list(heads), dtype=torch.long, device=block.device)
        yield start, block.index_select(1, index)


def head_index(heads: Sequence[int] | None, device: torch.device) -> torch.Tensor | None:
    """``heads`` as a long tensor on ``device`` (None stays None)."""
    return None if heads is None else torch.as_tensor(list(heads), dtype=torch.long, device=device)


def query_key_heads(
    q: torch.Tensor, k: torch.Tensor, heads: Sequence[int] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``q`` and ``k`` ``(B, H, L, D)`` cut to the heads in ``heads`` (all: None)."""
    index = head_index(heads, q.device)
    if index is None:
        return q, k
    return q.index_select(1, index), k.index_select(1, index)


def zero_padded(
    k: torch.Tensor, v: torch.Tensor, key_padding_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` and ``v`` ``(B, H, L, D)`` with the padded positions (``key_padding_mask``
    ``(B, L)``, True at padding) zeroed: a masked score still multiplies its value, and a NaN
    there would reach every score (NaN - inf is NaN) and every output (0 · NaN)."""
    if key_padding_mask is None:
        return k, v
    pad = key_padding_mask.bool()[:, None, :, None]
    return k.masked_fill(pad, 0.0), v.masked_fill(pad, 0.0)


def visible_keys(
    positions: torch.Tensor,
    length: int,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    window: int | None = None,
) -> torch.Tensor | None:
    """``(B, 1, P, Lk)`` bool: the keys each query at ``positions`` ``(B, P)`` sees (not
    padded; causal: at or before it; ``window``: within that distance), or None when every
    query sees every key."""
    if key_padding_mask is None and not causal and window is None:
        return None
    device = positions.device
    cols = torch.arange(length, device=device)[None, None, :]  # (1, 1, Lk)
    at = positions.to(torch.long)[..., None]  # (B, P, 1)
    allowed = torch.ones(positions.shape[0], positions.shape[1], length, dtype=torch.bool,
                         device=device)  # fmt: skip
    if key_padding_mask is not None:
        allowed = allowed & ~key_padding_mask.to(torch.bool)[:, None, :]
    if causal:
        allowed = allowed & (cols <= at)
    if window is not None:
        allowed = allowed & ((cols - at).abs() <= window)
    return allowed[:, None]


def masked_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """``softmax(q kᵀ / sqrt(D)) v`` over the ``allowed`` keys ``(B, 1, Lq, Lk)`` (None: all);
    a query with no allowed key gets zeros (finite, as the exact kinds' forward)."""
    if allowed is None:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
    empty = ~allowed.any(-1, keepdim=True)
    if bool(empty.any()):
        allowed = allowed | empty  # finite softmax, zeroed below
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return out.masked_fill(empty, 0.0)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


__all__ = [
    "AttentionKind",
    "AttentionOptions",
    "check_positions",
    "gather_rows",
    "head_index",
    "masked_sdpa",
    "select_heads",
    "visible_keys",
]
