"""Atomic file writes: a temporary file in the target's directory, then ``os.replace``.

A reader (or a crash) never sees a half-written output.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from protein_performer.errors import DataError

log = logging.getLogger(__name__)


def current_umask() -> int:
    """The process umask: from ``/proc/self/status`` where there is one (no race with other
    threads), else by setting and restoring it."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def owner_tag() -> str:
    """``HOST~PID`` of this process, part of every temporary name it makes, so that a later
    run can tell a temporary left by a killed writer (:func:`remove_leftovers`). HOST carries
    the PID namespace where there is one (``vm-4026531836``): containers that share a host
    name but not process ids never judge each other's writers."""
    host = re.sub(r"[^\w.-]", "_", socket.gethostname()) or "host"
    with contextlib.suppress(OSError):
        host += f"-{os.stat('/proc/self/ns/pid').st_ino}"
    return f"{host}~{os.getpid()}"


_TAGGED = re.compile(r"\.(?P<host>[\w.-]+)~(?P<pid>\d+)\.")


def process_alive(pid: int) -> bool:
    """A process ``pid`` runs on this machine (assumed on Windows, where probing would signal it)."""
    if os.name == "nt":  # os.kill(pid, 0) sends a Ctrl-C event there: assume alive
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's live process
        return True
    return True


def remove_leftovers(path: str | os.PathLike) -> list[Path]:
    """Remove the temporaries of ``path`` (files ``.NAME.HOST~PID.*.tmp``, folders
    ``.NAME.HOST~PID.tmp-*``) whose writer, a process of this machine, no longer runs: what a
    run killed mid-write (SIGKILL, power loss) left beside its output. Another machine's, or a
    live process's, are left alone. Returns what was removed (logged)."""
    path = Path(path)
    prefix = f".{path.name}."
    removed = []
    try:
        entries = [e for e in os.scandir(path.parent) if e.name.startswith(prefix)]
    except OSError:
        return removed
    host = owner_tag().split("~")[0]
    for entry in entries:
        m = _TAGGED.match(entry.name, len(prefix) - 1)
        if m is None or m["host"] != host or int(m["pid"]) == os.getpid():
            continue
        rest = entry.name[m.end() :]
        is_file = rest.endswith(".tmp") and not entry.is_dir(follow_symlinks=False)
        is_dir = rest.startswith("tmp-") and entry.is_dir(follow_symlinks=False)
        if not (is_file or is_dir) or process_alive(int(m["pid"])):
            continue
        with contextlib.suppress(OSError):
            if is_dir:
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(Path(entry.path))
            log.warning(
                "removed %s: left by an earlier run (process %s) that stopped while writing %s",
                entry.name,
                m["pid"],
                path.name,
            )
    return removed


def make_temp_file(path: Path) -> tuple[int, str]:
    """``mkstemp`` next to ``path`` with the permissions a plain ``open`` would give (mkstemp
    makes it private: 0600), so that the renamed output is readable like any other file.
    Where the file system refuses the mode change, the file stays as mkstemp made it. The
    name carries this process's :func:`owner_tag`; those of killed writers are removed first."""
    remove_leftovers(path)
    try:
        fd, tmp = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.{owner_tag()}.", suffix=".tmp"
        )
    except OSError as e:  # named after the output, not a temporary name the user never chose
        raise type(e)(e.errno, e.strerror, str(path)) from None
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no os.fchmod
        os.fchmod(fd, 0o666 & ~current_umask())
    return fd, tmp


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(fh)`` on a temporary binary file next to ``path``, then rename it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = make_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            # on disk before the rename: a crash must not leave an empty file under the name
            try:
                os.fsync(fh.fileno())
            except OSError as e:  # file systems without fsync (some FUSE mounts) say EINVAL
                if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    write_atomic(path, lambda fh: fh.write(data))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_atomic(path, lambda fh: fh.write(text.encode("utf-8")))


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def make_output_dir(path: str | os.PathLike, key: str) -> Path:
    """``mkdir -p path``; a one-line :class:`DataError` naming ``key`` when that fails."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"{key}: cannot create this directory ({_reason(e)})", path=p) from None
    return p


def check_writable_file(path: str | os.PathLike, key: str) -> Path:
    """Check before long work that ``path`` can be written atomically: a temporary file is made
    in its folder and removed again (or, when the folder does not exist yet, the nearest
    existing one must be writable; nothing is created). One-line :class:`DataError` if not."""
    p = Path(path)
    if p.is_dir():
        raise DataError(f"{key}: is a directory, expected a file name", path=p)
    if p.parent.is_dir():
        try:
            fd, tmp = make_temp_file(p)
        except OSError as e:
            raise DataError(f"{key}: cannot write here ({_reason(e)})", path=p) from None
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        return p
    # folders are created only when writing: the nearest existing one must be writable
    folder = Path(os.path.abspath(p)).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise DataError(f"{key}: cannot create this directory ({folder} is a file)", path=p)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DataError(f"{key}: cannot write here (permission denied in {folder})", path=p)
    return p
