"""Similarity views: each recovers planted structure; BLOSUM62 against itself; null and random
models stay near zero."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from protein_performer.analysis.similarity import (
    AA_ORDER,
    AttentionCounts,
    SimilarityResult,
    aa_similarity,
    blosum62,
    embedding_cosine,
    offdiag_pearson,
    sample_proteins,
    substitution_joint,
    substitution_log_odds,
    vig_similarity,
)
from protein_performer.data.alphabet import default_alphabet
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM
from tests.analysis.planted import GROUPS, group_of, planted_model, random_proteins

ALPHABET = default_alphabet()


def idx(aa: str) -> int:
    return AA_ORDER.index(aa)


def test_blosum62_is_20x20_symmetric_and_matches_itself() -> None:
    b = blosum62()
    assert b.shape == (20, 20)
    np.testing.assert_array_equal(b, b.T)
    assert b[idx("W"), idx("W")] == 11 and b[idx("D"), idx("E")] == 2
    assert offdiag_pearson(b, b) == pytest.approx(1.0)
    assert offdiag_pearson(-b, b) == pytest.approx(-1.0)


def test_pearson_is_none_when_undefined() -> None:
    b = blosum62()
    assert offdiag_pearson(None, b) is None
    assert offdiag_pearson(np.ones((20, 20)), b) is None  # constant: no correlation
    # constant but for rounding (cosines of equal angles): no correlation either
    noisy = np.full((20, 20), 0.5) + np.random.default_rng(0).normal(0, 1e-16, (20, 20))
    assert noisy.std() > 0 and offdiag_pearson(noisy, b) is None
    assert offdiag_pearson(np.full((20, 20), 0.5) + 1e-6 * b, b) == pytest.approx(1.0)
    few = np.full((20, 20), np.nan)
    few[0, 1:5] = [1, 2, 3, 4]
    assert offdiag_pearson(few, b) is None  # under 20 defined pairs


@pytest.fixture(scope="module")
def planted_result():
    model = planted_model()
    proteins = random_proteins(200, 30, seed=0)
    return aa_similarity(model, proteins, ALPHABET, threshold=0.1, min_arcs=10, seed=0)


def test_planted_attention_view_recovers_the_groups(planted_result) -> None:
    sim = planted_result.matrices["attention"]
    assert sim.shape == (20, 20)
    np.testing.assert_allclose(sim, sim.T, atol=1e-12)
    for members in GROUPS:
        for a in members:
            for b in members:
                assert sim[idx(a), idx(b)] > 0.9, (a, b)
    assert sim[idx("D"), idx("K")] < 0 and sim[idx("F"), idx("S")] < 0
    assert planted_result.info["heads_kept"] == 8
    # groups chosen like BLOSUM62's blocks, so the view correlates with it; the null does not
    r, null = planted_result.r["attention"], planted_result.r["attention_null"]
    assert r > 0.4
    assert abs(null) < r - 0.15


def test_planted_flow_view_is_high_within_groups() -> None:
    """The last planted head attends within the query's group: its flow shows the groups."""
    res = aa_similarity(
        planted_model(), random_proteins(100, 30, seed=1), ALPHABET, heads=[len(GROUPS)]
    )
    flow = res.matrices["flow"]
    np.testing.assert_allclose(flow, flow.T, atol=1e-12)
    within = [flow[idx(a), idx(b)] for m in GROUPS for a in m for b in m if a != b]
    across = [
        flow[i, j]
        for i in range(20)
        for j in range(20)
        if i != j and group_of(AA_ORDER[i]) != group_of(AA_ORDER[j])
    ]
    assert min(within) > max(across)
    assert res.r["flow"] > 0.25


def test_uniform_attention_flow_is_zero_log_odds() -> None:
    counts = AttentionCounts(n_heads=2, threshold=0.3)
    rng = np.random.default_rng(0)
    for _ in range(5):
        n = 40
        types = rng.integers(0, 20, n)
        counts.add(np.full((2, n, n), 1.0 / n), types)
    from protein_performer.analysis.similarity import flow_log_odds

    lo = flow_log_odds(counts.flow, counts.expected)
    seen = counts.expected > 0
    np.testing.assert_allclose(lo[seen & seen.T], 0.0, atol=1e-9)
    assert counts.arcs.sum() == 0  # 1/40 < 0.3: no arcs


def test_uniform_causal_attention_gives_no_arcs_and_zero_flow_log_odds() -> None:
    from protein_performer.analysis.similarity import flow_log_odds

    n = 60
    causal = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]  # row i: 1/(i+1)
    rng = np.random.default_rng(0)
    counts = AttentionCounts(n_heads=2, threshold=0.3, causal=True)
    plain = AttentionCounts(n_heads=2, threshold=0.3)
    for _ in range(5):
        types = rng.integers(0, 20, n)
        counts.add(np.stack([causal, causal]), types)
        plain.add(np.stack([causal, causal]), types)
    # the first rows see 1-3 keys: every one of them is an arc unless they are left out
    assert plain.arcs.sum() == 2 * 5 * (1 + 2 + 3) and counts.arcs.sum() == 0
    assert counts.min_keys == 34
    lo = flow_log_odds(counts.flow, counts.expected)
    seen = counts.expected > 0
    np.testing.assert_allclose(lo[seen & seen.T], 0.0, atol=1e-9)
    # a row that sees enough keys and puts half its weight on one is counted
    peaked = causal.copy()
    peaked[50] = 0.5 / 50
    peaked[50, 7] = 0.5 + 0.5 / 50
    counts.add(np.stack([peaked, causal]), np.arange(n) % 20)
    assert counts.arcs.sum() == 1 and counts.arcs[0, 7] == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_model_attention_view_is_near_zero(seed: int) -> None:
    torch.manual_seed(seed)
    cfg = ModelConfig(attention="transformer", dim=64, depth=2, heads=8, ffn_dim=64, max_len=64)
    model = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx).eval()
    with torch.no_grad():  # sharper random attention, so that arcs pass the threshold
        for block in model.blocks:
            block.attn.qkv.weight.mul_(20)
    res = aa_similarity(model, random_proteins(200, 30, seed), ALPHABET, threshold=0.1, min_arcs=10)
    assert res.info["heads_kept"] >= 8
    assert abs(res.r["attention"]) < 0.25
    assert abs(res.r["flow"]) < 0.25


def test_vig_drops_heads_with_few_arcs() -> None:
    arcs = np.zeros((5, 20), dtype=np.int64)
    arcs[:4] = np.random.default_rng(0).integers(0, 50, (4, 20))
    arcs[4, 0] = 5
    sim, kept = vig_similarity(arcs, min_arcs=100)
    assert kept.tolist() == [True] * 4 + [False]
    assert sim.shape == (20, 20)
    sim_none, kept_none = vig_similarity(arcs, min_arcs=10**6)
    assert sim_none is None and not kept_none.any()
    # a correlation across heads needs three of them: three give one, two none
    three, _ = vig_similarity(arcs[:3], min_arcs=100)
    np.testing.assert_allclose(three, np.corrcoef((arcs[:3] / arcs[:3].sum(1, keepdims=True)).T))
    assert vig_similarity(arcs[:2], min_arcs=100)[0] is None


def test_substitution_log_odds_recovers_blosum_from_its_target_frequencies() -> None:
    """BLOSUM's entries are 2·log2(q_ab / p_a p_b): a joint built from them comes back."""
    b = blosum62()
    p = np.random.default_rng(0).dirichlet(np.full(20, 20.0))
    joint = np.outer(p, p) * 2.0 ** (b / 2)
    lo = substitution_log_odds(joint * 1234.5)
    assert offdiag_pearson(lo, b) > 0.9  # up to the marginals, which are re-estimated
    np.testing.assert_allclose(lo, lo.T, atol=1e-12)
    assert substitution_log_odds(np.zeros((20, 20))) is None


def test_substitution_joint_counts_masked_standard_positions() -> None:
    model = planted_model()
    proteins = random_proteins(20, 30, seed=3)
    joint, positions = substitution_joint(model, proteins, ALPHABET, mask_prob=0.2, seed=1)
    assert joint.shape == (20, 20)
    assert joint.sum() == pytest.approx(positions)  # each position adds one distribution
    again, _ = substitution_joint(model, proteins, ALPHABET, mask_prob=0.2, seed=1)
    np.testing.assert_array_equal(joint, again)  # seeded
    other, _ = substitution_joint(model, proteins, ALPHABET, mask_prob=0.2, seed=2)
    assert not np.array_equal(joint, other)


def test_embedding_view_recovers_planted_embeddings() -> None:
    model = planted_model()
    rng = np.random.default_rng(0)
    with torch.no_grad():
        w = model.embed.tokens.weight
        for aa in AA_ORDER:
            vec = np.zeros(w.shape[1])
            vec[group_of(aa)] = 1.0
            vec += 0.05 * rng.standard_normal(w.shape[1])
            w[ALPHABET.index(aa)] = torch.from_numpy(vec)
    cos = embedding_cosine(model, ALPHABET)
    assert cos[idx("D"), idx("E")] > 0.7 > cos[idx("D"), idx("K")]
    assert offdiag_pearson(cos, blosum62()) > 0.3


def test_sample_is_seeded_and_cropped() -> None:
    proteins = random_proteins(50, 40, seed=0)
    a = sample_proteins(proteins, 10, 25, seed=1)
    b = sample_proteins(proteins, 10, 25, seed=1)
    c = sample_proteins(proteins, 10, 25, seed=2)
    assert [p.id for p in a] == [p.id for p in b] != [p.id for p in c]
    assert all(p.sequence_length == 25 and p.cropped == 15 for p in a)
    assert len(sample_proteins(proteins, None, 100, 0)) == 50


def test_substitution_log_odds_symmetrises_the_joint() -> None:
    joint = np.random.default_rng(1).random((20, 20)) + 0.1
    lo = substitution_log_odds(joint)
    np.testing.assert_allclose(lo, lo.T, atol=1e-12)
    np.testing.assert_allclose(lo, substitution_log_odds((joint + joint.T) / 2), atol=1e-12)


def test_null_redraws_targets_from_the_proteins_own_composition() -> None:
    """Row-permutation null: an arc's target is redrawn among the same protein's residues, so
    a protein that is 90% A sends ~90% of the null arcs to A, whatever the real targets."""
    n = 100
    types = np.full(n, idx("A"))
    types[:10] = idx("W")
    att = np.zeros((1, n, n))
    att[:, :, 0] = 0.5  # every row: one strong arc, to the W at position 0
    att[:, :, 1:] = 0.5 / (n - 1)
    counts = AttentionCounts(n_heads=1, threshold=0.3, seed=0)
    for _ in range(5):
        counts.add(att, types)
    assert counts.arcs[0, idx("W")] == 5 * n and counts.arcs.sum() == 5 * n
    share_a = counts.null_arcs[0, idx("A")] / counts.null_arcs.sum()
    assert 0.85 < share_a < 0.95


def test_a_causal_model_gets_no_substitution_view() -> None:
    """A causal model never saw <mask>: its prediction there says nothing about substitution
    preferences, so the view is left out (and said so); the attention views stay."""
    cfg = ModelConfig(attention="transformer", dim=32, depth=1, heads=4, ffn_dim=32, max_len=64)
    proteins = random_proteins(20, 30, 0)
    for causal in (False, True):
        torch.manual_seed(0)
        model = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx, causal=causal).eval()
        res = aa_similarity(model, proteins, ALPHABET, threshold=0.05, min_arcs=1)
        assert (res.matrices["substitution"] is None) == causal
        assert (res.info["masked_positions"] == 0) == causal
        assert ("never saw <mask>" in (res.info["note"] or "")) == causal
        if causal:  # 30 residues, rows of >= 10 / 0.05 = 200 keys: no arc; a higher θ helps
            assert res.matrices["attention"] is None and "lower threshold" not in res.info["note"]
            assert (
                ">= 200 keys: longer proteins, or a higher threshold (e.g. 0.1: >= 100 keys)"
                in (res.info["note"])
            )
        said = "(not defined: a causal model never predicts at a masked site)"
        assert (said in res.format()) == causal
        assert res.matrices["embedding"] is not None


def test_auto_threshold_takes_the_highest_with_three_heads_and_equals_that_threshold() -> None:
    model = planted_model()
    proteins = random_proteins(60, 30, seed=0)
    auto = aa_similarity(model, proteins, ALPHABET, threshold="auto", min_arcs=10, seed=0)
    kept = {}
    for theta in (0.3, 0.2, 0.1):
        fixed = aa_similarity(model, proteins, ALPHABET, threshold=theta, min_arcs=10, seed=0)
        kept[theta] = fixed.info["heads_kept"]
        if fixed.info["heads_kept"] >= 3:
            break
    assert auto.info["threshold"] == theta and auto.info["threshold_auto"] is True
    assert all(n < 3 for t, n in kept.items() if t > theta)
    assert auto.info["heads_kept"] == fixed.info["heads_kept"] >= 3
    assert auto.r == pytest.approx(fixed.r)  # the same counts, the same null draws
    np.testing.assert_allclose(auto.matrices["flow"], fixed.matrices["flow"])


def test_auto_threshold_with_no_head_passing_reports_the_lowest() -> None:
    model = planted_model()
    proteins = random_proteins(5, 30, seed=0)
    result = aa_similarity(model, proteins, ALPHABET, threshold="auto", min_arcs=10**6)
    assert result.matrices["attention"] is None and result.info["threshold"] == 0.01
    assert "a lower threshold (e.g. 0.005)" in result.info["note"]


def test_the_header_gives_the_pairs_defined_and_few_proteins_get_a_note() -> None:
    """The header said "190 pairs" above "45 of 190 pairs defined"; with a handful of proteins
    nothing said why views were missing pairs."""
    cfg = ModelConfig(attention="transformer", dim=32, depth=1, heads=4, ffn_dim=32, max_len=64)
    torch.manual_seed(0)
    model = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx).eval()
    few = aa_similarity(model, random_proteins(3, 30, 0), ALPHABET, threshold=0.05, min_arcs=1)
    header, *_ = few.format().splitlines()
    views = ("attention", "flow", "substitution", "embedding")
    shown = [v for v in views if few.matrices[v] is not None]
    short = {v: n for v, n in few.info["pairs"].items() if v in shown and n < 190}
    assert short, few.info["pairs"]  # 3 proteins of 30 residues cannot reach every pair
    assert "190 pairs)" not in header
    for view, n in short.items():
        assert f"{view} {n} of 190" in header
    assert "note: too few proteins (3) for every view" in few.format()
    # every pair defined: the header says 190 and no note
    full = SimilarityResult(
        matrices={v: np.ones((20, 20)) for v in ("attention", "flow", "substitution", "embedding")},
        r=dict.fromkeys(("attention", "attention_null", "flow", "substitution", "embedding"), 0.5),
        info={**few.info, "proteins": 800, "pairs": dict.fromkeys(
            ("attention", "attention_null", "flow", "substitution", "embedding"), 190)},
    )  # fmt: skip
    assert "(Pearson r, 190 pairs), 800 proteins" in full.format()
    assert "too few proteins" not in full.format()


def test_auto_threshold_below_the_first_takes_its_null_at_the_chosen_threshold() -> None:
    """min_arcs out of reach at 0.3 and 0.2: auto counts at 0.1, and every number of the
    attention view, the row-permutation null included, is that of threshold=0.1."""
    model = planted_model()
    proteins = random_proteins(6, 30, seed=0)
    kw = {"min_arcs": 600, "seed": 0, "mask_prob": 0.5}
    auto = aa_similarity(model, proteins, ALPHABET, threshold="auto", **kw)
    fixed = aa_similarity(model, proteins, ALPHABET, threshold=0.1, **kw)
    assert auto.info["threshold"] == 0.1 and fixed.info["heads_kept"] >= 3
    assert auto.info["arcs_per_head"] == fixed.info["arcs_per_head"]
    assert auto.r["attention_null"] is not None
    assert auto.r["attention_null"] == pytest.approx(fixed.r["attention_null"])
    np.testing.assert_allclose(
        auto.matrices["attention_null"], fixed.matrices["attention_null"], equal_nan=True
    )
    assert auto.r["attention"] == pytest.approx(fixed.r["attention"])
