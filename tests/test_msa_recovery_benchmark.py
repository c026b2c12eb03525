"""benchmarks/msa_recovery.py: the wild type's residues are hidden in the alignment's query row
and in the sequence read, and each column is the model's (or the profile's) own probability of
the true residue, checked against an alignment file edited by hand."""

from __future__ import annotations

import numpy as np
import pytest

from protein_performer.analysis.dms.homologs import context_log_probs, read_scan_context
from protein_performer.analysis.dms.profile import COLUMNS
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.data.msa import GAP, read_msa
from tests.benchmark_scripts import load_benchmark
from tests.columns_reference import columns_model

A = default_alphabet()
AA = np.array(list(STANDARD_AMINO_ACIDS))
bench = load_benchmark("msa_recovery.py")


def _alignment(tmp_path, n: int = 40, k: int = 6):
    rng = np.random.default_rng(5)
    wt = "".join(rng.choice(AA, n))
    rows = []
    for _ in range(k):
        h = np.array(list(wt))
        spots = rng.choice(n, n // 3, replace=False)
        h[spots] = rng.choice(AA, len(spots))
        h[:2] = "-"  # a gap: an alignment, read by its columns
        rows.append("".join(h))
    path = tmp_path / "msa.a3m"
    path.write_text(f">wt\n{wt}\n" + "".join(f">h{i}\n{r}\n" for i, r in enumerate(rows)))
    return wt, rows, path


def test_sites_are_spread_over_the_columns_and_dealt_between_copies(tmp_path):
    wt, _, path = _alignment(tmp_path)
    msa = read_msa(path, wt)
    batches = bench.hidden_sites(msa, 3, 2)
    flat = sorted(s for b in batches for s in b)
    assert len(batches) == 2 and all(len(b) == 3 for b in batches)
    assert len(set(flat)) == 6 and min(flat) >= 3 and max(flat) <= 36  # ends left out
    assert batches[0][0] < batches[1][0] < batches[0][1]  # dealt in turn
    small = read_msa(path, wt)
    small.positions = small.positions[:6]
    with pytest.raises(ValueError, match="6 columns: too few"):
        bench.hidden_sites(small, 1, 1)


def test_the_hidden_residues_are_gone_from_the_query_row_and_the_sequence(tmp_path):
    wt, _, path = _alignment(tmp_path)
    msa = read_msa(path, wt)
    hidden, sequence = bench.blind(msa, wt, [5, 20])
    at = {int(p): j for j, p in enumerate(msa.positions)}
    assert hidden.query_codes[at[5]] == hidden.query_codes[at[20]] == GAP
    others = [j for p, j in at.items() if p not in (5, 20)]
    assert (hidden.query_codes[others] == msa.query_codes[others]).all()
    assert msa.query_codes[at[5]] != GAP  # the original is left as it was
    assert sequence[5] == sequence[20] == "X" and sequence.replace("X", "") == (
        wt[:5] + wt[6:20] + wt[21:]
    )


def test_each_column_is_read_from_the_alignment_with_the_sites_hidden(tmp_path):
    wt, rows, path = _alignment(tmp_path)
    msa = read_msa(path, wt)
    model = columns_model(A)

    class Args:
        window, seed, window_homologs, retrieval = 400, 0, (2, [1, 6]), (0.6, 0.25)

    sites = [10, 25]
    nll = bench.score_batch(model, A, msa, wt, sites, Args)
    # the same alignment with the query's letters at the sites written as X in the file
    query = np.array(list(wt))
    query[sites] = "X"
    blind_path = tmp_path / "blind.a3m"
    blind_path.write_text(
        f">wt\n{''.join(query)}\n" + "".join(f">h{i}\n{r}\n" for i, r in enumerate(rows))
    )
    context = read_scan_context(blind_path, A, "".join(query), None)
    truth = [COLUMNS.index(wt[s]) for s in sites]
    profile = np.log(context.pssm.frequencies[sites])
    np.testing.assert_allclose(nll["profile"], [-profile[i, t] for i, t in enumerate(truth)])
    known = read_scan_context(path, A, wt, None).pssm.frequencies
    pairs = enumerate(zip(sites, truth, strict=True))
    assert all(known[s, t] > np.exp(profile[i, t]) for i, (s, t) in pairs)  # the query counts
    aa = [A.index(c) for c in COLUMNS]
    for cap, label in ((2, "2"), ([1, 6], "1+6")):
        got = context_log_probs(model, A, wt, sites, context, max_length=400, window_homologs=cap)
        lp = np.stack([got[s][aa] for s in sites]).astype(np.float64)
        lp -= np.logaddexp.reduce(lp, axis=1, keepdims=True)
        np.testing.assert_allclose(
            nll[f"model, {label}"], [-lp[i, t] for i, t in enumerate(truth)], rtol=1e-5
        )
        both = 0.75 * lp + 0.25 * profile
        both -= np.logaddexp.reduce(both, axis=1, keepdims=True)
        np.testing.assert_allclose(
            nll[f"mixed 0.25, {label}"], [-both[i, t] for i, t in enumerate(truth)], rtol=1e-5
        )
    assert np.abs(np.subtract(nll["model, 2"], nll["model, 1+6"])).max() > 1e-3
