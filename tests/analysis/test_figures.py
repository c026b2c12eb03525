"""Per-head statistics behind the layer × head figures."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from protein_performer.analysis.figures import head_stats, uniform_stats


def test_head_stats_of_uniform_and_one_hot_heads():
    n = 7
    uniform = np.full((n, n), 1.0 / n)
    diagonal = np.eye(n)
    shifted = np.roll(np.eye(n), 1, axis=1) * 3.0  # unnormalised rows are normalised
    stats = head_stats(np.stack([uniform, diagonal, shifted])[None])
    assert stats["entropy"].shape == (1, 3)
    np.testing.assert_allclose(stats["entropy"][0], [math.log(n), 0.0, 0.0], atol=1e-12)
    shifted_distance = ((n - 1) * 1 + (n - 1)) / n  # n-1 rows one step on, the last n-1 back
    np.testing.assert_allclose(stats["distance"][0], [(n * n - 1) / (3 * n), 0.0, shifted_distance])
    np.testing.assert_allclose(stats["max_weight"][0], [1.0 / n, 1.0, 1.0])


def test_one_key_entropy_is_positive_zero():
    stats = head_stats(np.ones((1, 1, 1, 1)))
    assert stats["entropy"][0, 0] == 0.0 and not np.signbit(stats["entropy"][0, 0])


def test_uniform_stats_are_head_stats_of_uniform_attention() -> None:
    for n in (1, 2, 7, 40):
        full = np.full((1, 1, n, n), 1.0 / n)
        causal = (np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None])[None, None]
        for matrix, is_causal in ((full, False), (causal, True)):
            stats = head_stats(matrix)
            expected = uniform_stats(n, is_causal)
            for key in ("entropy", "distance", "max_weight"):
                assert math.isclose(stats[key][0, 0], expected[key], abs_tol=1e-12), (n, key)


def _drawn(monkeypatch, draw) -> list:
    """The matplotlib figures ``draw`` saves (not written)."""
    from protein_performer.analysis import figures

    figs: list = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, stem, formats=(): figs.append(fig))
    draw()
    return figs


@pytest.mark.slow
def test_a_large_head_grid_rasterizes_nothing_and_labels_its_axes(monkeypatch, tmp_path):
    """A rasterized artist makes the PDF backend render the whole figure once per artist: a
    12 x 16 grid's colour bars took minutes and 24 GB."""
    from protein_performer.analysis.figures import head_grid_figure

    att = np.full((12, 16, 60, 60), 1 / 60, dtype=np.float32)
    (fig,) = _drawn(
        monkeypatch,
        lambda: head_grid_figure(att, range(12), range(16), "A" * 60, tmp_path / "h"),
    )
    assert not [a for a in fig.findobj() if a.get_rasterized()]
    panels = [ax for ax in fig.axes if ax.get_title().startswith("layer")]
    assert len(panels) == 192
    assert sum(ax.get_xlabel() == "key residue" for ax in panels) == 16
    assert sum(ax.get_ylabel() == "query residue" for ax in panels) == 12
    bottom_left = next(ax for ax in panels if ax.get_title() == "layer 11 head 0")
    assert [t.get_text() for t in bottom_left.get_xticklabels()] == ["20", "40", "60"]
    assert fig.get_layout_engine() is None  # a layout engine's cost grows with panels²


def test_the_head_ranking_axis_shows_differences_from_uniform(monkeypatch, tmp_path):
    from protein_performer.analysis.figures import head_ranking_figure

    stats = {"entropy": np.array([[4.40, 4.42]]), "distance": np.array([[33.1, 33.4]])}
    (fig,) = _drawn(
        monkeypatch, lambda: head_ranking_figure(stats, [0], [0, 1], 100, tmp_path / "r")
    )
    low, high = fig.axes[1].get_ylim()
    assert 32.9 < low < 33.1 and 33.4 < high < 33.6  # not from 0: 33.1 vs 33.4 visible
    assert fig.axes[0].get_ylim()[1] > math.log(100)  # the uniform line inside the axis


def test_the_similarity_figure_says_what_is_missing_and_the_null(monkeypatch, tmp_path):
    from protein_performer.analysis.figures import similarity_figure

    m = np.random.default_rng(0).normal(size=(20, 20))
    matrices = {"attention": m, "flow": None, "substitution": m, "embedding": m}
    r = {"attention": -0.14, "attention_null": 0.03, "substitution": 0.1, "embedding": 0.3}
    notes = {"flow": "nothing to show here"}
    (fig,) = _drawn(
        monkeypatch,
        lambda: similarity_figure(matrices, r, m, tmp_path / "s", title="t", notes=notes),
    )
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert "attention (Vig et al.)\nr = -0.14 (null +0.03)" in titles
    assert "attention flow log-odds\nnot defined" in titles  # a panel, not a gap
    labels = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
    assert "cosine" in labels and "log-odds (half bits; diagonal not shown)" in labels


def test_a_saved_figure_carries_no_date_and_repeats_byte_for_byte(tmp_path):
    from protein_performer.analysis.figures import load_pyplot, save_figure

    plt = load_pyplot()
    saved = []
    for name in ("a", "b"):
        fig, ax = plt.subplots()
        ax.plot([1, 3, 2])
        saved.append([p.read_bytes() for p in save_figure(fig, tmp_path / name)])
    png, pdf = saved[0]
    assert b"CreationDate" not in pdf and b"Matplotlib" not in pdf and b"Matplotlib" not in png
    assert saved[0] == saved[1]


def test_max_pool_keeps_a_single_sharp_entry_and_covers_partial_blocks():
    from protein_performer.analysis.figures import max_pool, pool_factor

    n = 1342
    att = np.full((2, 1, n, n), 1e-4)
    att[0, 0, 1000, 7] = 0.93  # one sharp entry in a long protein
    att[1, 0, n - 1, n - 1] = 0.5  # in the last, partial block
    factor = pool_factor(n, 200)
    assert factor == 7  # ceil(1342 / 200): at most 200 cells per axis
    pooled = max_pool(att, factor)
    assert pooled.shape == (2, 1, 192, 192)  # ceil(1342 / 7)
    assert pooled[0, 0, 1000 // 7, 7 // 7] == pytest.approx(0.93)
    assert pooled[0, 0].max() == pytest.approx(0.93) and np.sum(pooled[0, 0] > 1e-3) == 1
    assert pooled[1, 0, -1, -1] == pytest.approx(0.5)  # padding never wins the maximum
    assert pooled.min() == pytest.approx(1e-4)
    # row and column factors apart; factor 1 is the matrix itself
    rect = max_pool(np.arange(12.0).reshape(3, 4), (3, 2))
    np.testing.assert_array_equal(rect, [[9.0, 11.0]])
    np.testing.assert_array_equal(max_pool(np.eye(3), 1), np.eye(3))
    assert pool_factor(40, 200) == 1 and pool_factor(201, 200) == 2
    with pytest.raises(ValueError, match="factor"):
        max_pool(np.eye(3), 0)


def test_a_long_protein_head_grid_draws_pooled_panels_in_residue_coordinates(monkeypatch, tmp_path):
    """1,342 residues in ~200-pixel panels: drawn as is, a one-key-per-query head keeps one
    residue in six and vanishes; pooled, its peak is in every panel cell it crosses."""
    from protein_performer.analysis.figures import head_grid_figure

    n = 1342
    att = np.zeros((1, 2, n, n), dtype=np.float32)
    att[0, 0] = np.eye(n)  # a sharp head: each query on itself
    att[0, 1] = 1.0 / n
    (fig,) = _drawn(
        monkeypatch,
        lambda: head_grid_figure(att, [0], [0, 1], "A" * n, tmp_path / "h", shared_scale=True),
    )
    panels = [ax for ax in fig.axes if ax.get_title().startswith("layer")]
    image = panels[0].get_images()[0]
    shown = np.asarray(image.get_array())
    assert shown.shape == (192, 192)
    np.testing.assert_allclose(np.diag(shown), 1.0)  # the diagonal, every cell of it
    assert image.get_extent() == [-0.5, n - 0.5, n - 0.5, -0.5]
    assert "maximum over 7×7 residue pairs" in " ".join(t.get_text() for t in fig.texts)


def test_the_alignment_figure_of_a_long_window_fits_and_keeps_the_stripe(monkeypatch, tmp_path):
    from protein_performer.analysis.figures import (
        MAX_ALIGNMENT_CELLS,
        MAX_ALIGNMENT_INCHES,
        alignment_figure,
    )

    q, h = 900, 4000  # the protein (last) after 4,000 homolog residues
    att = np.full((h + q, h + q), 1e-5)
    queries = np.arange(h, h + q)
    keys = np.arange(q) * 4  # the aligned residue of each query among the homologs
    att[queries, keys] = 1.0
    (fig,) = _drawn(
        monkeypatch,
        lambda: alignment_figure(att, (h, h + q), [(0, h)], queries, keys, tmp_path / "a"),
    )
    w, hh = fig.get_size_inches()
    assert w <= MAX_ALIGNMENT_INCHES[0] and hh <= MAX_ALIGNMENT_INCHES[1]
    shown = np.asarray(fig.axes[0].get_images()[0].get_array())
    assert max(shown.shape) <= MAX_ALIGNMENT_CELLS
    # every pooled query row still holds its stripe cell at the full row share
    assert shown.max(axis=1).min() > 0.5


def test_score_panels_x_labels_do_not_run_together(monkeypatch, tmp_path):
    from protein_performer.analysis.figures import score_scatter_figure

    rng = np.random.default_rng(0)
    names = ("masked_marginal_context", "masked_marginal", "pssm", "blosum62")
    scores = {k: rng.normal(size=50) for k in names}
    (fig,) = _drawn(
        monkeypatch,
        lambda: score_scatter_figure(
            scores, rng.normal(size=50), "fitness", dict.fromkeys(names, 0.1), tmp_path / "s"
        ),
    )
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [ax.xaxis.label.get_window_extent(renderer) for ax in fig.axes]
    for left, right in itertools.pairwise(boxes):
        assert left.x1 < right.x0, "x-labels of neighbouring panels overlap"
