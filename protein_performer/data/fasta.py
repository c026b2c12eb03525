"""Streaming FASTA reading: plain, gzip, bzip2 or xz (detected by magic bytes), with validation.

Records are parsed with biopython's ``SimpleFastaParser`` one at a time (constant memory).
Every malformed-input case raises :class:`~protein_performer.errors.DataError` with a one-line
message naming the file and, where known, the record.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import itertools
import logging
import lzma
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO, TextIO

from Bio.SeqIO.FastaIO import SimpleFastaParser

from protein_performer.data.headers import HeaderInfo, parse_header
from protein_performer.errors import DataError
from protein_performer.utils.paths import (  # noqa: F401 (the first two: their old place)
    STREAM_HINT,
    check_distinct_inputs,
    refuse_stream,
    require_file,
)

log = logging.getLogger(__name__)

PathLike = str | os.PathLike

COMPRESSION_MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"(\xb5/\xfd": "zstd",
    b"PK\x03\x04": "zip",
}


@dataclass(frozen=True)
class FastaRecord:
    """One FASTA record. ``index`` is 0-based; ``sequence`` is raw (whitespace removed)."""

    index: int
    title: str
    sequence: str

    @cached_property
    def header(self) -> HeaderInfo:
        return parse_header(self.title)

    @property
    def id(self) -> str:
        return self.title.split(None, 1)[0] if self.title.strip() else ""

    @property
    def number(self) -> int:
        """1-based record number, as used in error messages."""
        return self.index + 1


class _HashingReader(io.RawIOBase):
    """Raw reader that hashes (sha256) and counts the bytes it passes on."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        n = self._raw.readinto(b)
        if n:
            self.sha256.update(memoryview(b)[:n])
            self.bytes_read += n
        return n or 0

    def drain(self) -> None:
        """Read to EOF so the hash (and count) covers the whole file: bytes after the end of
        a compressed stream too."""
        buf = bytearray(1 << 20)
        while self.readinto(buf):
            pass

    def close(self) -> None:
        self._raw.close()
        super().close()


def detect_compression(path: PathLike) -> str:
    """``"plain"``, ``"gzip"``, ``"bzip2"``, ``"xz"`` (or an unsupported name) by magic bytes."""
    check_readable_file(path)
    with open(path, "rb") as fh:
        head = fh.read(6)
    for magic, name in COMPRESSION_MAGIC.items():
        if head.startswith(magic):
            return name
    return "plain"


def check_readable_file(path: PathLike, what: str = "a FASTA file") -> None:
    """One-line :class:`DataError` unless ``path`` is a readable file (``what`` names the
    file expected, for a directory given instead): :func:`~protein_performer.utils.paths.require_file`."""
    require_file(path, expected=what)


class NucleotideError(DataError):
    """A record that looks like a DNA/RNA sequence where proteins are expected."""


class FastaReader:
    """Iterate :class:`FastaRecord` from one file, validating as it goes.

    After iteration ``sha256`` (of the file's bytes as stored) and ``bytes_read`` are set.
    ``compressed_bytes_read`` is live during iteration (for progress bars).
    """

    def __init__(self, path: PathLike, *, allow_empty_sequence: bool = False) -> None:
        self.path = Path(path)
        self.allow_empty_sequence = allow_empty_sequence
        refuse_stream(self.path)  # before the magic bytes are read
        self.compression = detect_compression(path)
        if self.compression == "zip" and self.path.suffix in (".ckpt", ".pt", ".pth"):
            raise DataError(
                "a PyTorch checkpoint, not a FASTA file (checkpoint= and fasta= swapped?)",
                path=path,
            )
        if self.compression not in ("plain", "gzip", "bzip2", "xz"):
            raise DataError(
                f"{self.compression}-compressed files are not supported "
                "(use plain, gzip, bzip2 or xz FASTA)",
                path=path,
            )
        self.size = self.path.stat().st_size
        self._hasher: _HashingReader | None = None
        self.sha256: str | None = None
        self.records_read = 0
        self.comment_lines = 0  # ";" lines skipped (see _without_comments)

    @property
    def compressed_bytes_read(self) -> int:
        return self._hasher.bytes_read if self._hasher is not None else 0

    def _open_text(self) -> TextIO:
        self._hasher = _HashingReader(open(self.path, "rb", buffering=0))  # noqa: SIM115
        raw: BinaryIO = io.BufferedReader(self._hasher, buffer_size=1 << 20)
        if self.compression == "gzip":
            raw = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        elif self.compression == "bzip2":
            raw = bz2.BZ2File(raw, mode="rb")  # type: ignore[assignment]
        elif self.compression == "xz":
            raw = lzma.LZMAFile(raw, mode="rb")  # type: ignore[assignment]  # noqa: SIM115
        return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict", newline=None)  # type: ignore[arg-type]

    def _stream_problem(self) -> str | None:
        """Decompress the whole file, discarding the data: what is wrong with the compressed
        stream (bad checksum, damaged data, truncation), or None when it is intact."""
        opener = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}.get(self.compression)
        if opener is None:
            return None
        try:
            with opener(self.path, "rb") as fh:
                while fh.read(1 << 20):
                    pass
        except EOFError:
            return "the file ends mid-stream"
        except (gzip.BadGzipFile, zlib.error, OSError, lzma.LZMAError) as e:
            return str(e) or type(e).__name__
        return None

    def explain(self, error: DataError) -> DataError:
        """A content error in a compressed file may come from damage to the file: when the
        stream fails its integrity check, say that first (the content error follows)."""
        if self.compression == "plain":
            return error
        if self.size > 100 * 2**20:
            log.warning("%s: checking the %s stream for damage…", self.path, self.compression)
        problem = self._stream_problem()
        if problem is None:
            return error
        return DataError(
            f"corrupt {self.compression} file ({problem}), which explains: {error.problem}",
            path=self.path,
            record=error.record,
            record_id=error.record_id,
        )

    def _error(self, problem: str, index: int | None = None, title: str | None = None) -> DataError:
        record_id = title.split(None, 1)[0] if title and title.strip() else None
        return DataError(
            problem,
            path=self.path,
            record=None if index is None else index + 1,
            record_id=record_id,
        )

    def _stream_error(self, problem: str, index: int, title: str | None) -> DataError:
        """An error of the byte stream (decoding, decompression) found while reading ahead:
        text is decoded in chunks, so it lies at or after record ``index + 1``; the last
        record read whole is ``title``."""
        where = f"at or after record {index + 1:,}"
        if title and title.strip():
            where += f", after {title.split(None, 1)[0]}"
        return DataError(f"{problem} ({where})", path=self.path)

    def _without_comments(self, lines: Iterator[str]) -> Iterator[str]:
        """Lines without the ``;`` comment lines of the original (Pearson) FASTA format, which
        would otherwise be read as residues of the record above them; counted in
        ``comment_lines``."""
        for line in lines:
            if line.startswith("\ufeff"):  # files concatenated, each with its BOM
                line = line[1:]
            if line.startswith(";"):
                self.comment_lines += 1
                continue
            yield line

    def __iter__(self) -> Iterator[FastaRecord]:
        self.comment_lines = 0
        if self.size == 0:
            raise DataError("empty file", path=self.path)
        index = 0
        title: str | None = None
        text = self._open_text()
        try:
            lines = iter(text)
            line_no = 0
            first = None
            for line in lines:
                line_no += 1
                if line.startswith(";"):  # a comment before the first record
                    self.comment_lines += 1
                elif line.strip():
                    first = line
                    break
            if first is None:
                raise DataError(
                    "no records (file is empty after decompression)"
                    if self.compression != "plain"
                    else "no records (file holds only comment and blank lines)"
                    if self.comment_lines
                    else "no records (file holds only blank lines)",
                    path=self.path,
                )
            line1 = first.rstrip("\r\n")
            if len(line1) >= 4 and {"\x00"} in (set(line1[1::2]), set(line1[0::2])):
                # every other character NUL: UTF-16 read as UTF-8
                raise DataError(
                    "NUL bytes between the characters: UTF-16 text? Convert it to UTF-8 "
                    "(iconv -f UTF-16 -t UTF-8)",
                    path=self.path,
                )
            if not first.startswith(">"):
                raise DataError(
                    f"line {line_no} does not start with '>': not a FASTA file "
                    f"({_looks_like(first)})",
                    path=self.path,
                )
            for title, seq in SimpleFastaParser(
                self._without_comments(itertools.chain([first], lines))
            ):
                if not title.strip():
                    raise self.explain(self._error("empty header line ('>' with no id)", index))
                if not seq and not self.allow_empty_sequence:
                    raise self.explain(self._error("header has no sequence", index, title))
                yield FastaRecord(index, title, seq)
                index += 1
                self.records_read = index
            self._hasher.drain()  # type: ignore[union-attr]
            read = self._hasher.bytes_read  # type: ignore[union-attr]
            if read != self.size:  # cut or appended to meanwhile: its last record may be cut
                raise DataError(
                    f"the file changed while it was read ({self.size:,} bytes when opened, "
                    f"{read:,} read); read it again once it is complete",
                    path=self.path,
                )
            self.sha256 = self._hasher.sha256.hexdigest()  # type: ignore[union-attr]
        except UnicodeDecodeError as e:
            if index == 0 and bytes(e.object[:2]) == b"\x1f\x8b":
                raise DataError(
                    f"gzip inside {self.compression}: decompress it once more", path=self.path
                ) from None
            raise self.explain(
                self._stream_error(
                    f"not UTF-8 text (byte 0x{e.object[e.start]:02x}); is this a FASTA file?",
                    index,
                    title,
                )
            ) from None
        except EOFError:
            raise self._stream_error(
                f"truncated {self.compression} stream (file ends mid-stream)", index, title
            ) from None
        except (gzip.BadGzipFile, zlib.error, OSError, lzma.LZMAError) as e:
            raise self._stream_error(
                f"corrupt {self.compression} data ({e})", index, title
            ) from None
        finally:
            text.close()


def _looks_like(first_line: str) -> str:
    """What a file whose first line is ``first_line`` might be instead of FASTA."""
    head = first_line.lstrip("\ufeff")
    if head.startswith("@"):
        return "it looks like FASTQ: convert it, e.g. `seqkit fq2fa`"
    if head.startswith("LOCUS "):
        return "it looks like GenBank: export FASTA, e.g. with Biopython's SeqIO.convert"
    if head.startswith("ID   "):
        return "it looks like a UniProt/EMBL flat file: download the FASTA format instead"
    if head.startswith(("# STOCKHOLM", "CLUSTAL", "MSF:")):
        return "it looks like an alignment: write it as aligned FASTA (strip_gaps reads it)"
    if len(first_line) > 262 and first_line[257:262] == "ustar":
        return "it looks like a tar archive: unpack it first"
    return "or text before the first header"


def read_fasta(path: PathLike) -> Iterator[FastaRecord]:
    """Stream records of one FASTA file (plain/gzip/bzip2/xz), validating as it goes."""
    return iter(FastaReader(path))
