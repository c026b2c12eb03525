"""benchmarks/long_windows.py: hits go with their query and never into a held-out protein; the
crop's and the whole windows' numbers are the model's own at each masked site, checked against
windows built by hand."""

from __future__ import annotations

import numpy as np
import torch

from protein_performer.analysis.dms.homologs import read_scan_context
from protein_performer.analysis.dms.profile import COLUMNS, build_pssm
from protein_performer.analysis.dms.windows import column_jobs
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.data.msa import GAP
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM
from tests.benchmark_scripts import load_benchmark
from tests.columns_reference import columns_model

A = default_alphabet()
bench = load_benchmark("long_windows.py")


def test_hits_go_with_their_query_and_not_into_held_out_proteins(tmp_path):
    hits = tmp_path / "hits.fasta"
    hits.write_text(
        ">tr|X1|X1_A/3-40 query=q1 identity=0.5\nMKV\nLA\n>sp|H|H_B/1-9 query=q1\nMKW\n"
        ">tr|X2|X2_A/1-5 query=q2\nAAAA\n>tr|X3|X3_A/2-8 query=q1\nGGG\n>nameless\nCCC\n"
    )
    out = bench.hits_by_query(hits, {"sp|H|H_B"})
    assert list(out) == ["q1", "q2"]
    assert out["q1"] == [
        ">tr|X1|X1_A/3-40 query=q1 identity=0.5\nMKVLA\n",
        ">tr|X3|X3_A/2-8 query=q1\nGGG\n",
    ]


def test_each_setting_is_the_models_log_probability_at_its_site(tmp_path, monkeypatch):
    from protein_performer.analysis.dms import profile

    queries = []
    real = profile.build_pssm
    monkeypatch.setattr(
        profile, "build_pssm", lambda q, *a, **k: queries.append(q) or real(q, *a, **k)
    )
    rng = np.random.default_rng(0)
    aa = np.array(list(STANDARD_AMINO_ACIDS))
    seq = "".join(rng.choice(aa, 400))
    hits = []
    for k, changed in enumerate([8] + [80] * 16):  # a near-copy first, then 80 % identical
        h = np.array(list(seq))
        spots = rng.choice(400, changed, replace=False)
        h[spots] = rng.choice(aa, changed)
        hits.append(f">h{k}/1-400 query=q\n{''.join(h)}\n")
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=4096)
    model = ProteinLM(cfg, len(A), A.pad_idx).eval()

    class Args:
        sites, window = 3, 4096

    nll, held = bench.score_protein(model, A, seq, "q", hits, Args)
    assert (
        held["crop"] == 15 and held["whole"] == 10
    )  # 15 under 0.9; 9 whole (3,694 // 401) + a cut
    blind = np.array(list(seq))
    blind[[10, 199, 389]] = "X"
    assert "".join(blind) in queries  # the fair pair's hits aligned with the sites unknown
    sites = [10, 199, 389]
    # the crop: 239 residues about each site, each homolog's residues there as the profile's
    # local alignments place them (those of the scorer's context)
    path = tmp_path / "hits.fasta"
    path.write_text("".join(hits[:16]))
    matrix = read_scan_context(path, A, seq, "q", max_homologs=16).pssm.matrix
    assert matrix.shape == (16, 400) and (matrix != GAP).mean() > 0.9
    rows = list(enumerate(matrix))[1:]  # the near-copy (98 % identical) stays out
    jobs, _ = column_jobs(A.encode(seq), rows, sites, A, 4096, width=239, per_window=16)
    for (site, tokens, at), got in zip(jobs, nll["crop"], strict=True):
        x = torch.as_tensor(tokens)[None]
        with torch.no_grad():
            ref = model(x, x == A.pad_idx)["logits"][0, at].log_softmax(-1)[A.index(seq[site])]
        np.testing.assert_allclose(got, -float(ref), rtol=1e-4)
    # alone: a 1,024-token window (all 400 residues) with only the site masked
    for site, got in zip(sites, nll["alone"], strict=True):
        tokens = np.array([A.cls_idx, *A.encode(seq), A.eos_idx])
        tokens[site + 1] = A.mask_idx
        x = torch.as_tensor(tokens)[None]
        with torch.no_grad():
            ref = model(x, x == A.pad_idx)["logits"][0, site + 1].log_softmax(-1)
        np.testing.assert_allclose(got, -float(ref[A.index(seq[site])]), rtol=1e-4)
    assert len(nll["whole"]) == 3 and nll["whole"] != nll["crop"]
    # the fair pair: the hits aligned with the three sites unknown
    records = [h.split("\n")[1] for h in hits[:16]]
    pssm = build_pssm("".join(blind), records, include_query=False, allow_query_only=True)
    expect = [-np.log(pssm.frequencies[s][COLUMNS.index(seq[s])]) for s in sites]
    np.testing.assert_allclose(nll["profile"], expect, rtol=1e-9)
    rows = list(enumerate(pssm.matrix))[1:]
    jobs, _ = column_jobs(A.encode(seq), rows, sites, A, 4096, width=239, per_window=16)
    for (site, tokens, at), got in zip(jobs, nll["crop, aligned blind"], strict=True):
        x = torch.as_tensor(tokens)[None]
        with torch.no_grad():
            ref = model(x, x == A.pad_idx)["logits"][0, at].log_softmax(-1)[A.index(seq[site])]
        np.testing.assert_allclose(got, -float(ref), rtol=1e-4)


def test_queries_are_drawn_from_held_out_proteins_with_enough_hits():
    hits = {"a": ["h"] * 3, "b": ["h"] * 5, "c": ["h"] * 2, "d": ["h"] * 4, "e": ["h"] * 9}
    queries = {"a": "M", "b": "M", "c": "M", "d": "M"}  # e is not among the queries

    class Args:
        min_hits, proteins, seed = 3, 2, 0

    eligible, drawn = bench.draw_queries(hits, queries, {"a", "b", "c", "e"}, Args)
    assert eligible == ["a", "b"]  # c: 2 hits; d: not held out (a training protein); e: no query
    assert drawn == ["a", "b"]
    Args.proteins = 1
    once = bench.draw_queries(hits, queries, {"a", "b", "c", "d"}, Args)
    assert once[0] == ["a", "b", "d"] and len(once[1]) == 1 and once[1][0] in once[0]
    assert bench.draw_queries(hits, queries, {"a", "b", "c", "d"}, Args) == once  # seeded


def test_a_columns_model_is_read_with_16_homologs_in_one_window():
    """The benchmark measures one window of the first 16 hits for every model, whatever the
    model's own default (a columns model's is a window of 1 and one of 64, averaged)."""
    rng = np.random.default_rng(1)
    aa = np.array(list(STANDARD_AMINO_ACIDS))
    seq = "".join(rng.choice(aa, 300))
    hits = []
    for k in range(17):
        h = np.array(list(seq))
        spots = rng.choice(300, 60, replace=False)
        h[spots] = rng.choice(aa, 60)
        hits.append(f">h{k}/1-300 query=q\n{''.join(h)}\n")
    model = columns_model(A, scale=1.0)

    class Args:
        sites, window = 2, 4096

    nll, held = bench.score_protein(model, A, seq, "q", hits, Args)
    assert held == {"crop": 16} and len(nll["crop"]) == 2 and "whole" not in nll
