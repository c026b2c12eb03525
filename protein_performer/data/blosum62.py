"""BLOSUM62 (Henikoff & Henikoff 1992), loaded once for the whole package: the substitution
scores that the pairwise aligner, the simulated families, the similarity views and the mutant
baseline all read."""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def blosum62_matrix() -> Any:
    """Biopython's BLOSUM62: a read-only ``Bio.Align.substitution_matrices.Array`` of integer
    half-bit scores, (24, 24) over ``ARNDCQEGHILKMFPSTWYVBZX*``, indexed by letters
    (``m["A", "W"]``); made once, shared by every caller (hence read-only)."""
    from Bio.Align import substitution_matrices

    matrix = substitution_matrices.load("BLOSUM62")
    matrix.setflags(write=False)
    return matrix
