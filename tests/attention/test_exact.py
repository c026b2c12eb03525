"""exact_attention: equals the textbook softmax, with causal and key-padding masks."""

from __future__ import annotations

import math

import pytest
import torch

from protein_performer.attention import exact_attention
from protein_performer.attention.exact import length_scale
from tests.attention.reference import explicit_softmax


def _qkv(seed: int = 0, b: int = 2, h: int = 3, length: int = 13, d: int = 8):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(b, h, length, d, generator=g, dtype=torch.float64).requires_grad_()
        for _ in range(3)
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_textbook_softmax_attention(causal: bool, masked: bool) -> None:
    q, k, v = _qkv()
    mask = None
    if masked:
        mask = torch.zeros(2, 13, dtype=torch.bool)
        mask[0, 9:] = True
        mask[1, 2] = True
    out = exact_attention(q, k, v, causal=causal, key_padding_mask=mask)
    ref = explicit_softmax(q, k, v, causal=causal, key_padding_mask=mask)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    for got, want in zip(
        torch.autograd.grad((out * g).sum(), (q, k, v)),
        torch.autograd.grad((ref * g).sum(), (q, k, v)),
        strict=True,
    ):
        torch.testing.assert_close(got, want)


def test_rows_without_visible_keys_are_zero_with_finite_gradients() -> None:
    q, k, v = _qkv(1)
    mask = torch.zeros(2, 13, dtype=torch.bool)
    mask[1, :4] = True  # left padding + causal: rows 0..3 of batch 1 see nothing
    out = exact_attention(q, k, v, causal=True, key_padding_mask=mask)
    assert (out[1, :, :4] == 0).all()
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[1, :, 4:], explicit_softmax(q, k, v, True, mask)[1, :, 4:])
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(gr).all() for gr in grads)


@pytest.mark.parametrize("causal", [False, True])
def test_padded_keys_holding_nan_or_inf_change_nothing(causal: bool) -> None:
    q, k, v = _qkv(2)
    mask = torch.zeros(2, 13, dtype=torch.bool)
    mask[0, 9:] = True
    ref = exact_attention(q, k, v, causal=causal, key_padding_mask=mask)
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[0, :, 10], v2[0, :, 11], k2[0, :, 12] = float("nan"), float("nan"), float("inf")
    out = exact_attention(q, k2, v2, causal=causal, key_padding_mask=mask)
    torch.testing.assert_close(out, ref)


def test_bad_mask_shape_raises() -> None:
    q, k, v = _qkv(2)
    with pytest.raises(ValueError, match="key_padding_mask"):
        exact_attention(q, k, v, key_padding_mask=torch.zeros(2, 12, dtype=torch.bool))


# ---- Scalable-Softmax: scores times log(n) / log(base), n the keys a query sees --------------
def _scalable_reference(q, k, v, causal, mask, base):
    """Written out: each query row's scores times log(visible keys) / log(base)."""
    b, _, n, _ = q.shape
    visible = torch.ones(b, n, dtype=torch.float64) if mask is None else (~mask).double()
    seen = visible.cumsum(-1) if causal else visible.sum(-1, keepdim=True).expand(b, n)
    factor = torch.log(seen.clamp(min=1.0)) / torch.log(torch.tensor(float(base)))
    return explicit_softmax(q * factor[:, None, :, None], k, v, causal, mask)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_scalable_softmax_scales_each_querys_scores_by_log_of_its_keys(causal, masked) -> None:
    q, k, v = _qkv(3)
    mask = None
    if masked:
        mask = torch.zeros(2, 13, dtype=torch.bool)
        mask[0, 9:] = True
        mask[1, 2] = True
    out = exact_attention(q, k, v, causal=causal, key_padding_mask=mask, length_base=5)
    ref = _scalable_reference(q, k, v, causal, mask, 5)
    torch.testing.assert_close(out, ref)
    assert (out - exact_attention(q, k, v, causal=causal, key_padding_mask=mask)).abs().max() > 1e-3
    g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(1))
    for got, want in zip(
        torch.autograd.grad((out * g).sum(), (q, k, v)),
        torch.autograd.grad((ref * g).sum(), (q, k, v)),
        strict=True,
    ):
        torch.testing.assert_close(got, want)


def test_scalable_softmax_is_plain_softmax_at_the_base_length() -> None:
    q, k, v = _qkv(4)
    mask = torch.zeros(2, 13, dtype=torch.bool)
    mask[1, 10:] = True  # row 1 sees 10 keys, row 0 all 13
    out = exact_attention(q, k, v, key_padding_mask=mask, length_base=13)
    plain = exact_attention(q, k, v, key_padding_mask=mask)
    torch.testing.assert_close(out[0], plain[0])
    assert (out[1] - plain[1]).abs().max() > 1e-3  # 10 keys: softer than at 13
    factor = length_scale(13, 13, 13, key_padding_mask=mask)
    torch.testing.assert_close(
        factor.flatten(), torch.log(torch.tensor([13.0, 10.0])) / math.log(13)
    )
    causal = length_scale(4, 4, 2, causal=True, batch=1)
    torch.testing.assert_close(causal.flatten(), torch.log(torch.arange(1.0, 5.0)) / math.log(2))


def test_inputs_are_checked_like_favor_attention() -> None:
    q = torch.randn(2, 3, 6, 4)
    keep = torch.ones(2, 6)  # a float "keep" mask would mean the opposite: refused
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        exact_attention(q, q, q, key_padding_mask=keep)
    with pytest.raises(ValueError, match=r"key_padding_mask must be \(B, Lk\) = \(2, 6\)"):
        exact_attention(q, q, q, key_padding_mask=torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="share \\(B, H\\) and the head dim"):
        exact_attention(q, torch.randn(2, 3, 6, 5), q)
    with pytest.raises(ValueError, match="v must be \\(B, H, Lk, Dv\\) matching k"):
        exact_attention(q, q, torch.randn(2, 3, 5, 4))
    with pytest.raises(ValueError, match="must be \\(B, H, L, D\\)"):
        exact_attention(q[0], q[0], q[0])
