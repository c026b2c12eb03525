"""Which files evaluate takes for the training run's own: by any path that leads to them, or
moved (the same file names), never other files."""

from __future__ import annotations

import os

import pytest

from protein_performer.evaluation.scope import same_files, training_files


def test_the_runs_files_are_known_by_any_path_or_by_name(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    a, b = run / "a.fasta", run / "b.fasta"
    for f in (a, b):
        f.write_text(">x\nMKV\n")
    stored = [str(a), str(b)]
    link = tmp_path / "link.fasta"
    os.symlink(a, link)
    assert same_files([str(b), str(a)], stored)  # any order
    assert same_files([str(link), str(b)], stored)  # a link to one of them
    assert same_files(["/elsewhere/a.fasta", "/elsewhere/b.fasta"], stored)  # moved
    assert not same_files([str(a)], stored)  # part of them
    assert not same_files([str(a), str(tmp_path / "c.fasta")], stored)
    assert not same_files([str(a)], None) and not same_files([str(a)], [])
    given = [str(link), "/elsewhere/b.fasta", str(tmp_path / "c.fasta")]
    assert training_files(given, stored) == given[:2]
    assert training_files(given, None) == []


def test_the_unigram_summary_reads_the_mask_row_of_its_kinds():
    import math

    import torch

    from protein_performer.evaluation.scope import unigram_summary
    from protein_performer.model.metrics import MLM_INPUT_KINDS

    sums = torch.tensor([30.0, 10.0, 4.0], dtype=torch.float64)  # nll, count, correct
    kinds = torch.full((len(MLM_INPUT_KINDS), 3), 1.0, dtype=torch.float64)  # other rows
    kinds[MLM_INPUT_KINDS.index("mask")] = torch.tensor([16.0, 8.0, 2.0])
    out = unigram_summary(sums, kinds, "train")
    assert out["from"] == "train"
    assert out["perplexity"] == pytest.approx(math.exp(3.0)) and out["accuracy"] == 0.4
    assert out["mask_perplexity"] == pytest.approx(math.exp(2.0))
    assert out["mask_accuracy"] == 0.25
    causal = unigram_summary(sums, None, "train")
    assert causal["mask_perplexity"] is None and causal["mask_accuracy"] is None
    assert unigram_summary(torch.zeros(3), None, "train") is None
