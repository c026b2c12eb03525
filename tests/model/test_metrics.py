"""Loss and metrics: only labelled positions count; causal loss predicts the next token."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from protein_performer.data.alphabet import default_alphabet
from protein_performer.model.metrics import (
    causal_unigram_sums,
    lm_token_stats,
    mlm_input_kind_stats,
    perplexity,
    unigram_log_probs,
)


def _data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 7, 31, generator=g, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(6, 26, (2, 7), generator=g)
    return logits, ids


def test_mlm_loss_counts_only_masked_positions():
    logits, ids = _data()
    labels = torch.full_like(ids, -100)
    masked = torch.tensor([[0, 1, 0, 0, 1, 0, 0], [1, 0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    labels[masked] = ids[masked]
    stats = lm_token_stats(logits, labels, causal=False)
    expected = F.cross_entropy(logits[masked], ids[masked], reduction="sum")
    torch.testing.assert_close(stats.nll_sum, expected)
    assert int(stats.count) == 4
    assert int(stats.correct) == int((logits[masked].argmax(-1) == ids[masked]).sum())
    # no gradient reaches unmasked positions, and changing them leaves the loss unchanged
    stats.nll_sum.backward()
    assert logits.grad[~masked].abs().max() == 0
    assert logits.grad[masked].abs().min() > 0
    other = logits.detach().clone()
    other[~masked] += torch.randn_like(other[~masked]) * 10
    torch.testing.assert_close(lm_token_stats(other, labels, causal=False).nll_sum, expected)


def test_causal_loss_predicts_next_token_and_skips_padding():
    logits, ids = _data(1)
    labels = ids.clone()
    labels[1, 5:] = -100  # padding of the second row
    stats = lm_token_stats(logits, labels, causal=True)
    expected = sum(
        F.cross_entropy(logits[b, t][None], ids[b, t + 1][None], reduction="sum")
        for b in range(2)
        for t in range(6)
        if labels[b, t + 1] != -100
    )
    torch.testing.assert_close(stats.nll_sum, expected)
    assert int(stats.count) == 6 + 4


def test_perplexity_is_exp_of_mean_nll():
    assert math.isclose(perplexity(2.0 * 10, 10), math.exp(2.0))
    assert math.isnan(perplexity(0.0, 0))
    # uniform predictions over 20 residues have perplexity 20
    logits = torch.zeros(1, 5, 20)
    labels = torch.arange(5)[None]
    s = lm_token_stats(logits, labels, causal=False)
    assert math.isclose(perplexity(float(s.nll_sum), float(s.count)), 20.0, rel_tol=1e-6)


def test_mlm_stats_split_by_what_the_input_showed():
    logits, ids = _data(2)
    mask_idx = 3
    labels = torch.full_like(ids, -100)
    inputs = ids.clone()
    # row 0: <mask> at 1 and 4, kept at 2, random at 6; row 1: <mask> at 0, random at 3
    kinds = {(0, 1): "mask", (0, 4): "mask", (1, 0): "mask", (0, 2): "unchanged"}
    kinds.update({(0, 6): "random", (1, 3): "random"})
    for (b, t), kind in kinds.items():
        labels[b, t] = ids[b, t]
        if kind == "mask":
            inputs[b, t] = mask_idx
        elif kind == "random":
            inputs[b, t] = 6 + (ids[b, t] - 6 + 1) % 20  # another residue
    split = mlm_input_kind_stats(logits, labels, inputs, mask_idx)
    assert list(split) == ["mask", "random", "unchanged"]
    for kind in split:
        pos = [bt for bt, k in kinds.items() if k == kind]
        rows, cols = torch.tensor([p[0] for p in pos]), torch.tensor([p[1] for p in pos])
        expected = F.cross_entropy(logits[rows, cols], ids[rows, cols], reduction="sum")
        torch.testing.assert_close(split[kind].nll_sum, expected.detach())
        assert int(split[kind].count) == len(pos)
        hits = (logits[rows, cols].argmax(-1) == ids[rows, cols]).sum()
        assert int(split[kind].correct) == int(hits)
    total = lm_token_stats(logits, labels, causal=False)
    torch.testing.assert_close(sum(st.nll_sum for st in split.values()), total.nll_sum.detach())
    # bf16 logits are scored in float32, like the loss
    half = mlm_input_kind_stats(logits.detach().bfloat16(), labels, inputs, mask_idx)
    ref = mlm_input_kind_stats(logits.detach().bfloat16().float(), labels, inputs, mask_idx)
    for kind in split:
        assert half[kind].nll_sum.dtype == torch.float32
        torch.testing.assert_close(half[kind].nll_sum, ref[kind].nll_sum)


def test_mlm_stats_random_draw_of_the_true_residue_counts_as_unchanged():
    logits, ids = _data(3)
    labels = torch.full_like(ids, -100)
    labels[0, :3] = ids[0, :3]
    inputs = ids.clone()  # all three predicted positions show their true residue
    split = mlm_input_kind_stats(logits, labels, inputs, mask_idx=3)
    assert [int(split[k].count) for k in ("mask", "random", "unchanged")] == [0, 0, 3]
    assert float(split["mask"].nll_sum) == 0.0 and float(split["random"].nll_sum) == 0.0


def test_alignment_nll_scores_the_attention_on_the_aligned_key_at_scored_positions():
    from protein_performer.model.metrics import alignment_nll

    att = torch.full((2, 5, 5), 0.2, dtype=torch.float64, requires_grad=True)
    align = torch.tensor([[-1, -1, -1, 0, 1], [-1, -1, 2, 3, -1]])
    labels = torch.tensor([[-100, -100, -100, 7, -100], [-100, -100, 9, 9, 9]])
    with torch.no_grad():
        att[0, 3, 0] = 0.6  # the one scored, aligned position of row 0
        att[1, 3, 3] = 0.05
    nll, mass = alignment_nll(att, align, labels, eps=0.0)
    # row 0: (3 -> 0) scored; (4 -> 1) not scored; row 1: (2 -> 2), (3 -> 3); (4) no alignment
    expected = -(torch.log(torch.tensor([0.6, 0.2, 0.05], dtype=torch.float64))).mean()
    torch.testing.assert_close(nll, expected)
    assert float(mass) == pytest.approx((0.6 + 0.2 + 0.05) / 3)
    nll.backward()
    assert att.grad[0, 3, 0] < 0 and att.grad[0, 4, 1] == 0 and att.grad[1, 4].abs().sum() == 0
    none = alignment_nll(att, torch.full((2, 5), -1), labels)
    assert none == (None, None)


def test_next_token_counts_are_the_targets_after_the_first_position():
    from protein_performer.model.metrics import add_next_token_counts

    labels = torch.tensor([[1, 5, 5, 7, -100], [2, 3, -100, -100, -100]])
    hist = torch.zeros(9, dtype=torch.float64)
    add_next_token_counts(hist, labels)
    add_next_token_counts(hist, labels[:1])  # accumulates
    expected = torch.zeros(9, dtype=torch.float64)
    for t in [5, 5, 7, 3, 5, 5, 7]:  # labels[:, 1:] without the ignored ones
        expected[t] += 1
    assert torch.equal(hist, expected)


def _residue_counts(alphabet):
    letters = np.array([len(t) == 1 for t in alphabet.tokens])
    counts = np.zeros(len(alphabet), dtype=np.float64)
    counts[letters] = np.arange(letters.sum()) * 3.0  # one letter never seen
    counts[~letters] = 50.0  # specials' counts are not frequencies
    return letters, counts


def test_unigram_baseline_is_add_one_frequencies_of_the_residue_letters():
    alphabet = default_alphabet()
    letters, counts = _residue_counts(alphabet)
    got = unigram_log_probs(counts, alphabet).double()
    want = np.log((counts[letters] + 1.0) / (counts[letters] + 1.0).sum())
    np.testing.assert_allclose(got[letters].numpy(), want, rtol=1e-6)
    assert torch.isinf(got[~letters]).all() and (got[~letters] < 0).all()


def test_causal_unigram_gives_the_specials_their_own_rate_among_the_targets():
    alphabet = default_alphabet()
    letters, counts = _residue_counts(alphabet)
    hist = torch.zeros(len(alphabet), dtype=torch.float64)
    res = np.flatnonzero(letters)
    hist[res[:5]] = torch.tensor([4.0, 0.0, 7.0, 1.0, 2.0], dtype=torch.float64)
    hist[alphabet.eos_idx] = 6.0
    sums, where = causal_unigram_sums(hist, counts, alphabet, "train")
    # by hand: residues share 1 - 6/20 of the mass by their add-one frequencies; <eos> 6/20
    freq = (counts[letters] + 1.0) / (counts[letters] + 1.0).sum()
    p = np.zeros(len(alphabet))
    p[letters] = freq * (1 - 6 / 20)
    p[alphabet.eos_idx] = 6 / 20
    h = hist.numpy()
    nll = -(h[h > 0] * np.log(p[h > 0])).sum()
    np.testing.assert_allclose(
        sums.numpy(), [nll, 20.0, h[int(np.argmax(p))]], rtol=1e-6
    )  # the log-probabilities are float32
    assert where == "train residue and target <eos>/<sep>"
    # residues only: their frequencies as they are
    hist[alphabet.eos_idx] = 0.0
    sums, where = causal_unigram_sums(hist, counts, alphabet, "train")
    h = hist.numpy()
    p = np.log(freq)[np.searchsorted(res, res[:5])]
    np.testing.assert_allclose(
        sums[0].item(), -(h[res[:5]] * p).sum(), rtol=1e-6
    )  # the log-probabilities are float32
    assert where == "train"
