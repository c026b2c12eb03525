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
            tokens, labels, single, _, align_to = probe.make_window(rng, members, args, alphabet)
            target = len(single) - 2  # <cls> target <eos>
            assert 30 <= target <= 60
            # <cls> copy <sep> target <eos>: each scored target residue is in the copy,
            # target + 1 tokens earlier; nothing else is scored
            scored = np.flatnonzero(labels != -100)
            assert len(scored) and scored.min() >= target + 2
            np.testing.assert_array_equal(tokens[scored - (target + 1)], labels[scored])
            # --align's target: each target residue's twin in the copy, nothing outside it
            np.testing.assert_array_equal(align_to[scored], scored - (target + 1))
            assert (align_to[: target + 2] == -1).all() and align_to[-1] == -1
            found.add(target + 1)  # distance from a copy residue to its target twin
        offsets[vary] = found
    assert offsets[False] == {61}
    assert len(offsets[True]) > 5


def test_align_trains_the_probed_head_and_transfer_reloads_the_weights():
    probe = _probe()
    args = probe.parser().parse_args(
        ["--attention", "transformer", "--steps", "12", "--eval-every", "12", "--crop", "40",
         "--eval-windows", "8", "--batch", "4", "--dim", "32", "--heads", "2", "--depth", "1",
         "--threads", "1", "--lr", "1e-2", "--align", "5", "--transfer", "transformer",
         "performer_softmax@16"]
    )  # fmt: skip
    args.attention = args.attention[0]
    run = probe.worker(args)
    first, last = run["curve"][0], run["curve"][-1]
    # with a heavy supervision weight, the probed head's attention on the copy's twin residue
    # rises well above where it started (uniform over ~80 keys: ~0.01)
    assert last["align_mass"] > 2 * first["align_mass"]
    same, favor = run["transfer"]
    # the same kind reloaded scores exactly what training ended with; another kind differs
    for key in ("context", "single", "align_mass"):
        assert abs(same[key] - last[key]) < 1e-9
    assert favor["attention"] == "performer_softmax@16"
    assert favor["align_mass"] != last["align_mass"]
