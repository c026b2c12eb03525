"""exact_attention: equals the textbook softmax, with causal and key-padding masks."""

from __future__ import annotations

import pytest
import torch

from protein_performer.attention import exact_attention
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


def test_bad_mask_shape_raises() -> None:
    q, k, v = _qkv(2)
    with pytest.raises(ValueError, match="key_padding_mask"):
        exact_attention(q, k, v, key_padding_mask=torch.zeros(2, 12, dtype=torch.bool))
