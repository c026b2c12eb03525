"""benchmarks/model_scaling.py --rounds: each point is its fastest round, every round kept."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("model_scaling_bench", BENCH / "model_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_point_is_its_fastest_round_and_failed_rounds_are_skipped():
    bench = _bench()
    raw = [
        {"attention": "none", "length": 1024, "round": 0, "us_per_token": 9.0, "peak_mib": 1},
        {"attention": "performer_relu", "length": 1024, "round": 0, "error": "timeout"},
        {
            "attention": "none",
            "length": 1024,
            "round": 1,
            "us_per_token": 7.0,
            "peak_mib": 2,
            "tokens_per_s": 2.0,
        },
        {
            "attention": "performer_relu",
            "length": 1024,
            "round": 1,
            "us_per_token": 12.0,
            "tokens_per_s": 1.0,
        },
        {"attention": "transformer", "length": 1024, "round": 0, "error": "killed"},
        {"attention": "transformer", "length": 1024, "round": 1, "error": "timeout"},
    ]
    points = {p["attention"]: p for p in bench.fastest_rounds(raw)}
    assert points["none"] == {
        "attention": "none",
        "length": 1024,
        "us_per_token": 7.0,
        "peak_mib": 2,
        "tokens_per_s": 2.0,
        "us_per_token_rounds": [9.0, 7.0],
    }
    assert points["performer_relu"]["us_per_token"] == 12.0
    assert points["performer_relu"]["us_per_token_rounds"] == [None, 12.0]
    assert points["transformer"]["error"] == "timeout"  # only when every round failed
    assert "1.71x no-attention" in bench.ratios(list(points.values()))
