"""Bidirectional linear attention ``φ(Q) (φ(K)ᵀ [V, 1])``, block by block.

The custom autograd function takes the raw ``q``, ``k``, ``v``; the forward keeps the
``(m, Dv+1)`` key summary (numerator and normaliser in one matrix). With ``save=True`` it also
saves the query and key features for the backward (``2·m`` floats per position and head, as
saved tensors: activation checkpointing and saved-tensor hooks see them); with ``save=False``
it saves no ``(L, m)`` feature matrix and the backward rebuilds the features block by block
(one more feature computation of q and k; benchmarks/README.md has what each costs). Key
features are saved against the final softmax stabiliser, as the summary is, so both backwards
are one; saved features are without their constant offset, which the kernel adds as a
rank-one term (see :class:`BidirectionalFavorFunction`). Padded keys leave numerator *and*
normaliser (zero features, zero value rows).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .feature_maps import (
    FeatureParams,
    Scratch,
    Vjp,
    key_features,
    key_logits,
    key_vjp,
    query_features,
    query_vjp,
    scratch_block,
)


class RunningMax:
    """Online max stabiliser for softmax key features, shape ``(N, 1, 1)``.

    ``ref`` is the value subtracted from the logits (the running max, or 0 while no key was
    finite); :meth:`update` returns the factor that brings sums accumulated against the old
    ``ref`` to the new one (0 while nothing finite was seen, so never ``inf · 0``).
    """

    def __init__(self, like: torch.Tensor) -> None:
        n = like.shape[0]
        self.raw = torch.full((n, 1, 1), float("-inf"), dtype=like.dtype, device=like.device)
        self.ref = torch.zeros((n, 1, 1), dtype=like.dtype, device=like.device)

    def update(self, logits: torch.Tensor) -> torch.Tensor:
        new_raw = torch.maximum(self.raw, logits.amax(dim=(1, 2), keepdim=True))
        new_ref = torch.where(torch.isfinite(new_raw), new_raw, torch.zeros_like(new_raw))
        factor = torch.where(
            torch.isfinite(self.raw), torch.exp(self.ref - new_ref), torch.zeros_like(new_ref)
        )
        self.raw, self.ref = new_raw, new_ref
        return factor


def blocks(length: int, size: int) -> list[slice]:
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


def key_block(
    k: torch.Tensor,
    p: FeatureParams,
    row_term: torch.Tensor | None,
    mask: torch.Tensor | None,
    stab: RunningMax | None,
    state: torch.Tensor | None,
    offset: bool = True,
    scratch: Scratch | None = None,
) -> tuple[torch.Tensor, Vjp]:
    """Key features of a block and their ``dΦk -> dk``; for the softmax kernel folds the block
    into the running max ``stab`` and rescales ``state`` (in place) to the new stabiliser."""
    if p.spec.kind != "softmax":
        return key_features(k, p, row_term, mask, offset=offset, scratch=scratch)
    logits = key_logits(k, p, row_term, mask, scratch)
    factor = stab.update(logits)
    if state is not None:
        state.mul_(factor)
    return key_features(k, p, row_term, mask, stab.ref, logits=logits)


def valid_value_sum(v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``Σ_rows [v, 1]`` over unpadded rows, ``(N, 1, Dv+1)``: what a constant added to every
    key feature contributes to each row of the summary."""
    if mask is not None:
        v = v.masked_fill(mask[..., None], 0.0)
    count = v.new_full((v.shape[0], 1, 1), v.shape[1])
    if mask is not None:
        count -= mask.sum(1).to(v.dtype)[:, None, None]
    return torch.cat([v.sum(1, keepdim=True), count], dim=-1)


def cpu_scratch(like: torch.Tensor) -> Scratch | None:
    """Reusable blocks on the CPU (page faults, see :class:`Scratch`); None elsewhere: an
    accelerator's caching allocator already reuses freed blocks, and kept buffers would hold
    several blocks of the size budget at once."""
    return Scratch() if like.device.type == "cpu" else None


def without_autocast(backward: Callable[..., tuple]) -> Callable[..., tuple]:
    """Run a custom backward with autocast off. The forward runs in float32 with autocast off
    (:class:`FavorAttention`); a backward called inside an autocast region (``loss.backward()``
    under ``torch.autocast``) would otherwise rebuild the features in bf16 next to float32
    sums."""

    @functools.wraps(backward)
    def wrapped(ctx: Any, g: torch.Tensor) -> tuple:
        with torch.autocast(device_type=g.device.type, enabled=False):
            return backward(ctx, g)

    return wrapped


def _rows(t: torch.Tensor | None, sl: slice) -> torch.Tensor | None:
    return None if t is None else t[:, sl]


class BidirectionalFavorFunction(torch.autograd.Function):
    """Autograd function behind :func:`bidirectional_linear_attention`.

    Features are handled without their constant offset ``c`` (``eps`` / ``kernel_eps``,
    :attr:`KernelSpec.query_offset`): ``(Φ + c) S = Φ S + c·1ᵀS`` and ``(Φ + c)ᵀ X = ΦᵀX +
    c·1 (1ᵀX)`` are rank-one terms, which saves a pass over every ``(N, c, m)`` block (the
    kernel is memory-bound there on a CPU).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        p: FeatureParams,
        chunk: int,
        save: bool = False,
    ) -> torch.Tensor:
        n, lk, _ = k.shape
        lq, m = q.shape[1], p.nb_features
        off_q, off_k = p.spec.query_offset, p.spec.key_offset
        keep = save and any(ctx.needs_input_grad[:3])
        phi_q_all = q.new_empty(n, lq, m) if keep else None
        phi_k_all = k.new_empty(n, lk, m) if keep else None
        block_refs = []
        scratch = cpu_scratch(v)
        dv1 = v.shape[-1] + 1
        state = k.new_zeros(n, m, dv1)
        stab = RunningMax(k)
        row_term = p.key_row_term(k)
        for sl in blocks(lk, chunk):
            mc = _rows(mask, sl)
            phi_k, _ = key_block(
                k[:, sl], p, _rows(row_term, sl), mc, stab, state, offset=False, scratch=scratch
            )
            va = values_with_ones(
                v[:, sl], mc, scratch_block(scratch, "va", v, *phi_k.shape[:2], dv1)
            )
            state.baddbmm_(phi_k.transpose(1, 2), va)
            if keep:
                phi_k_all[:, sl] = phi_k
                block_refs.append((sl, stab.ref))
        if off_k:  # no stabiliser here: softmax key features have no offset
            state += off_k * valid_value_sum(v, mask)
        if keep and p.spec.kind == "softmax":
            # to the final stabiliser, as the summary (a block before any finite key has zero
            # features and ref 0: the clamp keeps exp finite there)
            for sl, ref in block_refs:
                phi_k_all[:, sl] *= torch.exp((ref - stab.ref).clamp_max_(0.0))
        out = q.new_empty(n, lq, v.shape[-1])
        den = q.new_empty(n, lq)
        query_term = state.sum(1, keepdim=True).mul_(off_q)  # (N, 1, Dv+1)
        for sl in blocks(lq, chunk):
            phi_q, _ = query_features(q[:, sl], p, offset=False, scratch=scratch)
            na = scratch_block(scratch, "na", q, *phi_q.shape[:2], dv1)
            split_output(torch.baddbmm(query_term, phi_q, state, out=na), out[:, sl], den[:, sl])
            if keep:
                phi_q_all[:, sl] = phi_q
        ctx.params, ctx.chunk = p, chunk
        # kept features replace q (and k, but for the softmax kernel's |k|² term)
        q_saved = None if keep else q
        k_saved = k if not keep or p.spec.kind == "softmax" else None
        ctx.shapes = q.shape, k.shape
        ctx.save_for_backward(
            q_saved, k_saved, v, mask, state, stab.ref, out, den, phi_q_all, phi_k_all
        )
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @without_autocast
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask, state, ref, out, den, phi_q_all, phi_k_all = ctx.saved_tensors
        p, chunk = ctx.params, ctx.chunk
        off_q, off_k = p.spec.query_offset, p.spec.key_offset
        (n, lq, d), (_, lk, _) = ctx.shapes
        kept = phi_q_all is not None
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        dq = v.new_empty(n, lq, d) if need_q else None
        dstate = torch.zeros_like(state)
        gp_sum = torch.zeros_like(state[:, :1])
        scratch = cpu_scratch(v)
        for sl in blocks(lq, chunk):
            if kept:
                phi_q = phi_q_all[:, sl]
                vjp_q = query_vjp(phi_q, p, offset=False, scratch=scratch)
            else:
                phi_q, vjp_q = query_features(q[:, sl], p, offset=False, scratch=scratch)
            gp = output_adjoint(g[:, sl], out[:, sl], den[:, sl], scratch)
            if dq is not None:
                dphi = scratch_block(scratch, "dphi", gp, *phi_q.shape)
                grad = scratch_block(scratch, "grad", v, *phi_q.shape[:2], d)
                dq[:, sl] = vjp_q(torch.bmm(gp, state.transpose(1, 2), out=dphi), out=grad)
            dstate.baddbmm_(phi_q.transpose(1, 2), gp)
            if off_q:
                gp_sum += gp.sum(1, keepdim=True)
        if off_q:
            dstate += off_q * gp_sum

        dk = v.new_empty(n, lk, d) if need_k else None
        dv = torch.empty_like(v) if need_v else None
        if dk is not None or dv is not None:
            stabilizer = ref if p.spec.kind == "softmax" else None
            row_term = None if kept else p.key_row_term(k)
            dv_state = dstate[..., :-1]
            value_term = dv_state.sum(1, keepdim=True).mul_(off_k)  # (N, 1, Dv)
            for sl in blocks(lk, chunk):
                mc = _rows(mask, sl)
                if kept:
                    phi_k = phi_k_all[:, sl]
                    vjp_k = key_vjp(phi_k, _rows(k, sl), mc, p, offset=False)
                else:
                    phi_k, vjp_k = key_features(
                        k[:, sl],
                        p,
                        _rows(row_term, sl),
                        mc,
                        stabilizer,
                        offset=False,
                        scratch=scratch,
                    )
                rows = phi_k.shape[1]
                if dv is not None:
                    # through a contiguous block: bmm into a strided slice of dv would
                    # allocate a temporary per block
                    dvb = scratch_block(scratch, "grad", v, n, rows, v.shape[-1])
                    if off_k:
                        dvb = torch.baddbmm(value_term, phi_k, dv_state, out=dvb)
                    else:
                        dvb = torch.bmm(phi_k, dv_state, out=dvb)
                    if off_k and mc is not None:
                        dvb.masked_fill_(mc[..., None], 0.0)
                    dv[:, sl] = dvb
                if dk is not None:
                    va = scratch_block(scratch, "va", v, n, rows, v.shape[-1] + 1)
                    va = values_with_ones(v[:, sl], mc, va)
                    dphi = scratch_block(scratch, "dphi", va, *phi_k.shape)
                    grad = scratch_block(scratch, "grad", v, n, rows, d)
                    dk[:, sl] = vjp_k(torch.bmm(va, dstate.transpose(1, 2), out=dphi), out=grad)
        return dq, dk, dv, None, None, None, None


def bidirectional_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None,
    params: FeatureParams,
    chunk: int = 1024,
    save_features: bool = False,
) -> torch.Tensor:
    """Non-causal FAVOR attention: ``q`` ``(N, Lq, D)``, ``k`` ``(N, Lk, D)``, ``v``
    ``(N, Lk, Dv)`` -> ``(N, Lq, Dv)``; ``key_mask`` ``(N, Lk)`` bool, True = padded key.

    Features come from ``params`` (see :class:`FeatureParams`); gradients flow to q, k, v.
    Extra memory: the ``(m, Dv+1)`` summary and one block of ``chunk`` rows of features, plus,
    with ``save_features`` (when a gradient is needed), the ``(N, Lq + Lk, m)`` features,
    saved for the backward like any saved tensor (activation checkpointing drops them too).
    """
    # checked here: inside the function's forward grad mode is always off
    save = save_features and torch.is_grad_enabled()
    return BidirectionalFavorFunction.apply(q, k, v, key_mask, params, chunk, save)
