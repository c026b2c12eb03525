"""Model-level scaling: a full training step's time and peak memory versus sequence length.

Each (attention, length) point runs in a fresh subprocess: a ``ProteinLM`` takes MLM training
steps (forward + backward + Adam; 15% of positions predicted) on random residues,
``--tokens`` tokens per batch (``tokens // L`` sequences, at least one). Sizes: ``--size
regular`` is the Performer paper's regular model (6 layers, d 512, 8 heads, d_ff 2048),
``small`` 4 × 256 × 8 heads (d_ff 1024); m = 256 features. Kinds: the three attentions,
``KIND+exact`` (the layer-wise hybrid: exact attention in the last layer,
``model.exact_layers=[-1]``) and ``none``, the paper's "no attention" optimum (each attention
returns its V: everything else in the model, no token mixing), the floor a linear attention is
measured against.
Reported: tokens/s of the fastest of ``--steps`` timed steps after one warm-up, and the peak
memory of one step (GPU: the caching allocator's peak; CPU: resident-set growth, see
``_common.PeakRSS``). A point that runs out of memory or time says so, which is the point for
exact attention at long lengths. A table, JSON and a log-log PNG (time per token vs L, as the
paper's scaling figure) go to ``benchmarks/results/``.

    python benchmarks/model_scaling.py --quick                     # CPU smoke run (seconds)
    python benchmarks/model_scaling.py --size regular --tokens 8192 \\
        --lengths 1024 2048 4096 8192 16384 32768                  # the paper's size
    python benchmarks/model_scaling.py --device cuda --precision bf16 --size regular \\
        --lengths 1024 8192 32768 65536                            # a GPU run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, PeakRSS, environment, format_table, write_json

ATTENTIONS = ["performer_relu", "performer_softmax", "transformer", "none"]
CHOICES = [*ATTENTIONS, "taylor", "hedgehog"]  # on request: --attentions taylor hedgehog
# KIND+exact: the layer-wise hybrid, exact attention in the last layer (model.exact_layers=[-1])
CHOICES += [f"{k}+exact" for k in ("performer_relu", "performer_softmax", "taylor", "hedgehog")]
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


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One (attention, length) point, inside its own process."""
    import contextlib

    import torch
    import torch.nn.functional as F

    from protein_performer.data.alphabet import default_alphabet
    from protein_performer.model.config import ModelConfig
    from protein_performer.model.performer import ProteinLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    alphabet = default_alphabet()
    dim, depth, heads, ffn_dim = args.dim, args.depth, args.heads, args.ffn_dim
    kind, _, hybrid = args.attention.partition("+")
    config = ModelConfig(
        attention="transformer" if kind == "none" else kind,
        exact_layers=[-1] if hybrid == "exact" else [],
        dim=dim,
        depth=depth,
        heads=heads,
        ffn_dim=ffn_dim,
        dropout=0.0,
        max_len=args.length,
        nb_features=args.features,
        checkpointing=args.checkpointing,
        qkv_conv=args.qkv_conv,
        save_features=args.save_features,
    )
    model = ProteinLM(config, len(alphabet), alphabet.pad_idx).to(device)
    if args.attention == "none":
        _no_attention(model)
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
    tokens = batch * args.length
    return {
        "batch": batch,
        "step_s": min(times),
        "tokens_per_s": tokens / min(times),
        "us_per_token": 1e6 * min(times) / tokens,
        "peak_mib": peak,
    }


def _run_point(args: argparse.Namespace, attention: str, length: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        *("--worker", "--attention", attention, "--length", str(length)),
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
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--attentions", nargs="+", default=ATTENTIONS, choices=CHOICES)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    for name in ("dim", "depth", "heads", "ffn-dim"):
        parser.add_argument(f"--{name}", type=int, default=None, help="override the size's value")
    parser.add_argument("--features", type=int, default=256)
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
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per batch")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per point")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per point")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the sweep; each point reports its fastest round (a noisy machine's spread "
        "between rounds is in the JSON)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--attention", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.quick:
        args.size, args.features, args.tokens, args.steps = "tiny", 64, 2048, 1
    for name, value in zip(("dim", "depth", "heads", "ffn_dim"), SIZES[args.size], strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    lengths = args.lengths or ([256, 1024] if args.quick else [1024, 4096, 8192])
    json_path = args.json or RESULTS / f"model_scaling_{args.size}.json"
    png_path = args.png or json_path.with_suffix(".png")

    started = time.perf_counter()
    raw = []
    for round_ in range(args.rounds):
        for length in lengths:
            for attention in args.attentions:
                point = {"attention": attention, "length": length, "round": round_}
                point |= _run_point(args, attention, length)
                raw.append(point)
                print(f"  {point}", file=sys.stderr, flush=True)
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
    keys = (
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


def ratios(points: list[dict[str, Any]]) -> str:
    """The issue's ratios, from this run: Performer vs exact tokens/s, and vs no attention."""
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
        axes[1].loglog(
            [n for n, _ in pts], [p["peak_mib"] for _, p in pts], marker="o", label=label, **style
        )
    axes[0].set_ylabel("training step time per token (µs)")
    axes[1].set_ylabel("peak memory of a step (MiB)")
    for ax in axes:
        ax.set_xlabel("sequence length L")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"{config['depth']}×{config['dim']}, {config['heads']} heads, m={config['features']}, "
        f"{config['device']} {config['precision']}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
