"""Random-access collections of encoded proteins ("sources") that datasets read from.

A source holds residue ids only (``uint8``, no specials) in one flat array plus ``int64``
offsets, in memory (from FASTA) or memory-mapped (from preprocessed shards): record ``i`` is
``tokens[offsets[i]:offsets[i + 1]]``.
"""

from __future__ import annotations

import array
import itertools
import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from protein_performer.data.alphabet import Alphabet, InvalidPolicy, default_alphabet
from protein_performer.data.digests import digest64
from protein_performer.data.encoding import EncodeCounts, iter_encoded
from protein_performer.data.fasta import FastaReader, FastaRecord, PathLike
from protein_performer.data.splits import SPLITS, SplitAssigner
from protein_performer.errors import DataError
from protein_performer.utils.progress import progress as progress_bar


class FlatSource:
    """Proteins stored as a flat token array + offsets.

    Args:
        tokens: ``(N,)`` uint8 residue ids of all records concatenated (may be a memmap).
        offsets: ``(n + 1,)`` int64, ``offsets[0] == 0`` and ``offsets[-1] == N``.
        ids: record ids (length ``n``) or None.
        alphabet: the alphabet the ids were encoded with.
    """

    def __init__(
        self,
        tokens: np.ndarray,
        offsets: np.ndarray,
        ids: Sequence[str] | None = None,
        alphabet: Alphabet | None = None,
    ) -> None:
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0:
            raise ValueError("offsets must be 1-D, start at 0")
        if offsets[-1] != len(tokens):
            raise ValueError(f"offsets end at {offsets[-1]} but there are {len(tokens)} tokens")
        if ids is not None and len(ids) != len(offsets) - 1:
            raise ValueError("ids and offsets disagree on the number of records")
        self.tokens = tokens
        self.offsets = offsets
        self.ids = ids
        self.alphabet = alphabet or default_alphabet()
        self.lengths: np.ndarray = np.diff(offsets)
        # what reading FASTA input skipped or replaced (an EncodeCounts), when known
        self.encode_counts: EncodeCounts | None = None
        # (n, 2) bool for pieces of longer proteins (split_long_records): residues left out
        # before / after each; None: every record is a whole protein
        self.cut: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        """Residue ids of record ``i``, ``(length,)`` uint8."""
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return np.asarray(self.tokens[self.offsets[i] : self.offsets[i + 1]])

    def record_id(self, i: int) -> str:
        return self.ids[i] if self.ids is not None else str(i)

    @property
    def n_residues(self) -> int:
        return int(self.offsets[-1])

    @classmethod
    def from_arrays(
        cls,
        sequences: Sequence[np.ndarray],
        ids: Sequence[str] | None = None,
        alphabet: Alphabet | None = None,
    ) -> FlatSource:
        """Build an in-memory source from per-record ``uint8`` id arrays."""
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = (
            np.concatenate([np.asarray(s, dtype=np.uint8) for s in sequences])
            if len(sequences)
            else np.zeros(0, dtype=np.uint8)
        )
        return cls(tokens, offsets, list(ids) if ids is not None else None, alphabet)

    @classmethod
    def from_strings(
        cls,
        sequences: Sequence[str],
        ids: Sequence[str] | None = None,
        alphabet: Alphabet | None = None,
    ) -> FlatSource:
        """Build an in-memory source from residue strings (invalid letters raise)."""
        alphabet = alphabet or default_alphabet()
        return cls.from_arrays([alphabet.encode(s) for s in sequences], ids, alphabet)


def select_records(source: FlatSource, indices: Sequence[int] | np.ndarray) -> FlatSource:
    """A new in-memory source holding records ``indices`` of ``source``, in that order."""
    indices = np.asarray(indices, dtype=np.int64)
    ids = None if source.ids is None else [source.ids[int(i)] for i in indices]
    out = FlatSource.from_arrays([source[int(i)] for i in indices], ids, source.alphabet)
    out.encode_counts = getattr(source, "encode_counts", None)
    return out


def split_long_records(source: FlatSource, max_residues: int) -> FlatSource:
    """Each record longer than ``max_residues`` cut into the fewest near-equal consecutive
    pieces that fit (ids ``ID[start-end]``, 1-based, inclusive), so that a cropping dataset
    sees every residue exactly once. Shorter records are kept as they are."""
    if max_residues < 1:
        raise ValueError(f"max_residues must be >= 1, got {max_residues}")
    pieces: list[np.ndarray] = []
    ids: list[str] = []
    cut: list[tuple[bool, bool]] = []
    for i in range(len(source)):
        seq = source[i]
        n = len(seq)
        k = max(1, -(-n // max_residues))
        bounds = np.linspace(0, n, k + 1).round().astype(int)
        for a, b in itertools.pairwise(bounds.tolist()):
            pieces.append(seq[a:b])
            ids.append(source.record_id(i) if k == 1 else f"{source.record_id(i)}[{a + 1}-{b}]")
            cut.append((a > 0, b < n))
    out = FlatSource.from_arrays(pieces, ids, source.alphabet)
    out.encode_counts = getattr(source, "encode_counts", None)
    # (n, 2): each piece leaves residues of its protein out before / after it
    out.cut = np.array(cut, dtype=bool).reshape(-1, 2)
    return out


def split_key(
    rec: FastaRecord, cluster_of: Mapping[str, str] | None, path: PathLike | None = None
) -> str:
    """The key hashed into a split: the record's cluster from ``cluster_of`` when given, else
    its header's key (UniRef cluster id, UniProtKB accession without isoform suffix, id)."""
    if cluster_of is None:
        first = rec.title.strip().partition(" ")[0]
        if "\t" in first:
            # an id that ends at a tab was read up to the first space before (2026-12-05):
            # that key stays the hashed one, so a run's split (and evaluate split= of its
            # checkpoints) is what it was; such records are not grouped by accession
            return first
        return rec.header.split_key
    try:
        return cluster_of[rec.id]
    except KeyError:
        raise DataError(
            f"not in the clusters table ({len(cluster_of):,} records: of other files, or cut "
            "short? cluster the same files with `data cluster`)",
            path=path,
            record=rec.number,
            record_id=rec.id,
        ) from None


def load_fasta_source(
    paths: PathLike | Sequence[PathLike],
    *,
    split: str | None = None,
    fractions: Iterable[float] = (0.9, 0.05, 0.05),
    seed: int = 0,
    policy: InvalidPolicy | str = InvalidPolicy.ERROR,
    max_records: int | None = None,
    alphabet: Alphabet | None = None,
    progress: bool = False,
    strip_gaps: bool = False,
    allow_nucleotide: bool = False,
    cluster_of: Mapping[str, str] | None = None,
    copies_from: str | None = None,
) -> FlatSource:
    """Read FASTA file(s) into an in-memory :class:`FlatSource`.

    Args:
        paths: one path or a list; records are taken in file order.
        split: keep only records hashed into this split (``train``/``val``/``test``), or all.
        fractions: train/val/test fractions for the hash split.
        seed: split seed.
        policy: invalid residue policy (``error`` | ``skip`` | ``replace``).
        max_records: stop after this many records are *read* (before splitting), or None.
        strip_gaps, allow_nucleotide: see :func:`iter_encoded`.
        cluster_of: record id -> cluster id (``data cluster``'s members table): the split
            then hashes the cluster id, so whole clusters land in one split.
        copies_from: with ``split``, another split whose records are only hashed as they go
            by (8 bytes each, no sequence kept): ``source.copies`` then holds the indices of
            the kept records identical to one of them (two strains' copies under two ids).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    alphabet = alphabet or default_alphabet()
    assigner = SplitAssigner(fractions, seed)
    seqs: list = []
    ids: list[str] = []
    counts = EncodeCounts()
    # kept records', copies_from's: 8 bytes each (an array, not a list of int objects)
    digests = (array.array("Q"), array.array("Q"))

    with progress_bar(desc="reading FASTA", unit="record", enabled=progress) as bar:
        for path in paths:
            reader = FastaReader(path)
            encoded = iter_encoded(
                reader,
                alphabet,
                policy,
                counts,
                max_records,
                strip_gaps=strip_gaps,
                allow_nucleotide=allow_nucleotide,
            )
            for rec, toks in encoded:
                bar.update(1)
                part = None if split is None else assigner(split_key(rec, cluster_of, reader.path))
                if split is None or part == split:
                    seqs.append(toks)
                    ids.append(rec.id)
                    if copies_from is not None:
                        digests[0].append(digest64(np.asarray(toks, dtype=np.uint8).tobytes()))
                elif copies_from is not None and part == copies_from:
                    digests[1].append(digest64(np.asarray(toks, dtype=np.uint8).tobytes()))
            if max_records is not None and counts.records_read >= max_records:
                break
    source = FlatSource.from_arrays(seqs, ids, alphabet)
    source.encode_counts = counts
    if copies_from is not None:
        kept, other = (np.frombuffer(d, dtype=np.uint64) for d in digests)
        source.copies = np.flatnonzero(np.isin(kept, other))
    return source
