"""How close to the no-attention optimum a FAVOR training step could get: the products' floor.

A bidirectional FAVOR layer that rebuilds its features in the backward (the default) does twelve
matrix products per block of rows (forward: key features, the key summary, query features, the
output; backward: both features again, the output adjoint through the summary and back through
the projection for dq, the summary's gradient, dv, and the key adjoint through the summary and
the projection for dk). Whatever else a kernel fuses away, those products remain. This script
times, in one process and alternating round by round:

* a whole training step of the model without attention (``model_scaling.py``'s ``none``) and
  of the ReLU Performer (``--attention``), same size and batch;
* the twelve products alone, at the kernel's own shapes (the packed route's ``H`` sequences of
  one batch element, its rows per block (``FavorAttention.block_rows``, or ``--rows``), ``m``
  features, head dim D, the ``[v, 1]`` summary of ``D + 1`` columns), with ``out=`` buffers (no
  allocation), for every block of every batch element and layer of the step.

Reported per round: ``none`` and Performer µs per token, their ratio, the products' µs per
token and the *floor* ``(none + products) / none``: the ratio a kernel would reach if
everything but the products (feature maps, copies, autograd, cache pressure on the rest of the
model) cost nothing. The gap between the floor and the measured ratio is what fusion could win.

    python benchmarks/favor_floor.py --length 8192 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_output_args,
    check_outputs,
    environment,
    format_table,
    machine_line,
    positive_int,
    write_json,
)
from model_scaling import SIZES, build


def product_step(n: int, rows: int, m: int, d: int) -> tuple[Callable[[], None], float]:
    """One block's twelve FAVOR products (fp32, ``out=`` buffers) and their GFLOP."""
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    x, w = r(n, rows, d), r(n, m, d)  # a block of q (or k), the projection
    phi, dphi = r(n, rows, m), torch.empty(n, rows, m)
    va, state, dstate = r(n, rows, d + 1), r(n, m, d + 1), torch.zeros(n, m, d + 1)
    na, grad = torch.empty(n, rows, d + 1), torch.empty(n, rows, d)
    wt = w.transpose(1, 2)

    def block() -> None:
        torch.bmm(x, wt, out=dphi)  # key features
        dstate.baddbmm_(phi.transpose(1, 2), va)  # key summary
        torch.bmm(x, wt, out=dphi)  # query features
        torch.bmm(phi, state, out=na)  # output
        torch.bmm(x, wt, out=dphi)  # backward: query features again
        torch.bmm(va, state.transpose(1, 2), out=dphi)  # output adjoint through the summary
        torch.bmm(phi, w, out=grad)  # ... through the projection: dq
        dstate.baddbmm_(phi.transpose(1, 2), va)  # the summary's gradient
        torch.bmm(x, wt, out=dphi)  # backward: key features again
        torch.bmm(phi, state[..., :-1], out=grad)  # dv
        torch.bmm(va, state.transpose(1, 2), out=dphi)  # key adjoint through the summary
        torch.bmm(phi, w, out=grad)  # ... through the projection: dk

    return block, 12 * 2 * n * rows * m * d / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="regular")
    p.add_argument("--length", type=positive_int, default=8192)
    p.add_argument("--tokens", type=positive_int, default=8192, help="tokens per step")
    p.add_argument("--features", type=positive_int, default=256)
    p.add_argument(
        "--rows", type=positive_int, default=None, help="rows per block (default: the kernel's)"
    )
    p.add_argument("--attention", default="performer_relu")
    p.add_argument("--rounds", type=positive_int, default=5)
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--json", type=Path, default=RESULTS / "favor_floor.json")
    add_output_args(p)
    args = p.parse_args(argv)
    check_outputs(p, [args.json], args.overwrite)
    torch.set_num_threads(args.threads)
    dim, depth, heads, ffn = SIZES[args.size]
    ns = argparse.Namespace(
        device="cpu", dim=dim, depth=depth, heads=heads, ffn_dim=ffn, length=args.length,
        features=args.features, checkpointing=False, qkv_conv=0, save_features=False,
        tokens=args.tokens, precision="fp32", threads=args.threads,
    )  # fmt: skip
    none_step, tokens = build(ns, "none")
    fav_step, _ = build(ns, args.attention)
    batch = tokens // args.length
    # the packed route (bidirectional, on the CPU) takes one batch element's heads at a time
    n, d = heads, dim // heads
    if args.rows is None:  # the bidirectional kernel's own choice for these shapes
        from protein_performer.attention.favor import FavorAttention

        kind = "softmax" if args.attention.startswith("performer_softmax") else "relu"
        kernel = FavorAttention(d, args.features, kernel=kind)
        args.rows = kernel.block_rows(torch.device("cpu"), n, args.length)
    rows = args.rows = min(args.rows, args.length)
    block, gflop = product_step(n, rows, args.features, d)
    blocks = depth * batch * -(-args.length // rows)

    def products() -> float:
        start = time.perf_counter()
        for _ in range(blocks):
            block()
        return time.perf_counter() - start

    for f in (none_step, fav_step, products):  # warm-up (Adam's state, the heap)
        f()
    rounds: list[dict[str, float]] = []
    for i in range(args.rounds):
        timed = {}
        order = [("none", none_step), ("favor", fav_step), ("products", products)]
        for name, f in order[i % 3 :] + order[: i % 3]:
            timed[name] = f() * 1e6 / tokens
        timed["ratio"] = timed["favor"] / timed["none"]
        timed["floor"] = (timed["none"] + timed["products"]) / timed["none"]
        # what is not a product, and what it may cost for a ratio of 1.3 in this round
        timed["rest"] = timed["favor"] - timed["none"] - timed["products"]
        timed["rest_budget_1.3"] = 0.3 * timed["none"] - timed["products"]
        rounds.append(timed)
        print(
            f"round {i + 1}: none {timed['none']:.0f} µs/token, {args.attention} "
            f"{timed['favor']:.0f}, products {timed['products']:.0f}, ratio "
            f"{timed['ratio']:.3f}, floor {timed['floor']:.3f}",
            flush=True,
        )

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    rate = gflop * blocks / (min(r["products"] for r in rounds) * tokens / 1e6)
    headers = ["L (sequences)", "none µs/token", f"{args.attention}", "products", "ratio",
               "floor", "rest µs/token", "products GFLOP/s"]  # fmt: skip
    row = [
        f"{args.length:,} ({batch})",
        f"{med('none'):.0f}",
        f"{med('favor'):.0f}",
        f"{med('products'):.0f}",
        f"{med('ratio'):.3f} ({min(r['ratio'] for r in rounds):.3f}-"
        f"{max(r['ratio'] for r in rounds):.3f})",
        f"{med('floor'):.3f}",
        f"{med('rest'):.0f} (1.3x: {med('rest_budget_1.3'):.0f})",
        f"{rate:.0f}",
    ]
    print(machine_line("cpu", args.threads))
    print("medians over rounds (ratio: range)")
    print(format_table(headers, [row]))
    payload: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "environment": environment(),
        "block_gflop": gflop,
        "blocks_per_step": blocks,
        "rounds": rounds,
    }
    write_json(args.json, payload)
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
