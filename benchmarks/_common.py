"""Helpers shared by the benchmark scripts: atomic output, tables, environment, memory."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from protein_performer.atomic import write_text_atomic

RESULTS = Path(__file__).resolve().parent / "results"


def write_json(path: Path, payload: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=False) + "\n")


def add_attention_shape_args(parser: argparse.ArgumentParser) -> None:
    """``--batch --heads --dim --features --threads``: the attention benchmarks' input shape
    (B = 1, H = 8, D = 64, m = 256 on 2 threads by default)."""
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)


def environment() -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "python": platform.python_version(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with right-aligned columns (floats with 4 significant digits)."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return "-" if value is None else str(value)

    body = [[cell(v) for v in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(lines)


# ---- peak resident memory ------------------------------------------------------------------


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakRSS:
    """Peak resident set size growth over a region, in MiB.

    On Linux the kernel's high-water mark is reset to the current RSS on entry (writing 5 to
    ``/proc/self/clear_refs``) and read back as ``VmHWM`` on exit, so the result is the
    true peak of the region minus the RSS at its start. Where the reset is unavailable,
    ``ru_maxrss`` is used and ``exact`` is False (the lifetime peak may hide the region's).
    """

    def __enter__(self) -> PeakRSS:
        self.start_kib = _status_kib("VmRSS") or 0
        self.exact = False
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.exact = _status_kib("VmHWM") is not None
        except OSError:
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        peak = _status_kib("VmHWM") if self.exact else None
        if peak is None:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.delta_mib = max(0, peak - self.start_kib) / 1024
