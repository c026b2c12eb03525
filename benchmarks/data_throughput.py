"""Preprocessing / stats throughput on the shared proteomes, and peak memory vs input size.

    python benchmarks/data_throughput.py [--json out.json] [--repeats 2] [--synthetic 400000]

Each case runs in a fresh subprocess so peak RSS (``ru_maxrss``) belongs to that case alone.
MB/s counts bytes as stored on disk (compressed for .gz) and, separately, uncompressed FASTA.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared" / "data"
ECOLI = SHARED / "uniprot_UP000000625_ecoli_k12.fasta"
YEAST = SHARED / "uniprot_UP000002311_yeast_s288c.fasta.gz"

_CHILD = r"""
import json, resource, sys, time, tempfile, shutil
from pathlib import Path
from protein_performer.data.shards import preprocess
from protein_performer.data.stats import fasta_stats
mode, paths = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
if mode == "preprocess":
    d = Path(tempfile.mkdtemp())
    m = preprocess(paths, d / "out", progress=False)
    records, residues = m["counts"]["records_read"], sum(s["residues"] for s in m["splits"].values())
    shutil.rmtree(d)
else:
    s = fasta_stats(paths)
    records, residues = s["records"], s["residues"]
el = time.perf_counter() - t0
print(json.dumps({"seconds": el, "records": records, "residues": residues,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _uncompressed_size(path: Path) -> int:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic != b"\x1f\x8b":
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            n += len(chunk)
    return n


def _synthetic(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    aa = np.frombuffer(b"ACDEFGHIKLMNPQRSTVWY", dtype=np.uint8)
    with gzip.open(path, "wt", compresslevel=1) as fh:
        for i in range(n):
            seq = aa[rng.integers(0, 20, int(rng.integers(50, 600)))].tobytes().decode()
            fh.write(f">UniRef50_S{i:08d} synthetic n=1 Tax=x TaxID=32630 RepID=S{i}\n{seq}\n")


def _run(mode: str, paths: list[Path], repeats: int) -> dict:
    best = None
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, mode, *map(str, paths)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None or r["seconds"] < best["seconds"]:
            best = r
    assert best is not None
    disk = sum(p.stat().st_size for p in paths)
    raw = sum(_uncompressed_size(p) for p in paths)
    s = best["seconds"]
    return {
        "mode": mode,
        "input": " + ".join(p.name for p in paths),
        "records": best["records"],
        "seconds": round(s, 3),
        "records_per_s": round(best["records"] / s),
        "residues_per_s": round(best["residues"] / s),
        "disk_mb_per_s": round(disk / 1e6 / s, 2),
        "fasta_mb_per_s": round(raw / 1e6 / s, 2),
        "peak_rss_mb": round(best["peak_rss_mb"], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write results to this JSON file")
    ap.add_argument("--repeats", type=int, default=2, help="best of N runs per case")
    ap.add_argument(
        "--synthetic",
        type=int,
        default=400_000,
        help="records in the synthetic file for the memory check (0 to skip)",
    )
    from _common import add_output_args, check_outputs

    add_output_args(ap)
    args = ap.parse_args()
    check_outputs(ap, [args.json], args.overwrite)
    cases = []
    if ECOLI.exists() and YEAST.exists():
        for mode in ("stats", "preprocess"):
            cases += [(mode, [ECOLI]), (mode, [YEAST]), (mode, [ECOLI, YEAST])]
    else:
        print(f"shared proteomes not found under {SHARED}; only the synthetic case runs")
    rows = [_run(m, p, args.repeats) for m, p in cases]
    if args.synthetic:
        with tempfile.TemporaryDirectory() as d:
            small, big = Path(d) / "small.fa.gz", Path(d) / "big.fa.gz"
            _synthetic(small, args.synthetic // 10)
            _synthetic(big, args.synthetic)
            rows += [_run("preprocess", [small], 1), _run("preprocess", [big], 1)]
    cols = [
        "mode",
        "input",
        "records",
        "seconds",
        "records_per_s",
        "residues_per_s",
        "disk_mb_per_s",
        "fasta_mb_per_s",
        "peak_rss_mb",
    ]
    # imported only now: _common imports torch, and a child's peak RSS (ru_maxrss) starts
    # from this process's at fork time
    from _common import environment, write_json

    env = environment()
    print(
        f"CPU: {env['processor']} ({env['cpu_count']} cores visible, {env['machine']}); "
        f"best of {args.repeats} per case"
    )
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths, strict=True)))
    if args.json:
        write_json(Path(args.json), {"environment": env, "repeats": args.repeats, "rows": rows})


if __name__ == "__main__":
    main()
