"""Hedgehog (learned feature maps) linear attention against a dense reference (float64, with
gradients, the maps' parameters included)."""

from __future__ import annotations

import pytest
import torch

from protein_performer.attention.hedgehog import (
    HedgehogFeatureMaps,
    hedgehog_attention,
    hedgehog_attention_rows,
)
from protein_performer.errors import ConfigError
from protein_performer.model import ModelConfig, ProteinLM
from protein_performer.model.checkpoints import load_weights
from tests.attention.reference import explicit_from_kernel


def reference_features(x, w, b):
    """The map written out per head: [softmax(xW+b), softmax(-(xW+b))], ``x`` (B, H, L, D)."""
    out = []
    for h in range(x.shape[1]):
        z = x[:, h] @ w[h] + b[h]
        out.append(torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1))
    return torch.stack(out, 1)


def dense_reference(q, k, v, maps, first, causal, mask):
    h = q.shape[1]
    fq = reference_features(q, maps.q_weight[first : first + h], maps.q_bias[first : first + h])
    fk = reference_features(k, maps.k_weight[first : first + h], maps.k_bias[first : first + h])
    a = fq @ fk.transpose(-1, -2)
    return explicit_from_kernel(a, v, causal, mask)


def random_maps(heads, dim, half, seed):
    torch.manual_seed(seed)
    maps = HedgehogFeatureMaps(heads, dim, half).double()
    with torch.no_grad():  # away from the identity start, biases non-zero
        for p in maps.parameters():
            p.add_(torch.randn_like(p))
    return maps


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, chunk, first", [(1, 4, 0), (9, 4, 1), (32, 8, 0), (37, 256, 2)])
def test_hedgehog_attention_equals_dense_reference_with_gradients(n, chunk, first, causal):
    gen = torch.Generator().manual_seed(n * 7 + chunk)
    maps = random_maps(5, 4, 6, seed=n)
    q, k, v = (
        (2 * torch.randn(2, 3, n, 4, dtype=torch.float64, generator=gen)).requires_grad_()
        for _ in range(3)
    )
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[1, n - n // 3 :] = True
    if causal and n > 1:
        mask[1, 0] = True  # a causal query whose only visible key is padded gets zeros
    out = hedgehog_attention(q, k, v, maps, first, causal, mask, chunk_size=chunk)
    ref, weights = dense_reference(q, k, v, maps, first, causal, mask)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    inputs = (q, k, v, *maps.parameters())
    g = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    grads = torch.autograd.grad(out, inputs, g, allow_unused=True)
    ref_grads = torch.autograd.grad(ref, inputs, g, allow_unused=True)
    for a, b in zip(grads, ref_grads, strict=True):
        if b is None:
            assert a is None or a.abs().max() == 0
        else:
            torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)
    # the heads outside first..first+2 get no gradient: each head uses its own map
    used = torch.zeros(5, dtype=torch.bool)
    used[first : first + 3] = True
    assert grads[3][~used].abs().max() == 0 and grads[3][used].abs().max() > 0
    rows = hedgehog_attention_rows(q, k, maps, first, causal, mask, chunk)
    torch.testing.assert_close(torch.cat([r for _, r in rows], 2), weights, atol=1e-12, rtol=1e-10)


def test_identity_start_and_a_kernel_that_can_single_out_one_key():
    maps = HedgehogFeatureMaps(2, 4, 6)
    torch.testing.assert_close(maps.q_weight[:, :, :4], torch.eye(4).expand(2, 4, 4))
    assert maps.q_weight[:, :, 4:].abs().max() > 0  # extra features: random, not duplicates
    torch.manual_seed(0)
    # drawn as N(0, 1/D): centred, at the scale of the identity's columns
    extra = HedgehogFeatureMaps(4, 16, 400).k_weight[:, :, 16:]
    assert abs(extra.mean().item()) < 0.01
    assert extra.std().item() == pytest.approx(16**-0.5, rel=0.05)
    # both halves peaked on the features a query and its key share: that key takes nearly the
    # whole row among 50 (a one-hot row: the sharp lookup copying needs)
    maps = HedgehogFeatureMaps(1, 4, 4)
    keys = torch.tensor([0.0, 0, 20, -20]).expand(1, 1, 50, 4).clone()
    keys[0, 0, 17] = torch.tensor([20.0, -20, 0, 0])
    q = torch.tensor([20.0, -20, 0, 0]).view(1, 1, 1, 4)
    row = next(hedgehog_attention_rows(q, keys, maps))[1][0, 0, 0]
    assert row[17] > 0.99


def test_hedgehog_model_trains_transfers_and_validates():
    torch.manual_seed(0)
    cfg = ModelConfig(
        attention="hedgehog", dim=16, depth=2, heads=2, ffn_dim=32, dropout=0.0, max_len=64,
        position="rotary", nb_features=12, local_heads=1, local_window=3,
    )  # fmt: skip
    model = ProteinLM(cfg, 25, 1)
    ids = torch.randint(4, 24, (2, 20))
    pad = torch.zeros(2, 20, dtype=torch.bool)
    pad[1, 15:] = True
    out = model(ids, pad, return_attentions=True)
    weights = out["attentions"][0]
    assert weights.shape == (2, 2, 20, 20)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(2, 20))
    assert torch.all(weights[1][..., 15:] == 0)  # padded keys get no weight
    out["logits"].logsumexp(-1).mean().backward()
    maps = model.blocks[0].attn.maps
    assert maps.q_weight.shape == (2, 8, 6)
    assert maps.q_weight.grad[1].abs().max() > 0  # the learned map of the global head trains
    # weights move from an exact model (the maps keep their identity start) and back
    exact = ProteinLM(ModelConfig(**{**cfg.to_dict(), "attention": "transformer"}), 25, 1)
    fresh = ProteinLM(cfg, 25, 1)
    load_weights(fresh, exact.state_dict(), "exact.ckpt")
    torch.testing.assert_close(fresh.blocks[0].attn.qkv.weight, exact.blocks[0].attn.qkv.weight)
    torch.testing.assert_close(
        fresh.blocks[0].attn.maps.q_weight[:, :, :6], torch.eye(8, 6).expand(2, 8, 6)
    )
    load_weights(exact, model.state_dict(), "hedgehog.ckpt")
    other = ProteinLM(ModelConfig(**{**cfg.to_dict(), "nb_features": 16}), 25, 1)
    with pytest.raises(ConfigError, match=r"hedgehog\.ckpt does not fit.*maps\.q_weight"):
        load_weights(other, model.state_dict(), "hedgehog.ckpt")
    with pytest.raises(ConfigError, match=r"nb_features must be even.*hedgehog"):
        ModelConfig(attention="hedgehog", nb_features=7).validate()


@pytest.mark.parametrize("causal", [False, True])
def test_padded_keys_holding_nan_change_nothing_and_a_real_nan_shows(causal):
    gen = torch.Generator().manual_seed(4)
    maps = random_maps(3, 4, 6, seed=1)
    q, k, v = (torch.randn(2, 3, 10, 4, dtype=torch.float64, generator=gen) for _ in range(3))
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[0, 7:] = True
    with torch.no_grad():
        ref = hedgehog_attention(q, k, v, maps, causal=causal, key_padding_mask=mask, chunk_size=4)
        k2, v2 = k.clone(), v.clone()
        k2[0, :, 7], v2[0, :, 8], k2[0, :, 9] = float("nan"), float("nan"), float("inf")
        out = hedgehog_attention(
            q, k2, v2, maps, causal=causal, key_padding_mask=mask, chunk_size=4
        )
        torch.testing.assert_close(out, ref)
        k2[1, :, 0] = float("nan")
        out = hedgehog_attention(
            q, k2, v2, maps, causal=causal, key_padding_mask=mask, chunk_size=4
        )
    assert torch.isnan(out[1]).any() and not torch.isnan(out[0]).any()
