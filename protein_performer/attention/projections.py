"""Seeded random projection matrices for random-feature attention.

Every matrix is drawn on the CPU in float64 from a ``torch.Generator`` seeded by
:func:`derive_seed`, so the same ``(seed, layer_idx, counter)`` gives bit-identical
matrices on every device and every DDP rank, with no communication.
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

import torch

NormKind = Literal["chi", "sqrt_d"]


def derive_seed(seed: int, layer_idx: int, counter: int) -> int:
    """A 63-bit generator seed mixed from ``(seed, layer_idx, counter)`` (stable across runs)."""
    digest = hashlib.blake2b(f"favor:{seed}:{layer_idx}:{counter}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") & ((1 << 63) - 1)


def _haar_orthogonal(dim: int, generator: torch.Generator) -> torch.Tensor:
    """A Haar-distributed ``(dim, dim)`` orthogonal matrix (rows orthonormal)."""
    gauss = torch.randn(dim, dim, generator=generator, dtype=torch.float64, device="cpu")
    q, r = torch.linalg.qr(gauss)
    # Without the sign fix the QR factor is not Haar distributed, and the rows would no
    # longer be marginally uniform directions (the estimator would become biased).
    return (q * torch.sign(torch.diagonal(r))).T


def _row_norms(rows: int, dim: int, norm: NormKind, generator: torch.Generator) -> torch.Tensor:
    if norm == "chi":
        return torch.randn(rows, dim, generator=generator, dtype=torch.float64, device="cpu").norm(
            dim=1
        )
    if norm == "sqrt_d":
        return torch.full((rows,), math.sqrt(dim), dtype=torch.float64, device="cpu")
    raise ValueError(f"unknown norm kind {norm!r} (expected 'chi' or 'sqrt_d')")


def gaussian_orthogonal_matrix(
    rows: int, dim: int, *, generator: torch.Generator, norm: NormKind = "chi"
) -> torch.Tensor:
    """``(rows, dim)`` float64: stacked Haar orthogonal blocks truncated to ``rows``.

    ``norm="chi"`` gives each row the norm of an independent ``dim``-dimensional Gaussian,
    so every row is marginally ``N(0, I)`` (unbiased estimators); ``"sqrt_d"`` fixes the
    norm to ``sqrt(dim)`` (the "regularized" variant, slightly biased).
    """
    blocks = [_haar_orthogonal(dim, generator) for _ in range(math.ceil(rows / dim))]
    directions = torch.cat(blocks)[:rows]
    return directions * _row_norms(rows, dim, norm, generator)[:, None]


def gaussian_iid_matrix(rows: int, dim: int, *, generator: torch.Generator) -> torch.Tensor:
    """``(rows, dim)`` float64 with iid ``N(0, 1)`` entries."""
    return torch.randn(rows, dim, generator=generator, dtype=torch.float64, device="cpu")


def draw_projection(
    rows: int,
    dim: int,
    *,
    seed: int,
    layer_idx: int = 0,
    counter: int = 0,
    orthogonal: bool = True,
    antithetic: bool = False,
    norm: NormKind = "chi",
) -> torch.Tensor:
    """The ``(rows, dim)`` float64 projection for ``(seed, layer_idx, counter)``, drawn on
    the CPU whatever the default device (bit-identical on every machine and DDP rank).

    ``antithetic`` draws ``ceil(rows/2)`` rows ``w`` and uses ``[w; -w]`` (truncated): each
    row is still marginally ``N(0, I)``, so unbiasedness is kept while the paired features
    are negatively correlated.
    """
    if rows < 1 or dim < 1:
        raise ValueError(f"projection shape must be positive, got ({rows}, {dim})")
    generator = torch.Generator(device="cpu").manual_seed(derive_seed(seed, layer_idx, counter))
    base_rows = math.ceil(rows / 2) if antithetic else rows
    if orthogonal:
        base = gaussian_orthogonal_matrix(base_rows, dim, generator=generator, norm=norm)
    else:
        if norm != "chi":
            raise ValueError("norm='sqrt_d' needs orthogonal=True")
        base = gaussian_iid_matrix(base_rows, dim, generator=generator)
    if antithetic:
        base = torch.cat([base, -base])[:rows]
    return base
