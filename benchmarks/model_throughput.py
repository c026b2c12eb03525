"""Training-step throughput and peak memory of the whole protein LM versus sequence length.

Each (attention, length) point runs in a fresh subprocess: a ``ProteinLM`` (default 4 layers ×
256 dim × 8 heads, m = 256) takes MLM training steps (15% of positions predicted, Adam) on
random residues, ``--tokens`` tokens per batch (``tokens // L`` sequences, at least one).
Reported: tokens/s over ``--steps`` timed steps after one warm-up, and the peak memory of one
step (GPU: the caching allocator's peak; CPU: resident-set growth, see ``_common.PeakRSS``).
A point that runs out of memory is reported as such, which is the point for exact attention
at long lengths.

    python benchmarks/model_throughput.py --quick                  # CPU smoke run (seconds)
    python benchmarks/model_throughput.py --device cuda --precision bf16 \\
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

ATTENTIONS = ["performer_relu", "performer_softmax", "transformer"]


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
    config = ModelConfig(
        attention=args.attention,
        dim=args.dim,
        depth=args.depth,
        heads=args.heads,
        ffn_dim=4 * args.dim,
        dropout=0.0,
        max_len=args.length,
        nb_features=args.features,
    )
    model = ProteinLM(config, len(alphabet), alphabet.pad_idx).to(device)
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
        "peak_mib": peak,
    }


def _run_point(args: argparse.Namespace, attention: str, length: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        *("--worker", "--attention", attention, "--length", str(length)),
        *("--dim", str(args.dim), "--depth", str(args.depth), "--heads", str(args.heads)),
        *("--features", str(args.features), "--tokens", str(args.tokens)),
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
    parser.add_argument("--json", type=Path, default=RESULTS / "model_throughput.json")
    parser.add_argument("--quick", action="store_true", help="small CPU smoke configuration")
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--attentions", nargs="+", default=ATTENTIONS, choices=ATTENTIONS)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per batch")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per point")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per point")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--attention", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.quick:
        args.dim, args.depth, args.heads, args.features = 64, 2, 4, 64
        args.tokens, args.steps = 2048, 1
    lengths = args.lengths or ([256, 1024] if args.quick else [1024, 4096, 8192])

    started = time.perf_counter()
    points = []
    for length in lengths:
        for attention in args.attentions:
            point = {"attention": attention, "length": length} | _run_point(args, attention, length)
            points.append(point)
            print(f"  {point}", file=sys.stderr, flush=True)
    rows = [
        [
            p["attention"],
            p["length"],
            p.get("batch"),
            p.get("tokens_per_s"),
            p.get("peak_mib"),
            p.get("error", "-"),
        ]
        for p in points
    ]
    print(format_table(["attention", "L", "batch", "tokens/s", "peak_MiB", "note"], rows))
    keys = ("dim", "depth", "heads", "features", "tokens", "steps", "threads", "device")
    config = {k: getattr(args, k) for k in keys} | {
        "precision": args.precision,
        "lengths": lengths,
    }
    write_json(
        args.json,
        {
            "benchmark": "model_throughput",
            "config": config,
            "environment": environment() | {"threads": args.threads},
            "wall_s": time.perf_counter() - started,
            "points": points,
        },
    )
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
