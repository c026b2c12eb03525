"""The one BLOSUM62 loader: Biopython's matrix unchanged, made once, read-only, and the only place
the package loads it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from Bio.Align import substitution_matrices

from protein_performer.analysis.dms.marginals import blosum62_scores
from protein_performer.analysis.dms.variants import Substitution
from protein_performer.analysis.similarity import AA_ORDER, blosum62
from protein_performer.data.blosum62 import blosum62_matrix
from protein_performer.data.pairwise_alignment import local_aligner
from protein_performer.data.simulate import AMINO_ACIDS, blosum62_model

PACKAGE = Path(__file__).resolve().parents[2] / "protein_performer"


def test_the_loader_gives_biopythons_matrix_once_and_read_only():
    ref = substitution_matrices.load("BLOSUM62")
    m = blosum62_matrix()
    assert m is blosum62_matrix()  # cached
    assert m.alphabet == ref.alphabet
    np.testing.assert_array_equal(np.asarray(m), np.asarray(ref))
    assert (m["A", "A"], m["W", "W"], m["A", "W"], m["E", "K"]) == (4, 11, -3, 1)
    with pytest.raises(ValueError, match="read-only"):
        m["A", "A"] = 0


def test_every_caller_reads_the_same_scores():
    ref = substitution_matrices.load("BLOSUM62")
    want = np.array([[ref[a, b] for b in AA_ORDER] for a in AA_ORDER])
    np.testing.assert_array_equal(blosum62(), want)
    want = np.array([[ref[a, b] for b in AMINO_ACIDS] for a in AMINO_ACIDS])
    np.testing.assert_array_equal(blosum62_model().scores, want)
    aligner, known = local_aligner()
    assert known == frozenset(ref.alphabet)
    assert aligner.align("WWCC", "WWCC").score == pytest.approx(2 * 11 + 2 * 9)
    mutants = [[Substitution(3, "A", "W")], [Substitution(3, "E", "K"), Substitution(5, "L", "I")]]
    np.testing.assert_array_equal(
        blosum62_scores(mutants), [ref["A", "W"], ref["E", "K"] + ref["L", "I"]]
    )


def test_no_module_loads_blosum62_but_the_loader():
    loads = [
        str(p.relative_to(PACKAGE))
        for p in sorted(PACKAGE.rglob("*.py"))
        if re.search(r"substitution_matrices\.load\(", p.read_text(encoding="utf-8"))
    ]
    assert loads == ["data/blosum62.py"]
