"""aa-similarity: amino-acid similarity matrices from attention, embeddings and substitution statistics, compared with BLOSUM62, with their figure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from protein_performer.analysis.cross_homolog import FORMAT as CROSS_FORMAT
from protein_performer.analysis.cross_homolog import (
    cross_homolog_text,
    cross_homolog_view,
    write_view,
)
from protein_performer.analysis.figures import similarity_figure
from protein_performer.analysis.homolog_pairs import read_homolog_pairs
from protein_performer.analysis.inputs import (
    checkpoint_label,
    max_tokens,
    read_proteins,
    split_filter,
)
from protein_performer.analysis.similarity import (
    SimilarityResult,
    aa_similarity,
    blosum62,
    sample_indices,
    sample_proteins,
)
from protein_performer.cli.commands.checkpoint_choice import with_context_checkpoint
from protein_performer.cli.commands.common import (
    CommandResult,
    matrix_csv,
    prepare_figure_command,
    staged_output,
)
from protein_performer.config.schema import SimilarityConfig
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS
from protein_performer.data.encoding import EncodeCounts
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.checkpoints import trained_length
from protein_performer.utils.outputs import dir_with_manifest

SIMILARITY_FORMAT = "protein-performer-aa-similarity/1"


SIMILARITY_JSON = "similarity.json"


SIMILARITY_FILES = {
    *(
        f"{name}.csv"
        for name in ("attention", "attention_null", "flow", "substitution", "embedding", "blosum62")
    ),
    "similarity.png",
    "similarity.pdf",
}


is_similarity_dir = dir_with_manifest(SIMILARITY_JSON, SIMILARITY_FORMAT, SIMILARITY_FILES)


CROSS_JSON = "cross_homolog.json"
is_cross_dir = dir_with_manifest(
    CROSS_JSON,
    CROSS_FORMAT,
    {"cross_homolog.png", "cross_homolog.pdf", "best_head.csv", "ceiling.csv"},
)


def _ours(path: Path) -> bool:
    return is_similarity_dir(path) or is_cross_dir(path)


#: the window of a model with rotary positions (no table that bounds it) in context mode
ROTARY_CONTEXT_TOKENS = 2048


def run_cross_homolog(cfg: SimilarityConfig) -> CommandResult:
    """``aa-similarity context=HOMOLOGS``: the cross-homolog view (each protein of ``fasta``
    after its homologs; attention from its masked positions into them, as log-odds)."""
    cfg = with_context_checkpoint(cfg)
    fasta, outdir, model, alphabet, _, layers, heads = prepare_figure_command(
        cfg, _ours, "similarity directory"
    )
    if len(fasta) != 1:
        raise ConfigError("context= takes one fasta= file (the proteins that were searched)")
    pairs = read_homolog_pairs(
        fasta[0], cfg.context, alphabet, max_homologs=cfg.context_max_homologs,
        max_identity=cfg.context_max_identity, invalid=cfg.invalid,
    )  # fmt: skip
    if cfg.n_proteins is not None:
        pairs = [pairs[int(i)] for i in sample_indices(len(pairs), cfg.n_proteins, cfg.seed)]
    length = cfg.max_length or max_tokens(model, None) or ROTARY_CONTEXT_TOKENS
    theta = 0.3 if cfg.threshold == "auto" else float(cfg.threshold)
    result = cross_homolog_view(
        model, alphabet, pairs, max_length=length, threshold=theta, mask_prob=cfg.mask_prob,
        seed=cfg.seed, layers=layers, heads=heads, progress=True,
    )  # fmt: skip
    label = checkpoint_label(cfg.checkpoint)
    title = f"{label} ({model.config.kind_label}) · {len(pairs):,} proteins with homologs"
    # what made it, as similarity.json and heads.json say
    result = {
        "checkpoint": str(cfg.checkpoint),
        "attention_kind": model.config.kind_label,
        "fasta": str(fasta[0]),
        "context": str(cfg.context),
        **result,
    }
    with staged_output(cfg, outdir, _ours, "similarity directory") as work:
        write_view(result, work / CROSS_JSON, title=title)
        m = result["matrices"]
        best = m["head_names"].index(result["best_head"])
        (work / "best_head.csv").write_text(matrix_csv(m["mass_log_odds"][best]), "utf-8")
        (work / "ceiling.csv").write_text(matrix_csv(result["ceiling"]["log_odds"]), "utf-8")
    text = cross_homolog_text(result, theta, length) + "\n  " + homolog_counts_text(pairs)
    read = sum(len(h) for _, h in pairs)
    if result["homologs"] < read:
        text += f" ({result['homologs']:,} of these {read:,} fit the windows)"
    summary = {k: v for k, v in result.items() if k != "matrices"}
    summary["homologs_per_protein"] = {q.id: len(h) for q, h in pairs}
    return CommandResult({"out": str(outdir), **summary}, text + f"\nwritten to {outdir}")


def homolog_counts_text(pairs: Sequence[tuple[Any, Sequence[Any]]], limit: int = 12) -> str:
    """``homologs read per protein: P1 3, P2 1, ...`` for ``(protein, homologs)`` pairs, the
    first ``limit`` in order, then how many more (all of them in the JSON)."""
    shown = [f"{q.id} {len(h):,}" for q, h in pairs[:limit]]
    more = len(pairs) - limit
    tail = f", ... {more:,} more (--json: homologs_per_protein)" if more > 0 else ""
    return "homologs read per protein: " + ", ".join(shown) + tail


def run_aa_similarity(cfg: SimilarityConfig) -> CommandResult:
    if cfg.context is not None:
        return run_cross_homolog(cfg)
    fasta, outdir, model, alphabet, meta, layers, heads = prepare_figure_command(
        cfg, _ours, "similarity directory"
    )
    keep = (
        None if cfg.split is None else split_filter(cfg.split, meta.get("data", {}), cfg.clusters)
    )
    counts = EncodeCounts()
    # the run's own split: of the records it read (its data.max_records caps before the split)
    run_cap = meta.get("data", {}).get("max_records") if cfg.split else None
    proteins = read_proteins(
        fasta,
        alphabet,
        invalid=cfg.invalid,
        strip_gaps=cfg.strip_gaps,
        keep=keep,
        counts=counts,
        max_records=run_cap,
    )
    limit = max_tokens(model, None, trained_length(meta))
    max_residues = cfg.max_residues if limit is None else min(cfg.max_residues, limit - 2)
    capped = max_residues < cfg.max_residues
    sample = sample_proteins(proteins, cfg.n_proteins, max_residues, cfg.seed)
    standard = np.array([alphabet.index(a) for a in STANDARD_AMINO_ACIDS])
    if not any(np.isin(p.residues, standard).any() for p in sample):  # before any model work
        raise DataError(
            f"no protein to analyse: the {len(sample):,} drawn have no standard residue "
            "(only X or other non-standard letters)",
            path=", ".join(map(str, fasta)),
        )
    result = aa_similarity(
        model,
        sample,
        alphabet,
        threshold=cfg.threshold,
        min_arcs=cfg.min_arcs,
        layers=layers,
        heads=heads,
        mask_prob=cfg.mask_prob,
        seed=cfg.seed,
        progress=True,
    )
    no_standard = len(sample) - result.info["proteins"]  # all X / non-standard residues
    label = checkpoint_label(cfg.checkpoint)
    summary = {
        "format": SIMILARITY_FORMAT,
        "proteins_without_standard_residues": no_standard,
        "checkpoint": str(cfg.checkpoint),
        "attention_kind": model.config.kind_label,
        "fasta": fasta,
        "split": cfg.split,
        "proteins_available": len(proteins),
        "input_changes": counts.changes(),
        "max_residues": max_residues,
        "layers": layers,
        "heads": heads,
        **result.to_dict(),
    }
    names = (
        ", ".join(Path(f).name for f in fasta)
        if isinstance(fasta, (list, tuple))
        else Path(fasta).name
    )
    if len(names) > 60:
        names = names[:57] + "..."
    info = result.info
    title = (
        f"{label} ({model.config.kind_label}) · {names}"
        + (f" ({cfg.split} split)" if cfg.split else "")
        + f" · {info['proteins']:,} proteins, {info['residues']:,} residues · "
        f"attention θ = {info['threshold']}, {info['heads_kept']} of {info['heads_total']} heads"
    )
    with staged_output(cfg, outdir, _ours, "similarity directory") as work:
        _write_similarity(work, result, summary, title)
    text = result.format()
    if capped:
        text += f"\n  max_residues={cfg.max_residues} capped at {max_residues} (the model's window)"
    if counts.changes():
        text += f"\n  input: {counts.changes()}"
    if no_standard:
        text += (
            f"\n  {no_standard:,} of the {len(sample):,} proteins drawn have no standard residue "
            "and were left out"
        )
    return CommandResult({"out": str(outdir), **summary}, text + f"\nwritten to {outdir}")


def _write_similarity(work: Path, result: SimilarityResult, summary: dict, title: str) -> None:
    ref = blosum62()
    (work / "blosum62.csv").write_text(matrix_csv(ref), encoding="utf-8")
    for name, m in result.matrices.items():
        if m is not None:
            (work / f"{name}.csv").write_text(matrix_csv(m), encoding="utf-8")
    i = result.info
    notes = {}
    if result.matrices.get("attention") is None:
        notes["attention"] = (
            f"no head has ≥ {i['min_arcs']} arcs\nwith weight ≥ θ = {i['threshold']}\n"
            f"(try threshold={i['threshold'] / 2:g}\nor min_arcs={max(1, i['min_arcs'] // 4)})"
        )
    if result.matrices.get("substitution") is None and i.get("causal"):
        notes["substitution"] = "a causal model never\npredicts at a masked site"
    similarity_figure(result.matrices, result.r, ref, work / "similarity", title=title, notes=notes)
    (work / SIMILARITY_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
