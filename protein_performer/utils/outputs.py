"""Where a command may write: checks that run before any work, so that no output ever replaces
something a user owns.

The rules, shared by every command that writes:

- an output whose name looks like an input (a FASTA file, a checkpoint) is refused: it is
  almost always a forgotten or swapped argument;
- an existing file is never replaced by a directory, nor a directory by a file;
- an existing non-empty directory is replaced (``overwrite``) only when this project wrote it
  (``is_ours`` recognises its manifest and finds nothing else in it);
- an existing file is replaced only with ``overwrite`` and, where the caller can tell, only when
  it is the same kind of output (``is_ours``).

Every refusal is a one-line :class:`~protein_performer.errors.DataError` naming the path, what is
there and what to do.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from protein_performer.errors import DataError
from protein_performer.utils.atomic import (
    check_writable_file,
    current_umask,
    owner_tag,
    remove_leftovers,
)

FASTA_SUFFIXES = frozenset(
    [
        ".fasta",
        ".fa",
        ".faa",
        ".fas",
        ".fna",
        ".ffn",
        ".frn",
        ".fsa",
        ".mpfa",
        ".pep",
        ".seq",
        ".aln",
        ".a2m",
        ".a3m",
        ".sto",
    ]
)
CHECKPOINT_SUFFIXES = frozenset([".ckpt", ".pt", ".pth", ".safetensors"])
COMPRESSION_SUFFIXES = (".gz", ".bgz", ".bz2", ".xz", ".zst", ".zip")


def input_like_name(path: str | os.PathLike) -> str | None:
    """``"a FASTA file"`` / ``"a checkpoint"`` / ``"a compressed file"`` when the name says the
    path holds input data, else None."""
    name = Path(path).name.lower()
    compressed = False
    for c in COMPRESSION_SUFFIXES:
        if name.endswith(c):
            name, compressed = name[: -len(c)], True
            break
    suffix = Path(name).suffix
    if suffix in FASTA_SUFFIXES:
        return "a FASTA file"
    if suffix in CHECKPOINT_SUFFIXES:
        return "a checkpoint"
    return "a compressed file" if compressed else None


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def describe_existing(path: Path) -> str:
    """What is at ``path``, for an error message (``an existing file (12,345 bytes)``)."""
    if path.is_symlink():
        return f"a symbolic link to {os.readlink(path)}"
    if path.is_dir():
        names = sorted(p.name for p in path.iterdir())
        if not names:
            return "an existing empty directory"
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        return f"an existing directory holding {len(names):,} {'entry' if len(names) == 1 else 'entries'} ({shown})"
    if path.is_file():
        size = path.stat().st_size
        return f"an existing file ({size:,} {'byte' if size == 1 else 'bytes'})"
    return "an existing special file"


def as_written(path: str | os.PathLike) -> Path:
    """``path`` as a write would find it: ``new/../x`` is ``x`` (once ``new`` is made, the
    write lands there), so existence and overwrite checks must look at ``x``; a ``..`` after a
    symbolic link goes where the link points, as the system's does. Paths without ``..`` are
    returned as given."""
    p = Path(path)
    if ".." not in p.parts:
        return p
    return Path(os.path.normpath(os.path.join(os.path.realpath(p.parent), p.name)))


def entries(path: Path) -> set[str]:
    return {p.name for p in path.iterdir()}


def check_output_dir(
    path: str | os.PathLike,
    key: str,
    *,
    overwrite: bool = False,
    is_ours: Callable[[Path], bool] | None = None,
    what: str = "output directory",
    overwrite_hint: str = "--overwrite",
) -> Path:
    """Check that ``path`` may become an output directory that replaces what is there.

    Returns the path. Passes when nothing is there, an empty directory is there, or (with
    ``overwrite``) a directory that ``is_ours`` recognises. Raises a one-line DataError before
    any work otherwise; nothing is created or removed here.
    """
    p = as_written(path)
    kind = input_like_name(p)
    if kind is not None:
        # "the run directory (hydra.run.dir): ... not the run directory" said once
        said = "" if what in key else f", not the {what}"
        raise DataError(
            f"{key}: the name looks like {kind}{said} (arguments in the wrong order, "
            "or the output forgotten?); nothing was written",
            path=p,
        )
    _check_parents(p, key)
    if not (p.exists() or p.is_symlink()):
        return p
    if p.is_symlink() or not p.is_dir():
        raise DataError(
            f"{key}: {describe_existing(p)} is in the way; the {what} never replaces it "
            "(choose another name)",
            path=p,
        )
    if not any(p.iterdir()):
        return p
    ours = is_ours is not None and is_ours(p)
    if not ours:
        extra = getattr(is_ours, "foreign", lambda _: None)(p)
        if extra:  # this command's output with files of someone else's in it: name those
            shown = ", ".join(extra[:4]) + (", ..." if len(extra) > 4 else "")
            raise DataError(
                f"{key}: the {what} holds {len(extra):,} "
                f"{'entry' if len(extra) == 1 else 'entries'} this command did not write "
                f"({shown}); it is never replaced (move them, or choose a new {what})",
                path=p,
            )
        raise DataError(
            f"{key}: {describe_existing(p)}, not (only) what this command writes; "
            f"it is never replaced (choose a new {what})",
            path=p,
        )
    if not overwrite:
        raise DataError(f"{key}: {what} exists (use {overwrite_hint} to replace it)", path=p)
    return p


def check_output_file(
    path: str | os.PathLike,
    key: str,
    *,
    overwrite: bool = False,
    is_ours: Callable[[Path], bool] | None = None,
    allow_input_name: bool = False,
    what: str = "output file",
    overwrite_hint: str | None = "--overwrite",
) -> Path:
    """Check that ``path`` may be written (atomically) as an output file.

    Refused: a directory, an input-like name (unless ``allow_input_name``: the output *is* a
    FASTA), an existing file without ``overwrite``, or one that ``is_ours`` does not recognise.
    The folder is created and a temporary file tried there, so a run does not fail at its end.
    """
    if str(path).endswith(("/", os.sep)):
        raise DataError(f"{key}: names a directory (trailing '/'); expected a file name", path=path)
    p = as_written(path)
    if not allow_input_name:
        kind = input_like_name(p)
        if kind is not None:
            raise DataError(
                f"{key}: the name looks like {kind}, not the {what}; nothing was written", path=p
            )
    if p.is_symlink() or (p.exists() and not p.is_file()):
        raise DataError(
            f"{key}: {describe_existing(p)} is in the way; expected a file name", path=p
        )
    if p.exists():
        # a file that is not ours is refused as such first: overwrite would not replace it
        ours = is_ours is None or is_ours(p)
        if not overwrite and ours:
            hint = (
                f"use {overwrite_hint} to replace it" if overwrite_hint else "choose another name"
            )
            raise DataError(f"{key}: file exists ({hint})", path=p)
        if not ours:
            raise DataError(
                f"{key}: {describe_existing(p)} that is not {_article(what)} {what} of "
                "protein-performer; "
                "it is never replaced (choose another name)",
                path=p,
            )
    _check_parents(p, key)
    return check_writable_file(p, key)


def absent(paths: Iterable[Path]) -> list[Path]:
    """The ``paths`` that do not exist now: what :func:`refuse_appeared` checks later."""
    return [p for p in paths if not p.exists()]


def refuse_appeared(was_absent: Iterable[Path], key: str, doing: str) -> None:
    """Just before writing outputs checked at the start of long work: one that did not exist
    then and exists now was written by someone else meanwhile, and is theirs (DataError)."""
    for p in was_absent:
        if p.exists():
            raise DataError(
                f"{key}: {p.name} appeared there while {doing}; nothing was written", path=p
            )


def _check_parents(p: Path, key: str) -> None:
    """Every existing ancestor of ``p`` must be a directory (``notes.txt/out`` is an error)."""
    for parent in Path(os.path.abspath(p)).parents:
        if parent.exists():
            if not parent.is_dir():
                raise DataError(f"{key}: {parent} is a file, not a directory", path=p)
            return


def replace_dir(new: Path, outdir: Path, recheck: Callable[[], object]) -> None:
    """Move the finished directory ``new`` to ``outdir``. When something is there by now,
    ``recheck()`` (the command's output check, run again: it may have changed while the command
    worked) must pass; an empty directory is replaced directly, one of this project's is
    swapped out and removed."""
    if outdir.exists() or outdir.is_symlink():
        recheck()
        if outdir.is_dir() and not any(outdir.iterdir()):
            os.replace(new, outdir)  # rename(2) replaces an empty directory
            return
        trash = outdir.with_name(f".{outdir.name}.old-{os.getpid()}")
        os.replace(outdir, trash)
        os.replace(new, outdir)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(new, outdir)


@contextlib.contextmanager
def staged_dir(outdir: Path, recheck: Callable[[], object]) -> Iterator[Path]:
    """A temporary folder next to ``outdir`` to write into; when the block ends without an
    error it becomes ``outdir`` (:func:`replace_dir`), otherwise it is removed with any parent
    folders made for it, so a failed or interrupted command leaves nothing behind."""
    made, work = start_staging(outdir)
    try:
        yield work
        os.chmod(work, 0o777 & ~current_umask())
        replace_dir(work, outdir, recheck)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        remove_empty(made)
        raise


def start_staging(outdir: Path) -> tuple[list[Path], Path]:
    """The missing folders above ``outdir``, made (for :func:`remove_empty` after a failure),
    and a fresh hidden folder next to it to write into. A one-line :class:`DataError` naming
    ``outdir`` when the system refuses (permission, read-only file system, full disk)."""
    made: list[Path] = []
    try:
        made = make_parents(outdir)
        remove_leftovers(outdir)
        work = tempfile.mkdtemp(prefix=f".{outdir.name}.{owner_tag()}.tmp-", dir=outdir.parent)
        return made, Path(work)
    except OSError as e:
        remove_empty(made)
        raise DataError(f"cannot write here ({e.strerror or e})", path=outdir) from None


def make_parents(path: str | os.PathLike) -> list[Path]:
    """Create the missing folders above ``path``; return them (deepest first) so that a
    command that fails can take them away again (:func:`remove_empty`)."""
    missing = []
    for parent in Path(os.path.abspath(path)).parents:
        if parent.exists():
            break
        missing.append(parent)
    for folder in reversed(missing):
        folder.mkdir(exist_ok=True)
    return missing


def remove_empty(folders: Iterable[Path]) -> None:
    """Remove ``folders`` (deepest first) that are still empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            break


def json_with_keys(keys: Iterable[str]) -> Callable[[Path], bool]:
    """``is_ours`` for JSON outputs: the file is a JSON object holding all of ``keys``."""
    wanted = set(keys)

    def check(path: Path) -> bool:
        try:
            if path.stat().st_size > 64 << 20:
                return False
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return False
        return isinstance(obj, dict) and wanted <= set(obj)

    return check


__all__ = [
    "check_output_dir",
    "check_output_file",
    "describe_existing",
    "input_like_name",
    "json_with_keys",
]


def dir_with_manifest(
    manifest: str, fmt: str, names: Callable[[dict], Iterable[str]] | Iterable[str] = ()
) -> Callable[[Path], bool]:
    """``is_ours`` for output directories: ``manifest`` is a JSON object whose ``format`` is
    ``fmt`` and the directory holds nothing but it and ``names`` (a set, or a function of the
    manifest giving the file names it lists)."""

    def foreign(path: Path) -> list[str] | None:
        """The entries this command did not write; None when ``path`` is not its output."""
        try:
            data = json.loads((Path(path) / manifest).read_text(encoding="utf-8"))
            present = entries(Path(path))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("format") != fmt:
            return None
        allowed = set(names(data) if callable(names) else names) | {manifest}
        return sorted(present - allowed)

    def is_ours(path: Path) -> bool:
        return foreign(path) == []

    is_ours.foreign = foreign  # type: ignore[attr-defined]
    return is_ours


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as None: ``NaN`` and ``Infinity`` are not JSON,
    and strict parsers reject the whole file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
