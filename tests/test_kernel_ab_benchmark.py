"""benchmarks/kernel_ab.py: a revision's FAVOR kernel loads beside this tree's and agrees."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.benchmark_scripts import BENCH, load_benchmark


def _has_git_history() -> bool:
    proc = subprocess.run(
        ["git", "-C", str(BENCH.parent), "rev-parse", "--verify", "HEAD"],
        capture_output=True,
        check=False,
    )
    return proc.returncode == 0


@pytest.mark.skipif(not _has_git_history(), reason="not a git checkout")
def test_head_against_itself_is_identical_and_writes_json(tmp_path, capsys):
    bench = load_benchmark("kernel_ab.py")
    out = tmp_path / "ab.json"
    args = ["--rev", "HEAD", "--lengths", "40", "--rounds", "2", "--heads", "2", "--dim", "8"]
    assert bench.main([*args, "--features", "16", "--json", str(out)]) == 0
    points = json.loads(out.read_text())["points"]
    assert {p["kernel"] for p in points} == {"relu", "softmax"}
    for p in points:
        # the same code on the same inputs and projection: bit-identical results
        assert p["max_abs_diff"] == 0.0 and p["max_abs_value"] > 0
        assert len(p["times_s"]["revision"]) == len(p["times_s"]["tree"]) == 2
    assert "tree/revision" in capsys.readouterr().out


def test_an_unknown_revision_is_one_line(tmp_path):
    bench = load_benchmark("kernel_ab.py")
    with pytest.raises(SystemExit, match="kernel_ab: git"):
        bench.main(["--rev", "no-such-revision-xyz", "--json", str(tmp_path / "x.json")])
