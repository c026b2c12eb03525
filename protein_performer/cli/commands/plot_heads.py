"""plot-heads: the layer x head attention figure of a protein (the paper's BPT1_BOVIN figure), head ranking and the alignment head of a pair."""

from __future__ import annotations

import json
from pathlib import Path

from protein_performer.analysis.figures import (
    alignment_figure,
    head_grid_figure,
    head_ranking_figure,
)
from protein_performer.analysis.head_view import (
    HeadsView,
    head_view,
    heads_summary,
    heads_title,
    read_heads_window,
    window_notes,
)
from protein_performer.analysis.inputs import checkpoint_label, max_tokens
from protein_performer.cli.commands.common import (
    CommandResult,
    prepare_figure_command,
    staged_output,
)
from protein_performer.cli.commands.generate import several_records
from protein_performer.config.schema import PlotHeadsConfig
from protein_performer.errors import ConfigError
from protein_performer.model.checkpoints import trained_length
from protein_performer.utils.outputs import dir_with_manifest

HEADS_FORMAT = "protein-performer-plot-heads/1"


HEADS_JSON = "heads.json"


HEADS_FILES = {
    f"{stem}.{ext}"
    for stem in ("heads", "heads_zoom", "head_ranking", "alignment_head")
    for ext in ("png", "pdf")
}


is_heads_dir = dir_with_manifest(HEADS_JSON, HEADS_FORMAT, HEADS_FILES)


def run_plot_heads(cfg: PlotHeadsConfig) -> CommandResult:
    fasta, outdir, model, alphabet, meta, layers, heads = prepare_figure_command(
        cfg, is_heads_dir, "figure directory"
    )
    limit = max_tokens(model, cfg.max_length, trained_length(meta))
    if cfg.homologs is not None and not cfg.join:
        raise ConfigError("homologs= names records of a joined window: add join=true")
    window = read_heads_window(
        fasta,
        alphabet,
        model,
        limit,
        record=cfg.record,
        join=cfg.join,
        homologs=cfg.homologs,
        truncate=cfg.truncate,
        invalid=cfg.invalid,
        strip_gaps=cfg.strip_gaps,
    )
    view = head_view(model, alphabet, window, layers, heads)
    kind = model.config.kind_label
    title = heads_title(view, checkpoint_label(cfg.checkpoint), kind)
    summary = heads_summary(view, format=HEADS_FORMAT, checkpoint=str(cfg.checkpoint), kind=kind)
    with staged_output(cfg, outdir, is_heads_dir, "figure directory") as work:
        _draw(cfg, view, work, title)
        (work / HEADS_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    protein, uniform, uniform_name = view.protein, view.uniform, view.uniform_name
    lowest = min(view.per_head, key=lambda h: h["entropy"])
    text = (
        f"{protein.id}: {len(layers)} layers × {len(heads)} heads plotted to {outdir}; "
        f"lowest-entropy head L{lowest['layer']}H{lowest['head']}: {lowest['entropy']:.2f} nats "
        f"({uniform_name}: {uniform['entropy']:.2f}), mean distance "
        f"{lowest['distance']:.1f} residues ({uniform_name}: {uniform['distance']:.1f})"
    )
    if cfg.zoom and cfg.zoom >= protein.sequence_length:
        text += f" (no zoom figure: zoom={cfg.zoom} covers all {protein.sequence_length} residues)"
    if cfg.record is None and not cfg.join and several_records(fasta):
        text += f"\n  the first usable record of {window.names}; record=ID plots another"
    text += window_notes(view, limit)
    return CommandResult({"out": str(outdir), **summary}, text)


def _draw(cfg: PlotHeadsConfig, view: HeadsView, work: Path, title: str) -> None:
    """The figures: the grid (and its zoom), the head ranking, and the alignment head."""
    att, layers, heads, n = view.att, view.layers, view.heads, view.protein.sequence_length
    head_grid_figure(
        att, layers, heads, view.sequence, work / "heads", shared_scale=cfg.shared_scale,
        title=title,
    )  # fmt: skip
    if cfg.zoom and cfg.zoom < n:
        head_grid_figure(
            att,
            layers,
            heads,
            view.sequence,
            work / "heads_zoom",
            zoom=cfg.zoom,
            shared_scale=cfg.shared_scale,
            title=f"{title}, first {min(cfg.zoom, n)} residues",
        )
    head_ranking_figure(
        view.stats, layers, heads, n, work / "head_ranking", title=title, causal=view.causal
    )
    best = view.best_aligned
    if best is not None:
        segments = view.window.segments
        assert segments is not None
        li, hi = layers.index(best["layer"]), heads.index(best["head"])
        alignment_figure(
            att[li, hi],
            segments[-1],
            [segments[i] for i in view.window.subjects],
            view.queries,
            view.keys,
            work / "alignment_head",
            title=f"L{best['layer']}H{best['head']}, the head most on the "
            f"aligned residues · {title}",
        )
