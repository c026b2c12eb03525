"""plot-heads: the layer x head attention figure of a protein (the paper's BPT1_BOVIN figure), head ranking and the alignment head of a pair."""

from __future__ import annotations

import functools
import json

import numpy as np

from protein_performer.analysis.alignment import (
    aligned_mass,
    alignment_pairs,
    cross_protein_mass,
    homolog_segments,
)
from protein_performer.analysis.extraction import attention_maps
from protein_performer.analysis.figures import (
    alignment_figure,
    head_grid_figure,
    head_ranking_figure,
    head_stats,
    uniform_stats,
)
from protein_performer.analysis.inputs import (
    checkpoint_label,
    join_proteins,
    max_tokens,
    read_proteins,
)
from protein_performer.cli.commands.common import CommandResult, _prepare, _staged, _trained_length
from protein_performer.cli.commands.generate import _several_records
from protein_performer.config.schema import PlotHeadsConfig
from protein_performer.errors import ConfigError, DataError
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
    fasta, outdir, model, alphabet, meta, layers, heads = _prepare(
        cfg, is_heads_dir, "figure directory"
    )
    limit = max_tokens(model, cfg.max_length, _trained_length(meta))
    if cfg.homologs is not None and not cfg.join:
        raise ConfigError("homologs= names records of a joined window: add join=true")
    read = functools.partial(
        read_proteins,
        fasta,
        alphabet,
        max_tokens=None if cfg.join else limit,
        truncate=cfg.truncate,
        invalid=cfg.invalid,
        strip_gaps=cfg.strip_gaps,
    )
    record = None if cfg.record is None else [cfg.record]
    if cfg.join:
        proteins = read()
        if record is not None:  # the record analysed goes last, after every other one
            target = read(ids=record)[0]
            rest = [p for p in proteins if p.id != target.id]
            proteins = [*rest, target]
    else:
        proteins = read(ids=record, max_kept=1 if record is None else None)
    segments, subjects = None, []
    names = ", ".join(map(str, fasta)) if isinstance(fasta, (list, tuple)) else str(fasta)
    if cfg.join and len(proteins) < 2:
        raise DataError("join=true puts several proteins in one window; found one", path=names)
    if cfg.join:
        read_ids = [p.id for p in proteins]
        protein, segments, proteins = join_proteins(
            proteins, alphabet, limit, truncate=cfg.truncate, model=model
        )
        subjects = homolog_segments(proteins, cfg.homologs, read_ids, names)
    else:
        protein = proteins[0]
    att = attention_maps(model, protein, alphabet, layers=layers, heads=heads)
    sequence = alphabet.decode(protein.residues, keep_specials=True).replace("<sep>", "|")
    stats = head_stats(att)
    uniform = uniform_stats(protein.sequence_length, model.causal)
    uniform_name = "uniform causal" if model.causal else "uniform"
    aligned_uniform, queries, keys = None, None, None
    if segments is not None:
        stats["cross_protein"] = cross_protein_mass(att, segments)
        if subjects:
            picked = [segments[i] for i in subjects] + [segments[-1]]
            parts = [alphabet.decode(protein.residues[a:b]) for a, b in picked]
            queries, keys = alignment_pairs(picked, parts)
            if len(queries):
                stats["aligned"], aligned_uniform = aligned_mass(
                    att, queries, keys, causal=model.causal
                )
    kind = model.config.kind_label
    size = (
        f"{protein.sequence_length} residues"
        if segments is None
        else f"{len(segments)} proteins, {sum(b - a for a, b in segments)} residues"
    )
    if segments is None and protein.cropped:  # truncate=true kept the protein's start
        whole = protein.sequence_length + protein.cropped
        size = f"residues 1-{protein.sequence_length:,} of {whole:,}"
    name = protein.id if len(protein.id) <= 60 else protein.id[:57] + "..."  # a readable title
    title = f"{name} ({size}) · {checkpoint_label(cfg.checkpoint)} ({kind})"
    per_head = [
        {"layer": layer, "head": head, **{k: float(v[i, j]) for k, v in stats.items()}}
        for i, layer in enumerate(layers)
        for j, head in enumerate(heads)
    ]
    summary = {
        "format": HEADS_FORMAT,
        "checkpoint": str(cfg.checkpoint),
        "attention_kind": kind,
        "record": protein.id,
        "length": protein.sequence_length,
        "cropped": protein.cropped,
        "layers": layers,
        "heads": heads,
        "objective": "causal" if model.causal else "mlm",
        "uniform_entropy": uniform["entropy"],
        "uniform_distance": uniform["distance"],
        # the figure shows the weights as they are (<cls>/<eos> columns left out)
        "stats_of": "each query's weights among residues, renormalised to sum to 1",
        "heads_stats": per_head,
    }
    if segments is not None:
        summary["joined"] = [
            {"id": p.id, "start": a, "stop": b}
            for p, (a, b) in zip(proteins, segments, strict=True)
        ]
        summary["homologs"] = [proteins[i].id for i in subjects]
        summary["aligned_residues"] = 0 if queries is None else len(np.unique(queries))
        summary["aligned_uniform"] = aligned_uniform
    best_aligned = max(per_head, key=lambda h: h["aligned"]) if aligned_uniform else None
    with _staged(cfg, outdir, is_heads_dir, "figure directory") as work:
        head_grid_figure(
            att, layers, heads, sequence, work / "heads", shared_scale=cfg.shared_scale, title=title
        )
        if cfg.zoom and cfg.zoom < protein.sequence_length:
            head_grid_figure(
                att,
                layers,
                heads,
                sequence,
                work / "heads_zoom",
                zoom=cfg.zoom,
                shared_scale=cfg.shared_scale,
                title=f"{title}, first {min(cfg.zoom, protein.sequence_length)} residues",
            )
        head_ranking_figure(
            stats,
            layers,
            heads,
            protein.sequence_length,
            work / "head_ranking",
            title=title,
            causal=model.causal,
        )
        if best_aligned is not None:
            li, hi = layers.index(best_aligned["layer"]), heads.index(best_aligned["head"])
            alignment_figure(
                att[li, hi],
                segments[-1],
                [segments[i] for i in subjects],
                queries,
                keys,
                work / "alignment_head",
                title=f"L{best_aligned['layer']}H{best_aligned['head']}, the head most on the "
                f"aligned residues · {title}",
            )
        (work / HEADS_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    lowest = min(per_head, key=lambda h: h["entropy"])
    text = (
        f"{protein.id}: {len(layers)} layers × {len(heads)} heads plotted to {outdir}; "
        f"lowest-entropy head L{lowest['layer']}H{lowest['head']}: {lowest['entropy']:.2f} nats "
        f"({uniform_name}: {uniform['entropy']:.2f}), mean distance "
        f"{lowest['distance']:.1f} residues ({uniform_name}: {uniform['distance']:.1f})"
    )
    if cfg.zoom and cfg.zoom >= protein.sequence_length:
        text += f" (no zoom figure: zoom={cfg.zoom} covers all {protein.sequence_length} residues)"
    if cfg.record is None and not cfg.join and _several_records(fasta):
        text += f"\n  the first usable record of {names}; record=ID plots another"
    if segments is None and protein.cropped:
        text += (
            f"\n  truncate=true: the figures show residues 1-{protein.sequence_length:,} of "
            f"{protein.sequence_length + protein.cropped:,} (the model's window)"
        )
    if segments is not None:
        top = max(per_head, key=lambda h: h["cross_protein"])
        dropped = len(read_ids) - len(segments)
        if protein.cropped:
            text += (
                f"\n  truncate=true cut the first {protein.cropped:,} positions of the window to fit "
                f"{limit:,} tokens"
                + (f": {dropped} of {len(read_ids)} proteins left out entirely" if dropped else "")
            )
        others = sum(b - a for a, b in segments[:-1])  # keys on the other proteins
        share = others / att.shape[-1]
        if model.causal:  # a query sees the keys up to itself
            start, stop = segments[-1]
            share = float(np.mean([others / (i + 1) for i in range(start, stop)]))
        text += (
            f"\n  joined {len(segments)} proteins; the last one's queries put "
            f"{top['cross_protein']:.0%} of their attention on the others in "
            f"L{top['layer']}H{top['head']} (the most of any head; {uniform_name} attention: "
            f"{share:.0%})"
        )
    if best_aligned is not None:
        text += (
            f"\n  {summary['aligned_residues']} of its residues align to a homolog (BLOSUM62); "
            f"L{best_aligned['layer']}H{best_aligned['head']} puts "
            f"{best_aligned['aligned']:.1%} of their attention on the aligned residues "
            f"({uniform_name} attention: {aligned_uniform:.1%}); figure alignment_head.png"
        )
    return CommandResult({"out": str(outdir), **summary}, text)
