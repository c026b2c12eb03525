"""Figures: a similarity matrix beside BLOSUM62, a layers × heads attention grid (the Performer
paper's BPT1_BOVIN figure), a ranking of heads by entropy and attention distance, and one
head's attention from a protein to its homologs with their alignment drawn over it.

Each figure is written as PNG and PDF (atomically); matplotlib runs headless (Agg).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from protein_performer.analysis.similarity import AA_GROUPS, AA_ORDER
from protein_performer.utils.atomic import write_atomic


def load_pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, stem: Path, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write ``stem.png`` and ``stem.pdf`` (``formats``) atomically; returns their paths.
    The same figure gives the same bytes (no creation date or software version in them)."""
    plt = load_pyplot()
    paths = []
    stamps = {"pdf": {"CreationDate": None, "Producer": None, "Creator": None},
              "png": {"Software": None}}  # fmt: skip
    for ext in formats:
        path = stem.with_name(f"{stem.name}.{ext}")
        meta = stamps.get(ext)
        write_atomic(
            path,
            lambda fh, ext=ext, meta=meta: fig.savefig(
                fh, format=ext, dpi=150, bbox_inches="tight", metadata=meta
            ),
        )
        paths.append(path)
    plt.close(fig)
    return paths


def _group_lines(ax, n: int) -> None:
    pos = 0
    for letters, _ in AA_GROUPS[:-1]:
        pos += len(letters)
        ax.axhline(pos - 0.5, color="0.3", lw=0.6)
        ax.axvline(pos - 0.5, color="0.3", lw=0.6)


def matrix_panel(ax, m: np.ndarray, title: str, unit: str = "") -> None:
    plt = load_pyplot()
    shown = np.where(np.eye(20, dtype=bool), np.nan, m)  # the diagonal is not compared
    finite = shown[np.isfinite(shown)]
    vmax = float(np.abs(finite).max()) if finite.size else 1.0
    im = ax.imshow(shown, cmap="RdBu_r", vmin=-vmax or -1, vmax=vmax or 1)
    ax.set_xticks(range(20), list(AA_ORDER), fontsize=8)
    ax.set_yticks(range(20), list(AA_ORDER), fontsize=8)
    _group_lines(ax, 20)
    ax.set_title(title, fontsize=11)
    cb = plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    cb.ax.tick_params(labelsize=8)
    if unit:
        cb.set_label(unit, fontsize=9)


#: What each similarity view is, and the unit of its colour bar.
SIMILARITY_VIEWS = {
    "attention": ("attention (Vig et al.)", "Pearson r across heads"),
    "flow": ("attention flow log-odds", "log2-odds (bits)"),
    "substitution": ("model substitution log-odds", "log2-odds (bits)"),
    "embedding": ("token embedding cosine", "cosine"),
}


def similarity_figure(
    matrices: dict[str, np.ndarray | None],
    r: dict[str, float | None],
    blosum: np.ndarray,
    stem: Path,
    title: str = "",
    notes: dict[str, str] | None = None,
) -> list[Path]:
    """Every view beside BLOSUM62, amino acids grouped by physico-chemistry, a diverging
    colour map centred at 0 (diagonal blank), r with BLOSUM62 in each title (and the
    attention view's row-permutation null, ``r["attention_null"]``). A view with nothing to
    show is a panel saying why (``notes[view]``), not a missing panel."""
    plt = load_pyplot()
    notes = notes or {}
    views = [k for k in SIMILARITY_VIEWS if matrices.get(k) is not None or k in notes]
    panels = len(views) + 1
    cols = panels if panels <= 3 else -(-panels // 2)  # two rows past three: text stays legible
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 4.4 * rows), squeeze=False)
    axes = axes.ravel()
    for ax in axes[panels:]:
        ax.set_axis_off()
    axes = axes[:panels]
    matrix_panel(axes[0], blosum, "BLOSUM62", "log-odds (half bits; diagonal not shown)")
    for ax, key in zip(axes[1:], views, strict=True):
        label, unit = SIMILARITY_VIEWS[key]
        if matrices.get(key) is None:
            ax.set_axis_off()
            ax.set_title(f"{label}\nnot defined", fontsize=11)
            ax.text(0.5, 0.5, notes[key], ha="center", va="center", wrap=True, fontsize=10)
            continue
        value = r.get(key)
        shown = "n/a" if value is None else f"{value:+.2f}"
        if key == "attention" and r.get("attention_null") is not None:
            shown += f" (null {r['attention_null']:+.2f})"
        matrix_panel(ax, matrices[key], f"{label}\nr = {shown}", unit)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    return save_figure(fig, stem)


def head_grid_figure(
    attention: np.ndarray,
    layers: Sequence[int],
    heads: Sequence[int],
    sequence: str,
    stem: Path,
    *,
    zoom: int | None = None,
    shared_scale: bool = False,
    title: str = "",
) -> list[Path]:
    """Layers × heads grid of ``attention`` ``(layers, heads, L, L)`` for one protein; with
    ``zoom`` only its first ``zoom`` residues. Residue letters label the axes when at most 40
    residues are shown, residue numbers otherwise; rows are queries, columns keys."""
    plt = load_pyplot()
    if zoom:
        attention = attention[:, :, :zoom, :zoom]
        sequence = sequence[:zoom]
    nl, nh, n = attention.shape[0], attention.shape[1], attention.shape[2]
    size = 2.0 if n > 40 else 2.6
    # a panel is ~200 pixels wide: a long protein drawn as is keeps one residue in six, and a
    # sharp head (one key per query) vanishes; the maximum of each block keeps it visible
    factor = pool_factor(n, MAX_PANEL_CELLS)
    shown = max_pool(attention, factor)
    # a fixed grid, colour bars in inset axes: a layout engine's cost grows with the square
    # of the panels (a 12 x 16 grid took minutes and 24 GB)
    fig, axes = plt.subplots(
        nl,
        nh,
        figsize=(size * nh * 1.3, size * nl * 1.1 + 0.6),
        squeeze=False,
        gridspec_kw={"wspace": 0.45, "hspace": 0.35},
    )
    vmax = float(attention.max()) if shared_scale else None
    for i, layer in enumerate(layers):
        for j, head in enumerate(heads):
            ax = axes[i, j]
            im = ax.imshow(
                shown[i, j],
                cmap="viridis",
                vmin=0,
                vmax=vmax,
                interpolation="nearest",
                extent=(-0.5, n - 0.5, n - 0.5, -0.5),  # residue coordinates, pooled or not
            )
            if n <= 40:
                ax.set_xticks(range(n), list(sequence), fontsize=4)
                ax.set_yticks(range(n), list(sequence), fontsize=4)
            else:  # residue numbers (1-based) on the outer panels
                ticks = _position_ticks(n)
                ax.set_xticks(ticks, [str(t + 1) for t in ticks] if i == nl - 1 else [])
                ax.set_yticks(ticks, [str(t + 1) for t in ticks] if j == 0 else [])
                ax.tick_params(labelsize=5, length=2)
            if i == nl - 1:
                ax.set_xlabel("key residue", fontsize=6)
            if j == 0:
                ax.set_ylabel("query residue", fontsize=6)
            ax.set_title(f"layer {layer} head {head}", fontsize=7)
            if not shared_scale:
                cb = fig.colorbar(im, cax=ax.inset_axes((1.04, 0.0, 0.05, 1.0)))
                # a rasterized colour bar makes the PDF backend render a raster of the whole
                # figure per panel (minutes and GBs for a large grid)
                cb.solids.set_rasterized(False)
                cb.ax.tick_params(labelsize=5)
    if shared_scale:
        fig.colorbar(im, ax=axes.ravel().tolist(), fraction=0.02).set_label(
            "attention weight", fontsize=7
        )
    if title:
        fig.suptitle(title, fontsize=10)
    fig.text(
        0.5,
        0.0,
        "colour: attention weight from each query residue (row) to each key residue (column); "
        "<cls>/<eos> columns not shown, so a row sums to at most 1; "
        + ("one scale for every panel" if shared_scale else "each panel its own scale")
        + (
            f"\n{n:,} residues: each cell the maximum over {factor}×{factor} residue pairs "
            "(a sharp head stays visible)"
            if factor > 1
            else ""
        ),
        ha="center",
        va="top",
        fontsize=7,
    )
    return save_figure(fig, stem)


#: The most cells a heads-grid panel shows per axis (a panel is about 200 pixels wide).
MAX_PANEL_CELLS = 200
#: The most cells the alignment-head figure shows per axis, and its largest size in inches.
MAX_ALIGNMENT_CELLS = 600
MAX_ALIGNMENT_INCHES = (12.0, 7.0)


def pool_factor(n: int, cells: int) -> int:
    """The block size that shows ``n`` positions in at most ``cells`` cells (1: as is)."""
    return max(1, math.ceil(n / max(cells, 1)))


def max_pool(matrix: np.ndarray, factor: int | tuple[int, int]) -> np.ndarray:
    """The maximum of each ``factor`` × ``factor`` block of the last two axes of ``matrix``
    ``(..., R, C)`` -> ``(..., ceil(R / f_r), ceil(C / f_c))`` (the last blocks may be
    partial), as float64: drawn at fewer cells than positions, a sharp head (one large weight
    in a row) keeps its peak instead of being skipped by the renderer. ``factor`` 1 returns the
    matrix unchanged (as float64); a pair gives the row and column factors."""
    fr, fc = (factor, factor) if isinstance(factor, int) else factor
    if fr < 1 or fc < 1:
        raise ValueError(f"pooling factor must be >= 1, got {factor}")
    m = np.asarray(matrix, dtype=np.float64)
    if fr == 1 and fc == 1:
        return m
    *lead, r, c = m.shape
    pr, pc = -r % fr, -c % fc
    padded = np.pad(m, [(0, 0)] * len(lead) + [(0, pr), (0, pc)], constant_values=-np.inf)
    blocks = padded.reshape(*lead, (r + pr) // fr, fr, (c + pc) // fc, fc)
    return blocks.max(axis=(-3, -1))


def _position_ticks(n: int) -> list[int]:
    """0-based positions of 1-based residue numbers at a round step, about 4 per axis."""
    step = next(
        s for s in (5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10**9) if n / s <= 5
    )
    return [t - 1 for t in range(step, n + 1, step)]


def alignment_figure(
    attention: np.ndarray,
    target: tuple[int, int],
    subjects: Sequence[tuple[int, int]],
    queries: np.ndarray,
    keys: np.ndarray,
    stem: Path,
    *,
    title: str = "",
) -> list[Path]:
    """One head's attention from the last protein (rows, window positions ``target``) to the
    homologs it is aligned to (columns: the ``subjects`` segments side by side, whatever lies
    between them in the window left out), the alignment drawn over it: an alignment head shows
    the stripe along it.

    Args:
        attention: ``(L, L)`` one head over the window's residues.
        queries, keys: window positions of aligned residue pairs (keys inside ``subjects``).
    """
    plt = load_pyplot()
    q_start, q_stop = target
    columns, key_columns = homolog_columns(subjects, keys)
    rows = attention[q_start:q_stop].astype(np.float64)
    block = rows[:, columns] / np.clip(rows.sum(-1, keepdims=True), 1e-30, None)
    width, height = len(columns), q_stop - q_start
    # at most MAX_ALIGNMENT_INCHES (a long window gave a 4,121-pixel-wide figure with tiny
    # text), each cell the maximum of its block so that the aligned stripe stays visible
    fr, fc = pool_factor(height, MAX_ALIGNMENT_CELLS), pool_factor(width, MAX_ALIGNMENT_CELLS)
    max_w, max_h = MAX_ALIGNMENT_INCHES
    fig, ax = plt.subplots(
        figsize=(min(max_w, max(4.0, 6.0 * width / max(height, 1))), min(max_h, 6.0))
    )
    im = ax.imshow(
        max_pool(block, (fr, fc)),
        cmap="viridis",
        aspect="auto",
        interpolation="nearest",
        extent=(-0.5, width - 0.5, height - 0.5, -0.5),
    )
    ax.plot(key_columns, queries - q_start, ".", color="red", ms=1.5, alpha=0.5, label="alignment")
    offset = 0
    for a, b in subjects[:-1]:
        offset += b - a
        ax.axvline(offset - 0.5, color="white", lw=0.6)
    starts = ", ".join(str(a) for a, _ in subjects)
    ax.set_xlabel(f"homolog residues (starting at window position {starts})")
    ax.set_ylabel(f"residue of the last protein (window position {q_start}–{q_stop - 1})")
    if fr > 1 or fc > 1:
        ax.text(
            0.0,
            -0.12,
            f"each cell the maximum over {fr}×{fc} residue pairs",
            transform=ax.transAxes,
            fontsize=7,
        )
    ax.legend(loc="upper right", fontsize=7, markerscale=6)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="attention (row share)")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save_figure(fig, stem)


def homolog_columns(
    subjects: Sequence[tuple[int, int]], keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The window positions of the ``subjects`` segments side by side ``(W,)``, and where each
    of ``keys`` (window positions inside them) falls among those columns."""
    columns = np.concatenate([np.arange(a, b) for a, b in subjects])
    at = np.searchsorted(columns, keys)
    if len(keys) and (at.max() >= len(columns) or (columns[at] != keys).any()):
        raise ValueError("a key lies outside the subject segments")
    return columns, at


def head_stats(attention: np.ndarray) -> dict[str, np.ndarray]:
    """Per head of ``(layers, heads, L, L)``: ``entropy`` (mean row entropy, nats; uniform
    rows give log L), ``distance`` (mean |i - j| weighted by attention, residues) and
    ``max_weight`` (mean of each row's largest weight)."""
    a = attention.astype(np.float64)
    n = a.shape[-1]
    rows = a / np.clip(a.sum(-1, keepdims=True), 1e-30, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        # 0 - x, not -x: a one-key row would give -0.0 ("-0.00 nats")
        ent = 0.0 - np.where(rows > 0, rows * np.log(rows), 0.0).sum(-1).mean(-1)
    idx = np.arange(n)
    dist = np.abs(idx[:, None] - idx[None, :])
    return {
        "entropy": ent,
        "distance": (rows * dist).sum(-1).mean(-1),
        "max_weight": rows.max(-1).mean(-1),
    }


def uniform_stats(length: int, causal: bool = False) -> dict[str, float]:
    """What :func:`head_stats` gives for uniform attention over ``length`` positions: over
    every position (log L, (L²−1)/(3L), 1/L), or, ``causal``, over the positions up to each
    query (row i sees i + 1 keys: mean log(i + 1), (L − 1)/4, mean 1/(i + 1))."""
    n = max(1, int(length))
    if not causal:
        return {"entropy": float(np.log(n)), "distance": (n**2 - 1) / (3 * n), "max_weight": 1 / n}
    seen = np.arange(1, n + 1, dtype=np.float64)
    return {
        "entropy": float(np.log(seen).mean()),
        "distance": (n - 1) / 4,
        "max_weight": float((1 / seen).mean()),
    }


def head_ranking_figure(
    stats: dict[str, np.ndarray],
    layers: Sequence[int],
    heads: Sequence[int],
    length: int,
    stem: Path,
    title: str = "",
    causal: bool = False,
) -> list[Path]:
    """Heads ranked by attention entropy and by mean attention distance (local vs global),
    with the uniform-attention values (:func:`uniform_stats`) as reference lines."""
    plt = load_pyplot()
    names = [f"L{layer}H{head}" for layer in layers for head in heads]
    fig, axes = plt.subplots(1, 2, figsize=(max(6.0, 0.35 * len(names)) * 2 / 1.4, 3.6))
    uniform_values = uniform_stats(length, causal)
    label_uniform = "uniform causal attention" if causal else "uniform attention"
    for ax, key, label, uniform in (
        (axes[0], "entropy", "mean row entropy (nats)", uniform_values["entropy"]),
        (axes[1], "distance", "mean attention distance (residues)", uniform_values["distance"]),
    ):
        values = stats[key].ravel()
        order = np.argsort(values)
        # points, not bars from 0: heads differ from uniform by a few per cent, which a
        # zero-based axis hides; the axis spans the heads and the uniform line
        ax.vlines(range(len(values)), uniform, values[order], color="tab:blue", lw=1.5)
        ax.plot(range(len(values)), values[order], "o", color="tab:blue", ms=4)
        ax.axhline(uniform, color="tab:red", ls="--", lw=1)
        ax.annotate(
            f"{label_uniform}: {uniform:.3g}",
            (1.0, uniform),
            xycoords=("axes fraction", "data"),
            xytext=(2, 0),
            textcoords="offset points",
            va="center",
            fontsize=6,
            color="tab:red",
        )
        low, high = min(values.min(), uniform), max(values.max(), uniform)
        pad = 0.08 * (high - low) or 0.05 * max(abs(high), 1.0)
        ax.set_ylim(low - pad, high + pad)
        ax.set_xticks(range(len(values)), [names[k] for k in order], rotation=90, fontsize=6)
        ax.set_xlabel("head (layer L, head H), sorted", fontsize=7)
        ax.set_ylabel(label, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, stem)


#: The unit of each score column on a scatter plot's axis.
SCORE_UNITS = {
    "masked_marginal": "log-ratio mutant - wild type, nats",
    "wt_marginal": "log-ratio mutant - wild type, nats",
    "pseudo_ll": "pseudo-log-likelihood difference, nats",
    "log_likelihood": "log-likelihood difference, nats",
    "blosum62": "BLOSUM62 score, half bits",
    "unigram_log_ratio": "residue-frequency log-ratio, nats",
    "masked_marginal_context": "log-ratio with homologs before it, nats",
    "pssm": "PSSM log-odds difference, bits",
}


def score_scatter_figure(
    scores: dict[str, np.ndarray],
    fitness: np.ndarray,
    fitness_name: str,
    rho: dict[str, float | None],
    stem: Path,
    formats: Sequence[str] = ("png",),
    title: str | None = None,
) -> list[Path]:
    """One scatter panel per score column against measured fitness; each title gives the
    Spearman, its number of pairs and the spread expected by chance (±1/√(n−1))."""
    plt = load_pyplot()
    fig, axes = plt.subplots(1, len(scores), figsize=(3.4 * len(scores), 3.4), squeeze=False)
    for ax, (name, values) in zip(axes[0], scores.items(), strict=True):
        ok = np.isfinite(values) & np.isfinite(fitness)
        n = int(ok.sum())
        # markers that stay visible for a few mutants and do not blot out thousands
        size, alpha = (30.0, 0.8) if n <= 100 else (12.0, 0.5) if n <= 2000 else (4.0, 0.35)
        ax.scatter(values[ok], fitness[ok], s=size, alpha=alpha, color="tab:blue", linewidths=0)
        value = rho.get(name)
        chance = f", ±{1 / max(1, n - 1) ** 0.5:.2f} by chance" if n > 1 else ""
        ax.set_title(
            f"{name}\nSpearman {'n/a' if value is None else f'{value:+.3f}'} (n={n:,}{chance})",
            fontsize=8,
        )
        # the unit on a line of its own: one line each, neighbouring panels' labels ran together
        ax.set_xlabel(f"{name}\n({SCORE_UNITS.get(name, 'score')})", fontsize=8)
        ax.set_ylabel(fitness_name, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout(w_pad=1.5)
    return save_figure(fig, stem, formats)
