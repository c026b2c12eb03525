"""MLM masking statistics and reproducibility, causal labels, collated batch contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.batching import TokenBudgetBatchSampler
from protein_performer.data.datasets import ConcatWindowDataset, CropDataset, keyed_rng
from protein_performer.data.masking import (
    IGNORE_INDEX,
    CausalCollator,
    MLMCollator,
    causal_labels,
    make_collator,
    mask_tokens,
)
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError

A = default_alphabet()
AA = "ACDEFGHIKLMNPQRSTVWY"


def random_source(n: int, lo: int, hi: int, seed: int = 0, letters: str = AA) -> FlatSource:
    rng = np.random.default_rng(seed)
    seqs = [
        "".join(rng.choice(list(letters), size=int(rng.integers(lo, hi + 1)))) for _ in range(n)
    ]
    return FlatSource.from_strings(seqs)


def collate_all(ds, collator, epoch=0, batch=32):
    items = [ds[(i, epoch)] for i in range(len(ds))]
    return [collator(items[i : i + batch]) for i in range(0, len(items), batch)], items


def test_mlm_statistics_and_labels():
    src = random_source(600, 50, 350, seed=1, letters=AA + "X")
    ds = CropDataset(src, max_length=256, seed=0)
    batches, items = collate_all(ds, MLMCollator(A, seed=3))
    n_res = n_sel = n_mask = n_same = n_random = 0
    random_tokens = []
    for bi, batch in enumerate(batches):
        x, y, pad = batch["input_ids"], batch["labels"], batch["padding_mask"]
        assert x.dtype == torch.int64 and y.dtype == torch.int64 and pad.dtype == torch.bool
        assert x.shape == y.shape == pad.shape
        for row in range(x.shape[0]):
            orig = torch.as_tensor(items[bi * 32 + row]["tokens"])
            n = len(orig)
            assert pad[row, :n].logical_not().all() and pad[row, n:].all()
            assert (x[row, n:] == A.pad_idx).all() and (y[row, n:] == IGNORE_INDEX).all()
            special = torch.as_tensor(A.special_mask(orig.numpy()))
            sel = y[row, :n] != IGNORE_INDEX
            assert not (sel & special).any(), "specials are never selected"
            assert (x[row, :n][special] == orig[special]).all()
            assert (y[row, :n][sel] == orig[sel]).all(), "labels hold the original tokens"
            assert (x[row, :n][~sel] == orig[~sel]).all(), "unselected positions untouched"
            xs, os_ = x[row, :n][sel], orig[sel]
            n_res += int((~special).sum())
            n_sel += int(sel.sum())
            n_mask += int((xs == A.mask_idx).sum())
            n_same += int((xs == os_).sum())
            changed = (xs != A.mask_idx) & (xs != os_)
            n_random += int(changed.sum())
            random_tokens += xs[changed].tolist()
    assert n_res > 100_000
    assert abs(n_sel / n_res - 0.15) < 0.004
    assert abs(n_mask / n_sel - 0.80) < 0.012
    # a random replacement equals the original 1 time in 20 (uniform over 20 standard residues;
    # X is never drawn, and X originals are always "changed")
    assert abs(n_random / n_sel - 0.10 * 0.95) < 0.008
    assert abs(n_same / n_sel - (0.10 + 0.10 * 0.05)) < 0.008
    assert set(random_tokens) == set(A.standard_ids.tolist())


def test_selection_count_per_sequence():
    rng = np.random.default_rng(0)
    for n in [1, 2, 3, 5, 6, 7, 20, 33, 100, 1000]:
        tokens = np.array([A.cls_idx, *rng.integers(6, 26, size=n), A.eos_idx])
        counts = set()
        for trial in range(40):
            _, labels = mask_tokens(tokens, A, keyed_rng(3, 0, trial, n), mask_prob=0.15)
            k = int((labels != IGNORE_INDEX).sum())
            counts.add(k)
            assert max(1, int(np.floor(0.15 * n))) <= k <= max(1, int(np.ceil(0.15 * n)))
        if n >= 7 and 0.15 * n != int(0.15 * n):
            assert len(counts) == 2, "fractional counts are rounded at random, not always down"


def test_masking_from_a_start_leaves_the_tokens_before_it_alone():
    rng = np.random.default_rng(4)
    tokens = np.array(
        [
            A.cls_idx,
            *rng.integers(6, 26, size=80),
            A.sep_idx,
            *rng.integers(6, 26, size=40),
            A.eos_idx,
        ]
    )
    for trial in range(20):
        x, y = mask_tokens(tokens, A, keyed_rng(3, 0, trial), mask_prob=0.5, start=82)
        assert (y[:82] == IGNORE_INDEX).all() and (x[:82] == tokens[:82]).all()
        assert int((y != IGNORE_INDEX).sum()) == 20  # half of the 40 residues after the start
    # an item's "mask_from" reaches mask_tokens through the collator
    c = MLMCollator(A, mask_prob=0.5, seed=1)
    batch = c([{"tokens": tokens, "index": 0, "epoch": 0, "mask_from": 82}])
    assert (batch["labels"][0, :82] == IGNORE_INDEX).all()
    assert int((batch["labels"][0, 82:] != IGNORE_INDEX).sum()) == 20


def test_the_defaults_are_berts_15_percent_and_80_10_10():
    # floor(0.15 * 200 + u) = 30 selected of 200 residues; of many draws, 80 % <mask>
    tokens = np.array([A.cls_idx, *[A.index("L")] * 200, A.eos_idx])
    masked = changed = 0
    for trial in range(200):
        x, y = mask_tokens(tokens, A, keyed_rng(9, trial))
        picked = y != IGNORE_INDEX
        assert int(picked.sum()) == 30
        masked += int((x[picked] == A.mask_idx).sum())
        changed += int(((x[picked] != A.mask_idx) & (x[picked] != tokens[picked])).sum())
    assert masked / 6000 == pytest.approx(0.8, abs=0.02)
    # a random amino acid is L again one time in 20: 10 % x 19/20 changed
    assert changed / 6000 == pytest.approx(0.095, abs=0.015)


def test_no_residues_no_labels():
    tokens = np.array([A.cls_idx, A.eos_idx, A.pad_idx, A.sep_idx])
    x, y = mask_tokens(tokens, A, keyed_rng(0, 0))
    assert (y == IGNORE_INDEX).all() and (x == tokens).all()


def test_masks_depend_only_on_seed_epoch_index():
    src = random_source(40, 20, 90, seed=2)
    ds = CropDataset(src, max_length=64)
    c = MLMCollator(A, seed=5)
    items = [ds[(i, 1)] for i in range(40)]
    full = c(items)
    alone = c([items[7]])
    n = len(items[7]["tokens"])
    assert torch.equal(alone["input_ids"][0], full["input_ids"][7, :n])
    assert torch.equal(alone["labels"][0], full["labels"][7, :n])
    assert torch.equal(c(items)["labels"], full["labels"])
    other_seed = MLMCollator(A, seed=6)(items)
    assert not torch.equal(other_seed["labels"], full["labels"])
    # same tokens, other epoch or index: other masks
    other_epoch = c([{**it, "epoch": 2} for it in items])
    assert not torch.equal(other_epoch["labels"], full["labels"])
    other_index = c([{**it, "index": it["index"] + 100} for it in items])
    assert not torch.equal(other_index["labels"], full["labels"])


def loader_batches(ds, sampler, collator, num_workers, epochs):
    dl = DataLoader(
        ds,
        batch_sampler=sampler,
        collate_fn=collator,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )
    out = []
    for epoch in epochs:
        sampler.set_epoch(epoch)
        out.append(list(dl))
    return out


def test_reproducible_across_num_workers():
    src = random_source(120, 10, 300, seed=4)
    ds = CropDataset(src, max_length=128, seed=9)

    def run(num_workers):
        sampler = TokenBudgetBatchSampler(ds.lengths, 1024, seed=9)
        return loader_batches(ds, sampler, MLMCollator(A, seed=9), num_workers, epochs=(0, 1))

    serial, parallel = run(0), run(2)
    for e in range(2):
        assert len(serial[e]) == len(parallel[e]) > 1
        for a, b in zip(serial[e], parallel[e], strict=True):
            for key in ("input_ids", "labels", "padding_mask"):
                assert torch.equal(a[key], b[key])
    # and the two epochs differ (crop, batch order and masks move with the epoch)
    assert any(
        a["input_ids"].shape != b["input_ids"].shape or not torch.equal(a["labels"], b["labels"])
        for a, b in zip(serial[0], serial[1], strict=False)
    )


def test_concat_windows_never_mask_separators():
    src = random_source(200, 1, 30, seed=5)
    ds = ConcatWindowDataset(src, max_length=64, seed=1)
    batches, items = collate_all(ds, MLMCollator(A, seed=1))
    x = torch.cat([b["input_ids"] for b in batches])
    y = torch.cat([b["labels"] for b in batches])
    orig = torch.as_tensor(np.stack([it["tokens"] for it in items]))
    sep = orig == A.sep_idx
    assert sep.any() and not (y[sep] != IGNORE_INDEX).any()
    assert (x[sep] == A.sep_idx).all()
    assert not torch.cat([b["padding_mask"] for b in batches]).any()
    assert abs((y != IGNORE_INDEX).sum().item() / (~sep).sum().item() - 0.15) < 0.01


def test_causal_labels_unshifted_with_ignored_padding():
    src = FlatSource.from_strings(["MKV", "ACDEFG", ""])
    ds = CropDataset(src, max_length=16)
    batch = CausalCollator(A)([ds[i] for i in range(3)])
    x, y, pad = batch["input_ids"], batch["labels"], batch["padding_mask"]
    expected = [
        [A.cls_idx, *A.encode("MKV").tolist(), A.eos_idx, 0, 0, 0],
        [A.cls_idx, *A.encode("ACDEFG").tolist(), A.eos_idx],
        [A.cls_idx, A.eos_idx, 0, 0, 0, 0, 0, 0],
    ]
    assert x.tolist() == expected
    assert pad.tolist() == [[t == 0 for t in row] for row in expected]
    assert y.tolist() == [[IGNORE_INDEX if t == 0 else t for t in row] for row in expected]
    assert torch.equal(causal_labels(x, pad), y)


def test_causal_targets_leave_out_what_a_crop_cut():
    from protein_performer.data.sources import split_long_records

    src = FlatSource.from_strings(["ACDEFGHIKLMNPQRSTVWY", "MKV"])
    ds = CropDataset(src, max_length=8, seed=3)  # 6 residues of the long one
    for epoch in range(6):
        item = ds[(0, epoch)]
        start = ds.crop_start(0, epoch)
        assert item.get("cut_start", False) == (start > 0)
        assert item.get("cut_end", False) == (start + 6 < 20)
        batch = CausalCollator(A)([item, ds[(1, epoch)]])
        y = batch["labels"]
        assert (y[0, 1] == IGNORE_INDEX) == (start > 0)  # its first residue, after <cls>
        assert (y[0, 7] == IGNORE_INDEX) == (start + 6 < 20)  # the <eos> that is not its end
        assert y[0, 2:7].tolist() == item["tokens"][2:7].tolist()
        assert y[1, :5].tolist() == ds[(1, epoch)]["tokens"].tolist()  # whole: every target
    assert not set(ds[(1, 0)]) & {"cut_start", "cut_end"}
    # crop=sliding's pieces: the first keeps its start, the last its end
    pieces = CropDataset(split_long_records(src, 6), max_length=8, train=False)
    flags = [(p.get("cut_start", False), p.get("cut_end", False)) for p in pieces]
    assert flags == [(False, True), (True, True), (True, True), (True, False), (False, False)]
    y = CausalCollator(A)([pieces[i] for i in range(len(pieces))])["labels"]
    assert int((y == A.eos_idx).sum()) == 2  # the two proteins' real ends only


def test_collator_argument_validation():
    with pytest.raises(ConfigError, match="mask_prob"):
        MLMCollator(A, mask_prob=0.0)
    with pytest.raises(ConfigError, match="mask_prob"):
        MLMCollator(A, mask_prob=1.5)
    with pytest.raises(ConfigError, match="random_token_frac"):
        MLMCollator(A, mask_token_frac=0.8, random_token_frac=0.3)
    with pytest.raises(ConfigError, match="objective must be one of: mlm, causal"):
        make_collator("bert", A)
    assert isinstance(make_collator("causal", A), CausalCollator)
    assert make_collator("mlm", A, mask_prob=0.3, seed=4).mask_prob == 0.3


def test_custom_mask_split():
    src = random_source(200, 100, 200, seed=8)
    ds = CropDataset(src, max_length=256)
    batches, items = collate_all(
        ds, MLMCollator(A, mask_prob=0.5, mask_token_frac=1.0, random_token_frac=0.0)
    )
    sel = torch.cat([(b["labels"] != IGNORE_INDEX).flatten() for b in batches])
    x = torch.cat([b["input_ids"].flatten() for b in batches])
    assert (x[sel] == A.mask_idx).all()
    n_res = sum(len(it["tokens"]) - 2 for it in items)
    assert abs(sel.sum().item() / n_res - 0.5) < 0.01


def test_mask_tokens_refuses_what_it_cannot_mean():
    ids = np.array([A.cls_idx, *(A.index(c) for c in "MKTAYIAK"), A.eos_idx])
    rng = np.random.default_rng(0)
    for kwargs, message in (
        ({"mask_prob": 1.5}, r"mask_prob must be in \[0, 1\], got 1.5"),
        ({"mask_prob": -0.1}, "mask_prob must be in"),
        ({"mask_token_frac": 0.8, "random_token_frac": 0.3}, "must be at most 1"),
    ):
        with pytest.raises(ValueError, match=message):
            mask_tokens(ids, A, rng, **kwargs)
    with pytest.raises(ValueError, match=r"one sequence \(L,\), got shape \(1, 10\)"):
        mask_tokens(ids[None], A, rng)
    with pytest.raises(TypeError, match="numpy Generator"):
        mask_tokens(ids, A, 0)


@pytest.mark.parametrize(
    "tokens, error, message",
    [
        (np.array([0, 99, 5]), ValueError, "token id 99 is outside the vocabulary"),
        (np.array([0, -3, 5]), ValueError, "token id -3 is outside the vocabulary"),
        (np.array([4.5, 5.0]), TypeError, "tokens must be integer token ids"),
    ],
)
def test_mask_tokens_refuses_what_are_no_token_ids(tokens, error, message) -> None:
    """-3 indexed the vocabulary from its end and 4.5 was truncated, silently."""
    with pytest.raises(error, match=message):
        mask_tokens(tokens, default_alphabet(), np.random.default_rng(0))
