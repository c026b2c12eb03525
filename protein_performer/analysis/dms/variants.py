"""Variants of a wild type as deep mutational scans write them: substitutions (``H24C``,
``H24C:P25A``, 1-based positions numbered from ``offset``), whole mutant sequences, indels, and
the checks that a variant fits its wild type."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS
from protein_performer.errors import DataError

GAPS = "-."
GAP_HINT = (
    " (an alignment gap: give the sequence unaligned, without - or .; a deletion as the "
    "sequence without its residues)"
)
#: How scan files name the unmutated sequence (scored 0).
WILD_TYPE_NAMES = ("wt", "_wt", "wildtype", "wild-type", "wild_type")
_SITE = re.compile(r"([A-Za-z])(-?\d+)([A-Za-z])")


@dataclass(frozen=True)
class Substitution:
    """One site: 0-based ``index`` into the sequence, wild-type and mutant letters."""

    index: int
    wt: str
    mt: str


@dataclass(frozen=True)
class Indel:
    """A variant given as its whole ``sequence``, of another length than the wild type (an
    insertion, a deletion or both): scored by :data:`WHOLE_SEQUENCE_METHODS` only."""

    sequence: str


#: A variant: the substitutions it makes (``[]``: the wild type), or an indel.
Variant = list[Substitution] | Indel


def clean_sequence(text: str) -> str:
    """A sequence read as a FASTA record's is: whitespace removed, upper case, a final ``*``
    (a stop) dropped."""
    return "".join(str(text).split()).upper().removesuffix("*")


def variant_from_sequence(sequence: str, wild_type: str) -> Variant:
    """A variant's whole ``sequence`` against ``wild_type`` (both read by
    :func:`clean_sequence`): the substitutions where it differs when the lengths are equal,
    else an :class:`Indel`. DataError (a ValueError) for an empty sequence or one with a character that is
    not a letter (a gap ``-``, a digit, an inner ``*``)."""
    seq, wt = clean_sequence(sequence), clean_sequence(wild_type)
    if not seq:
        raise DataError("an empty sequence")
    bad = next((c for c in seq if not ("A" <= c <= "Z")), None)
    if bad == "*":  # an inner stop: a nonsense variant (a final one is dropped above)
        raise DataError(
            f"'*' at position {seq.index(bad) + 1} is a stop (nonsense) variant: scores cover "
            "substitutions between the 20 amino acids (and indels)"
        )
    if bad is not None:
        raise DataError(
            f"cannot read sequence: {bad!r} at position {seq.index(bad) + 1} is not a residue "
            f"letter{GAP_HINT if bad in GAPS else ''}"
        )
    if len(seq) != len(wt):
        return Indel(seq)
    return [Substitution(i, w, m) for i, (w, m) in enumerate(zip(wt, seq, strict=True)) if w != m]


def unlike_wild_type(variant: Variant, wild_type: str) -> str | None:
    """Why a variant given as a whole sequence cannot be the wild type's (a wrong record or
    protein): fewer than half of the wild type's residues kept (equal lengths: at the same
    positions; an indel: at its two ends, where a few insertions or deletions leave them).
    None when it can be. For substitutions written as notation this is the wild-type check's
    job, so it only applies to variants read from sequences."""
    n = len(wild_type)
    if isinstance(variant, Indel):
        seq = variant.sequence
        short = min(len(seq), n)
        prefix = next((i for i in range(short) if seq[i] != wild_type[i]), short)
        rest = short - prefix
        suffix = next((i for i in range(rest) if seq[-1 - i] != wild_type[-1 - i]), rest)
        kept, what = prefix + suffix, f"{len(seq):,} residues"
    else:
        kept, what = n - len(variant), f"{len(variant):,} substitutions"
    if kept * 2 >= n:
        return None
    return (
        f"a whole sequence unlike the wild type ({what}; {kept:,} of its {n:,} residues kept): "
        "a variant of another protein (wrong record= or sequence=?)"
    )


def whole_sequence_problem(
    variant: Variant, wild_type: str, window: int | None, whole: bool = True
) -> str | None:
    """Why a variant cannot be scored as the wild type's (None: it can): given as a whole
    sequence (``whole``), one :func:`unlike_wild_type`; an indel longer than ``window``
    residues (the whole-sequence methods need it in the model's window)."""
    problem = unlike_wild_type(variant, wild_type) if whole else None
    long = isinstance(variant, Indel) and window is not None and len(variant.sequence) > window
    if problem is None and long:
        problem = (
            f"an indel of {len(variant.sequence):,} residues, longer than the model's "
            f"window ({window:,} residues)"
        )
    return problem


def looks_like_sequence(text: str, wild_type: str) -> bool:
    """Whether a mutant field holds a whole sequence (as ProteinGym's indel files do) rather
    than a notation: letters only and at least ``max(10, len(wild_type) // 2)`` of them, so a
    word (``WT``, ``deletion``) is not read as a protein."""
    seq = clean_sequence(text)
    return seq.isalpha() and seq.isascii() and len(seq) >= max(10, len(wild_type) // 2)


def parse_variant(text: str, wild_type: str, offset: int = 1) -> Variant:
    """A mutant field: a notation (:func:`parse_mutant`) or a whole sequence
    (:func:`variant_from_sequence`, when :func:`looks_like_sequence`, or would be without its
    alignment gaps: those are refused, with what to do)."""
    if str(text).strip().lower() not in WILD_TYPE_NAMES and looks_like_sequence(text, wild_type):
        return variant_from_sequence(text, wild_type)
    gapless = str(text).translate({ord(g): None for g in GAPS})
    if gapless != str(text) and looks_like_sequence(gapless, wild_type):
        return variant_from_sequence(text, wild_type)  # refused with the gap's position
    return parse_mutant(text, offset)


def parse_mutant(text: str, offset: int = 1) -> list[Substitution]:
    """``"H24C:P25A"`` -> substitutions (0-based index = position − offset); ``WT``/``_wt``
    -> ``[]`` (the wild type). Raises DataError (a ValueError) with the problem in words for anything else
    (empty, malformed, a stop ``*``, a site repeated)."""
    if str(text).strip().lower() in WILD_TYPE_NAMES:
        return []  # the wild type itself: score 0
    sites = []
    parts = str(text).strip().split(":")
    for part in parts:
        m = _SITE.fullmatch(part.strip())
        if not m and part.strip().endswith("*"):
            raise DataError(
                f"{text!r} is a stop (nonsense) mutant: scores cover substitutions between "
                "the 20 amino acids (and indels given as whole sequences)"
            )
        if not m:
            raise DataError(f"cannot read mutation {text!r} (expected e.g. H24C or H24C:P25A)")
        wt, pos, mt = m.group(1).upper(), int(m.group(2)), m.group(3).upper()
        sites.append(Substitution(pos - offset, wt, mt))
    indices = [s.index for s in sites]
    if len(set(indices)) != len(indices):
        raise DataError(f"mutation {text!r} names a position twice")
    return sites


def check_mutants(
    mutants: Sequence[Sequence[Substitution] | Indel], sequence: str, offset: int = 1
) -> list[tuple[int, str]]:
    """``(index, problem)`` for each mutant (0-based, in order) that does not fit the wild-type
    ``sequence``: a position outside it, a wild-type letter that differs, or a mutant letter
    (an indel's letter) that is not one of the 20 amino acids."""
    problems = []
    for i, sites in enumerate(mutants):
        if isinstance(sites, Indel):
            bad = next((c for c in sites.sequence if c not in STANDARD_AMINO_ACIDS), None)
            if bad is not None:
                where = sites.sequence.index(bad) + 1
                problems.append((i, f"indel: {bad!r} at {where} is not one of the 20 amino acids"))
            continue
        for s in sites:
            pos = s.index + offset
            name = f"{s.wt}{pos}{s.mt}"
            if not 0 <= s.index < len(sequence):
                last = len(sequence) + offset - 1
                problems.append((i, f"{name}: position {pos} is outside {offset}-{last}"))
            elif sequence[s.index] != s.wt:
                problems.append((i, f"{name}: the sequence has {sequence[s.index]} at {pos}"))
            elif s.wt not in STANDARD_AMINO_ACIDS:
                problems.append((i, f"{name}: wild type {s.wt!r} is not one of the 20 amino acids"))
            elif s.mt not in STANDARD_AMINO_ACIDS:
                problems.append((i, f"{name}: {s.mt!r} is not one of the 20 amino acids"))
            else:
                continue
            break
    return problems


def misfit_error(problems: Sequence[tuple[int, str]]) -> DataError:
    """The one-line error for mutants that do not fit the wild type (``problems`` as
    :func:`check_mutants` gives them, in order): the first, and how many more."""
    i, problem = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return DataError(f"mutant {i + 1} does not fit the wild type: {problem}{more}")


def problem_kind(problem: str) -> str:
    """The reason a mutant is not scored, in a few words (for counts by reason), read from the
    messages of :func:`parse_mutant` and :func:`check_mutants` above."""
    if "is a stop" in problem:
        return "stops"
    if "the sequence has" in problem:
        return "wild type differs"
    if "is outside" in problem:
        return "position outside the sequence"
    if problem.startswith("a whole sequence unlike the wild type"):
        return "wild type differs"
    if "longer than the model's window" in problem:
        return "longer than the model's window"
    if "not one of the 20 amino acids" in problem:
        return "non-standard letters"
    if "names a position twice" in problem:
        return "a position named twice"
    if problem.startswith("an indel ("):
        return "indels"
    return "unreadable (other notations)"


def window_start(n: int, index: int, width: int | None) -> int:
    """First residue of the window of ``width`` residues centred on ``index`` in a protein of
    ``n`` (clamped at its ends; 0 for ``width`` None or at least ``n``)."""
    if width is None or n <= width:
        return 0
    return int(min(max(index - width // 2, 0), n - width))
