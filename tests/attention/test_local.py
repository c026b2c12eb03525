"""Sliding-window exact attention against a dense masked softmax (float64, with gradients)."""

from __future__ import annotations

import pytest
import torch

from protein_performer.attention.local import local_attention, local_attention_rows


def dense_reference(q, k, v, window, causal, mask):
    n = q.shape[2]
    offset = torch.arange(n)[None, :] - torch.arange(n)[:, None]  # key - query
    allowed = offset.abs() <= window
    if causal:
        allowed &= offset <= 0
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(mask[:, None, None, :], float("-inf"))
    weights = torch.softmax(scores, -1).nan_to_num(0.0)
    return weights @ v, weights


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, window", [(5, 8), (17, 8), (40, 3), (64, 16), (130, 1), (33, 16)])
def test_local_attention_equals_banded_softmax_with_gradients(n, window, causal):
    gen = torch.Generator().manual_seed(n * 31 + window)
    q, k, v = (
        torch.randn(2, 3, n, 4, dtype=torch.float64, generator=gen, requires_grad=True)
        for _ in range(3)
    )
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[1, n - n // 3 :] = True  # a padded tail: its queries may see no key at all
    out = local_attention(q, k, v, window, causal, mask)
    ref, weights = dense_reference(q, k, v, window, causal, mask)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    g = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    grads = torch.autograd.grad(out, (q, k, v), g)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    rows = torch.cat(
        [r for _, r in local_attention_rows(q.detach(), k.detach(), window, causal, mask, 7)], 2
    )
    torch.testing.assert_close(rows, weights.detach(), atol=1e-12, rtol=1e-10)


def test_local_attention_is_local():
    q, k, v = (torch.randn(1, 1, 50, 8, dtype=torch.float64) for _ in range(3))
    out = local_attention(q, k, v, 4)
    v2 = v.clone()
    v2[:, :, 30:] += 100.0  # change values far from the first rows only
    out2 = local_attention(q, k, v2, 4)
    torch.testing.assert_close(out[:, :, :26], out2[:, :, :26])
    assert not torch.allclose(out[:, :, 26:], out2[:, :, 26:])
    with pytest.raises(ValueError, match="window"):
        local_attention(q, k, v, 0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, window", [(5, 8), (40, 3)])  # the whole-matrix and banded routes
def test_padded_keys_holding_nan_or_inf_change_nothing(n, window, causal):
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, n, 4, dtype=torch.float64, generator=gen) for _ in range(3))
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[0, n - 3 :] = True
    ref = local_attention(q, k, v, window, causal, mask)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, n - 3], v2[0, :, n - 2], k2[0, :, n - 1] = float("nan"), float("nan"), float("inf")
    out = local_attention(q, k2, v2, window, causal, mask)
    torch.testing.assert_close(out, ref)
    for start, rows in local_attention_rows(q, k2, window, causal, mask, chunk_size=4):
        _, weights = dense_reference(q, k, v, window, causal, mask)
        torch.testing.assert_close(rows, weights[:, :, start : start + rows.shape[2]])
