"""The similarity callback logs r values into metrics.csv during training."""

from __future__ import annotations

import csv

import pytest

from protein_performer.training.run import train
from tests.training.helpers import tiny_config, write_fasta


@pytest.mark.slow
def test_similarity_is_logged_every_n_steps(tmp_path) -> None:
    fasta = write_fasta(tmp_path / "tiny.fasta")
    cfg = tiny_config(fasta)
    cfg.analysis.similarity_every_n_steps = 2
    cfg.analysis.similarity_proteins = 8
    cfg.analysis.similarity_threshold = 0.05
    cfg.analysis.similarity_min_arcs = 1
    train(cfg, tmp_path / "run")
    with open(tmp_path / "run" / "metrics.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("analysis/r_embedding")]
    assert [int(r["step"]) for r in rows] == [2, 4]
    for r in rows:
        assert -1.0 <= float(r["analysis/r_embedding"]) <= 1.0
        assert r["analysis/heads_kept"] != ""
