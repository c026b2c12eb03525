"""Atomic file writes: a temporary file in the target's directory, then ``os.replace``.

A reader (or a crash) never sees a half-written output.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from protein_performer.errors import DataError


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


def make_temp_file(path: Path) -> tuple[int, str]:
    """``mkstemp`` next to ``path`` with the permissions a plain ``open`` would give (mkstemp
    makes it private: 0600), so that the renamed output is readable like any other file.
    Where the file system refuses the mode change, the file stays as mkstemp made it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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
