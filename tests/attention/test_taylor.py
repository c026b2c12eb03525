"""Taylor ("Based") linear attention against a dense reference (float64, with gradients)."""

from __future__ import annotations

import math

import pytest
import torch

from protein_performer.attention.taylor import (
    taylor_attention,
    taylor_attention_rows,
    taylor_feature_dim,
    taylor_features,
)
from protein_performer.errors import ConfigError
from protein_performer.model import ModelConfig, ProteinLM
from tests.attention.reference import explicit_from_kernel


def dense_reference(q, k, v, causal, mask):
    """Weights 1 + s + s²/2 (s = q·k/√D) over the visible keys, normalised per row."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    a = 1 + s + s**2 / 2
    return explicit_from_kernel(a, v, causal, mask)


def test_features_give_the_second_order_taylor_kernel_exactly():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, 6, dtype=torch.float64, generator=gen)
    y = torch.randn(3, 5, 6, dtype=torch.float64, generator=gen)
    fx, fy = taylor_features(x), taylor_features(y)
    assert fx.shape == (3, 7, taylor_feature_dim(6)) == (3, 7, 1 + 6 + 21)
    dot = x @ y.transpose(-1, -2)
    torch.testing.assert_close(fx @ fy.transpose(-1, -2), 1 + dot + dot**2 / 2, rtol=1e-12, atol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, chunk", [(1, 4), (9, 4), (32, 8), (37, 256)])
def test_taylor_attention_equals_dense_reference_with_gradients(n, chunk, causal):
    gen = torch.Generator().manual_seed(n * 7 + chunk)
    q, k, v = (
        (2 * torch.randn(2, 3, n, 4, dtype=torch.float64, generator=gen)).requires_grad_()
        for _ in range(3)
    )
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[1, n - n // 3 :] = True
    if causal and n > 1:
        mask[1, 0] = True  # a causal query whose only visible key is padded gets zeros
    out = taylor_attention(q, k, v, causal, mask, chunk_size=chunk)
    ref, weights = dense_reference(q, k, v, causal, mask)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    g = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    grads = torch.autograd.grad(out, (q, k, v), g)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)
    rows = torch.cat([r for _, r in taylor_attention_rows(q, k, causal, mask, chunk)], dim=2)
    torch.testing.assert_close(rows, weights, atol=1e-12, rtol=1e-10)


def test_taylor_attention_keeps_float32_features_under_bf16_inputs():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 50, 8, generator=gen) for _ in range(3))
    ref, _ = dense_reference(q.double(), k.double(), v.double(), False, None)
    out = taylor_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, atol=0.05, rtol=0.05)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the rows are computed as the forward
        rows = next(taylor_attention_rows(q, k, chunk_size=50))[1]
    assert rows.dtype == torch.float32
    torch.testing.assert_close(rows @ v, taylor_attention(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("local_heads", [0, 1])
def test_taylor_model_trains_and_its_weights_equal_its_forward(local_heads):
    torch.manual_seed(0)
    cfg = ModelConfig(
        attention="taylor", dim=16, depth=2, heads=2, ffn_dim=32, dropout=0.0, max_len=64,
        position="rotary", local_heads=local_heads, local_window=3,
    )  # fmt: skip
    model = ProteinLM(cfg, 25, 1)
    ids = torch.randint(4, 24, (2, 20))
    pad = torch.zeros(2, 20, dtype=torch.bool)
    pad[1, 15:] = True
    out = model(ids, pad, return_attentions=True)
    weights = out["attentions"]
    assert weights[0].shape == (2, 2, 20, 20)
    torch.testing.assert_close(weights[0][0].sum(-1), torch.ones(2, 20))
    assert torch.all(weights[0][1][..., 15:] == 0)  # padded keys get no weight
    out["logits"].float().logsumexp(-1).mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    with pytest.raises(ConfigError, match=r"model\.attention.*taylor"):
        ModelConfig(attention="tailor").validate()


@pytest.mark.parametrize("causal", [False, True])
def test_padded_keys_holding_nan_or_inf_change_nothing_and_a_real_nan_shows(causal):
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 11, 4, dtype=torch.float64, generator=gen) for _ in range(3))
    mask = torch.zeros(2, 11, dtype=torch.bool)
    mask[0, 8:] = True
    ref = taylor_attention(q, k, v, causal, mask, chunk_size=4)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 8], v2[0, :, 9], k2[0, :, 10] = float("nan"), float("nan"), float("inf")
    torch.testing.assert_close(taylor_attention(q, k2, v2, causal, mask, chunk_size=4), ref)
    rows = torch.cat([r for _, r in taylor_attention_rows(q, k2, causal, mask, chunk_size=4)], 2)
    assert torch.isfinite(rows).all()
    # a NaN in a key that counts is a diverging step: it must show, not read as "no key"
    k2[1, :, 0] = float("nan")
    out = taylor_attention(q, k2, v2, causal, mask, chunk_size=4)
    assert torch.isnan(out[1]).any() and not torch.isnan(out[0]).any()
