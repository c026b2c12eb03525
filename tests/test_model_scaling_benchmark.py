"""benchmarks/model_scaling.py --rounds: each point is its fastest round, every round kept."""

from __future__ import annotations

from tests.benchmark_scripts import load_benchmark


def _bench():
    return load_benchmark("model_scaling.py")


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
