"""benchmarks/msa_scoring.py: its rows are the model's context scores for each setting (checked
with windows built by hand), its profile baseline the alignment's weighted profile."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from protein_performer.analysis.dms.homologs import context_marginals
from protein_performer.analysis.dms.marginals import spearman
from protein_performer.analysis.dms.profile import alignment_profile, pssm_scores
from protein_performer.analysis.dms.variants import Substitution
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.data.msa import read_msa
from protein_performer.model.checkpoints import save_model_checkpoint
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM
from tests.benchmark_scripts import load_benchmark

ALPHABET = default_alphabet()
WT = "".join(np.random.default_rng(4).choice(list(STANDARD_AMINO_ACIDS), 40))


def _row(k: int) -> str:
    rng, out = np.random.default_rng(k), list(WT)
    for i in rng.choice(len(WT), 8, replace=False):
        out[i] = rng.choice([a for a in STANDARD_AMINO_ACIDS if a != WT[i]])
    out[k] = "-"
    return "".join(out)


@pytest.fixture
def scan(tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=512)
    model = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx).eval()
    save_model_checkpoint(tmp_path / "m.ckpt", model, ALPHABET, "mlm")
    (tmp_path / "wt.fa").write_text(f">wt\n{WT}\n")
    rows = [_row(k) for k in range(6)]
    (tmp_path / "msa.a3m").write_text(
        "#40\t1\n>q\n" + WT + "\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    )
    subs = [Substitution(i, WT[i], a) for i in range(0, 40, 3) for a in "AWK" if a != WT[i]]
    fitness = np.random.default_rng(5).normal(size=len(subs))
    with open(tmp_path / "dms.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("mutant", "fit"))
        w.writerows(
            (f"{s.wt}{s.index + 1}{s.mt}", f"{f:.4f}") for s, f in zip(subs, fitness, strict=True)
        )
    return model, rows, subs, [float(f"{f:.4f}") for f in fitness]


def caps_key(caps):
    return tuple(caps) if isinstance(caps, list) else caps


def test_rows_are_the_context_scores_of_each_setting(tmp_path, scan, capsys):
    model, rows, subs, fit = scan
    bench = load_benchmark("msa_scoring.py")
    out = tmp_path / "r.json"
    args = ["--checkpoint", str(tmp_path / "m.ckpt"), "--wild-type", str(tmp_path / "wt.fa")]
    args += ["--mutations", str(tmp_path / "dms.csv"), "--fitness", "fit"]
    args += ["--context", str(tmp_path / "msa.a3m"), "--json", str(out), "--retrieval", "0"]
    args += ["--settings", "128,first,1", "512,first,1", "128,weighted,2", "512,first,1,2"]
    args += ["512,first,1,1+2"]
    assert bench.main(args) == 0
    result = json.loads(out.read_text())
    assert result["mutants"] == len(subs) and result["homologs_used"] == 6
    got = {(r["tokens"], r["sampling"], r["samples"], caps_key(r["window_homologs"])): r
           for r in result["rows"]}  # fmt: skip
    sites = sorted({s.index for s in subs})
    homologs = [ALPHABET.encode(r.replace("-", "")) for r in rows]
    # file order: as many as fit (1 at 128 tokens, all 6 at 512), or the first 2 (cap 2)
    cols = {}
    for tokens, cap in ((128, 16), (512, 16), (512, 2), (512, 1)):
        logp, info = context_marginals(
            model, ALPHABET, ALPHABET.encode(WT), homologs[:cap], sites, max_length=tokens
        )
        col = [
            logp[s.index][ALPHABET.index(s.mt)] - logp[s.index][ALPHABET.index(s.wt)] for s in subs
        ]
        cols[tokens, cap] = col
        if cap == 1:
            continue
        row = got[(tokens, "first", 1, cap)]
        assert np.isclose(row["model"], spearman(col, fit))
        assert row["model"] == row["retrieval"]  # --retrieval 0: the model's alone
        assert row["mean_homologs_in_window"] == info["mean_homologs_in_window"]
    assert got[(128, "first", 1, 16)]["mean_homologs_in_window"] < 6
    assert got[(512, "first", 1, 2)]["mean_homologs_in_window"] == 2
    both = got[(512, "first", 1, (1, 2))]  # a window of 1 and one of 2 for each site, averaged
    assert both["window_homologs"] == [1, 2] and both["mean_homologs_in_window"] == [1, 2]
    mean = (np.array(cols[512, 1]) + np.array(cols[512, 2])) / 2
    assert np.isclose(both["model"], spearman(mean, fit))
    assert not np.isclose(spearman(cols[512, 1], fit), spearman(cols[512, 2], fit))
    profile = alignment_profile(WT, read_msa(tmp_path / "msa.a3m", WT))
    expected = spearman(pssm_scores(profile, [[s] for s in subs]), fit)
    assert np.isclose(result["baselines"]["profile of the same homologs"], expected)
    assert "Neff" in capsys.readouterr().out
    assert {r["over_max_identity"] for r in result["rows"]} == {0}  # 0.795 identical: all in
    args[args.index("--json") + 1] = str(tmp_path / "near.json")
    assert bench.main([*args, "--max-identity", "0.79"]) == 0
    near = json.loads((tmp_path / "near.json").read_text())
    assert {r["over_max_identity"] for r in near["rows"]} == {6}  # all over: used all the same
    assert near["config"]["max_identity"] == 0.79


def test_a_bad_setting_is_refused(tmp_path, scan, capsys):
    bench = load_benchmark("msa_scoring.py")
    args = ["--wild-type", "wt.fa", "--mutations", "d.csv", "--fitness", "f", "--context", "x"]
    with pytest.raises(SystemExit):
        bench.main([*args, "--settings", "1024,best,1"])
    assert "sampling first / weighted / diverse" in capsys.readouterr().err
    assert bench.setting("1024,first,1,8+64") == (1024, "first", 1, [8, 64])
    assert bench.setting("1024,first,1,all")[3] is None and bench.setting("64,first,2")[3] == "auto"
    assert bench.caps_label([8, 64]) == "8+64" and bench.caps_label(None) == "all"
    for bad in ("1024,first,1,0", "1024,first,1,2,3", "1024,first,1,8+8", "1024,first,1,8+0"):
        with pytest.raises(SystemExit):
            bench.main([*args, "--settings", bad])
        assert "1024,first,1" in capsys.readouterr().err


def test_max_identity_takes_a_fraction_or_none():
    import argparse

    bench = load_benchmark("msa_scoring.py")
    assert bench.identity_limit("none") is None and bench.identity_limit("0.8") == 0.8
    assert bench.identity_limit("1") == 1.0 and bench.identity_limit("0") == 0.0
    for bad in ("1.5", "-0.1", "high"):
        with pytest.raises(argparse.ArgumentTypeError, match="fraction from 0 to 1, or none"):
            bench.identity_limit(bad)
