"""benchmarks/scoring_cost.py --quick: a row per window and method, ratios to the first window
from the same run, and logits_at reading what the full forward reads."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_scripts import load_benchmark


def test_quick_run_writes_a_row_per_window_and_method(tmp_path, capsys):
    bench = load_benchmark("scoring_cost.py")
    out = tmp_path / "cost.json"
    assert bench.main(["--quick", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    rows = payload["results"]
    windows = list(bench.QUICK_WINDOWS)
    assert [(r["tokens"], r["method"]) for r in rows] == [
        (t, m) for t in windows for m in ("forward", "logits_at")
    ]
    for method in ("forward", "logits_at"):
        mine = [r for r in rows if r["method"] == method]
        assert mine[0]["ratio_to_first"] == mine[0]["cpu_ratio_to_first"] == 1.0
        for r in mine:
            assert r["sites"] == 2 and r["seconds_per_site"] > 0 and r["cpu_seconds_per_site"] > 0
            assert (
                abs(r["ratio_to_first"] * mine[0]["seconds_per_site"] - r["seconds_per_site"])
                < 1e-12
            )
    assert all(r["max_abs_logp_difference"] < 1e-3 for r in rows)
    assert payload["model"] == "performer_softmax+exact[-1]"
    printed = capsys.readouterr().out
    assert "CPU:" in printed and "logits_at s/site" in printed
    with pytest.raises(SystemExit):  # an existing output is kept without --overwrite
        bench.main(["--quick", "--out", str(out)])


def test_windows_hold_the_masked_site_after_the_homologs():
    bench = load_benchmark("scoring_cost.py")
    from protein_performer.data.alphabet import default_alphabet

    alphabet = default_alphabet()
    rows, held = bench.windows_for(1024, 3, alphabet, seed=0)
    assert held >= 2 and len(rows) == 3
    for ids, pos in rows:
        assert len(ids) <= 1024 and ids[pos] == alphabet.mask_idx
        assert (ids == alphabet.mask_idx).sum() == 1
        assert pos > len(ids) // 2 - 2  # the target comes last
