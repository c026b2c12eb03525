"""Approximation error of FAVOR softmax estimators versus exact softmax attention.

Inputs ``q, k, v ~ N(0, σ²)`` of shape ``(1, H, L, D)`` (default L=4096, D=64, H=4), float32;
the exact output is computed in float64. For each σ, number of features m and seed we report
the relative output error ``||out − exact||_F / ||exact||_F`` of

* ours: FAVOR+ with iid and with orthogonal projections, OPRF (orthogonal), and the default
  (OPRF, orthogonal, antithetic pairs);
* performer-pytorch ``FastAttention`` (the peer, its default epsilon 1e-4) and the same code
  with epsilon 0 (its unbiased estimator);
* uniform attention (the mean of V), the trivial baseline.

A second table checks for bias toward uniform attention: over many independent projections
the average estimated attention matrix ``Ā`` is regressed on the exact one around uniform,
``slope = <Ā − 1/L, A − 1/L> / <A − 1/L, A − 1/L>`` (1 = unbiased weights on average, < 1 =
shrunk toward uniform), on a smaller problem (L=512, one head).

A third table compares errors at *matched shrinkage*. Any estimator can trade variance for
shrinkage toward uniform (performer-pytorch does it through its epsilon). Ours is given the
same trade-off through an exactly unbiased kernel re-split: ``q → a·q``, ``k → k/a`` leaves
``q·k`` (and the exact attention) unchanged and keeps ``φ(q)·φ(k)`` unbiased for every
``a``, but for ``a > 1`` the normalised attention shrinks toward uniform. Sweeping ``a`` traces
our error-versus-slope curve; interpolating it at performer-pytorch's slope gives the error
we would have with exactly its amount of shrinkage.

    python benchmarks/approximation.py            # full run (a few minutes)
    python benchmarks/approximation.py --quick    # smoke configuration (seconds)
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
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

from protein_performer.attention import FavorAttention, exact_attention

Estimator = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

OURS = {
    "ours FAVOR+ iid": {"estimator": "favor+", "orthogonal": False, "antithetic": False},
    "ours FAVOR+ orthogonal": {"estimator": "favor+", "antithetic": False},
    "ours OPRF orthogonal": {"estimator": "oprf", "antithetic": False},
    "ours OPRF orthogonal antithetic (default)": {},
}
PP = "performer-pytorch (eps=1e-4)"
PP0 = "performer-pytorch eps=0 (unbiased)"
UNIFORM = "uniform attention (mean of V)"
DEFAULT = "ours OPRF orthogonal antithetic (default)"


def _pp_features(dim: int, m: int, seed: int, eps: float | None):
    """performer-pytorch's projection for ``seed`` and a function giving its features."""
    from performer_pytorch import FastAttention
    from performer_pytorch.performer_pytorch import softmax_kernel

    torch.manual_seed(seed)
    fast = FastAttention(dim, m)

    def features(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kw = {} if eps is None else {"eps": eps}
        proj = fast.projection_matrix
        return (
            softmax_kernel(q, projection_matrix=proj, is_query=True, **kw),
            softmax_kernel(k, projection_matrix=proj, is_query=False, **kw),
        )

    return fast, features


def estimators(dim: int, m: int, seed: int) -> dict[str, Estimator]:
    from performer_pytorch.performer_pytorch import linear_attention

    out: dict[str, Estimator] = {
        name: FavorAttention(dim, m, seed=seed, **kw) for name, kw in OURS.items()
    }
    fast, _ = _pp_features(dim, m, seed, None)
    out[PP] = fast
    _, features0 = _pp_features(dim, m, seed, 0.0)
    out[PP0] = lambda q, k, v: linear_attention(*features0(q, k), v)
    return out


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return ((approx.double() - exact).norm() / exact.norm()).item()


def inputs(sigma: float, length: int, heads: int, dim: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(10_000 + seed)
    return tuple(torch.randn(1, heads, length, dim, generator=g) * sigma for _ in range(3))


def error_table(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for sigma in args.sigmas:
        for seed in range(args.seeds):
            q, k, v = inputs(sigma, args.length, args.heads, args.dim, seed)
            exact = exact_attention(q.double(), k.double(), v.double())
            uniform = v.double().mean(-2, keepdim=True).expand_as(exact)
            rows.append(
                {
                    "sigma": sigma,
                    "m": None,
                    "seed": seed,
                    "estimator": UNIFORM,
                    "error": relative_error(uniform, exact),
                }
            )
            for m in args.features:
                for name, fn in estimators(args.dim, m, seed).items():
                    with torch.no_grad():
                        err = relative_error(fn(q, k, v), exact)
                    rows.append(
                        {"sigma": sigma, "m": m, "seed": seed, "estimator": name, "error": err}
                    )
            print(f"  sigma={sigma} seed={seed} done", file=sys.stderr, flush=True)
    return rows


def _normalized(scores: torch.Tensor) -> torch.Tensor:
    return scores / scores.sum(-1, keepdim=True)


def shrinkage(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Slope of the draw-averaged attention matrix against the exact one, around uniform."""
    rows = []
    length, m = args.bias_length, 256
    for sigma in args.sigmas:
        q, k, _ = inputs(sigma, length, 1, args.dim, 0)
        exact = torch.softmax(q.double() @ k.double().transpose(-1, -2) / args.dim**0.5, -1)
        centred = exact - 1.0 / length
        sums = {DEFAULT: 0.0, PP: 0.0, PP0: 0.0}
        for seed in range(args.bias_draws):
            with torch.no_grad():
                sums[DEFAULT] += FavorAttention(args.dim, m, seed=seed).attention_matrix(q, k)
                for name, eps in ((PP, None), (PP0, 0.0)):
                    _, features = _pp_features(args.dim, m, seed, eps)
                    phi_q, phi_k = features(q, k)
                    sums[name] += _normalized(phi_q @ phi_k.transpose(-1, -2))
        for name, total in sums.items():
            mean = total.double() / args.bias_draws
            slope = ((mean - 1.0 / length) * centred).sum() / centred.pow(2).sum()
            rows.append({"sigma": sigma, "m": m, "estimator": name, "slope": slope.item()})
    return rows


def shrinkage_frontier(args: argparse.Namespace, peer_slopes: dict[float, float]):
    """Our (slope, error) as the q/k split ``a`` grows, and the error at the peer's slope."""
    points, matched = [], []
    m = 256
    for sigma in args.sigmas:
        q_small, k_small, _ = inputs(sigma, args.bias_length, 1, args.dim, 0)
        exact_small = torch.softmax(
            q_small.double() @ k_small.double().transpose(-1, -2) / args.dim**0.5, -1
        )
        centred = exact_small - 1.0 / args.bias_length
        data = []
        for seed in range(args.seeds):
            q, k, v = inputs(sigma, args.length, args.heads, args.dim, seed)
            data.append((q, k, v, exact_attention(q.double(), k.double(), v.double())))
        curve = []
        for a in args.splits:
            with torch.no_grad():
                total = sum(
                    FavorAttention(args.dim, m, seed=s).attention_matrix(q_small * a, k_small / a)
                    for s in range(args.bias_draws)
                )
                mean = total.double() / args.bias_draws
                slope = ((mean - 1.0 / args.bias_length) * centred).sum() / centred.pow(2).sum()
                err = statistics.mean(
                    relative_error(FavorAttention(args.dim, m, seed=s)(q * a, k / a, v), ex)
                    for s, (q, k, v, ex) in enumerate(data)
                )
            curve.append((slope.item(), err))
            points.append({"sigma": sigma, "split": a, "slope": slope.item(), "error": err})
        target = peer_slopes.get(sigma)
        if target is not None:
            matched.append({"sigma": sigma, "peer_slope": target} | _interpolate(curve, target))
    return points, matched


def _interpolate(curve: list[tuple[float, float]], slope: float) -> dict[str, Any]:
    """Error at ``slope`` by linear interpolation along the curve (None if outside it)."""
    for (s0, e0), (s1, e1) in itertools.pairwise(curve):
        if min(s0, s1) <= slope <= max(s0, s1) and s0 != s1:
            return {"error": e0 + (e1 - e0) * (slope - s0) / (s1 - s0), "bracketed": True}
    return {"error": None, "bracketed": False}


def summarize(rows: list[dict[str, Any]], sigmas: list[float], ms: list[int]):
    names = [UNIFORM, *OURS, PP, PP0]
    table, summary = [], {}
    for name in names:
        line: list[Any] = [name]
        for sigma in sigmas:
            for m in ms:
                errs = [
                    r["error"]
                    for r in rows
                    if r["estimator"] == name
                    and r["sigma"] == sigma
                    and (r["m"] == m or name == UNIFORM)
                ]
                mean = statistics.mean(errs)
                line.append(mean)
                summary[(name, sigma, m)] = mean
        table.append(line)
    headers = ["estimator"] + [f"s={s} m={m}" for s in sigmas for m in ms]
    return headers, table, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=RESULTS / "approximation.json")
    parser.add_argument("--quick", action="store_true", help="small smoke configuration")
    parser.add_argument(
        "--length", type=positive_int, default=None, help="default 4096 (quick 256)"
    )
    parser.add_argument("--dim", type=positive_int, default=64)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--seeds", type=positive_int, default=None, help="default 6 (quick 1)")
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.5, 0.75])
    parser.add_argument("--features", type=positive_int, nargs="+", default=None)
    parser.add_argument(
        "--bias-length", type=positive_int, default=None, help="default 512 (quick 64)"
    )
    parser.add_argument(
        "--bias-draws", type=positive_int, default=None, help="default 128 (quick 4)"
    )
    parser.add_argument(
        "--splits",
        type=float,
        nargs="+",
        default=[1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0],
        help="q/k split factors a of the matched-shrinkage table (q*a, k/a)",
    )
    parser.add_argument("--threads", type=positive_int, default=2)
    add_output_args(parser)
    args = parser.parse_args(argv)
    check_outputs(parser, [args.json], args.overwrite)
    if importlib.util.find_spec("performer_pytorch") is None:
        print(
            "approximation.py: error: it compares with performer-pytorch, which is not "
            "installed: pip install -c constraints.txt -e '.[bench]'",
            file=sys.stderr,
        )
        return 2
    quick = args.quick
    args.length = args.length or (256 if quick else 4096)
    args.seeds = args.seeds or (1 if quick else 6)
    args.features = args.features or ([64, 256] if quick else [64, 256, 1024])
    args.bias_length = args.bias_length or (64 if quick else 512)
    args.bias_draws = args.bias_draws or (4 if quick else 128)
    torch.set_num_threads(args.threads)
    print(machine_line())
    started = time.perf_counter()

    rows = error_table(args)
    headers, table, summary = summarize(rows, args.sigmas, args.features)
    print("relative output error ||out - exact|| / ||exact|| (mean over seeds)")
    print(format_table(headers, table))

    goals = []
    if 256 in args.features:
        for sigma in args.sigmas:
            ours, peer = summary[(DEFAULT, sigma, 256)], summary[(PP, sigma, 256)]
            goals.append(
                {
                    "target": f"error(ours default) / error(performer-pytorch), s={sigma}, m=256",
                    "ratio": ours / peer,
                    "limit": 0.8,
                    "met": ours / peer <= 0.8,
                }
            )
            unbiased = summary[(PP0, sigma, 256)]
            goals.append(
                {
                    "target": f"error(ours default) / error(performer-pytorch eps=0), s={sigma}",
                    "ratio": ours / unbiased,
                    "limit": None,
                    "met": None,
                }
            )
        print()
        print(
            format_table(
                ["comparison", "ratio", "limit", "met"],
                [[g["target"], g["ratio"], g["limit"], g["met"]] for g in goals],
            )
        )

    bias = shrinkage(args)
    print()
    print(
        f"shrinkage toward uniform: slope of the mean over {args.bias_draws} draws "
        f"(L={args.bias_length}, m=256; 1 = no shrinkage)"
    )
    print(
        format_table(
            ["estimator", "sigma", "slope"],
            [[b["estimator"], b["sigma"], b["slope"]] for b in bias],
        )
    )
    peer_slopes = {b["sigma"]: b["slope"] for b in bias if b["estimator"] == PP}
    points, matched = shrinkage_frontier(args, peer_slopes)
    print()
    print("ours (default) with the unbiased q/k split a: slope and error (m=256)")
    print(
        format_table(
            ["sigma", "a", "slope", "error"],
            [[p["sigma"], p["split"], p["slope"], p["error"]] for p in points],
        )
    )
    for row in matched:
        peer = summary.get((PP, row["sigma"], 256))
        row["peer_error"] = peer
        row["ratio"] = None if row["error"] is None or peer is None else row["error"] / peer
    print()
    print("error at performer-pytorch's shrinkage (interpolated along the curve above)")
    print(
        format_table(
            ["sigma", "peer slope", "ours error", "peer error", "ratio"],
            [
                [r["sigma"], r["peer_slope"], r["error"], r["peer_error"], r["ratio"]]
                for r in matched
            ],
        )
    )
    payload = {
        "benchmark": "approximation",
        "config": {
            k: getattr(args, k)
            for k in ("length", "dim", "heads", "seeds", "sigmas", "features", "quick")
        }
        | {"bias_length": args.bias_length, "bias_draws": args.bias_draws},
        "environment": environment(),
        "wall_s": time.perf_counter() - started,
        "errors": rows,
        "summary": [dict(zip(headers, line, strict=True)) for line in table],
        "targets": goals,
        "shrinkage": bias,
        "split_curve": points,
        "matched_shrinkage": matched,
    }
    write_json(args.json, payload)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
