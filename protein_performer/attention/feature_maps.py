"""Every feature map of the attention kinds, in one place: the random features of the softmax
kernel ``exp(x·y)`` and the ReLU kernel (FAVOR), the exact second-order Taylor features of
``exp`` (Taylor) and the learned maps of Hedgehog; then the block-level helpers FAVOR's kernels
build features with.

Notation: ``x = q · D^(-1/4)``, ``y = k · D^(-1/4)``, so ``exp(x·y)`` is the unnormalised
softmax attention weight ``exp(q·k / sqrt(D))``. ``w_r`` are the rows of the ``(m, D)``
projection, each marginally ``N(0, I_D)``.

Softmax kernel, generalized positive features (Likhosherstov et al. 2022, arXiv 2205.15317)::

    f(w, x) = D_t · exp(A |w|² + B w·x − |x|²/2),   B = sqrt(t), A = (1 − t)/4,
    D_t = t^(D/4),  t = 1 − 4A > 1/2.

With ``w ~ N(0, I)``: ``E[f(w,x) f(w,y)] = D_t² (1−4A)^(−D/2) exp(B²|x+y|²/(2(1−4A)) −
(|x|²+|y|²)/2) = exp(x·y)`` for every admissible ``t``, so the estimator
``φ(x)·φ(y) = (1/m) Σ_r f(w_r, x) f(w_r, y)`` is unbiased. ``t = 1`` is FAVOR+
(Choromanski et al. 2021). The second moment is
``t^D (2t−1)^(−D/2) exp(2t|x+y|²/(2t−1) − |x|² − |y|²)``; minimising its logarithm averaged
over all query/key pairs (statistic ``S = mean|x+y|²``) gives the OPRF choice
``2D t² − (3D + 2S) t + D = 0`` (larger root; ``t = 1`` when ``S = 0``). For ``t > 1`` we have
``A < 0``: the features are bounded in ``w`` and have much lighter tails than FAVOR+.

In attention, per-query constants cancel between numerator and denominator, so the
attention path uses proportional features: queries ``softmax_r(B w_r·x) + eps`` and keys
``exp(B w_r·y + 2A|w_r|² − |y|²/2 − M)`` with a detached stabilizer ``M`` (a max over
features and keys). :func:`positive_random_features` returns the raw, unstabilised
features for checking unbiasedness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import nn

KernelKind = Literal["softmax", "relu"]


@dataclass(frozen=True)
class KernelSpec:
    """What the chunked attention kernels need to rebuild features chunk by chunk.

    ``kind``: ``"softmax"`` (exp features, query rows normalised, keys stabilised by a
    running max) or ``"relu"`` (``relu(.) + kernel_eps`` on both sides).
    ``eps``: added to the (row-normalised) softmax query features; keeps the normaliser
    strictly positive when exponentials underflow. ``kernel_eps``: ReLU kernel epsilon.
    """

    kind: KernelKind
    eps: float = 1e-6
    kernel_eps: float = 1e-3

    @property
    def query_offset(self) -> float:
        """The constant every query feature carries (``eps`` / ``kernel_eps``)."""
        return self.eps if self.kind == "softmax" else self.kernel_eps

    @property
    def key_offset(self) -> float:
        """The constant every (unpadded) key feature carries: 0 / ``kernel_eps``."""
        return 0.0 if self.kind == "softmax" else self.kernel_eps


def oprf_t(stat: torch.Tensor, dim: int) -> torch.Tensor:
    """OPRF parameter ``t = 1 − 4A`` minimising the mean log second moment, for ``S = stat``."""
    stat = stat.clamp_min(0)
    b = 3 * dim + 2 * stat
    return (b + torch.sqrt(b * b - 8 * dim * dim)) / (4 * dim)


def oprf_statistic(
    x: torch.Tensor,
    y: torch.Tensor,
    x_valid: torch.Tensor | None = None,
    y_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """``S = mean_{i,j} |x_i + y_j|²`` over valid positions, shape ``x.shape[:-2]``.

    ``x``: ``(..., Lq, D)``, ``y``: ``(..., Lk, D)``; ``*_valid``: ``(B, L)`` bool (True =
    counted) broadcast over the head dimension. Computed in O(L·D) as
    ``mean|x|² + mean|y|² + 2 mean(x)·mean(y)``.
    """

    def moments(t: torch.Tensor, valid: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        # squares through row norms: a norm over (L, D) of a strided view (a head of a fused
        # projection) is several times slower than (L,) norms over D, and keeps no squares
        sq = torch.linalg.vector_norm(t, dim=-1).square()  # (..., L)
        if valid is None:
            return sq.mean(-1), t.mean(-2)
        v = valid[:, None, :]
        count = v.to(t.dtype).sum(-1).clamp_min(1)
        # padded rows may hold inf/NaN: select, never multiply them
        sq = torch.where(v, sq, 0.0).sum(-1) / count
        return sq, torch.where(v[..., None], t, 0.0).sum(-2) / count[..., None]

    x2, xm = moments(x, x_valid)
    y2, ym = moments(y, y_valid)
    return x2 + y2 + 2 * (xm * ym).sum(-1)


def positive_random_features(
    x: torch.Tensor, projection: torch.Tensor, t: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """Raw unbiased positive features ``(..., L, m)`` of ``x`` ``(..., L, D)`` (already scaled).

    ``φ(x)·φ(y)`` is an unbiased estimate of ``exp(x·y)``; ``t=1`` is FAVOR+, other ``t``
    the generalized (OPRF) family. ``t`` may be a tensor broadcastable to ``x.shape[:-2]``.
    No stabiliser: use only for moderate norms (tests, analysis).
    """
    dim = x.shape[-1]
    m = projection.shape[0]
    t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
    t = t.reshape(*t.shape, 1, 1)
    w = projection.to(x)
    a = (1 - t) / 4
    exponent = (
        torch.sqrt(t) * torch.matmul(x, w.T)
        + a * w.pow(2).sum(-1)
        - x.pow(2).sum(-1, keepdim=True) / 2
        + dim / 4 * torch.log(t)
        - math.log(m) / 2
    )
    return torch.exp(exponent)


def relu_features(
    x: torch.Tensor, projection: torch.Tensor | None, kernel_eps: float = 1e-3
) -> torch.Tensor:
    """Generalized-attention ReLU features ``relu(x Wᵀ) + kernel_eps`` (``W = I`` if None)."""
    e = x if projection is None else torch.matmul(x, projection.to(x).T)
    return torch.relu(e) + kernel_eps


def taylor_feature_dim(dim: int) -> int:
    """Number of Taylor features ``F`` for a head size ``dim``."""
    return 1 + dim + dim * (dim + 1) // 2


def taylor_features(x: torch.Tensor) -> torch.Tensor:
    """``(..., L, D)`` (already scaled) -> ``(..., L, F)`` with ``φ(x)·φ(y) = 1 + x·y + (x·y)²/2``."""
    d = x.shape[-1]
    i, j = torch.triu_indices(d, d, device=x.device)
    weight = torch.ones(len(i), dtype=x.dtype, device=x.device)
    weight[i == j] = 1 / math.sqrt(2)
    quad = x[..., i] * x[..., j] * weight
    return torch.cat([torch.ones_like(x[..., :1]), x, quad], dim=-1)


def taylor_kernel(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``(..., Lq, D)``, ``(..., Lk, D)`` raw queries/keys -> ``(..., Lq, Lk)`` kernel
    ``1 + s + s²/2`` with ``s = q·k / sqrt(D)`` (the unnormalised attention weights)."""
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return 1 + s + s * s / 2


class HedgehogFeatureMaps(nn.Module):
    """Hedgehog's learned query and key maps of ``heads`` heads of size ``dim_head``, ``2·half``
    features each: ``φ(x) = [softmax(x W + b), softmax(−(x W + b))]``.

    ``forward``-free: :meth:`query` and :meth:`key` map ``(B, H', L, D)`` rows of the heads
    ``first, …, first + H' − 1`` to ``(B, H', L, 2·half)`` features."""

    def __init__(self, heads: int, dim_head: int, half: int) -> None:
        super().__init__()
        self.q_weight = nn.Parameter(torch.empty(heads, dim_head, half))
        self.q_bias = nn.Parameter(torch.zeros(heads, half))
        self.k_weight = nn.Parameter(torch.empty(heads, dim_head, half))
        self.k_bias = nn.Parameter(torch.zeros(heads, half))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _, dim, half = self.q_weight.shape
        with torch.no_grad():
            for w in (self.q_weight, self.k_weight):
                w.normal_(0.0, dim**-0.5)  # the columns past D
                w[:, :, : min(dim, half)] = torch.eye(dim, min(dim, half))
            self.q_bias.zero_()
            self.k_bias.zero_()

    @staticmethod
    def _map(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        z = torch.matmul(x, w.to(x.dtype)) + b.to(x.dtype)[:, None, :]
        return torch.cat([torch.softmax(z, dim=-1), torch.softmax(-z, dim=-1)], dim=-1)

    def query(self, x: torch.Tensor, first: int = 0) -> torch.Tensor:
        h = x.shape[1]
        return self._map(x, self.q_weight[first : first + h], self.q_bias[first : first + h])

    def key(self, x: torch.Tensor, first: int = 0) -> torch.Tensor:
        h = x.shape[1]
        return self._map(x, self.k_weight[first : first + h], self.k_bias[first : first + h])

    def kernel(self, q: torch.Tensor, k: torch.Tensor, first: int = 0) -> torch.Tensor:
        """``(B, H', Lq, Lk)``: the unnormalised attention weights ``φ(q)·φ(k)``."""
        return torch.matmul(self.query(q, first), self.key(k, first).transpose(-1, -2))


# ---- block-level helpers shared by the custom autograd functions and FavorAttention ---------


@dataclass(frozen=True)
class FeatureParams:
    """Everything needed to turn raw ``q``/``k`` rows into features, for ``N = B·H`` rows.

    ``wq``: ``(N, m, D)``, the projection with the per-row query scale folded in: query
    logits are ``q wqᵀ``. ``wk``: ``(N, m, D)`` (ReLU) or ``(N, m, D+2)`` (softmax):
    key logits are ``[k, −k_sq_coef·|k|², 1] wkᵀ``, i.e. ``wk = [k_scale·W, 1, col_bias]``
    adds the per-key row term and the per-feature bias inside the same matmul. All
    detached (the projection never trains; the OPRF parameter is not differentiated).
    """

    spec: KernelSpec
    wq: torch.Tensor
    wk: torch.Tensor
    k_sq_coef: float = 0.0

    @property
    def nb_features(self) -> int:
        return self.wq.shape[1]

    @property
    def augmented(self) -> bool:
        return self.wk.shape[-1] != self.wq.shape[-1]

    def key_row_term(self, k: torch.Tensor) -> torch.Tensor | None:
        """``−k_sq_coef·|k|²`` ``(N, L)`` for the softmax kernel, else None."""
        if not self.augmented:
            return None
        norm = torch.linalg.vector_norm(k, dim=-1)
        if torch.is_grad_enabled():
            return norm.square() * -self.k_sq_coef
        return norm.square_().mul_(-self.k_sq_coef)


class Scratch:
    """Reusable blocks for the chunked kernels, one flat buffer per role.

    A fresh ``(N, rows, m)`` tensor per block costs page faults on a CPU (a large allocation
    is new memory to the OS each time: measured 1.7 ms per 8 MiB block among the model's
    other allocations, more than the matmul that fills it); :meth:`block` hands out a
    contiguous view of a buffer kept for that role instead. Only for code that runs without
    autograd (the custom functions): a block is overwritten by the next request of its role.
    """

    def __init__(self) -> None:
        self._flat: dict[str, torch.Tensor] = {}

    def block(self, role: str, like: torch.Tensor, *shape: int) -> torch.Tensor:
        """A contiguous ``shape`` tensor with ``like``'s dtype and device (contents undefined)."""
        numel = math.prod(shape)
        buf = self._flat.get(role)
        if (
            buf is None
            or buf.numel() < numel
            or buf.dtype != like.dtype
            or buf.device != like.device
        ):
            buf = self._flat[role] = like.new_empty(numel)
        return buf[:numel].view(shape)


class Vjp(Protocol):
    """``dΦ -> d(input)`` of a feature map; with ``out`` the result is written there (a
    reusable block instead of a fresh tensor)."""

    def __call__(self, dphi: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor: ...


def scratch_block(
    scratch: Scratch | None, role: str, like: torch.Tensor, *shape: int
) -> torch.Tensor | None:
    """``scratch.block(...)``, or None (a fresh tensor: ``out=None``) without a scratch."""
    return None if scratch is None else scratch.block(role, like, *shape)


def query_features(
    q: torch.Tensor, p: FeatureParams, offset: bool = True, scratch: Scratch | None = None
) -> tuple[torch.Tensor, Vjp]:
    """Query features ``(N, c, m)`` of raw ``q`` ``(N, c, D)``, and ``dΦq -> dq``.

    Softmax: ``softmax_r(logits) + eps`` (a query's scale cancels in the attention).
    ReLU: ``relu(logits) + kernel_eps``. ``offset=False`` leaves out the added constant
    (:attr:`KernelSpec.query_offset`): a kernel that adds its contribution as one rank-one
    term saves a pass over the ``(N, c, m)`` block. In place where autograd is off;
    ``scratch`` (autograd off only) holds the features and the vjp's blocks.
    """
    spec = p.spec
    inplace = not torch.is_grad_enabled()
    n, c, m = q.shape[0], q.shape[1], p.nb_features
    e = torch.bmm(q, p.wq.transpose(1, 2), out=scratch_block(scratch, "q_logits", q, n, c, m))
    add = spec.query_offset if offset else 0.0
    if spec.kind == "softmax":
        if scratch is None:
            phi = torch.softmax(e, dim=-1)
        else:
            phi = torch.ops.aten._softmax.out(
                e, -1, False, out=scratch.block("q_features", q, n, c, m)
            )
        del e
    else:
        phi = e.relu_() if inplace else torch.relu(e)
    if add:
        phi = phi.add_(add) if inplace else phi + add
    return phi, query_vjp(phi, p, offset, scratch)


def query_vjp(
    phi: torch.Tensor, p: FeatureParams, offset: bool = True, scratch: Scratch | None = None
) -> Vjp:
    """``dΦq -> dq`` from the features ``phi`` ``(N, c, m)`` alone (with or without their
    ``offset``, as :func:`query_features` made them): what lets a backward keep features
    instead of the logits behind them."""
    spec = p.spec
    add = spec.query_offset if offset else 0.0
    if spec.kind == "softmax":

        def vjp(dphi: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
            prob = phi - add if add else phi
            if scratch is None:
                grad = torch.ops.aten._softmax_backward_data(dphi, prob, -1, prob.dtype)
            else:
                grad = torch.ops.aten._softmax_backward_data.out(
                    dphi,
                    prob,
                    -1,
                    prob.dtype,
                    grad_input=scratch.block("q_dlogits", phi, *phi.shape),
                )
            return torch.bmm(grad, p.wq, out=out)

        return vjp

    def vjp_relu(dphi: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        # relu(e) + add > add exactly where e > 0 (up to e below add's last bit)
        return torch.bmm(_relu_backward(dphi, phi, add), p.wq, out=out)

    return vjp_relu


def key_logits(
    k: torch.Tensor,
    p: FeatureParams,
    row_term: torch.Tensor | None,
    mask: torch.Tensor | None,
    scratch: Scratch | None = None,
) -> torch.Tensor:
    """Key logits ``(N, c, m)``; ``row_term`` ``(N, c)`` from :meth:`FeatureParams.key_row_term`;
    ``mask`` ``(N, c)`` True = padded key (softmax logit ``-inf``)."""
    n, c, m = k.shape[0], k.shape[1], p.nb_features
    out = scratch_block(scratch, "k_logits", k, n, c, m)
    if not p.augmented:
        return torch.bmm(k, p.wk.transpose(1, 2), out=out)
    k_aug = torch.cat([k, row_term[..., None], torch.ones_like(row_term)[..., None]], dim=-1)
    if mask is not None:
        # padded rows may hold anything (inf, nan): replace them by a row whose logits are -inf
        k_aug = k_aug.masked_fill(mask[..., None], 0.0)
        k_aug[..., -2] = k_aug[..., -2].masked_fill(mask, float("-inf"))
    return torch.bmm(k_aug, p.wk.transpose(1, 2), out=out)


def key_features(
    k: torch.Tensor,
    p: FeatureParams,
    row_term: torch.Tensor | None,
    mask: torch.Tensor | None,
    stabilizer: torch.Tensor | None = None,
    logits: torch.Tensor | None = None,
    offset: bool = True,
    scratch: Scratch | None = None,
) -> tuple[torch.Tensor, Vjp]:
    """Key features ``(N, c, m)`` of raw ``k`` ``(N, c, D)`` and ``dΦk -> dk``.

    Softmax: ``exp(logits − stabilizer)`` (``(N, 1, 1)``, detached); pass ``logits`` if
    already computed (they are overwritten when autograd is off). ReLU: ``relu(logits) +
    kernel_eps`` (``offset=False``: without ``kernel_eps``). Padded keys (``mask`` True) get
    all-zero features. ``scratch``: as for :func:`query_features`.
    """
    spec = p.spec
    inplace = not torch.is_grad_enabled()
    e = key_logits(k, p, row_term, mask, scratch) if logits is None else logits
    if spec.kind == "softmax":
        if stabilizer is not None:
            e = e.sub_(stabilizer) if inplace else e - stabilizer
        phi = e.exp_() if inplace else torch.exp(e)
    else:
        add = spec.key_offset if offset else 0.0
        phi = e.relu_() if inplace else torch.relu(e)
        if add:
            phi = phi.add_(add) if inplace else phi + add
        if mask is not None:
            mask3 = mask[..., None]
            phi = phi.masked_fill_(mask3, 0.0) if inplace else phi.masked_fill(mask3, 0.0)
    return phi, key_vjp(phi, k, mask, p, offset)


def key_vjp(
    phi: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None,
    p: FeatureParams,
    offset: bool = True,
) -> Vjp:
    """``dΦk -> dk`` from the features ``phi`` ``(N, c, m)`` of ``k`` ``(N, c, D)`` (with or
    without their offset, see :func:`key_features`; ``dΦk`` is overwritten). Softmax: valid
    for features against any stabiliser (it is detached)."""
    if p.spec.kind == "softmax":

        def vjp(dphi: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
            grad_aug = torch.bmm(dphi.mul_(phi), p.wk)  # (N, c, D+2)
            dk = grad_aug[..., :-2]
            # d(row term)/dk = -2·k_sq_coef·k (padded keys, which may hold inf, get 0)
            kk = k if mask is None else k.masked_fill(mask[..., None], 0.0)
            dk = dk.addcmul_(kk, grad_aug[..., -2:-1], value=-2 * p.k_sq_coef)
            return dk if out is None else out.copy_(dk)

        return vjp
    add = p.spec.key_offset if offset else 0.0

    def vjp_relu(dphi: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        # padded keys have phi = 0: no gradient, as for e <= 0
        return torch.bmm(_relu_backward(dphi, phi, add), p.wk, out=out)

    return vjp_relu


def _relu_backward(dphi: torch.Tensor, phi: torch.Tensor, threshold: float) -> torch.Tensor:
    """``dphi`` where ``phi > threshold``, else 0, written into ``dphi`` (one fused pass; a
    bool-mask multiply costs several)."""
    return torch.ops.aten.threshold_backward.grad_input(dphi, phi, threshold, grad_input=dphi)
