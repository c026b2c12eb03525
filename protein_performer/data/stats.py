"""Streaming statistics over FASTA files: lengths, composition, invalid characters, duplicates.

Memory does not grow with the residues read; it grows by 8 bytes per record for the exact
duplicate-id check (a 64-bit digest per id, sorted once at the end: ~0.5 GB for UniRef50).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from protein_performer.data.alphabet import EXTRA_RESIDUES, STANDARD_AMINO_ACIDS
from protein_performer.data.digests import DuplicateFinder

PERCENTILES = (1, 5, 25, 50, 75, 95, 99)


class LengthHistogram:
    """Exact length distribution in memory proportional to the longest sequence, not the count."""

    def __init__(self) -> None:
        self.counts = np.zeros(1024, dtype=np.int64)
        self.n = 0
        self.total = 0
        self._pending: list[int] = []

    def add(self, length: int) -> None:
        self._pending.append(length)
        if len(self._pending) >= 65536:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        arr = np.asarray(self._pending, dtype=np.int64)
        self._pending.clear()
        top = int(arr.max())
        if top >= len(self.counts):
            grown = np.zeros(max(top + 1, 2 * len(self.counts)), dtype=np.int64)
            grown[: len(self.counts)] = self.counts
            self.counts = grown
        self.counts += np.bincount(arr, minlength=len(self.counts))
        self.n += len(arr)
        self.total += int(arr.sum())

    def summary(self) -> dict[str, Any]:
        """``{"count", "residues", "min", "max", "mean", "median", "p1" ... "p99"}`` (empty →
        count 0): the median as numpy's (the mean of the two middle lengths for an even count),
        the percentiles by nearest rank (a length some record has)."""
        self._flush()
        if self.n == 0:
            return {"count": 0, "residues": 0}
        nz = np.flatnonzero(self.counts)
        cum = np.cumsum(self.counts)
        out: dict[str, Any] = {
            "count": self.n,
            "residues": self.total,
            "min": int(nz[0]),
            "max": int(nz[-1]),
            "mean": round(self.total / self.n, 2),
        }
        middle = [int(np.searchsorted(cum, k)) for k in ((self.n + 1) // 2, self.n // 2 + 1)]
        both = middle[0] + middle[1]
        out["median"] = both // 2 if both % 2 == 0 else both / 2
        for p in PERCENTILES:
            # nearest-rank percentile: smallest length with at least p% of records at or below
            rank = max(1, int(np.ceil(p / 100 * self.n)))
            out[f"p{p}"] = int(np.searchsorted(cum, rank))
        return out


_VALID = np.zeros(256, dtype=bool)
for _c in STANDARD_AMINO_ACIDS + EXTRA_RESIDUES:
    _VALID[ord(_c)] = True


def fasta_stats(paths: str | os.PathLike | Sequence[str | os.PathLike], progress: bool = False):
    """Statistics of one or more FASTA files (never fails on invalid residues; reports them).

    Returns a JSON-ready dict: files (path, compression, sha256, bytes), records, residues,
    lengths (min/max/mean/percentiles), composition (letter → count, uppercase), invalid
    characters (char → records containing it), lowercase records, nucleotide-like records
    (DNA/RNA given as protein), header kinds, duplicate ids, identical sequences (records
    whose sequence, read as training reads it, an earlier record has: two strains' copies
    under two ids).
    """
    from protein_performer.data.encoding import (
        NUCLEOTIDE_LETTERS,
        NUCLEOTIDE_MIN_LENGTH,
        NUCLEOTIDE_SHARE,
    )
    from protein_performer.data.fasta import FastaReader
    from protein_performer.utils.progress import progress as progress_bar

    _NUCLEOTIDE_BYTES = np.frombuffer(NUCLEOTIDE_LETTERS.encode(), dtype=np.uint8)

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    lengths = LengthHistogram()
    dups, same_sequence = DuplicateFinder(), DuplicateFinder()
    byte_counts = np.zeros(256, dtype=np.int64)
    invalid_records: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    lowercase = stop_stripped = nucleotide_like = no_residues = 0
    files = []
    t0 = time.perf_counter()
    total_bytes = 0
    with progress_bar(
        desc="stats", unit="record", enabled=progress, leave=True, unit_scale=True
    ) as bar:
        for path in paths:
            reader = FastaReader(path, allow_empty_sequence=True)  # counted, not refused
            for rec in reader:
                seq = rec.sequence
                if not seq.isalnum():
                    seq = "".join(seq.split())  # whitespace is ignored, as when encoding
                if seq.endswith("*"):
                    seq = seq[:-1]
                    stop_stripped += 1
                raw = seq.encode("utf-8", errors="surrogateescape")
                no_residues += not raw  # no sequence, or only a stop '*': training refuses it
                if raw.upper() != raw:
                    lowercase += 1
                    raw = raw.upper()
                counts = np.bincount(np.frombuffer(raw, dtype=np.uint8), minlength=256)
                byte_counts += counts
                bad = np.flatnonzero((counts > 0) & ~_VALID)
                for b in bad:
                    invalid_records[chr(b) if b < 128 else f"\\x{b:02x}"] += 1
                lengths.add(len(raw))
                if len(raw) >= NUCLEOTIDE_MIN_LENGTH:
                    nuc = int(counts[_NUCLEOTIDE_BYTES].sum())
                    if nuc >= NUCLEOTIDE_SHARE * len(raw):
                        nucleotide_like += 1
                kinds[rec.header.kind] += 1
                dups.add(rec.id, rec.number, str(path))
                if raw:  # records without residues are counted above, not as copies
                    same_sequence.add(raw, rec.number, str(path))
                bar.update(1)
            total_bytes += reader.size
            files.append(
                {
                    "path": str(path),
                    "compression": reader.compression,
                    "bytes": reader.size,
                    "sha256": reader.sha256,
                    "records": reader.records_read,
                    "comment_lines": reader.comment_lines,
                }
            )
    elapsed = time.perf_counter() - t0
    summary = lengths.summary()
    composition = {
        chr(b): int(byte_counts[b]) for b in range(256) if _VALID[b] and byte_counts[b] > 0
    }
    return {
        "files": files,
        "records": summary["count"],
        "residues": summary["residues"],
        "lengths": {k: v for k, v in summary.items() if k not in ("count", "residues")},
        "composition": composition,
        "nonstandard_residues": {c: composition[c] for c in EXTRA_RESIDUES if c in composition},
        "invalid_characters": dict(sorted(invalid_records.items())),
        "records_with_lowercase": lowercase,
        "records_with_stop": stop_stripped,
        "records_without_residues": no_residues,
        # records of >= 30 letters that are >= 90% A/C/G/T/U/N: DNA/RNA, not protein
        "nucleotide_like_records": nucleotide_like,
        "header_kinds": dict(kinds),
        "duplicate_ids": dups.result(),
        "identical_sequences": same_sequence.result(),
        "elapsed_s": round(elapsed, 3),
        "records_per_s": round(summary["count"] / elapsed, 1) if elapsed > 0 else None,
        "mb_per_s": round(total_bytes / 1e6 / elapsed, 2) if elapsed > 0 else None,
    }
