"""The layer × head view of one protein, or of the last protein of a joined window (homologs
before it): its attention maps, each head's statistics beside uniform attention, the share
on the other proteins and on the residues aligned to them, and the summary ``plot-heads``
writes."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from protein_performer.analysis.alignment_heads import (
    aligned_mass,
    alignment_pairs,
    cross_protein_mass,
    homolog_segments,
)
from protein_performer.analysis.extraction import attention_maps
from protein_performer.analysis.figures import head_stats, uniform_stats
from protein_performer.analysis.inputs import (
    PathLike,
    Protein,
    join_proteins,
    read_proteins,
    source_names,
)
from protein_performer.data.alphabet import Alphabet
from protein_performer.model.performer import ProteinLM, require_window_positions


@dataclass
class HeadsWindow:
    """What is plotted: ``protein`` (one record, or the joined window), and for a joined
    window the ``proteins`` in it with their ``segments`` (``[start, stop)``), the indices of
    the named homologs (``subjects``) and the ids of every record read (``read_ids``)."""

    protein: Protein
    names: str
    proteins: list[Protein] = field(default_factory=list)
    segments: list[tuple[int, int]] | None = None
    subjects: list[int] = field(default_factory=list)
    read_ids: list[str] = field(default_factory=list)


def read_heads_window(
    fasta: PathLike | Sequence[PathLike],
    alphabet: Alphabet,
    model: ProteinLM,
    limit: int | None,
    *,
    record: str | None = None,
    join: bool = False,
    homologs: Any = None,
    truncate: bool | str = "auto",
    invalid: str = "error",
    strip_gaps: bool = False,
) -> HeadsWindow:
    """The protein to plot: the first usable record (or ``record``), or with ``join`` every
    record in one window of ``limit`` tokens, ``record`` moved last (the one analysed) and
    ``homologs`` (ids) the records its residues are aligned to."""
    read = functools.partial(
        read_proteins,
        fasta,
        alphabet,
        max_tokens=None if join else limit,
        truncate=truncate is not False,  # "auto": a single record is cropped, and said
        invalid=invalid,
        strip_gaps=strip_gaps,
    )
    if join:  # a joined window places every record at its place in it
        require_window_positions(model, "plot-heads join=true")
    ids = None if record is None else [record]
    names = source_names(fasta)
    if not join:
        return HeadsWindow(read(ids=ids, max_kept=1 if ids is None else None)[0], names)
    proteins = read()
    if ids is not None:  # the record analysed goes last, after every other one
        target = read(ids=ids)[0]
        proteins = [*(p for p in proteins if p.id != target.id), target]
    read_ids = [p.id for p in proteins]
    protein, segments, proteins = join_proteins(
        proteins, alphabet, limit, truncate=truncate is True, model=model, source=names
    )
    subjects = homolog_segments(proteins, homologs, read_ids, names)
    return HeadsWindow(protein, names, proteins, segments, subjects, read_ids)


@dataclass
class HeadsView:
    """The attention ``att`` ``(layers, heads, L, L)`` of a window's protein and each head's
    ``stats`` (entropy, distance, max weight; joined: ``cross_protein``, and ``aligned`` when
    residues align to a named homolog, with ``queries``/``keys`` the aligned pairs)."""

    window: HeadsWindow
    layers: list[int]
    heads: list[int]
    causal: bool
    att: np.ndarray
    sequence: str
    stats: dict[str, np.ndarray]
    uniform: dict[str, float]
    queries: np.ndarray | None = None
    keys: np.ndarray | None = None
    aligned_uniform: float | None = None

    @property
    def protein(self) -> Protein:
        return self.window.protein

    @property
    def uniform_name(self) -> str:
        return "uniform causal" if self.causal else "uniform"

    @cached_property
    def per_head(self) -> list[dict[str, Any]]:
        return [
            {"layer": layer, "head": head, **{k: float(v[i, j]) for k, v in self.stats.items()}}
            for i, layer in enumerate(self.layers)
            for j, head in enumerate(self.heads)
        ]

    @property
    def best_aligned(self) -> dict[str, Any] | None:
        """The head most on the aligned residues (None: none align)."""
        if not self.aligned_uniform:
            return None
        return max(self.per_head, key=lambda h: h["aligned"])


def head_view(
    model: ProteinLM,
    alphabet: Alphabet,
    window: HeadsWindow,
    layers: list[int],
    heads: list[int],
) -> HeadsView:
    """The attention of ``window``'s protein in the selected ``layers`` × ``heads``, with
    each head's statistics (see :class:`HeadsView`)."""
    protein, segments = window.protein, window.segments
    att = attention_maps(model, protein, alphabet, layers=layers, heads=heads)
    sequence = alphabet.decode(protein.residues, keep_specials=True).replace("<sep>", "|")
    view = HeadsView(
        window,
        layers,
        heads,
        bool(model.causal),
        att,
        sequence,
        head_stats(att),
        uniform_stats(protein.sequence_length, model.causal),
    )
    if segments is not None:
        view.stats["cross_protein"] = cross_protein_mass(att, segments)
        if window.subjects:
            picked = [segments[i] for i in window.subjects] + [segments[-1]]
            parts = [alphabet.decode(protein.residues[a:b]) for a, b in picked]
            view.queries, view.keys = alignment_pairs(picked, parts)
            if len(view.queries):
                view.stats["aligned"], view.aligned_uniform = aligned_mass(
                    att, view.queries, view.keys, causal=model.causal
                )
    return view


def heads_title(view: HeadsView, label: str, kind: str) -> str:
    """The figures' title: the protein, its size, the checkpoint ``label`` and attention
    ``kind``."""
    protein, segments = view.protein, view.window.segments
    size = (
        f"{protein.sequence_length} residues"
        if segments is None
        else f"{len(segments)} proteins, {sum(b - a for a, b in segments)} residues"
    )
    if segments is None and protein.cropped:  # truncate=true kept the protein's start
        whole = protein.sequence_length + protein.cropped
        size = f"residues 1-{protein.sequence_length:,} of {whole:,}"
    name = protein.id if len(protein.id) <= 60 else protein.id[:57] + "..."  # a readable title
    return f"{name} ({size}) · {label} ({kind})"


def heads_summary(view: HeadsView, *, format: str, checkpoint: str, kind: str) -> dict[str, Any]:
    """The summary ``plot-heads`` writes beside its figures."""
    protein, window = view.protein, view.window
    summary: dict[str, Any] = {
        "format": format,
        "checkpoint": checkpoint,
        "attention_kind": kind,
        "record": protein.id,
        "length": protein.sequence_length,
        "cropped": protein.cropped,
        "layers": view.layers,
        "heads": view.heads,
        "objective": "causal" if view.causal else "mlm",
        "uniform_entropy": view.uniform["entropy"],
        "uniform_distance": view.uniform["distance"],
        # the figure shows the weights as they are (<cls>/<eos> columns left out)
        "stats_of": "each query's weights among residues, renormalised to sum to 1",
        "heads_stats": view.per_head,
    }
    if window.segments is not None:
        summary["joined"] = [
            {"id": p.id, "start": a, "stop": b}
            for p, (a, b) in zip(window.proteins, window.segments, strict=True)
        ]
        summary["homologs"] = [window.proteins[i].id for i in window.subjects]
        queries = view.queries
        summary["aligned_residues"] = 0 if queries is None else len(np.unique(queries))
        summary["aligned_uniform"] = view.aligned_uniform
    return summary


def window_notes(view: HeadsView, limit: int | None) -> str:
    """What the printed result says of a cropped protein, of a joined window (how much of the
    last protein's attention lands on the others) and of its aligned residues."""
    protein, segments, text = view.protein, view.window.segments, ""
    uniform_name = view.uniform_name
    if segments is None and protein.cropped:
        text += (
            f"\n  cropped: the figures show residues 1-{protein.sequence_length:,} of "
            f"{protein.sequence_length + protein.cropped:,} (the model's window; truncate=false "
            "refuses a longer record)"
        )
    if segments is not None:
        top = max(view.per_head, key=lambda h: h["cross_protein"])
        read = len(view.window.read_ids)
        dropped = read - len(segments)
        if protein.cropped:
            text += (
                f"\n  truncate=true cut the first {protein.cropped:,} positions of the window to fit "
                f"{limit:,} tokens"
                + (f": {dropped} of {read} proteins left out entirely" if dropped else "")
            )
        others = sum(b - a for a, b in segments[:-1])  # keys on the other proteins
        share = others / view.att.shape[-1]
        if view.causal:  # a query sees the keys up to itself
            start, stop = segments[-1]
            share = float(np.mean([others / (i + 1) for i in range(start, stop)]))
        text += (
            f"\n  joined {len(segments)} proteins; the last one's queries put "
            f"{top['cross_protein']:.0%} of their attention on the others in "
            f"L{top['layer']}H{top['head']} (the most of any head; {uniform_name} attention: "
            f"{share:.0%})"
        )
    best = view.best_aligned
    if best is not None:
        aligned = 0 if view.queries is None else len(np.unique(view.queries))
        text += (
            f"\n  {aligned} of its residues align to a homolog (BLOSUM62); "
            f"L{best['layer']}H{best['head']} puts "
            f"{best['aligned']:.1%} of their attention on the aligned residues "
            f"({uniform_name} attention: {view.aligned_uniform:.1%}); figure alignment_head.png"
        )
    return text
