"""Multiple sequence alignments as users have them: a3m (ColabFold, HHblits; its ``#`` line),
a2m (EVcouplings, ProteinGym, DeepSequence: query ``NAME/START-END``), Stockholm (HMMER,
Pfam; read by Biopython's ``AlignIO``), aligned FASTA, and plain FASTA hits (unaligned).

The format is told by content, not by the file's name:

- ``# STOCKHOLM`` on the first line: Stockholm;
- records with lowercase letters beside upper-case ones: a3m (rows of different lengths) or
  a2m (one length); upper case and ``-`` are match columns, lower case and ``.`` insertions
  (dropped from the columns, kept in the homolog's sequence);
- ``#`` lines before the first record (ColabFold's and HH-suite's a3m): a3m, also without gaps
  or insertions;
- records with ``-`` (or ``.``) all of one length: aligned FASTA (every column a match
  column, in either case); most of
  them (:data:`RAGGED_SHARE`) of one length: an alignment with broken rows, refused naming the
  first;
- anything else: plain FASTA hits, which have no columns (``columns is None``).

The first record is the query (a3m/a2m convention); where it is not the wild type, the first
record that is (as a stretch of it) is taken. Only the query's own residues become columns:
a column where the query has a gap or an insertion is not a position of the wild type.
``NAME/START-END`` numbers the query inside the wild type; otherwise the query is found in it.
A wild type that is a stretch of the query (a scan of one domain, an alignment of the whole
protein) reads the query's columns on its residues only.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import lzma
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS
from protein_performer.data.fasta import check_readable_file, detect_compression
from protein_performer.data.stockholm import stockholm_rows
from protein_performer.errors import DataError
from protein_performer.utils.progress import progress

FORMATS = ("a3m", "a2m", "stockholm", "aligned-fasta", "fasta")
#: The column code of a gap (or a letter other than the 20 amino acids) in :attr:`MSA.matrix`.
GAP = 20
#: Neighbours at this identity or more share a sequence's weight (EVmutation, DeepSequence).
WEIGHT_IDENTITY = 0.8
#: A homolog covering less than this fraction of the query's columns is a fragment.
FRAGMENT_COVERAGE = 0.5
#: Gapped rows this share of which have one length are an alignment (the rest broken rows).
RAGGED_SHARE = 0.8
_CODE = np.full(256, GAP, dtype=np.uint8)
for _i, _aa in enumerate(STANDARD_AMINO_ACIDS):
    _CODE[ord(_aa)] = _i
_RANGE = re.compile(r"/(\d+)-(\d+)$")
#: Names of HH-suite's annotation rows in an a3m (``addss.pl``, ``hhmake``): not sequences.
_ANNOTATIONS = ("ss_dssp", "sa_dssp", "ss_pred", "ss_conf", "ss_cons", "sa_cons")


@dataclass
class MSA:
    """An alignment read against a wild type.

    ``matrix`` ``(N, L)`` uint8: the homologs' residues (codes 0-19 in
    :data:`~protein_performer.data.alphabet.STANDARD_AMINO_ACIDS` order, :data:`GAP` for a gap
    or another letter) in the query's match columns; ``positions`` ``(L,)`` the 0-based wild-type
    residue of each column. ``sequences``: each homolog unaligned (upper case, insertions kept).
    Plain FASTA hits have ``matrix`` and ``positions`` None. ``notes`` counts what was read and
    left out."""

    path: str
    format: str
    query_id: str
    ids: list[str]
    sequences: list[str]
    matrix: np.ndarray | None = None
    positions: np.ndarray | None = None
    query_codes: np.ndarray | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def aligned(self) -> bool:
        return self.matrix is not None

    def coverage(self) -> np.ndarray:
        """``(N,)``: the fraction of the query's columns each homolog has a residue in."""
        if self.matrix is None or not self.matrix.shape[1]:
            return np.ones(len(self.sequences))
        return (self.matrix != GAP).mean(1)

    def identity(self) -> np.ndarray:
        """``(N,)``: each homolog's identity to the query over the columns both have a
        residue in (0 where none)."""
        if self.matrix is None:
            return np.full(len(self.sequences), np.nan)
        both = (self.matrix != GAP) & (self.query_codes[None, :] != GAP)
        same = (self.matrix == self.query_codes[None, :]) & both
        n = both.sum(1)
        return np.divide(same.sum(1), n, out=np.zeros(len(n)), where=n > 0)


def _read_text(path: str | Path) -> str:
    """The file's text, decompressed; UTF-8 (a byte-order mark dropped), or UTF-16 where its
    byte-order mark says so (as Windows editors save)."""
    kind = detect_compression(path)
    opener = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}.get(kind)
    if kind not in ("plain", "gzip", "bzip2", "xz"):
        raise DataError(
            f"{kind}-compressed: decompress it first (gzip, bzip2, xz are read)", path=path
        )
    try:
        with (opener or open)(path, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"unreadable ({e})", path=path) from None
    utf16 = data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
    return data.decode("utf-16" if utf16 else "utf-8-sig", errors="replace")


def _annotation(title: str) -> bool:
    """Whether a record is one of HH-suite's annotation rows (secondary structure, solvent
    accessibility, confidence, consensus), which its tools skip: not a sequence."""
    name = title.split(None, 1)[0] if title else ""
    return name.startswith(_ANNOTATIONS) or name.endswith("_consensus")


def _records(path: str | Path) -> tuple[str, list[tuple[str, str]], dict[str, int]]:
    """``(kind, [(title, row)], what was skipped)``: kind ``stockholm`` or ``fasta``; HH-suite's
    annotation rows (``>ss_pred``, ``>ss_conf``, ``>ss_dssp``, …) left out and counted with the
    ``#`` lines."""
    from protein_performer.data.search import HITS_FASTA  # here: search stays free of msa

    if Path(path).is_dir() and (Path(path) / HITS_FASTA).is_file():  # `data search`'s folder
        raise DataError(
            f"is a directory (a data search output? give its hits as context=: "
            f"{Path(path) / HITS_FASTA})",
            path=path,
        )
    check_readable_file(path, "an alignment (a3m, a2m, Stockholm or FASTA)")
    text = _read_text(path).replace("\x00", "")
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if first.startswith("# STOCKHOLM"):
        return "stockholm", stockholm_rows(text, path), {}
    skipped = 0
    while skipped < len(lines) and (lines[skipped].startswith("#") or not lines[skipped].strip()):
        skipped += 1
    if skipped >= len(lines):
        raise DataError("empty file: no alignment records", path=path)
    if not lines[skipped].startswith(">"):
        raise DataError(
            f"line {skipped + 1} does not start with '>' or '#': not an a3m, a2m, Stockholm or "
            "FASTA file",
            path=path,
        )
    out: list[tuple[str, list[str]]] = []
    for line in lines[skipped:]:
        if line.startswith(">"):
            out.append((line[1:].strip(), []))
        elif line.strip() and not line.startswith("#"):
            out[-1][1].append("".join(line.split()))
    skips = {
        "header_lines_skipped": sum(1 for line in lines[:skipped] if line.startswith("#")),
        "annotation_rows_skipped": sum(1 for t, _ in out if _annotation(t)),
    }
    return "fasta", [(t, "".join(s)) for t, s in out if not _annotation(t)], skips


def _kind(rows: Sequence[str], container: str, header: bool = False) -> str:
    """The format the rows' characters tell (see the module docstring); ``header``: ``#``
    lines came before the first record (ColabFold's and HH-suite's a3m)."""
    inserts = _has_inserts(rows)
    lengths = [len(r) for r in rows]
    same = len(set(lengths)) == 1
    if container == "stockholm":
        return "stockholm"
    if inserts:
        return "a2m" if same else "a3m"
    if header:  # an a3m without gaps or insertions (close, full-length homologs) is one still
        return "a3m"
    if any("-" in r or "." in r for r in rows):
        # gapped rows most of one length are an alignment with a few broken rows (said by
        # read_msa), not hits aligned pairwise, whose lengths differ from row to row
        modal = Counter(lengths).most_common(1)[0][1]
        if same or (len(rows) >= 3 and modal >= RAGGED_SHARE * len(rows)):
            return "aligned-fasta"
    return "fasta"


def _has_inserts(rows: Sequence[str]) -> bool:
    """Whether lower case marks insertions: rows with lower-case letters beside upper-case
    ones (rows all in lower case, or ``.`` without lower case, are aligned FASTA written so:
    every column a match column, ``.`` a gap)."""
    lower = any(any(c.islower() for c in r) for r in rows)
    return lower and any(any(c.isupper() for c in r) for r in rows)


def _match(row: str, inserts: bool) -> str:
    """The row's match-column characters: upper case and ``-`` (all characters but ``.``
    without insertion states, upper-cased)."""
    if inserts:
        return "".join(c for c in row if c.isupper() or c in "-*")
    return row.upper().replace(".", "-")


def _check_widths(
    match_rows: Sequence[str], q: int, titles: Sequence[str], path: str | Path
) -> None:
    """A one-line DataError naming the first row whose match columns are not as many as the
    query's (or, where the query is the odd one out among rows that agree, the query)."""
    width = len(match_rows[q])
    bad = next((i for i, r in enumerate(match_rows) if len(r) != width), None)
    if bad is None:
        return
    (modal, count), *_ = Counter(len(r) for r in match_rows).most_common(1)
    if modal != width and count > 1:  # the query is the row that differs
        bad, width, whose = q, modal, "the other rows have"
    else:
        whose = "the query has"
    short = bad == len(match_rows) - 1 and len(match_rows[bad]) < width
    raise DataError(
        f"{len(match_rows[bad])} match columns where {whose} {width} (upper case and '-' are "
        "match columns: not one alignment"
        + ("; the last record is short: is the file cut off?)" if short else ")"),
        path=path,
        record=bad + 1,
        record_id=_name(titles[bad], bad),
    )


def _stops_dropped(rows: list[str]) -> list[str]:
    """``rows`` without a closing ``*`` where some rows end in one and the rest lack that
    column (a stop some tools write after a sequence), not where the rows agree without it
    dropped (a stop column of a translated alignment: every row ends there, in ``*`` or
    ``-``)."""
    if not any(r.endswith("*") for r in rows):
        return rows
    inserts = _has_inserts(rows)
    stripped = [r.removesuffix("*") for r in rows]
    widths = {len(_match(r, inserts)) for r in rows}
    return (
        stripped
        if len(widths) > 1 and len({len(_match(r, inserts)) for r in stripped}) == 1
        else rows
    )


def _query_index(titles: Sequence[str], rows: Sequence[str], wild_type: str) -> int:
    """The record that is the query: the first, unless it is not the wild type (or a stretch
    of it, or a longer protein holding it) and a later one is."""
    seqs = (_unaligned(r) for r in rows)  # lazily: the first record is the query as a rule
    return next(
        (i for i, s in enumerate(seqs) if s and (s in wild_type or (wild_type and wild_type in s))),
        0,
    )


def _name(title: str, index: int) -> str:
    """A record's id: its title's first word, ``record<N>`` (1-based) for a bare ``>``."""
    return title.split(None, 1)[0] if title.strip() else f"record{index + 1}"


def _unaligned(row: str) -> str:
    return "".join(c for c in row if c.isalpha()).upper()


def _start(
    title: str, query: str, wild_type: str, path: str | Path, number: int, offset: int = 1
) -> int:
    """0-based start of ``query`` in ``wild_type`` (whose first residue is numbered ``offset``):
    ``/START-END`` of its name where that matches, else where it is found; one-line DataError
    when it is not the wild type."""
    name = title.split(None, 1)[0] if title else ""
    m = _RANGE.search(name)
    if m:
        start = int(m.group(1)) - offset
        if start >= 0 and wild_type[start : start + len(query)] == query:
            return start
    at = wild_type.find(query)
    if at >= 0:
        return at
    start = min(max(int(m.group(1)) - offset, 0), len(wild_type)) if m else 0
    region = wild_type[start : start + len(query)]
    diff = next((i for i, (a, b) in enumerate(zip(query, region, strict=False)) if a != b), None)
    if diff is None:
        where = f"it has {len(query)} residues, the wild type {len(wild_type) - start} from there"
    else:
        where = (
            f"residue {start + diff + offset}: {query[diff]} in the alignment, {region[diff]} in the "
            "wild type"
        )
    raise DataError(
        f"the alignment's query {name or '(unnamed)'} is not the wild type ({where}; a "
        "NAME/START-END in its name numbers it inside the wild type)",
        path=path,
        record=number,
        record_id=name or None,
    )


def _column_numbers(query_row: str, inserts: bool, width: int) -> np.ndarray:
    """``(width,)``: the query's residue number (0-based) of each match column, -1 where the
    query has a gap."""
    number, k, m = np.full(width, -1, dtype=np.int64), 0, 0
    for c in query_row:
        if inserts and (c.islower() or c == "."):
            k += c != "."
            continue
        if m < width:
            if c.isalpha():
                number[m] = k
                k += 1
            m += 1
    return number


def _placement_notes(
    query: str,
    where: np.ndarray,
    first_title: str | None,
    first_row: str,
    wild_type: str,
    offset: int = 1,
) -> dict[str, str]:
    """What to say of where the query was placed: the query's residues read where the wild
    type is a domain of it, a ``/START-END`` of its name that did not match, and how record 1
    differs where a later record is the query (``first_title`` given)."""
    out = {}
    if (where < 0).any():  # the wild type is a domain of the query
        inside = np.nonzero(where >= 0)[0]
        out["query_residues_read"] = f"{inside[0] + 1}-{inside[-1] + 1}"
    named = _RANGE.search(query)
    placed = (int(where[0]) + offset, int(where[-1]) + offset)
    if named and not (where < 0).any() and (int(named[1]), int(named[2])) != placed:
        out["query_range_in_name_ignored"] = named.group(0)[1:]
    if first_title is not None:
        out["record_1"] = _name(first_title, 0)
        out["record_1_differs"] = _difference(_unaligned(first_row), wild_type, offset)
    return out


def _difference(first: str, wild_type: str, offset: int = 1) -> str:
    """Where a record that is not the wild type first differs from it, in words (residues
    numbered from ``offset``)."""
    if not first:
        return "it has no residues"
    q = np.frombuffer(first.encode("ascii", "replace"), dtype=np.uint8)
    w = np.frombuffer(wild_type.encode("ascii", "replace"), dtype=np.uint8)
    if len(q) > len(w):
        return f"it has {len(first)} residues, the wild type {len(wild_type)}"
    windows = np.lib.stride_tricks.sliding_window_view(w, len(q))
    start = int((windows != q[None, :]).sum(1).argmin())  # its best place in the wild type
    diff = np.nonzero(windows[start] != q)[0]
    shown = ", ".join(f"{wild_type[start + i]}{start + i + offset}{first[i]}" for i in diff[:3])
    more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
    residues = "residue" if len(diff) == 1 else "residues"
    return f"{len(diff)} {residues} changed at its best place in the wild type: {shown}{more}"


def _query_positions(
    title: str, query: str, wild_type: str, path: str | Path, number: int, offset: int = 1
) -> np.ndarray:
    """``(len(query),)``: the 0-based wild-type residue of each query residue (-1: none). The
    query is a stretch of the wild type (:func:`_start`); or, as an alignment cut to its focus
    columns writes it, the wild type with residues left out: every residue in order and the
    same; or a longer protein the wild type is a stretch of (a scan of one domain, the
    alignment of the whole protein): its residues beyond the wild type are -1."""
    try:
        start = _start(title, query, wild_type, path, number, offset)
        return start + np.arange(len(query))
    except DataError:
        inside = query.find(wild_type)  # the wild type a domain of the query: its columns only
        if inside >= 0 and wild_type:
            at = np.arange(len(query)) - inside
            return np.where((at >= 0) & (at < len(wild_type)), at, -1)
        # a stretch with a residue or two changed is another protein (the error says where);
        # the wild type with residues left out is the focus columns of an alignment
        if _nearly_a_stretch(query, wild_type):
            raise
        skipped = _subsequence(query, wild_type)
        if skipped is None:
            raise
        return skipped


def _nearly_a_stretch(query: str, wild_type: str) -> bool:
    """Whether ``query`` lies in ``wild_type`` with at most 2 % (at least 2) residues changed."""
    if len(query) > len(wild_type):
        return False
    q = np.frombuffer(query.encode("ascii", "replace"), dtype=np.uint8)
    w = np.frombuffer(wild_type.encode("ascii", "replace"), dtype=np.uint8)
    windows = np.lib.stride_tricks.sliding_window_view(w, len(q))
    fewest = int((windows != q[None, :]).sum(1).min())
    return fewest <= max(2, len(query) // 50)


def _subsequence(query: str, wild_type: str) -> np.ndarray | None:
    """Where ``query``'s residues lie in ``wild_type`` when it is the wild type with residues
    left out (a global alignment in which the query has no residue of its own and no
    mismatch), else None."""
    from Bio.Align import PairwiseAligner

    if not query or len(query) > len(wild_type):
        return None
    aligner = PairwiseAligner(mode="global", match_score=1.0, mismatch_score=-1e6)
    aligner.insertion_score = -1e6  # a query residue the wild type lacks: not this case
    aligner.open_internal_deletion_score = -1.0
    aligner.extend_internal_deletion_score = -0.01
    aligner.end_deletion_score = 0.0
    try:
        best = aligner.align(wild_type, query)[0]
    except (ValueError, OverflowError, IndexError):
        return None
    out = np.full(len(query), -1, dtype=np.int64)
    for (t0, t1), (q0, q1) in zip(*best.aligned, strict=True):
        if wild_type[t0:t1] != query[q0:q1]:
            return None
        out[q0:q1] = np.arange(t0, t1)
    return out if (out >= 0).all() else None


def read_msa(path: str | Path, wild_type: str | None, *, offset: int = 1) -> MSA:
    """The homologs of ``wild_type`` (its residues, upper case; None: the first record's) in
    the alignment or hits file ``path``, in file order, as the module docstring reads them.
    ``offset``: the number of the wild type's first residue (a scan's numbering), which a
    query's ``NAME/START-END`` and what ``notes`` say of residues count in. Left out and
    counted in
    ``notes``: the query, copies of the wild type, duplicates, and rows with no residue in the
    query's columns. One-line :class:`DataError` for an unreadable file, rows of unequal match
    length, or a query that is not the wild type."""
    container, records, skipped = _records(path)
    titles = [t for t, _ in records]
    rows = _stops_dropped([r for _, r in records])
    if not rows:
        raise DataError("no records", path=path)
    if wild_type is None:
        wild_type = _unaligned(rows[0])
    kind = _kind(rows, container, bool(skipped.get("header_lines_skipped")))
    notes: dict[str, Any] = {"format": kind, "records_read": len(rows)}
    notes |= {k: n for k, n in skipped.items() if n}
    if kind == "fasta":
        return _plain(path, titles, rows, wild_type, notes)
    inserts = _has_inserts(rows)
    q = _query_index(titles, rows, wild_type)
    query_row = rows[q]
    query = _unaligned(query_row)
    if not query:
        raise DataError(
            "the alignment's query (its first record) has no residues: it must be the wild "
            "type or a stretch of it",
            record=q + 1,
            record_id=_name(titles[q], q),
            path=path,
        )
    where = _query_positions(titles[q], query, wild_type, path, q + 1, offset)
    match_rows = [_match(r, inserts) for r in rows]
    width = len(match_rows[q])
    _check_widths(match_rows, q, titles, path)
    qmatch = match_rows[q]
    number = _column_numbers(query_row, inserts, width)
    placed = np.where(number >= 0, where[np.maximum(number, 0)], -1)
    keep = np.nonzero(placed >= 0)[0]
    if not len(keep):
        raise DataError(
            "the alignment's query has no match column on the wild type's residues",
            path=path,
            record=q + 1,
            record_id=_name(titles[q], q),
        )
    positions = placed[keep]
    on_wild_type = where[where >= 0]  # the query's residues on the wild type (all, but a domain)
    start = int(on_wild_type[0])
    as_bytes = np.frombuffer(
        "".join(match_rows).encode("ascii", "replace"), dtype=np.uint8
    ).reshape(len(rows), width)
    codes = _CODE[as_bytes[:, keep]]
    query_codes = _CODE[np.frombuffer(qmatch.encode("ascii", "replace"), dtype=np.uint8)[keep]]
    ids, seqs, chosen = [], [], []
    seen: set[str] = set()
    copies = dups = empty = 0
    insertions = 0
    for i, row in enumerate(rows):
        if i == q:
            continue
        seq = _unaligned(row)
        if not (codes[i] != GAP).any():
            empty += 1
            continue
        if seq in (query, wild_type):
            copies += 1
            continue
        if seq in seen:
            dups += 1
            continue
        seen.add(seq)
        insertions += sum(1 for c in row if c.islower()) if inserts else 0
        ids.append(_name(titles[i], i))
        seqs.append(seq)
        chosen.append(i)
    notes |= {
        "query": _name(titles[q], q),
        "query_record": q + 1,
        "query_start": start + offset,
        "columns": len(keep),
        "wild_type_residues_covered": f"{positions[0] + offset}-{positions[-1] + offset}",
        "insertions_dropped_from_columns": int(insertions),
        "gap_only_rows": empty,
        "copies_of_wild_type_left_out": copies,
        "duplicates_left_out": dups,
        "homologs": len(ids),
    }
    if chosen:  # X, B, Z, U, O, J, '*', ... in the homologs' columns: no residue the profile counts
        kept = as_bytes[chosen][:, keep]
        odd = (codes[chosen] == GAP) & (kept != ord("-")) & (kept != ord("~"))
        notes["other_letters_read_as_gaps"] = int(odd.sum())
    first_title = titles[0] if q else None
    notes |= _placement_notes(notes["query"], where, first_title, rows[0], wild_type, offset)
    msa = MSA(
        str(path),
        kind,
        notes["query"],
        ids,
        seqs,
        codes[chosen] if chosen else np.zeros((0, len(keep)), np.uint8),
        positions,
        query_codes,
        notes,
    )
    notes["fragments"] = int((msa.coverage() < FRAGMENT_COVERAGE).sum())
    return msa


def _plain(
    path: str | Path,
    titles: list[str],
    rows: list[str],
    wild_type: str,
    notes: dict[str, Any],
) -> MSA:
    ids, seqs, seen = [], [], set()
    copies = dups = 0
    for i, (title, row) in enumerate(zip(titles, rows, strict=True)):
        seq = _unaligned(row)
        if not seq:
            continue
        if seq == wild_type:
            copies += 1
            continue
        if seq in seen:
            dups += 1
            continue
        seen.add(seq)
        ids.append(_name(title, i))
        seqs.append(seq)
    notes |= {"copies_of_wild_type_left_out": copies, "duplicates_left_out": dups}
    notes["homologs"] = len(ids)
    return MSA(str(path), "fasta", "", ids, seqs, notes=notes)


def no_homolog_error(msa: MSA) -> DataError:
    """The one-line error for an alignment that holds its query and nothing else."""
    return DataError(
        f"the alignment holds no homolog besides its query {msa.query_id} (copies of it, "
        "duplicates and rows without residues in its columns are left out)",
        path=msa.path,
    )


def alignment_records(path: str | Path) -> tuple[str, list[tuple[str, str]]]:
    """``(format, [(id, sequence)])`` of an alignment or FASTA file ``path``, read once: the
    format told by its content (one of :data:`FORMATS`) and every record (the query
    included), gaps removed and insertions kept, upper case: the proteins as a window holds
    them."""
    container, records, skipped = _records(path)
    header = bool(skipped.get("header_lines_skipped"))
    kind = _kind([r for _, r in records], container, header) if records else "fasta"
    out = [(_name(t, i), _unaligned(r)) for i, (t, r) in enumerate(records)]
    return kind, [(name, seq) for name, seq in out if seq]


#: Row-pair residue comparisons (``N x R x L``) weights are computed within: an alignment
#: beyond it (about 36,000 rows of 300 columns; 71 s on a 2-core Xeon) has its
#: neighbours counted among a seeded sample of ``R`` rows and scaled to all ``N``.
EXACT_WEIGHT_CELLS = 400_000_000_000
#: The smallest sample neighbours are counted in, however deep the alignment.
MIN_WEIGHT_SAMPLE = 2_048


def weight_sample_size(n: int, length: int, max_cells: int | None = EXACT_WEIGHT_CELLS) -> int:
    """Rows an ``n`` x ``length`` alignment's neighbours are counted among: all ``n`` when
    ``n * n * length <= max_cells`` (None: always), else as many as fit ``max_cells`` (at least
    :data:`MIN_WEIGHT_SAMPLE`)."""
    if max_cells is None or n * n * max(length, 1) <= max_cells:
        return n
    return min(n, max(MIN_WEIGHT_SAMPLE, max_cells // (n * max(length, 1))))


def sequence_weights(
    matrix: np.ndarray,
    identity: float = WEIGHT_IDENTITY,
    block: int = 2048,
    *,
    max_cells: int | None = EXACT_WEIGHT_CELLS,
    seed: int = 0,
) -> np.ndarray:
    """``(N,)``: 1 / the number of rows of ``matrix`` ``(N, L)`` (itself included) at
    ``identity`` or more to a row, identity being the residues it shares with the other
    over its own residues (gaps not counted), as DeepSequence and EVmutation weight
    sequences. A row without residues gets weight 0.

    Exact up to ``max_cells`` residue comparisons (``N * N * L``; None: always). Beyond, the
    neighbours of each row are counted among ``R`` rows drawn without replacement (seeded by
    ``seed``; ``R`` from :func:`weight_sample_size`) and scaled to the whole: ``1 + k (N - 1) /
    R'``, ``k`` the neighbours among the ``R'`` drawn rows other than itself (an unbiased count,
    at ``N R L`` cost instead of ``N² L``)."""
    import torch

    n, length = matrix.shape
    if n == 0:
        return np.zeros(0)
    codes = torch.as_tensor(np.ascontiguousarray(matrix, dtype=np.uint8))
    r = weight_sample_size(n, length, max_cells)
    sample = (
        torch.arange(n)
        if r == n
        else torch.as_tensor(np.sort(np.random.default_rng(seed).choice(n, r, replace=False)))
    )
    reference = codes[sample]

    eye = torch.eye(GAP + 1)[:, :GAP]  # a gap's row is all zeros

    def onehot(rows: torch.Tensor) -> torch.Tensor:  # float32 straight from the codes
        return eye[rows.long()].reshape(len(rows), length * GAP)

    residues = (codes != GAP).sum(1).float()
    neighbours = torch.zeros(n)
    starts = range(0, n, block)
    # O(N R L): seconds for thousands of rows, minutes at the exact limit
    if n * r > 16 * block * block:
        starts = progress(starts, desc="sequence weights", unit="block")
    for i in starts:
        xi = onehot(codes[i : i + block])
        for j in range(0, r, block):
            shared = xi @ onehot(reference[j : j + block]).T  # (bi, bj) identical residues
            ok = shared >= identity * residues[i : i + block, None] - 1e-4
            neighbours[i : i + block] += ok.sum(1).float()
    if r < n:  # a drawn row counts itself: leave it out, then scale the others to all N
        drawn = torch.zeros(n, dtype=torch.bool)
        drawn[sample] = True
        own = (drawn & (residues > 0)).float()
        neighbours = 1.0 + (neighbours - own) * (n - 1) / (r - drawn.float())
    weights = torch.where(residues > 0, 1.0 / neighbours.clamp(min=1.0), torch.zeros(()))
    return weights.double().numpy()


#: How homologs are chosen for a window: PoET's weighted sampling, MSA Transformer's greedy
#: diversity, or the file's order (a search or HHblits writes the best hits first).
SAMPLINGS = ("weighted", "diverse", "first")


def homolog_order(
    sampling: str,
    *,
    weights: np.ndarray | None = None,
    matrix: np.ndarray | None = None,
    seed: int = 0,
    sample: int = 0,
    limit: int | None = None,
) -> np.ndarray:
    """Indices of homologs in the order a window takes them (it takes them while they fit).

    ``"first"``: file order. ``"weighted"``: drawn without replacement with probability
    proportional to ``weights`` ``(N,)`` (PoET: redundant families do not crowd out the
    rest), seeded by ``[seed, sample]``. ``"diverse"``: greedy, each next the homolog with the
    largest Hamming distance (fraction of ``matrix`` ``(N, L)`` columns) to the nearest already
    chosen, starting from the first (MSA Transformer's diversity selection; ``sample`` > 0
    starts from a weighted draw instead). At most ``limit`` indices (None: all)."""
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}; got {sampling!r}")
    n = len(weights) if weights is not None else len(matrix) if matrix is not None else 0
    k = n if limit is None else min(limit, n)
    if sampling == "first" or k == 0:
        return np.arange(k)
    rng = np.random.default_rng([seed, sample])
    if sampling == "weighted":
        w = np.asarray(weights, dtype=np.float64)
        w = np.where(w > 0, w, 0.0)
        if not w.any():
            w = np.ones(n)
        # Efraimidis-Spirakis: keys u^(1/w), largest first = weighted draws without replacement
        keys = np.log(rng.random(n)) / np.where(w > 0, w, np.inf)
        keys[w == 0] = -np.inf
        return np.argsort(-keys, kind="stable")[:k]
    if matrix is None:
        raise ValueError("diverse sampling needs the alignment's matrix")
    first = (
        0
        if sample == 0
        else int(homolog_order("weighted", weights=weights, seed=seed, sample=sample, limit=1)[0])
    )
    chosen = [first]
    nearest = (matrix != matrix[first][None, :]).mean(1)
    nearest[first] = -1.0
    while len(chosen) < k:
        nxt = int(np.argmax(nearest))
        chosen.append(nxt)
        nearest = np.minimum(nearest, (matrix != matrix[nxt][None, :]).mean(1))
        nearest[chosen] = -1.0
    return np.asarray(chosen, dtype=np.int64)


__all__ = [
    "EXACT_WEIGHT_CELLS",
    "FORMATS",
    "FRAGMENT_COVERAGE",
    "GAP",
    "MIN_WEIGHT_SAMPLE",
    "MSA",
    "SAMPLINGS",
    "WEIGHT_IDENTITY",
    "alignment_records",
    "homolog_order",
    "no_homolog_error",
    "read_msa",
    "sequence_weights",
    "weight_sample_size",
]
