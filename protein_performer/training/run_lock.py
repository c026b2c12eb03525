"""One training process writes a run directory at a time: ``RUN/.lock``.

A resume started while the run is still training (a requeued job whose first instance has not
ended, an array collision) would interleave two writers' rows in ``metrics.csv`` and replace
each other's checkpoints. The lock file holds its owner (``HOST~PID``, :func:`owner_tag`) and
is touched every :data:`HEARTBEAT_S` seconds; a lock is stale when its process is gone (same
machine) or it was not touched for :data:`STALE_S` seconds (another machine, after a kill).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from protein_performer.atomic import _alive, owner_tag
from protein_performer.errors import DataError

LOCK_NAME = ".lock"
HEARTBEAT_S = 20.0
STALE_S = 120.0


def _stale(path: Path, holder: str) -> bool:
    host, _, pid = holder.rpartition("~")
    if host == owner_tag().rpartition("~")[0] and pid.isdigit():
        return not _alive(int(pid))
    try:
        return time.time() - path.stat().st_mtime > STALE_S
    except FileNotFoundError:
        return True


def _holder(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip() or "unknown"
    except (OSError, UnicodeDecodeError):
        return "unknown"


def check_unlocked(run_dir: Path) -> None:
    """The one-line DataError of :func:`run_lock` when a live run holds ``run_dir``'s lock,
    before anything is written there (a stale lock is left for :func:`run_lock`)."""
    path = Path(run_dir) / LOCK_NAME
    if path.exists() and not _stale(path, holder := _holder(path)):
        raise DataError(_busy(holder, path), path=run_dir)


def _busy(holder: str, path: Path) -> str:
    return (
        f"run directory: a run is training in it now ({holder}); wait for it to end "
        f"(or stop it), or remove {path} if no such run is alive"
    )


@contextlib.contextmanager
def run_lock(run_dir: Path, enabled: bool = True) -> Iterator[None]:
    """Hold ``run_dir``'s lock while the block runs (``enabled=False``: a DDP rank other than
    0, whose rank 0 holds it). A live holder is a one-line DataError naming it."""
    if not enabled:
        yield
        return
    path = Path(run_dir) / LOCK_NAME
    tag = owner_tag()
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            holder = _holder(path)
            if _stale(path, holder):
                path.unlink(missing_ok=True)  # a killed run's lock
                continue
            raise DataError(_busy(holder, path), path=run_dir) from None
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(tag + "\n")
        break
    else:
        raise DataError("run directory: could not take its lock", path=run_dir)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            try:
                os.utime(path)
            except OSError:
                return

    thread = threading.Thread(target=beat, name="run-lock-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        if _holder(path) == tag:
            path.unlink(missing_ok=True)
