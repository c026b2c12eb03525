"""Helpers every linear-attention kernel shares: row blocks, the ``[v, 1]`` trick, the output
split and its adjoint, per-batch-element views of packed tensors, autocast off in a backward.

Public so that the kernels (bidirectional, causal, feature attention, the fused CPU kernel)
import them from one place rather than from one another.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ..feature_maps import FeatureParams, Scratch, scratch_block


def blocks(length: int, size: int) -> list[slice]:
    """Slices of ``size`` rows covering ``0..length`` (the last one shorter)."""
    return [slice(s, min(s + size, length)) for s in range(0, length, size)]


def values_with_ones(
    v: torch.Tensor, mask: torch.Tensor | None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``[v, 1]`` ``(N, c, Dv+1)`` with padded rows zeroed (they leave both sums), written
    into ``out`` when given."""
    va = v.new_empty(*v.shape[:-1], v.shape[-1] + 1) if out is None else out
    va[..., :-1] = v
    va[..., -1] = 1.0
    return va if mask is None else va.masked_fill_(mask[..., None], 0.0)


def den_floor(dtype: torch.dtype) -> float:
    """Normalisers below this count as 0 (no visible key). Subnormal ones (all features of
    the row underflowed) carry no precision, and 1/den would overflow in the backward."""
    return torch.finfo(dtype).tiny * 2.0**24


def split_output(na: torch.Tensor, out: torch.Tensor, den: torch.Tensor) -> None:
    """Write ``[numerator, normaliser]`` ``(N, c, Dv+1)`` into ``out`` ``(N, c, Dv)`` (the
    ratio) and ``den`` ``(N, c)``. A row whose normaliser is (nearly) 0 gets 0."""
    den.copy_(na[..., -1])
    floor = den_floor(na.dtype)
    torch.div(na[..., :-1], den.clamp_min(floor)[..., None], out=out)
    out.masked_fill_((den < floor)[..., None], 0.0)


def output_adjoint(
    g: torch.Tensor, out: torch.Tensor, den: torch.Tensor, scratch: Scratch | None = None
) -> torch.Tensor:
    """dLoss/d[numerator, normaliser] ``(N, c, Dv+1)`` from dLoss/dout, output, normaliser
    (in ``scratch`` blocks when given).

    Rows without visible keys (normaliser below :func:`den_floor`) have a constant output,
    hence a zero adjoint.
    """
    ok = den >= den_floor(den.dtype)
    inv = torch.where(ok, den.reciprocal(), torch.zeros_like(den))[..., None]
    n, c, dv = g.shape
    gp = scratch_block(scratch, "adjoint", g, n, c, dv + 1)
    gp = g.new_empty(n, c, dv + 1) if gp is None else gp
    torch.mul(g, inv, out=gp[..., :-1])
    product = torch.mul(g, out, out=scratch_block(scratch, "adjoint_product", g, n, c, dv))
    torch.sum(product, -1, keepdim=True, out=gp[..., -1:])
    gp[..., -1:].neg_().mul_(inv)
    return gp


def without_autocast(backward: Callable[..., tuple]) -> Callable[..., tuple]:
    """Run a custom backward with autocast off. The forward runs in float32 with autocast off
    (:class:`~protein_performer.attention.favor.FavorAttention`); a backward called inside an
    autocast region (``loss.backward()`` under ``torch.autocast``) would otherwise rebuild the
    features in bf16 next to float32 sums."""

    @functools.wraps(backward)
    def wrapped(ctx: Any, g: torch.Tensor) -> tuple:
        with torch.autocast(device_type=g.device.type, enabled=False):
            return backward(ctx, g)

    return wrapped


def row_block(t: torch.Tensor | None, sl: slice) -> torch.Tensor | None:
    """Rows ``sl`` of an ``(N, L, ...)`` tensor (None stays None)."""
    return None if t is None else t[:, sl]


def head_view(t: torch.Tensor | None, i: int) -> torch.Tensor | None:
    """Batch element ``i``'s rows ``(H, L, D)`` of a ``(B, L, H, D)`` tensor, a view."""
    return None if t is None else t[i].transpose(0, 1)


def item(t: torch.Tensor | None, i: int) -> torch.Tensor | None:
    """``t[i]`` (None stays None)."""
    return None if t is None else t[i]


def batch_params(p: FeatureParams, heads: int, i: int) -> FeatureParams:
    """The feature parameters of batch element ``i`` (rows ``i·H .. i·H + H`` of ``N``)."""
    rows = slice(i * heads, (i + 1) * heads)
    return FeatureParams(spec=p.spec, wq=p.wq[rows], wk=p.wk[rows], k_sq_coef=p.k_sq_coef)
