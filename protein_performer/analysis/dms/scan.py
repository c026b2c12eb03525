"""A deep mutational scan scored as ``score`` runs it: the table's rows read against the wild
type (each row left unscored with why), the model's and the baselines' columns, and the
summary with its notes (what was left out, indels, synonymous and repeated rows, Spearman)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from protein_performer.analysis.dms import marginals as mut
from protein_performer.analysis.dms import variants as var
from protein_performer.analysis.dms.homologs import ScanContext, context_columns
from protein_performer.analysis.dms.table import as_in_table, offset_hint, read_float
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, Alphabet
from protein_performer.errors import DataError
from protein_performer.model.performer import ProteinLM


@dataclass
class Scan:
    """The rows of a mutations table read against the wild type ``sequence`` (``source``
    names where it came from): ``parsed`` holds each row's variant (None: not read),
    ``problems`` ``(row, why)`` for each row left unscored, in row order."""

    rows: list[dict[str, str]]
    line_of: list[int]
    sequence: str
    source: str
    offset: int
    methods: list[str]
    column: str
    parsed: list[var.Variant | None]
    problems: list[tuple[int, str]]
    readable: int

    @cached_property
    def good(self) -> list[int]:
        """The rows scored."""
        bad = {i for i, _ in self.problems}
        return [i for i in range(len(self.rows)) if i not in bad]

    @cached_property
    def synonymous(self) -> list[int]:
        """The rows scored whose every substitution keeps its letter (``S2S``): 0 in every
        column, as the wild type."""
        return [
            i
            for i in self.good
            if self.parsed[i]
            and not isinstance(self.parsed[i], var.Indel)
            and all(x.wt == x.mt for x in self.parsed[i])  # type: ignore[union-attr]
        ]

    @cached_property
    def kinds(self) -> list[str]:
        return [var.problem_kind(p) for _, p in self.problems]

    def substitutions(self) -> list:
        return [m for m in self.parsed if m and not isinstance(m, var.Indel)]

    def where(self, i: int, problem: str) -> str:
        return f"line {self.line_of[i]}: {problem}"


def read_scan(
    rows: list[dict[str, str]],
    line_of: list[int],
    sequence: str,
    source: str,
    *,
    column: str,
    from_sequences: bool,
    offset: int,
    methods: Sequence[str],
    window: int | None,
) -> Scan:
    """Each row's ``column`` read as a variant of ``sequence`` (a notation, or with
    ``from_sequences`` a whole sequence), with why each that cannot be scored is not:
    unreadable, not fitting the wild type, an indel longer than ``window`` tokens, an indel
    where only site methods run."""
    parsed: list[var.Variant | None] = []
    problems: list[tuple[int, str]] = []
    residues = None if window is None else window - 2
    for i, row in enumerate(rows):
        text = row.get(column) or ""
        whole = from_sequences or var.looks_like_sequence(text, sequence)
        try:
            if from_sequences:
                variant = var.variant_from_sequence(text, sequence)
            else:
                variant = var.parse_variant(text, sequence, offset)
        except ValueError as e:
            parsed.append(None)
            problems.append((i, f"{column}: {e}" if from_sequences else str(e)))
            continue
        problem = var.whole_sequence_problem(variant, sequence, residues, whole)
        parsed.append(None if problem else variant)
        if problem:
            problems.append((i, problem))
    readable = [i for i, m in enumerate(parsed) if m is not None]
    problems += [
        (readable[j], p)
        for j, p in var.check_mutants([parsed[i] for i in readable], sequence, offset)
    ]
    site_method = next((m for m in methods if m not in mut.WHOLE_SEQUENCE_METHODS), None)
    if site_method is not None and all(m not in mut.WHOLE_SEQUENCE_METHODS for m in methods):
        flagged = {i for i, _ in problems}  # indels only the whole-sequence methods score
        problems += [
            (i, mut.indel_problem(m, sequence, site_method))
            for i, m in enumerate(parsed)
            if isinstance(m, var.Indel) and i not in flagged
        ]
    problems.sort()
    return Scan(
        rows, line_of, sequence, source, offset, list(methods), column, parsed, problems,
        len(readable),
    )  # fmt: skip


#: Why a row is left unscored whatever the settings, and counted in the output: it is well
#: formed and fits the wild type, but no score covers it (a stop, a letter other than the 20
#: amino acids, a site past the protein's ends (a scan of a longer protein), an indel the
#: methods run do not score). Other problems (a wild type that differs, a notation not read)
#: point to a wrong input: an error unless ``skip_mismatched``.
UNSCORABLE = (
    "stops",
    "non-standard letters",
    "position outside the sequence",
    "indels",
    "longer than the model's window",
)


def check_scan(scan: Scan, *, skip_mismatched: bool, path: Any) -> None:
    """DataError (one line, naming the first lines) when no row can be scored, when rows do
    not fit the wild type (other than :data:`UNSCORABLE` ones) and ``skip_mismatched`` is off,
    or when most rows inside the sequence name another residue (a wrong numbering or
    protein, not rows to skip)."""
    problems, good, kinds = scan.problems, scan.good, scan.kinds
    mismatched = kinds.count("wild type differs")
    # rows past the sequence's ends are a crop (a domain of a longer protein), not a mismatch
    in_range = scan.readable - kinds.count("position outside the sequence")
    if skip_mismatched and good and mismatched > in_range / 2:
        # most rows naming another residue: a wrong numbering or protein, not a few bad rows
        hint = offset_hint(scan.substitutions(), scan.sequence, scan.offset)
        wild_type = "the sequence given" if scan.source == "sequence=" else scan.source
        raise DataError(
            f"{mismatched:,} of the {in_range:,} mutants inside the sequence name a wild-type "
            f"residue that {wild_type} does not have there (numbered from offset={scan.offset}): "
            f"a wrong offset= or record=, not rows to skip{hint}",
            path=path,
        )
    refused = [
        (i, p) for (i, p), kind in zip(problems, kinds, strict=True) if kind not in UNSCORABLE
    ]
    if good and (skip_mismatched or not refused):
        return
    shown = problems if not good else refused
    lines = [scan.where(i, p) for i, p in shown[:3]]
    more = f"; and {len(shown) - 3} more" if len(shown) > 3 else ""
    hint = offset_hint(scan.substitutions(), scan.sequence, scan.offset)
    n = f"{len(scan.rows):,}"
    if good:
        what = f"{len(refused):,} of {n} mutants do not fit"
    elif refused or "position outside the sequence" in kinds:
        what = f"none of the {n} mutants fit"
    else:  # stops, other letters, indels the methods do not score: nothing to score
        what = f"none of the {n} mutants can be scored against"
    raise DataError(
        f"{what} the wild type ({scan.source}, numbered from offset={scan.offset}): "
        f"{'; '.join(lines)}{more}{hint}"
        + ("" if not good else " (skip_mismatched=true leaves such rows unscored)"),
        path=path,
    )


def score_scan(
    model: ProteinLM,
    alphabet: Alphabet,
    scan: Scan,
    *,
    counts: Any,
    max_tokens: int | None,
    toks_per_batch: int,
    packed: bool,
    context: ScanContext | None = None,
    context_length: int | None = None,
    context_options: dict[str, Any] | None = None,
) -> tuple[dict[str, np.ndarray], float]:
    """The scored rows' columns, ``{column: (scored rows,) values}`` (one per method; with
    homologs, ``context``, the model's masked marginals with them before the protein in
    windows of ``context_length`` tokens (``context_options``: the rest of
    :func:`~protein_performer.analysis.dms.homologs.context_columns`' options) and their
    profile's; then BLOSUM62 and, with the
    training residue ``counts``, the unigram log-ratio), and the seconds the model took."""
    good_mutants = [scan.parsed[i] for i in scan.good]
    t0 = time.perf_counter()
    scores = mut.score_mutants(
        model,
        alphabet,
        scan.sequence,
        good_mutants,  # type: ignore[arg-type]
        methods=scan.methods,
        max_tokens=max_tokens,
        toks_per_batch=toks_per_batch,
        progress=True,
        packed=packed,
    )
    columns = {mut.column_name(m): v for m, v in scores.items()}
    if context is not None:
        columns.update(
            context_columns(
                model,
                alphabet,
                scan.sequence,
                good_mutants,  # type: ignore[arg-type]
                context,
                max_length=context_length,
                packed=packed,
                toks_per_batch=toks_per_batch,
                progress=True,
                **(context_options or {}),
            )
        )
    elapsed = time.perf_counter() - t0
    columns.update(
        mut.baseline_columns(
            good_mutants,  # type: ignore[arg-type]
            alphabet,
            None if counts is None else np.asarray(counts),
            wild_type=scan.sequence,
        )
    )
    return columns, elapsed


def table_columns(
    columns: dict[str, np.ndarray], fields: Sequence[str], n_rows: int, good: list[int]
) -> dict[str, np.ndarray]:
    """The score columns over every row of the table (NaN where unscored); a name the table
    already has gets ``_pp``."""
    names = {name: name if name not in fields else f"{name}_pp" for name in columns}
    full = {names[k]: np.full(n_rows, np.nan) for k in columns}
    for name, values in columns.items():
        full[names[name]][good] = values
    return full


def scan_summary(
    scan: Scan,
    *,
    checkpoint: str,
    mutations: str,
    attention_kind: str,
    seconds: float,
    out: str,
) -> tuple[dict[str, Any], str]:
    """The run's summary (for ``OUT.json``) and its first printed line."""
    summary: dict[str, Any] = {
        "checkpoint": checkpoint,
        "mutations": mutations,
        "wild_type": scan.source,
        "wild_type_sequence": scan.sequence,
        "length": len(scan.sequence),
        "offset": scan.offset,
        "methods": scan.methods,
        "attention_kind": attention_kind,
        "mutants": len(scan.rows),
        "scored": len(scan.good),
        # every row left unscored, with why (the printed text gives the first of each kind)
        "unscored": [
            {"line": scan.line_of[i], "kind": kind, "problem": p}
            for (i, p), kind in zip(scan.problems, scan.kinds, strict=True)
        ],
        "seconds": round(seconds, 2),
        "out": out,
    }
    text = (
        f"scored {len(scan.good):,} of {len(scan.rows):,} mutants ({', '.join(scan.methods)}) "
        f"of {scan.source} in {seconds:.1f} s -> {out}"
    )
    return summary, text


def unscored_notes(scan: Scan, summary: dict[str, Any], blank_rows: int) -> str:
    """What was left out, by reason with the first line of each (every one is in the
    summary's ``unscored``), and the offset that fits when rows name another wild type; rows
    of empty fields. Adds to ``summary``."""
    text, problems = "", scan.problems
    if problems:
        hint = ""
        if "wild type differs" in scan.kinds:
            hint = offset_hint(scan.substitutions(), scan.sequence, scan.offset)
        rows_word = "row" if len(problems) == 1 else "rows"
        by_kind = Counter(scan.kinds)
        text += f"\n  {len(problems):,} {rows_word} left unscored: " + ", ".join(
            f"{kind}: {n:,}" for kind, n in by_kind.most_common()
        )
        firsts: dict[str, str] = {}
        for i, p in problems:
            firsts.setdefault(var.problem_kind(p), scan.where(i, p))
        text += "".join(f"\n    first {kind}: {where}" for kind, where in firsts.items())
        if len(problems) > len(firsts) and summary.get("out"):
            listed = Path(summary["out"]).with_suffix(".json").name
            text += f"\n    every row left unscored, with why: {listed} (unscored)"
        summary["unscored_by_reason"] = dict(by_kind)
        summary["unscored_total"] = len(problems)
        if hint:
            text += hint.replace("; ", "\n  ", 1)
    if blank_rows:
        text += f"\n  {blank_rows:,} row{'' if blank_rows == 1 else 's'} of empty fields left out"
        summary["blank_rows"] = blank_rows
    return text


def variant_notes(
    scan: Scan,
    summary: dict[str, Any],
    *,
    has_unigram: bool,
    window: int | None,
    mutation_col: str,
) -> str:
    """Notes on what was scored: a wild type with other letters than the 20, indels,
    synonymous rows, a missing baseline, a protein longer than the window, repeated
    mutants (a synonymous row named by its ``mutation_col``). Adds to ``summary``."""
    text, sequence, parsed, good = "", scan.sequence, scan.parsed, scan.good
    rare = sorted({c for c in sequence if c not in STANDARD_AMINO_ACIDS})
    if rare:
        text += (
            f"\n  the wild type holds {', '.join(rare)} (not one of the 20 amino acids): "
            "scored as the model reads them, the unknown-residue tokens"
        )
        summary["wild_type_nonstandard"] = rare
    indels = [i for i in good if isinstance(parsed[i], var.Indel)]
    if indels:
        site = [mut.column_name(m) for m in scan.methods if m not in mut.WHOLE_SEQUENCE_METHODS]
        text += (
            f"\n  {len(indels):,} {'indel' if len(indels) == 1 else 'indels'} (whole sequences "
            "of another length than the wild type) scored by their whole sequence; "
            f"{', '.join([*site, 'blosum62'])}"
            " blank for them (no substitution score); a whole-sequence score sums one term "
            "per residue, so a deletion loses terms and an insertion adds them: compare "
            "indels of one length with each other"
        )
        summary["indels"] = len(indels)
    synonymous = scan.synonymous
    if synonymous:
        i = synonymous[0]
        text += (
            f"\n  {len(synonymous):,} synonymous {'row' if len(synonymous) == 1 else 'rows'} "
            f"(first: line {scan.line_of[i]}, {scan.rows[i].get(mutation_col)}) scored 0 in "
            "every column, as the wild type"
        )
        summary["synonymous"] = len(synonymous)
    if not has_unigram:
        text += (
            "\n  unigram baseline: not available (the checkpoint stores no training residue "
            "counts); BLOSUM62 is the baseline"
        )
        summary["baselines_missing"] = ["unigram_log_ratio"]
    if window is not None and len(sequence) > window - 2:
        text += (
            f"\n  the protein ({len(sequence):,} residues) is longer than the model's window: "
            f"each site was scored in a window of {window - 2:,} residues centred on it (ESM-1v)"
        )
        summary["window_residues"] = window - 2
    return text + _repeat_note(scan, summary)


def _repeat_note(scan: Scan, summary: dict[str, Any]) -> str:
    seen: dict[tuple | str, int] = {}
    repeats = []
    for i in scan.good:
        m = scan.parsed[i]
        key = m.sequence if isinstance(m, var.Indel) else tuple(sorted((x.index, x.mt) for x in m))  # type: ignore[union-attr]
        if key in seen:
            repeats.append((i, seen[key]))
        seen.setdefault(key, i)
    if not repeats:
        return ""
    i, first = repeats[0]
    summary["repeated_mutants"] = len(repeats)
    return (
        f"\n  {len(repeats):,} {'row repeats' if len(repeats) == 1 else 'rows repeat'} an "
        f"earlier mutant (first: line {scan.line_of[i]} "
        f"repeats line {scan.line_of[first]}): scored again, the same"
    )


def fitness_values(scan: Scan, fitness_col: str, decimal_comma: bool) -> np.ndarray:
    """Each row's measured fitness (NaN where empty or not a number)."""
    return np.array([read_float(r.get(fitness_col), decimal_comma) for r in scan.rows])


def fitness_notes(
    scan: Scan,
    full: dict[str, np.ndarray],
    fitness: np.ndarray,
    fitness_col: str,
    summary: dict[str, Any],
) -> str:
    """Spearman of each column with the fitness, over the rows where both are numbers, with
    n and the spread expected by chance under 30 pairs, each column read as the table writes
    it (:func:`~protein_performer.analysis.dms.table.as_in_table`). Adds to ``summary``."""
    good = scan.good
    rho = {k: mut.spearman(as_in_table(v), fitness) for k, v in full.items()}
    n_pairs = int(np.sum(np.isfinite(fitness[good]))) if good else 0
    # a column blank for some rows (a site method beside indels) correlates over fewer
    column_pairs = {k: int(np.sum(np.isfinite(v) & np.isfinite(fitness))) for k, v in full.items()}
    no_value = len(good) - n_pairs
    summary.update(
        {
            "fitness_col": fitness_col,
            "spearman": rho,
            "pairs": n_pairs,
            "pairs_by_column": column_pairs,
            "rows_without_numeric_fitness": no_value,
        }
    )
    text = ""
    if n_pairs > 1 and np.ptp(fitness[good][np.isfinite(fitness[good])]) == 0:
        text += f"\n  every {fitness_col} value is the same: no correlation is defined"
    text += "\n  Spearman with " + fitness_col + f" (n={n_pairs:,}"
    if n_pairs < 30:  # the null's spread is about 1/sqrt(n - 1)
        text += f"; few pairs: ±{1 / max(1, n_pairs - 1) ** 0.5:.2f} by chance"
    if no_value:
        example = next(
            (
                scan.rows[i].get(fitness_col)
                for i in good
                if not np.isfinite(fitness[i]) and (scan.rows[i].get(fitness_col) or "").strip()
            ),
            None,
        )
        shown = f", e.g. {example!r}" if example is not None else ", all empty"
        rows = "scored row" if no_value == 1 else "scored rows"
        text += f"; {no_value:,} {rows} without a numeric value{shown})"
    else:
        text += ")"
    text += ": " + ", ".join(
        _rho_text(k, r) + (f" (n={column_pairs[k]:,})" if column_pairs[k] != n_pairs else "")
        for k, r in rho.items()
    )
    if scan.synonymous and n_pairs > 1:  # published scans are compared over substitutions
        keep = np.ones(len(scan.rows), dtype=bool)
        keep[scan.synonymous] = False
        sub = {k: mut.spearman(as_in_table(v)[keep], fitness[keep]) for k, v in full.items()}
        n_sub = int(np.sum(np.isfinite(fitness[good]) & keep[good]))
        summary["spearman_without_synonymous"] = sub
        summary["pairs_without_synonymous"] = n_sub
        text += (
            f"\n  without the {len(scan.synonymous):,} synonymous rows (n={n_sub:,}), as "
            "published scans are compared: " + ", ".join(_rho_text(k, r) for k, r in sub.items())
        )
    return text


def _rho_text(column: str, rho: float | None) -> str:
    """``pssm +0.116`` (``n/a`` where no correlation is defined)."""
    return f"{column} {'n/a' if rho is None else f'{rho:+.3f}'}"
