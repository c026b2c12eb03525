"""Atomic file writes: a temporary file in the target's directory, then ``os.replace``.

A reader (or a crash) never sees a half-written output.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(fh)`` on a temporary binary file next to ``path``, then rename it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    write_atomic(path, lambda fh: fh.write(data))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_atomic(path, lambda fh: fh.write(text.encode("utf-8")))
