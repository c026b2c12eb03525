"""Causal linear attention: a chunked prefix-sum scan with O(m·Dv) carried state per head.

The sequence is processed in blocks of ``chunk`` rows; each block is split into sub-chunks
of ``sub`` rows that are handled together with batched matmuls:

* sub-chunk sums ``U_t = φ(K_t)ᵀ [V_t, 1]`` ``(m, Dv+1)``, their exclusive prefix sums plus
  the carried state give each sub-chunk's prefix ``P_t``;
* ``out_t = φ(Q_t) P_t + tril(φ(Q_t) φ(K_t)ᵀ) [V_t, 1]`` (explicit only inside a sub-chunk).

The custom backward stores no per-position states or ``(L, m)`` features: a forward-order
scan rebuilds the carried state for the query gradients, a reverse scan carries
``Σ φ(q_i) g_iᵀ`` for the key and value gradients. Softmax key features are stabilised by a
running max (state rescaled when it grows), so a large later key cannot underflow earlier
ones: block outputs never depend on later blocks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .feature_maps import FeatureParams, key_features, query_features
from .linear_attention import (
    RunningMax,
    _rows,
    blocks,
    key_block,
    output_adjoint,
    split_output,
    values_with_ones,
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
        m, e = p.nb_features, dv + 1
        softmax = p.spec.kind == "softmax"
        row_term = p.key_row_term(k)
        state = k.new_zeros(n, m, e)
        out = q.new_empty(n, length, dv)
        den = q.new_empty(n, length)
        stab = RunningMax(k)
        refs, seen = [], []
        for sl in blocks(length, chunk):
            c = sl.stop - sl.start
            mc = _rows(mask, sl)
            phi_k = key_block(k[:, sl], p, _rows(row_term, sl), mc, stab, state)
            if softmax:
                refs.append(stab.ref)
                seen.append(torch.isfinite(stab.raw))
            phi_q, _ = query_features(q[:, sl], p)
            fq, fk = _split(phi_q, sub), _split(phi_k, sub)
            va = _split(values_with_ones(v[:, sl], mc), sub)
            prefix, state = _prefix_sums(fk, va, state, n)
            na = torch.bmm(fq, prefix)
            na.baddbmm_(torch.bmm(fq, fk.transpose(1, 2)).tril_(), va)
            split_output(_merge(na, n, c), out[:, sl], den[:, sl])
        ref = torch.stack(refs) if refs else None  # (blocks, N, 1, 1)
        finite = torch.stack(seen) if seen else None
        ctx.params, ctx.chunk, ctx.sub = p, chunk, sub
        ctx.save_for_backward(q, k, v, mask, out, den, ref, finite)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask, out, den, ref, finite = ctx.saved_tensors
        p, chunk, sub = ctx.params, ctx.chunk, ctx.sub
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        n, length, dv = v.shape
        m, e = p.nb_features, dv + 1
        softmax = p.spec.kind == "softmax"
        slices = blocks(length, chunk)
        row_term = p.key_row_term(k)

        def factor(old: int, new: int) -> torch.Tensor | float:
            """Rescales a sum against block ``old``'s stabiliser to block ``new``'s."""
            if not softmax:
                return 1.0
            return torch.where(
                finite[old], torch.exp(ref[old] - ref[new]), torch.zeros_like(ref[new])
            )

        def block_inputs(b: int, sl: slice):
            mc = _rows(mask, sl)
            stabilizer = ref[b] if softmax else None
            phi_k, vjp_k = key_features(k[:, sl], p, _rows(row_term, sl), mc, stabilizer)
            phi_q, vjp_q = query_features(q[:, sl], p)
            va = _split(values_with_ones(v[:, sl], mc), sub)
            gp = _split(output_adjoint(g[:, sl], out[:, sl], den[:, sl]), sub)
            return phi_q, vjp_q, _split(phi_q, sub), phi_k, vjp_k, _split(phi_k, sub), va, gp

        dq = None
        if need_q:  # forward scan: rebuild the carried state
            dq = torch.empty_like(q)
            state = k.new_zeros(n, m, e)
            for b, sl in enumerate(slices):
                c = sl.stop - sl.start
                if b > 0:
                    state.mul_(factor(b - 1, b))
                _, vjp_q, fq, _, _, fk, va, gp = block_inputs(b, sl)
                prefix, state = _prefix_sums(fk, va, state, n)
                dfq = torch.bmm(gp, prefix.transpose(1, 2))
                dfq.baddbmm_(torch.bmm(gp, va.transpose(1, 2)).tril_(), fk)
                dq[:, sl] = vjp_q(_merge(dfq, n, c))

        dk = torch.empty_like(k) if need_k else None
        dv_ = torch.empty_like(v) if need_v else None
        if dk is not None or dv_ is not None:  # reverse scan: carry Σ φ(q) g'ᵀ of later rows
            carry = k.new_zeros(n, m, e)
            for b in range(len(slices) - 1, -1, -1):
                sl = slices[b]
                c = sl.stop - sl.start
                if b < len(slices) - 1:
                    carry.mul_(factor(b, b + 1))
                _, _, fq, _, vjp_k, fk, va, gp = block_inputs(b, sl)
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
        return dq, dk, dv_, None, None, None, None


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
