"""Alignment heads: the alignment maps residues right, and the attention on aligned residues is
measured against attention planted by hand."""

from __future__ import annotations

import numpy as np
import pytest

from protein_performer.analysis.alignment_heads import aligned_mass, alignment_pairs
from protein_performer.data.pairwise_alignment import aligned_positions

AA = "ACDEFGHIKLMNPQRSTVWY"


def random_sequence(n: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    return "".join(AA[i] for i in rng.integers(0, 20, n))


def test_identical_sequences_align_residue_by_residue():
    s = random_sequence(80, 0)
    np.testing.assert_array_equal(aligned_positions(s, s), np.arange(80))


def test_an_insertion_shifts_the_aligned_positions_and_is_a_gap():
    subject = random_sequence(100, 1)
    query = subject[:50] + "WWWWWW" + subject[50:]  # six residues the subject lacks
    hit = aligned_positions(query, subject)
    np.testing.assert_array_equal(hit[:50], np.arange(50))
    assert (hit[50:56] == -1).all()
    np.testing.assert_array_equal(hit[56:], np.arange(50, 100))


def test_a_local_hit_leaves_the_rest_unaligned_and_unknown_letters_are_x():
    core = random_sequence(60, 2)
    query = random_sequence(40, 3).replace("C", "U") + core
    subject = core + random_sequence(40, 4)
    hit = aligned_positions(query, subject)
    np.testing.assert_array_equal(hit[40:], np.arange(60))
    assert (hit[:40] >= 0).sum() < 10  # unrelated flank: at most a spurious scrap
    assert (aligned_positions("", subject) == -1).all()
    assert (aligned_positions("WWW", "PPP") == -1).all()  # no positive-scoring alignment


def test_alignment_pairs_are_in_window_coordinates_for_each_homolog():
    a, b = random_sequence(30, 5), random_sequence(25, 6)
    query = a[:20] + b[:10]  # its first 20 residues from a, its last 10 from b
    segments = [(0, 30), (31, 56), (57, 87)]
    queries, keys = alignment_pairs(segments, [a, b, query])
    pairs = set(zip(queries.tolist(), keys.tolist(), strict=True))
    assert {(57 + i, i) for i in range(20)} <= pairs
    assert {(77 + i, 31 + i) for i in range(10)} <= pairs
    assert all(57 <= q < 87 and k < 56 for q, k in pairs)
    with pytest.raises(ValueError, match="segments but"):
        alignment_pairs(segments, [a, query])
    with pytest.raises(ValueError, match="differs from its sequence"):
        alignment_pairs([(0, 29), (30, 60)], [a, query])


def test_aligned_mass_against_planted_attention():
    n = 12
    queries = np.array([8, 9, 10, 10])  # query 10 aligns to two homologs
    keys = np.array([1, 2, 3, 5])
    att = np.full((1, 3, n, n), 1.0 / n)  # head 0: uniform
    att[0, 1] = 0.0
    att[0, 1, queries, keys] = 1.0  # head 1: all on the aligned residues (10 splits 2 ways)
    att[0, 1, 10] /= 2
    att[0, 2] = 0.0
    att[0, 2, queries, keys + 1] = 2.0  # head 2: one residue off, rows not normalised
    mass, uniform = aligned_mass(att, queries, keys)
    np.testing.assert_allclose(uniform, (1 + 1 + 2) / 3 / n)
    np.testing.assert_allclose(mass[0, 0], uniform)
    np.testing.assert_allclose(mass[0, 1], 1.0)
    np.testing.assert_allclose(mass[0, 2], 0.0)
    empty, none = aligned_mass(att, np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert np.isnan(empty).all() and np.isnan(none)


def test_aligned_mass_of_uniform_attention_is_its_uniform_value() -> None:
    n = 30
    queries = np.array([20, 20, 25, 29])  # a later protein's residues ...
    keys = np.array([3, 4, 8, 12])  # ... aligned to an earlier one's
    full = np.full((1, 1, n, n), 1.0 / n)
    causal = (np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None])[None, None]
    for matrix, is_causal in ((full, False), (causal, True)):
        mass, uniform = aligned_mass(matrix, queries, keys, causal=is_causal)
        assert mass[0, 0] == pytest.approx(uniform, abs=1e-12)
    assert uniform == pytest.approx(np.mean([2 / 21, 1 / 26, 1 / 30]))


def test_the_old_import_path_is_the_renamed_module():
    """analysis/alignment.py was renamed for what it holds; its old name stays for one release."""
    from protein_performer.analysis import alignment, alignment_heads
    from protein_performer.analysis.alignment import aligned_mass as old_aligned_mass

    assert alignment is alignment_heads and old_aligned_mass is aligned_mass
