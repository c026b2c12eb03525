"""Deep-mutational-scan tables as score reads them: delimiter, header, the mutation and fitness columns, the wild type, offsets, decimal commas."""

from __future__ import annotations

import csv
import io
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from protein_performer.analysis.dms.variants import GAPS, clean_sequence
from protein_performer.analysis.inputs import read_proteins
from protein_performer.data.alphabet import InvalidResidueError
from protein_performer.errors import ConfigError, DataError


def read_mutations_csv(
    path: str, column: str, key: str = "mutation_col"
) -> tuple[list[str], list[dict[str, str]], str, list[int], int]:
    """Header (names stripped), rows, delimiter (comma, tab or semicolon), each row's line and
    the number of rows of empty fields left out. ``column`` must be in the header (``key``:
    the setting that names it)."""
    from protein_performer.data.fasta import check_readable_file

    check_readable_file(path, "a CSV of mutations")
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head.startswith(b"\x1f\x8b"):
        raise DataError("gzip-compressed: the mutations CSV is read as text (gunzip it)", path=path)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataError(
            "UTF-16 text (a spreadsheet's 'Unicode text'): save it as CSV (UTF-8)", path=path
        )
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            first = fh.readline()
            delimiter = ","
            if "," not in first:
                delimiter = next((d for d in "\t;" if d in first), ",")
            fh.seek(0)
            if fh.read(1) != "\ufeff":
                fh.seek(0)
            reader = csv.DictReader(fh, delimiter=delimiter)
            # "mutant, DMS_score" (a space after the comma) names DMS_score
            fields = [f.strip() for f in reader.fieldnames or []]
            if reader.fieldnames:
                reader.fieldnames = fields
            rows, line_of = [], []  # blank lines are skipped: keep each row's own line
            blank = 0
            for row in reader:
                if all(not (v or "").strip() for v in row.values() if isinstance(v, str)) and (
                    None not in row
                ):
                    blank += 1  # a row of empty fields (a spreadsheet's ",,,")
                    continue
                rows.append(row)
                line_of.append(reader.line_num)
    except UnicodeDecodeError as e:
        with open(path, "rb") as fh:  # the line the reader stopped at, for the user to find
            line = next((n for n, raw in enumerate(fh, 1) if not _is_utf8(raw)), None)
        where = f" on line {line:,}" if line else ""
        raise DataError(
            f"not UTF-8 text (byte {e.object[e.start]:#04x}{where}): save it as CSV (UTF-8)",
            path=path,
        ) from None
    except csv.Error as e:
        raise DataError(f"not a readable CSV ({e})", path=path) from None
    if not fields:
        raise DataError("empty CSV (no header line)", path=path)
    if first.startswith(">"):
        raise DataError(
            "a FASTA file, not a CSV of mutations (mutations= and fasta= swapped?)", path=path
        )
    # a row would keep only the last of them: data silently lost (blank names, a spreadsheet's
    # empty trailing columns, name nothing a setting can read)
    repeated = next((f for f in fields if f and fields.count(f) > 1), None)
    if repeated is not None:
        where = ", ".join(str(i) for i, f in enumerate(fields, 1) if f == repeated)
        raise DataError(
            f"column name {repeated!r} is repeated in the header (columns {where}): "
            "give each column its own name",
            path=path,
        )
    if column not in fields:
        other = (
            "; or sequence_col=mutated_sequence to read whole sequences"
            if key == "mutation_col" and "mutated_sequence" in fields
            else ""
        )
        raise DataError(
            f"no column {column!r} (columns: {', '.join(fields)}); set {key}={other}", path=path
        )
    if not rows:
        raise DataError("no mutations (only a header line)", path=path)
    ragged = [line_of[i] for i, row in enumerate(rows) if None in row or None in row.values()]
    if ragged:
        shown = ", ".join(str(n) for n in ragged[:5]) + (" ..." if len(ragged) > 5 else "")
        raise DataError(
            f"{len(ragged):,} rows do not have the header's {len(fields)} fields (lines {shown})",
            path=path,
        )
    return fields, rows, delimiter, line_of, blank


def wild_type_of(
    alphabet: Any,
    *,
    sequence: str | None = None,
    fasta: str | Path | None = None,
    record: str | None = None,
) -> tuple[str, str, str | None]:
    """``(sequence, where it came from, its record id)``: from ``sequence`` (text; no id) or
    a record of ``fasta`` (``record``: its id; None: the first)."""
    if sequence is not None:
        sequence_text = sequence
        text = str(sequence_text)
        # a sequence is letters (and line breaks, '*'); a file name has '.' or '/'
        if any(c in text for c in "./\\") and Path(text).is_file():
            raise ConfigError(
                f"sequence={sequence_text} names a file: give it as fasta= (and record= to pick "
                "one of its records)"
            )
        sequence = clean_sequence(str(sequence_text))  # as a FASTA record is read
        if not sequence:
            raise ConfigError("sequence= is empty")
        bad = [c for c in sequence if c not in alphabet.residues]
        if bad:
            pos = sequence.index(bad[0]) + 1
            raise DataError(
                f"sequence=: {bad[0]!r} at position {pos} is not a residue letter"
                + _gap_hint(bad[0])
            )
        return sequence, "sequence=", None
    try:
        (protein,) = read_proteins(
            fasta,
            alphabet,
            ids=None if record is None else [record],
            max_records=1 if record is None else None,
        )[:1]
    except InvalidResidueError as e:
        # the wild type is read as it is: no invalid= / strip_gaps= here to point to, but a
        # gap is said to be one (its residues are what mutant positions count)
        problem = e.residue_problem or e.problem
        gap = next((g for g in GAPS if e.residue_problem and f"{g!r}" in problem), None)
        problem += _gap_hint(gap) if gap else ""
        raise DataError(problem, path=e.path, record=e.record, record_id=e.record_id) from None
    return alphabet.decode(protein.residues), f"{fasta} ({protein.id})", protein.id


def _gap_hint(char: str) -> str:
    """What to do about an alignment gap in the wild type (mutant positions count its
    residues, so it is read unaligned); empty for another character."""
    if char not in GAPS:
        return ""
    return (
        " (an alignment gap: give the wild type unaligned, without - or .; mutant positions "
        "count its residues)"
    )


def offset_hint(parsed: list, sequence: str, offset: int) -> str:
    """``"; offset=126 would fit 40 of 40"`` when another numbering fits the wild type."""
    votes: Counter[int] = Counter()
    sites = [s for m in parsed if m for s in m][:500]
    for s in sites:
        pos = s.index + offset
        for i, aa in enumerate(sequence):
            if aa == s.wt:
                votes[pos - i] += 1
    if not votes:
        return ""
    best, n = votes.most_common(1)[0]
    if best == offset or n < 0.9 * len(sites):
        return ""
    return f"; offset={best} would fit {n} of {len(sites)} sites"


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_float(value: str | None, decimal_comma: bool = False) -> float:
    """A fitness value; NaN for an empty or non-numeric one. ``decimal_comma``: ``0,88`` is
    0.88, ``1.234,5`` and ``1,234.5`` 1234.5 (semicolon-separated files, as spreadsheets write
    them where the comma is decimal; a lone ``1.234`` stays 1.234)."""
    if value is None or not value.strip():
        return float("nan")
    text = value.strip()
    if decimal_comma and "," in text:
        if text.rfind(",") > text.rfind("."):  # 0,88 and 1.234,5: the comma is the decimal
            text = text.replace(".", "").replace(",", ".")
        else:  # 1,234.5: the comma groups thousands
            text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        return float("nan")


def check_fitness_column(
    fields: list[str], rows: list[dict[str, str]], fitness_col: str, decimal_comma: bool, path: Any
) -> None:
    """DataError when ``fitness_col`` is not a column of the table or holds no numbers."""
    if fitness_col not in fields:
        raise DataError(
            f"no column {fitness_col!r} (columns: {', '.join(fields)}); set fitness_col=",
            path=path,
        )
    values = [r.get(fitness_col) for r in rows]
    if not any(math.isfinite(read_float(v, decimal_comma)) for v in values):
        shown = next((v for v in values if v not in (None, "")), None)
        raise DataError(
            f"column {fitness_col!r} holds no numbers"
            + (f" (e.g. {shown!r})" if shown is not None else " (all empty)")
            + "; fitness_col= names the measured fitness",
            path=path,
        )


#: How a score is written to the table: 6 significant digits.
SCORE_FORMAT = "{:.6g}"


def as_in_table(values: Any) -> np.ndarray:
    """``values`` (n,) as the table holds them (:data:`SCORE_FORMAT`; NaN stays NaN), so
    that what is said of a column (its Spearman) is what a reader computes from the file:
    scores equal but for float noise (1e-16 apart) tie there as they tie in the table."""
    v = np.asarray(values, dtype=np.float64)
    return np.array([float(SCORE_FORMAT.format(x)) if np.isfinite(x) else x for x in v])


#: A number written with a decimal comma (``-0,88``, ``1,5e-3``), as a spreadsheet exports.
_DECIMAL_COMMA = re.compile(r"[+-]?\d*,\d+(?:[eE][+-]?\d+)?")


def writes_decimal_comma(rows: list[dict[str, str]], column: str | None) -> bool:
    """Whether the table's measured values (``column``, its fitness) are written with a
    decimal comma (``0,88``), so that the score columns added to it are written alike; False
    without one (other columns may hold lists: ``126,127``)."""
    values = [(row.get(column) or "").strip() for row in rows] if column else []
    return any(v and _DECIMAL_COMMA.fullmatch(v) for v in values)


def scores_csv(
    fields: list[str],
    rows: list[dict[str, str]],
    columns: dict[str, Any],
    delimiter: str,
    decimal_comma: bool = False,
) -> str:
    """The table as read, with the score ``columns`` (one value per row, NaN: blank) after
    its own, in its own delimiter (:data:`SCORE_FORMAT`; ``decimal_comma``: ``-0,5``)."""
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=[*fields, *columns], lineterminator="\n", delimiter=delimiter
    )
    writer.writeheader()
    for i, row in enumerate(rows):
        extra = {
            k: ("" if math.isnan(v[i]) else SCORE_FORMAT.format(v[i])) for k, v in columns.items()
        }
        if decimal_comma:
            extra = {k: v.replace(".", ",") for k, v in extra.items()}
        writer.writerow({**row, **extra})
    return buf.getvalue()
