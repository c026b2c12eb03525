"""Atomic FASTA writer: plain or gzip, fixed-width sequence lines, temp file + ``os.replace``.

The output appears at its final path only when every record has been written; an exception
while writing (including one raised by the record iterator) removes the temp file and leaves
any previous file at that path untouched. Gzip output is byte-reproducible (the gzip header
carries no file name and ``mtime=0``), so the same records always give the same sha256.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from protein_performer.utils.atomic import make_temp_file

__all__ = ["AtomicFastaWriter", "FastaWriteSummary", "write_fasta"]


@dataclass(frozen=True)
class FastaWriteSummary:
    """What :class:`AtomicFastaWriter` wrote: final path, counts and sha256 of the file bytes."""

    path: Path
    records: int
    residues: int
    bytes: int
    sha256: str
    compressed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "records": self.records,
            "residues": self.residues,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "compressed": self.compressed,
        }


class _HashingFile:
    """Write-through wrapper that hashes and counts every byte reaching the file."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()
        self.nbytes = 0

    def write(self, data: bytes) -> int:
        self._hash.update(data)
        self.nbytes += len(data)
        return self._raw.write(data)

    def flush(self) -> None:
        self._raw.flush()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _default_file_mode() -> int:
    # tempfile creates 0600 files; give the final file the usual 0666 & ~umask instead.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


class AtomicFastaWriter:
    """Context manager writing FASTA records to a temp file next to ``path``.

    ``compress=None`` gzips when ``path`` ends with ``.gz``. Each record is written as
    ``>{id} {description}`` (no space when the description is empty) followed by the sequence
    in lines of ``line_width`` characters. On a clean exit the temp file is fsynced and
    atomically renamed to ``path``; on an exception it is deleted.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        compress: bool | None = None,
        line_width: int = 60,
        compresslevel: int = 9,
    ) -> None:
        if line_width < 1:
            raise ValueError(f"line_width must be >= 1, got {line_width}")
        self.path = Path(path)
        self.compress = self.path.name.endswith(".gz") if compress is None else bool(compress)
        self.line_width = line_width
        self.compresslevel = compresslevel
        self.records = 0
        self.residues = 0
        self.summary: FastaWriteSummary | None = None
        self._tmp_path: Path | None = None
        self._raw: IO[bytes] | None = None
        self._hashing: _HashingFile | None = None
        self._out: Any = None

    def __enter__(self) -> AtomicFastaWriter:
        parent = self.path.parent
        if not parent.is_dir():
            raise FileNotFoundError(f"{parent}: output directory does not exist")
        fd, tmp = make_temp_file(self.path)
        self._tmp_path = Path(tmp)
        self._raw = os.fdopen(fd, "wb")
        self._hashing = _HashingFile(self._raw)
        if self.compress:
            self._out = gzip.GzipFile(
                filename="",
                mode="wb",
                fileobj=self._hashing,  # type: ignore[arg-type]
                compresslevel=self.compresslevel,
                mtime=0,
            )
        else:
            self._out = self._hashing
        return self

    def write(self, record_id: str, sequence: str, description: str | None = None) -> None:
        """Append one record. ``record_id`` must be non-empty without whitespace."""
        if self._out is None:
            raise RuntimeError("AtomicFastaWriter.write called outside its `with` block")
        if not record_id or any(c.isspace() for c in record_id):
            raise ValueError(f"record id must be non-empty without whitespace: {record_id!r}")
        header = f">{record_id} {description}" if description else f">{record_id}"
        if "\n" in header or "\r" in header:
            raise ValueError(f"record {record_id}: header contains a line break")
        if any(c.isspace() or c in ">;" for c in sequence):
            # ';' could start a wrapped line, which FASTA readers take for a comment
            raise ValueError(f"record {record_id}: sequence contains whitespace, '>' or ';'")
        w = self.line_width
        lines = [header, *(sequence[i : i + w] for i in range(0, len(sequence), w))]
        self._out.write(("\n".join(lines) + "\n").encode("utf-8"))
        self.records += 1
        self.residues += len(sequence)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._raw is not None and self._tmp_path is not None and self._hashing is not None
        try:
            if exc_type is not None:
                # The temp file is deleted below. Close the gzip stream anyway: an unclosed
                # GzipFile would try to write its trailer to the closed file when collected.
                if self.compress:
                    with contextlib.suppress(Exception):
                        self._out.close()
                return
            if self.compress:
                self._out.close()  # writes the gzip trailer; does not close the fileobj
            self._raw.flush()
            os.fsync(self._raw.fileno())
            self._raw.close()
            os.chmod(self._tmp_path, _default_file_mode())
            os.replace(self._tmp_path, self.path)
            self.summary = FastaWriteSummary(
                path=self.path,
                records=self.records,
                residues=self.residues,
                bytes=self._hashing.nbytes,
                sha256=self._hashing.hexdigest(),
                compressed=self.compress,
            )
        finally:
            self._out = None
            with contextlib.suppress(OSError):
                self._raw.close()
            if self._tmp_path.exists():
                self._tmp_path.unlink()


def write_fasta(
    path: str | Path,
    records: Iterable[tuple[str, str | None, str]],
    *,
    compress: bool | None = None,
    line_width: int = 60,
    compresslevel: int = 9,
) -> FastaWriteSummary:
    """Atomically write ``(id, description, sequence)`` records; gzip when ``path`` ends ``.gz``.

    ``description`` is the header text after the id (``None`` or ``""`` for none).
    """
    with AtomicFastaWriter(
        path, compress=compress, line_width=line_width, compresslevel=compresslevel
    ) as writer:
        for record_id, description, sequence in records:
            writer.write(record_id, sequence, description)
    assert writer.summary is not None
    return writer.summary
