"""Random-access collections of encoded proteins ("sources") that datasets read from.

A source holds residue ids only (``uint8``, no specials) in one flat array plus ``int64``
offsets, in memory (from FASTA) or memory-mapped (from preprocessed shards): record ``i`` is
``tokens[offsets[i]:offsets[i + 1]]``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from protein_performer.data.alphabet import Alphabet, default_alphabet

if TYPE_CHECKING:  # fasta.py imports this module
    from protein_performer.data.fasta import EncodeCounts


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
