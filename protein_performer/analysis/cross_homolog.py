"""The cross-homolog attention view: which residues of its homologs a masked residue attends
to, as a substitution matrix per head, compared with BLOSUM62 and with the alignment itself.

Each protein is laid after its homologs in the window ``evaluate context=`` scores
(:func:`~protein_performer.data.context_windows.context_window`,
``<cls> h_1 <sep> … h_k <sep> protein <eos>``; a protein longer than half the window cropped to
a seeded half, homologs cut at its relative place, as
:func:`~protein_performer.evaluation.context_perplexity.scoring_windows` does).
Every residue of the protein is masked exactly once over ``round(1 / mask_prob)`` passes
(a seeded partition, ~15% each); in each pass, for every head, the attention rows of the
masked positions into the homolog segments are counted by (true residue of the masked
position ``a``, residue attended ``b``) into 20×20 matrices:

- ``arcs``: attention weights ≥ ``threshold`` (Vig et al.'s arcs, restricted to homologs);
- ``mass``: the attention weights summed.

Each count matrix ``C`` becomes symmetric log-odds the way BLOSUM is built from aligned blocks:
``q_ab`` the frequency of the unordered pair (``(C_ab + C_ba) / N``, ``C_aa / N``), ``p_a =
q_aa + Σ_{b≠a} q_ab / 2``, ``e_ab = p_a p_b`` (``2 p_a p_b`` off the diagonal), ``s_ab =
log2(q_ab / e_ab)`` (this is :func:`~protein_performer.analysis.similarity.substitution_log_odds`);
cells without counts are NaN. ``r`` is Pearson's with BLOSUM62 over the 190 off-diagonal pairs
(as :mod:`~protein_performer.analysis.similarity`), over the pairs with counts.

References: the **ceiling** is the same log-odds of the residue pairs a local BLOSUM62
alignment of the same window pieces aligns
(:func:`~protein_performer.data.pairwise_alignment.aligned_positions`, Biopython, gap open −10 /
extend −0.5, the alignment the "alignment heads" measure uses): what a head that attends
exactly to the aligned residue would give. The **null**: each pass's masked positions' true
residues shuffled among themselves (seeded), so attention keeps its composition but loses its
link to the residue it came from. Heads are ranked by their mean attention on the aligned
residue(s) (summed over homologs, raw weights) over the masked positions that align.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from protein_performer.analysis.alignment_heads import alignment_pairs
from protein_performer.analysis.homolog_pairs import HomologPair
from protein_performer.analysis.inputs import as_protein, max_tokens, parse_indices
from protein_performer.analysis.similarity import (
    AA_ORDER,
    aa_index,
    blosum62,
    offdiag_pearson,
    substitution_log_odds,
)
from protein_performer.data.alphabet import Alphabet
from protein_performer.data.context_windows import context_window, fit_members
from protein_performer.data.datasets import TAG_CROP, TAG_MASK, keyed_rng
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.performer import ProteinLM, evaluating, require_window_positions
from protein_performer.utils.atomic import write_text_atomic
from protein_performer.utils.outputs import check_output_file, json_with_keys
from protein_performer.utils.progress import progress as progress_bar

FORMAT = "protein-performer-cross-homolog/1"
#: ``(tokens (L,), rows (R,)) -> (maps, R, L)`` attention of the selected heads from the window
#: positions ``rows`` to every window position.
AttentionFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass
class HomologWindow:
    """One protein after its homologs: ``tokens`` ``(L,)`` int64 (unmasked), the protein's
    ``[start, start + length)``, each homolog's ``segments`` ``[(start, stop)]``, and the
    aligned residue pairs ``queries`` / ``keys`` ``(P,)`` (window positions, protein →
    homolog)."""

    id: str
    tokens: np.ndarray
    start: int
    length: int
    segments: list[tuple[int, int]]
    queries: np.ndarray
    keys: np.ndarray


def homolog_windows(
    pairs: Sequence[HomologPair],
    alphabet: Alphabet,
    *,
    max_length: int,
    style: str = "crop",
    seed: int = 0,
) -> tuple[list[HomologWindow], int]:
    """The window of each ``(protein, homologs)`` pair (see the module docstring), and how many
    pairs were left out because no homolog fits beside the protein."""
    ends = 2 if style == "crop" else 1
    half = max(1, max_length // 2 - ends)
    head = 1 if style == "crop" else 0
    windows, skipped = [], 0
    for index, (protein, homologs) in enumerate(pairs):
        protein = as_protein(protein, alphabet, index)
        res = np.asarray(protein.residues, dtype=np.int64)
        anchor = 0.0
        if len(res) > half:  # as scoring_windows: a seeded half-window of a long protein
            first = int(keyed_rng(TAG_CROP, seed, 0, index).integers(0, len(res) - half + 1))
            anchor = first / (len(res) - half)
            res = res[first : first + half]
        members = [np.asarray(as_protein(h, alphabet).residues) for h in homologs]
        members = fit_members(members, max_length - len(res) - ends, anchor=anchor)
        if not members:
            skipped += 1
            continue
        tokens, start, _ = context_window(res, members, alphabet, max_length, style=style)
        segments, at = [], head
        for m in members:
            segments.append((at, at + len(m)))
            at += len(m) + 1
        letters = [alphabet.decode(m) for m in members] + [alphabet.decode(res)]
        queries, keys = alignment_pairs([*segments, (start, start + len(res))], letters)
        windows.append(HomologWindow(protein.id, tokens, start, len(res), segments, queries, keys))
    return windows, skipped


def mask_passes(n: int, mask_prob: float, rng: np.random.Generator) -> list[np.ndarray]:
    """A seeded partition of ``range(n)`` into ``round(1 / mask_prob)`` (at most ``n``) sorted
    parts of near-equal size: every position masked exactly once over the passes."""
    if not 0.0 < mask_prob <= 1.0:
        raise ConfigError(f"mask_prob must be in (0, 1] (got {mask_prob})")
    k = max(1, min(n, round(1.0 / mask_prob)))
    return [np.sort(part) for part in np.array_split(rng.permutation(n), k)]


def _onehot(types: np.ndarray) -> np.ndarray:
    out = np.zeros((len(types), 20), dtype=np.float64)
    out[np.arange(len(types)), types] = 1.0
    return out


@dataclass
class CrossCounts:
    """What the view accumulates over windows and passes (``maps`` = layers × heads)."""

    maps: int
    threshold: float
    arcs: np.ndarray = field(init=False)  # (maps, 20, 20) by (masked residue, attended residue)
    mass: np.ndarray = field(init=False)
    null_arcs: np.ndarray = field(init=False)
    null_mass: np.ndarray = field(init=False)
    aligned: np.ndarray = field(init=False)  # (maps,) attention on aligned residues, summed
    ceiling: np.ndarray = field(init=False)  # (20, 20) aligned residue pairs
    aligned_positions: int = 0
    uniform: float = 0.0  # what uniform attention over the window puts on them, summed
    masked: int = 0
    passes: int = 0

    def __post_init__(self) -> None:
        shape = (self.maps, 20, 20)
        self.arcs, self.mass = np.zeros(shape), np.zeros(shape)
        self.null_arcs, self.null_mass = np.zeros(shape), np.zeros(shape)
        self.aligned = np.zeros(self.maps)
        self.ceiling = np.zeros((20, 20))

    def add_alignment(self, window: HomologWindow, types: np.ndarray) -> None:
        """The aligned residue pairs of ``window`` (``types``: AA_ORDER index per position)."""
        a, b = types[window.queries], types[window.keys]
        ok = (a >= 0) & (b >= 0)
        np.add.at(self.ceiling, (a[ok], b[ok]), 1.0)

    def add(
        self,
        att: np.ndarray,
        rows: np.ndarray,
        window: HomologWindow,
        types: np.ndarray,
        rng: np.random.Generator,
    ) -> None:
        """One pass: ``att`` ``(maps, R, L)`` from the masked window positions ``rows`` (R,),
        sorted; ``types`` ``(L,)`` of the unmasked window."""
        keys = np.concatenate([np.arange(a, b) for a, b in window.segments])
        keys = keys[types[keys] >= 0]
        ok = types[rows] >= 0
        sub = att[:, ok][:, :, keys].astype(np.float64)  # (maps, R', K)
        key_hot = _onehot(types[keys])
        row_hot = _onehot(types[rows[ok]])
        shuffled = row_hot[rng.permutation(len(row_hot))]
        arc_profile = (sub >= self.threshold) @ key_hot  # (maps, R', 20)
        mass_profile = sub @ key_hot
        for total, hot in ((self.arcs, row_hot), (self.null_arcs, shuffled)):
            total += np.einsum("ra,mrb->mab", hot, arc_profile)
        for total, hot in ((self.mass, row_hot), (self.null_mass, shuffled)):
            total += np.einsum("ra,mrb->mab", hot, mass_profile)
        self.masked += int(ok.sum())
        self.passes += 1
        # attention on the aligned residue(s) of each masked position that aligns
        sel = np.isin(window.queries, rows)
        if sel.any():
            at = np.searchsorted(rows, window.queries[sel])
            self.aligned += att[:, at, window.keys[sel]].astype(np.float64).sum(-1)
            positions, per = np.unique(at, return_counts=True)
            self.aligned_positions += len(positions)
            self.uniform += float(per.sum()) / att.shape[-1]


def model_attention(
    model: ProteinLM, layers: Sequence[int], heads: Sequence[int], chunk_size: int = 256
) -> AttentionFn:
    """:data:`AttentionFn` of ``model`` (eval mode, on its device) for the sorted ``layers``
    and ``heads``: ``(len(layers) * len(heads), R, L)``, layer-major."""
    device = next(model.parameters()).device
    li = {layer: i for i, layer in enumerate(layers)}

    @torch.no_grad()
    def attention(tokens: np.ndarray, rows: np.ndarray) -> np.ndarray:
        ids = torch.from_numpy(np.asarray(tokens, dtype=np.int64))[None].to(device)
        out = np.zeros((len(layers), len(heads), len(rows), len(tokens)), dtype=np.float32)
        with evaluating(model):
            blocks = model.iter_attention(
                ids, layers=list(layers), heads=list(heads), chunk_size=chunk_size
            )
            for layer, start, block in blocks:
                inside = (rows >= start) & (rows < start + block.shape[2])
                if inside.any():
                    picked = block[0][:, torch.from_numpy(rows[inside] - start).to(device)]
                    out[li[layer]][:, inside] = picked.float().cpu().numpy()
        return out.reshape(-1, len(rows), len(tokens))

    return attention


def collect(
    windows: Sequence[HomologWindow],
    attention: AttentionFn,
    maps: int,
    alphabet: Alphabet,
    *,
    threshold: float = 0.3,
    mask_prob: float = 0.15,
    seed: int = 0,
    progress: bool = False,
) -> CrossCounts:
    """Mask every protein residue of each window once over the passes (:func:`mask_passes`,
    generator keyed by ``(seed, window)``), show ``<mask>`` there, and count what
    ``attention`` (``maps`` heads) sends from the masked positions into the homologs."""
    if not 0.0 < threshold <= 1.0:
        raise ConfigError(f"threshold must be in (0, 1] (got {threshold})")
    types_of = aa_index(alphabet)
    counts = CrossCounts(maps, threshold)
    for index, w in enumerate(
        progress_bar(windows, desc="cross-homolog", unit="protein", enabled=progress)
    ):
        types = types_of[w.tokens]
        counts.add_alignment(w, types)
        rng = keyed_rng(TAG_MASK, seed, 0, index)
        for part in mask_passes(w.length, mask_prob, rng):
            rows = w.start + part
            masked = w.tokens.copy()
            masked[rows] = alphabet.mask_idx
            att = attention(masked, rows)
            if att.shape != (maps, len(rows), len(masked)):
                raise ValueError(
                    f"attention gave {att.shape}, expected {(maps, len(rows), len(masked))}"
                )
            counts.add(att, rows, w, types, rng)
    return counts


def _log_odds(counts: np.ndarray) -> np.ndarray:
    """BLOSUM-style symmetric log2-odds of a 20×20 count matrix; all NaN when it is empty."""
    out = substitution_log_odds(counts)
    return np.full((20, 20), np.nan) if out is None else out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def summarize(counts: CrossCounts, names: Sequence[str]) -> dict[str, Any]:
    """The view's numbers and matrices (see :func:`attention_view`) from ``counts``."""
    ref = blosum62()
    ceiling = _log_odds(counts.ceiling)
    mean_on = counts.aligned / max(1, counts.aligned_positions)
    heads, lo = [], {k: [] for k in ("arcs", "mass", "null_arcs", "null_mass")}
    for m, name in enumerate(names):
        row: dict[str, Any] = {"name": name, "aligned_attention": float(mean_on[m])}
        for key in lo:
            matrix = _log_odds(getattr(counts, key)[m])
            lo[key].append(matrix)
            row[f"r_{key}"] = _r(offdiag_pearson(matrix, ref))
        row["r_arcs_vs_ceiling"] = _r(offdiag_pearson(lo["arcs"][-1], ceiling))
        row["r_mass_vs_ceiling"] = _r(offdiag_pearson(lo["mass"][-1], ceiling))
        row["arcs"] = int(counts.arcs[m].sum())
        heads.append(row)
    ranked = sorted(range(len(names)), key=lambda m: -mean_on[m])
    return {
        "masked_positions": counts.masked,
        "passes": counts.passes,
        "aligned_positions": counts.aligned_positions,
        "uniform_aligned_attention": counts.uniform / max(1, counts.aligned_positions),
        "ceiling": {
            "r": _r(offdiag_pearson(ceiling, ref)),
            "aligned_pairs": int(counts.ceiling.sum()),
            "counts": counts.ceiling,
            "log_odds": ceiling,
        },
        "heads": [heads[m] for m in ranked],
        "best_head": names[ranked[0]] if names else None,
        "matrices": {
            **{f"{k}_counts": getattr(counts, k) for k in lo},
            **{f"{k}_log_odds": np.stack(v) for k, v in lo.items()},
            "blosum62": ref,
            "head_names": list(names),
        },
    }


def attention_view(
    attention: AttentionFn,
    names: Sequence[str],
    alphabet: Alphabet,
    pairs: Sequence[HomologPair],
    *,
    max_length: int,
    style: str = "crop",
    threshold: float = 0.3,
    mask_prob: float = 0.15,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """The view for any :data:`AttentionFn` (``names``: one per map it returns). See
    :func:`cross_homolog_view` for the result."""
    if not pairs:
        raise DataError("no (protein, homologs) pairs to analyse")
    windows, skipped = homolog_windows(pairs, alphabet, max_length=max_length, style=style,
                                       seed=seed)  # fmt: skip
    if not windows:
        raise DataError(
            f"max_length={max_length} leaves no room for a homolog beside any of the "
            f"{len(pairs):,} proteins; raise max_length"
        )
    counts = collect(windows, attention, len(names), alphabet, threshold=threshold,
                     mask_prob=mask_prob, seed=seed, progress=progress)  # fmt: skip
    return {
        "proteins": len(windows),
        "proteins_without_room": skipped,
        "homologs": sum(len(w.segments) for w in windows),
        **summarize(counts, names),
        "params": {
            "threshold": threshold,
            "mask_prob": mask_prob,
            "seed": seed,
            "max_length": max_length,
            "style": style,
        },
        "amino_acid_order": AA_ORDER,
        "pairs_compared": "the 190 off-diagonal amino-acid pairs with counts",
        "alignment": "Biopython local, BLOSUM62, gap open -10 / extend -0.5",
    }


def cross_homolog_view(
    model: ProteinLM,
    alphabet: Alphabet,
    pairs: Sequence[HomologPair],
    *,
    max_length: int | None = None,
    style: str = "crop",
    threshold: float = 0.3,
    mask_prob: float = 0.15,
    seed: int = 0,
    layers: Any = None,
    heads: Any = None,
    chunk_size: int = 256,
    progress: bool = False,
) -> dict[str, Any]:
    """The cross-homolog attention view of ``model`` over ``pairs`` (``(protein, homologs)``,
    proteins or sequence strings), as a plain dict:

    ``proteins``, ``homologs``, ``masked_positions``, ``aligned_positions``;
    ``heads``: one dict per head, ranked by ``aligned_attention`` (mean attention on the
    aligned residues; ``uniform_aligned_attention`` is what uniform attention over the window
    gives), with ``r_arcs`` / ``r_mass`` (Pearson with BLOSUM62), ``r_null_arcs`` /
    ``r_null_mass`` (the shuffled null), ``r_arcs_vs_ceiling`` / ``r_mass_vs_ceiling`` and
    ``arcs``; ``ceiling``: ``r``, ``aligned_pairs``, ``counts`` and ``log_odds`` ``(20, 20)``;
    ``matrices``: ``{arcs,mass,null_arcs,null_mass}_{counts,log_odds}`` ``(maps, 20, 20)``
    in the order of ``head_names``, and ``blosum62``; every matrix in ``amino_acid_order``.
    ``max_length``: window tokens (default: the model's ``max_len``; required with rotary
    positions).
    """
    require_window_positions(model, "the cross-homolog view")
    limit = max_tokens(model, max_length)
    if limit is None:
        raise ConfigError("max_length is needed: the model has no fixed window (rotary)")
    layers = parse_indices(layers, model.config.depth, "layers")
    heads = parse_indices(heads, model.config.heads, "heads")
    names = [f"L{layer}H{head}" for layer in layers for head in heads]
    result = attention_view(
        model_attention(model, layers, heads, chunk_size), names, alphabet, pairs,
        max_length=limit, style=style, threshold=threshold, mask_prob=mask_prob, seed=seed,
        progress=progress,
    )  # fmt: skip
    result["params"]["causal"] = bool(getattr(model, "causal", False))
    return result


def _plain(obj: Any) -> Any:
    """``obj`` with arrays as lists and non-finite floats as None (JSON)."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


is_view_json = json_with_keys(["format", "heads", "ceiling"])


def write_view(
    result: dict[str, Any],
    out: str | Path,
    *,
    figure: bool = True,
    title: str = "",
    overwrite: bool = False,
) -> list[Path]:
    """Write ``result`` as JSON to ``out`` (``format`` added) and, with ``figure``, the best
    head's matrices beside BLOSUM62 and the ceiling as ``out``'s stem ``.png`` / ``.pdf``;
    each file atomically. An existing file is replaced only with ``overwrite`` and when it is
    such an output. Returns the paths written."""
    out = Path(out)
    stem = out.with_suffix("")
    check_output_file(out, "out", overwrite=overwrite, is_ours=is_view_json, what="view JSON")
    if figure:
        for ext in ("png", "pdf"):
            check_output_file(stem.with_name(f"{stem.name}.{ext}"), "out", overwrite=overwrite)
    text = json.dumps(_plain({"format": FORMAT, **result}), indent=1, allow_nan=False)
    write_text_atomic(out, text + "\n")
    return [out, *(view_figure(result, stem, title) if figure else [])]


def view_figure(result: dict[str, Any], stem: Path, title: str = "") -> list[Path]:
    """BLOSUM62, the alignment ceiling, and the best head's arcs and mass log-odds side by
    side (amino acids in :data:`AA_ORDER`, groups marked, diagonal blank), r in each title."""
    from protein_performer.analysis.figures import load_pyplot, matrix_panel, save_figure

    plt = load_pyplot()
    names = result["matrices"]["head_names"]
    best = result["best_head"]
    row = next(h for h in result["heads"] if h["name"] == best)
    m = names.index(best)

    def show(x: float | None) -> str:
        return "n/a" if x is None else f"{x:+.2f}"

    fig, axes = plt.subplots(1, 4, figsize=(15.2, 4.0))
    unit = "log2-odds (bits)"
    matrix_panel(axes[0], result["matrices"]["blosum62"], "BLOSUM62", "half bits")
    matrix_panel(axes[1], result["ceiling"]["log_odds"],
                  f"alignment ceiling\nr = {show(result['ceiling']['r'])}", unit)  # fmt: skip
    for ax, key in zip(axes[2:], ("arcs", "mass"), strict=True):
        label = f"{best} {key} (aligned attention {row['aligned_attention']:.2f})"
        r = f"r = {show(row[f'r_{key}'])} (null {show(row[f'r_null_{key}'])})"
        matrix_panel(ax, result["matrices"][f"{key}_log_odds"][m], f"{label}\n{r}", unit)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, stem)


__all__ = [
    "AttentionFn",
    "CrossCounts",
    "HomologWindow",
    "attention_view",
    "collect",
    "cross_homolog_view",
    "homolog_windows",
    "mask_passes",
    "model_attention",
    "summarize",
    "write_view",
]


def cross_homolog_text(result: dict[str, Any], threshold: float, max_length: int) -> str:
    """The view in a few lines: the heads that attend most to the aligned residue, each with r
    against BLOSUM62 (mass and arcs) beside the shuffled null, and the alignment's ceiling."""
    ceiling = result["ceiling"]

    def show(x: float | None) -> str:
        return "n/a" if x is None else f"{x:+.2f}"

    lines = [
        f"cross-homolog view: {result['proteins']:,} proteins after their homologs "
        f"({result['homologs']:,} homologs, windows of ≤ {max_length:,} tokens); "
        f"{result['masked_positions']:,} masked positions, {result['aligned_positions']:,} "
        "with an aligned homolog residue",
        f"  ceiling (the same log-odds from a BLOSUM62 local alignment of the same pairs): "
        f"r = {show(ceiling['r'])} ({ceiling['aligned_pairs']:,} aligned pairs)",
        f"  heads by attention on the aligned residue (uniform: "
        f"{result['uniform_aligned_attention']:.4f}); r with BLOSUM62, 190 pairs:",
        f"    head     on aligned   r (mass)  null    r (arcs ≥ {threshold:g})  null    arcs",
    ]
    for h in result["heads"][:5]:
        lines.append(
            f"    {h['name']:<8} {h['aligned_attention']:>10.4f}   {show(h['r_mass']):>7} "
            f"{show(h['r_null_mass']):>6}   {show(h['r_arcs']):>11} {show(h['r_null_arcs']):>6}"
            f"  {h['arcs']:>6,}"
        )
    return "\n".join(lines)
