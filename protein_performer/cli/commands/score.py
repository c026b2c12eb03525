"""score: mutants of a deep mutational scan scored by the model (masked marginals, wild-type marginals, pseudo-likelihood) beside BLOSUM62, with Spearman against the fitness."""

from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from protein_performer.analysis.extraction import load_for_analysis
from protein_performer.analysis.inputs import checkpoint_label, max_tokens
from protein_performer.analysis.mutation_table import (
    _float,
    _offset_hint,
    _read_mutations_csv,
    _wild_type,
)
from protein_performer.cli.commands.common import CommandResult, _trained_length, _trained_packed
from protein_performer.config.schema import ScoreConfig
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS
from protein_performer.errors import DataError
from protein_performer.utils.outputs import absent, refuse_appeared


def _score_outputs_are_ours(out: Path) -> tuple[Any, Any, Any]:
    from protein_performer.utils.outputs import json_with_keys

    summary_ours = json_with_keys(["methods", "scored", "mutations"])

    def csv_ours(path: Path) -> bool:
        try:
            with open(path, encoding="utf-8-sig", newline="") as fh:
                first = fh.readline()
        except (OSError, UnicodeDecodeError):
            return False
        header = [h.strip() for h in first.replace("\t", ",").replace(";", ",").split(",")]
        # score writes its columns last, baselines at the end: a column a user added after
        # them makes the file theirs
        return header[-1].removesuffix("_pp") in ("blosum62", "unigram_log_ratio") and any(
            c in header for c in ("masked_marginal", "wt_marginal", "pseudo_ll", "log_likelihood")
        )

    def plot_ours(path: Path) -> bool:  # a PNG cannot say who made it: its summary can
        summary = out.with_suffix(".json")
        if not summary_ours(summary):
            return False
        try:
            return bool(json.loads(summary.read_text(encoding="utf-8")).get("fitness_col"))
        except (OSError, ValueError):
            return False

    return csv_ours, summary_ours, plot_ours


def _score_methods(cfg: ScoreConfig) -> list[str]:
    """The methods ``score`` runs: those named, or the checkpoint's default (its objective is
    read from the metadata, memory-mapped, before any model is built), checked against it."""
    from protein_performer.analysis import mutations as mut
    from protein_performer.model.checkpoints import (
        META_KEY,
        read_checkpoint,
        resolve_checkpoint,
    )

    meta = read_checkpoint(resolve_checkpoint(cfg.checkpoint), mmap=True).get(META_KEY, {})
    causal = meta.get("objective") == "causal"
    if cfg.method is None:
        return mut.default_methods(causal)
    given = [cfg.method] if isinstance(cfg.method, str) else cfg.method
    methods = list(dict.fromkeys(mut.method_name(m) for m in given))
    mut.check_methods(methods, causal)
    return methods


def run_score(cfg: ScoreConfig) -> CommandResult:
    import time

    from protein_performer.analysis import mutations as mut
    from protein_performer.utils.atomic import write_text_atomic
    from protein_performer.utils.outputs import as_written, check_output_file

    methods = _score_methods(cfg)  # before the mutations file: no fix there helps
    fields, rows, delimiter, line_of, blank_rows = _read_mutations_csv(
        cfg.mutations,
        cfg.sequence_col or cfg.mutation_col,
        "sequence_col" if cfg.sequence_col else "mutation_col",
    )
    decimal_comma = delimiter == ";"  # a European spreadsheet's export: 0,88 is 0.88
    if cfg.fitness_col is not None and cfg.fitness_col not in fields:
        raise DataError(
            f"no column {cfg.fitness_col!r} (columns: {', '.join(fields)}); set fitness_col=",
            path=cfg.mutations,
        )
    if cfg.fitness_col is not None:
        values = [r.get(cfg.fitness_col) for r in rows]
        if not any(np.isfinite(_float(v, decimal_comma)) for v in values):
            shown = next((v for v in values if v not in (None, "")), None)
            raise DataError(
                f"column {cfg.fitness_col!r} holds no numbers"
                + (f" (e.g. {shown!r})" if shown is not None else " (all empty)")
                + "; fitness_col= names the measured fitness",
                path=cfg.mutations,
            )
    if str(cfg.out).endswith(("/", os.sep)):
        raise DataError(
            "out: names a directory (trailing '/'); expected a CSV file name", path=cfg.out
        )
    out = as_written(cfg.out)
    if out.suffix.lower() in (".json", ".png"):
        raise DataError(
            f"out: names the scores CSV; {out.suffix} is the name of a side output "
            "(use e.g. out=scores.csv)",
            path=out,
        )
    if out.exists() and out.resolve() == Path(cfg.mutations).resolve():
        raise DataError("out: is the mutations CSV itself; choose another name", path=out)
    csv_ours, summary_ours, plot_ours = _score_outputs_are_ours(out)
    written = [out, out.with_suffix(".json")]
    if cfg.fitness_col is not None:  # the plot is written (or an old one removed) only then
        written.append(out.with_suffix(".png"))
    was_absent = absent(written)
    check_output_file(
        out,
        "out",
        overwrite=cfg.overwrite,
        is_ours=csv_ours,
        what="scores CSV",
        overwrite_hint="overwrite=true",
    )
    side = {
        out.with_suffix(".json"): ("its summary", summary_ours),
        out.with_suffix(".png"): ("its scatter plot", plot_ours),
    }
    for path, (what, ours) in side.items():
        try:
            check_output_file(
                path,
                "out",
                overwrite=cfg.overwrite,
                is_ours=ours,
                what="output of score",
                overwrite_hint="overwrite=true",
            )
        except DataError as e:
            raise DataError(
                f"out: score also writes {what} {path.name} next to {out.name}, "
                f"and {e.problem.removeprefix('out: ')}",
                path=path,
            ) from None
    model, alphabet, meta = load_for_analysis(
        cfg.checkpoint, cfg.device, cfg.attention, cfg.nb_features
    )
    sequence, source = _wild_type(cfg, alphabet)
    parsed: list[mut.Variant | None] = []
    problems: list[tuple[int, str]] = []
    window = max_tokens(model, None, _trained_length(meta))
    for i, row in enumerate(rows):
        text = row.get(cfg.sequence_col or cfg.mutation_col) or ""
        whole = bool(cfg.sequence_col) or mut.looks_like_sequence(text, sequence)
        try:
            if cfg.sequence_col:
                variant = mut.variant_from_sequence(text, sequence)
            else:
                variant = mut.parse_variant(text, sequence, cfg.offset)
        except ValueError as e:
            parsed.append(None)
            where = f"{cfg.sequence_col}: " if cfg.sequence_col else ""
            problems.append((i, f"{where}{e}"))
            continue
        problem = mut.whole_sequence_problem(
            variant, sequence, None if window is None else window - 2, whole
        )
        parsed.append(None if problem else variant)
        if problem:
            problems.append((i, problem))
    readable = [i for i, m in enumerate(parsed) if m is not None]
    problems += [
        (readable[j], p)
        for j, p in mut.check_mutants([parsed[i] for i in readable], sequence, cfg.offset)
    ]
    site_method = next((m for m in methods if m not in mut.WHOLE_SEQUENCE_METHODS), None)
    whole = [m for m in methods if m in mut.WHOLE_SEQUENCE_METHODS]
    if site_method is not None and not whole:  # indels only the whole-sequence methods score
        flagged = {i for i, _ in problems}
        problems += [
            (i, mut.indel_problem(m, sequence, site_method))
            for i, m in enumerate(parsed)
            if isinstance(m, mut.Indel) and i not in flagged
        ]
    substitutions = [m for m in parsed if m and not isinstance(m, mut.Indel)]
    problems.sort()
    bad_rows = {i for i, _ in problems}
    good = [i for i in range(len(rows)) if i not in bad_rows]
    kinds = [mut.problem_kind(p) for _, p in problems]
    mismatched = kinds.count("wild type differs")
    # rows past the sequence's ends are a crop (a domain of a longer protein), not a mismatch
    in_range = len(readable) - kinds.count("position outside the sequence")
    hint = _offset_hint(substitutions, sequence, cfg.offset) if mismatched else ""
    if cfg.skip_mismatched and good and mismatched > in_range / 2:
        # most rows naming another residue: a wrong numbering or protein, not a few bad rows
        wild_type = "the sequence given" if source == "sequence=" else source
        raise DataError(
            f"{mismatched:,} of the {in_range:,} mutants inside the sequence name a wild-type "
            f"residue that {wild_type} does not have there (numbered from offset={cfg.offset}): "
            f"a wrong offset= or record=, not rows to skip{hint}",
            path=cfg.mutations,
        )
    if problems and (not cfg.skip_mismatched or not good):
        lines = [f"line {line_of[i]}: {p}" for i, p in problems[:3]]
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        hint = _offset_hint(substitutions, sequence, cfg.offset)
        n = f"{len(rows):,}"
        what = (
            f"none of the {n} mutants fit"
            if not good
            else (f"{len(problems):,} of {n} mutants do not fit")
        )
        raise DataError(
            f"{what} the wild type ({source}, numbered from offset={cfg.offset}): "
            f"{'; '.join(lines)}{more}{hint}"
            + ("" if not good else " (skip_mismatched=true leaves such rows unscored)"),
            path=cfg.mutations,
        )
    t0 = time.perf_counter()
    good_mutants = [parsed[i] for i in good]
    scores = mut.score_mutants(
        model,
        alphabet,
        sequence,
        good_mutants,
        methods=methods,  # type: ignore[arg-type]
        max_tokens=max_tokens(model, None, _trained_length(meta)),
        toks_per_batch=cfg.toks_per_batch,
        progress=True,
        packed=_trained_packed(meta),
    )
    elapsed = time.perf_counter() - t0
    counts = meta.get("data", {}).get("unigram_counts")
    columns = {mut.column_name(m): v for m, v in scores.items()}
    columns.update(
        mut.baseline_columns(
            good_mutants,
            alphabet,  # type: ignore[arg-type]
            None if counts is None else np.asarray(counts),
            wild_type=sequence,
        )
    )
    names = {name: name if name not in fields else f"{name}_pp" for name in columns}
    full = {names[k]: np.full(len(rows), np.nan) for k in columns}
    for name, values in columns.items():
        full[names[name]][good] = values
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=[*fields, *full], lineterminator="\n", delimiter=delimiter
    )
    writer.writeheader()
    for i, row in enumerate(rows):
        extra = {k: ("" if np.isnan(v[i]) else f"{v[i]:.6g}") for k, v in full.items()}
        writer.writerow({**row, **extra})
    summary: dict[str, Any] = {
        "checkpoint": str(cfg.checkpoint),
        "mutations": str(cfg.mutations),
        "wild_type": source,
        "wild_type_sequence": sequence,
        "length": len(sequence),
        "offset": cfg.offset,
        "methods": methods,
        "attention_kind": model.config.kind_label,
        "mutants": len(rows),
        "scored": len(good),
        "unscored": [{"line": line_of[i], "problem": p} for i, p in problems[:100]],
        "seconds": round(elapsed, 2),
        "out": str(out),
    }
    text = (
        f"scored {len(good):,} of {len(rows):,} mutants ({', '.join(methods)}) of {source} in "
        f"{elapsed:.1f} s -> {out}"
    )
    if problems:
        rows_word = "row" if len(problems) == 1 else "rows"
        by_kind = Counter(kinds)
        text += f"\n  {len(problems):,} {rows_word} left unscored: " + ", ".join(
            f"{kind}: {n:,}" for kind, n in by_kind.most_common()
        )
        firsts = {}
        for i, p in problems:
            firsts.setdefault(mut.problem_kind(p), f"line {line_of[i]}: {p}")
        text += "".join(f"\n    first {kind}: {where}" for kind, where in firsts.items())
        summary["unscored_by_reason"] = dict(by_kind)
        summary["unscored_total"] = len(problems)
        if hint:
            text += hint.replace("; ", "\n  ", 1)
    if blank_rows:
        text += f"\n  {blank_rows:,} row{'' if blank_rows == 1 else 's'} of empty fields left out"
        summary["blank_rows"] = blank_rows
    rare = sorted({c for c in sequence if c not in STANDARD_AMINO_ACIDS})
    if rare:
        text += (
            f"\n  the wild type holds {', '.join(rare)} (not one of the 20 amino acids): "
            "scored as the model reads them, the unknown-residue tokens"
        )
        summary["wild_type_nonstandard"] = rare
    indels = [i for i in good if isinstance(parsed[i], mut.Indel)]
    if indels:
        text += (
            f"\n  {len(indels):,} {'indel' if len(indels) == 1 else 'indels'} (whole sequences "
            "of another length than the wild type) scored by their whole sequence; "
            f"{', '.join([*(mut.column_name(m) for m in methods if m not in whole), 'blosum62'])}"
            " blank for them (no substitution score); a whole-sequence score sums one term "
            "per residue, so a deletion loses terms and an insertion adds them: compare "
            "indels of one length with each other"
        )
        summary["indels"] = len(indels)
    synonymous = [
        i
        for i in good
        if parsed[i]
        and not isinstance(parsed[i], mut.Indel)
        and all(x.wt == x.mt for x in parsed[i])  # type: ignore[union-attr]
    ]
    if synonymous:
        i = synonymous[0]
        text += (
            f"\n  {len(synonymous):,} synonymous {'row' if len(synonymous) == 1 else 'rows'} "
            f"(first: line {line_of[i]}, {rows[i].get(cfg.mutation_col)}) scored 0 in every "
            "column, as the wild type"
        )
        summary["synonymous"] = len(synonymous)
    if counts is None:
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
    seen: dict[tuple, int] = {}
    repeats = []
    for i in good:
        m = parsed[i]
        key = m.sequence if isinstance(m, mut.Indel) else tuple(sorted((x.index, x.mt) for x in m))  # type: ignore[union-attr]
        if key in seen:
            repeats.append((i, seen[key]))
        seen.setdefault(key, i)
    if repeats:
        i, first = repeats[0]
        text += (
            f"\n  {len(repeats):,} {'row repeats' if len(repeats) == 1 else 'rows repeat'} an "
            f"earlier mutant (first: line {line_of[i]} "
            f"repeats line {line_of[first]}): scored again, the same"
        )
        summary["repeated_mutants"] = len(repeats)
    fitness = None
    if cfg.fitness_col:
        fitness = np.array([_float(r.get(cfg.fitness_col), decimal_comma) for r in rows])
        rho = {k: mut.spearman(v, fitness) for k, v in full.items()}
        n_pairs = int(np.sum(np.isfinite(fitness[good]))) if good else 0
        # a column blank for some rows (a site method beside indels) correlates over fewer
        column_pairs = {
            k: int(np.sum(np.isfinite(v) & np.isfinite(fitness))) for k, v in full.items()
        }
        no_value = len(good) - n_pairs
        summary.update(
            {
                "fitness_col": cfg.fitness_col,
                "spearman": rho,
                "pairs": n_pairs,
                "pairs_by_column": column_pairs,
                "rows_without_numeric_fitness": no_value,
            }
        )
        if n_pairs > 1 and np.ptp(fitness[good][np.isfinite(fitness[good])]) == 0:
            text += f"\n  every {cfg.fitness_col} value is the same: no correlation is defined"
        text += "\n  Spearman with " + cfg.fitness_col + f" (n={n_pairs:,}"
        if n_pairs < 30:  # the null's spread is about 1/sqrt(n - 1)
            text += f"; few pairs: ±{1 / max(1, n_pairs - 1) ** 0.5:.2f} by chance"
        if no_value:
            example = next(
                (
                    rows[i].get(cfg.fitness_col)
                    for i in good
                    if not np.isfinite(fitness[i]) and (rows[i].get(cfg.fitness_col) or "").strip()
                ),
                None,
            )
            shown = f", e.g. {example!r}" if example is not None else ", all empty"
            text += f"; {no_value:,} scored rows without a numeric value{shown})"
        else:
            text += ")"
        text += ": " + ", ".join(
            f"{k} {'n/a' if r is None else f'{r:+.3f}'}"
            + (f" (n={column_pairs[k]:,})" if column_pairs[k] != n_pairs else "")
            for k, r in rho.items()
        )
    refuse_appeared(was_absent, "out", "scoring")
    write_text_atomic(out, buf.getvalue())
    summary_path, plot_path = list(side)
    write_text_atomic(summary_path, json.dumps(summary, indent=2) + "\n")
    if fitness is not None:
        from protein_performer.analysis.figures import score_scatter_figure

        score_scatter_figure(
            full,
            fitness,
            cfg.fitness_col,
            summary["spearman"],
            plot_path.with_suffix(""),
            formats=("png",),
            title=f"{len(good):,} mutants of {source} · {checkpoint_label(cfg.checkpoint)} "
            f"({model.config.kind_label})",
        )
    elif plot_path.exists() and cfg.overwrite:
        plot_path.unlink()  # a plot of an earlier run (checked to be ours) would mislead
    text += f"\n  summary: {summary_path}" + (f", plot: {plot_path}" if fitness is not None else "")
    return CommandResult(summary, text)
