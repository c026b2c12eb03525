r"""Sequence weights of deep alignments: exact against estimated from a sample of rows.

An alignment (``--msa``, read against ``--wild-type``) is made ``C`` times deeper for each ``C``
of ``--copies``: its rows and ``C - 1`` copies of each with ``--noise`` of their residues
replaced at random (seeded), so redundant groups grow with depth as in real searches. For each
depth: the seconds and peak memory of the weights ``score context=`` computes (exact up to
``--max-cells`` residue comparisons, beyond from a sample of rows), the exact weights' seconds
(up to ``--exact-rows`` rows), both Neff, and the correlation of the two weighted profiles
(column frequencies).

    python benchmarks/msa_weights.py --msa ../shared/data/dms/pilin_NEIME/msa.a2m \
        --wild-type ../shared/data/dms/pilin_NEIME/wt.fasta --copies 1 5 20 \
        --json docs/results/msa_weights.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    PeakRSS,
    add_output_args,
    check_outputs,
    environment,
    format_table,
    int_at_least,
    machine_line,
    one_line_errors,
    write_json,
)

from protein_performer.data.msa import GAP


def deeper(matrix: np.ndarray, copies: int, noise: float, seed: int) -> np.ndarray:
    """``(copies * N, L)``: ``matrix`` and ``copies - 1`` copies of it with ``noise`` of each
    row's residues replaced by random ones (gaps stay gaps)."""
    rng = np.random.default_rng(seed)
    out = [matrix]
    for _ in range(copies - 1):
        row = matrix.copy()
        hit = (rng.random(row.shape) < noise) & (row != GAP)
        row[hit] = rng.integers(0, 20, int(hit.sum()))
        out.append(row)
    return np.concatenate(out)


def profile(matrix: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(L * 20,)``: the weighted column frequencies (gaps not counted)."""
    from protein_performer.analysis.dms.profile import weighted_column_counts

    counts = weighted_column_counts(matrix, weights)
    return (counts / np.maximum(counts.sum(1, keepdims=True), 1e-12)).ravel()


def main(argv: list[str] | None = None) -> int:
    from protein_performer.data.msa import (
        EXACT_WEIGHT_CELLS,
        read_msa,
        sequence_weights,
        weight_sample_size,
    )

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--msa", type=Path, required=True, help="an alignment (a3m, a2m, ...)")
    p.add_argument("--wild-type", type=Path, required=True, help="FASTA, first record")
    p.add_argument("--copies", type=int_at_least(1), nargs="+", default=[1, 5, 20])
    p.add_argument("--noise", type=float, default=0.1, help="residues changed in each copy")
    p.add_argument("--max-cells", type=int, default=EXACT_WEIGHT_CELLS, help="exact up to")
    p.add_argument("--exact-rows", type=int, default=120_000, help="exact weights up to")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int_at_least(1), default=torch.get_num_threads())
    p.add_argument("--json", type=Path, default=RESULTS / "msa_weights.json")
    add_output_args(p)
    args = p.parse_args(argv)
    check_outputs(p, [args.json], args.overwrite)
    torch.set_num_threads(args.threads)
    lines = [line.strip() for line in args.wild_type.read_text().splitlines()]
    wild = "".join(line for line in lines if line and not line.startswith(">")).upper()
    base = read_msa(args.msa, wild).matrix
    if base is None:
        raise SystemExit(f"msa_weights: {args.msa} is not an alignment (plain FASTA hits)")
    rows: list[dict[str, Any]] = []
    for copies in args.copies:
        matrix = deeper(base, copies, args.noise, args.seed)
        n, length = matrix.shape
        with PeakRSS() as mem:
            t0 = time.perf_counter()
            w = sequence_weights(matrix, max_cells=args.max_cells, seed=args.seed)
            seconds = time.perf_counter() - t0
        row: dict[str, Any] = {
            "rows": n,
            "columns": length,
            "sample": weight_sample_size(n, length, args.max_cells),
            "seconds": round(seconds, 1),
            "peak_mib": round(mem.delta_mib),
            "neff": round(float(w.sum()), 1),
        }
        if n <= args.exact_rows:
            t0 = time.perf_counter()
            exact = sequence_weights(matrix, max_cells=None)
            row["exact_seconds"] = round(time.perf_counter() - t0, 1)
            row["exact_neff"] = round(float(exact.sum()), 1)
            row["profile_r"] = float(np.corrcoef(profile(matrix, w), profile(matrix, exact))[0, 1])
        rows.append(row)
        print(f"{n:,} rows: {row}", file=sys.stderr)

    def cell(r: dict[str, Any], key: str, fmt: str = "{:,}") -> str:
        return fmt.format(r[key]) if key in r else "—"

    table = format_table(
        ["rows", "columns", "weighed against", "s", "peak MiB", "Neff", "exact s", "exact Neff",
         "profile r"],
        [
            [f"{r['rows']:,}", r["columns"], f"{r['sample']:,}", r["seconds"], r["peak_mib"],
             f"{r['neff']:,}", cell(r, "exact_seconds"), cell(r, "exact_neff"),
             cell(r, "profile_r", "{:.4f}")]
            for r in rows
        ],
    )  # fmt: skip
    print(
        f"{args.msa.name} made deeper (copies with {args.noise:g} of residues changed); exact up "
        f"to {args.max_cells:.2g} residue comparisons\n{machine_line('cpu', args.threads)}\n{table}"
    )
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_json(
        args.json,
        {"benchmark": "msa_weights", "config": config, "environment": environment(), "rows": rows},
    )
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(one_line_errors(main)())
