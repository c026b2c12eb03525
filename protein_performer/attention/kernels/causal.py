"""Causal linear attention: a chunked prefix-sum scan with O(m·Dv) carried state per head.

The sequence is processed in blocks of ``chunk`` rows; each block is split into sub-chunks
of ``sub`` rows that are handled together with batched matmuls:

* sub-chunk sums ``U_t = φ(K_t)ᵀ [V_t, 1]`` ``(m, Dv+1)``, their exclusive prefix sums plus
  the carried state give each sub-chunk's prefix ``P_t``;
* ``out_t = φ(Q_t) P_t + tril(φ(Q_t) φ(K_t)ᵀ) [V_t, 1]`` (explicit only inside a sub-chunk).

The custom backward stores no per-position states or ``(L, m)`` features: a forward-order
scan rebuilds the carried state for the query gradients, a reverse scan carries
``Σ φ(q_i) g_iᵀ`` for the key and value gradients.

Softmax key features are stabilised per sub-chunk by the running max of the key logits up
to the end of that sub-chunk (detached): a large later key cannot underflow earlier ones, at
any block size, beyond the ``sub`` rows that share one stabiliser. Sums against different
stabilisers are combined with weights ``exp(ref_s − ref_t) ≤ 1`` (a ``(T, T)`` matrix per
block instead of a plain cumulative sum). Within a sub-chunk the stabiliser does see the
sub-chunk's later keys: one whose logit exceeds every key a row can see by more than the
float's exponent range (~87 in float32, ~708 in float64; key norms around 45 at head size
16) underflows that row's features, and the row reads as having no visible key (output 0).
That is a leak of the future within ``sub`` rows, in a regime where softmax attention is
one-hot anyway; per-row stabilisers would need ``(sub, sub, m)`` exponentials per
sub-chunk. (performer-pytorch stabilises causal key features by their max over the whole
sequence.)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..feature_maps import FeatureParams, key_features, key_logits, query_features
from .common import (
    batch_params,
    blocks,
    head_view,
    item,
    output_adjoint,
    row_block,
    split_output,
    values_with_ones,
    without_autocast,
)


def _split(t: torch.Tensor, sub: int) -> torch.Tensor:
    """``(N, c, X)`` -> ``(N·T, sub, X)`` with zero rows appended up to ``T·sub``."""
    n, c, x = t.shape
    pad = (-c) % sub
    if pad:
        t = F.pad(t, (0, 0, 0, pad))
    return t.reshape(n * ((c + pad) // sub), sub, x)


def _merge(t: torch.Tensor, n: int, c: int) -> torch.Tensor:
    """Inverse of :func:`_split`: ``(N·T, sub, X)`` -> ``(N, c, X)``."""
    return t.reshape(n, -1, t.shape[-1])[:, :c]


def _prefix_sums(
    fk: torch.Tensor, va: torch.Tensor, carry: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sub-chunk state before it, ``carry + Σ_{earlier sub-chunks} φ(K)ᵀ[V, 1]``.

    ``fk`` ``(N·T, sub, m)``, ``va`` ``(N·T, sub, e)``, ``carry`` ``(N, m, e)``. Returns the
    prefixes ``(N·T, m, e)`` and the state after the block ``(N, m, e)``.
    """
    u = torch.bmm(fk.transpose(1, 2), va).view(n, -1, *carry.shape[1:])
    sums = torch.cat([carry[:, None], u], dim=1).cumsum_(1)  # (N, T+1, m, e)
    return sums[:, :-1].reshape(-1, *carry.shape[1:]), sums[:, -1]


def _suffix_sums(
    fq: torch.Tensor, gp: torch.Tensor, carry: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sub-chunk ``carry + Σ_{later sub-chunks} φ(Q)ᵀ g'`` ``(N·T, m, e)``, and the
    total including this block ``(N, m, e)`` (for the block before)."""
    y = torch.bmm(fq.transpose(1, 2), gp).view(n, -1, *carry.shape[1:])
    sums = torch.cat([carry[:, None], y.flip(1)], dim=1).cumsum_(1)  # reversed order
    return sums[:, :-1].flip(1).reshape(-1, *carry.shape[1:]), sums[:, -1]


def _decay(ref_from: torch.Tensor, raw_from: torch.Tensor, ref_to: torch.Tensor) -> torch.Tensor:
    """``exp(ref_from − ref_to)``, or 0 where no finite logit was seen yet (``raw_from``)."""
    return torch.where(torch.isfinite(raw_from), torch.exp(ref_from - ref_to), 0.0)


def _subchunk_refs(
    logits: torch.Tensor, sub: int, prev_raw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sub-chunk stabilisers of a block: the running max of the key logits ``(N, c, m)``
    up to each sub-chunk's end, continuing from ``prev_raw`` ``(N,)``. Returns ``raw``
    ``(N, T)`` (``-inf`` while nothing finite was seen) and ``ref`` (0 there instead)."""
    n, c, m = logits.shape
    pad = (-c) % sub
    if pad:
        logits = F.pad(logits, (0, 0, 0, pad), value=float("-inf"))
    sub_max = logits.reshape(n, -1, sub * m).amax(-1)
    raw = torch.cummax(torch.maximum(sub_max, prev_raw[:, None]), dim=1).values
    return raw, torch.where(torch.isfinite(raw), raw, 0.0)


def _weights(raw: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``(N, T, T)``: entry ``[t, s]`` is ``exp(ref_s − ref_t)`` for ``s < t`` (else 0), the
    factor that brings sub-chunk ``s``'s sums to sub-chunk ``t``'s stabiliser."""
    return _decay(ref[:, None, :], raw[:, None, :], ref[:, :, None]).tril_(-1)


def _weighted_prefix(
    fk: torch.Tensor,
    va: torch.Tensor,
    carry: torch.Tensor,
    raw: torch.Tensor,
    ref: torch.Tensor,
    prev_raw: torch.Tensor,
    prev_ref: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_prefix_sums` for per-sub-chunk stabilisers ``raw``/``ref`` ``(N, T)``; ``carry``
    is relative to ``prev_ref`` ``(N,)``. The returned state is relative to ``ref[:, -1]``."""
    n, t = ref.shape
    me = carry.shape[1] * carry.shape[2]
    u = torch.bmm(fk.transpose(1, 2), va).view(n, t, me)
    prefix = torch.bmm(_weights(raw, ref), u)
    prefix += _decay(prev_ref[:, None], prev_raw[:, None], ref)[..., None] * carry.view(n, 1, me)
    state = (prefix[:, -1] + u[:, -1]).view_as(carry)
    return prefix.view(-1, *carry.shape[1:]), state


def causal_forward_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    p: FeatureParams,
    chunk: int,
    sub: int,
    out: torch.Tensor,
    den: torch.Tensor,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The causal forward for ``N`` sequences ``q``, ``k`` ``(N, L, D)``, ``v`` ``(N, L, Dv)``
    (any strides with a unit last stride), ``mask`` ``(N, L)`` or None: writes the output into
    ``out`` ``(N, L, Dv)`` and the normaliser into ``den`` ``(N, L)``; returns the softmax
    kernel's per-sub-chunk stabilisers ``raw``, ``ref`` ``(N, sub-chunks)`` (None for ReLU)."""
    n, length, dv = v.shape
    m, e = p.nb_features, dv + 1
    softmax = p.spec.kind == "softmax"
    row_term = p.key_row_term(k)
    state = k.new_zeros(n, m, e)
    prev_raw = k.new_full((n,), float("-inf"))
    prev_ref = k.new_zeros(n)
    raws, refs = [], []
    for sl in blocks(length, chunk):
        c = sl.stop - sl.start
        mc, rt = row_block(mask, sl), row_block(row_term, sl)
        if softmax:
            logits = key_logits(k[:, sl], p, rt, mc)
            raw, ref = _subchunk_refs(logits, sub, prev_raw)
            row_ref = ref.repeat_interleave(sub, dim=1)[:, :c, None]
            phi_k = key_features(k[:, sl], p, rt, mc, row_ref, logits=logits)[0]
        else:
            phi_k = key_features(k[:, sl], p, rt, mc)[0]
        phi_q, _ = query_features(q[:, sl], p)
        fq, fk = _split(phi_q, sub), _split(phi_k, sub)
        va = _split(values_with_ones(v[:, sl], mc), sub)
        if softmax:
            prefix, state = _weighted_prefix(fk, va, state, raw, ref, prev_raw, prev_ref)
            prev_raw, prev_ref = raw[:, -1], ref[:, -1]
            raws.append(raw)
            refs.append(ref)
        else:
            prefix, state = _prefix_sums(fk, va, state, n)
        na = torch.bmm(fq, prefix)
        na.baddbmm_(torch.bmm(fq, fk.transpose(1, 2)).tril_(), va)
        split_output(_merge(na, n, c), out[:, sl], den[:, sl])
    raw_all = torch.cat(raws, dim=1) if raws else None  # (N, total sub-chunks)
    ref_all = torch.cat(refs, dim=1) if refs else None
    return raw_all, ref_all


def causal_backward_rows(
    g: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    p: FeatureParams,
    chunk: int,
    sub: int,
    out: torch.Tensor,
    den: torch.Tensor,
    raw_all: torch.Tensor | None,
    ref_all: torch.Tensor | None,
    dq: torch.Tensor | None,
    dk: torch.Tensor | None,
    dv_: torch.Tensor | None,
) -> None:
    """The backward of :func:`causal_forward_rows` for dLoss/dout ``g`` ``(N, L, Dv)``: writes
    dLoss/dq, dk, dv into ``dq``, ``dk``, ``dv_`` (None: not needed; any strides with a unit
    last stride)."""
    n, length, dv = v.shape
    m, e = p.nb_features, dv + 1
    softmax = p.spec.kind == "softmax"
    slices = blocks(length, chunk)
    row_term = p.key_row_term(k)
    offsets = [0]  # block b's sub-chunks are columns offsets[b]:offsets[b+1] of raw/ref_all
    for sl in slices:
        offsets.append(offsets[-1] + -(-(sl.stop - sl.start) // sub))

    def refs(b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Block ``b``'s per-sub-chunk stabilisers ``raw``, ``ref`` ``(N, T)``."""
        window = slice(offsets[b], offsets[b + 1])
        return raw_all[:, window], ref_all[:, window]

    def block_inputs(b: int, sl: slice):
        c = sl.stop - sl.start
        mc = row_block(mask, sl)
        stabilizer = None
        if softmax:
            stabilizer = refs(b)[1].repeat_interleave(sub, dim=1)[:, :c, None]
        phi_k, vjp_k = key_features(k[:, sl], p, row_block(row_term, sl), mc, stabilizer)
        phi_q, vjp_q = query_features(q[:, sl], p)
        va = _split(values_with_ones(v[:, sl], mc), sub)
        gp = _split(output_adjoint(g[:, sl], out[:, sl], den[:, sl]), sub)
        return phi_q, vjp_q, _split(phi_q, sub), phi_k, vjp_k, _split(phi_k, sub), va, gp

    if dq is not None:  # forward scan: rebuild the carried state
        state = k.new_zeros(n, m, e)
        for b, sl in enumerate(slices):
            c = sl.stop - sl.start
            _, vjp_q, fq, _, _, fk, va, gp = block_inputs(b, sl)
            if softmax:
                raw, ref = refs(b)
                if b > 0:
                    prev_raw, prev_ref = (x[:, -1] for x in refs(b - 1))
                else:
                    prev_raw = k.new_full((n,), float("-inf"))
                    prev_ref = k.new_zeros(n)
                prefix, state = _weighted_prefix(fk, va, state, raw, ref, prev_raw, prev_ref)
            else:
                prefix, state = _prefix_sums(fk, va, state, n)
            dfq = torch.bmm(gp, prefix.transpose(1, 2))
            dfq.baddbmm_(torch.bmm(gp, va.transpose(1, 2)).tril_(), fk)
            dq[:, sl] = vjp_q(_merge(dfq, n, c))

    if dk is not None or dv_ is not None:  # reverse scan: carry Σ φ(q) g'ᵀ of later rows
        # softmax: the carry is relative to the stabiliser of the block's last sub-chunk
        carry = k.new_zeros(n, m, e)
        for b in range(len(slices) - 1, -1, -1):
            sl = slices[b]
            c = sl.stop - sl.start
            _, _, fq, _, vjp_k, fk, va, gp = block_inputs(b, sl)
            if softmax:
                raw, ref = refs(b)
                t = ref.shape[1]
                y = torch.bmm(fq.transpose(1, 2), gp).view(n, t, m * e)
                suffix = torch.bmm(_weights(raw, ref).transpose(1, 2), y)
                to_last = _decay(ref, raw, ref[:, -1:])  # (N, T)
                suffix += to_last[..., None] * carry.view(n, 1, m * e)
                suffix = suffix.view(-1, m, e)
                if b > 0:  # the carry for block b - 1, relative to its last stabiliser
                    raw_p, ref_p = (x[:, -1:] for x in refs(b - 1))
                    f = _decay(ref_p, raw_p, ref)  # (N, T)
                    carry = (
                        torch.bmm(f[:, None], y).view(n, m, e)
                        + _decay(ref_p, raw_p, ref[:, -1:])[..., None] * carry
                    )
            else:
                suffix, carry = _suffix_sums(fq, gp, carry, n)
            if dv_ is not None:
                dva = torch.bmm(fk, suffix[..., :-1])
                scores = torch.bmm(fq, fk.transpose(1, 2)).tril_()
                dva.baddbmm_(scores.transpose(1, 2), gp[..., :-1])
                dv_[:, sl] = _merge(dva, n, c)
            if dk is not None:
                dfk = torch.bmm(va, suffix.transpose(1, 2))
                dfk.baddbmm_(torch.bmm(gp, va.transpose(1, 2)).tril_().transpose(1, 2), fq)
                dk[:, sl] = vjp_k(_merge(dfk, n, c))


class CausalFavorFunction(torch.autograd.Function):
    """Autograd function behind :func:`causal_linear_attention`."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        p: FeatureParams,
        chunk: int,
        sub: int,
    ) -> torch.Tensor:
        n, length, dv = v.shape
        out = q.new_empty(n, length, dv)
        den = q.new_empty(n, length)
        raw_all, ref_all = causal_forward_rows(q, k, v, mask, p, chunk, sub, out, den)
        ctx.params, ctx.chunk, ctx.sub = p, chunk, sub
        ctx.save_for_backward(q, k, v, mask, out, den, raw_all, ref_all)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @without_autocast
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask, out, den, raw_all, ref_all = ctx.saved_tensors
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        dq = torch.empty_like(q) if need_q else None
        dk = torch.empty_like(k) if need_k else None
        dv = torch.empty_like(v) if need_v else None
        causal_backward_rows(
            g, q, k, v, mask, ctx.params, ctx.chunk, ctx.sub, out, den, raw_all, ref_all,
            dq, dk, dv,
        )  # fmt: skip
        return dq, dk, dv, None, None, None, None


def causal_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None,
    params: FeatureParams,
    chunk: int = 256,
    sub: int = 64,
) -> torch.Tensor:
    """Causal FAVOR attention: ``q``, ``k`` ``(N, L, D)``, ``v`` ``(N, L, Dv)`` -> ``(N, L, Dv)``.

    ``key_mask`` ``(N, L)`` bool, True = padded key. Extra memory: the ``(m, Dv+1)`` carried
    state plus one block's features and sub-chunk sums (independent of ``L``).
    """
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"causal attention needs Lq == Lk, got {q.shape[1]} and {k.shape[1]}")
    sub = max(1, min(sub, chunk))
    return CausalFavorFunction.apply(q, k, v, key_mask, params, chunk, sub)


class PackedCausalFavorFunction(torch.autograd.Function):
    """Causal FAVOR on a packed projection ``qkv`` ``(B, L, 3, H, D)`` -> ``(B, L, H, D)``, one
    batch element at a time on per-head views (as
    :class:`~protein_performer.attention.kernels.bidirectional.PackedBidirectionalFavorFunction`
    for bidirectional attention): no copies of q, k, v, the output or the gradients."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        qkv: torch.Tensor,
        mask: torch.Tensor | None,
        p: FeatureParams,
        chunk: int,
        sub: int,
    ) -> torch.Tensor:
        b, length, _, heads, d = qkv.shape
        q, k, v = qkv.unbind(2)  # (B, L, H, D) views
        out = qkv.new_empty(b, length, heads, d)
        den = qkv.new_empty(b, heads, length)
        masks = None if mask is None else mask.reshape(b, heads, length)
        raws, refs = [], []
        for i in range(b):
            raw, ref = causal_forward_rows(
                head_view(q, i), head_view(k, i), head_view(v, i), item(masks, i), batch_params(p, heads, i),
                chunk, sub, head_view(out, i), den[i],
            )  # fmt: skip
            raws.append(raw)
            refs.append(ref)
        raw_all = None if not b or raws[0] is None else torch.stack(raws)  # (B, H, sub-chunks)
        ref_all = None if not b or refs[0] is None else torch.stack(refs)
        ctx.params, ctx.chunk, ctx.sub = p, chunk, sub
        ctx.save_for_backward(qkv, mask, out, den, raw_all, ref_all)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @without_autocast
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        qkv, mask, out, den, raw_all, ref_all = ctx.saved_tensors
        b, length, _, heads, d = qkv.shape
        q, k, v = qkv.unbind(2)
        dqkv = qkv.new_empty(b, length, 3, heads, d)
        dq, dk, dv = dqkv.unbind(2)
        masks = None if mask is None else mask.reshape(b, heads, length)
        for i in range(b):
            causal_backward_rows(
                head_view(g, i), head_view(q, i), head_view(k, i), head_view(v, i), item(masks, i),
                batch_params(ctx.params, heads, i), ctx.chunk, ctx.sub, head_view(out, i), den[i],
                item(raw_all, i), item(ref_all, i), head_view(dq, i), head_view(dk, i), head_view(dv, i),
            )  # fmt: skip
        return dqkv, None, None, None, None


def packed_causal_linear_attention(
    qkv: torch.Tensor,
    key_mask: torch.Tensor | None,
    params: FeatureParams,
    chunk: int = 256,
    sub: int = 64,
) -> torch.Tensor:
    """:func:`causal_linear_attention` on a packed ``qkv`` ``(B, L, 3, H, D)`` (any strides with
    a unit last one) -> ``(B, L, H, D)`` (:class:`PackedCausalFavorFunction`); ``key_mask``
    ``(B·H, L)``, ``params`` for ``N = B·H`` rows, batch element major. Gradients flow to
    ``qkv``."""
    sub = max(1, min(sub, chunk))
    return PackedCausalFavorFunction.apply(qkv, key_mask, params, chunk, sub)
