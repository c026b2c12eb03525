"""One training process writes a run directory at a time: ``RUN/.protein-performer.lock``.

A resume started while the run is still training (a requeued job whose first instance has not
ended, an array collision) would interleave two writers' rows in ``metrics.csv`` and replace
each other's checkpoints. The lock file holds its owner (``HOST~PID``, :func:`owner_tag`), on
Linux the owner's start in clock ticks since boot and the boot's id (``start TICKS BOOT``),
and is touched every :data:`HEARTBEAT_S` seconds. A lock is stale when, on this machine, its
process is gone or the process with its pid is another one (another boot, or other start
ticks: a pid reused; ticks since boot do not move with the wall clock, which a VM's pause or
an NTP step can shift by seconds); on another machine, when it was not touched for
:data:`STALE_S` seconds (a killed run). A run whose lock was taken over anyway (it was paused past that) sees
it (:meth:`HeldLock.lost`) and stops before writing more.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from protein_performer.errors import DataError
from protein_performer.utils.atomic import owner_tag, process_alive

#: a name of its own: a folder may hold another tool's ``.lock``
LOCK_NAME = ".protein-performer.lock"
HEARTBEAT_S = 20.0
STALE_S = 120.0


def _same_machine(holder: str | None) -> bool:
    if holder is None:
        return False
    host, _, pid = holder.rpartition("~")
    # Windows: os.kill(pid, 0) is a Ctrl-C event there, not a probe: judged by mtime only
    return host == owner_tag().rpartition("~")[0] and pid.isdigit() and os.name != "nt"


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return math.inf


def _start_ticks(pid: int) -> int | None:
    """Process ``pid``'s start in clock ticks since boot, from /proc; None elsewhere."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _boot_id() -> str | None:
    """This boot's id (Linux), so that ticks since boot are compared within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _start_line() -> str:
    """``start TICKS BOOT`` of this process for its lock ("" without /proc)."""
    ticks = _start_ticks(os.getpid())
    return "" if ticks is None else f"start {ticks} {_boot_id() or '-'}\n"


def _recorded_start(path: Path) -> tuple[int, str | None] | None:
    """The ``start TICKS BOOT`` line of the lock at ``path`` (older locks have none)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines[1:]:
        key, *values = line.split()
        if key == "start" and values and values[0].isdigit():
            boot = values[1] if len(values) > 1 and values[1] != "-" else None
            return int(values[0]), boot
    return None


def _started_at(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from /proc; None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _stale(path: Path, holder: str | None) -> bool:
    """Whether the lock at ``path`` (held by ``holder``, None when unreadable) belongs to no
    live run (see the module's docstring)."""
    if not _same_machine(holder):
        return _age(path) > STALE_S
    pid = int(holder.rpartition("~")[2])  # type: ignore[union-attr]
    if pid == os.getpid() or not process_alive(pid):  # our own pid: a restarted container's
        return True
    recorded, now = _recorded_start(path), _start_ticks(pid)
    if recorded is not None and now is not None:
        ticks, boot = recorded
        if boot is not None and _boot_id() not in (None, boot):
            return True  # written before a reboot: that pid is another process now
        return now != ticks  # another process has that pid now
    # an older lock without its start ticks: the wall clock decides
    started = _started_at(pid)
    if started is None:  # no /proc: the heartbeat decides
        return _age(path) > STALE_S
    try:
        touched = path.stat().st_mtime
    except FileNotFoundError:
        return True
    return started > touched + 1.0  # a pid reused since the holder last touched it


def wait_for_other_machine(run_dir: Path, quiet: bool = False) -> None:
    """Wait while another machine's lock on ``run_dir`` may be a killed run's (until it has
    been untouched for :data:`STALE_S`): a requeue started within two minutes of a kill would
    be refused (and end a job chain). A live holder keeps touching it, and is then refused as
    usual."""
    path = Path(run_dir) / LOCK_NAME
    holder = _holder(path)
    if holder is None or _same_machine(holder) or _stale(path, holder):
        return
    wait = max(0.0, STALE_S - _age(path)) + 1.0
    if not quiet:
        print(
            f"run directory {run_dir}: locked by {holder} on another machine, last touched "
            f"{_age(path):.0f} s ago; waiting up to {wait:.0f} s for it to go stale",
            file=sys.stderr,
            flush=True,
        )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and path.exists() and not _stale(path, _holder(path)):
        time.sleep(min(1.0, wait / 10))


def _holder(path: Path) -> str | None:
    """Who holds the lock at ``path``; None when there is none or it cannot be read now (a
    passing network-filesystem error is no one's)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return (lines[0].strip() if lines else "") or "unknown"


def check_unlocked(run_dir: Path) -> None:
    """The one-line DataError of :func:`run_lock` when a live run holds ``run_dir``'s lock,
    before anything is written there (a stale lock is left for :func:`run_lock`)."""
    path = Path(run_dir) / LOCK_NAME
    if path.exists() and not _stale(path, holder := _holder(path)):
        raise DataError(_busy(holder, path), path=run_dir)


def _busy(holder: str | None, path: Path) -> str:
    return (
        f"run directory: a run is training in it now ({holder or 'unknown'}); wait for it to "
        f"end (or stop it), or remove {path} if no such run is alive"
    )


class HeldLock:
    """The lock this process holds on a run directory; :meth:`lost` says whether another
    process has taken it over since (this one was paused past :data:`STALE_S`, a stopped
    job, a frozen node), after which this run must not write there."""

    def __init__(self, path: Path, tag: str) -> None:
        self.path, self.tag = path, tag
        self._checked = 0.0
        self._lost: str | None = None

    def lost(self, every_s: float = 5.0) -> str | None:
        """The holder that took the lock over, or None while it is ours (read at most every
        ``every_s`` seconds; a read that fails, or a lock removed by hand, is not a
        takeover)."""
        now = time.monotonic()
        if self._lost is None and now - self._checked >= every_s:
            self._checked = now
            holder = _holder(self.path)
            if holder is not None and holder != self.tag:
                self._lost = holder
        return self._lost


@contextlib.contextmanager
def run_lock(run_dir: Path, enabled: bool = True) -> Iterator[HeldLock | None]:
    """Hold ``run_dir``'s lock while the block runs (``enabled=False``: a DDP rank other than
    0, whose rank 0 holds it; yields None). A live holder is a one-line DataError naming it."""
    if not enabled:
        yield None
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
            fh.write(tag + "\n" + _start_line())
        # two processes taking over one stale lock at once: the later unlinks the earlier's
        # new file; the one that finds another name there backs off
        time.sleep(0.05)
        holder = _holder(path)
        if holder is not None and holder != tag:
            raise DataError(_busy(holder, path), path=run_dir)
        break
    else:
        raise DataError("run directory: could not take its lock", path=run_dir)
    held = HeldLock(path, tag)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            if held.lost(every_s=0.0):
                return  # another process holds it now: touching it would keep theirs alive
            try:
                os.utime(path)
            except FileNotFoundError:
                return  # removed (by hand): nothing to keep alive
            except OSError:
                continue  # a passing network-filesystem error: a later beat may get through

    thread = threading.Thread(target=beat, name="run-lock-heartbeat", daemon=True)
    thread.start()
    try:
        yield held
    finally:
        stop.set()
        if _holder(path) == tag:
            path.unlink(missing_ok=True)
