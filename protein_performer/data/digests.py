"""Digests of sequences and ids, and exact-duplicate detection from them (what copy and duplicate checks compare)."""

from __future__ import annotations

import bisect
import hashlib
from typing import Any

import numpy as np


def digest64(data: bytes) -> int:
    """A 64-bit digest (blake2b) of ``data``: what duplicate and copy checks compare."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class DuplicateFinder:
    """Exact duplicate detection (of ids, or of sequences) from 64-bit digests, reported after
    the pass (12 bytes a record: a digest and a record number; files are kept as runs of
    consecutive records)."""

    def __init__(self) -> None:
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self._digests: list[int] = []
        self._records: list[int] = []
        self._file_starts: list[int] = []  # position of each file's first record
        self._file_names: list[str] = []
        self._added = 0

    def add(self, key: str | bytes, record: int | None = None, file: str | None = None) -> None:
        """``key``: the id (or any bytes, e.g. a sequence); ``record``: its 1-based number in
        ``file`` (default: the position
        among the :meth:`add` calls; pass it when some records are not added, e.g. skipped
        invalid ones, or when records come from several files)."""
        if file is not None and (not self._file_names or self._file_names[-1] != file):
            self._file_starts.append(self._added)
            self._file_names.append(file)
        self._added += 1
        self._digests.append(digest64(key if isinstance(key, bytes) else key.encode()))
        self._records.append(self._added if record is None else record)
        if len(self._digests) >= 65536:
            self._flush()

    def _flush(self) -> None:
        if self._digests:
            digests = np.asarray(self._digests, dtype=np.uint64)
            self._chunks.append((digests, np.asarray(self._records, dtype=np.uint32)))
            self._digests, self._records = [], []

    def _file(self, position: int) -> str | None:
        if not self._file_starts or position < self._file_starts[0]:
            return None
        return self._file_names[bisect.bisect_right(self._file_starts, position) - 1]

    def result(self, max_examples: int = 10) -> dict[str, Any]:
        """``{"count": records whose id occurred earlier, "examples": [{record, first}, ...]}``
        (record numbers as given to :meth:`add`; with files, ``file`` and ``first_file``
        too), the earliest repeats first."""
        self._flush()
        if not self._chunks:
            return {"count": 0, "examples": []}
        digests = np.concatenate([c[0] for c in self._chunks])
        records = np.concatenate([c[1] for c in self._chunks])
        order = np.argsort(digests, kind="stable")
        s = digests[order]
        dup = np.flatnonzero(s[1:] == s[:-1]) + 1  # positions (in sorted order) of repeats
        starts = np.searchsorted(s, s[dup], side="left")  # first occurrence of each repeat
        repeat, first = order[dup], order[starts]  # positions in the order of add calls
        examples = []
        for k in np.argsort(repeat, kind="stable")[:max_examples]:
            i, j = int(repeat[k]), int(first[k])
            example: dict[str, Any] = {"record": int(records[i]), "first": int(records[j])}
            if self._file(i) is not None:
                example.update(file=self._file(i), first_file=self._file(j))
            examples.append(example)
        return {"count": len(dup), "examples": examples}
