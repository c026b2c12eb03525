"""Input files checked before anything reads them: one wording of a missing, empty, directory,
stream or unreadable path for every command."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from protein_performer.errors import ConfigError, DataError
from protein_performer.utils.resources import missing_path_hint

#: Why a pipe (``/dev/stdin``, ``<(zcat x.gz)``) is refused, and what to do instead.
STREAM_HINT = (
    "inputs are read more than once (to count, split and check them), so write it to a file "
    "first (compressed .gz/.bz2/.xz files are read as they are)"
)


def refuse_stream(path: Path) -> None:
    """One-line :class:`DataError` when ``path`` exists but is neither a file nor a folder (a
    pipe, a device): checked before anything reads from it (a pipe's bytes would be gone)."""
    if path.exists() and not path.is_file() and not path.is_dir():
        raise DataError(f"a pipe or other stream, not a file: {STREAM_HINT}", path=path)


def require_file(
    path: str | os.PathLike, key: str | None = None, *, expected: str = "a file"
) -> None:
    """One-line error unless ``path`` is a readable file: ``PATH: KEY: PROBLEM`` (``key``: the
    setting that named it, e.g. ``data.files``; ``expected``: what a directory given instead
    should have been). An empty path is a :class:`ConfigError`, anything else a
    :class:`DataError`."""
    prefix = f"{key}: " if key else ""
    if not str(path).strip():  # Path("") is the working directory
        raise ConfigError(f"{prefix}an empty path (a file is needed)")
    p = Path(path)
    if not p.exists():
        name, eq, rest = str(path).partition("=")
        if eq and re.fullmatch(r"[\w.]+", name) and Path(rest).exists():
            raise DataError(
                f"{prefix}no such file ({rest} exists: the data commands take plain paths, "
                "not key=value)",
                path=path,
            )
        if str(path) == "-":
            raise DataError(
                f"{prefix}no such file ('-' for standard input is not read: {STREAM_HINT})"
            )
        raise DataError(f"{prefix}no such file{missing_path_hint(path)}", path=path)
    if p.is_dir():
        raise DataError(f"{prefix}is a directory, expected {expected}", path=path)
    if not p.is_file():
        raise DataError(f"{prefix}a pipe or other stream, not a file: {STREAM_HINT}", path=path)
    if not os.access(p, os.R_OK):
        raise DataError(f"{prefix}permission denied", path=path)


def check_distinct_inputs(groups: Mapping[str, Sequence[str | os.PathLike] | None]) -> None:
    """One-line :class:`ConfigError` when a file is listed twice, within or across the named
    groups (``{"data.files": [...], "data.val_files": [...]}``): its proteins would count twice
    or leak between splits. Paths are compared after resolving links and ``..``."""
    seen: dict[Path, str] = {}
    for key, paths in groups.items():
        for p in paths or []:
            try:
                real = Path(p).resolve()
            except (OSError, RuntimeError):  # a loop of links: the existence check says so
                real = Path(os.path.abspath(p))
            if real in seen:
                where = "" if seen[real] == key and len(groups) == 1 else f" in {seen[real]}"
                raise ConfigError(f"{key}: {p} is already listed{where}")
            seen[real] = key
