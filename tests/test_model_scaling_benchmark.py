"""benchmarks/model_scaling.py --rounds: each point is its fastest round, every round kept."""

from __future__ import annotations

import argparse

import pytest

from tests.benchmark_scripts import load_benchmark


def _bench():
    return load_benchmark("model_scaling.py")


def _tiny_args(**overrides) -> argparse.Namespace:
    """A worker's arguments for a one-layer 32-wide model, 2 sequences of 64 tokens."""
    base = dict(
        device="cpu", dim=32, depth=1, heads=2, ffn_dim=64, features=16, length=64, tokens=128,
        checkpointing=False, qkv_conv=0, save_features=False, precision="fp32",
    )  # fmt: skip
    return argparse.Namespace(**{**base, **overrides})


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


def test_paired_rounds_rotate_the_order_so_each_kind_goes_first_as_often():
    bench = _bench()
    calls = []

    def step(kind):
        def run():
            calls.append(kind)
            return float(len(calls))

        return run

    times = bench.paired_rounds({k: step(k) for k in ("a", "b", "none")}, rounds=3)
    assert calls == ["a", "b", "none", "b", "none", "a", "none", "a", "b"]
    assert times == {"a": [1.0, 6.0, 8.0], "b": [2.0, 4.0, 9.0], "none": [3.0, 5.0, 7.0]}


def test_paired_points_pair_each_round_with_the_same_rounds_no_attention_step():
    bench = _bench()
    results = [
        {"batch": 2, "tokens": 1000, "times_s": {"performer_relu": [2.0, 3.0], "none": [1.0, 2.0]}},
        {"error": "timeout after 5 s"},
        {"batch": 2, "tokens": 1000, "times_s": {"performer_relu": [1.2], "none": [1.0]}},
    ]
    points = {
        p["attention"]: p for p in bench.paired_points(4096, ["performer_relu", "none"], results)
    }
    relu, none = points["performer_relu"], points["none"]
    # per round, not fastest over fastest (1.2 / 1.0) nor median over median (2.0 / 1.0)
    assert relu["ratio_to_none_rounds"] == [2.0, 1.5, 1.2]
    assert relu["ratio_to_none_median"] == 1.5
    assert relu["ratio_to_none_range"] == [1.2, 2.0]
    assert relu["us_per_token"] == 1200.0 and none["us_per_token"] == 1000.0
    assert relu["us_per_token_median"] == 2000.0 and relu["processes"] == 2
    assert "ratio_to_none_rounds" not in none
    assert "per round 1.50x median (1.20-2.00, 3 rounds)" in bench.ratios(list(points.values()))

    failed = bench.paired_points(4096, ["performer_relu", "none"], [{"error": "out of memory"}])
    assert failed == [
        {"attention": "performer_relu", "length": 4096, "error": "out of memory"},
        {"attention": "none", "length": 4096, "error": "out of memory"},
    ]


def test_paired_needs_no_attention_among_the_kinds(capsys):
    bench = _bench()
    with pytest.raises(SystemExit):
        bench.main(["--paired", "--attentions", "performer_relu", "transformer"])
    assert "--paired needs `none`" in capsys.readouterr().err


def test_a_paired_worker_times_every_kind_in_one_process():
    bench = _bench()
    args = _tiny_args(attentions=["performer_relu", "none"], threads=1, steps=3)
    result = bench.paired_worker(args)
    assert result["batch"] == 2 and result["tokens"] == 128
    assert set(result["times_s"]) == {"performer_relu", "none"}
    assert all(len(t) == 3 and min(t) > 0 for t in result["times_s"].values())


def test_flat_kinds_take_the_route_of_copies_and_the_others_the_packed_one(monkeypatch):
    import protein_performer.attention.kernels.bidirectional as la

    bench = _bench()
    args = _tiny_args(depth=2)
    calls = []
    forward = la.PackedBidirectionalFavorFunction.forward

    def spy(ctx, *a):
        calls.append(1)
        return forward(ctx, *a)

    monkeypatch.setattr(la.PackedBidirectionalFavorFunction, "forward", staticmethod(spy))
    # +python: the packed route on the PyTorch kernel, not the compiled one
    for kind, packed_calls in [("performer_relu+flat", 0), ("performer_softmax+python", 2)]:
        calls.clear()
        step, _ = bench.build(args, kind)
        step()
        assert len(calls) == packed_calls, kind
