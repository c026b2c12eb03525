"""FavorAttention: the Performer (FAVOR) attention module with seeded feature redraws."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import nn

from protein_performer.errors import ConfigError
from protein_performer.utils.devices import check_dense_fits

from .base import AttentionKind, AttentionOptions, Rows, check_positions, gather_rows
from .exact import check_key_padding_mask
from .feature_maps import (
    FeatureParams,
    KernelSpec,
    key_features,
    key_logits,
    oprf_statistic,
    oprf_t,
    query_features,
)
from .kernels import fused_cpu
from .kernels.bidirectional import (
    bidirectional_linear_attention,
)
from .kernels.causal import causal_linear_attention, packed_causal_linear_attention
from .projections import NormKind, draw_projection

Estimator = Literal["oprf", "favor+"]

#: Elements of one ``(B·H, rows, m)`` feature block on accelerators (see ``block_rows``).
ACCEL_BLOCK_ELEMENTS = 2**25
#: The most elements of a bidirectional block on a CPU: 1,024 rows of B·H = 8 sequences at m = 256.
CPU_BLOCK_ELEMENTS = 2**21
#: FavorAttention's buffers whose precision is part of the method, with the lowest each
#: keeps: a module-wide cast below it (``precision=bf16-true``) would round the drawn
#: projection and stall the running statistics (their small updates fall below the format's
#: resolution), so such a cast moves them to the new device only. ``.double()`` applies.
MIN_PRECISION = {
    "projection": torch.float32,
    "oprf_stat": torch.float32,
    "oprf_pending": torch.float64,
}


class FavorAttention(AttentionKind):
    """Linear-time attention ``φ(Q) (φ(K)ᵀ V)`` with random features, on ``(B, H, L, D)`` tensors.

    ``kernel="softmax"`` approximates ``softmax(q kᵀ / sqrt(D))`` (q, k come in unscaled;
    the ``D^(-1/4)`` scaling is applied inside). ``kernel="relu"`` is the generalized
    attention ``relu(x Wᵀ) + kernel_eps`` (``projection="none"``: no projection, ``m = D``).

    Estimator (softmax kernel): ``"oprf"`` (default) uses the optimal positive random
    features of Likhosherstov et al. 2022 with orthogonal projections: unbiased, positive,
    bounded in ``w``, with the variance parameter chosen to minimise the mean log second
    moment over query/key pairs — ``"favor+"`` is the ``t = 1`` member of the same family,
    so OPRF is never worse on that criterion and measurably more accurate in practice
    (tests and ``benchmarks/approximation.py``), at the extra cost of O(L·D) statistics. The OPRF parameter is chosen from the query/key
    statistics of the current input (per batch element and head, detached). In causal mode
    that would let future tokens influence past outputs, so there the parameter comes from
    running per-head statistics of past training batches (folded in by
    :meth:`maybe_redraw` at step boundaries, frozen in eval); until the first fold the
    causal estimator is FAVOR+.

    Other options: ``orthogonal`` (block-orthogonal vs iid projection), ``antithetic``
    (use ``w`` and ``-w`` pairs), ``norm`` (``"chi"`` row norms keep the estimator
    unbiased; ``"sqrt_d"`` is the regularized variant), ``redraw_interval`` (training
    steps between projection redraws, 0 = never), ``seed`` and ``layer_idx`` (the
    projection for redraw number ``n`` is drawn from ``(seed, layer_idx, n)``, so DDP ranks
    agree without communication), ``eps`` (added to the row-normalised softmax query
    features), ``kernel_eps`` (ReLU kernel), ``chunk_size`` (rows per block of the
    recomputing kernels; None picks it per device, see :meth:`block_rows`),
    ``subchunk_size`` (causal: rows handled explicitly inside a block), ``stat_momentum``
    (causal OPRF running statistics), ``save_features`` (bidirectional: keep the query and
    key features for the backward, ``2·m`` floats per position and head in place of q (and k,
    ReLU), instead of rebuilding them there; the causal kernel always rebuilds).

    Features and normaliser are computed in float32 (float64 for float64 inputs) with
    autocast disabled; the output has the dtype of ``q``. The projection is a buffer (it
    is saved in checkpoints) and never trains.

    The ``performer_relu`` and ``performer_softmax`` kinds (:mod:`.registry`).
    """

    slot = "favor"
    reads_packed = True

    def __init__(
        self,
        dim_head: int,
        nb_features: int = 256,
        kernel: Literal["softmax", "relu"] = "softmax",
        causal: bool = False,
        orthogonal: bool = True,
        *,
        estimator: Estimator = "oprf",
        antithetic: bool = True,
        norm: NormKind = "chi",
        projection: Literal["random", "none"] = "random",
        redraw_interval: int = 0,
        seed: int = 0,
        layer_idx: int = 0,
        eps: float = 1e-6,
        kernel_eps: float = 1e-3,
        chunk_size: int | None = None,
        subchunk_size: int = 64,
        stat_momentum: float = 0.1,
        save_features: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (
            ("dim_head", dim_head),
            ("nb_features", nb_features),
            ("redraw_interval", redraw_interval),
            ("seed", seed),
            ("layer_idx", layer_idx),
            ("subchunk_size", subchunk_size),
            ("chunk_size", 1 if chunk_size is None else chunk_size),
        ):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {value!r}")
        _check(dim_head >= 1, f"dim_head must be >= 1, got {dim_head}")
        _check(nb_features >= 1, f"nb_features must be >= 1, got {nb_features}")
        _check(kernel in ("softmax", "relu"), f"kernel must be 'softmax' or 'relu', got {kernel!r}")
        _check(
            estimator in ("oprf", "favor+"),
            f"estimator must be 'oprf' or 'favor+', got {estimator!r}",
        )
        _check(
            projection in ("random", "none"),
            f"projection must be 'random' or 'none', got {projection!r}",
        )
        _check(kernel == "relu" or projection == "random", "projection='none' needs kernel='relu'")
        _check(norm in ("chi", "sqrt_d"), f"norm must be 'chi' or 'sqrt_d', got {norm!r}")
        _check(orthogonal or norm == "chi", "norm='sqrt_d' needs orthogonal=True")
        _check(redraw_interval >= 0, f"redraw_interval must be >= 0, got {redraw_interval}")
        _check(eps >= 0 and kernel_eps > 0, "eps must be >= 0 and kernel_eps > 0")
        _check(chunk_size is None or chunk_size >= 1, f"chunk_size must be >= 1, got {chunk_size}")
        _check(subchunk_size >= 1, f"subchunk_size must be >= 1, got {subchunk_size}")
        _check(0 < stat_momentum <= 1, f"stat_momentum must be in (0, 1], got {stat_momentum}")
        self.dim_head = dim_head
        self.kernel = kernel
        self.causal = causal
        self.orthogonal = orthogonal
        self.estimator = estimator
        self.antithetic = antithetic
        self.norm = norm
        self.redraw_interval = redraw_interval
        self.seed = seed
        self.layer_idx = layer_idx
        self.spec = KernelSpec(kind=kernel, eps=eps, kernel_eps=kernel_eps)
        self.chunk_size = chunk_size  # None: chosen per call, see block_rows()
        self.subchunk_size = subchunk_size
        self.stat_momentum = stat_momentum
        self.save_features = save_features
        # bidirectional FAVOR on a CPU projection in the compiled kernel where it builds
        # (fused_cpu); an attribute, not a setting: the results are the same
        self.fused = True
        self.nb_features = dim_head if projection == "none" else nb_features

        self.register_buffer("redraw_counter", torch.zeros((), dtype=torch.long))
        self.projection: torch.Tensor | None
        if projection == "random":
            self.register_buffer("projection", self._draw(0))
        else:
            self.register_buffer("projection", None)
        self._running_oprf = kernel == "softmax" and estimator == "oprf" and causal
        if self._running_oprf:
            # per-head running mean of the OPRF statistic; empty until the first fold
            self.register_buffer("oprf_stat", torch.empty(0))
            # statistics gathered since the last fold; buffers so a checkpoint taken between
            # a forward pass and the next fold resumes exactly
            self.register_buffer("oprf_pending", torch.empty(0, dtype=torch.float64))
            self.register_buffer("oprf_pending_count", torch.zeros((), dtype=torch.long))
            self.register_buffer("oprf_last_fold", torch.full((), -1, dtype=torch.long))

    @classmethod
    def from_options(cls, name: str, options: AttentionOptions) -> FavorAttention:
        """``performer_relu`` / ``performer_softmax``: the kernel is the name's suffix."""
        return cls(
            options.dim_head,
            nb_features=options.nb_features,
            kernel=name.removeprefix("performer_"),  # type: ignore[arg-type]
            causal=options.causal,
            orthogonal=options.orthogonal,
            redraw_interval=options.redraw_interval,
            seed=options.seed,
            layer_idx=options.layer_idx,
            save_features=options.save_features,
        )

    def _apply(self, fn: Any, recurse: bool = True) -> FavorAttention:
        kept = {n: self._buffers[n] for n in MIN_PRECISION if self._buffers.get(n) is not None}
        super()._apply(fn, recurse)
        for name, old in kept.items():
            new, floor = self._buffers[name], MIN_PRECISION[name]
            if new.dtype.is_floating_point and torch.finfo(new.dtype).eps > torch.finfo(floor).eps:
                self._buffers[name] = old.to(device=new.device, dtype=floor)
        return self

    # ---- projections and redraws ------------------------------------------------------

    def _draw(self, counter: int) -> torch.Tensor:
        if torch.empty(()).device.type == "meta":  # (any torch: a device context applies)
            # a model built to be measured, not run (a parameter count, a shape check):
            # drawing would allocate and factorise (m, D) blocks on the CPU for nothing
            return torch.empty(self.nb_features, self.dim_head, dtype=torch.float32)
        if self.nb_features * self.dim_head >= 1 << 23:  # 64 MB in float64: worth a look
            check_dense_fits(
                (self.nb_features, self.dim_head),
                torch.float64,
                torch.device("cpu"),
                "the random projection (nb_features × head size)",
                "use fewer features (nb_features)",
            )
        w = draw_projection(
            self.nb_features,
            self.dim_head,
            seed=self.seed,
            layer_idx=self.layer_idx,
            counter=counter,
            orthogonal=self.orthogonal,
            antithetic=self.antithetic,
            norm=self.norm,
        )
        return w.to(torch.float32)

    @torch.no_grad()
    def redraw_projection(self, counter: int | None = None) -> None:
        """Replace the projection by draw number ``counter`` (default: the next one)."""
        if self.projection is None:
            return
        counter = int(self.redraw_counter) + 1 if counter is None else int(counter)
        self.projection.copy_(self._draw(counter))
        self.redraw_counter.fill_(counter)

    def maybe_redraw(self, global_step: int) -> bool:
        """Training-step hook; returns True if the projection was redrawn.

        In training mode: folds the causal-OPRF statistics gathered since the last step
        into the running estimate, and switches to projection number
        ``global_step // redraw_interval`` when that differs from the current one. Idempotent
        for a given step and a no-op in eval mode (features are frozen in eval).
        """
        if not self.training:
            return False
        if self._running_oprf:
            self._fold_statistics(global_step)
        if self.redraw_interval <= 0 or self.projection is None:
            return False
        target = int(global_step) // self.redraw_interval
        if target == int(self.redraw_counter):
            return False
        self.redraw_projection(target)
        return True

    @torch.no_grad()
    def _fold_statistics(self, global_step: int) -> None:
        count = int(self.oprf_pending_count)
        if int(self.oprf_last_fold) == global_step or count == 0:
            return
        batch_stat = (self.oprf_pending / count).to(self.oprf_stat)
        if self.oprf_stat.shape != batch_stat.shape:
            # resize in place: the buffer object stays the one DDP broadcasts
            self.oprf_stat.resize_(batch_stat.shape).copy_(batch_stat)
        else:
            self.oprf_stat.lerp_(batch_stat, self.stat_momentum)
        self.oprf_pending.zero_()
        self.oprf_pending_count.zero_()
        self.oprf_last_fold.fill_(global_step)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        if self._running_oprf:
            for name in ("oprf_stat", "oprf_pending"):
                stored, own = state_dict.get(prefix + name), getattr(self, name)
                if stored is not None and stored.shape != own.shape:
                    with torch.no_grad():
                        own.resize_(stored.shape)
        super()._load_from_state_dict(state_dict, prefix, *args)

    # ---- feature preparation ------------------------------------------------------------

    def _oprf_t(
        self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, gather: bool
    ) -> torch.Tensor | None:
        """OPRF ``t`` per (batch, head) ``(B, H)``, or None for FAVOR+ (``t = 1``).

        ``gather``: record the causal running statistics (training forward passes only).
        """
        if self.kernel != "softmax" or self.estimator != "oprf":
            return None
        with torch.no_grad():
            valid = None if mask is None else ~mask
            q_valid = valid if q.shape[-2] == k.shape[-2] else None
            # statistic of x = q·D^(-1/4), y = k·D^(-1/4): quadratic, so rescale afterwards
            stat = oprf_statistic(q, k, q_valid, valid) * self.dim_head**-0.5  # (B, H)
            # a non-finite q or k (a diverging step, a bad input), or one so large that t
            # overflows, gives no usable statistic: that (batch, head) falls back to FAVOR+
            # (statistic 0, t = 1), so the bad rows stay its own
            t = oprf_t(stat, self.dim_head)
            usable = torch.isfinite(stat) & torch.isfinite(t)
            if not self.causal:
                return torch.where(usable, t, 1.0)
            if gather and self.training:
                # nor is it folded into the running statistics, which it would spoil for good:
                # those heads count this batch at their running value (before the first fold,
                # FAVOR+'s 0, which the momentum then moves away from as data comes in)
                running = (
                    self.oprf_stat.to(stat)
                    if self.oprf_stat.numel() == stat.shape[1]
                    else torch.zeros_like(stat[0])
                )
                stat = torch.where(usable, stat, running)
                head_stat = stat.mean(0).to(self.oprf_pending)
                if self.oprf_pending.shape != head_stat.shape:
                    self.oprf_pending.resize_(head_stat.shape).zero_()
                    self.oprf_pending_count.zero_()
                self.oprf_pending += head_stat
                self.oprf_pending_count += 1
            if self.oprf_stat.numel() == 0:
                return None  # nothing folded yet: FAVOR+
            if self.oprf_stat.numel() != q.shape[1]:
                raise ValueError(
                    f"causal OPRF holds statistics for {self.oprf_stat.numel()} heads but got "
                    f"{q.shape[1]}; pass all heads (slice the result instead)"
                )
            return oprf_t(self.oprf_stat.to(q), self.dim_head).expand(q.shape[:2])

    def _params(
        self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, gather: bool = False
    ) -> FeatureParams:
        """Feature parameters for ``(B, H, L, D)`` inputs, flattened to ``N = B·H`` rows."""
        bsz, heads = q.shape[:2]
        n = bsz * heads
        base = self.dim_head**-0.25
        if self.projection is None:
            w = torch.eye(self.dim_head, dtype=q.dtype, device=q.device)
        else:
            w = self.projection.to(q.dtype)
        t = self._oprf_t(q, k, mask, gather)
        if t is None:
            scale = torch.full((n, 1, 1), base, dtype=q.dtype, device=q.device)
        else:
            scale = (base * torch.sqrt(t)).reshape(n, 1, 1).to(q.dtype)
        wq = scale * w  # (N, m, D)
        if self.kernel == "relu":
            return FeatureParams(spec=self.spec, wq=wq, wk=wq)
        # keys: [k, −|y|²/2 as a row term, 1] times [scaled W, 1, per-feature bias]
        col_bias = torch.zeros(n, w.shape[0], 1, dtype=q.dtype, device=q.device)
        if t is not None:
            # the per-feature weight exp(2A|w|²), A = (1 − t)/4, moved entirely onto the keys
            col_bias += ((1 - t) / 2).reshape(n, 1, 1).to(q.dtype) * w.pow(2).sum(-1)[:, None]
        ones = torch.ones_like(col_bias)
        wk = torch.cat([wq, ones, col_bias], dim=-1)
        return FeatureParams(spec=self.spec, wq=wq, wk=wk, k_sq_coef=0.5 * base * base)

    def _check_inputs(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> None:
        if q.dim() != 4 or k.dim() != 4:
            raise ValueError(
                f"q and k must be (B, H, L, D), got {tuple(q.shape)}, {tuple(k.shape)}"
            )
        if q.shape[-1] != self.dim_head or k.shape[-1] != self.dim_head:
            raise ValueError(f"head dim must be {self.dim_head}, got {q.shape[-1]}, {k.shape[-1]}")
        if q.shape[:2] != k.shape[:2]:
            raise ValueError(
                f"q and k batch/head dims differ: {tuple(q.shape)} vs {tuple(k.shape)}"
            )
        if self.causal and q.shape[2] != k.shape[2]:
            raise ValueError(f"causal attention needs Lq == Lk, got {q.shape[2]} and {k.shape[2]}")
        check_key_padding_mask(mask, k)
        if not (q.is_floating_point() and k.is_floating_point()):
            raise TypeError(f"q and k must be floating point, got {q.dtype} and {k.dtype}")

    def block_rows(self, device: torch.device, n: int, length: int) -> int:
        """Rows per block of the recomputing kernels for ``n`` sequences of ``length`` (``B·H``;
        ``H`` on the packed route, which takes one batch element at a time).

        ``chunk_size`` when given. On the CPU, where small blocks are fastest, 256 rows
        (causal) and 1024 (bidirectional), fewer when ``n`` is so large that one ``(N, rows,
        m)`` feature block would exceed ``CPU_BLOCK_ELEMENTS`` (8 MiB in float32; at least 64
        rows): a batch of short sequences would otherwise stream 32-64 MiB blocks through
        memory (benchmarks/README.md; the causal kernel measured slower with fewer rows). On
        an accelerator the cost of a small block is kernel launches, so blocks grow until one
        feature tensor reaches ``ACCEL_BLOCK_ELEMENTS`` (128 MiB in float32), never below the
        CPU's rows: memory is bounded by that budget rather than by L.
        """
        if self.chunk_size is not None:
            return self.chunk_size
        base = 256 if self.causal else 1024
        if device.type == "cpu":
            if self.causal:
                return base
            return max(64, min(base, CPU_BLOCK_ELEMENTS // max(1, n * self.nb_features)))
        rows = ACCEL_BLOCK_ELEMENTS // max(1, n * self.nb_features)
        if self.causal:  # whole sub-chunks: a block's tail sub-chunk is zero-padded
            rows -= rows % self.subchunk_size
        return max(base, min(rows, length))

    @staticmethod
    def _flat_mask(mask: torch.Tensor | None, heads: int) -> torch.Tensor | None:
        """``(B, L)`` -> ``(B·H, L)`` bool, or None when nothing is padded (checked on the CPU
        only: on an accelerator the check would stall the launch queue on a host sync)."""
        if mask is None:
            return None
        mask = mask.to(torch.bool)
        if mask.device.type == "cpu" and not bool(mask.any()):
            return None
        return mask.repeat_interleave(heads, dim=0)

    # ---- public computations --------------------------------------------------------------

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``q``: ``(B, H, Lq, D)``, ``k``: ``(B, H, Lk, D)``, ``v``: ``(B, H, Lk, Dv)`` ->
        ``(B, H, Lq, Dv)``. ``key_padding_mask``: ``(B, Lk)`` bool, True = padded key."""
        self._check_inputs(q, k, key_padding_mask)
        if v.dim() != 4 or v.shape[:3] != k.shape[:3]:
            raise ValueError(f"v must be (B, H, Lk, Dv) matching k, got {tuple(v.shape)}")
        if not v.is_floating_point():
            raise TypeError(f"v must be floating point, got {v.dtype}")
        out_dtype = q.dtype
        bsz, heads, lq, _ = q.shape
        lk, dv = k.shape[2], v.shape[3]
        if q.numel() == 0 or k.numel() == 0:
            # nothing to attend from, or to (as with every key padded): zeros, still in the graph
            return (
                (q.sum() + k.sum() + v.sum())
                .mul(0)
                .to(out_dtype)
                .expand(bsz, heads, lq, dv)
                .clone()
            )
        n = bsz * heads
        with torch.autocast(device_type=q.device.type, enabled=False):
            dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
            mask = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
            params = self._params(q, k, mask, gather=True)
            qf, kf, vf = q.reshape(n, lq, -1), k.reshape(n, lk, -1), v.reshape(n, lk, dv)
            flat_mask = self._flat_mask(mask, heads)
            chunk = self.block_rows(q.device, n, max(lq, lk))
            if self.causal:
                out = causal_linear_attention(
                    qf, kf, vf, flat_mask, params, chunk, self.subchunk_size
                )
            else:
                out = bidirectional_linear_attention(
                    qf, kf, vf, flat_mask, params, chunk, self.save_features
                )
        return out.reshape(bsz, heads, lq, dv).to(out_dtype)

    def forward_packed(
        self, qkv: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``qkv`` ``(B, L, 3, H, D)``, the output of a fused q/k/v projection -> ``(B, L, H,
        D)``: :meth:`forward` of its per-head queries, keys and values, in the layout an output
        projection reads. On a CPU these layouts are read and written in place
        (:func:`packed_bidirectional_linear_attention`, :func:`packed_causal_linear_attention`:
        no copy of float32/float64 q, k, v, the output or their gradients; other dtypes are
        computed in float32 from one copy);
        elsewhere this is :meth:`forward` of the views, transposed. Called as a method, not
        through the module: forward hooks on this module do not see it."""
        if qkv.dim() != 5 or qkv.shape[2] != 3:
            raise ValueError(f"qkv must be (B, L, 3, H, D), got {tuple(qkv.shape)}")
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        if qkv.device.type != "cpu" or qkv.numel() == 0:
            return self.forward(q, k, v, key_padding_mask).transpose(1, 2)
        self._check_inputs(q, k, key_padding_mask)
        out_dtype = qkv.dtype
        _, length, _, heads, _ = qkv.shape
        with torch.autocast(device_type=qkv.device.type, enabled=False):
            dtype = torch.float64 if qkv.dtype == torch.float64 else torch.float32
            if qkv.dtype != dtype:
                qkv = qkv.to(dtype)
                q, k, _ = qkv.permute(2, 0, 3, 1, 4)
            mask = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
            params = self._params(q, k, mask, gather=True)
            flat_mask = self._flat_mask(mask, heads)
            chunk = self.block_rows(qkv.device, heads, length)
            if self.causal:
                out = packed_causal_linear_attention(
                    qkv, flat_mask, params, chunk, self.subchunk_size
                )
            else:
                out = fused_cpu.packed_attention(
                    qkv, flat_mask, params, chunk, self.save_features, self.fused
                )
        return out.to(out_dtype)

    def forward_at(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:meth:`forward`'s rows ``positions`` ``(B, P)`` -> ``(B, H, P, Dv)``. Bidirectional:
        the key summary once and the chosen queries' features against it, with the OPRF
        parameter from every query as the forward takes it. Causal: the forward gathered (its
        rows share sub-chunk stabilisers, and its cost is linear already)."""
        check_positions(positions, q.shape[2] if q.dim() == 4 else 0, q.shape[0])
        if self.causal or q.numel() == 0 or k.numel() == 0:
            return super().forward_at(q, k, v, positions, key_padding_mask)
        self._check_inputs(q, k, key_padding_mask)
        out_dtype = q.dtype
        bsz, heads, lq, _ = q.shape
        lk, dv, p = k.shape[2], v.shape[3], positions.shape[1]
        n = bsz * heads
        with torch.autocast(device_type=q.device.type, enabled=False):
            dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
            mask = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
            params = self._params(q, k, mask, gather=True)
            chosen = gather_rows(q, positions).reshape(n, p, -1)
            out = bidirectional_linear_attention(
                chosen,
                k.reshape(n, lk, -1),
                v.reshape(n, lk, dv),
                self._flat_mask(mask, heads),
                params,
                self.block_rows(q.device, n, max(lq, lk)),
                self.save_features,
            )
        return out.reshape(bsz, heads, p, dv).to(out_dtype)

    def features(
        self, q: torch.Tensor, k: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The query and key features ``(B, H, L, m)`` that :meth:`forward` uses (autograd-aware).

        Padded keys get all-zero features. Softmax key features are stabilised by their
        max over features and valid keys (any common factor cancels in the attention).
        """
        self._check_inputs(q, k, key_padding_mask)
        bsz, heads, lq, _ = q.shape
        lk = k.shape[2]
        n = bsz * heads
        with torch.autocast(device_type=q.device.type, enabled=False):
            dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
            q, k = q.to(dtype), k.to(dtype)
            mask = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
            params = self._params(q, k, mask)
            qf, kf = q.reshape(n, lq, -1), k.reshape(n, lk, -1)
            flat_mask = self._flat_mask(mask, heads)
            phi_q, _ = query_features(qf, params)
            row_term = params.key_row_term(kf)
            stab = None
            if self.kernel == "softmax":
                with torch.no_grad():
                    logits = key_logits(kf, params, row_term, flat_mask)
                    stab = logits.amax(dim=(1, 2), keepdim=True)
                    stab = torch.where(torch.isfinite(stab), stab, torch.zeros_like(stab))
            phi_k, _ = key_features(kf, params, row_term, flat_mask, stab)
        return phi_q.reshape(bsz, heads, lq, -1), phi_k.reshape(bsz, heads, lk, -1)

    def rows(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        *,
        chunk_size: int = 256,
        heads: Sequence[int] | None = None,
    ) -> Rows:
        """Yield ``(start, rows)``: the normalised attention rows ``start:start+chunk_size``,
        ``(B, H', rows, Lk)``, implied by the features, for the heads in ``heads`` (all: None).

        Features are computed for every head (a causal OPRF module's folded statistics are
        per head) and then sliced, so peak memory beyond one block is O((B·H)·L·m). Rows sum
        to 1; a row with no visible key is all zeros.
        """
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        n_heads = q.shape[1] if q.dim() == 4 else 0
        bad = [h for h in heads or [] if not 0 <= h < n_heads]
        if bad:
            raise ValueError(
                f"heads: {bad[0]} is not one of the {n_heads} heads (0..{n_heads - 1})"
            )
        phi_q, phi_k = self.features(q, k, key_padding_mask)
        if heads is not None:
            index = torch.as_tensor(list(heads), dtype=torch.long, device=phi_q.device)
            phi_q, phi_k = phi_q.index_select(1, index), phi_k.index_select(1, index)
        lq, lk = phi_q.shape[2], phi_k.shape[2]
        tiny = torch.finfo(phi_q.dtype).tiny
        key_t = phi_k.transpose(-1, -2)
        for start in range(0, lq, chunk_size):
            stop = min(start + chunk_size, lq)
            scores = torch.matmul(phi_q[:, :, start:stop], key_t)
            if self.causal:
                rows = torch.arange(start, stop, device=scores.device)[:, None]
                cols = torch.arange(lk, device=scores.device)[None, :]
                scores = scores.masked_fill(cols > rows, 0.0)
            yield start, scores / scores.sum(-1, keepdim=True).clamp_min(tiny)

    attention_rows = rows  # its name before the common interface

    def matrix(
        self, q: torch.Tensor, k: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """:meth:`attention_matrix` (the interface's name)."""
        return self.attention_matrix(q, k, key_padding_mask)

    def attention_matrix(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        *,
        chunk_size: int = 256,
    ) -> torch.Tensor:
        """The normalised ``(B, H, Lq, Lk)`` attention matrix implied by the features.

        Built ``chunk_size`` query rows at a time (see :meth:`rows`, which also
        selects heads and never holds the whole matrix). Rows sum to 1 (a row with no visible
        key is all zeros); ``matrix @ v`` equals :meth:`forward` (causal softmax: unless key
        logits differ by more than the float's exponent range, where the matrix's one
        stabiliser over all keys and the forward's per-sub-chunk ones underflow different
        rows; see :mod:`~protein_performer.attention.kernels.causal`).
        """
        self._check_inputs(q, k, key_padding_mask)
        check_dense_fits(
            (q.shape[0], q.shape[1], q.shape[2], k.shape[2]),
            torch.float64 if q.dtype == torch.float64 else torch.float32,
            q.device,
            "the attention matrix",
            "rows() yields it a block of rows at a time",
        )
        out = None
        for start, rows in self.rows(q, k, key_padding_mask, chunk_size=chunk_size):
            if out is None:  # filled block by block: never the blocks and the whole at once
                out = rows.new_empty(*rows.shape[:2], q.shape[2], rows.shape[3])
            out[:, :, start : start + rows.shape[2]] = rows
        if out is None:  # no query rows
            out = q.new_zeros(q.shape[0], q.shape[1], 0, k.shape[2])
        return out

    def extra_repr(self) -> str:
        parts = [
            f"dim_head={self.dim_head}",
            f"nb_features={self.nb_features}",
            f"kernel={self.kernel!r}",
            f"causal={self.causal}",
        ]
        if self.kernel == "softmax":
            parts.append(f"estimator={self.estimator!r}")
        parts.append(f"projection={'none' if self.projection is None else 'random'}")
        if self.projection is not None:
            parts += [f"orthogonal={self.orthogonal}", f"antithetic={self.antithetic}"]
        parts.append(f"redraw_interval={self.redraw_interval}")
        return ", ".join(parts)


def prepare_fused_kernel(model: nn.Module) -> bool:
    """Build (or load) the kernel now where ``model`` has bidirectional FAVOR (ReLU or softmax,
    features rebuilt in the backward) on a CPU: its ~30 s compile before training's first
    (timed) step, not inside it. True when the kernel is loaded; raises as
    :func:`.kernels.fused_cpu.kernel`."""
    on_cpu = any(p.device.type == "cpu" for p in model.parameters())
    wanted = on_cpu and any(
        isinstance(m, FavorAttention)
        and not m.causal
        and m.kernel in ("relu", "softmax")
        and m.fused
        and not m.save_features
        for m in model.modules()
    )
    return wanted and fused_cpu.kernel() is not None


def redraw_all(module: nn.Module, global_step: int) -> int:
    """Call :meth:`FavorAttention.maybe_redraw` on every FavorAttention inside ``module``.

    Returns how many projections were redrawn. Call it once per optimizer step (e.g. from
    the training loop's batch-start hook) with the global step.
    """
    return sum(
        int(m.maybe_redraw(global_step)) for m in module.modules() if isinstance(m, FavorAttention)
    )


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


__all__ = ["FavorAttention", "redraw_all"]
