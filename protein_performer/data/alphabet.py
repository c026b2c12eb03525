"""Residues ⇄ token ids. The vocabulary is versioned and stored with every shard and checkpoint.

Token layout (version ``pp-aa-v1``)::

    0 <pad>  1 <cls>  2 <eos>  3 <mask>  4 <unk>  5 <sep>
    6..25   the 20 standard amino acids  ACDEFGHIKLMNPQRSTVWY
    26..30  ambiguous / rare letters     X B Z U O

Sequences are cleaned before encoding: lowercase is uppercased, one trailing ``*`` (stop) is
stripped, whitespace is ignored; every other character that is not a residue letter (digits,
``#``, alignment gaps ``-``/``.``, an internal ``*``) is invalid and handled by the
:class:`InvalidPolicy` (``error``, ``skip`` or ``replace`` with ``X``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from protein_performer.errors import DataError

ALPHABET_VERSION = "pp-aa-v1"
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<cls>", "<eos>", "<mask>", "<unk>", "<sep>")
STANDARD_AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
EXTRA_RESIDUES = "XBZUO"

_INVALID = 255


class InvalidPolicy(str, enum.Enum):
    """What to do with a record that holds a character that is not a residue letter."""

    ERROR = "error"
    SKIP = "skip"
    REPLACE = "replace"

    @classmethod
    def parse(cls, value: str | InvalidPolicy) -> InvalidPolicy:
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(p.value for p in cls)
            raise ValueError(
                f"invalid residue policy {value!r}; choose one of: {choices}"
            ) from None


# Each command replaces this placeholder with its own key (data.invalid=, invalid=, --invalid).
INVALID_HINT = "invalid=skip drops such records, invalid=replace maps the character to X"
# The same advice for a sequence given as a string from Python, where no such option exists.
STRING_HINT = "write X for an unknown residue, or remove the character"
#: What an empty record's error offers (a command without ``invalid=`` leaves it out).
EMPTY_HINT = "invalid=skip drops such records"


class InvalidResidueError(DataError):
    """A sequence holds a character that is not a residue letter. ``residue_problem``: the
    problem without the hints at options (for a command that has none of them)."""

    residue_problem: str | None = None


@dataclass(frozen=True)
class CleanResult:
    """Outcome of :meth:`Alphabet.clean_encode`: ``ids`` is None when the record is skipped."""

    ids: np.ndarray | None
    n_replaced: int = 0
    invalid_chars: str = ""


def _first_difference(stored: tuple[str, ...], here: tuple[str, ...]) -> str:
    """Where two token lists part (``""`` when they are equal: only the version differs)."""
    for i, (a, b) in enumerate(zip(stored, here, strict=False)):
        if a != b:
            return f"; token {i} is {a!r} there, {b!r} here"
    if len(stored) != len(here):
        longer, name = (stored, "there") if len(stored) > len(here) else (here, "here")
        extra = len(longer) - min(len(stored), len(here))
        return f"; {extra} more token(s) {name}, from {longer[min(len(stored), len(here))]!r}"
    return ""


class Alphabet:
    """Token vocabulary. Ids fit in ``uint8``; residue ids are contiguous."""

    def __init__(
        self,
        specials: Iterable[str] = SPECIAL_TOKENS,
        residues: str = STANDARD_AMINO_ACIDS + EXTRA_RESIDUES,
        version: str = ALPHABET_VERSION,
    ) -> None:
        self.specials = tuple(specials)
        self.residues = residues
        self.version = version
        self.tokens: tuple[str, ...] = self.specials + tuple(residues)
        if len(self.tokens) >= _INVALID:
            raise ValueError("alphabet too large for uint8 token ids")
        self._index = {tok: i for i, tok in enumerate(self.tokens)}
        for name in ("<pad>", "<cls>", "<eos>", "<mask>", "<unk>"):
            if name not in self._index:
                raise ValueError(f"alphabet lacks required special token {name}")
        self.pad_idx = self._index["<pad>"]
        self.cls_idx = self._index["<cls>"]
        self.eos_idx = self._index["<eos>"]
        self.mask_idx = self._index["<mask>"]
        self.unk_idx = self._index["<unk>"]
        self.sep_idx = self._index.get("<sep>", self.eos_idx)
        self.x_idx = self._index.get("X", self.unk_idx)
        n_spec = len(self.specials)
        self.residue_ids = np.arange(n_spec, n_spec + len(residues), dtype=np.int64)
        self.standard_ids = np.array(
            [self._index[a] for a in STANDARD_AMINO_ACIDS if a in self._index], dtype=np.int64
        )
        # byte -> token id lookup table; lowercase maps like uppercase
        lut = np.full(256, _INVALID, dtype=np.uint8)
        for aa in residues:
            lut[ord(aa)] = self._index[aa]
            lut[ord(aa.lower())] = self._index[aa]
        self._lut = lut
        self._is_special = np.zeros(len(self.tokens), dtype=bool)
        self._is_special[:n_spec] = True

    # ---- basic properties -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tokens)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Alphabet) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.version, self.tokens))

    def __repr__(self) -> str:
        return f"Alphabet(version={self.version!r}, size={len(self)})"

    def index(self, token: str) -> int:
        """Id of a token string (``"<mask>"`` or a residue letter)."""
        return self._index[token]

    def special_mask(self, ids: np.ndarray) -> np.ndarray:
        """Boolean array, True where ``ids`` are special tokens (pad, cls, eos, mask, ...)."""
        return self._is_special[np.asarray(ids)]

    # ---- serialisation ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "specials": list(self.specials), "residues": self.residues}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Alphabet:
        return cls(specials=d["specials"], residues=d["residues"], version=d["version"])

    def check_compatible(self, d: Mapping[str, Any], where: str = "checkpoint") -> None:
        """Raise a clear error when a stored alphabet differs from this one."""
        other = Alphabet.from_dict(d)
        if other != self:
            raise DataError(
                f"{where} was built with alphabet {other.version} "
                f"({len(other)} tokens) but this is {self.version} ({len(self)} tokens)"
                f"{_first_difference(other.tokens, self.tokens)}"
            )

    # ---- encoding -----------------------------------------------------------------------
    def clean_encode(
        self,
        sequence: str,
        policy: InvalidPolicy | str = InvalidPolicy.ERROR,
        *,
        path: object | None = None,
        record: int | None = None,
        record_id: str | None = None,
        strip_gaps: bool = False,
        hint: str = INVALID_HINT,
    ) -> CleanResult:
        """Validate and encode one raw sequence to ``uint8`` residue ids (no specials).

        ``strip_gaps`` removes alignment gaps (``-`` and ``.``) first, so aligned FASTA reads
        as its unaligned sequences. Raises :class:`InvalidResidueError` (policy ``error``)
        naming the file, record, 1-based position and character of the first invalid residue,
        and ``hint`` (what to do about it: the data options by default, :data:`STRING_HINT`
        for a sequence given as a string).
        """
        policy = InvalidPolicy.parse(policy)
        sequence = "".join(sequence.split()) if not sequence.isalnum() else sequence
        if strip_gaps:
            sequence = sequence.replace("-", "").replace(".", "")
        if sequence.endswith("*"):
            sequence = sequence[:-1]
        if sequence.isascii():
            codes = np.frombuffer(sequence.encode("ascii"), dtype=np.uint8)
            ids = self._lut[codes]
        else:  # one position per code point, so replacement keeps the length
            codes = np.frombuffer(sequence.encode("utf-32-le", "surrogatepass"), dtype="<u4")
            ids = np.where(codes < 256, self._lut[np.minimum(codes, 255)], _INVALID).astype(
                np.uint8
            )
        bad = ids == _INVALID
        if not bad.any():
            return CleanResult(ids)
        bad_pos = np.flatnonzero(bad)
        chars = "".join(sorted({chr(int(codes[p])) for p in bad_pos}))
        if policy is InvalidPolicy.ERROR:
            p = int(bad_pos[0])
            ch = chr(int(codes[p]))
            gap = " (an alignment gap: strip_gaps removes them)" if ch in "-." else ""
            err = InvalidResidueError(
                f"invalid residue {ch!r} at position {p + 1}{gap}; {hint}",
                path=path,
                record=record,
                record_id=record_id,
            )
            err.residue_problem = f"invalid residue {ch!r} at position {p + 1}"
            raise err
        if policy is InvalidPolicy.SKIP:
            return CleanResult(None, 0, chars)
        ids = ids.copy()
        ids[bad] = self.x_idx
        return CleanResult(ids, int(bad.sum()), chars)

    def encode(self, sequence: str) -> np.ndarray:
        """Encode a residue string to ``uint8`` ids (no specials); invalid letters raise."""
        result = self.clean_encode(sequence, InvalidPolicy.ERROR, hint=STRING_HINT)
        assert result.ids is not None
        return result.ids

    def decode(self, ids: Iterable[int] | np.ndarray, *, keep_specials: bool = False) -> str:
        """Ids back to a string. Specials are dropped unless ``keep_specials``."""
        out = []
        for i in np.asarray(ids, dtype=np.int64).ravel().tolist():
            tok = self.tokens[i]
            if len(tok) == 1 or keep_specials:
                out.append(tok)
        return "".join(out)


_DEFAULT: Alphabet | None = None


def default_alphabet() -> Alphabet:
    """The project's standard alphabet (``pp-aa-v1``), shared instance."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Alphabet()
    return _DEFAULT
