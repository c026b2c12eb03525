"""Random projections: orthogonality, Haar directions, chi norms, seeding, antithetic pairs."""

from __future__ import annotations

import math

import pytest
import torch

from protein_performer.attention.projections import (
    derive_seed,
    draw_projection,
    gaussian_orthogonal_matrix,
)


def test_orthogonal_blocks_have_orthogonal_rows_and_fixed_norms() -> None:
    w = draw_projection(160, 64, seed=3, norm="sqrt_d")  # two full blocks and a partial one
    for block in (w[:64], w[64:128], w[128:]):
        gram = block @ block.T
        torch.testing.assert_close(
            gram, 64.0 * torch.eye(len(block), dtype=w.dtype), atol=1e-9, rtol=0
        )
    # rows of different blocks are independent: not orthogonal
    assert (w[:64] @ w[64:128].T).abs().max() > 1.0


def test_iid_matrix_is_not_orthogonal() -> None:
    w = draw_projection(64, 64, seed=3, orthogonal=False)
    gram = w @ w.T
    off = gram - torch.diag(torch.diagonal(gram))
    assert off.abs().max() > 5.0


def test_rows_are_marginally_standard_normal() -> None:
    """Covariance of rows over many draws is the identity; squared norms follow chi²(d)."""
    d = 8
    rows = torch.cat([draw_projection(16, d, seed=1, counter=c) for c in range(600)])
    n = rows.shape[0]
    cov = rows.T @ rows / n
    torch.testing.assert_close(cov, torch.eye(d, dtype=cov.dtype), atol=0.08, rtol=0)
    sq = rows.pow(2).sum(1)
    assert abs(sq.mean().item() - d) < 4 * math.sqrt(2 * d / n)
    assert abs(sq.var().item() / (2 * d) - 1) < 0.15  # chi²(d) variance 2d


def test_block_directions_are_haar_not_qr_biased() -> None:
    """Without the sign fix, Householder QR makes the first coordinate of the first direction
    always negative; Haar directions have mean zero."""
    g = torch.Generator().manual_seed(0)
    first = (
        torch.stack(
            [
                gaussian_orthogonal_matrix(64, 64, generator=g, norm="sqrt_d")[0, 0]
                for _ in range(400)
            ]
        )
        / 8.0
    )
    se = first.std().item() / math.sqrt(len(first))
    assert abs(first.mean().item()) < 4 * se
    assert (first > 0).any() and (first < 0).any()


def test_same_seed_layer_counter_is_bitwise_identical_and_others_differ() -> None:
    a = draw_projection(96, 32, seed=7, layer_idx=2, counter=5)
    b = draw_projection(96, 32, seed=7, layer_idx=2, counter=5)
    assert torch.equal(a, b)
    for other in (
        draw_projection(96, 32, seed=8, layer_idx=2, counter=5),
        draw_projection(96, 32, seed=7, layer_idx=3, counter=5),
        draw_projection(96, 32, seed=7, layer_idx=2, counter=6),
    ):
        assert not torch.allclose(a, other)


def test_derive_seed_has_no_collisions_on_a_grid() -> None:
    seeds = {derive_seed(s, layer, c) for s in range(4) for layer in range(12) for c in range(40)}
    assert len(seeds) == 4 * 12 * 40
    assert all(0 <= s < 2**63 for s in seeds)


@pytest.mark.parametrize("rows", [64, 65, 256])
def test_antithetic_rows_come_in_opposite_pairs(rows: int) -> None:
    w = draw_projection(rows, 16, seed=0, antithetic=True)
    half = math.ceil(rows / 2)
    assert w.shape == (rows, 16)
    torch.testing.assert_close(w[half:], -w[: rows - half], atol=0, rtol=0)


def test_invalid_arguments_raise() -> None:
    with pytest.raises(ValueError, match="positive"):
        draw_projection(0, 4, seed=0)
    with pytest.raises(ValueError, match="orthogonal"):
        draw_projection(4, 4, seed=0, orthogonal=False, norm="sqrt_d")


@pytest.mark.parametrize("orthogonal, norm", [(True, "chi"), (True, "sqrt_d"), (False, "chi")])
def test_draws_are_made_on_the_cpu_whatever_the_default_device(orthogonal, norm) -> None:
    # Lightning's init_module() or torch.set_default_device("cuda") set another default
    kw = {"seed": 3, "layer_idx": 1, "orthogonal": orthogonal, "antithetic": True, "norm": norm}
    expected = draw_projection(8, 4, **kw)
    with torch.device("meta"):
        drawn = draw_projection(8, 4, **kw)
    assert drawn.device.type == "cpu" and torch.equal(drawn, expected)
