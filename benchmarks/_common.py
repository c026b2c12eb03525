"""Helpers shared by the benchmark scripts: atomic output, tables, environment, memory."""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from protein_performer.errors import ProteinPerformerError
from protein_performer.utils.atomic import write_text_atomic

RESULTS = Path(__file__).resolve().parent / "results"


def write_json(path: Path, payload: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=False) + "\n")


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """``--overwrite``, and every option's default in ``--help`` (most have no help text of
    their own; where a file is written is one of them)."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace output files (--json, --png) that exist already (else refused)",
    )
    for action in parser._actions:
        shown = not any(action.default is x for x in (None, False, argparse.SUPPRESS))
        if shown and action.help != argparse.SUPPRESS and "%(default)" not in (action.help or ""):
            action.help = f"{action.help or ''} (default: %(default)s)".strip()


def check_outputs(
    parser: argparse.ArgumentParser, paths: Sequence[Path | str | None], overwrite: bool
) -> None:
    """Before any work: an output that exists is replaced only with ``--overwrite`` (a user's
    file, or an earlier run's results), and its folder must exist (a typo in a path makes
    none; the default results folder is made)."""
    for path in paths:
        if path is None:
            continue
        path = Path(path)
        if path.is_dir():
            parser.error(f"{path}: is a directory; give a file name")
        if path.exists() and not overwrite:
            parser.error(
                f"{path}: exists already; add --overwrite to replace it, or choose another name"
            )
        if not path.parent.is_dir() and path.parent.resolve() != RESULTS:
            parser.error(f"{path}: its directory {path.parent} does not exist")


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (lengths, sizes, counts)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"  # what argparse calls the type in its messages
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def fraction(text: str) -> float:
    """An argparse type: a number from 0 to 1 (a weight, a share)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number from 0 to 1")
    return value


def true_nll(logp: Any, truth: Sequence[int]) -> list[float]:
    """``−log p`` of each row's true column: ``logp`` ``(n, 20)`` log-probabilities (each row
    renormalised over its columns first), ``truth`` ``(n,)`` column indices."""
    import numpy as np

    logp = np.asarray(logp, dtype=np.float64)
    logp = logp - np.logaddexp.reduce(logp, axis=1, keepdims=True)
    return (-logp[np.arange(len(truth)), np.asarray(truth)]).tolist()


def window_caps(text: str) -> int | list[int] | str | None:
    """An argparse type for ``context_window_homologs``: ``auto``, ``all`` (None: as many as
    fit), ``N``, or ``A+B`` (windows of each, averaged: a list)."""
    if text in ("auto", "all"):
        return None if text == "all" else text
    try:
        caps = [int(part) for part in text.split("+")]
    except ValueError:
        caps = []
    if not caps or min(caps) < 1 or len(set(caps)) < len(caps):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give auto, all, a number >= 1 or distinct ones joined by + (8+64)"
        )
    return caps[0] if len(caps) == 1 else caps


def add_window_args(parser: argparse.ArgumentParser, window_homologs: list[Any]) -> None:
    """``--window`` (tokens), ``--window-homologs`` (``context_window_homologs`` values, a row
    each; ``window_homologs`` the default) and ``--retrieval`` (the profile's weights in the
    mixed column, a column each; default ``score``'s ``context_retrieval``)."""
    from protein_performer.analysis.dms.homologs import DEFAULT_RETRIEVAL

    parser.add_argument("--window", type=int_at_least(64), default=4096)
    parser.add_argument(
        "--window-homologs", type=window_caps, nargs="+", default=window_homologs,
        help="context_window_homologs values (N, or 1+64: windows of each averaged), a row each",
    )  # fmt: skip
    parser.add_argument(
        "--retrieval", type=fraction, nargs="+", default=[DEFAULT_RETRIEVAL],
        help="the profile's weight in the mixed column (score's context_retrieval); a column each",
    )  # fmt: skip


def caps_label(caps: Any) -> str:
    """``context_window_homologs`` as written on a table: ``all``, ``16``, ``8+64``."""
    if caps is None:
        return "all"
    return "+".join(map(str, caps)) if isinstance(caps, (list, tuple)) else str(caps)


def check_device(parser: argparse.ArgumentParser, device: str, *, allow_mps: bool = False) -> None:
    """Stop before any work when ``device`` cannot run here (a sweep of failed points and an
    empty result file would otherwise follow). ``allow_mps``: for checks that do not time (the
    timing benchmarks synchronise CUDA only)."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        parser.error(f"--device: {device!r} is not a device (cpu, cuda, cuda:N)")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            parser.error(f"--device {device}: no CUDA device is available here (use --device cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            parser.error(
                f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
    elif dev.type == "mps":
        if not allow_mps:
            parser.error(f"--device {device}: not timed correctly here (use cpu or cuda)")
        if not torch.backends.mps.is_available():
            parser.error(f"--device {device}: MPS is not available here (use --device cpu)")
    elif dev.type != "cpu":
        parser.error(f"--device {device}: only cpu, cuda and mps are supported")


def machine_line(device: str = "cpu", threads: int | None = None) -> str:
    """One line naming where the numbers come from (printed before a table); ``threads``:
    the torch threads the measurements use (their worker processes' ``--threads``)."""
    from protein_performer.utils.devices import usable_cpus

    env = environment()
    threads = env["threads"] if threads is None else threads
    where = f"CPU: {env['processor']} ({usable_cpus()} CPUs usable, {threads} torch threads)"
    if device.startswith("cuda") and torch.cuda.is_available():
        where = f"GPU: {torch.cuda.get_device_name(torch.device(device))}; " + where
    return f"{where}; torch {env['torch']}"


def one_line_errors(main: Callable[..., int | None]) -> Callable[..., int]:
    """Run a benchmark's ``main``: the project's errors (a bad checkpoint, a missing file) end
    it with one line and exit status 1, as the CLI does (``PP_DEBUG=1`` shows the traceback)."""

    @functools.wraps(main)
    def wrapped(*args: object, **kwargs: object) -> int:
        try:
            return main(*args, **kwargs) or 0
        except ProteinPerformerError as e:
            if os.environ.get("PP_DEBUG"):
                raise
            print(f"error: {e}", file=sys.stderr)
            return 1

    return wrapped


def add_attention_shape_args(parser: argparse.ArgumentParser) -> None:
    """``--batch --heads --dim --features --threads``: the attention benchmarks' input shape
    (B = 1, H = 8, D = 64, m = 256 on 2 threads by default)."""
    parser.add_argument("--batch", type=positive_int, default=1)
    parser.add_argument("--heads", type=positive_int, default=8)
    parser.add_argument("--dim", type=positive_int, default=64)
    parser.add_argument("--features", type=positive_int, default=256)
    parser.add_argument("--threads", type=positive_int, default=2)


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
