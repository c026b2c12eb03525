"""benchmarks/favor_floor.py: its twelve products are the FAVOR kernel's, and it runs."""

from __future__ import annotations

import json

import torch
from torch.profiler import ProfilerActivity, profile

from protein_performer.attention.favor import FavorAttention
from tests.benchmark_scripts import load_benchmark

PRODUCTS = ("aten::bmm", "aten::baddbmm", "aten::baddbmm_", "aten::mm", "aten::addmm")


def _products(fn) -> tuple[int, float]:
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        fn()
    events = [e for e in prof.key_averages() if e.key in PRODUCTS]
    return sum(e.count for e in events), sum(e.flops for e in events)


def test_the_floor_times_the_kernels_own_products() -> None:
    floor = load_benchmark("favor_floor.py")
    n, rows, m, d = 2, 64, 32, 8
    attn = FavorAttention(d, m, kernel="relu", chunk_size=rows)
    q, k, v = (torch.randn(1, n, rows, d, requires_grad=True) for _ in range(3))
    count, flops = _products(lambda: attn(q, k, v).sum().backward())
    block, gflop = floor.product_step(n, rows, m, d)
    own_count, own_flops = _products(block)
    assert count == own_count == 12
    # the kernel's summary has D + 1 columns ([v, 1]): within a few per cent of the floor's
    assert abs(flops - own_flops) / flops < 0.05
    assert gflop == 12 * 2 * n * rows * m * d / 1e9


def test_the_floor_benchmark_runs(tmp_path) -> None:
    floor = load_benchmark("favor_floor.py")
    out = tmp_path / "floor.json"
    args = ["--size", "tiny", "--length", "128", "--tokens", "256", "--rounds", "2"]
    assert floor.main([*args, "--rows", "64", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    # depth 2, two sequences (one batch element at a time), two blocks of 64 rows each
    assert payload["blocks_per_step"] == 2 * 2 * 2
    for r in payload["rounds"]:
        assert r["floor"] > 1.0 and r["ratio"] > 0
        assert abs(r["floor"] - (r["none"] + r["products"]) / r["none"]) < 1e-9
