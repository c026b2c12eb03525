"""score: mutants of a deep mutational scan scored by the model (masked marginals, wild-type marginals, pseudo-likelihood) beside BLOSUM62, with Spearman against the fitness."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from protein_performer.analysis.dms import scan as scan_lib
from protein_performer.analysis.dms.homologs import read_scan_context, single_protein_model
from protein_performer.analysis.dms.notes import context_notes
from protein_performer.analysis.dms.table import (
    check_fitness_column,
    read_mutations_csv,
    scores_csv,
    wild_type_of,
    writes_decimal_comma,
)
from protein_performer.analysis.extraction import load_for_analysis
from protein_performer.analysis.inputs import checkpoint_label, max_tokens
from protein_performer.cli.commands.checkpoint_choice import (
    SCORE_CONTEXT_CHECKPOINTS,
    context_checkpoint_note,
    with_context_checkpoint,
)
from protein_performer.cli.commands.common import CommandResult, trained_packed
from protein_performer.config.schema import ScoreConfig
from protein_performer.errors import DataError
from protein_performer.model.checkpoints import trained_length
from protein_performer.utils.atomic import write_text_atomic
from protein_performer.utils.outputs import (
    absent,
    as_written,
    check_output_file,
    refuse_appeared,
)


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
    from protein_performer.analysis.dms import marginals as mut
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


def _check_outputs(cfg: ScoreConfig) -> tuple[Path, Path, Path, bool]:
    """``out=`` checked with its side outputs (``OUT.json``, ``OUT.png``), before the model
    is loaded: ``(csv, summary, plot, whether none of them existed)``."""
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
    return out, out.with_suffix(".json"), out.with_suffix(".png"), was_absent


def run_score(cfg: ScoreConfig) -> CommandResult:
    cfg = with_context_checkpoint(cfg, SCORE_CONTEXT_CHECKPOINTS)
    methods = _score_methods(cfg)  # before the mutations file: no fix there helps
    column = cfg.sequence_col or cfg.mutation_col
    fields, rows, delimiter, line_of, blank_rows = read_mutations_csv(
        cfg.mutations, column, "sequence_col" if cfg.sequence_col else "mutation_col"
    )
    decimal_comma = delimiter == ";"  # a European spreadsheet's export: 0,88 is 0.88
    if cfg.fitness_col is not None:
        check_fitness_column(fields, rows, cfg.fitness_col, decimal_comma, cfg.mutations)
    out, summary_path, plot_path, was_absent = _check_outputs(cfg)
    model, alphabet, meta = load_for_analysis(
        cfg.checkpoint, cfg.device, cfg.attention, cfg.nb_features
    )
    sequence, source, record_id = wild_type_of(
        alphabet, sequence=cfg.sequence, fasta=cfg.fasta, record=cfg.record
    )
    window = max_tokens(model, None, trained_length(meta))
    scan = scan_lib.read_scan(
        rows,
        line_of,
        sequence,
        source,
        column=column,
        from_sequences=bool(cfg.sequence_col),
        offset=cfg.offset,
        methods=methods,
        window=window,
    )
    scan_lib.check_scan(scan, skip_mismatched=cfg.skip_mismatched, path=cfg.mutations)
    context = None  # the homologs, read (and their profile built) before the model scores
    if cfg.context is not None:
        context = read_scan_context(
            cfg.context,
            alphabet,
            sequence,
            record_id,
            cfg.context_max_homologs,
            min_coverage=cfg.context_min_coverage,
            seed=cfg.seed,
            offset=cfg.offset,
        )
    counts = meta.get("data", {}).get("unigram_counts")
    columns, elapsed = scan_lib.score_scan(
        model,
        alphabet,
        scan,
        counts=counts,
        max_tokens=window,
        toks_per_batch=cfg.toks_per_batch,
        packed=trained_packed(meta),
        context=context,
        context_length=cfg.context_tokens or window or trained_length(meta),
        context_options={
            "sampling": cfg.context_sampling,
            "samples": cfg.context_samples,
            "window_homologs": cfg.context_window_homologs,
            "max_identity": cfg.context_max_identity,
            "seed": cfg.seed,
            "retrieval": cfg.context_retrieval,
            "crop": cfg.context_crop,
        },
    )
    full = scan_lib.table_columns(columns, fields, len(rows), scan.good)
    summary, text = scan_lib.scan_summary(
        scan,
        checkpoint=str(cfg.checkpoint),
        mutations=str(cfg.mutations),
        attention_kind=model.config.kind_label,
        seconds=elapsed,
        out=str(out),
    )
    text += scan_lib.unscored_notes(scan, summary, blank_rows)
    text += scan_lib.variant_notes(
        scan, summary, has_unigram=counts is not None, window=window, mutation_col=cfg.mutation_col
    )
    if context is not None:
        text += context_notes(context, summary, causal=model.causal)
        text += context_checkpoint_note(cfg)
        if (problem := single_protein_model(model)) is not None:
            text += f"\n  note: {problem} (checkpoint=homologs-columns-deep)"
    fitness = None
    if cfg.fitness_col:
        fitness = scan_lib.fitness_values(scan, cfg.fitness_col, decimal_comma)
        text += scan_lib.fitness_notes(scan, full, fitness, cfg.fitness_col, summary)
    refuse_appeared(was_absent, "out", "scoring")
    # the scores written as its measured values are
    comma = decimal_comma and writes_decimal_comma(rows, cfg.fitness_col)
    write_text_atomic(out, scores_csv(fields, rows, full, delimiter, comma))
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
            title=f"{len(scan.good):,} mutants of {source} · {checkpoint_label(cfg.checkpoint)} "
            f"({model.config.kind_label})",
        )
    elif plot_path.exists() and cfg.overwrite:
        plot_path.unlink()  # a plot of an earlier run (checked to be ours) would mislead
    text += f"\n  summary: {summary_path}" + (f", plot: {plot_path}" if fitness is not None else "")
    return CommandResult(summary, text)
