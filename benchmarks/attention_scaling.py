"""Forward+backward time and peak memory of attention implementations versus sequence length.

Each (method, length) point runs in a fresh subprocess with 2 torch threads: B=1, H=8, D=64,
m=256, float32 on the CPU by default (``--device cuda``, ``--dtype bfloat16`` for a GPU run;
there time and memory come from one process per point, or from this process with
``--in-process``). Methods: FAVOR softmax/ReLU (bidirectional and causal), exact SDPA
(bidirectional and causal) and performer-pytorch ``FastAttention`` (the peer). Prints a
table, writes JSON (``--json``) and a log-log PNG (``--png``).

Time: each point runs ``--rounds`` times (sweeps over all points, so a burst of load from
other processes hits one round); within a run, one warm-up pass then ``--repeats`` timed
forward+backward passes, continued until ``--min-time`` seconds were timed (fast points
get more passes). Reported: the minimum, with the CPU other processes used meanwhile
(``bg_cores``, from /proc/stat) as a noise indicator. Peak memory: a separate process per
point, started with glibc's mmap threshold pinned at 128 KiB (freed tensors go straight back
to the OS, so RSS tracks live memory); growth of the resident set over one pass after a
warm-up (kernel high-water mark reset, see ``_common.PeakRSS``). Inputs and the output
gradient exist before; the output, saved activations and input gradients count.

    python benchmarks/attention_scaling.py            # full run (several minutes)
    python benchmarks/attention_scaling.py --quick    # smoke configuration (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    PeakRSS,
    add_attention_shape_args,
    add_output_args,
    check_device,
    check_outputs,
    environment,
    format_table,
    machine_line,
    positive_int,
    write_json,
)

from protein_performer.utils.atomic import write_bytes_atomic

METHODS = [
    "favor-softmax",
    "favor-relu",
    "pp-softmax",
    "exact",
    "favor-softmax-causal",
    "favor-relu-causal",
    "pp-softmax-causal",
    "exact-causal",
    "favor-softmax-save",
    "favor-relu-save",
]
LENGTHS = [1024, 2048, 4096, 8192, 16384]


def _build(method: str, dim: int, features: int):
    from protein_performer.attention import FavorAttention, exact_attention

    causal = method.endswith("-causal")
    if method.startswith("favor-"):
        kernel = "relu" if method.startswith("favor-relu") else "softmax"
        # -save: the features are kept for the backward, not rebuilt there
        keep = method.endswith("-save")
        return FavorAttention(dim, features, kernel=kernel, causal=causal, save_features=keep)
    if method.startswith("exact"):
        return lambda q, k, v: exact_attention(q, k, v, causal=causal)
    if method.startswith("pp-"):
        import contextlib
        import io

        from performer_pytorch import FastAttention

        with contextlib.redirect_stdout(io.StringIO()):  # it prints a note about CUDA kernels
            return FastAttention(dim, features, causal=causal)
    raise ValueError(f"unknown method {method!r}")


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement (in its own process, or in the parent with ``--in-process``):
    ``--mode time``, ``memory`` or ``both`` (GPU)."""
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    fn = _build(args.method, args.dim, args.features)
    if isinstance(fn, torch.nn.Module):
        fn = fn.to(device)
    shape = (args.batch, args.heads, args.length, args.dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype).requires_grad_() for _ in range(3))
    grad_out = torch.randn(shape, device=device, dtype=dtype)
    cuda = device.type == "cuda"

    def step() -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(q, k, v).backward(grad_out)
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        for t in (q, k, v):  # gradients are allocated inside every measured pass
            t.grad = None
        return elapsed

    step()  # warm-up: lazy library initialisation stays out of time and memory
    result: dict[str, Any] = {}
    if args.mode in ("time", "both"):
        times = [step()]
        # at least --repeats passes and --min-time seconds (fast points get more passes)
        while len(times) < args.repeats or (sum(times) < args.min_time and len(times) < 50):
            times.append(step())
        result |= {
            "time_s": min(times),
            "time_median_s": statistics.median(times),
            "passes": len(times),
        }
    if args.mode == "time":
        return result
    if cuda:  # the caching allocator's own accounting: bytes held by live tensors
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        peak = torch.cuda.max_memory_allocated(device) - before
        return result | {"peak_mib": peak / 2**20, "peak_exact": True}
    with PeakRSS() as mem:
        step()
    return result | {"peak_mib": mem.delta_mib, "peak_exact": mem.exact}


def _busy_jiffies() -> int | None:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return user + nice + system + irq + softirq + steal


def _run_worker(args: argparse.Namespace, method: str, length: int, mode: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        *("--worker", "--mode", mode, "--method", method, "--length", str(length)),
        *("--batch", str(args.batch), "--heads", str(args.heads), "--dim", str(args.dim)),
        *("--features", str(args.features), "--threads", str(args.threads)),
        *("--repeats", str(args.repeats), "--min-time", str(args.min_time)),
        *("--device", args.device, "--dtype", args.dtype),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    if mode == "memory":
        # freed blocks above 128 KiB go straight back to the OS, so RSS tracks live memory
        env["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)
    busy0, child0, wall0 = _busy_jiffies(), _children_cpu(), time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{mode}: timeout after {args.timeout}s"}
    busy1, child1, wall1 = _busy_jiffies(), _children_cpu(), time.perf_counter()
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"{mode}: exit {proc.returncode}: {tail}"}
    result = json.loads(lines[-1])
    if mode in ("time", "both") and busy0 is not None and busy1 is not None:
        # CPU used by other processes while this point ran, in cores (shared machine noise)
        hz = os.sysconf("SC_CLK_TCK")
        others = (busy1 - busy0) / hz - (child1 - child0)
        result["background_cores"] = max(0.0, others / (wall1 - wall0))
    return result


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _in_process(args: argparse.Namespace, method: str, length: int) -> dict[str, Any]:
    """A GPU point measured in this process (``--in-process``): the caching allocator's
    counters are per point, and the process start (seconds on a GPU machine) is paid once."""
    import torch

    worker_args = argparse.Namespace(**(vars(args) | {"method": method, "length": length}))
    worker_args.mode = "both"
    torch.cuda.empty_cache()
    try:
        return worker(worker_args)
    except torch.OutOfMemoryError:
        return {"error": "out of memory"}
    except Exception as exc:  # one failing point must not lose the others
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    finally:
        torch.cuda.empty_cache()


def run_point(args: argparse.Namespace, method: str, length: int) -> dict[str, Any]:
    point: dict[str, Any] = {"method": method, "length": length}
    if args.in_process:
        return point | _in_process(args, method, length)
    # On a GPU the caching allocator's counters are exact within one process, so one process
    # per point; on the CPU, resident-set growth needs a process of its own.
    modes = ("both",) if args.device.startswith("cuda") else ("time", "memory")
    for mode in modes:
        result = _run_worker(args, method, length, mode)
        if "error" in result:
            point["error"] = result["error"]
            break
        point.update(result)
    return point


def aggregate(
    raw: list[dict[str, Any]], args: argparse.Namespace, lengths: list[int]
) -> list[dict[str, Any]]:
    """One row per (method, length): the round with the smallest time (the least disturbed by
    other processes), the largest peak memory over rounds, and all rounds' times."""
    points = []
    for method in args.methods:
        for length in lengths:
            runs = [r for r in raw if r["method"] == method and r["length"] == length]
            good = [r for r in runs if "time_s" in r and "peak_mib" in r]
            if not runs:
                points.append({"method": method, "length": length, "skipped": "memory"})
            elif not good:
                points.append({"method": method, "length": length, "error": runs[0]["error"]})
            else:
                best = min(good, key=lambda r: r["time_s"])
                point = {k: v for k, v in best.items() if k != "round"}
                point["peak_mib"] = max(r["peak_mib"] for r in good)
                point["time_s_all_rounds"] = [r["time_s"] for r in good]
                points.append(point)
    return points


def _lookup(points: list[dict[str, Any]], method: str, length: int, key: str) -> float | None:
    for p in points:
        if p["method"] == method and p["length"] == length and key in p:
            return float(p[key])
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def targets(points: list[dict[str, Any]], at: int, long: int) -> list[dict[str, Any]]:
    """The issue's performance targets, as ratios measured in this run."""

    def t(method: str, length: int = at) -> float | None:
        return _lookup(points, method, length, "time_s")

    def mem(method: str, length: int = at) -> float | None:
        return _lookup(points, method, length, "peak_mib")

    rows = [
        ("bidirectional time / performer-pytorch", t("favor-softmax"), t("pp-softmax"), 0.8),
        ("bidirectional time / exact SDPA", t("favor-softmax"), t("exact"), 0.25),
        ("causal time / exact SDPA causal", t("favor-softmax-causal"), t("exact-causal"), 0.7),
        (
            "causal peak memory / exact SDPA causal",
            mem("favor-softmax-causal"),
            mem("exact-causal"),
            1.5,
        ),
        ("relu bidirectional time / performer-pytorch", t("favor-relu"), t("pp-softmax"), 0.8),
        ("relu causal time / exact SDPA causal", t("favor-relu-causal"), t("exact-causal"), 0.7),
    ]
    out = [
        {"target": f"{name} (L={at})", "ratio": _ratio(a, b), "limit": limit}
        for name, a, b, limit in rows
    ]
    for method in ("favor-softmax", "favor-softmax-causal", "favor-relu", "favor-relu-causal"):
        out.append(
            {
                "target": f"{method} time({long}) / time({at})",
                "ratio": _ratio(t(method, long), t(method, at)),
                "limit": 2.2,
            }
        )
    for row in out:
        row["met"] = None if row["ratio"] is None else row["ratio"] <= row["limit"]
    return out


def plot(points: list[dict[str, Any]], path: Path, title: str) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for method in dict.fromkeys(p["method"] for p in points):
        good = sorted(
            (p for p in points if p["method"] == method and "time_s" in p),
            key=lambda p: p["length"],
        )
        if not good:
            continue
        style = "--" if method.endswith("causal") else "-"
        lengths = [p["length"] for p in good]
        axes[0].plot(lengths, [p["time_s"] for p in good], style, marker="o", label=method)
        axes[1].plot(
            lengths, [max(p["peak_mib"], 1e-1) for p in good], style, marker="o", label=method
        )
    for ax, label in zip(
        axes, ("forward+backward time [s]", "peak memory growth [MiB]"), strict=True
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=RESULTS / "attention_scaling.json")
    parser.add_argument("--png", type=Path, default=None, help="default: next to the JSON")
    parser.add_argument("--quick", action="store_true", help="small smoke configuration")
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=None)
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    add_attention_shape_args(parser)
    parser.add_argument(
        "--device",
        default="cpu",
        help="cpu or cuda[:N] (GPU: time with synchronize, peak memory from the caching allocator)",
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16"),
        help="of q, k, v (FAVOR computes features in float32 either way)",
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=None, help="timed passes (default 2)"
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=None, help="sweeps (default 2; quick 1)"
    )
    parser.add_argument(
        "--min-time", type=float, default=None, help="timed seconds per run (default 3; quick 0)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    parser.add_argument(
        "--pp-causal-max-length",
        type=int,
        default=2048,
        help="performer-pytorch's CPU causal path stores (L, m, D) per head: skip above this",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="GPU only: every point in this process (saves a process start per point)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("time", "memory", "both"), help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    add_output_args(parser)
    args = parser.parse_args(argv)
    if not args.worker:
        check_device(parser, args.device)
    if args.in_process and not args.device.startswith("cuda"):
        parser.error("--in-process needs --device cuda (CPU memory is measured per process)")
    if args.repeats is None:
        args.repeats = 1 if args.quick else 2
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.min_time is None:
        args.min_time = 0.0 if args.quick else 3.0
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    check_outputs(parser, [args.json, args.png or args.json.with_suffix(".png")], args.overwrite)
    lengths = args.lengths or ([256, 512] if args.quick else LENGTHS)
    at, long = (lengths[-2], lengths[-1]) if len(lengths) > 1 else (lengths[0], lengths[0])
    if {8192, 16384} <= set(lengths):  # the lengths the targets name
        at, long = 8192, 16384

    print(machine_line(args.device, args.threads), flush=True)
    raw = []
    started = time.perf_counter()
    for round_idx in range(args.rounds):
        for length in lengths:  # all methods at one length close together in time
            for method in args.methods:
                if method == "pp-softmax-causal" and length > args.pp_causal_max_length:
                    continue
                point = run_point(args, method, length) | {"round": round_idx}
                raw.append(point)
                shown = {k: v for k, v in point.items() if k not in ("method", "length")}
                print(f"  L={length:6d} {method:22s} {shown}", file=sys.stderr, flush=True)
    points = aggregate(raw, args, lengths)

    rows = [
        [
            p["method"],
            p["length"],
            p.get("time_s"),
            p.get("peak_mib"),
            p.get("background_cores"),
            p.get("error") or p.get("skipped"),
        ]
        for p in points
    ]
    print(format_table(["method", "L", "time_s", "peak_MiB", "bg_cores", "note"], rows))
    goal_rows = targets(points, at, long)
    print()
    if args.quick:
        print("(--quick: a smoke run; the targets below are set for the full run's lengths)")
    print(
        format_table(
            ["target", "ratio", "limit", "met"],
            [[g["target"], g["ratio"], g["limit"], g["met"]] for g in goal_rows],
        )
    )
    config = {
        k: getattr(args, k)
        for k in (
            "batch",
            "heads",
            "dim",
            "features",
            "threads",
            "repeats",
            "rounds",
            "min_time",
            "quick",
            "device",
            "dtype",
            "in_process",
        )
    }
    config["lengths"] = lengths
    payload = {
        "benchmark": "attention_scaling",
        "config": config,
        "environment": environment() | {"threads": args.threads},
        "wall_s": time.perf_counter() - started,
        "points": points,
        "targets": goal_rows,
        "raw": raw,
    }
    write_json(args.json, payload)
    png = args.png or args.json.with_suffix(".png")
    where = f"{args.threads} threads" if args.device == "cpu" else args.device
    title = (
        f"B={args.batch} H={args.heads} D={args.dim} m={args.features}, {args.dtype}, "
        f"{where}, forward+backward\n{machine_line(args.device, args.threads)}"
        + ("\nsmoke run (--quick): one pass per point, not a measurement" if args.quick else "")
    )
    plot(points, png, title)
    print(f"\nwrote {args.json} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
