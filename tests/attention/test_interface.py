"""One interface for every attention kind: registered by the model's names, the same calls, and
``forward_at`` (the output at chosen query positions) equal to the forward's rows there."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from protein_performer.attention import (
    ATTENTION_CLASSES,
    AttentionKind,
    AttentionOptions,
    build_attention,
)
from protein_performer.model.config import ATTENTION_KINDS

KINDS = sorted(ATTENTION_CLASSES)


def test_the_registry_holds_the_models_kinds_and_the_local_one() -> None:
    assert set(ATTENTION_CLASSES) == {*ATTENTION_KINDS, "local"}
    for name in KINDS:
        assert issubclass(ATTENTION_CLASSES[name], AttentionKind)
    with pytest.raises(ValueError, match="registered: performer_relu"):
        build_attention("flash", AttentionOptions(dim_head=8))


def test_the_block_names_no_attention_kind() -> None:
    source = (Path(__file__).parents[2] / "protein_performer/model/blocks.py").read_text()
    for name in KINDS:
        assert f'"{name}"' not in source.replace('("local", slice', ""), name


def _kind(name: str, causal: bool, length_base: int = 0) -> AttentionKind:
    torch.manual_seed(0)
    options = AttentionOptions(
        dim_head=8, heads=3, causal=causal, nb_features=16, window=3, length_base=length_base
    )
    module = build_attention(name, options).double().eval()
    if name == "hedgehog":  # away from the identity start, so that a wrong head would show
        with torch.no_grad():
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 0.3)
    return module


def _inputs(seed: int = 1) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, 13, 8, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.zeros(2, 13, dtype=torch.bool)
    mask[1, 9:] = True
    k[1, :, 10] = float("nan")  # a padded key holding anything must not reach a row
    v[1, :, 11] = float("nan")
    positions = torch.tensor([[0, 5, 12], [8, 2, 8]])
    return q, k, v, mask, positions


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", KINDS)
def test_forward_at_is_the_forward_at_those_rows(name: str, causal: bool) -> None:
    kind = _kind(name, causal, length_base=7 if name == "transformer" else 0)
    q, k, v, mask, positions = _inputs()
    full = kind(q, k, v, key_padding_mask=mask)
    got = kind.forward_at(q, k, v, positions, mask)
    assert got.shape == (2, 3, 3, 8)
    want = torch.stack([full[b][:, positions[b]] for b in range(2)])
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-9)
    # another row is another answer (the check can fail)
    assert not torch.allclose(kind.forward_at(q, k, v, positions.flip(1), mask), want)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", KINDS)
def test_rows_matrix_and_forward_agree(name: str, causal: bool) -> None:
    kind = _kind(name, causal)
    q, k, v, mask, _ = _inputs(2)
    k, v = k.nan_to_num(0.0), v.nan_to_num(0.0)
    with torch.no_grad():
        matrix = kind.matrix(q, k, mask)
    assert matrix.shape == (2, 3, 13, 13)
    rows = torch.cat([r for _, r in kind.rows(q, k, mask, chunk_size=4)], dim=2)
    torch.testing.assert_close(rows, matrix, atol=1e-12, rtol=0)
    assert float(matrix[1, :, :, 9:].abs().max()) == 0.0  # padded keys take nothing
    sums = torch.ones(2, 3, 13, dtype=torch.float64)
    if name == "local":  # the last row sees keys 9..12 within its window, all padded
        sums[1, :, 12] = 0.0
    torch.testing.assert_close(matrix.sum(-1), sums)
    if name != "performer_softmax" or not causal:  # (the causal stabilisers differ, see favor)
        with torch.no_grad():
            out = kind(q, k, v, key_padding_mask=mask)
        torch.testing.assert_close(matrix @ v, out, atol=1e-9, rtol=1e-9)
    picked = torch.cat([r for _, r in kind.rows(q, k, mask, chunk_size=5, heads=[2, 0])], dim=2)
    torch.testing.assert_close(picked, matrix[:, [2, 0]], atol=1e-12, rtol=0)


def test_forward_at_refuses_positions_outside_the_queries() -> None:
    kind = _kind("transformer", False)
    q, k, v, mask, _ = _inputs()
    with pytest.raises(ValueError, match=r"0\.\.12"):
        kind.forward_at(q, k, v, torch.tensor([[13], [0]]), mask)
    with pytest.raises(ValueError, match=r"\(B, P\)"):
        kind.forward_at(q, k, v, torch.tensor([1, 2]), mask)


def test_moved_names_still_import_from_their_old_homes() -> None:
    from protein_performer.attention import exact
    from protein_performer.attention.kernels import bidirectional, common
    from protein_performer.model import blocks

    assert blocks.exact_attention_rows is exact.exact_attention_rows
    assert blocks.exact_attention_weights is exact.exact_attention_weights
    for name in ("blocks", "den_floor", "output_adjoint", "split_output", "values_with_ones"):
        assert getattr(bidirectional, name) is getattr(common, name)
