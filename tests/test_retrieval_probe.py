"""benchmarks/retrieval.py's windows: the copy sits at a fixed offset unless --vary-length."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

from protein_performer.data.alphabet import default_alphabet

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _probe():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("retrieval_probe", BENCH / "retrieval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_copy_offsets_are_fixed_by_the_crop_and_vary_with_vary_length():
    probe = _probe()
    alphabet = default_alphabet()
    members = [np.asarray(alphabet.encode("ACDEFGHIKLMNPQRSTVWY" * 20), dtype=np.uint8)]
    offsets = {}
    for vary in (False, True):
        args = argparse.Namespace(crop=60, context="copy", vary_length=vary)
        rng = np.random.default_rng(0)
        found = set()
        for _ in range(30):
            tokens, labels, single, _ = probe.make_window(rng, members, args, alphabet)
            target = len(single) - 2  # <cls> target <eos>
            assert 30 <= target <= 60
            # <cls> copy <sep> target <eos>: each scored target residue is in the copy,
            # target + 1 tokens earlier; nothing else is scored
            scored = np.flatnonzero(labels != -100)
            assert len(scored) and scored.min() >= target + 2
            np.testing.assert_array_equal(tokens[scored - (target + 1)], labels[scored])
            found.add(target + 1)  # distance from a copy residue to its target twin
        offsets[vary] = found
    assert offsets[False] == {61}
    assert len(offsets[True]) > 5
