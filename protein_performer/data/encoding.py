"""Records to token ids: the invalid-residue policy applied record by record, with its counters, and the DNA/RNA check."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from protein_performer.data.alphabet import EMPTY_HINT, Alphabet, InvalidPolicy
from protein_performer.data.fasta import FastaReader, FastaRecord, NucleotideError
from protein_performer.errors import DataError


@dataclass
class EncodeCounts:
    """Counters filled by :func:`iter_encoded` (end up in manifests)."""

    records_read: int = 0
    records_kept: int = 0
    skipped_invalid: int = 0
    records_replaced: int = 0
    residues_replaced: int = 0
    invalid_characters: dict[str, int] = field(default_factory=dict)
    # records with nothing left once gaps / the stop were removed (invalid=skip)
    skipped_empty: int = 0
    # ';' comment lines of the original FASTA format, skipped by the reader
    comment_lines: int = 0
    # the first skipped records (invalid or empty), "ID (file:record N)", for the user to find
    skipped_examples: list[str] = field(default_factory=list)

    def note_skipped(self, reader: FastaReader, rec: FastaRecord) -> None:
        """Keep ``rec`` among :attr:`skipped_examples` (the first :data:`SKIPPED_EXAMPLES`)."""
        if len(self.skipped_examples) < SKIPPED_EXAMPLES:
            where = f"{reader.path.name}:"
            self.skipped_examples.append(f"{rec.id or '(no id)'} ({where}record {rec.number:,})")

    def changes(self) -> str | None:
        """What the invalid-residue policy did, in words, or None when nothing changed."""
        parts = []
        if self.skipped_invalid:
            parts.append(f"{self.skipped_invalid:,} of {self.records_read:,} records skipped")
        if self.skipped_empty:
            empty = "record" if self.skipped_empty == 1 else "records"
            parts.append(f"{self.skipped_empty:,} {empty} with no residues skipped")
        if self.records_replaced:
            had = "record had" if self.records_replaced == 1 else "records had"
            residues = "residue" if self.residues_replaced == 1 else "residues"
            parts.append(
                f"{self.records_replaced:,} {had} {self.residues_replaced:,} {residues} "
                "replaced by X"
            )
        chars = ", ".join(repr(c) for c in sorted(self.invalid_characters))
        text = "; ".join(parts) + (f" (invalid characters: {chars})" if chars and parts else "")
        if self.skipped_examples:
            skipped = self.skipped_invalid + self.skipped_empty
            lead = "skipped" if skipped == len(self.skipped_examples) else "first skipped"
            text += f"; {lead}: {', '.join(self.skipped_examples)}"
        if self.comment_lines:
            lines = "line" if self.comment_lines == 1 else "lines"
            comments = f"{self.comment_lines:,} ';' comment {lines} skipped"
            text = f"{text}; {comments}" if text else comments
        return text or None

    def to_dict(self) -> dict:
        return {
            "records_read": self.records_read,
            "records_kept": self.records_kept,
            "skipped_invalid": self.skipped_invalid,
            "records_replaced": self.records_replaced,
            "residues_replaced": self.residues_replaced,
            "invalid_characters": dict(sorted(self.invalid_characters.items())),
            "skipped_empty": self.skipped_empty,
            "comment_lines": self.comment_lines,
            "skipped_examples": list(self.skipped_examples),
        }


#: Skipped records named by :meth:`EncodeCounts.changes` (the rest are counted).
SKIPPED_EXAMPLES = 3


NUCLEOTIDE_LETTERS = "ACGTUN"


# A record is nucleotide-like when at least this share of its residues are A/C/G/T/U/N over at
# least NUCLEOTIDE_MIN_LENGTH residues. Among 79,170 real proteins of >= 30 residues (14
# reference proteomes) the highest share is 0.70.
NUCLEOTIDE_SHARE = 0.9


NUCLEOTIDE_MIN_LENGTH = 30


NUCLEOTIDE_HINT = "allow_nucleotide=true reads it anyway"


_NUCLEOTIDE_LUT: dict[tuple[str, ...], np.ndarray] = {}


def nucleotide_share(ids: np.ndarray, alphabet: Alphabet) -> float | None:
    """Share of A/C/G/T/U/N among residue ids, or None when too short to tell."""
    if len(ids) < NUCLEOTIDE_MIN_LENGTH:
        return None
    lut = _NUCLEOTIDE_LUT.get(alphabet.tokens)
    if lut is None:  # one boolean per token id, built once per alphabet
        lut = np.zeros(256, dtype=bool)
        lut[[alphabet.index(c) for c in NUCLEOTIDE_LETTERS]] = True
        _NUCLEOTIDE_LUT[alphabet.tokens] = lut
    return np.count_nonzero(lut[ids]) / len(ids)


def iter_encoded(
    reader: FastaReader,
    alphabet: Alphabet,
    policy: InvalidPolicy | str,
    counts: EncodeCounts,
    max_records: int | None = None,
    *,
    strip_gaps: bool = False,
    allow_nucleotide: bool = False,
) -> Iterator[tuple[FastaRecord, object]]:
    """Yield ``(record, uint8 ids)`` for kept records, applying the invalid-residue policy.

    ``max_records``: stop once ``counts.records_read`` reaches it (skipped records count), so
    no record past the limit is read or counted. ``strip_gaps``: drop alignment gaps first. A
    record that looks like DNA/RNA (see :func:`nucleotide_share`) is an error unless
    ``allow_nucleotide``.
    """
    policy = InvalidPolicy.parse(policy)
    # a record with no sequence is the policy's to judge (skipped and counted, or refused)
    reader.allow_empty_sequence = True
    try:
        for rec in reader:
            if max_records is not None and counts.records_read >= max_records:
                return
            counts.records_read += 1
            try:
                res = alphabet.clean_encode(
                    rec.sequence,
                    policy,
                    path=reader.path,
                    record=rec.number,
                    record_id=rec.id,
                    strip_gaps=strip_gaps,
                )
            except DataError as e:
                raise reader.explain(e) from None
            if res.ids is not None and not allow_nucleotide:
                share = nucleotide_share(res.ids, alphabet)
                if share is not None and share >= NUCLEOTIDE_SHARE:
                    raise NucleotideError(
                        f"looks like DNA/RNA, not protein ({100 * share:.0f}% of its "
                        f"{len(res.ids):,} letters are A/C/G/T/U/N); {NUCLEOTIDE_HINT}",
                        path=reader.path,
                        record=rec.number,
                        record_id=rec.id,
                    )
            for ch in res.invalid_chars:
                counts.invalid_characters[ch] = counts.invalid_characters.get(ch, 0) + 1
            if res.ids is None:
                counts.skipped_invalid += 1
                counts.note_skipped(reader, rec)
                continue
            if len(res.ids) == 0:
                removed = " and ".join(
                    word
                    for word, found in (
                        ("gaps", strip_gaps and any(g in rec.sequence for g in "-.")),
                        ("the stop '*'", "*" in rec.sequence),
                    )
                    if found
                )
                if policy is InvalidPolicy.SKIP:  # nothing left to learn from: skipped, and counted
                    counts.skipped_empty += 1
                    counts.note_skipped(reader, rec)
                    continue
                problem = (
                    f"sequence is empty after removing {removed or 'what it held'}"
                    if rec.sequence.strip()
                    else "header has no sequence"
                )
                raise DataError(
                    f"{problem} ({EMPTY_HINT})",
                    path=reader.path,
                    record=rec.number,
                    record_id=rec.id,
                )
            if res.n_replaced:
                counts.records_replaced += 1
                counts.residues_replaced += res.n_replaced
            counts.records_kept += 1
            yield rec, res.ids
    finally:  # the reader's ';' comment lines, said with the rest
        counts.comment_lines += reader.comment_lines
