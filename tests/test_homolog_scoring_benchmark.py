"""benchmarks/homolog_scoring.py: the rows of its table are the library's scores."""

from __future__ import annotations

import csv
import json

import numpy as np
import torch

from protein_performer.analysis.dms.homologs import context_marginals
from protein_performer.analysis.dms.profile import build_pssm, pssm_scores
from protein_performer.analysis.mutations import (
    Substitution,
    blosum62_scores,
    score_mutants,
    spearman,
)
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.model.checkpoints import save_model_checkpoint
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM
from tests.benchmark_scripts import load_benchmark

ALPHABET = default_alphabet()
RNG = np.random.default_rng(3)
WT = "".join(RNG.choice(list(STANDARD_AMINO_ACIDS), 40))


def _variant(k: int) -> str:
    rng, out = np.random.default_rng(k), list(WT)
    for i in rng.choice(len(WT), 6, replace=False):
        out[i] = rng.choice([a for a in STANDARD_AMINO_ACIDS if a != WT[i]])
    return "".join(out)


def test_table_rows_are_the_library_scores(tmp_path, capsys):
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=256)
    model = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx).eval()
    save_model_checkpoint(tmp_path / "m.ckpt", model, ALPHABET, "mlm")
    (tmp_path / "wt.fa").write_text(f">wt\n{WT}\n")
    homologs = [_variant(k) for k in range(5)]
    (tmp_path / "h.fa").write_text("".join(f">h{k}\n{h}\n" for k, h in enumerate(homologs)))
    # positions numbered from 11; a stop, a double mutant and a wrong wild type are left out
    subs = [Substitution(i, WT[i], a) for i in range(0, 40, 2) for a in "AWK" if a != WT[i]]
    fitness = np.random.default_rng(5).normal(size=len(subs))
    with open(tmp_path / "dms.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("mutant", "fit"))
        w.writerows(
            (f"{s.wt}{s.index + 11}{s.mt}", f"{f:.4f}") for s, f in zip(subs, fitness, strict=True)
        )
        w.writerows([(f"{WT[1]}12*", "1"), (f"{WT[1]}12A:{WT[3]}14A", "1"), ("Z13A", "1")])
    bench = load_benchmark("homolog_scoring.py")
    out = tmp_path / "r.json"
    args = ["--checkpoint", str(tmp_path / "m.ckpt"), "--wild-type", str(tmp_path / "wt.fa")]
    args += ["--mutations", str(tmp_path / "dms.csv"), "--fitness", "fit", "--offset", "11"]
    args += ["--homologs-fasta", str(tmp_path / "h.fa"), "--homologs", "1", "9"]
    args += ["--ensemble", "2", "--subset", "2", "--seeds", "0", "1", "--json", str(out)]
    assert bench.main(args) == 0
    result = json.loads(out.read_text())
    rows = {r["score"]: r for r in result["rows"]}
    assert result["mutants"] == len(subs) and result["homologs"] == 5
    fit = [float(f"{f:.4f}") for f in fitness]
    variants = [[s] for s in subs]
    assert np.isclose(rows["BLOSUM62"]["spearman"], spearman(blosum62_scores(variants), fit))
    pssm = pssm_scores(build_pssm(WT, homologs), variants)
    assert np.isclose(rows["PSSM of the same homologs"]["spearman"], spearman(pssm, fit))
    # 9 asked, 5 there: the window holds all 5, said once
    assert {"one window, first 1", "one window, first 5"} <= set(rows)
    sites = sorted({s.index for s in subs})
    for k in (1, 5):  # score context= context_max_homologs=k's column
        logp, _ = context_marginals(
            model, ALPHABET, ALPHABET.encode(WT), [ALPHABET.encode(h) for h in homologs[:k]],
            sites, max_length=1024,
        )  # fmt: skip
        col = [logp[s.index][ALPHABET.index(s.mt)] - logp[s.index][ALPHABET.index(s.wt)]
               for s in subs]  # fmt: skip
        assert np.isclose(rows[f"one window, first {k}"]["spearman"], spearman(col, fit))
    alone = score_mutants(model, ALPHABET, WT, variants, methods="masked-marginal")
    assert np.isclose(
        rows["model alone (masked_marginal)"]["spearman"], spearman(alone["masked-marginal"], fit)
    )
    ensemble = rows["ensemble of 2 windows of 2 drawn (of 5)"]
    assert len(ensemble["spearman_per_seed"]) == 2
    assert np.isclose(ensemble["spearman"], np.mean(ensemble["spearman_per_seed"]))
    assert "Spearman with fit" in capsys.readouterr().out
