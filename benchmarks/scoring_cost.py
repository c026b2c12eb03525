"""Scoring cost per site against the window: the full forward (every row of every layer, then
the masked site's logits read) beside ``ProteinLM.logits_at`` (the last block for the masked
site's row only), with the shipped homolog model.

Each site is one row, as ``score context=`` builds them: random homologs then the random target
with that site masked (``data.context_windows.context_window``, crop style), rows batched up to
``--toks-per-batch`` tokens. Per-site seconds (wall clock, and this process's CPU time, which
a busy machine disturbs less), and their ratio to the first (smallest) window measured in the
same run:

    python benchmarks/scoring_cost.py                 # 1,024 ... 32,768 tokens, 4 sites each
    python benchmarks/scoring_cost.py --quick         # tiny windows (the test's run)

The full forward's exact last layer is O(L²); windows above ``--forward-max`` are timed with
``logits_at`` only. Prints a table naming the CPU and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_output_args,
    check_outputs,
    environment,
    format_table,
    machine_line,
    one_line_errors,
    positive_int,
    write_json,
)

WINDOWS = (1024, 2048, 4096, 8192, 16384, 32768)
QUICK_WINDOWS = (128, 256)
TARGET = 300  # residues of the target protein (cropped to half the window, as the scorer does)


def windows_for(tokens: int, sites: int, alphabet: Any, seed: int) -> tuple[list, int]:
    """``[(tokens, position of the masked site)]``, one per site, and how many homologs each
    window holds: random residues, homologs first."""
    from protein_performer.data.context_windows import context_window

    rng = np.random.default_rng(seed)
    residues = np.array(sorted(alphabet.encode("ACDEFGHIKLMNPQRSTVWY")), dtype=np.int64)
    width = min(TARGET, tokens // 2 - 2)
    target = rng.choice(residues, width)
    homologs = [rng.choice(residues, TARGET) for _ in range(tokens // TARGET + 2)]
    rows, held = [], 0
    for site in np.linspace(0, width - 1, sites).round().astype(int):
        masked = target.copy()
        masked[site] = alphabet.mask_idx
        ids, first, held = context_window(masked, homologs, alphabet, tokens, style="crop")
        rows.append((ids, first + int(site)))
    return rows, held


def score(model: Any, rows: list, method: str, toks_per_batch: int, pad_idx: int) -> tuple:
    """Wall and CPU seconds (this process's, every thread) for all ``rows``, each row's
    log-probabilities at its site ``(S, V)``, and the rows per batch."""
    from protein_performer.data.batching import pad_batch

    out = []
    start, cpu = time.perf_counter(), time.process_time()
    per_batch = max(1, toks_per_batch // max(len(ids) for ids, _ in rows))
    with torch.no_grad():
        for i in range(0, len(rows), per_batch):
            group = rows[i : i + per_batch]
            tokens, pad = pad_batch([ids for ids, _ in group], pad_idx)
            at = torch.tensor([[pos] for _, pos in group])
            if method == "forward":
                logits = model(tokens, pad)["logits"]
                picked = logits[torch.arange(len(group)), at[:, 0]]
            else:
                picked = model.logits_at(tokens, pad, at)[:, 0]
            out.append(torch.log_softmax(picked.float(), -1))
    wall = time.perf_counter() - start
    return wall, time.process_time() - cpu, torch.cat(out), per_batch


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import protein_performer
    from protein_performer.attention.favor import prepare_fused_kernel

    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    model, alphabet = protein_performer.load(args.checkpoint)
    model.eval()
    prepare_fused_kernel(model)  # its build, if any, before the clock
    warm, _ = windows_for(min(args.windows), 1, alphabet, args.seed)
    for method in ("forward", "logits_at"):
        score(model, warm, method, args.toks_per_batch, alphabet.pad_idx)
    results = []
    for tokens in args.windows:
        rows, held = windows_for(tokens, args.sites, alphabet, args.seed + tokens)
        logp = {}
        for method in ("forward", "logits_at"):
            if method == "forward" and tokens > args.forward_max:
                continue
            wall = cpu = float("inf")
            for _ in range(args.repeats):  # the fastest of each
                w, c, logp[method], per_batch = score(
                    model, rows, method, args.toks_per_batch, alphabet.pad_idx
                )
                wall, cpu = min(wall, w), min(cpu, c)
            results.append({
                "tokens": tokens, "method": method, "sites": len(rows),
                "rows_per_batch": per_batch, "homologs_in_window": held, "seconds": wall,
                "seconds_per_site": wall / len(rows), "cpu_seconds_per_site": cpu / len(rows),
            })  # fmt: skip
        if len(logp) == 2:
            diff = float((logp["forward"] - logp["logits_at"]).abs().max())
            for row in results[-2:]:
                row["max_abs_logp_difference"] = diff
    for method in ("forward", "logits_at"):
        mine = [r for r in results if r["method"] == method]
        for row in mine:
            row["ratio_to_first"] = row["seconds_per_site"] / mine[0]["seconds_per_site"]
            row["cpu_ratio_to_first"] = (
                row["cpu_seconds_per_site"] / mine[0]["cpu_seconds_per_site"]
            )
    return {
        "benchmark": "scoring_cost",
        "checkpoint": args.checkpoint,
        "model": model.config.kind_label,
        "machine": machine_line("cpu", args.threads),
        "environment": environment(),
        "first_window": min(args.windows),
        "load_average_before": load,
        "load_average_after": os.getloadavg(),
        "results": results,
    }


def table(payload: dict[str, Any]) -> str:
    by = {(r["tokens"], r["method"]): r for r in payload["results"]}
    rows = []
    for tokens in sorted({r["tokens"] for r in payload["results"]}):
        f, a = by.get((tokens, "forward")), by.get((tokens, "logits_at"))
        rows.append([
            tokens, a["homologs_in_window"],
            f and f["seconds_per_site"], f and f["cpu_seconds_per_site"],
            f and f["cpu_ratio_to_first"],
            a["seconds_per_site"], a["cpu_seconds_per_site"], a["cpu_ratio_to_first"],
            f and f["cpu_seconds_per_site"] / a["cpu_seconds_per_site"],
        ])  # fmt: skip
    first = payload["first_window"]
    headers = ["tokens", "homologs", "forward s/site", "CPU s", f"CPU x{first}",
               "logits_at s/site", "CPU s", f"CPU x{first}", "CPU speed-up"]  # fmt: skip
    return format_table(headers, rows)


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default="homologs", help="a shipped name or a file")
    p.add_argument("--windows", type=positive_int, nargs="+", default=list(WINDOWS))
    p.add_argument("--sites", type=positive_int, default=4, help="masked sites per window")
    p.add_argument("--toks-per-batch", type=positive_int, default=8192)
    p.add_argument("--forward-max", type=positive_int, default=8192,
                   help="the longest window timed with the full forward")  # fmt: skip
    p.add_argument("--repeats", type=positive_int, default=1, help="the fastest is kept")
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help=f"windows {QUICK_WINDOWS}, 2 sites")
    p.add_argument("--out", type=Path, default=RESULTS / "scoring_cost.json")
    add_output_args(p)
    args = p.parse_args(argv)
    if args.quick:
        args.windows, args.sites = list(QUICK_WINDOWS), 2
    args.windows = sorted(set(args.windows))
    check_outputs(p, [args.out], args.overwrite)
    threads = torch.get_num_threads()
    try:
        payload = measure(args)
    finally:
        torch.set_num_threads(threads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, payload)
    print(payload["machine"])
    print(
        f"{payload['checkpoint']} ({payload['model']}), {args.sites} sites per window; "
        "s/site: wall clock; CPU s: this process's CPU time per site (all threads: less "
        "sensitive to other load); load average before/after "
        f"{payload['load_average_before'][0]:.1f}/{payload['load_average_after'][0]:.1f}"
    )
    print(table(payload))
    print(f"JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
