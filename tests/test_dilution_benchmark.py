"""benchmarks/dilution.py's windows: fill, then the unmasked copy, then the masked protein."""

from __future__ import annotations

import numpy as np

from protein_performer.data.alphabet import default_alphabet
from tests.benchmark_scripts import load_benchmark


def _bench():
    return load_benchmark("dilution.py")


def test_copy_is_aligned_with_the_target_after_exactly_the_fill_asked_for():
    bench = _bench()
    alphabet = default_alphabet()
    rng = np.random.default_rng(0)
    proteins = [
        np.asarray(alphabet.encode("".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), n))))
        for n in rng.integers(60, 200, 12)
    ]
    for fill in (0, 150, 700):
        rows = bench.windows(proteins, 3, 50, fill, alphabet, seed=1)
        again = bench.windows(proteins, 3, 50, fill, alphabet, seed=1)
        for row, same in zip(rows, again, strict=True):
            np.testing.assert_array_equal(row["tokens"], same["tokens"])  # seeded
            tokens, labels, start, copy = row["tokens"], row["labels"], row["start"], row["copy"]
            n = start - 1 - copy  # the copy's length = the target's
            assert copy - 1 in (fill, fill - 1)  # <cls>, the fill (a lone <sep> left out), copy
            assert tokens[start - 1] == alphabet.sep_idx and tokens[-1] == alphabet.eos_idx
            scored = np.flatnonzero(labels != -100)
            assert len(scored) and scored.min() >= start and scored.max() < start + n
            # each scored residue's answer sits unmasked at the same offset in the copy
            np.testing.assert_array_equal(tokens[copy + scored - start], labels[scored])
            assert (tokens[scored] == alphabet.mask_idx).all()
            # the single-protein window scores the same positions with the same answers
            np.testing.assert_array_equal(row["single_y"][1:-1], labels[start : start + n])
