"""Causal FAVOR attention: exact prefix sums, gradients, no look-ahead, O(m·D) saved memory."""

from __future__ import annotations

import pytest
import torch

from protein_performer.attention import FavorAttention
from protein_performer.attention.kernels.causal import causal_linear_attention
from tests.attention.reference import explicit_from_features, gradcheck_inputs

CONFIGS = [
    {"kernel": "softmax", "estimator": "oprf"},
    {"kernel": "softmax", "estimator": "favor+", "orthogonal": False},
    {"kernel": "relu"},
    {"kernel": "relu", "projection": "none"},
]


def _qkv(b: int, h: int, length: int, d: int, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(b, h, length, d, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        for _ in range(3)
    )


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize(("chunk", "sub"), [(1, 1), (7, 3), (12, 4), (64, 64)])
def test_matches_explicit_masked_computation_forward_and_gradients(
    cfg: dict, chunk: int, sub: int
) -> None:
    attn = FavorAttention(16, 40, causal=True, chunk_size=chunk, subchunk_size=sub, **cfg)
    attn = attn.double()
    q, k, v = _qkv(2, 3, 29, 16)
    mask = torch.zeros(2, 29, dtype=torch.bool)
    mask[1, :4] = True  # left padding: the first rows see no key at all
    for key_padding_mask in (None, mask):
        out = attn(q, k, v, key_padding_mask=key_padding_mask)
        phi_q, phi_k = attn.features(q, k, key_padding_mask=key_padding_mask)
        ref = explicit_from_features(phi_q, phi_k, v, causal=True)
        torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)
        g = torch.randn_like(out)
        grads = torch.autograd.grad((out * g).sum(), (q, k, v))
        ref_grads = torch.autograd.grad((ref * g).sum(), (q, k, v))
        for got, want in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("kind", ["softmax", "relu"])
@pytest.mark.parametrize("masked", [False, True])
def test_gradcheck_of_the_custom_function(kind: str, masked: bool) -> None:
    params, mask, q, k, v = gradcheck_inputs(kind, masked, lq=9, lk=9)

    def fn(a, b, c):
        return causal_linear_attention(a, b, c, mask, params, 5, 2)

    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_outputs_do_not_depend_on_future_positions(cfg: dict) -> None:
    attn = FavorAttention(16, 32, causal=True, chunk_size=5, **cfg).double()
    q, k, v = _qkv(1, 2, 24, 16, seed=1)
    cut = 11
    with torch.no_grad():
        base = attn(q, k, v)
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        for t in (q2, k2, v2):
            t[:, :, cut:] = torch.randn_like(t[:, :, cut:]) * 5
        moved = attn(q2, k2, v2)
    torch.testing.assert_close(moved[:, :, :cut], base[:, :, :cut], atol=1e-12, rtol=1e-10)
    assert not torch.allclose(moved[:, :, cut:], base[:, :, cut:])


def test_large_later_key_cannot_underflow_earlier_chunks() -> None:
    """A key with the largest possible logit late in the sequence leaves earlier chunks
    bit-identical (the stabiliser is a running max, not a global one)."""
    attn = FavorAttention(16, 64, causal=True, chunk_size=8, estimator="favor+")
    q, k, v = (t.detach() for t in _qkv(1, 2, 32, 16, seed=2, dtype=torch.float32))
    with torch.no_grad():
        base = attn(q, k, v)
        k2 = k.clone()
        # along a projection row, at the norm that maximises its logit: the largest key logit
        k2[:, :, 30] = attn.projection[0] * 16**0.25
        moved = attn(q, k2, v)
    assert torch.isfinite(moved).all()
    assert torch.equal(moved[:, :, :24], base[:, :, :24])


def test_last_position_equals_bidirectional_output() -> None:
    kwargs = {"estimator": "favor+", "seed": 3, "chunk_size": 6}
    causal = FavorAttention(16, 32, causal=True, **kwargs).double()
    bidir = FavorAttention(16, 32, causal=False, **kwargs).double()
    q, k, v = _qkv(2, 2, 17, 16, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(causal(q, k, v)[:, :, -1], bidir(q, k, v)[:, :, -1])


@pytest.mark.parametrize("causal", [True, False])
def test_autograd_saves_no_per_position_feature_matrix(causal: bool) -> None:
    """Saved tensors are inputs/outputs-sized: nothing of size L·m (features) or L·m·D (the
    causal kernel always rebuilds its features; the bidirectional one when told to)."""
    b, h, length, d, m = 1, 2, 512, 16, 256
    # causal: save_features=True, which the causal kernel does not act on
    attn = FavorAttention(d, m, causal=causal, save_features=causal)
    q, k, v = _qkv(b, h, length, d, seed=4, dtype=torch.float32)
    sizes: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = attn(q, k, v)
    largest_allowed = b * h * length * (d + 1)  # the [V, 1] matrix
    assert max(sizes) <= largest_allowed
    assert max(sizes) < b * h * length * m  # a feature matrix would be this large
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_lq_must_equal_lk() -> None:
    attn = FavorAttention(8, 16, causal=True)
    q = torch.randn(1, 1, 5, 8)
    k = torch.randn(1, 1, 6, 8)
    with pytest.raises(ValueError, match="Lq == Lk"):
        attn(q, k, k)


@pytest.mark.parametrize("chunk", [64, 1024])
def test_large_later_keys_do_not_underflow_earlier_rows_at_any_block_size(chunk: int) -> None:
    # Keys 0..255 have a large norm (their logits sit far below those of the ordinary keys
    # after them): a stabiliser shared with later rows would underflow their features.
    g = torch.Generator().manual_seed(0)
    length, d = 1024, 32
    q, k, v = (torch.randn(1, 2, length, d, generator=g, dtype=torch.float64) for _ in range(3))
    k[:, :, :256] *= 50.0 / k[:, :, :256].norm(dim=-1, keepdim=True)
    kwargs = {"causal": True, "estimator": "favor+", "chunk_size": chunk, "subchunk_size": 32}
    reference = FavorAttention(d, 128, **kwargs).double()
    ref = explicit_from_features(*reference.features(q, k), v, causal=True)
    with torch.no_grad():
        out = FavorAttention(d, 128, **kwargs)(q.float(), k.float(), v.float()).double()
    early = slice(0, 256)
    assert bool((out[:, :, early].abs().sum(-1) > 0).all())
    err = (out - ref)[:, :, early].norm() / ref[:, :, early].norm()
    assert err < 1e-4
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-3)


def test_rows_whose_features_all_underflow_give_zero_not_nan_gradients() -> None:
    # large-norm early keys: in float32 some rows' normalisers become subnormal; 1/den would
    # overflow in the backward (inf * 0 = NaN in every gradient of the batch)
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 300, 32, generator=g) for _ in range(3))
    k[:, :, :150] *= 10.0
    attn = FavorAttention(32, 64, causal=True, chunk_size=300, estimator="favor+")
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = attn(q, k, v)
    out.sum().backward()
    assert bool(torch.isfinite(out).all())
    assert all(bool(torch.isfinite(t.grad).all()) for t in (q, k, v))
