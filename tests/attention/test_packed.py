"""FAVOR (bidirectional and causal) on a packed q/k/v projection ``(B, L, 3, H, D)``, read and
written in place: the same attention and gradients as the ``(B·H, L, D)`` route."""

from __future__ import annotations

import pytest
import torch

import protein_performer.attention.kernels.bidirectional as la
from protein_performer.attention import FavorAttention
from protein_performer.attention.kernels import fused_cpu
from protein_performer.attention.kernels.bidirectional import (
    bidirectional_linear_attention,
    packed_bidirectional_linear_attention,
)
from protein_performer.attention.kernels.causal import (
    causal_linear_attention,
    packed_causal_linear_attention,
)
from protein_performer.model.blocks import SelfAttention
from protein_performer.model.rotary import RotaryEmbedding, apply_rotary, rotate_packed
from tests.attention.reference import explicit_from_features, gradcheck_inputs

CONFIGS = [
    {"kernel": "softmax", "estimator": "oprf"},
    {"kernel": "softmax", "estimator": "favor+", "antithetic": False},
    {"kernel": "relu"},
    {"kernel": "relu", "projection": "none"},
]


def _packed(b: int, length: int, h: int, d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, length, 3, h, d, generator=g, dtype=torch.float64).requires_grad_()


def _mask(b: int, length: int) -> torch.Tensor:
    mask = torch.zeros(b, length, dtype=torch.bool)
    mask[0, -5:] = True
    mask[-1, :3] = True
    return mask


def _views(qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    return q, k, v


@pytest.mark.parametrize(("causal", "save"), [(False, True), (False, False), (True, False)])
@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("masked", [False, True])
def test_packed_matches_explicit_attention_and_the_flat_route(
    cfg: dict, masked: bool, causal: bool, save: bool
) -> None:
    attn = FavorAttention(16, 40, chunk_size=6, save_features=save, causal=causal, **cfg)
    attn = attn.double()
    attn.subchunk_size = 4  # causal: blocks of 6 rows in sub-chunks of 4 and 2
    qkv = _packed(3, 23, 2, 16)
    mask = _mask(3, 23) if masked else None
    out = attn.forward_packed(qkv, mask)
    assert out.shape == (3, 23, 2, 16)
    q, k, v = _views(qkv)
    phi_q, phi_k = attn.features(q, k, key_padding_mask=mask)
    ref = explicit_from_features(phi_q, phi_k, v, causal=causal).transpose(1, 2)
    flat = attn(q, k, v, key_padding_mask=mask).transpose(1, 2)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(out, flat, atol=1e-13, rtol=1e-12)
    g = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * g).sum(), qkv)
    (ref_grad,) = torch.autograd.grad((ref * g).sum(), qkv)
    (flat_grad,) = torch.autograd.grad((flat * g).sum(), qkv)
    torch.testing.assert_close(grad, ref_grad, atol=1e-11, rtol=1e-9)
    torch.testing.assert_close(grad, flat_grad, atol=1e-12, rtol=1e-11)


@pytest.mark.slow
@pytest.mark.parametrize("route", ["bidirectional", "saved", "causal"])
@pytest.mark.parametrize("kind", ["softmax", "relu"])
@pytest.mark.parametrize("masked", [False, True])
def test_gradcheck_of_the_packed_function(kind: str, masked: bool, route: str) -> None:
    b, h, length, d = 2, 2, 9, 4
    params, _, *_ = gradcheck_inputs(kind, False, lq=length, lk=length, n=b * h, d=d)
    mask = _mask(b, length).repeat_interleave(h, dim=0) if masked else None
    qkv = _packed(b, length, h, d, seed=1)

    def fn(x: torch.Tensor) -> torch.Tensor:
        if route == "causal":  # blocks of 4 rows, sub-chunks of 3
            return packed_causal_linear_attention(x, mask, params, 4, 3)
        return packed_bidirectional_linear_attention(x, mask, params, 4, route == "saved")

    assert torch.autograd.gradcheck(fn, (qkv,))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["softmax", "relu"])
@pytest.mark.parametrize("masked", [False, True])
def test_packed_functions_equal_the_flat_ones_with_parameters_that_differ_per_row(
    kind: str, masked: bool, causal: bool
) -> None:
    """Feature parameters that differ for every batch element and head (through FavorAttention
    a causal module's are the same for all batch elements): each element gets its own."""
    b, h, length, d = 2, 2, 11, 4
    params, _, *_ = gradcheck_inputs(kind, False, lq=length, lk=length, n=b * h, d=d)
    mask = _mask(b, length).repeat_interleave(h, dim=0) if masked else None
    qkv = _packed(b, length, h, d, seed=2)
    q, k, v = (t.reshape(b * h, length, d) for t in _views(qkv))
    if causal:  # blocks of 4 rows, sub-chunks of 3
        got = packed_causal_linear_attention(qkv, mask, params, 4, 3)
        want = causal_linear_attention(q, k, v, mask, params, 4, 3)
    else:
        got = packed_bidirectional_linear_attention(qkv, mask, params, 4)
        want = bidirectional_linear_attention(q, k, v, mask, params, 4)
    want = want.view(b, h, length, d).transpose(1, 2)
    torch.testing.assert_close(got, want, atol=1e-14, rtol=1e-12)
    g = torch.randn_like(got)
    (grad,) = torch.autograd.grad((got * g).sum(), qkv)
    (want_grad,) = torch.autograd.grad((want * g).sum(), qkv)
    torch.testing.assert_close(grad, want_grad, atol=1e-13, rtol=1e-12)


def test_an_empty_batch_gives_an_empty_output_and_gradient() -> None:
    params, _, *_ = gradcheck_inputs("softmax", False, lq=5, lk=5, n=0, d=4)
    for fn in (packed_bidirectional_linear_attention, packed_causal_linear_attention):
        qkv = torch.zeros(0, 5, 3, 2, 4, dtype=torch.float64, requires_grad=True)
        out = fn(qkv, None, params)
        assert out.shape == (0, 5, 2, 4)
        out.sum().backward()
        assert qkv.grad.shape == qkv.shape


def test_strided_input_and_gradients_of_the_output_are_read_in_place() -> None:
    """A ``qkv`` that is a permuted view of another buffer, and an output gradient that is not
    contiguous, give what their contiguous copies give."""
    attn = FavorAttention(8, 24, chunk_size=5).double()
    base = torch.randn(2, 3, 4, 13, 8, dtype=torch.float64)  # (B, 3, H, L, D)
    qkv = base.permute(0, 3, 1, 2, 4).requires_grad_()  # (B, L, 3, H, D), not contiguous
    dense = qkv.detach().contiguous().requires_grad_()
    g = torch.randn(2, 4, 13, 8, dtype=torch.float64).transpose(1, 2)  # (B, L, H, D), strided
    out, want = attn.forward_packed(qkv), attn.forward_packed(dense)
    torch.testing.assert_close(out, want, atol=1e-14, rtol=1e-13)
    (grad,) = torch.autograd.grad((out * g).sum(), qkv)
    (grad_dense,) = torch.autograd.grad((want * g.contiguous()).sum(), dense)
    torch.testing.assert_close(grad, grad_dense, atol=1e-14, rtol=1e-13)


@pytest.mark.parametrize("kernel", ["relu", "softmax"])
def test_kept_features_are_saved_tensors_and_the_projection_is_not(kernel: str) -> None:
    """With kept features the backward needs v (and k, softmax) only: copies of them are saved,
    nothing that shares the projection's storage (which would keep all of it alive)."""
    attn = FavorAttention(8, 16, kernel=kernel, chunk_size=5, save_features=True)
    qkv = torch.randn(2, 12, 3, 3, 8, requires_grad=True)
    shapes, shared = [], []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.shape[-1] == 16:
            shapes.append(tuple(t.shape))
        shared.append(t.untyped_storage().data_ptr() == qkv.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn.forward_packed(qkv).sum().backward()
    assert shapes == [(2, 3, 12, 16), (2, 3, 12, 16)]
    assert shared and not any(shared)
    attn.save_features = False  # the default: q, k, v are read from the projection itself
    shared.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn.forward_packed(qkv).sum().backward()
    assert any(shared)
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        shapes.clear()
        attn.forward_packed(qkv)
    assert shapes == []


def test_empty_inputs_take_the_flat_route() -> None:
    empty = torch.zeros(2, 0, 3, 2, 8, requires_grad=True)
    out = FavorAttention(8, 16).forward_packed(empty)
    assert out.shape == (2, 0, 2, 8)
    out.sum().backward()
    assert empty.grad is not None and empty.grad.shape == empty.shape


def test_wrong_shape_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\(B, L, 3, H, D\)"):
        FavorAttention(8, 16).forward_packed(torch.zeros(2, 10, 2, 2, 8))


def test_bf16_autocast_runs_in_float32_and_returns_bf16() -> None:
    attn = FavorAttention(16, 32, kernel="relu")
    qkv = torch.randn(2, 40, 3, 2, 16).bfloat16().requires_grad_()
    want = attn.forward_packed(qkv.detach().float())  # float32 from the same bf16 values
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = attn.forward_packed(qkv)
    assert got.dtype == torch.bfloat16
    # the float32 result rounded once to bf16, nothing computed in bf16
    torch.testing.assert_close(got, want.bfloat16(), atol=0, rtol=0)
    got.float().sum().backward()
    assert qkv.grad is not None and qkv.grad.dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("position", "causal"), [("learned", False), ("rotary", False), ("rotary", True)]
)
@pytest.mark.parametrize("attention", ["performer_relu", "performer_softmax"])
def test_a_model_takes_the_packed_route_with_the_same_loss_and_gradients(
    attention: str, position: str, causal: bool, monkeypatch
) -> None:
    import protein_performer.attention.kernels.causal as ca
    from protein_performer.model.config import ModelConfig
    from protein_performer.model.performer import ProteinLM

    config = ModelConfig(
        attention=attention, dim=32, depth=2, heads=4, ffn_dim=64, dropout=0.0, position=position
    )
    model = ProteinLM(config, 25, 0, causal=causal).double()
    ids = torch.randint(4, 25, (3, 17))
    ids[0, -4:] = 0  # padding

    def loss_and_grads() -> tuple[torch.Tensor, ...]:
        model.zero_grad()
        loss = model(ids)["logits"].square().mean()
        loss.backward()
        return (loss.detach(), *(p.grad.clone() for p in model.parameters()))

    calls = []
    function = ca.PackedCausalFavorFunction if causal else la.PackedBidirectionalFavorFunction
    if not causal and fused_cpu.kernel() is not None:  # the compiled kernel, where it builds
        function = {
            "performer_relu": fused_cpu.FusedReluFavorFunction,
            "performer_softmax": fused_cpu.FusedSoftmaxFavorFunction,
        }[attention]
    forward = function.forward

    def spy(ctx, *args):
        calls.append(args[0].shape)
        return forward(ctx, *args)

    monkeypatch.setattr(function, "forward", staticmethod(spy))
    packed = loss_and_grads()
    assert calls == [(3, 17, 3, 4, 8)] * 2  # every layer, one call each

    # the route before: q, k, v as (B, H, L, D) views, rotated by apply_rotary
    monkeypatch.setattr(SelfAttention, "forward", _flat_self_attention)
    for got, want in zip(packed, loss_and_grads(), strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)


def _flat_self_attention(self, x, padding_mask=None, rotary=None, need_weights=False):
    b, n, _ = x.shape
    q, k, v = self._split(x, padding_mask)
    if rotary is not None:
        q, k = apply_rotary(q, k, *rotary)
    o = self.favor(q, k, v, key_padding_mask=padding_mask)
    return self.out(o.transpose(1, 2).reshape(b, n, -1)), None


@pytest.mark.slow
def test_rotate_packed_is_apply_rotary_on_the_packed_layout() -> None:
    qkv = _packed(2, 11, 3, 8)
    cos, sin = RotaryEmbedding(8)(11, qkv.device, torch.float64)
    q, k, v = _views(qkv)
    want = torch.stack([*apply_rotary(q, k, cos, sin), v]).permute(1, 3, 0, 2, 4)
    got = rotate_packed(qkv, cos, sin)
    torch.testing.assert_close(got, want, atol=1e-15, rtol=0)
    g = torch.randn_like(got)
    (grad,) = torch.autograd.grad((got * g).sum(), qkv)
    (want_grad,) = torch.autograd.grad((want * g).sum(), qkv)
    torch.testing.assert_close(grad, want_grad, atol=1e-15, rtol=0)
    assert torch.autograd.gradcheck(lambda x: rotate_packed(x, cos, sin), (qkv,))
    # any tables, not only those whose halves repeat (RotaryEmbedding's): the transpose is exact
    cos, sin = torch.randn(2, 11, 8, dtype=torch.float64)
    q, k, v = _views(qkv)
    want = torch.stack([*apply_rotary(q, k, cos, sin), v]).permute(1, 3, 0, 2, 4)
    got = rotate_packed(qkv, cos, sin)
    g = torch.randn_like(got)
    for a, b in zip(
        torch.autograd.grad((got * g).sum(), qkv),
        torch.autograd.grad((want * g).sum(), qkv),
        strict=True,
    ):
        torch.testing.assert_close(a, b, atol=1e-14, rtol=0)
    assert torch.autograd.gradcheck(lambda x: rotate_packed(x, cos, sin), (qkv,))


def test_rotate_packed_promotes_as_apply_rotary_and_returns_the_input_dtype_gradient() -> None:
    qkv = torch.randn(1, 5, 3, 2, 4, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = RotaryEmbedding(4)(5, qkv.device, torch.float32)
    q, k, _ = _views(qkv)
    out = rotate_packed(qkv, cos, sin)
    assert out.dtype == apply_rotary(q, k, cos, sin)[0].dtype == torch.float32
    out.sum().backward()
    assert qkv.grad.dtype == torch.bfloat16
