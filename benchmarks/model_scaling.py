"""Model-level scaling: a full training step's time and peak memory versus sequence length.

Each (attention, length) point runs in a fresh subprocess: a ``ProteinLM`` takes MLM training
steps (forward + backward + Adam; 15% of positions predicted) on random residues,
``--tokens`` tokens per batch (``tokens // L`` sequences, at least one). Sizes: ``--size
regular`` is the Performer paper's regular model (6 layers, d 512, 8 heads, d_ff 2048),
``small`` 4 × 256 × 8 heads (d_ff 1024); m = 256 features. Kinds: the three attentions,
``KIND+exact`` (the layer-wise hybrid: exact attention in the last layer,
``model.exact_layers=[-1]``), ``KIND+flat`` (FAVOR through the ``(B·H, L, D)`` route of views
and copies, ``SelfAttention.packed = False``, beside the fused q/k/v projection read in place:
what that is worth, in one ``--paired`` process; the same code off the CPU but for rotary
models), ``KIND+python`` (the packed route on the PyTorch kernel instead of the
compiled one of ``attention/fused_cpu.py``) and ``none``, the paper's "no
attention" optimum (each attention returns its V: everything else in the model, no token
mixing), the floor a linear attention is measured against.
Reported: tokens/s of the fastest of ``--steps`` timed steps after one warm-up, and the peak
memory of one step (GPU: the caching allocator's peak; CPU: resident-set growth, see
``_common.PeakRSS``). A point that runs out of memory or time says so, which is the point for
exact attention at long lengths. A table, JSON and a log-log PNG (time per token vs L, as the
paper's scaling figure) go to ``benchmarks/results/``.

With ``--paired`` every kind of a length runs in one process instead, one step of each in turn
(``--steps`` rounds, the order rotated each round), and each Performer step is divided by the
no-attention step of its round: a ratio per round, its median and range. That is the ratio the
1.3x target is about, measured so that a shared machine's drift between processes (which moves
separate runs of one point by up to 15%) cancels; no peak memory in this mode.

    python benchmarks/model_scaling.py --quick                     # CPU smoke run (seconds)
    python benchmarks/model_scaling.py --size regular --tokens 8192 \\
        --lengths 1024 2048 4096 8192 16384 32768                  # the paper's size
    python benchmarks/model_scaling.py --device cuda --precision bf16 --size regular \\
        --lengths 1024 8192 32768 65536                            # a GPU run
    python benchmarks/model_scaling.py --size regular --tokens 8192 --paired --steps 6 \
        --attentions performer_relu performer_softmax none        # ratios to no attention
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    PeakRSS,
    add_output_args,
    check_device,
    check_outputs,
    environment,
    format_table,
    machine_line,
    positive_int,
    write_json,
)

ATTENTIONS = ["performer_relu", "performer_softmax", "transformer", "none"]
CHOICES = [*ATTENTIONS, "taylor", "hedgehog"]  # on request: --attentions taylor hedgehog
# KIND+exact: the layer-wise hybrid, exact attention in the last layer (model.exact_layers=[-1])
CHOICES += [f"{k}+exact" for k in ("performer_relu", "performer_softmax", "taylor", "hedgehog")]
# KIND+flat: FAVOR on (B·H, L, D) copies of q, k, v instead of the fused projection in place
CHOICES += [f"{k}+flat" for k in ("performer_relu", "performer_softmax")]
# KIND+python: the packed route on the PyTorch kernel, not the compiled one (fused_cpu)
CHOICES += [f"{k}+python" for k in ("performer_relu", "performer_softmax")]
SIZES = {  # (dim, depth, heads, ffn_dim)
    "tiny": (64, 2, 4, 256),
    "small": (256, 4, 8, 1024),
    "regular": (512, 6, 8, 2048),
}


def _no_attention(model: Any) -> None:
    """Make every attention return its values: the model without attention (with
    ``--qkv-conv`` the convolution stays, so the optimum is that of the same model)."""
    for block in model.blocks:
        attn = block.attn

        def forward(x, padding_mask=None, rotary=None, need_weights=False, attn=attn):
            b, n, _ = x.shape
            _, _, v = attn._split(x)
            return attn.out(v.transpose(1, 2).reshape(b, n, -1)), None

        attn.forward = forward


def build(args: argparse.Namespace, attention: str) -> tuple[Callable[[], float], int]:
    """A model of ``attention``'s kind with its Adam and batch: ``(step, tokens)``, where
    ``step()`` takes one training step and returns its seconds."""
    import contextlib

    import torch
    import torch.nn.functional as F

    from protein_performer.data.alphabet import default_alphabet
    from protein_performer.model.config import ModelConfig
    from protein_performer.model.performer import ProteinLM

    torch.manual_seed(0)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    alphabet = default_alphabet()
    kind, _, hybrid = attention.partition("+")
    config = ModelConfig(
        attention="transformer" if kind == "none" else kind,
        exact_layers=[-1] if hybrid == "exact" else [],
        dim=args.dim,
        depth=args.depth,
        heads=args.heads,
        ffn_dim=args.ffn_dim,
        dropout=0.0,
        max_len=args.length,
        nb_features=args.features,
        checkpointing=args.checkpointing,
        qkv_conv=args.qkv_conv,
        save_features=args.save_features,
    )
    model = ProteinLM(config, len(alphabet), alphabet.pad_idx).to(device)
    if attention == "none":
        _no_attention(model)
    for block in model.blocks:
        block.attn.packed = hybrid != "flat"
        if block.attn.favor is not None:
            block.attn.favor.fused = hybrid != "python"
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    batch = max(1, args.tokens // args.length)
    residues = [alphabet.index(a) for a in "ACDEFGHIKLMNPQRSTVWY"]
    ids = torch.tensor(residues, device=device)[
        torch.randint(len(residues), (batch, args.length), device=device)
    ]
    labels = torch.where(torch.rand(ids.shape, device=device) < 0.15, ids, -100)
    inputs = torch.where(labels != -100, alphabet.mask_idx, ids)
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if args.precision == "bf16"
        else contextlib.nullcontext()
    )

    def step() -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with autocast:
            logits = model(inputs)["logits"]
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    return step, batch * args.length


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One (attention, length) point, inside its own process."""
    import torch

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    step, tokens = build(args, args.attention)
    try:
        step()  # warm-up (also allocates Adam's state)
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            step()
            peak = (torch.cuda.max_memory_allocated(device) - before) / 2**20
        else:
            with PeakRSS() as mem:
                step()
            peak = mem.delta_mib
        times = [step() for _ in range(args.steps)]
    except torch.OutOfMemoryError:
        return {"error": "out of memory"}
    return {
        "batch": max(1, args.tokens // args.length),
        "step_s": min(times),
        "tokens_per_s": tokens / min(times),
        "us_per_token": 1e6 * min(times) / tokens,
        "peak_mib": peak,
    }


def paired_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Every kind of ``--attentions`` at one length, in one process: after a warm-up step of
    each, ``--steps`` rounds of one step per kind, the order rotated every round; per round
    each kind's time and, with ``none`` among the kinds, each kind's ratio to it."""
    import torch

    torch.set_num_threads(args.threads)
    try:
        steps = {kind: build(args, kind) for kind in args.attentions}
        for step, _ in steps.values():
            step()
        times = paired_rounds({k: s for k, (s, _) in steps.items()}, args.steps)
    except torch.OutOfMemoryError:
        return {"error": "out of memory"}
    tokens = next(iter(steps.values()))[1]
    return {"batch": max(1, args.tokens // args.length), "tokens": tokens, "times_s": times}


def paired_rounds(steps: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """``rounds`` rounds of one call of every ``steps`` function, the order rotated each round
    (each kind goes first as often as the others); every call's seconds by kind."""
    kinds = list(steps)
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for r in range(rounds):
        shift = r % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            times[kind].append(steps[kind]())
    return times


def paired_points(
    length: int, kinds: list[str], results: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One point per kind from the :func:`paired_worker` results of one length (one per
    process; their rounds pooled): fastest and median time per token and, beside ``none``, the
    ratio of each round (same round, same process) with its median, fastest and slowest. An
    error comes back for every kind when no process gave times."""
    done = [r for r in results if "error" not in r]
    if not done:
        error = results[-1]["error"] if results else "not run"
        return [{"attention": kind, "length": length, "error": error} for kind in kinds]
    tokens = done[0]["tokens"]
    times = {kind: [t for r in done for t in r["times_s"][kind]] for kind in kinds}
    none = times.get("none")
    points = []
    for kind, ts in times.items():
        point = {
            "attention": kind,
            "length": length,
            "batch": done[0]["batch"],
            "step_s": min(ts),
            "tokens_per_s": tokens / min(ts),
            "us_per_token": 1e6 * min(ts) / tokens,
            "us_per_token_median": 1e6 * statistics.median(ts) / tokens,
            "us_per_token_rounds": [1e6 * t / tokens for t in ts],
            "processes": len(done),
        }
        if none is not None and kind != "none":
            per_round = [t / n for t, n in zip(ts, none, strict=True)]
            point |= {
                "ratio_to_none_rounds": per_round,
                "ratio_to_none_median": statistics.median(per_round),
                "ratio_to_none_range": [min(per_round), max(per_round)],
            }
        points.append(point)
    return points


def _run_point(args: argparse.Namespace, attention: str | None, length: int) -> dict[str, Any]:
    """One worker process: one kind at ``length``, or (``attention=None``) all of
    ``--attentions`` paired."""
    which = ["--paired", "--attentions", *args.attentions] if attention is None else []
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        *("--worker", "--attention", attention or "", "--length", str(length), *which),
        *("--dim", str(args.dim), "--depth", str(args.depth), "--heads", str(args.heads)),
        *("--ffn-dim", str(args.ffn_dim), "--features", str(args.features)),
        *("--tokens", str(args.tokens)),
        *(["--checkpointing"] if args.checkpointing else []),
        *(["--save-features"] if args.save_features else []),
        *("--qkv-conv", str(args.qkv_conv)),
        *("--steps", str(args.steps), "--threads", str(args.threads)),
        *("--device", args.device, "--precision", args.precision),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {args.timeout:g} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        if proc.returncode in (-9, 137):
            return {"error": "killed (out of memory?)"}
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--json", type=Path, default=None, help="default: results/model_scaling_SIZE.json"
    )
    parser.add_argument("--png", type=Path, default=None, help="default: next to the JSON")
    parser.add_argument("--quick", action="store_true", help="small CPU smoke configuration")
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=None)
    parser.add_argument("--attentions", nargs="+", default=ATTENTIONS, choices=CHOICES)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    for name in ("dim", "depth", "heads", "ffn-dim"):
        parser.add_argument(
            f"--{name}", type=positive_int, default=None, help="override the size's value"
        )
    parser.add_argument("--features", type=positive_int, default=256)
    parser.add_argument(
        "--checkpointing",
        action="store_true",
        help="activation checkpointing (model.checkpointing)",
    )
    parser.add_argument(
        "--save-features",
        action="store_true",
        help="FAVOR keeps its features for the backward (model.save_features=true)",
    )
    parser.add_argument(
        "--qkv-conv", type=int, default=0, help="model.qkv_conv for every kind (kernel size)"
    )
    parser.add_argument("--tokens", type=positive_int, default=16384, help="tokens per batch")
    parser.add_argument("--steps", type=positive_int, default=3, help="timed steps per point")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per point")
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="repeat the sweep; each point reports its fastest round (a noisy machine's spread "
        "between rounds is in the JSON)",
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="time every kind of a length in one process, one step of each in turn (--steps "
        "rounds, order rotated): each round's ratio to `none` (needs none among --attentions); "
        "no peak memory",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--attention", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    add_output_args(parser)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(paired_worker(args) if args.paired else worker(args)))
        return 0
    check_device(parser, args.device)
    if args.paired and "none" not in args.attentions:
        parser.error("--paired needs `none` among --attentions (the ratios are to it)")
    if args.quick:
        args.size, args.features, args.tokens, args.steps = "tiny", 64, 2048, 1
    for name, value in zip(("dim", "depth", "heads", "ffn_dim"), SIZES[args.size], strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    lengths = args.lengths or ([256, 1024] if args.quick else [1024, 4096, 8192])
    json_path = args.json or RESULTS / f"model_scaling_{args.size}.json"
    png_path = args.png or json_path.with_suffix(".png")
    check_outputs(parser, [json_path, png_path], args.overwrite)

    print(machine_line(args.device, args.threads), flush=True)
    started = time.perf_counter()
    raw = []
    for round_ in range(args.rounds):
        for length in lengths:
            if args.paired:
                result = _run_point(args, None, length) | {"length": length, "round": round_}
                raw.append(result)
                print(f"  {summary(result)}", file=sys.stderr, flush=True)
                continue
            for attention in args.attentions:
                point = {"attention": attention, "length": length, "round": round_}
                point |= _run_point(args, attention, length)
                raw.append(point)
                print(f"  {point}", file=sys.stderr, flush=True)
    if args.paired:
        points = [
            p
            for length in lengths
            for p in paired_points(
                length, args.attentions, [r for r in raw if r["length"] == length]
            )
        ]
    else:
        points = fastest_rounds(raw)
    rows = [
        [
            p["attention"],
            p["length"],
            p.get("batch"),
            p.get("tokens_per_s"),
            p.get("us_per_token"),
            p.get("peak_mib"),
            p.get("error", "-"),
        ]
        for p in points
    ]
    print(
        format_table(["attention", "L", "batch", "tokens/s", "µs/token", "peak_MiB", "note"], rows)
    )
    print(ratios(points))
    if args.quick:
        print(
            "(--quick: one timed step per point in separate processes, a smoke run: its ratios "
            "move with the machine's load; --paired --steps N measures them)"
        )
    keys = (
        "paired",
        "size",
        "features",
        "tokens",
        "steps",
        "threads",
        "device",
        "checkpointing",
        "qkv_conv",
        "save_features",
    )
    config = {k: getattr(args, k) for k in keys} | {
        "quick": args.quick,
        "rounds": args.rounds,
        "dim": args.dim,
        "depth": args.depth,
        "heads": args.heads,
        "ffn_dim": args.ffn_dim,
        "precision": args.precision,
        "lengths": lengths,
    }
    write_json(
        json_path,
        {
            "benchmark": "model_scaling",
            "config": config,
            "environment": environment() | {"threads": args.threads},
            "wall_s": time.perf_counter() - started,
            "points": points,
            "rounds": raw,
        },
    )
    plot(points, config, png_path)
    print(f"\nwrote {json_path} and {png_path}")
    return 0


def fastest_rounds(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per (attention, length): its fastest round (an error only when every round
    failed), with ``us_per_token_rounds``, every round's time, beside it."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in raw:
        groups.setdefault((p["attention"], p["length"]), []).append(p)
    points = []
    for group in groups.values():
        timed = [p for p in group if "us_per_token" in p]
        best = dict(min(timed, key=lambda p: p["us_per_token"]) if timed else group[-1])
        best.pop("round", None)
        best["us_per_token_rounds"] = [p.get("us_per_token") for p in group]
        points.append(best)
    return points


def summary(result: dict[str, Any]) -> str:
    """One line of progress for a paired process: each kind's fastest ms per step."""
    if "error" in result:
        return f"L={result['length']}: {result['error']}"
    best = ", ".join(f"{k} {1e3 * min(t):.0f}" for k, t in result["times_s"].items())
    return f"L={result['length']} round {result['round']}: fastest ms/step {best}"


def ratios(points: list[dict[str, Any]]) -> str:
    """The issue's ratios, from this run: Performer vs exact tokens/s, and vs no attention
    (of the fastest steps; paired, also the median of the per-round ratios and their range)."""
    by = {(p["attention"], p["length"]): p for p in points if "tokens_per_s" in p}
    lines = []
    for (kind, length), p in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        base = kind.partition("+")[0]
        if not base.startswith("performer") and base not in ("taylor", "hedgehog"):
            continue
        parts = []
        exact = by.get(("transformer", length))
        none = by.get(("none", length))
        if exact:
            parts.append(f"{p['tokens_per_s'] / exact['tokens_per_s']:.2f}x exact tokens/s")
        if none:
            parts.append(f"{p['us_per_token'] / none['us_per_token']:.2f}x no-attention time/token")
        if "ratio_to_none_median" in p:
            low, high = p["ratio_to_none_range"]
            parts.append(
                f"per round {p['ratio_to_none_median']:.2f}x median ({low:.2f}-{high:.2f}, "
                f"{len(p['ratio_to_none_rounds'])} rounds)"
            )
        if parts:
            lines.append(f"  L={length} {kind}: " + ", ".join(parts))
    return "ratios (one run):\n" + "\n".join(lines) if lines else ""


def plot(points: list[dict[str, Any]], config: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for kind in CHOICES:
        pts = sorted(
            ((p["length"], p) for p in points if p["attention"] == kind and "step_s" in p),
            key=lambda lp: lp[0],
        )
        if not pts:
            continue
        style = {"ls": "--", "color": "grey"} if kind == "none" else {"ls": "-"}
        label = "no attention" if kind == "none" else kind
        axes[0].loglog(
            [n for n, _ in pts],
            [p["us_per_token"] for _, p in pts],
            marker="o",
            label=label,
            **style,
        )
        mem = [(n, p["peak_mib"]) for n, p in pts if p.get("peak_mib") is not None]
        if mem:  # (a paired run measures no memory)
            axes[1].loglog(*zip(*mem, strict=True), marker="o", label=label, **style)
    axes[0].set_ylabel("training step time per token (µs)")
    axes[1].set_ylabel("peak memory of a step (MiB)")
    measured = sorted({p["length"] for p in points if "step_s" in p})
    for ax in axes:
        ax.set_xlabel("sequence length L")
        ax.grid(True, which="both", alpha=0.3)
        if measured:  # the lengths measured, not powers of ten
            ax.set_xticks(measured, [f"{n:,}" for n in measured])
            ax.minorticks_off()
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(
        f"{config['depth']}×{config['dim']}, {config['heads']} heads, m={config['features']}, "
        f"{config['device']} {config['precision']}\n"
        f"{machine_line(config['device'], config.get('threads'))}"
        + (
            "\nsmoke run (--quick): one step per point, not a measurement"
            if config.get("quick")
            else ""
        ),
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
