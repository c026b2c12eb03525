"""Residue-level alignment of two proteins (Biopython's pairwise aligner: local, BLOSUM62, gap
open 10 / extend 0.5, EMBOSS water's defaults). Used to supervise and to measure attention that
should find the aligned residue of a homolog."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from protein_performer.data.blosum62 import blosum62_matrix

GAP_OPEN = -10.0
GAP_EXTEND = -0.5


def aligned_positions(query: str, subject: str) -> np.ndarray:
    """``(len(query),)`` int64: for each query residue, the index of the subject residue it is
    aligned to (a local BLOSUM62 alignment), ``-1`` for gaps and residues outside the alignment.

    Letters BLOSUM62 lacks (e.g. ``U``, ``O``) are scored as ``X``.
    """
    aligner, known = local_aligner()
    clean_q = "".join(c if c in known else "X" for c in query.upper())
    clean_s = "".join(c if c in known else "X" for c in subject.upper())
    out = np.full(len(query), -1, dtype=np.int64)
    if not clean_q or not clean_s:
        return out
    alignments = aligner.align(clean_s, clean_q)
    if alignments.score <= 0:
        return out
    best = alignments[0]
    for (s0, s1), (q0, q1) in zip(*best.aligned, strict=True):
        out[q0:q1] = np.arange(s0, s1)
    return out


@lru_cache(maxsize=1)
def local_aligner() -> tuple[Any, frozenset[str]]:
    """Biopython's local BLOSUM62 aligner with this module's gap scores (made once), and the
    letters its matrix knows."""
    from Bio.Align import PairwiseAligner

    matrix = blosum62_matrix()
    aligner = PairwiseAligner(
        mode="local",
        substitution_matrix=matrix,
        open_gap_score=GAP_OPEN,
        extend_gap_score=GAP_EXTEND,
    )
    return aligner, frozenset(matrix.alphabet)


_aligner = local_aligner  # its old name, kept for one release
