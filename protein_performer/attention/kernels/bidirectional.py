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

from typing import Any

import torch

from ..feature_maps import (
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
from .common import (
    batch_params,
    blocks,
    den_floor,  # noqa: F401  (re-exported: its old home, for one release)
    head_view,
    item,
    output_adjoint,
    row_block,
    split_output,
    values_with_ones,
    without_autocast,
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


def forward_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    p: FeatureParams,
    chunk: int,
    out: torch.Tensor,
    den: torch.Tensor,
    state: torch.Tensor,
    phi_q_all: torch.Tensor | None = None,
    phi_k_all: torch.Tensor | None = None,
    scratch: Scratch | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The forward for ``N`` sequences ``q`` ``(N, Lq, D)``, ``k`` ``(N, Lk, D)``, ``v`` ``(N,
    Lk, Dv)`` (any strides with a unit last stride: per-head views of a packed projection
    are read in place), ``mask`` ``(N, Lk)`` or None.

    Writes the output into ``out`` ``(N, Lq, Dv)``, the normaliser into ``den`` ``(N, Lq)``,
    the summary into ``state`` ``(N, m, Dv+1)`` (zeros on entry) and, when given, the
    features without their offsets into ``phi_q_all`` / ``phi_k_all`` ``(N, L, m)`` (keys
    against the final stabiliser). Returns the stabiliser ``(N, 1, 1)`` (0 for ReLU) and the
    keys' row term ``(N, Lk)`` (:meth:`FeatureParams.key_row_term`: softmax; else None), which
    the backward reuses.
    """
    lk, lq = k.shape[1], q.shape[1]
    off_q, off_k = p.spec.query_offset, p.spec.key_offset
    keep = phi_q_all is not None
    block_refs = []
    dv1 = v.shape[-1] + 1
    stab = RunningMax(k)
    row_term = p.key_row_term(k)
    for sl in blocks(lk, chunk):
        mc = row_block(mask, sl)
        phi_k, _ = key_block(
            k[:, sl], p, row_block(row_term, sl), mc, stab, state, offset=False, scratch=scratch
        )
        va = values_with_ones(v[:, sl], mc, scratch_block(scratch, "va", v, *phi_k.shape[:2], dv1))
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
    query_term = state.sum(1, keepdim=True).mul_(off_q)  # (N, 1, Dv+1)
    for sl in blocks(lq, chunk):
        phi_q, _ = query_features(q[:, sl], p, offset=False, scratch=scratch)
        na = scratch_block(scratch, "na", q, *phi_q.shape[:2], dv1)
        split_output(torch.baddbmm(query_term, phi_q, state, out=na), out[:, sl], den[:, sl])
        if keep:
            phi_q_all[:, sl] = phi_q
    return stab.ref, row_term


def backward_rows(
    g: torch.Tensor,
    q: torch.Tensor | None,
    k: torch.Tensor | None,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    p: FeatureParams,
    chunk: int,
    state: torch.Tensor,
    ref: torch.Tensor,
    row_term: torch.Tensor | None,
    out: torch.Tensor,
    den: torch.Tensor,
    phi_q_all: torch.Tensor | None,
    phi_k_all: torch.Tensor | None,
    dq: torch.Tensor | None,
    dk: torch.Tensor | None,
    dv: torch.Tensor | None,
    scratch: Scratch | None = None,
) -> None:
    """The backward of :func:`forward_rows` for dLoss/dout ``g`` ``(N, Lq, Dv)``, from what it
    returned and wrote: writes dLoss/dq, dk, dv into ``dq``, ``dk``, ``dv`` (each may be None:
    not needed; any strides with a unit last stride). ``q`` may be None when the features were kept; ``k`` too but
    for the softmax kernel (its ``|k|²`` term)."""
    off_q, off_k = p.spec.query_offset, p.spec.key_offset
    kept = phi_q_all is not None
    lq, lk = g.shape[1], v.shape[1]
    dstate = torch.zeros_like(state)
    gp_sum = torch.zeros_like(state[:, :1])
    for sl in blocks(lq, chunk):
        if kept:
            phi_q = phi_q_all[:, sl]
            vjp_q = query_vjp(phi_q, p, offset=False, scratch=scratch)
        else:
            phi_q, vjp_q = query_features(q[:, sl], p, offset=False, scratch=scratch)
        gp = output_adjoint(g[:, sl], out[:, sl], den[:, sl], scratch)
        if dq is not None:
            dphi = scratch_block(scratch, "dphi", gp, *phi_q.shape)
            vjp_q(torch.bmm(gp, state.transpose(1, 2), out=dphi), out=dq[:, sl])
        dstate.baddbmm_(phi_q.transpose(1, 2), gp)
        if off_q:
            gp_sum += gp.sum(1, keepdim=True)
    if off_q:
        dstate += off_q * gp_sum
    if dk is None and dv is None:
        return
    stabilizer = ref if p.spec.kind == "softmax" else None
    dv_state = dstate[..., :-1]
    value_term = dv_state.sum(1, keepdim=True).mul_(off_k)  # (N, 1, Dv)
    for sl in blocks(lk, chunk):
        mc = row_block(mask, sl)
        if kept:
            phi_k = phi_k_all[:, sl]
            vjp_k = key_vjp(phi_k, row_block(k, sl), mc, p, offset=False)
        else:
            phi_k, vjp_k = key_features(
                k[:, sl], p, row_block(row_term, sl), mc, stabilizer, offset=False, scratch=scratch
            )
        rows = phi_k.shape[1]
        if dv is not None:
            dvb = dv[:, sl]
            if off_k:
                torch.baddbmm(value_term, phi_k, dv_state, out=dvb)
                if mc is not None:
                    dvb.masked_fill_(mc[..., None], 0.0)
            else:
                torch.bmm(phi_k, dv_state, out=dvb)
        if dk is not None:
            va = scratch_block(scratch, "va", v, v.shape[0], rows, v.shape[-1] + 1)
            va = values_with_ones(v[:, sl], mc, va)
            dphi = scratch_block(scratch, "dphi", va, *phi_k.shape)
            vjp_k(torch.bmm(va, dstate.transpose(1, 2), out=dphi), out=dk[:, sl])


class BidirectionalFavorFunction(torch.autograd.Function):
    """Autograd function behind :func:`bidirectional_linear_attention`, on ``(N, L, D)``
    inputs (:func:`forward_rows`, :func:`backward_rows`).

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
        keep = save and any(ctx.needs_input_grad[:3])
        phi_q_all = q.new_empty(n, lq, m) if keep else None
        phi_k_all = k.new_empty(n, lk, m) if keep else None
        out = q.new_empty(n, lq, v.shape[-1])
        den = q.new_empty(n, lq)
        state = k.new_zeros(n, m, v.shape[-1] + 1)
        ref, row_term = forward_rows(
            q, k, v, mask, p, chunk, out, den, state, phi_q_all, phi_k_all, cpu_scratch(v)
        )
        ctx.params, ctx.chunk = p, chunk
        # kept features replace q (and k, but for the softmax kernel's |k|² term)
        q_saved = None if keep else q
        k_saved = k if not keep or p.spec.kind == "softmax" else None
        ctx.shapes = q.shape, k.shape
        row_term = None if keep else row_term
        ctx.save_for_backward(
            q_saved, k_saved, v, mask, state, ref, row_term, out, den, phi_q_all, phi_k_all
        )
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @without_autocast
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask, state, ref, row_term, out, den, phi_q_all, phi_k_all = ctx.saved_tensors
        (n, lq, d), (_, lk, _) = ctx.shapes
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        dq = v.new_empty(n, lq, d) if need_q else None
        dk = v.new_empty(n, lk, d) if need_k else None
        dv = torch.empty_like(v) if need_v else None
        backward_rows(
            g, q, k, v, mask, ctx.params, ctx.chunk, state, ref, row_term, out, den,
            phi_q_all, phi_k_all, dq, dk, dv, cpu_scratch(v),
        )  # fmt: skip
        return dq, dk, dv, None, None, None, None


class PackedBidirectionalFavorFunction(torch.autograd.Function):
    """Bidirectional FAVOR on a packed projection ``qkv`` ``(B, L, 3, H, D)`` (the layout of a
    fused q/k/v linear layer) -> ``(B, L, H, D)``, the layout the output projection reads.

    The same computation as :class:`BidirectionalFavorFunction`, one batch element at a time
    on per-head views: queries, keys and values are read in place and the output and the
    gradient ``(B, L, 3, H, D)`` are written in place, where the ``(B·H, L, D)`` route copies
    q, k, v and the output in the forward and the gradients in the backward (each a fresh
    allocation; at L = 16,384 every one is new memory to the OS, benchmarks/README.md). With
    kept features the backward needs only v (and k, softmax): those are saved as copies, so
    the projection is not kept alive, as on the other route.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        qkv: torch.Tensor,
        mask: torch.Tensor | None,
        p: FeatureParams,
        chunk: int,
        save: bool = False,
    ) -> torch.Tensor:
        b, length, _, heads, d = qkv.shape
        m = p.nb_features
        q, k, v = qkv.unbind(2)  # (B, L, H, D) views
        keep = save and ctx.needs_input_grad[0]
        phi_q_all = qkv.new_empty(b, heads, length, m) if keep else None
        phi_k_all = qkv.new_empty(b, heads, length, m) if keep else None
        out = qkv.new_empty(b, length, heads, d)
        den = qkv.new_empty(b, heads, length)
        state = qkv.new_zeros(b, heads, m, d + 1)
        ref = qkv.new_empty(b, heads, 1, 1)
        masks = None if mask is None else mask.reshape(b, heads, length)
        scratch = cpu_scratch(qkv)
        row_terms = []
        for i in range(b):
            ref[i], row_term = forward_rows(
                head_view(q, i), head_view(k, i), head_view(v, i), item(masks, i), batch_params(p, heads, i),
                chunk, head_view(out, i), den[i], state[i], item(phi_q_all, i), item(phi_k_all, i),
                scratch,
            )  # fmt: skip
            row_terms.append(row_term)
        row_term = None if keep or not b or row_terms[0] is None else torch.stack(row_terms)
        ctx.params, ctx.chunk = p, chunk
        if keep:
            q = None
            k = k.contiguous() if p.spec.kind == "softmax" else None
            v = v.contiguous()
        ctx.save_for_backward(q, k, v, mask, state, ref, row_term, out, den, phi_q_all, phi_k_all)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @without_autocast
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask, state, ref, row_term, out, den, phi_q_all, phi_k_all = ctx.saved_tensors
        b, length, heads, d = v.shape
        dqkv = v.new_empty(b, length, 3, heads, d)
        dq, dk, dv = dqkv.unbind(2)
        masks = None if mask is None else mask.reshape(b, heads, length)
        scratch = cpu_scratch(v)
        for i in range(b):
            backward_rows(
                head_view(g, i), head_view(q, i), head_view(k, i), head_view(v, i), item(masks, i),
                batch_params(ctx.params, heads, i), ctx.chunk, state[i], ref[i], item(row_term, i),
                head_view(out, i), den[i], item(phi_q_all, i), item(phi_k_all, i),
                head_view(dq, i), head_view(dk, i), head_view(dv, i), scratch,
            )  # fmt: skip
        return dqkv, None, None, None, None


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


def packed_bidirectional_linear_attention(
    qkv: torch.Tensor,
    key_mask: torch.Tensor | None,
    params: FeatureParams,
    chunk: int = 1024,
    save_features: bool = False,
) -> torch.Tensor:
    """:func:`bidirectional_linear_attention` on a packed ``qkv`` ``(B, L, 3, H, D)`` (queries,
    keys, values of each head; any strides with a unit last one) -> ``(B, L, H, D)``, without
    copying q, k, v or the output (:class:`PackedBidirectionalFavorFunction`). The compiled CPU
    kernel is chosen in front of this one (:func:`.fused_cpu.packed_attention`).

    ``key_mask`` ``(B·H, L)`` bool, True = padded key; ``params`` for ``N = B·H`` rows, batch
    element major. Gradients flow to ``qkv``.
    """
    save = save_features and torch.is_grad_enabled()
    return PackedBidirectionalFavorFunction.apply(qkv, key_mask, params, chunk, save)
