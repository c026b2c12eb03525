"""FavorAttention module: approximation quality, ReLU kernel, attention matrix, redraws,
checkpoints, causal OPRF statistics, mixed precision, configuration errors."""

from __future__ import annotations

import io
import itertools
import statistics

import numpy as np
import pytest
import torch
from torch import nn

from protein_performer.attention import FavorAttention, exact_attention, redraw_all
from protein_performer.attention.feature_maps import (
    oprf_statistic,
    oprf_t,
    positive_random_features,
)
from protein_performer.errors import ConfigError
from tests.attention.reference import explicit_from_features, relative_error


def _qkv(b, h, length, d, sigma, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, length, d, generator=g, dtype=torch.float64) * sigma
    k = torch.randn(b, h, length, d, generator=g, dtype=torch.float64) * sigma
    v = torch.randn(b, h, length, d, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _mean_error(sigma: float, m: int, seeds: range, **kwargs) -> float:
    q, k, v = _qkv(1, 4, 128, 16, sigma)
    exact = exact_attention(q, k, v)
    errors = []
    for seed in seeds:
        attn = FavorAttention(16, m, seed=seed, **kwargs).double()
        with torch.no_grad():
            errors.append(relative_error(attn(q, k, v), exact))
    return statistics.mean(errors)


# ---- approximation quality ---------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["oprf", "favor+"])
def test_softmax_estimator_converges_to_exact_attention(estimator: str) -> None:
    errors = [_mean_error(0.5, m, range(3), estimator=estimator) for m in (16, 64, 256, 4096)]
    assert all(a > b for a, b in itertools.pairwise(errors)), errors
    assert errors[-1] < errors[0] / 6, errors  # Monte Carlo rate 1/sqrt(m) would give /16
    assert errors[-1] < 0.06, errors


def test_orthogonal_beats_iid_on_average() -> None:
    common = {"estimator": "favor+", "antithetic": False}
    iid = _mean_error(0.3, 64, range(16), orthogonal=False, **common)
    orth = _mean_error(0.3, 64, range(16), orthogonal=True, **common)
    assert orth < 0.95 * iid, (orth, iid)


def test_oprf_beats_plain_favor_plus_on_average() -> None:
    favor = _mean_error(0.5, 64, range(16), estimator="favor+", antithetic=False)
    oprf = _mean_error(0.5, 64, range(16), estimator="oprf", antithetic=False)
    default = _mean_error(0.5, 64, range(16))
    assert oprf < 0.9 * favor, (oprf, favor)
    assert default < 0.9 * favor, (default, favor)


def test_attention_uses_the_unbiased_feature_estimator() -> None:
    """With eps=0 the attention matrix is exactly normalize(φ(x)·φ(y)) for the raw unbiased
    OPRF features (per-query constants and the stabiliser cancel)."""
    attn = FavorAttention(16, 48, eps=0.0).double()
    q, k, _ = _qkv(2, 2, 21, 16, 0.7, seed=1)
    x, y = q * 16**-0.25, k * 16**-0.25
    t = oprf_t(oprf_statistic(x, y), 16)
    raw_q = positive_random_features(x, attn.projection.double(), t)
    raw_k = positive_random_features(y, attn.projection.double(), t)
    scores = raw_q @ raw_k.transpose(-1, -2)
    torch.testing.assert_close(attn.attention_matrix(q, k), scores / scores.sum(-1, keepdim=True))


# ---- ReLU kernel ---------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("projection", ["random", "none"])
def test_relu_kernel_equals_explicit_normalized_relu_feature_attention(
    causal: bool, projection: str
) -> None:
    attn = FavorAttention(16, 24, kernel="relu", causal=causal, projection=projection).double()
    q, k, v = _qkv(2, 3, 19, 16, 1.0, seed=2)
    w = torch.eye(16, dtype=torch.float64) if projection == "none" else attn.projection.double()
    phi_q = torch.relu(q * 16**-0.25 @ w.T) + 1e-3
    phi_k = torch.relu(k * 16**-0.25 @ w.T) + 1e-3
    weights = phi_q @ phi_k.transpose(-1, -2)
    if causal:
        weights = weights.tril()
    expected = weights @ v / weights.sum(-1, keepdim=True)
    torch.testing.assert_close(attn(q, k, v), expected, atol=1e-12, rtol=1e-10)
    assert attn.nb_features == (16 if projection == "none" else 24)


# ---- attention matrix ----------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel", ["softmax", "relu"])
def test_attention_matrix_rows_sum_to_one_and_reproduce_forward(causal: bool, kernel: str) -> None:
    attn = FavorAttention(16, 32, kernel=kernel, causal=causal).double()
    q, k, v = _qkv(2, 2, 27, 16, 0.8, seed=3)
    mask = torch.zeros(2, 27, dtype=torch.bool)
    mask[0, 20:] = True
    mat = attn.attention_matrix(q, k, key_padding_mask=mask, chunk_size=5)
    assert mat.shape == (2, 2, 27, 27)
    assert (mat >= 0).all()
    torch.testing.assert_close(mat.sum(-1), torch.ones(2, 2, 27, dtype=torch.float64))
    assert (mat[0, :, :, 20:] == 0).all()
    if causal:
        assert (mat.triu(diagonal=1) == 0).all()
    phi_q, phi_k = attn.features(q, k, key_padding_mask=mask)
    scores = phi_q @ phi_k.transpose(-1, -2)
    if causal:
        scores = scores.tril()
    torch.testing.assert_close(mat, scores / scores.sum(-1, keepdim=True))
    torch.testing.assert_close(mat @ v, attn(q, k, v, key_padding_mask=mask))
    torch.testing.assert_close(attn.attention_matrix(q, k, mask, chunk_size=100), mat)


def test_attention_matrix_approximates_softmax_with_many_features() -> None:
    attn = FavorAttention(16, 8192).double()
    q, k, _ = _qkv(1, 1, 40, 16, 0.6, seed=4)
    exact = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
    assert relative_error(attn.attention_matrix(q, k), exact) < 0.05


# ---- redraws and checkpoints -----------------------------------------------------------------


def test_same_seed_and_layer_agree_and_layers_differ() -> None:
    a = FavorAttention(32, 64, seed=5, layer_idx=1)
    b = FavorAttention(32, 64, seed=5, layer_idx=1)
    c = FavorAttention(32, 64, seed=5, layer_idx=2)
    assert torch.equal(a.projection, b.projection)
    assert not torch.allclose(a.projection, c.projection)
    for step in (0, 7, 10, 19, 20, 45):
        a.redraw_interval = b.redraw_interval = c.redraw_interval = 10
        a.maybe_redraw(step)
        b.maybe_redraw(step)
        c.maybe_redraw(step)
        assert torch.equal(a.projection, b.projection)
        assert not torch.allclose(a.projection, c.projection)
    assert int(a.redraw_counter) == 4


def test_maybe_redraw_follows_the_global_step_and_is_frozen_in_eval() -> None:
    attn = FavorAttention(16, 32, redraw_interval=10, seed=1)
    first = attn.projection.clone()
    assert not attn.maybe_redraw(0)
    assert not attn.maybe_redraw(9)
    assert attn.maybe_redraw(10)
    assert not attn.maybe_redraw(10)  # idempotent within a step
    assert int(attn.redraw_counter) == 1
    second = attn.projection.clone()
    assert not torch.equal(first, second)
    attn.eval()
    assert not attn.maybe_redraw(100)
    assert torch.equal(attn.projection, second)
    attn.train()
    assert attn.maybe_redraw(100) and int(attn.redraw_counter) == 10
    attn.redraw_projection(0)
    assert torch.equal(attn.projection, first)
    never = FavorAttention(16, 32, redraw_interval=0)
    assert not never.maybe_redraw(1000)


def test_redraw_all_reaches_every_module() -> None:
    model = nn.ModuleList(
        [FavorAttention(8, 16, redraw_interval=5, layer_idx=i) for i in range(3)]
        + [nn.Linear(2, 2), FavorAttention(8, 16, kernel="relu", projection="none")]
    )
    assert redraw_all(model, 4) == 0
    assert redraw_all(model, 5) == 3
    assert all(int(m.redraw_counter) == 1 for m in model[:3])


@pytest.mark.parametrize("causal", [False, True])
def test_checkpoint_round_trip_restores_projection_and_outputs(causal: bool) -> None:
    src = FavorAttention(16, 32, causal=causal, seed=1, redraw_interval=3)
    q, k, v = (t.float() for t in _qkv(2, 2, 10, 16, 0.5, seed=5))
    src(q, k, v)  # gathers causal OPRF statistics in training mode
    src.maybe_redraw(7)
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    dst = FavorAttention(16, 32, causal=causal, seed=99, redraw_interval=3)
    dst.load_state_dict(state)
    assert torch.equal(dst.projection, src.projection)
    assert int(dst.redraw_counter) == 2
    src.eval()
    dst.eval()
    with torch.no_grad():
        torch.testing.assert_close(dst(q, k, v), src(q, k, v), atol=0, rtol=0)


def test_statistics_gathered_before_a_checkpoint_survive_resume() -> None:
    """A checkpoint taken after a training forward but before the next fold (as Lightning
    saves) must carry the pending causal-OPRF statistics, or a resumed run diverges."""
    src = FavorAttention(16, 32, causal=True, seed=1)
    q, k, v = (t.float() for t in _qkv(2, 2, 10, 16, 0.7, seed=8))
    src(q, k, v)
    src.maybe_redraw(1)
    src(q * 1.5, k * 1.5, v)  # gathered, not yet folded
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    dst = FavorAttention(16, 32, causal=True, seed=1)
    dst.load_state_dict(torch.load(buf, weights_only=True))
    for m in (src, dst):
        m.maybe_redraw(2)
    torch.testing.assert_close(dst.oprf_stat, src.oprf_stat, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(dst(q, k, v), src(q, k, v), atol=0, rtol=0)


def test_causal_oprf_uses_running_statistics_folded_at_step_boundaries() -> None:
    oprf = FavorAttention(16, 32, causal=True, seed=2).double()
    favor = FavorAttention(16, 32, causal=True, seed=2, estimator="favor+").double()
    q, k, v = _qkv(2, 2, 12, 16, 0.8, seed=6)
    with torch.no_grad():
        # before any statistics were folded the causal estimator is FAVOR+
        torch.testing.assert_close(oprf(q, k, v), favor(q, k, v))
        oprf(q * 2, k * 2, v)
        oprf.maybe_redraw(1)
    x, y = q * 16**-0.25, k * 16**-0.25
    stats = [oprf_statistic(x, y).mean(0), oprf_statistic(2 * x, 2 * y).mean(0)]
    torch.testing.assert_close(oprf.oprf_stat, (stats[0] + stats[1]) / 2)
    oprf.maybe_redraw(2)  # nothing new gathered: unchanged
    torch.testing.assert_close(oprf.oprf_stat, (stats[0] + stats[1]) / 2)
    oprf.attention_matrix(q * 3, k * 3)  # analysis calls gather nothing
    oprf.maybe_redraw(3)
    torch.testing.assert_close(oprf.oprf_stat, (stats[0] + stats[1]) / 2)
    oprf.eval()
    with torch.no_grad():
        out = oprf(q, k, v)
        phi_q, phi_k = oprf.features(q, k)
    assert not torch.allclose(out, favor(q, k, v))
    torch.testing.assert_close(out, explicit_from_features(phi_q, phi_k, v, causal=True))


# ---- precision ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg",
    [
        {"kernel": "softmax"},
        {"kernel": "softmax", "estimator": "favor+"},
        {"kernel": "softmax", "causal": True},
        {"kernel": "relu", "causal": True},
    ],
)
def test_bf16_autocast_with_large_norm_inputs_is_finite(cfg: dict) -> None:
    attn = FavorAttention(32, 64, chunk_size=16, **cfg)
    q, k, v = (t.float() for t in _qkv(2, 2, 48, 32, 1.0, seed=7))
    q, k = (q * 25).requires_grad_(), (k * 25).requires_grad_()
    v = v.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()
    out.float().square().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    # the same bf16-rounded inputs computed in float32 give the same answer
    with torch.no_grad():
        ref = attn(q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float())
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("estimator", ["favor+", "oprf"])
def test_attention_maps_of_large_norm_inputs_are_finite(estimator: str) -> None:
    # the maps (features, attention_matrix) are read by the analysis from float32 models whose
    # softmax key logits exceed exp's range: the key features must be stabilised there too
    attn = FavorAttention(32, 64, estimator=estimator)
    q, k, v = (t.float() for t in _qkv(1, 2, 40, 32, 1.0, seed=8))
    q, k = q * 25, k * 25
    phi_q, phi_k = attn.features(q, k)
    assert torch.isfinite(phi_q).all() and torch.isfinite(phi_k).all()
    mat = attn.attention_matrix(q, k)
    assert torch.isfinite(mat).all()
    torch.testing.assert_close(mat.sum(-1), torch.ones(1, 2, 40))
    torch.testing.assert_close(mat @ v, attn(q, k, v), atol=1e-4, rtol=1e-4)


def test_a_module_cast_to_bf16_keeps_its_projection_and_statistics_in_full_precision() -> None:
    # precision=bf16-true casts the whole model: the drawn projection must not be rounded
    # and the running OPRF statistics must not stall below bf16's resolution
    full = FavorAttention(16, 32, kernel="softmax", causal=True, seed=3, redraw_interval=2)
    half = FavorAttention(16, 32, kernel="softmax", causal=True, seed=3, redraw_interval=2)
    half.to(torch.bfloat16)
    assert half.projection.dtype == torch.float32 and half.oprf_pending.dtype == torch.float64
    torch.testing.assert_close(half.projection, full.projection, rtol=0, atol=0)
    full.train(), half.train()
    with torch.no_grad():
        for step in range(1, 7):
            q, k, v = (t.bfloat16() for t in _qkv(2, 2, 12, 16, 1.0 + step / 10, seed=step))
            full(q.float(), k.float(), v.float()), half(q, k, v)
            full.maybe_redraw(step), half.maybe_redraw(step)
    assert half.oprf_stat.dtype == torch.float32 and int(half.redraw_counter) == 3
    torch.testing.assert_close(half.oprf_stat, full.oprf_stat, rtol=0, atol=0)
    torch.testing.assert_close(half.projection, full.projection, rtol=0, atol=0)
    # a cast to a higher precision applies, and back again
    assert half.double().projection.dtype == torch.float64
    assert half.float().projection.dtype == torch.float32
    assert half.oprf_pending.dtype == torch.float64


def test_output_dtype_follows_input() -> None:
    attn = FavorAttention(8, 16)
    q, k, v = (t.float() for t in _qkv(1, 1, 5, 8, 1.0))
    assert attn(q, k, v).dtype == torch.float32
    assert attn(q.double(), k.double(), v.double()).dtype == torch.float64


def test_block_rows_cpu_defaults_accelerator_budget_and_explicit_size() -> None:
    from protein_performer.attention.favor import ACCEL_BLOCK_ELEMENTS, CPU_BLOCK_ELEMENTS

    cpu, gpu = torch.device("cpu"), torch.device("cuda")  # only the device type is read
    bid, causal = FavorAttention(64, 256), FavorAttention(64, 256, causal=True)
    assert bid.block_rows(cpu, 8, 65536) == 1024 and causal.block_rows(cpu, 8, 65536) == 256
    # CPU, many short sequences: a bidirectional block stays within its budget (not below 64)
    assert bid.block_rows(cpu, 64, 1024) == CPU_BLOCK_ELEMENTS // (64 * 256) == 128
    assert bid.block_rows(cpu, 32, 2048) == 256 and bid.block_rows(cpu, 4096, 128) == 64
    assert FavorAttention(64, 128).block_rows(cpu, 8, 65536) == 1024  # never above 1024
    assert causal.block_rows(cpu, 64, 1024) == 256
    # accelerator: as many rows as the budget allows, never fewer than the CPU block...
    rows = bid.block_rows(gpu, 8, 65536)
    assert rows == ACCEL_BLOCK_ELEMENTS // (8 * 256) and rows > 1024
    assert bid.block_rows(gpu, 4096, 65536) == 1024
    # ...nor more than the sequence; causal blocks hold whole sub-chunks
    assert bid.block_rows(gpu, 8, 3000) == 3000
    causal_rows = causal.block_rows(gpu, 3, 10**6)
    assert causal_rows % causal.subchunk_size == 0
    assert 3 * causal_rows * 256 <= ACCEL_BLOCK_ELEMENTS < 3 * (causal_rows + 64) * 256
    assert FavorAttention(64, 256, chunk_size=100).block_rows(gpu, 8, 65536) == 100


# ---- configuration and shape errors -----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kernel": "cosine"}, "kernel"),
        ({"estimator": "sdp"}, "estimator"),
        ({"projection": "none"}, "projection='none' needs kernel='relu'"),
        ({"nb_features": 0}, "nb_features"),
        ({"redraw_interval": -1}, "redraw_interval"),
        ({"norm": "sqrt_d", "orthogonal": False}, "sqrt_d"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"eps": -1e-3}, "eps must be >= 0"),
        ({"kernel_eps": 0.0}, "kernel_eps > 0"),
    ],
)
def test_invalid_configuration_raises_config_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FavorAttention(8, **kwargs)


def test_bad_shapes_raise() -> None:
    attn = FavorAttention(8, 16)
    q = torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match="head dim"):
        attn(torch.randn(1, 2, 5, 4), q, q)
    with pytest.raises(ValueError, match="key_padding_mask"):
        attn(q, q, q, key_padding_mask=torch.zeros(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"\(B, H, L, D\)"):
        attn(q[0], q[0], q[0])


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_inside_an_autocast_region_matches_the_one_outside(kernel, causal):
    # the attention runs in float32 with autocast off; `loss.backward()` written inside the
    # `torch.autocast` block (the usual place in a hand-written loop) must not rebuild the
    # features in bf16 beside float32 sums
    torch.manual_seed(0)
    attn = FavorAttention(16, 32, kernel=kernel, causal=causal)
    q, k, v = (torch.randn(2, 2, 40, 16).bfloat16().requires_grad_() for _ in range(3))
    mask = torch.zeros(2, 40, dtype=torch.bool)
    mask[1, 30:] = True
    grads = []
    for inside in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = attn(q, k, v, None if causal else mask)
            loss = out.float().square().sum()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        grads.append([t.grad.clone() for t in (q, k, v)])
        for t in (q, k, v):
            t.grad = None
    for outside, inside in zip(*grads, strict=True):
        assert outside.dtype == torch.bfloat16 and outside.abs().sum() > 0
        torch.testing.assert_close(inside, outside, rtol=0, atol=0)


def test_misuse_is_a_clear_error_and_empty_inputs_give_empty_outputs():
    fa = FavorAttention(8, 16)
    q = torch.randn(2, 2, 5, 8)
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        fa(q, q, q, torch.ones(2, 5))  # a float "keep" mask would mean the opposite
    with pytest.raises(TypeError, match="q and k must be floating point"):
        fa(q.long(), q.long(), q.long())
    with pytest.raises(TypeError, match="v must be floating point"):
        fa(q, q, q.long())
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        fa.attention_matrix(q, q, chunk_size=0)
    with pytest.raises(ValueError, match="heads: 5 is not one of the 2 heads"):
        next(fa.attention_rows(q, q, heads=[5]))
    assert fa(q[:0], q[:0], q[:0]).shape == (0, 2, 5, 8)
    assert fa(q[:, :, :0], q, q).shape == (2, 2, 0, 8)
    qg = q.clone().requires_grad_()
    out = fa(qg, q[:, :, :0], q[:, :, :0])  # no key: zeros, as with every key padded
    assert out.shape == (2, 2, 5, 8) and not out.any()
    out.sum().backward()
    assert not qg.grad.any()


def test_a_dense_attention_matrix_larger_than_memory_is_refused_up_front(monkeypatch) -> None:
    from protein_performer.utils import devices

    monkeypatch.setattr(devices, "memory_available", lambda: (10_000, 10_000))
    attn = FavorAttention(dim_head=8, nb_features=16)
    q = torch.randn(1, 2, 40, 8)  # 1 × 2 × 40 × 40 float32 = 12.8 kB > 10 kB
    with pytest.raises(ConfigError, match=r"attention matrix \(1 × 2 × 40 × 40\) needs 12\.8 kB"):
        attn.attention_matrix(q, q)
    assert attn.attention_matrix(q[:, :, :30], q[:, :, :30]).shape == (1, 2, 30, 30)  # 7.2 kB


def test_a_non_finite_input_falls_back_to_favor_plus_and_spoils_no_running_statistic() -> None:
    """A NaN query spread to every row through the OPRF statistic, and one non-finite batch
    folded NaN into a causal module's running statistics for good."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 60, 16, generator=g) * 0.5 for _ in range(3))
    bad = q.clone()
    bad[0, 0, 7, 0] = float("nan")
    att = FavorAttention(16, 32)
    out = att(bad, k, v)
    assert out[0, 0].isnan().any(-1).nonzero().flatten().tolist() == [7]
    assert not out[0, 1].isnan().any()
    causal = FavorAttention(16, 32, causal=True)
    causal(q, k, v)  # a clean batch, then one with an infinite key, each a step
    causal.maybe_redraw(1)
    inf_k = k.clone()
    inf_k[0, 0, 50, 0] = float("inf")
    causal(q, inf_k, v)
    causal.maybe_redraw(2)
    assert torch.isfinite(causal.oprf_stat).all()
    causal.eval()
    assert not causal(q, k, v).isnan().any()
    # finite but so large that t overflows: the same fallback
    causal.train()
    huge = k.clone()
    huge[0, 1, 20] *= 1e11
    causal(q, huge, v)
    causal.maybe_redraw(3)
    assert torch.isfinite(causal.oprf_stat).all()
    causal.eval()
    assert not causal(q, k, v).isnan().any()
    big_q = q.clone()
    big_q[0, 0, 7] *= 1e10
    out = att(big_q, k, v)
    assert not out[0, 0, :7].isnan().any() and not out[0, 1].isnan().any()


def test_a_projection_larger_than_memory_is_refused_before_it_is_drawn(monkeypatch) -> None:
    """nb_features=1e9 (a typo) drew 15 million orthogonal blocks for minutes."""
    from protein_performer.utils import devices

    monkeypatch.setattr(devices, "memory_available", lambda: (1 << 30, 1 << 31))
    with pytest.raises(
        ConfigError, match=r"random projection .*\(1,000,000 × 1,024\) needs 8\.2 GB"
    ):
        FavorAttention(1024, 1_000_000)
    FavorAttention(64, 256)  # the usual sizes are not even checked


def test_constructor_and_mask_misuse_are_named_errors() -> None:
    with pytest.raises(TypeError, match=r"nb_features must be an int, got 32\.5"):
        FavorAttention(16, 32.5)
    with pytest.raises(TypeError, match="dim_head must be an int, got '16'"):
        FavorAttention("16")
    FavorAttention(np.int64(16), np.int64(8))  # numpy integers are integers
    q = torch.randn(1, 2, 5, 16)
    mask = torch.zeros(1, 5, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match="key_padding_mask is on meta, the keys on cpu"):
        FavorAttention(16, 8)(q, q, q, mask)


def test_the_module_says_its_settings_when_printed() -> None:
    said = repr(FavorAttention(16, 32))
    assert "kernel='softmax'" in said and "estimator=" in said
    assert "projection=random, orthogonal=True" in said
    said = repr(FavorAttention(16, 32, kernel="relu", projection="none"))
    assert "projection=none" in said and "orthogonal" not in said and "estimator" not in said
