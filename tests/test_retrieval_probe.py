"""benchmarks/retrieval.py's windows: the copy sits at a fixed offset unless --vary-length."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from protein_performer.data.alphabet import default_alphabet
from tests.benchmark_scripts import load_benchmark


def _probe():
    return load_benchmark("retrieval.py")


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


def test_distill_trains_only_the_hedgehog_maps_toward_the_teachers_rows():
    import torch

    probe = _probe()
    args = probe.parser().parse_args(
        ["--attention", "transformer", "--steps", "30", "--eval-every", "30", "--crop", "40",
         "--eval-windows", "8", "--batch", "4", "--dim", "32", "--heads", "2", "--depth", "1",
         "--threads", "1", "--lr", "1e-2", "--align", "5", "--features", "16",
         "--transfer", "hedgehog", "--distill", "60", "--distill-lr", "3e-2"]
    )  # fmt: skip
    args.attention = args.attention[0]
    torch.manual_seed(0)
    run = probe.worker(args)
    (hh,) = run["transfer"]
    losses = hh["distill_loss"]
    assert len(losses) == 3 and losses[-1] < losses[0] - 0.05  # the rows get closer
    teacher = run["curve"][-1]["align_mass"]
    before, after = hh["before_distill"]["align_mass"], hh["align_mass"]
    assert abs(after - teacher) < abs(before - teacher)  # ... and so does the lookup


def _write(path: Path, records: dict[str, str]) -> Path:
    path.write_text("".join(f">{k} protein\n{v}\n" for k, v in records.items()))
    return path


def test_real_proteins_are_families_of_one_or_grouped_by_their_clusters(tmp_path):
    probe = _probe()
    fasta = _write(tmp_path / "p.fasta", {"P1": "MKVL", "P2": "MKIL", "P3": "ACDE"})
    alone = probe.load_families([fasta])
    assert sorted(len(m) for m in alone.values()) == [1, 1, 1]
    (tmp_path / "members.tsv").write_text("cluster_id\tmember_id\nC1\tP1\nC1\tP2\nC2\tP3\n")
    grouped = probe.load_families([fasta], tmp_path)
    assert sorted(len(m) for m in grouped.values()) == [1, 2]
    alphabet = default_alphabet()
    pair = next(m for m in grouped.values() if len(m) == 2)
    assert {alphabet.decode(m) for m in pair} == {"MKVL", "MKIL"}
    # family context draws only from families with another member; copies use every protein
    assert [len(grouped[f]) for f in probe.probed_families(grouped, "family")] == [2]
    assert len(probe.probed_families(grouped, "copy")) == 2
    with pytest.raises(SystemExit, match="needs families"):
        probe.probed_families(alone, "family")
    mixed = _write(tmp_path / "mixed.fasta", {"UniRef50_SIMF00001M001": "MKVL", "P9": "ACDE"})
    with pytest.raises(SystemExit, match="mixes simulated family members and real proteins"):
        probe.load_families([mixed])


def test_copy_whole_places_the_whole_protein_cut_around_the_target_region():
    probe = _probe()
    alphabet = default_alphabet()
    letters = np.random.default_rng(3).choice(list("ACDEFGHIKLMNPQRSTVWY"), size=150)
    protein = np.asarray(alphabet.encode("".join(letters)))
    args = argparse.Namespace(crop=40, context="copy-whole", vary_length=True)
    rng = np.random.default_rng(0)
    for _ in range(20):
        tokens, labels, single, _, align_to = probe.make_window(rng, [protein], args, alphabet)
        target = len(single) - 2
        sep = int(np.flatnonzero(tokens == alphabet.sep_idx)[0])
        context = tokens[1:sep]
        # more context than the crop (the window's budget is 2 * crop + 3 tokens) and a
        # contiguous piece of the protein holding every scored residue's twin
        assert len(context) == 2 * 40 + 3 - target - 3 >= target
        starts = [s for s in range(len(protein) - len(context) + 1)
                  if (protein[s : s + len(context)] == context).all()]  # fmt: skip
        assert starts
        scored = np.flatnonzero(labels != -100)
        assert len(scored)
        np.testing.assert_array_equal(tokens[align_to[scored]], labels[scored])
