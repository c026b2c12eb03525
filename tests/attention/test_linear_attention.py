"""Bidirectional FAVOR attention: exactness vs explicit features, gradients, key padding."""

from __future__ import annotations

import pytest
import torch

from protein_performer.attention import FavorAttention
from protein_performer.attention.kernels.bidirectional import (
    BidirectionalFavorFunction,
    bidirectional_linear_attention,
)
from tests.attention.reference import explicit_from_features, gradcheck_inputs

CONFIGS = [
    {"kernel": "softmax", "estimator": "oprf"},
    {"kernel": "softmax", "estimator": "favor+", "antithetic": False},
    {"kernel": "relu"},
    {"kernel": "relu", "projection": "none"},
]


def _qkv(b: int, h: int, lq: int, lk: int, d: int, seed: int = 0, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, lq, d, generator=g, dtype=torch.float64) * scale
    k = torch.randn(b, h, lk, d, generator=g, dtype=torch.float64) * scale
    v = torch.randn(b, h, lk, d, generator=g, dtype=torch.float64)
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_()


def _mask(b: int, length: int) -> torch.Tensor:
    mask = torch.zeros(b, length, dtype=torch.bool)
    mask[0, -5:] = True
    mask[-1, :3] = True
    return mask


@pytest.mark.parametrize("save", [True, False])
@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("masked", [False, True])
def test_matches_explicit_attention_from_the_same_features(
    cfg: dict, masked: bool, save: bool
) -> None:
    attn = FavorAttention(16, 40, chunk_size=6, save_features=save, **cfg).double()
    q, k, v = _qkv(2, 3, 23, 23, 16)
    mask = _mask(2, 23) if masked else None
    out = attn(q, k, v, key_padding_mask=mask)
    phi_q, phi_k = attn.features(q, k, key_padding_mask=mask)
    ref = explicit_from_features(phi_q, phi_k, v, causal=False)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    g = torch.randn_like(out)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref * g).sum(), (q, k, v))
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-11, rtol=1e-9)


def test_cross_attention_with_different_lengths() -> None:
    attn = FavorAttention(8, 24, chunk_size=5).double()
    q, k, v = _qkv(1, 2, 7, 19, 8, seed=3)
    out = attn(q, k, v)
    assert out.shape == (1, 2, 7, 8)
    phi_q, phi_k = attn.features(q, k)
    torch.testing.assert_close(out, explicit_from_features(phi_q, phi_k, v, False))


@pytest.mark.parametrize("save", [True, False])
@pytest.mark.parametrize("kind", ["softmax", "relu"])
@pytest.mark.parametrize("masked", [False, True])
def test_gradcheck_of_the_custom_function(kind: str, masked: bool, save: bool) -> None:
    params, mask, q, k, v = gradcheck_inputs(kind, masked, lq=7, lk=9)

    def fn(a, b, c):
        return bidirectional_linear_attention(a, b, c, mask, params, 4, save)

    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("save", [True, False])
@pytest.mark.parametrize("cfg", CONFIGS)
def test_padded_keys_and_values_do_not_change_valid_outputs(cfg: dict, save: bool) -> None:
    attn = FavorAttention(16, 32, chunk_size=8, save_features=save, **cfg).double()
    q, k, v = _qkv(2, 2, 20, 20, 16, seed=5)
    mask = _mask(2, 20)
    out = attn(q, k, v, key_padding_mask=mask)
    grads = torch.autograd.grad(out[~mask[:, None, :, None].expand_as(out)].sum(), (q, k, v))
    with torch.no_grad():
        k2, v2 = k.clone(), v.clone()
        junk = torch.randn(k.shape, dtype=k.dtype, generator=torch.Generator().manual_seed(9))
        sel = mask[:, None, :, None].expand_as(k)
        k2[sel] = junk[sel] * 1e4
        v2[sel] = -junk[sel] * 1e6
    k2.requires_grad_()
    v2.requires_grad_()
    out2 = attn(q, k2, v2, key_padding_mask=mask)
    valid = ~mask[:, None, :, None].expand_as(out)
    assert torch.isfinite(out2).all()
    torch.testing.assert_close(out2[valid], out[valid], atol=1e-12, rtol=1e-10)
    grads2 = torch.autograd.grad(out2[valid].sum(), (q, k2, v2))
    for got, want in zip(grads2, grads, strict=True):
        torch.testing.assert_close(got[valid], want[valid], atol=1e-11, rtol=1e-9)
        assert (got[~valid] == 0).all()  # padded positions get no gradient


@pytest.mark.parametrize("cfg", CONFIGS)
def test_padding_equals_dropping_the_padded_positions(cfg: dict) -> None:
    """Padded keys leave numerator and normaliser: same as running on the unpadded prefix."""
    attn = FavorAttention(16, 32, chunk_size=8, **cfg).double()
    q, k, v = _qkv(1, 2, 20, 20, 16, seed=6)
    mask = torch.zeros(1, 20, dtype=torch.bool)
    mask[0, 13:] = True
    with torch.no_grad():
        padded = attn(q, k, v, key_padding_mask=mask)[:, :, :13]
        short = attn(q[:, :, :13], k[:, :, :13], v[:, :, :13])
    torch.testing.assert_close(padded, short, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("save", [True, False])
def test_fully_padded_sequence_gives_zeros_and_finite_gradients(save: bool) -> None:
    attn = FavorAttention(8, 16, save_features=save).double()
    q, k, v = _qkv(2, 2, 6, 6, 8, seed=7)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1] = True
    out = attn(q, k, v, key_padding_mask=mask)
    assert (out[1] == 0).all()
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(gr).all() for gr in grads)


@pytest.mark.parametrize("save", [True, False])
def test_inf_and_nan_in_padded_rows_do_not_leak(save: bool) -> None:
    torch.manual_seed(0)
    for kernel in ("softmax", "relu"):
        attn = FavorAttention(16, 32, kernel=kernel, seed=3, save_features=save).double()
        q, k, v = (torch.randn(1, 2, 10, 16, dtype=torch.float64) for _ in range(3))
        pad = torch.zeros(1, 10, dtype=torch.bool)
        pad[:, 7:] = True
        ref = attn(q, k, v, key_padding_mask=pad)[:, :, :7]
        q2, k2, v2 = (t.clone().requires_grad_(True) for t in (q, k, v))
        with torch.no_grad():
            k2[:, :, 7:] = float("inf")
            q2[:, :, 8:] = 1e3  # padded queries must be finite (as in exact attention)
            v2[:, :, 7:] = 1e30
        out = attn(q2, k2, v2, key_padding_mask=pad)
        torch.testing.assert_close(out[:, :, :7], ref)
        out[:, :, :7].sum().backward()
        for g in (q2.grad, k2.grad, v2.grad):
            assert torch.isfinite(g[:, :, :7]).all()
        assert torch.isfinite(k2.grad).all()


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
@pytest.mark.parametrize("later_scale", [3.0, 60.0])
def test_saved_features_give_the_recomputed_gradients_when_the_stabiliser_rises(
    kernel: str, later_scale: float
) -> None:
    """Kept key features were stabilised by the running max of their block: later blocks with
    larger logits (and a first block of padded keys only) must not change the gradients.
    ``later_scale`` 60: the softmax logits of the long keys sit thousands below 0, so a padded
    block's stabiliser (0) and the final one are further apart than exp can represent."""
    q, k, v = _qkv(2, 2, 20, 20, 16, seed=11)
    with torch.no_grad():
        k[:, :, 12:] *= later_scale  # the last blocks move the running max
    mask = torch.zeros(2, 20, dtype=torch.bool)
    mask[1, :6] = True  # batch 1: the whole first block padded (no finite key yet)
    g = torch.randn(2, 2, 20, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    results = []
    for save in (True, False):
        attn = FavorAttention(16, 32, kernel=kernel, chunk_size=6, save_features=save).double()
        out = attn(q, k, v, key_padding_mask=mask)
        results.append((out, *torch.autograd.grad((out * g).sum(), (q, k, v))))
    phi_q, phi_k = attn.features(q, k, key_padding_mask=mask)
    ref = explicit_from_features(phi_q, phi_k, v, causal=False)
    ref_grads = torch.autograd.grad((ref * g).sum(), (q, k, v))
    for got, want in zip(results[0], (ref, *ref_grads), strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, atol=1e-11, rtol=1e-9)
    for got, want in zip(results[0], results[1], strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)


def _kept_feature_shapes(attn: FavorAttention, *qkv: torch.Tensor) -> list[tuple]:
    """Shapes of the ``(B·H, L, m)`` tensors saved for the backward, seen through the public
    saved-tensor hooks (what activation checkpointing and CPU offloading act on)."""
    shapes = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 3 and t.shape[-1] == attn.nb_features:
            shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn(*qkv).sum().backward()
    return shapes


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
def test_kept_features_are_saved_tensors_and_only_when_asked(kernel: str) -> None:
    attn = FavorAttention(8, 16, kernel=kernel, chunk_size=5)
    q, k, v = (torch.randn(1, 2, 12, 8, requires_grad=True) for _ in range(3))
    assert _kept_feature_shapes(attn, q, k, v) == []  # the default rebuilds them
    attn.save_features = True
    assert _kept_feature_shapes(attn, q, k, v) == [(2, 12, 16), (2, 12, 16)]
    attn.save_features = False
    assert _kept_feature_shapes(attn, q, k, v) == []


def test_features_are_not_kept_under_no_grad(monkeypatch) -> None:
    saves = []
    forward = BidirectionalFavorFunction.forward

    def spy(ctx, *args):
        saves.append(args[-1])
        return forward(ctx, *args)

    monkeypatch.setattr(BidirectionalFavorFunction, "forward", staticmethod(spy))
    attn = FavorAttention(8, 16, chunk_size=5, save_features=True)
    q, k, v = (torch.randn(1, 2, 12, 8, requires_grad=True) for _ in range(3))
    with torch.no_grad():
        plain = attn(q, k, v)  # the inputs require grad, but nothing will be taken
    torch.testing.assert_close(attn(q, k, v), plain)
    assert saves == [False, True]


@pytest.mark.parametrize("kind", ["softmax", "relu"])
def test_without_scratch_blocks_as_on_an_accelerator_the_gradients_are_the_same(
    kind: str, monkeypatch
) -> None:
    import protein_performer.attention.kernels.bidirectional as la

    params, mask, q, k, v = gradcheck_inputs(kind, True, lq=7, lk=9)

    def grads() -> tuple[torch.Tensor, ...]:
        out = bidirectional_linear_attention(q, k, v, mask, params, 4)
        return (out, *torch.autograd.grad(out.sum(), (q, k, v)))

    with_scratch = grads()
    monkeypatch.setattr(la, "cpu_scratch", lambda like: None)
    for got, want in zip(grads(), with_scratch, strict=True):
        torch.testing.assert_close(got, want, atol=1e-13, rtol=1e-12)
    assert torch.autograd.gradcheck(
        lambda a, b, c: bidirectional_linear_attention(a, b, c, mask, params, 4), (q, k, v)
    )
