"""Each protein's homologs from a ``data search`` hit table, as training partners.

``read_hit_partners(path, ids)`` reads ``hits.tsv`` (:data:`~protein_performer.data.search.
TSV_COLUMNS`) of a search of a set of proteins against themselves and keeps, for every record
of ``ids`` (a training split, say), its hits whose target is also one of ``ids``: a hit into
another split is dropped, so rows built from the table never hold a held-out protein. Each hit
keeps the target's written region (``region_start``-``region_end``, the aligned part ± the
search's margin), so a partner looks like a row of an alignment with its gaps removed.

The table is held in flat arrays (CSR by query, hits in the table's order: best first), so a
search of 80,000 proteins with 32 hits each costs about 30 MB in every data-loader worker.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from protein_performer.errors import DataError

#: The file of a search output this reads.
HITS_TABLE = "hits.tsv"
_NEEDED = ("query", "target", "region_start", "region_end")


@dataclass
class HitPartners:
    """Hits of records ``0..n-1`` among themselves: the hits of record ``i`` are
    ``offsets[i]:offsets[i+1]`` of ``target`` (record indices), ``start`` / ``end`` (0-based,
    end exclusive: the target's residues ``[start, end)``), best first."""

    offsets: np.ndarray  # (n + 1,) int64
    target: np.ndarray  # (m,) int64
    start: np.ndarray  # (m,) int64
    end: np.ndarray  # (m,) int64
    read: int = 0  # rows of the table
    dropped: int = 0  # rows whose query or target is not one of ids (another split)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def count(self, i: int) -> int:
        """How many hits record ``i`` has."""
        return int(self.offsets[i + 1] - self.offsets[i])

    def counts(self) -> np.ndarray:
        """``(n,)`` int64: hits per record."""
        return np.diff(self.offsets)

    def cluster_weights(self, group_of: np.ndarray) -> np.ndarray:
        """``(m,)`` float64: each hit's sampling weight, 1 / how many of its query's hits fall
        in the target's group (a cluster at 50 % identity): a family with many close members
        counts as one, as PoET samples an alignment by its UniRef50 clusters."""
        if len(self.target) == 0:
            return np.zeros(0)
        query = np.repeat(np.arange(len(self)), self.counts())
        groups = np.asarray(group_of, dtype=np.int64)[self.target]
        pair = query * (int(groups.max()) + 1) + groups
        _, inverse, sizes = np.unique(pair, return_inverse=True, return_counts=True)
        return 1.0 / sizes[inverse]

    def longest(self) -> np.ndarray:
        """``(n,)`` int64: each record's longest hit region (0 for none)."""
        out = np.zeros(len(self), dtype=np.int64)
        lengths = self.end - self.start
        has = self.counts() > 0
        if has.any():
            out[has] = np.maximum.reduceat(lengths, self.offsets[:-1][has])
        return out


def hit_table_path(path: os.PathLike[str] | str) -> Path:
    """The ``hits.tsv`` that ``path`` names (a search output directory or the file itself);
    a one-line :class:`DataError` when there is none."""
    p = Path(path)
    if p.is_dir():
        p = p / HITS_TABLE
    if not p.is_file():
        raise DataError(
            "no hit table here: give a `data search` output directory or its hits.tsv",
            path=p,
        )
    return p


def read_hit_partners(path: os.PathLike[str] | str, ids: Sequence[str]) -> HitPartners:
    """The hits of ``path`` (a search output directory or its ``hits.tsv``) between records
    of ``ids``, as :class:`HitPartners` indexed by position in ``ids``.

    A hit of a query to itself, a repeated (query, target) pair and a region outside the
    target are dropped or refused: the last is a one-line :class:`DataError` naming the file
    and line (the table does not belong to these proteins), as is a missing column."""
    table = hit_table_path(path)
    index = {rid: i for i, rid in enumerate(ids)}
    rows: list[tuple[int, int, int, int]] = []
    read = dropped = 0
    with open(table, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader, None)
        if header is None:
            raise DataError("empty hit table", path=table)
        missing = [c for c in _NEEDED if c not in header]
        if missing:
            raise DataError(
                f"line 1: not a search hit table: no column {', '.join(missing)}", path=table
            )
        cols = [header.index(c) for c in _NEEDED]
        for line, fields in enumerate(reader, start=2):
            if not fields:
                continue
            read += 1
            try:
                q, t, first, last = (fields[c] for c in cols)
                first_i, last_i = int(first), int(last)
            except (IndexError, ValueError):
                raise DataError(
                    f"line {line}: malformed row (columns missing or a region that is not two "
                    "numbers)",
                    path=table,
                ) from None
            qi, ti = index.get(q), index.get(t)
            if qi is None or ti is None or qi == ti:
                dropped += 1
                continue
            if not 1 <= first_i <= last_i:
                raise DataError(f"line {line}: region {first}-{last} of {t} is empty", path=table)
            rows.append((qi, ti, first_i - 1, last_i))
    return _partners_from_rows(rows, len(index), table, read, dropped)


def _partners_from_rows(
    rows: list[tuple[int, int, int, int]], n: int, table: Path, read: int, dropped: int
) -> HitPartners:
    arr = np.asarray(rows, dtype=np.int64) if rows else np.zeros((0, 4), dtype=np.int64)
    # stable by query: each query's hits stay in the table's order (best first)
    order = np.argsort(arr[:, 0], kind="stable")
    arr = arr[order]
    # a pair listed twice (two alignments of one target) keeps its first, best row
    if len(arr):
        _, first = np.unique(arr[:, 0] * n + arr[:, 1], return_index=True)
        keep = np.zeros(len(arr), dtype=bool)
        keep[first] = True
        dropped += int((~keep).sum())
        arr = arr[keep]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(arr[:, 0], minlength=n), out=offsets[1:])
    return HitPartners(
        offsets, arr[:, 1].copy(), arr[:, 2].copy(), arr[:, 3].copy(), read=read, dropped=dropped
    )


def check_regions(hits: HitPartners, lengths: np.ndarray, path: os.PathLike[str] | str) -> None:
    """A one-line :class:`DataError` when a hit's region runs past its target's end: the
    table was written for other sequences under the same ids."""
    if len(hits.target) == 0:
        return
    bad = np.nonzero(hits.end > np.asarray(lengths)[hits.target])[0]
    if len(bad):
        k = int(bad[0])
        raise DataError(
            f"{len(bad):,} hit region(s) end past their target (first: a region ending at "
            f"{int(hits.end[k])} in a protein of {int(lengths[hits.target[k]])} residues): the "
            "table was written for other sequences under these ids",
            path=path,
        )


__all__ = ["HITS_TABLE", "HitPartners", "check_regions", "hit_table_path", "read_hit_partners"]
