"""Feature maps: unbiasedness of φ(x)·φ(y) for exp(x·y), OPRF parameter and statistic."""

from __future__ import annotations

import math

import pytest
import torch

from protein_performer.attention.feature_maps import (
    FeatureParams,
    KernelSpec,
    Scratch,
    oprf_statistic,
    oprf_t,
    positive_random_features,
    query_features,
    relu_features,
)
from protein_performer.attention.projections import draw_projection

D = 16
M = 64
DRAWS = 1500


def _pairs() -> tuple[torch.Tensor, torch.Tensor]:
    """Query/key pairs (already scaled) with mixed norms and signs of x·y."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, D, generator=g, dtype=torch.float64)
    y = torch.randn(6, D, generator=g, dtype=torch.float64)
    norms = torch.tensor([0.3, 0.5, 0.7, 0.5, 0.8, 0.4], dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True) * norms[:, None]
    y = y / y.norm(dim=1, keepdim=True) * norms.flip(0)[:, None]
    y[3] = -x[3]  # strongly negative x·y
    y[4] = x[4]  # strongly positive x·y
    return x, y


def _z_scores(t: float, *, orthogonal: bool, antithetic: bool, bias: float = 0.0) -> torch.Tensor:
    """(mean estimate - exp(x·y)) / standard error over DRAWS independent projections."""
    x, y = _pairs()
    exact = torch.exp((x * y).sum(-1))
    estimates = []
    for counter in range(DRAWS):
        w = draw_projection(
            M, D, seed=11, counter=counter, orthogonal=orthogonal, antithetic=antithetic
        )
        fx = positive_random_features(x, w, t) + bias
        fy = positive_random_features(y, w, t) + bias
        estimates.append((fx * fy).sum(-1))
    est = torch.stack(estimates)
    # y = -x makes the FAVOR+ product deterministic (zero spread): floor the error at rounding
    se = torch.sqrt(est.var(0) / DRAWS + (1e-12 * exact) ** 2)
    return (est.mean(0) - exact) / se


@pytest.mark.parametrize(
    ("t", "orthogonal", "antithetic"),
    [(1.0, False, False), (1.0, True, False), (1.3, True, False), (1.3, True, True)],
)
def test_positive_features_are_unbiased_for_the_softmax_kernel(
    t: float, orthogonal: bool, antithetic: bool
) -> None:
    z = _z_scores(t, orthogonal=orthogonal, antithetic=antithetic)
    assert z.abs().max() < 4.5, z


def test_unbiasedness_check_detects_a_small_epsilon_bias() -> None:
    """The same check flags a performer-style epsilon of 1% of the mean feature."""
    z = _z_scores(1.3, orthogonal=True, antithetic=True, bias=0.01 / math.sqrt(M))
    assert z.abs().max() > 6, z


def test_second_moment_matches_closed_form() -> None:
    """E[f(w,x)² f(w,y)²] = t^D (2t−1)^(−D/2) exp(2t|x+y|²/(2t−1) − |x|² − |y|²) (m = 1)."""
    x, y = _pairs()
    x, y = x[:3] * 0.6, y[:3] * 0.6
    g = torch.Generator().manual_seed(5)
    w = torch.randn(400_000, D, generator=g, dtype=torch.float64)
    for t in (1.0, 1.2):
        prod = (positive_random_features(x, w, t) * positive_random_features(y, w, t)) * w.shape[0]
        second = prod.pow(2).mean(-1)
        s2 = (x + y).pow(2).sum(-1)
        closed = torch.exp(
            D * math.log(t)
            - D / 2 * math.log(2 * t - 1)
            + 2 * t / (2 * t - 1) * s2
            - x.pow(2).sum(-1)
            - y.pow(2).sum(-1)
        )
        torch.testing.assert_close(second, closed, rtol=0.03, atol=0)


def test_oprf_t_solves_the_stationarity_equation_and_minimises_the_objective() -> None:
    stat = torch.tensor([0.0, 0.5, 2.0, 9.0, 40.0], dtype=torch.float64)
    t = oprf_t(stat, D)
    assert t[0].item() == pytest.approx(1.0)
    assert torch.all(t[1:] > 1) and torch.all(t.diff() > 0)
    torch.testing.assert_close(2 * D * t**2 - (3 * D + 2 * stat) * t + D, torch.zeros_like(t))
    grid = torch.linspace(0.51, 4.0, 20_000, dtype=torch.float64)[:, None]
    objective = D * grid.log() - D / 2 * (2 * grid - 1).log() + 2 * grid / (2 * grid - 1) * stat
    best = grid[objective.argmin(0), 0]
    torch.testing.assert_close(t, best, atol=2e-3, rtol=0)


def test_oprf_statistic_equals_mean_over_pairs_with_masks() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 7, 5, generator=g, dtype=torch.float64)
    y = torch.randn(2, 3, 7, 5, generator=g, dtype=torch.float64) + 0.5
    valid = torch.ones(2, 7, dtype=torch.bool)
    valid[0, 5:] = False
    valid[1, :2] = False
    got = oprf_statistic(x, y, valid, valid)
    for b in range(2):
        idx = valid[b].nonzero()[:, 0]
        pairs = x[b][:, idx, None, :] + y[b][:, None, idx, :]
        torch.testing.assert_close(got[b], pairs.pow(2).sum(-1).mean((-1, -2)))
    unmasked = (x[..., :, None, :] + y[..., None, :, :]).pow(2).sum(-1).mean((-1, -2))
    torch.testing.assert_close(oprf_statistic(x, y), unmasked)
    # padded rows may hold anything: they are selected away, never multiplied
    x[0, :, 5:], y[1, :, 0], y[1, :, 1] = float("inf"), float("nan"), float("-inf")
    torch.testing.assert_close(oprf_statistic(x, y, valid, valid), got)
    # one valid key (a row of a single token): the statistic of that one pair
    one = torch.zeros(2, 7, dtype=torch.bool)
    one[:, 3] = True
    single = (x[..., 3, :] + y[..., 3, :]).pow(2).sum(-1)
    torch.testing.assert_close(oprf_statistic(x, y, one, one), single)


def test_relu_features_definition() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    w = torch.randn(9, 6, generator=g, dtype=torch.float64)
    torch.testing.assert_close(relu_features(x, w), (x @ w.T).clamp_min(0) + 1e-3)
    torch.testing.assert_close(relu_features(x, None, 0.01), x.clamp_min(0) + 0.01)


def test_scratch_blocks_reuse_one_buffer_per_role_and_grow_when_needed() -> None:
    scratch = Scratch()
    like = torch.zeros(1, dtype=torch.float64)
    a = scratch.block("x", like, 2, 3, 4)
    assert a.shape == (2, 3, 4) and a.is_contiguous() and a.dtype == torch.float64
    b = scratch.block("x", like, 2, 2, 4)  # a shorter last block: a view of the same memory
    assert b.is_contiguous() and b.data_ptr() == a.data_ptr()
    assert scratch.block("y", like, 2, 3, 4).data_ptr() != a.data_ptr()
    bigger = scratch.block("x", like, 3, 3, 4)
    assert bigger.shape == (3, 3, 4)
    assert scratch.block("x", torch.zeros(1), 2, 3, 4).dtype == torch.float32


@pytest.mark.parametrize("kind", ["softmax", "relu"])
def test_features_without_offset_are_the_features_minus_the_constant(kind: str) -> None:
    g = torch.Generator().manual_seed(0)
    spec = KernelSpec(kind=kind, eps=1e-3, kernel_eps=1e-2)
    wq = torch.randn(2, 8, 4, generator=g, dtype=torch.float64)
    wk = wq if kind == "relu" else torch.randn(2, 8, 6, generator=g, dtype=torch.float64)
    p = FeatureParams(spec, wq, wk, k_sq_coef=0.5 if kind == "softmax" else 0.0)
    q = torch.randn(2, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    with_offset, _ = query_features(q, p)
    without, _ = query_features(q, p, offset=False)
    torch.testing.assert_close(with_offset - without, torch.full_like(without, spec.query_offset))
    # the vjps of both agree with autograd through the features
    dphi = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    (want,) = torch.autograd.grad((without * dphi).sum(), q)
    with torch.no_grad():
        for offset in (True, False):
            _, vjp = query_features(q, p, offset=offset, scratch=Scratch())
            torch.testing.assert_close(vjp(dphi.clone()), want)
