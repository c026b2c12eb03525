"""The analysis commands (``extract``, ``aa-similarity``, ``plot-heads``) as library calls on
their plain configs; the CLI and notebooks call these, so they cannot drift apart.

Every command checks its output directory and reads its inputs before computing, writes into a
temporary folder renamed at the end (a failure or Ctrl-C leaves nothing), and returns a result
with ``format()`` (text) and ``to_dict()`` (JSON).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import itertools
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from protein_performer.analysis.alignment import aligned_mass, alignment_pairs
from protein_performer.analysis.extraction import (
    attention_maps,
    extract,
    is_extract_dir,
    load_for_analysis,
)
from protein_performer.analysis.figures import (
    alignment_figure,
    head_grid_figure,
    head_ranking_figure,
    head_stats,
    similarity_figure,
    uniform_stats,
)
from protein_performer.analysis.inputs import (
    Protein,
    checkpoint_label,
    join_proteins,
    max_tokens,
    parse_indices,
    read_proteins,
    record_names,
    split_filter,
)
from protein_performer.analysis.similarity import (
    AA_ORDER,
    SimilarityResult,
    aa_similarity,
    blosum62,
    sample_proteins,
)
from protein_performer.config.schema import (
    ExtractConfig,
    GenerateConfig,
    PlotHeadsConfig,
    ScoreConfig,
    SimilarityConfig,
)
from protein_performer.config.validate import eval_fasta_paths, fasta_unset
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, InvalidResidueError
from protein_performer.data.encoding import EncodeCounts
from protein_performer.errors import ConfigError, DataError
from protein_performer.utils.outputs import (
    absent,
    check_output_dir,
    dir_with_manifest,
    refuse_appeared,
    staged_dir,
)

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
HEADS_FORMAT = "protein-performer-plot-heads/1"
HEADS_JSON = "heads.json"
HEADS_FILES = {
    f"{stem}.{ext}"
    for stem in ("heads", "heads_zoom", "head_ranking", "alignment_head")
    for ext in ("png", "pdf")
}

is_similarity_dir = dir_with_manifest(SIMILARITY_JSON, SIMILARITY_FORMAT, SIMILARITY_FILES)
is_heads_dir = dir_with_manifest(HEADS_JSON, HEADS_FORMAT, HEADS_FILES)


@dataclass
class CommandResult:
    summary: dict[str, Any]
    text: str

    def to_dict(self) -> dict[str, Any]:
        return self.summary

    def format(self) -> str:
        return self.text


def _out_dir(cfg: Any, is_ours: Any, what: str) -> Path:
    return check_output_dir(
        cfg.out,
        "out",
        overwrite=cfg.overwrite,
        is_ours=is_ours,
        what=what,
        overwrite_hint="overwrite=true",
    )


def _prepare(cfg: Any, is_ours: Any, what: str) -> tuple:
    """Inputs, checked output directory, model and layer/head selections of a figure command:
    ``(fasta, outdir, model, alphabet, metadata, layers, heads)``. ``split=`` without
    ``fasta=`` reads the training run's own files (as evaluate does)."""
    if getattr(cfg, "split", None) and fasta_unset(cfg.fasta):
        from protein_performer.model.checkpoints import run_files

        cfg = dataclasses.replace(cfg, fasta=run_files(cfg.checkpoint, cfg.split))
    fasta = eval_fasta_paths(cfg)
    outdir = _out_dir(cfg, is_ours, what)
    model, alphabet, meta = load_for_analysis(
        cfg.checkpoint, cfg.device, cfg.attention, cfg.nb_features
    )
    layers = parse_indices(cfg.layers, model.config.depth, "layers")
    heads = parse_indices(cfg.heads, model.config.heads, "heads")
    return fasta, outdir, model, alphabet, meta, layers, heads


def _trained_packed(meta: dict[str, Any]) -> bool:
    """Whether the checkpoint's run trained on packed windows (``data.mode=concat``: proteins
    between ``<sep>`` tokens, no ``<cls>``/``<eos>``)."""
    return (meta.get("data") or {}).get("mode") == "concat"


def _trained_length(meta: dict[str, Any]) -> int | None:
    """The crop length (tokens) the checkpoint's run trained on, when it says so."""
    value = (meta.get("data") or {}).get("max_length")
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def _staged(cfg: Any, outdir: Path, is_ours: Any, what: str):
    return staged_dir(outdir, lambda: _out_dir(cfg, is_ours, what))


def _matrix_csv(m: np.ndarray) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["", *AA_ORDER])
    for aa, row in zip(AA_ORDER, m, strict=True):
        w.writerow([aa, *(f"{x:.6g}" for x in row)])
    return buf.getvalue()


def run_extract(cfg: ExtractConfig) -> CommandResult:
    fasta = eval_fasta_paths(cfg)  # type: ignore[arg-type]
    _out_dir(cfg, is_extract_dir, "extract directory")  # fail on it before loading anything
    model, alphabet, meta = load_for_analysis(
        cfg.checkpoint, cfg.device, cfg.attention, cfg.nb_features
    )
    manifest = extract(
        model,
        alphabet,
        fasta,
        cfg.out,
        include=cfg.include,
        layers=cfg.layers,
        heads=cfg.heads,
        repr_layers=cfg.repr_layers,
        max_length=cfg.max_length,
        trained_length=_trained_length(meta),
        truncate=cfg.truncate,
        keep_specials=cfg.keep_specials,
        float16=cfg.float16,
        toks_per_batch=cfg.toks_per_batch,
        chunk_size=cfg.chunk_size,
        invalid=cfg.invalid,
        strip_gaps=cfg.strip_gaps,
        overwrite=cfg.overwrite,
        source=str(cfg.checkpoint),
        records=cfg.records,
        max_records=cfg.max_records,
        join=cfg.join,
    )
    n = len(manifest["records"])
    cropped = sum(1 for r in manifest["records"] if r["cropped"])
    what = ", ".join(manifest["include"])
    if cfg.join:
        window = manifest["records"][0]
        text = (
            f"wrote one window of {len(window['joined']):,} proteins, {window['length']:,} "
            f"positions ({what}) to {cfg.out}/{window['file']}"
        )
        dropped = window["proteins_read"] - len(window["joined"])
        if window["cropped"]:
            text += (
                f"\n  truncate=true cut the first {window['cropped']:,} positions of the window"
                + (f": {dropped} of {window['proteins_read']} proteins left out" if dropped else "")
            )
    else:
        text = f"wrote {n:,} record file{'s' if n != 1 else ''} ({what}) to {cfg.out}"
    if cropped and not cfg.join:
        text += f" ({cropped:,} truncated to max_length)"
    if manifest.get("input_changes"):
        text += f"\n  input: {manifest['input_changes']}"
    duplicates = sum(1 for r in manifest["records"] if r["file"] != f"{r['id']}.npz")
    if duplicates and not cfg.join:
        text += f"\n  {duplicates:,} record ids were repeated or unsafe as file names: see manifest.json"
    return CommandResult({"out": str(cfg.out), **manifest}, text)


def run_aa_similarity(cfg: SimilarityConfig) -> CommandResult:
    fasta, outdir, model, alphabet, meta, layers, heads = _prepare(
        cfg, is_similarity_dir, "similarity directory"
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
    limit = max_tokens(model, None, _trained_length(meta))
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
    with _staged(cfg, outdir, is_similarity_dir, "similarity directory") as work:
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
    (work / "blosum62.csv").write_text(_matrix_csv(ref), encoding="utf-8")
    for name, m in result.matrices.items():
        if m is not None:
            (work / f"{name}.csv").write_text(_matrix_csv(m), encoding="utf-8")
    i = result.info
    notes = {}
    if result.matrices.get("attention") is None:
        notes["attention"] = (
            f"no head has ≥ {i['min_arcs']} arcs\nwith weight ≥ θ = {i['threshold']}\n(lower threshold=)"
        )
    if result.matrices.get("substitution") is None and i.get("causal"):
        notes["substitution"] = "a causal model never\npredicts at a masked site"
    similarity_figure(result.matrices, result.r, ref, work / "similarity", title=title, notes=notes)
    (work / SIMILARITY_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


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


def homolog_segments(
    proteins: list[Protein], ids: list[str] | None, read_ids: list[str], fasta: str
) -> list[int]:
    """Indices of the joined ``proteins`` the last one is aligned to: those named by ``ids``
    (``homologs=``), or every one before it. ``read_ids``: the records read, before a
    ``truncate=true`` join dropped front ones (named in the error when a homolog was dropped)."""
    if ids is None:
        return list(range(len(proteins) - 1))
    where = f"the joined window of {fasta}"
    if not ids:
        raise ConfigError("homologs=[] names no record; leave homologs unset to use every one")
    others, last = proteins[:-1], proteins[-1]
    chosen: set[int] = set()
    for h in ids:
        # as record= finds them: an exact id first, else a UniProt accession or entry name
        exact = [i for i, p in enumerate(others) if p.id == h]
        hits = exact or [i for i, p in enumerate(others) if h in record_names(p.id)]
        is_last = last.id == h or (not exact and h in record_names(last.id))
        if len(hits) > 1 or (hits and is_last):
            which = ", the last (aligned) one among them" if is_last else ""
            raise ConfigError(
                f"homologs: {h} names more than one record of {where}{which}; give each "
                "record a unique id (or the full id)"
            )
        if hits:
            chosen.add(hits[0])
            continue
        if is_last:
            problem = "is the last record (the one aligned to the others)"
        elif any(h in record_names(r) for r in read_ids):
            problem = "was cut from the front of the window by truncate=true"
        else:
            problem = "is not a record of the FASTA"
        raise ConfigError(f"homologs: {h} {problem} ({where})")
    return sorted(chosen)


def cross_protein_mass(attention: np.ndarray, segments: list[tuple[int, int]]) -> np.ndarray:
    """``(layers, heads)``: mean over the last segment's queries of the attention they put on
    the other segments (the cross-protein heads of a homolog window)."""
    start, stop = segments[-1]
    others = np.zeros(attention.shape[-1], dtype=bool)
    for a, b in segments[:-1]:
        others[a:b] = True
    rows = attention[..., start:stop, :].astype(np.float64)
    total = np.clip(rows.sum(-1), 1e-30, None)
    return (rows[..., others].sum(-1) / total).mean(-1)


#: What marks a FASTA as generate's own (overwrite=true replaces no other file).
GENERATED_MARK = "protein-performer generate"


def _several_records(fasta: list[str]) -> bool:
    """Whether the FASTA file(s) hold more than one record (reads at most two)."""
    from protein_performer.data.fasta import FastaReader

    if len(fasta) > 1:
        return True
    return sum(1 for _ in itertools.islice(FastaReader(fasta[0]), 2)) > 1


def _generated_fasta(path: Path) -> bool:
    """Whether ``path`` is a FASTA ``generate`` wrote: every header carries its mark (a record
    a user added makes it theirs too)."""
    import gzip

    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            headers = 0
            for line in fh:
                if line.startswith(">"):
                    if GENERATED_MARK not in line:
                        return False
                    headers += 1
                elif headers == 0 and line.strip():
                    return False  # text before the first header
    except (OSError, UnicodeDecodeError, EOFError):
        return False
    return headers > 0


def run_generate(cfg: GenerateConfig) -> CommandResult:
    import time

    from protein_performer.analysis.generation import generate, prompt_ids
    from protein_performer.data.fasta_writer import write_fasta
    from protein_performer.utils.outputs import check_output_file, make_parents, remove_empty

    if not re.search(r"\.(fasta|fa|faa|fas)(\.gz)?$", str(cfg.out), re.IGNORECASE):
        raise DataError("out: names the generated FASTA: end it in .fasta, .fa or .faa (.gz)")

    def check_out() -> Path:
        return check_output_file(
            cfg.out,
            "out",
            overwrite=cfg.overwrite,
            is_ours=_generated_fasta,
            allow_input_name=True,
            what="generated FASTA",
            overwrite_hint="overwrite=true",
        )

    out = check_out()
    was_absent = absent([out])
    model, alphabet, meta = load_for_analysis(cfg.checkpoint, cfg.device)
    limit = max_tokens(model, cfg.max_length, _trained_length(meta))
    limit = limit or _trained_length(meta) or model.config.max_len  # rotary: what it trained on
    t0 = time.perf_counter()
    samples = generate(
        model,
        alphabet,
        cfg.n,
        prompt=cfg.prompt,
        max_length=limit,
        temperature=cfg.temperature,
        top_k=cfg.top_k,
        top_p=cfg.top_p,
        seed=cfg.seed,
        batch_size=cfg.batch_size,
        min_length=cfg.min_length,
        progress=True,
        packed=(packed := _trained_packed(meta)),
    )
    settings = f"seed={cfg.seed} temperature={cfg.temperature:g}"
    if cfg.top_k is not None:
        settings += f" top_k={cfg.top_k}"
    if cfg.top_p is not None:
        settings += f" top_p={cfg.top_p:g}"
    settings += f" max_length={limit}"
    used = alphabet.decode(prompt_ids(alphabet, cfg.prompt))  # as read: no final '*'
    if used:
        settings += f" prompt={used}"
    refuse_appeared(was_absent, "out", "generating")
    check_out()  # one that was there is still generate's own
    records = [
        (
            f"gen{i + 1}",
            f"{GENERATED_MARK} {settings} length={len(s.sequence)} "
            f"ended={(('sep' if packed else 'eos') if s.ended else 'max_length')} "
            f"log_prob={s.log_prob:.3f}",
            s.sequence,
        )
        for i, s in enumerate(samples)
    ]
    made = make_parents(out)  # as score and extract do (the check above made nothing)
    try:
        written = write_fasta(out, records, compress=str(out).lower().endswith(".gz"))
    except BaseException:
        remove_empty(made)
        raise
    lengths = [len(s.sequence) for s in samples]
    cut = sum(not s.ended for s in samples)
    summary = {
        "out": str(out),
        "checkpoint": str(cfg.checkpoint),
        "n": len(samples),
        "ended_by_eos": len(samples) - cut,  # by the end token (<sep> for packed training)
        "cut_at_max_length": cut,
        "mean_length": float(np.mean(lengths)),
        "settings": settings,
        "seconds": round(time.perf_counter() - t0, 2),
        "sha256": written.sha256,
    }
    text = (
        f"generated {len(samples):,} protein{'' if len(samples) == 1 else 's'} ({settings}), "
        f"lengths {min(lengths)}-"
        f"{max(lengths)} (mean {np.mean(lengths):.0f}) in {summary['seconds']:.1f} s -> {out}"
    )
    if cut:
        text += (
            f"\n  {cut:,} reached max_length without {'<sep>' if packed else '<eos>'}: cut there "
            "(ended=max_length in their headers)"
        )
    trained = _trained_length(meta)
    if trained and limit > trained:
        text += (
            f"\n  max_length={limit} is past the {trained} tokens the model trained on: "
            "positions beyond them are untrained (and score's log-likelihood takes proteins "
            "of that window only)"
        )
    rare = sorted({c for c in used if c not in STANDARD_AMINO_ACIDS})
    if rare:
        text += (
            f"\n  the prompt holds {', '.join(rare)} (not one of the 20 amino acids): kept "
            "as given at the start of every protein; the drawn residues are the 20"
        )
        summary["prompt_nonstandard"] = rare
    return CommandResult(summary, text)


COMMANDS = {
    "generate": run_generate,
    "extract": run_extract,
    "aa-similarity": run_aa_similarity,
    "plot-heads": run_plot_heads,
}


def run_command(command: str, cfg: Any) -> CommandResult:
    """Run an analysis command on its config (see :data:`COMMANDS`)."""
    return COMMANDS[command](cfg)


def _read_mutations_csv(
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


def _wild_type(cfg: ScoreConfig, alphabet: Any) -> tuple[str, str]:
    from protein_performer.analysis.mutations import clean_sequence

    if cfg.sequence is not None:
        text = str(cfg.sequence)
        # a sequence is letters (and line breaks, '*'); a file name has '.' or '/'
        if any(c in text for c in "./\\") and Path(text).is_file():
            raise ConfigError(
                f"sequence={cfg.sequence} names a file: give it as fasta= (and record= to pick "
                "one of its records)"
            )
        sequence = clean_sequence(str(cfg.sequence))  # as a FASTA record is read
        if not sequence:
            raise ConfigError("sequence= is empty")
        bad = [c for c in sequence if c not in alphabet.residues]
        if bad:
            pos = sequence.index(bad[0]) + 1
            raise DataError(f"sequence=: {bad[0]!r} at position {pos} is not a residue letter")
        return sequence, "sequence="
    try:
        (protein,) = read_proteins(
            cfg.fasta,
            alphabet,
            ids=None if cfg.record is None else [cfg.record],
            max_records=1 if cfg.record is None else None,
        )[:1]
    except InvalidResidueError as e:
        # the wild type is read as it is: no invalid= / strip_gaps= here to point to
        problem = e.residue_problem or e.problem
        raise DataError(problem, path=e.path, record=e.record, record_id=e.record_id) from None
    return alphabet.decode(protein.residues), f"{cfg.fasta} ({protein.id})"


def _offset_hint(parsed: list, sequence: str, offset: int) -> str:
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


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _float(value: str | None, decimal_comma: bool = False) -> float:
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


COMMANDS["score"] = run_score
