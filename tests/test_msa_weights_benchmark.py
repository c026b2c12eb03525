"""benchmarks/msa_weights.py: deeper alignments made from one, their weights exact and from a
sample, checked against weights computed here."""

from __future__ import annotations

import json

import numpy as np

from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS
from protein_performer.data.msa import GAP, read_msa, sequence_weights
from tests.benchmark_scripts import load_benchmark

WT = "".join(np.random.default_rng(6).choice(list(STANDARD_AMINO_ACIDS), 30))


def _alignment(tmp_path, n: int = 60):
    rng = np.random.default_rng(7)
    rows = []
    for k in range(n):
        out = list(WT)
        for i in rng.choice(len(WT), 12, replace=False):
            out[i] = rng.choice(list(STANDARD_AMINO_ACIDS))
        out[k % len(WT)] = "-"
        rows.append("".join(out))
    (tmp_path / "msa.fa").write_text(
        f">q\n{WT}\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    )
    (tmp_path / "wt.fa").write_text(f">wt\n{WT}\n")


def test_deeper_copies_every_row_and_changes_only_residues():
    bench = load_benchmark("msa_weights.py")
    m = np.random.default_rng(0).integers(0, GAP + 1, (50, 40)).astype(np.uint8)
    d = bench.deeper(m, 3, 0.25, seed=1)
    assert d.shape == (150, 40)
    np.testing.assert_array_equal(d[:50], m)
    for copy in (d[50:100], d[100:]):
        assert ((copy == GAP) == (m == GAP)).all()  # gaps stay gaps
        changed = (copy != m).mean()
        assert 0.15 < changed < 0.3  # 0.25 drawn, 1/20 of them drawn back to the same
    assert not np.array_equal(d[50:100], d[100:])


def test_rows_report_the_weights_computed_here(tmp_path, capsys):
    _alignment(tmp_path)
    bench = load_benchmark("msa_weights.py")
    out = tmp_path / "w.json"
    base = read_msa(tmp_path / "msa.fa", WT).matrix
    n = 40 * len(base)  # 40 copies: past a limit of 40 x 2,100 rows of 30 columns
    cells = n * 2_100 * 30
    args = ["--msa", str(tmp_path / "msa.fa"), "--wild-type", str(tmp_path / "wt.fa")]
    args += ["--copies", "1", "40", "--max-cells", str(cells), "--json", str(out)]
    assert bench.main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["rows"] for r in rows] == [len(base), n] and rows[1]["sample"] == 2_100
    assert rows[0]["sample"] == len(base)  # within the limit: exact
    assert rows[0]["neff"] == rows[0]["exact_neff"] and rows[0]["profile_r"] > 0.9999
    deep = bench.deeper(base, 40, 0.1, seed=0)
    exact = sequence_weights(deep, max_cells=None).sum()
    sampled = sequence_weights(deep, max_cells=cells, seed=0).sum()
    assert rows[1]["exact_neff"] == round(float(exact), 1)
    assert rows[1]["neff"] == round(float(sampled), 1) and rows[1]["neff"] != rows[1]["exact_neff"]
    assert 0.9 < rows[1]["profile_r"] < 1.0
    assert "weighed against" in capsys.readouterr().out
