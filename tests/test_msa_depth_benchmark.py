"""benchmarks/msa_depth.py: each row is the held-out proteins' <mask> perplexity after their best
hits into the training split (checked with windows built by hand), beside the profile of the
same hits without the query."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from protein_performer.analysis.dms.profile import COLUMNS, build_pssm
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.evaluation.context_perplexity import (
    Target,
    context_perplexity,
    scoring_windows,
)
from protein_performer.model.checkpoints import save_model_checkpoint
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM
from tests.benchmark_scripts import load_benchmark
from tests.data.test_homolog_hits import write_table

A = default_alphabet()


def _families(n: int, size: int, seed: int = 0) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    out = {}
    for f in range(n):
        root = rng.choice(list(STANDARD_AMINO_ACIDS), int(rng.integers(40, 70)))
        for m in range(size):
            seq = root.copy()
            for i in rng.choice(len(seq), len(seq) // 4, replace=False):
                seq[i] = rng.choice(list(STANDARD_AMINO_ACIDS))
            if m == size - 1:  # a near copy of the one before: sequence weights below 1
                seq = np.array(list(out[f"f{f}m{m - 1}"]))
                seq[rng.integers(len(seq))] = "W"
            out[f"f{f}m{m}"] = "".join(seq)
    return out


@pytest.fixture
def setup(tmp_path):
    seqs = _families(40, 4)
    (tmp_path / "all.fasta").write_text("".join(f">{k}\n{v}\n" for k, v in seqs.items()))
    (tmp_path / "members.tsv").write_text(
        "cluster_id\tmember_id\n" + "".join(f"{k}\t{k}\n" for k in seqs)
    )
    rows = []
    for q in seqs:  # every member hits the others of its family, a part of each
        fam = q.split("m")[0]
        for m in range(4):
            t = f"{fam}m{m}"
            if t != q:
                rows.append((q, t, 3 + m, len(seqs[t]) - m))
    write_table(tmp_path / "hits.tsv", rows)
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=1024)
    model = ProteinLM(cfg, len(A), A.pad_idx).eval()
    with torch.no_grad():  # sharper attention: the hits' order shows in the rows (3e-3)
        for p in model.parameters():
            p.mul_(3)
    save_model_checkpoint(tmp_path / "m.ckpt", model, A, "mlm")
    return seqs, rows, model


def _training_hits(tmp_path, seqs, rows, proteins) -> tuple[set, dict]:
    """The training split's ids (the fixture's clustering) and each protein's hit regions into
    it, in table order."""
    dm = ProteinDataModule(
        files=[str(tmp_path / "all.fasta")],
        clusters=str(tmp_path / "members.tsv"),
        split_by="cluster",
    )
    dm.setup("fit")
    train_ids = set(dm.datasets["train"].source.ids)
    regions = {
        p: [A.encode(seqs[t][s - 1 : e]) for q, t, s, e in rows if q == p and t in train_ids]
        for p in proteins
    }
    return train_ids, regions


def test_rows_are_context_perplexities_and_the_profile_leaves_the_query_out(
    tmp_path, setup, capsys
):
    seqs, rows, model = setup
    bench = load_benchmark("msa_depth.py")
    out = tmp_path / "r.json"
    args = ["--checkpoints", str(tmp_path / "m.ckpt"), "--fasta", str(tmp_path / "all.fasta")]
    args += ["--clusters", str(tmp_path / "members.tsv"), "--hits", str(tmp_path)]
    args += ["--homologs", "1", "3", "--windows", "160", "512", "--min-hits", "2"]
    args += ["--max-residues", "70", "--json", str(out)]
    assert bench.main(args) == 0
    result = json.loads(out.read_text())
    assert len(result["rows"]) == 4 and "held-out proteins" in capsys.readouterr().out
    # by hand: the checkpoint's test split, each protein's hits into the training split
    proteins = result["proteins"]
    train_ids, regions = _training_hits(tmp_path, seqs, rows, proteins)
    assert proteins and all(p not in train_ids for p in proteins)
    assert result["hits_per_protein"] == [len(regions[p]) for p in proteins]
    targets = [Target(p, A.encode(seqs[p]), regions[p][:1]) for p in proteins]
    _, labels, _, _, _ = scoring_windows(
        targets, A, max_length=512, style="crop", mask_prob=0.15, seed=0
    )
    col = {aa: k for k, aa in enumerate(COLUMNS)}
    for r in result["rows"]:
        h, T = r["homologs"], r["window"]
        cases = [Target(p, A.encode(seqs[p]), regions[p][:h]) for p in proteins]
        want = context_perplexity(model, A, cases, max_length=T, seed=0, shuffle=False)
        assert math.isclose(r["with"], want["with_context"]["perplexity"], rel_tol=1e-4)
        assert math.isclose(r["alone"], want["without_context"]["perplexity"], rel_tol=1e-4)
        assert r["in_window"] <= h
        nll = []
        for p, y in zip(proteins, labels, strict=True):
            homologs = [A.decode(x) for x in regions[p][:h]]
            hidden = "".join("X" if y[i + 1] != -100 else c for i, c in enumerate(seqs[p]))
            f = build_pssm(
                hidden, homologs, min_z=None, include_query=False, allow_query_only=True
            ).frequencies
            nll += [
                -math.log(f[i - 1, col[A.tokens[int(y[i])]]]) for i in np.flatnonzero(y != -100)
            ]
        assert math.isclose(r["profile"], math.exp(np.mean(nll)), rel_tol=1e-6)
    short = {r["homologs"]: r["in_window"] for r in result["rows"] if r["window"] == 160}
    assert short[3] < 3  # 160 tokens cannot hold 3 homologs of ~60 residues after a protein
    # the retrieval mixture: all profile at weight 1, between the two (or below both) at 0.6
    for r in result["rows"]:
        assert r["retrieval"] < max(r["with"], r["profile"])
    args += ["--retrieval", "1", "--overwrite"]
    assert bench.main(args) == 0
    for r in json.loads(out.read_text())["rows"]:
        assert math.isclose(r["retrieval"], r["profile"], rel_tol=1e-5)


def test_sampled_rows_fill_windows_as_the_scorer_draws_hits(tmp_path, setup):
    """``--sampling weighted``: where every hit fits, the windows are the best-first ones (the
    draw is placed by rank); where they do not, each row scores the hits the scorer's weighted
    draw would put in the window, protein j's seeded by ``[seed + j, sample]`` (checked by hand
    for one sample)."""
    from protein_performer.data.context_windows import fit_members, in_rank_order
    from protein_performer.data.msa import homolog_order

    seqs, rows, model = setup
    bench = load_benchmark("msa_depth.py")
    base = ["--checkpoints", str(tmp_path / "m.ckpt"), "--fasta", str(tmp_path / "all.fasta")]
    base += ["--clusters", str(tmp_path / "members.tsv"), "--hits", str(tmp_path)]
    base += ["--homologs", "3", "--min-hits", "2", "--max-residues", "70", "--seed", "4"]
    out = {}
    for name, extra in {
        "first": ["--windows", "144", "512"],
        "weighted": ["--windows", "144", "512", "--sampling", "weighted"],
        "weighted2": ["--windows", "144", "--sampling", "weighted", "--samples", "2"],
    }.items():
        assert bench.main([*base, *extra, "--json", str(tmp_path / f"{name}.json")]) == 0
        out[name] = {
            r["window"]: r for r in json.loads((tmp_path / f"{name}.json").read_text())["rows"]
        }
    # all fit at 512 tokens: the same windows as best first
    assert out["weighted"][512]["in_window"] == out["first"][512]["in_window"] > 2
    assert math.isclose(out["weighted"][512]["with"], out["first"][512]["with"], rel_tol=1e-9)
    assert out["weighted"][144]["with"] != out["first"][144]["with"]
    assert out["weighted2"][144]["samples"] == 2 and out["weighted"][144]["samples"] == 1
    assert out["weighted2"][144]["with"] != out["weighted"][144]["with"]
    # by hand: the weighted draw (the profile's weights, seed 4, sample 0), placed by rank
    proteins = json.loads((tmp_path / "weighted.json").read_text())["proteins"]
    regions = {p: r[:3] for p, r in _training_hits(tmp_path, seqs, rows, proteins)[1].items()}
    first = [Target(p, A.encode(seqs[p]), regions[p][:1]) for p in proteins]
    _, labels, _, _, _ = scoring_windows(
        first, A, max_length=512, style="crop", mask_prob=0.15, seed=0, shuffle=False
    )
    cases: dict[int, list] = {0: [], 1: []}
    for j, (p, y) in enumerate(zip(proteins, labels, strict=True)):
        hidden = "".join("X" if y[i + 1] != -100 else c for i, c in enumerate(seqs[p]))
        pssm = build_pssm(hidden, [A.decode(x) for x in regions[p]], min_z=None,
                          include_query=False, allow_query_only=True)  # fmt: skip
        budget = 144 - len(seqs[p]) - 2
        for sample in (0, 1):
            order = in_rank_order(
                homolog_order("weighted", weights=pssm.weights, seed=4 + j, sample=sample),
                [len(r) for r in regions[p]],
                budget,
            )
            hits = fit_members([regions[p][i] for i in order], budget)
            cases[sample].append(Target(p, A.encode(seqs[p]), hits))
    want = context_perplexity(model, A, cases[0], max_length=144, seed=0, shuffle=False)
    assert math.isclose(
        out["weighted"][144]["with"], want["with_context"]["perplexity"], rel_tol=1e-4
    )
    # two windows: the mean of their log-probabilities, renormalised
    runs = []
    for sample in (0, 1):
        _, _, ctx, ctx_y, _ = scoring_windows(
            cases[sample], A, max_length=144, style="crop", mask_prob=0.15, seed=0, shuffle=False
        )
        logp, true = bench.masked_log_probs(model, ctx, ctx_y, A.pad_idx)
        runs.append(logp)
    mean = torch.as_tensor(np.mean(runs, 0)).log_softmax(-1).numpy()
    two = math.exp(-mean[np.arange(len(true)), true].mean())
    assert math.isclose(out["weighted2"][144]["with"], two, rel_tol=1e-6)


def test_a_draw_takes_the_profile_weights_and_places_the_hits_by_rank():
    """``drawn_hits`` draws among the hits the profile used (its weights are theirs only), with
    those weights, and places the ones that fit by rank."""
    from types import SimpleNamespace

    bench = load_benchmark("msa_depth.py")
    # hit 1 did not align (the profile left it out): weights are for hits 0, 2, 3, 4
    own = [np.full(n, k) for k, n in enumerate([30, 50, 25, 40, 20])]
    used = [{"used": k != 1} for k in range(5)]
    pssm = SimpleNamespace(weights=np.array([1.0, 0.02, 0.02, 1.0]), matrix=None, homologs=used)
    assert [int(h[0]) for h in bench.drawn_hits(own, pssm, "first", 0, 0, 1000)] == [0, 2, 3, 4]
    from protein_performer.data.context_windows import fit_members

    windows = []
    for seed in range(200):
        got = bench.drawn_hits(own, pssm, "weighted", seed, 0, 60)
        assert sorted(int(h[0]) for h in got) == [0, 2, 3, 4]  # hit 1 never drawn
        kept = fit_members(got, 60)
        whole = [int(k[0]) for k in kept if len(k) == len(own[int(k[0])])]
        assert [int(k[0]) for k in kept[: len(whole)]] == sorted(whole)  # by rank; a cut one last
        windows.append([int(k[0]) for k in kept])
    # the down-weighted hits (2 and 3) seldom go in; uniform weights would put one in most
    assert sum(2 in w or 3 in w for w in windows) < 0.2 * len(windows)
