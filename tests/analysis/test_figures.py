"""Per-head statistics behind the layer × head figures."""

from __future__ import annotations

import math

import numpy as np

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
