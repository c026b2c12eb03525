"""benchmarks/deep_alignments.py: the alignment is built with the scored sites unknown, and
each column is the model's (or the profile's) own probability of the true residue, checked
against windows built by hand."""

from __future__ import annotations

import numpy as np

from protein_performer.analysis.dms.homologs import read_scan_context
from protein_performer.analysis.dms.profile import COLUMNS
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from tests.benchmark_scripts import load_benchmark
from tests.columns_reference import column_members, columns_model, site_logits

A = default_alphabet()
AA = np.array(list(STANDARD_AMINO_ACIDS))
bench = load_benchmark("deep_alignments.py")


def _protein_and_hits(n: int = 60, k: int = 5) -> tuple[str, list[str]]:
    rng = np.random.default_rng(3)
    seq = "".join(rng.choice(AA, n))
    hits = []
    for _ in range(k):  # substitutions only: every residue stays in its column
        h = np.array(list(seq))
        spots = rng.choice(n, n // 3, replace=False)  # under 80 % identical: weights of 1
        h[spots] = rng.choice(AA, len(spots))
        hits.append("".join(h))
    return seq, hits


def _records(text: str) -> list[tuple[str, str]]:
    assert text.startswith("#60\t1\n>")  # ColabFold's header: read as an alignment
    return [(r.split("\n")[0], r.split("\n")[1]) for r in text.split(">")[1:]]


def test_the_alignment_hides_the_sites_and_keeps_each_hits_residues_in_their_columns():
    seq, hits = _protein_and_hits()
    hits.append(hits[0][20:45])  # a fragment: gaps outside its columns
    records = _records(bench.blind_alignment(seq, hits, [10, 30]))
    assert records[0][0] == "query" and len(records) == 7
    query = records[0][1]
    assert (
        query[10] == query[30] == "X" and query.replace("X", "") == seq[:10] + seq[11:30] + seq[31:]
    )
    for (_, row), hit in zip(records[1:6], hits, strict=False):
        assert len(row) == 60
        placed = [j for j, c in enumerate(row) if c != "-"]
        assert len(placed) >= 50 and all(row[j] == hit[j] for j in placed)
    fragment = records[6][1]
    assert fragment[20:45] == hits[0][20:45] and set(fragment[:20] + fragment[45:]) == {"-"}


def test_each_column_is_its_own_probability_of_the_true_residue(tmp_path):
    seq, hits = _protein_and_hits()
    model = columns_model(A)

    class Args:
        sites, window, max_hits, window_homologs = 3, 400, 4, [2, 64, [2, 64]]
        retrieval = (0.6, 0.25)

    nll, info = bench.score_protein(model, A, seq, hits, Args)
    sites = [10, 29, 49]
    assert info["residues"] == 60 and info["homologs"] == 4  # --max-hits 4
    assert info["neff"] == 5.0  # the query and 4 hits under 80 % identical: weights of 1
    truth = [COLUMNS.index(seq[s]) for s in sites]
    text = bench.blind_alignment(seq, hits[:4], sites)
    (tmp_path / "msa.a3m").write_text(text)
    blind = _records(text)[0][1]
    profile = np.log(read_scan_context(tmp_path / "msa.a3m", A, blind, None).pssm.frequencies)
    profile -= np.logaddexp.reduce(profile, axis=1, keepdims=True)
    np.testing.assert_allclose(
        nll["profile"], [-profile[s, t] for s, t in zip(sites, truth, strict=True)]
    )
    # the wild type's residue is not counted at its sites: known, the profile reads them better
    (tmp_path / "known.a3m").write_text(text.replace(blind, seq, 1))
    known = read_scan_context(tmp_path / "known.a3m", A, seq, None).pssm.frequencies
    assert all(known[s, t] > np.exp(profile[s, t]) for s, t in zip(sites, truth, strict=True))
    rows = [row for _, row in _records(text)[1:]]
    aa = [A.index(c) for c in COLUMNS]
    for cap, held in ((2, 2), (64, 4)):
        # file order; the protein is short: every window holds it whole
        members = column_members(A, rows[:held])
        for s, t, got, mixed in zip(
            sites, truth, nll[f"model, {cap}"], nll[f"with the profile, {cap}"], strict=True
        ):
            logits = site_logits(model, A, seq, members, s, 400)
            ref = logits[aa].double().log_softmax(-1).numpy()
            np.testing.assert_allclose(got, -ref[t], rtol=1e-4)
            both = 0.4 * ref + 0.6 * profile[s]
            both -= np.logaddexp.reduce(both)
            np.testing.assert_allclose(mixed, -both[t], rtol=1e-4)
            less = 0.75 * ref + 0.25 * profile[s]  # --retrieval's second weight: its own column
            less -= np.logaddexp.reduce(less)
            got_less = nll[f"with the profile 0.25, {cap}"][sites.index(s)]
            np.testing.assert_allclose(got_less, -less[t], rtol=1e-4)
        assert nll[f"crop, {cap}"] == [60.0]
    # 2+64: the two windows' log-probabilities averaged, then read over the 20 amino acids
    assert np.abs(np.subtract(nll["model, 2"], nll["model, 64"])).max() > 0.01
    for s, t, got in zip(sites, truth, nll["model, 2+64"], strict=True):
        mean = sum(
            site_logits(model, A, seq, column_members(A, rows[:held]), s, 400)
            .double()
            .log_softmax(-1)
            for held in (2, 4)
        )
        ref = (mean / 2)[aa].log_softmax(-1).numpy()
        np.testing.assert_allclose(got, -ref[t], rtol=1e-4)
    assert nll["crop, 2+64"] == [60.0]


def test_the_crop_said_for_a_pair_is_its_widest_window(tmp_path):
    """250 tokens: 2 homologs leave room for the whole 60 residues, 4 for 48 about each site;
    the table's crop for 2+64 is the wider, and each size alone reports its own."""
    seq, hits = _protein_and_hits()
    model = columns_model(A)

    class Args:
        sites, window, max_hits, window_homologs = 3, 250, 4, [2, 64, [2, 64]]
        retrieval = (0.6,)

    nll, _ = bench.score_protein(model, A, seq, hits, Args)
    assert (250 - 2 - 4) // 5 == 48
    assert nll["crop, 2"] == [60.0] and nll["crop, 64"] == [48.0]
    assert nll["crop, 2+64"] == [60.0]
