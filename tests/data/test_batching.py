"""Batch samplers (token budget, fixed size, DDP sharding, epochs) and dynamic padding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lightning_fabric.utilities.data import _set_sampler_epoch
from torch.utils.data import DataLoader

from protein_performer.data.batching import FixedBatchSampler, TokenBudgetBatchSampler, pad_batch
from protein_performer.errors import ConfigError


def lengths_of(n: int, seed: int = 0, lo: int = 3, hi: int = 400) -> np.ndarray:
    return np.random.default_rng(seed).integers(lo, hi + 1, size=n)


def shard_all(make, world_size: int, epoch: int):
    """Per rank: (real batches, padding batches) for one epoch."""
    samplers = [make(rank, world_size) for rank in range(world_size)]
    counts = {len(s) for s in samplers}
    assert len(counts) == 1, "ranks disagree on the number of batches"
    n_global = samplers[0].num_global_batches
    out = []
    for rank, s in enumerate(samplers):
        s.set_epoch(epoch)
        batches = s.rank_batches()
        assert len(batches) == len(s)
        # rank r holds global positions r, r + W, r + 2W, ...; positions >= n_global are repeats
        real = [b for j, b in enumerate(batches) if rank + j * world_size < n_global]
        pad = [b for j, b in enumerate(batches) if rank + j * world_size >= n_global]
        out.append((real, pad))
    assert sum(len(p) for _, p in out) == samplers[0].num_padding_batches
    return out


def check_exact_cover(per_rank, n_items: int) -> None:
    all_real = [b for real, _ in per_rank for b in real]
    flat = np.concatenate(all_real) if all_real else np.zeros(0, np.int64)
    assert sorted(flat.tolist()) == list(range(n_items)), "each index exactly once per epoch"
    real_sets = [{tuple(b.tolist()) for b in real} for real, _ in per_rank]
    for _, pad in per_rank:
        for b in pad:  # padding repeats an existing batch, it does not invent one
            assert any(tuple(b.tolist()) in s for s in real_sets)
    for r1 in range(len(per_rank)):
        for r2 in range(r1 + 1, len(per_rank)):
            a = {int(i) for b in per_rank[r1][0] for i in b}
            b = {int(i) for bb in per_rank[r2][0] for i in bb}
            assert not a & b, "ranks must be disjoint"


# ---- token budget -----------------------------------------------------------------------------
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_budget_cover_and_ddp_sharding(world_size):
    lengths = lengths_of(503, seed=world_size)
    budget = 1024

    def make(rank, ws):
        return TokenBudgetBatchSampler(lengths, budget, seed=11, rank=rank, world_size=ws)

    for epoch in (0, 1):
        per_rank = shard_all(make, world_size, epoch)
        check_exact_cover(per_rank, len(lengths))
        for real, pad in per_rank:
            for b in real + pad:
                assert len(b) * lengths[b].max() <= budget


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=0, max_size=120),
    budget=st.integers(1, 1200),
    world_size=st.integers(1, 3),
    shuffle=st.booleans(),
    epoch=st.integers(0, 3),
)
def test_budget_property(lengths, budget, world_size, shuffle, epoch):
    lengths = np.asarray(lengths, dtype=np.int64)

    def make(rank, ws):
        return TokenBudgetBatchSampler(lengths, budget, shuffle=shuffle, rank=rank, world_size=ws)

    per_rank = shard_all(make, world_size, epoch)
    check_exact_cover(per_rank, len(lengths))
    for real, _ in per_rank:
        for b in real:
            assert len(b) >= 1
            assert len(b) == 1 or len(b) * lengths[b].max() <= budget


def test_oversized_item_gets_its_own_batch():
    lengths = np.array([10, 10, 5000, 10, 2000])
    s = TokenBudgetBatchSampler(lengths, 1000, shuffle=False)
    batches = [b.tolist() for b in s.rank_batches()]
    assert [2] in batches and [4] in batches
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3, 4]


def test_unshuffled_packing_is_greedy_and_ascending():
    lengths = lengths_of(300, seed=5)
    budget = 2000
    s = TokenBudgetBatchSampler(lengths, budget, shuffle=False)
    batches = s.rank_batches()
    maxima = [lengths[b].max() for b in batches]
    assert maxima == sorted(maxima)
    for b, nxt in itertools.pairwise(batches):
        # the next item would not have fitted: batches are as full as the budget allows
        assert (len(b) + 1) * lengths[nxt].min() > budget
        assert lengths[b].max() <= lengths[nxt].min()
    s.set_epoch(3)
    assert [b.tolist() for b in s.rank_batches()] == [b.tolist() for b in batches]


def test_max_batch_size_caps_rows():
    s = TokenBudgetBatchSampler(np.full(50, 4), 10_000, max_batch_size=8, shuffle=False)
    sizes = [len(b) for b in s.rank_batches()]
    assert sizes == [8] * 6 + [2]


def test_shuffle_is_seeded_per_epoch():
    lengths = lengths_of(400, seed=1, lo=50, hi=60)  # many ties: composition varies too

    def batches(seed, epoch):
        s = TokenBudgetBatchSampler(lengths, 600, seed=seed)
        s.set_epoch(epoch)
        return [b.tolist() for b in s.rank_batches()]

    assert batches(0, 0) == batches(0, 0)
    assert batches(0, 0) != batches(0, 1)
    assert batches(0, 0) != batches(1, 0)
    compositions = [sorted(tuple(sorted(b)) for b in batches(0, e)) for e in (0, 1)]
    assert compositions[0] != compositions[1]
    # the batch order is shuffled too, not shortest first
    wide = lengths_of(400, seed=2)
    s = TokenBudgetBatchSampler(wide, 2000, seed=0)
    maxima = [int(wide[b].max()) for b in s.rank_batches(0)]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)


def test_iter_yields_index_epoch_keys_and_lightning_sets_epoch():
    s = TokenBudgetBatchSampler(lengths_of(40), 500, seed=2)
    dl = DataLoader(list(range(40)), batch_sampler=s, collate_fn=lambda keys: keys)
    _set_sampler_epoch(dl, 7)  # what Lightning's fit loop calls each epoch
    assert s.epoch == 7
    keys = [k for batch in s for k in batch]
    assert {e for _, e in keys} == {7}
    assert sorted(i for i, _ in keys) == list(range(40))
    assert [[i for i, _ in b] for b in s] == [b.tolist() for b in s.rank_batches(7)]


def test_fewer_batches_than_ranks_are_repeated():
    lengths = np.array([5, 5, 5])
    samplers = [TokenBudgetBatchSampler(lengths, 100, rank=r, world_size=3) for r in range(3)]
    got = [s.rank_batches() for s in samplers]
    assert [len(g) for g in got] == [1, 1, 1]
    assert all(sorted(g[0].tolist()) == [0, 1, 2] for g in got)
    assert samplers[0].num_padding_batches == 2


def test_empty_dataset_has_no_batches():
    for ws in (1, 2):
        s = TokenBudgetBatchSampler(np.zeros(0, np.int64), 100, rank=ws - 1, world_size=ws)
        assert len(s) == 0 and list(s) == []
    assert list(FixedBatchSampler(0, 4)) == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"toks_per_batch": 0}, "toks_per_batch"),
        ({"rank": 2, "world_size": 2}, "rank"),
        ({"world_size": 0}, "world_size"),
        ({"max_batch_size": 0}, "max_batch_size"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"toks_per_batch": 100} | kwargs
    with pytest.raises(ConfigError, match=match):
        TokenBudgetBatchSampler([1, 2], **args)


# ---- fixed batch size -------------------------------------------------------------------------
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_fixed_batches_cover_and_shard(world_size):
    def make(rank, ws):
        return FixedBatchSampler(103, 8, seed=3, rank=rank, world_size=ws)

    for epoch in (0, 1):
        per_rank = shard_all(make, world_size, epoch)
        check_exact_cover(per_rank, 103)
        sizes = sorted(len(b) for real, _ in per_rank for b in real)
        assert sizes == [7] + [8] * 12


def test_fixed_batches_shuffle_per_epoch_or_sequential():
    s = FixedBatchSampler(30, 4, seed=1)
    e0 = [b.tolist() for b in s.rank_batches(0)]
    assert e0 != [b.tolist() for b in s.rank_batches(1)]
    assert e0 == [b.tolist() for b in FixedBatchSampler(30, 4, seed=1).rank_batches(0)]
    assert e0 != [list(range(i, min(i + 4, 30))) for i in range(0, 30, 4)]
    seq = FixedBatchSampler(30, 4, shuffle=False)
    assert [b.tolist() for b in seq.rank_batches(5)] == [
        list(range(i, min(i + 4, 30))) for i in range(0, 30, 4)
    ]
    with pytest.raises(ConfigError, match="batch_size"):
        FixedBatchSampler(30, 0)


# ---- padding ----------------------------------------------------------------------------------
def test_pad_batch_pads_to_longest():
    seqs = [np.array([1, 7, 8, 2]), np.array([1, 9, 2]), torch.tensor([1, 2])]
    tokens, mask = pad_batch(seqs, pad_idx=0)
    assert tokens.dtype == torch.int64 and mask.dtype == torch.bool
    assert tokens.tolist() == [[1, 7, 8, 2], [1, 9, 2, 0], [1, 2, 0, 0]]
    assert mask.tolist() == [
        [False, False, False, False],
        [False, False, False, True],
        [False, False, True, True],
    ]
    with pytest.raises(ValueError):
        pad_batch([], 0)
    # rounded up to a multiple, at most the cap, never below the longest
    tokens, mask = pad_batch(seqs, pad_idx=0, multiple=3)
    assert tokens.shape == (3, 6) and mask.sum(1).tolist() == [2, 3, 4]
    assert tokens[:, 4:].eq(0).all() and tokens[0, :4].tolist() == [1, 7, 8, 2]
    assert pad_batch(seqs, 0, multiple=4)[0].shape == (3, 4)  # already a multiple
    assert pad_batch(seqs, 0, multiple=8, cap=5)[0].shape == (3, 5)
    assert pad_batch(seqs, 0, multiple=8, cap=3)[0].shape == (3, 4)  # the longest wins


@pytest.mark.parametrize("world_size", [2, 3])
def test_evaluation_repeats_are_marked_not_scored(world_size):
    """With score_repeats=False every item is scored on exactly one rank (DDP val metrics)."""
    from protein_performer.data.datasets import CropDataset
    from protein_performer.data.masking import IGNORE_INDEX, CausalCollator, MLMCollator
    from protein_performer.data.sources import FlatSource

    rng = np.random.default_rng(3)
    seqs = ["".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=n)) for n in range(5, 14)]
    ds = CropDataset(FlatSource.from_strings(seqs), 64, train=False)
    samplers = [
        FixedBatchSampler(len(ds), 2, shuffle=False, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    assert samplers[0].num_padding_batches > 0  # 5 batches of 9 items do not split evenly
    for collator in (MLMCollator(ds.alphabet, mask_prob=1.0), CausalCollator(ds.alphabet)):
        scored, counts = [], set()
        for s in samplers:
            s.score_repeats = False
            batches = [collator([ds[key] for key in keys]) for keys in s]
            counts.add(len(batches))
            for b in batches:
                for row in range(len(b["labels"])):
                    if (b["labels"][row] != IGNORE_INDEX).any():
                        scored.append(int((~b["padding_mask"][row]).sum()))
        assert len(counts) == 1  # every rank runs the same number of batches
        assert sorted(scored) == sorted(len(s) + 2 for s in seqs)  # each protein exactly once
    train = FixedBatchSampler(len(ds), 2, shuffle=False, rank=world_size - 1, world_size=world_size)
    assert all(len(key) == 2 for keys in train for key in keys)  # training repeats do count


@pytest.mark.parametrize("item", [None, b"MKV", 5])
def test_encode_batch_names_an_item_that_is_no_sequence(item) -> None:
    from protein_performer.data.batching import encode_batch

    with pytest.raises(TypeError, match="sequence 2 must be a string"):
        encode_batch(["MKV", item])


def test_batches_of_one_are_allowed_and_none_refused():
    lengths = np.array([5, 7, 3, 9])
    one = TokenBudgetBatchSampler(lengths, toks_per_batch=100, max_batch_size=1, shuffle=False)
    assert [len(b) for b in one.rank_batches(0)] == [1, 1, 1, 1]
    with pytest.raises(ConfigError, match="max_batch_size must be >= 1 or None, got 0"):
        TokenBudgetBatchSampler(lengths, toks_per_batch=100, max_batch_size=0)
    fixed = FixedBatchSampler(3, batch_size=1, shuffle=False)
    assert [b.tolist() for b in fixed.rank_batches(0)] == [[0], [1], [2]]
    with pytest.raises(ConfigError, match="batch_size must be >= 1, got 0"):
        FixedBatchSampler(3, batch_size=0)


def test_encode_batch_names_the_sequence_with_a_bad_letter():
    from protein_performer.data.batching import encode_batch

    with pytest.raises(ValueError, match=r"^sequence 2: invalid residue '#' at position 3;"):
        encode_batch(["MKV", "MK#V"])
