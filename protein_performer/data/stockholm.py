"""Stockholm files (HMMER, Pfam): an alignment's rows as written, read with Biopython's
``AlignIO``; one-line errors naming the line and record where a file is broken."""

from __future__ import annotations

import io
from pathlib import Path

from protein_performer.errors import DataError


def _stockholm_problem(text: str) -> str | None:
    """Where a Stockholm file Biopython refused goes wrong, in one line: the first row, or
    per-column annotation (``#=GR``, ``#=GC``), whose length differs from the first row's
    (with the line it starts on), or None."""
    lengths: dict[str, int] = {}
    first_line: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("//"):
            break
        parts = line.split()
        if parts and not line.startswith("#") and len(parts) != 2:
            return f"line {number}: {line.strip()[:60]!r} is not a row of 'name sequence'"
        if len(parts) == 2 and not line.startswith("#"):
            key = parts[0]
        elif parts and (len(parts), parts[0]) in ((4, "#=GR"), (3, "#=GC")):
            key = " ".join(parts[:-1])
        else:
            continue
        lengths[key] = lengths.get(key, 0) + len(parts[-1])
        first_line.setdefault(key, number)
    if not lengths:
        return None
    (first, n), *rest = lengths.items()
    for name, m in rest:
        if m != n:
            what = f"annotation {name!r}" if name.startswith("#=") else f"record {name!r}"
            return (
                f"line {first_line[name]}: {what} has {m} columns, record {first!r} "
                f"(line {first_line[first]}) {n}: not a Stockholm alignment (rows must be of "
                "one length)"
            )
    return None


def stockholm_rows(text: str, path: str | Path) -> list[tuple[str, str]]:
    """``[(name, row)]``: the alignment's rows as written (a file of several alignments is
    refused): Biopython's ``AlignIO`` checks the file (ids,
    one length) but turns ``.`` into ``-``, which would make HMMER's insert columns match
    columns, so the rows are taken from the text; a ``#=GC RF`` line marks insert columns
    (``.``) in files written without case."""
    from Bio import AlignIO

    try:
        # Biopython wants the header on the first line; blank lines before it are harmless
        alignments = list(AlignIO.parse(io.StringIO(text.lstrip("\r\n \t")), "stockholm"))
    except (ValueError, KeyError, TypeError) as e:
        message = " ".join(str(e).split())  # Biopython's may span lines
        problem = _stockholm_problem(text) or f"not a readable Stockholm file ({message})"
        raise DataError(problem, path=path) from None
    if not alignments:  # Biopython yields no alignment for one without rows
        raise DataError("empty Stockholm alignment: no sequences", path=path)
    if len(alignments) > 1:  # a Pfam-style file of several families: which is meant?
        ends = [n for n, line in enumerate(text.splitlines(), 1) if line.startswith("//")]
        raise DataError(
            f"{len(alignments)} alignments in one Stockholm file (the first ends at line "
            f"{ends[0]}): give the one of the wild type's family alone",
            path=path,
        )
    rows: dict[str, list[str]] = {}
    reference: list[str] = []
    for line in text.splitlines():
        if line.startswith("//"):
            break
        parts = line.split()
        if len(parts) == 3 and parts[:2] == ["#=GC", "RF"]:
            reference.append(parts[2])
        elif len(parts) == 2 and not line.startswith("#"):
            rows.setdefault(parts[0], []).append(parts[1])
    rf = "".join(reference)
    out = []
    for record in alignments[0]:
        row = "".join(rows.get(record.id, [])) or str(record.seq)
        if rf and len(rf) == len(row) and not any(c.islower() for c in row):
            row = "".join(
                (c.lower() if c != "-" else ".") if r in ".-~" else c
                for c, r in zip(row, rf, strict=True)
            )
        out.append((record.id, row))
    return out
