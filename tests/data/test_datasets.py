"""CropDataset and ConcatWindowDataset: lengths, specials, seeded crops, exact concat windows."""

from __future__ import annotations

import itertools
import logging
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.datasets import ConcatWindowDataset, CropDataset, PairDataset
from protein_performer.data.masking import MLMCollator
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError

A = default_alphabet()
AA = "ACDEFGHIKLMNPQRSTVWY"


def random_source(n: int, lo: int, hi: int, seed: int = 0) -> FlatSource:
    rng = np.random.default_rng(seed)
    seqs = ["".join(rng.choice(list(AA), size=int(rng.integers(lo, hi + 1)))) for _ in range(n)]
    return FlatSource.from_strings(seqs)


# ---- crop mode --------------------------------------------------------------------------------
def test_short_protein_is_cls_residues_eos():
    src = FlatSource.from_strings(["MKV", "A"])
    ds = CropDataset(src, max_length=10)
    item = ds[0]
    assert item["tokens"].dtype == np.int64
    assert item["tokens"].tolist() == [A.cls_idx, *A.encode("MKV").tolist(), A.eos_idx]
    assert ds[1]["tokens"].tolist() == [A.cls_idx, A.index("A"), A.eos_idx]
    assert ds.lengths.tolist() == [5, 3]


def test_long_protein_cropped_to_max_length_with_specials():
    seq = "".join(np.random.default_rng(1).choice(list(AA), size=500))
    src = FlatSource.from_strings([seq, "ACD" * 3])
    ds = CropDataset(src, max_length=64, seed=3)
    assert ds.lengths.tolist() == [64, 11]
    assert ds.n_cropped == 1
    residues = A.encode(seq)
    for epoch in range(5):
        tokens = ds[(0, epoch)]["tokens"]
        assert len(tokens) == 64
        assert tokens[0] == A.cls_idx and tokens[-1] == A.eos_idx
        assert not A.special_mask(tokens[1:-1]).any()
        start = ds.crop_start(0, epoch)
        assert 0 <= start <= 500 - 62
        np.testing.assert_array_equal(tokens[1:-1], residues[start : start + 62])


def test_exact_fit_is_not_cropped():
    src = FlatSource.from_strings(["A" * 8])
    ds = CropDataset(src, max_length=10)
    assert ds.n_cropped == 0
    assert ds[(0, 5)]["tokens"].tolist() == [A.cls_idx] + [A.index("A")] * 8 + [A.eos_idx]


def test_crop_reproducible_per_seed_epoch_index_and_varies_by_epoch():
    src = random_source(20, 300, 400, seed=2)
    a = CropDataset(src, max_length=32, seed=7)
    b = CropDataset(src, max_length=32, seed=7)
    c = CropDataset(src, max_length=32, seed=8)
    # same key -> same crop, whatever was requested before
    ref = [a[(i, e)]["tokens"] for e in range(3) for i in range(20)]
    got = [b[(i, e)]["tokens"] for e in reversed(range(3)) for i in reversed(range(20))][::-1]
    for x, y in zip(ref, got, strict=True):
        np.testing.assert_array_equal(x, y)
    starts = {e: [a.crop_start(i, e) for i in range(20)] for e in range(4)}
    assert starts[0] != starts[1] != starts[2]
    assert [c.crop_start(i, 0) for i in range(20)] != starts[0]
    # each protein's crop varies across epochs
    per_protein = [{starts[e][i] for e in range(4)} for i in range(20)]
    assert sum(len(s) > 1 for s in per_protein) >= 18


def test_crop_start_covers_the_whole_range():
    src = FlatSource.from_strings(["ACDEFGHIK"])  # 9 residues, window of 6 -> starts 0..3
    ds = CropDataset(src, max_length=8, seed=0)
    starts = {ds.crop_start(0, e) for e in range(300)}
    assert starts == {0, 1, 2, 3}


def test_plain_index_uses_set_epoch_and_negative_index():
    src = random_source(5, 100, 120)
    ds = CropDataset(src, max_length=20, seed=1)
    assert ds[2]["epoch"] == 0
    ds.set_epoch(4)
    item = ds[2]
    assert item["epoch"] == 4 and item["index"] == 2
    np.testing.assert_array_equal(item["tokens"], ds[(2, 4)]["tokens"])
    assert ds[-1]["index"] == 4
    with pytest.raises(IndexError):
        ds[5]
    with pytest.raises(IndexError):
        ds[(-6, 0)]


def test_eval_crop_is_fixed_across_epochs():
    src = random_source(10, 200, 300, seed=4)
    train = CropDataset(src, max_length=30, seed=5)
    ev = CropDataset(src, max_length=30, seed=5, train=False)
    for i in range(10):
        first = ev[(i, 0)]["tokens"]
        for e in (1, 2, 9):
            item = ev[(i, e)]
            assert item["epoch"] == 0
            np.testing.assert_array_equal(item["tokens"], first)
        np.testing.assert_array_equal(first, train[(i, 0)]["tokens"])
    ev.set_epoch(3)
    np.testing.assert_array_equal(ev[0]["tokens"], ev[(0, 0)]["tokens"])


def test_crop_max_length_validated():
    with pytest.raises(ConfigError, match="max_length"):
        CropDataset(FlatSource.from_strings(["AC"]), max_length=2)


def test_set_epoch_reaches_persistent_workers():
    src = random_source(8, 100, 200, seed=6)
    ds = CropDataset(src, max_length=16, seed=2)
    dl = DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True, collate_fn=list)
    seen = {}
    for epoch in (0, 3, 5):
        ds.set_epoch(epoch)
        items = [it for batch in dl for it in batch]
        assert {it["epoch"] for it in items} == {epoch}
        seen[epoch] = [it["tokens"] for it in sorted(items, key=lambda it: it["index"])]
        for i, tokens in enumerate(seen[epoch]):
            np.testing.assert_array_equal(tokens, ds[(i, epoch)]["tokens"])
    assert any(not np.array_equal(x, y) for x, y in zip(seen[0], seen[3], strict=True))


# ---- concat mode ------------------------------------------------------------------------------
def reference_stream(src: FlatSource, order) -> np.ndarray:
    parts = []
    for rec in order:
        parts.append(np.asarray(src[int(rec)], dtype=np.int64))
        parts.append(np.array([A.sep_idx], dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def check_windows(ds: ConcatWindowDataset, stream: np.ndarray, epoch: int) -> None:
    L = ds.max_length
    tail = len(stream) % L
    if ds.keep_tail:
        assert len(ds) == -(-len(stream) // L) and ds.dropped_tokens == 0
    else:
        assert len(ds) == len(stream) // L and ds.dropped_tokens == tail
    assert ds.total_tokens == len(stream)
    got = [ds[(w, epoch)]["tokens"] for w in range(len(ds))]
    for w, tokens in enumerate(got):
        short = ds.keep_tail and tail and w == len(ds) - 1
        assert tokens.dtype == np.int64 and len(tokens) == (tail if short else L)
        assert ds.lengths[w] == len(tokens)
    joined = np.concatenate(got) if got else np.zeros(0, np.int64)
    # nothing lost but the reported tail
    np.testing.assert_array_equal(joined, stream[: len(stream) - ds.dropped_tokens])


def test_concat_eval_windows_equal_reference_concatenation():
    src = FlatSource.from_strings(["ACDEF", "", "GHIKLMNPQRSTVWY" * 3, "MK", "W" * 17, "Y"])
    stream = reference_stream(src, range(len(src)))
    assert len(stream) == 70 + 6  # residues + one <sep> per protein
    for L in (2, 3, 7, 16, 45, 76, 77, 100):
        ds = ConcatWindowDataset(src, max_length=L, train=False)
        assert ds.keep_tail  # evaluation scores every token
        for epoch in (0, 3):
            check_windows(ds, stream, epoch)
        dropping = ConcatWindowDataset(src, max_length=L, train=False, keep_tail=False)
        check_windows(dropping, stream, 0)


def test_concat_train_order_is_seeded_permutation_per_epoch():
    src = random_source(50, 1, 40, seed=9)
    ds = ConcatWindowDataset(src, max_length=32, seed=4)
    orders = [ds.order(e) for e in range(3)]
    for o in orders:
        assert sorted(o.tolist()) == list(range(50))
    assert orders[0].tolist() != orders[1].tolist() != orders[2].tolist()
    assert orders[0].tolist() != list(range(50))
    same = ConcatWindowDataset(src, max_length=32, seed=4)
    assert same.order(1).tolist() == orders[1].tolist()
    assert ConcatWindowDataset(src, max_length=32, seed=5).order(1).tolist() != orders[1].tolist()
    for e in (2, 0, 1):  # out of order: the per-epoch cache must not leak between epochs
        check_windows(ds, reference_stream(src, orders[e]), e)
    fixed = ConcatWindowDataset(src, max_length=32, seed=4, reshuffle=False)
    assert fixed.order(3).tolist() == orders[0].tolist()
    np.testing.assert_array_equal(fixed[(2, 3)]["tokens"], ds[(2, 0)]["tokens"])
    assert fixed[(2, 3)]["epoch"] == 3


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), min_size=0, max_size=25),
    L=st.integers(2, 50),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
)
def test_concat_windows_property(lengths, L, seed, epoch):
    rng = np.random.default_rng(seed)
    src = FlatSource.from_arrays([rng.integers(6, 31, size=n).astype(np.uint8) for n in lengths])
    ds = ConcatWindowDataset(src, max_length=L, seed=seed)
    check_windows(ds, reference_stream(src, ds.order(epoch)), epoch)
    assert len(ds.order(epoch)) == len(lengths)


def test_copy_packing_puts_every_protein_twice_in_a_row():
    src = random_source(30, 1, 40, seed=12)
    ds = ConcatWindowDataset(src, max_length=16, seed=3, repeat=2)
    for epoch in (0, 1):
        order = ds.order(epoch)
        first = order[::2]
        assert sorted(first.tolist()) == list(range(30))  # a permutation, each record doubled
        np.testing.assert_array_equal(order[1::2], first)
        assert first.tolist() == ConcatWindowDataset(src, 16, seed=3).order(epoch).tolist()
        check_windows(ds, reference_stream(src, order), epoch)
    evaluation = ConcatWindowDataset(src, max_length=16, train=False, repeat=2)
    np.testing.assert_array_equal(evaluation.order(0), np.repeat(np.arange(30), 2))
    check_windows(evaluation, reference_stream(src, np.repeat(np.arange(30), 2)), 0)
    with pytest.raises(ConfigError, match="repeat must be an integer >= 1"):
        ConcatWindowDataset(src, max_length=16, repeat=0)


def test_concat_reports_dropped_tail(caplog):
    src = FlatSource.from_strings(["A" * 10, "C" * 10])  # 22 stream tokens
    with caplog.at_level(logging.INFO, logger="protein_performer.data.datasets"):
        ds = ConcatWindowDataset(src, max_length=8)
    assert (len(ds), ds.dropped_tokens) == (2, 6)
    assert "6 of 22" in caplog.text
    kept = ConcatWindowDataset(src, max_length=8, train=False)
    assert (len(kept), kept.dropped_tokens, kept.lengths.tolist()) == (3, 0, [8, 8, 6])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="protein_performer.data.datasets"):
        short = ConcatWindowDataset(src, max_length=100)
    assert len(short) == 0 and short.dropped_tokens == 22
    assert "no windows" in caplog.text
    with pytest.raises(IndexError):
        short[0]


def test_concat_pickle_roundtrip_and_validation():
    src = random_source(30, 5, 60, seed=3)
    ds = ConcatWindowDataset(src, max_length=40, seed=1)
    before = [ds[(w, 2)]["tokens"] for w in range(len(ds))]
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._layout is None
    for w, tokens in enumerate(before):
        np.testing.assert_array_equal(clone[(w, 2)]["tokens"], tokens)
    with pytest.raises(ConfigError, match="max_length"):
        ConcatWindowDataset(src, max_length=1)


# ---- family packing ---------------------------------------------------------------------------
def family_groups(sizes: list[int], seed: int = 0) -> list[np.ndarray]:
    """Groups of the given sizes over records 0..sum-1, members scattered over the source."""
    perm = np.random.default_rng(seed).permutation(sum(sizes))
    bounds = np.cumsum([0, *sizes])
    return [np.sort(perm[a:b]) for a, b in itertools.pairwise(bounds)]


def test_family_packing_keeps_each_family_together_in_random_order():
    sizes = [5, 1, 3, 8, 2, 4]
    src = random_source(sum(sizes), 3, 30, seed=1)
    groups = family_groups(sizes, seed=2)
    ds = ConcatWindowDataset(src, max_length=24, seed=7, groups=groups)
    group_of = {int(r): g for g, members in enumerate(groups) for r in members}
    orders = [ds.order(e) for e in range(3)]
    for e, order in enumerate(orders):
        assert sorted(order.tolist()) == list(range(sum(sizes)))  # each protein once
        runs = [group_of[int(r)] for r in order]
        # a family's members are contiguous: the run of group ids changes once per family
        changes = [g for i, g in enumerate(runs) if i == 0 or runs[i - 1] != g]
        assert sorted(changes) == list(range(len(sizes)))
        check_windows(ds, reference_stream(src, order), e)  # windows cut from that stream
    # seeded: groups and members reshuffled per epoch, reproducibly
    assert orders[0].tolist() != orders[1].tolist()
    again = ConcatWindowDataset(src, max_length=24, seed=7, groups=groups)
    assert again.order(1).tolist() == orders[1].tolist()
    assert ConcatWindowDataset(src, max_length=24, seed=8, groups=groups).order(1).tolist() != (
        orders[1].tolist()
    )
    member_orders = {tuple(int(r) for r in o if group_of[int(r)] == 3) for o in orders}
    assert len(member_orders) > 1  # members shuffled inside the family too
    # evaluation: one fixed family layout, every token kept
    ev = ConcatWindowDataset(src, max_length=24, seed=7, train=False, groups=groups)
    assert ev.order(0).tolist() == ev.order(5).tolist()
    check_windows(ev, reference_stream(src, ev.order(0)), 3)


def test_family_packing_window_starts_with_one_family():
    # families of exactly one window each: every window holds one family and nothing else
    src = FlatSource.from_strings(["A" * 7, "C" * 7, "D" * 7, "E" * 7, "F" * 7, "G" * 7])
    groups = [np.array([0, 2]), np.array([1, 3]), np.array([4, 5])]  # 16 tokens each
    ds = ConcatWindowDataset(src, max_length=16, seed=0, groups=groups)
    letters = {A.index(c): c for c in "ACDEFG"}
    windows = ["".join(letters.get(int(t), "|") for t in ds[(w, 0)]["tokens"]) for w in range(3)]
    families = [{"A", "D"}, {"C", "E"}, {"F", "G"}]
    for w in windows:
        assert set(w) - {"|"} in families and w.endswith("|")


def test_family_spread_interleaves_blocks_of_families_round_robin():
    sizes = [5, 1, 3, 8, 2, 4, 6]
    src = random_source(sum(sizes), 3, 30, seed=1)
    groups = family_groups(sizes, seed=2)
    group_of = {int(r): g for g, members in enumerate(groups) for r in members}
    plain = ConcatWindowDataset(src, max_length=24, seed=7, groups=groups)
    spread = ConcatWindowDataset(src, max_length=24, seed=7, groups=groups, spread=3)
    for e in range(2):
        before, after = plain.order(e), spread.order(e)
        assert sorted(after.tolist()) == list(range(sum(sizes)))  # each protein once
        check_windows(spread, reference_stream(src, after), e)
        # the same families in the same order, taken three at a time
        families = list(dict.fromkeys(group_of[int(r)] for r in before))
        at = 0
        for b in range(0, len(families), 3):
            block = families[b : b + 3]
            n = sum(sizes[g] for g in block)
            got = [int(r) for r in after[at : at + n]]
            assert {group_of[r] for r in got} == set(block)
            # round-robin: member k of every family of the block before any member k + 1 ...
            for g in block:
                members = [r for r in before if group_of[int(r)] == g]  # shuffled order kept
                assert [r for r in got if group_of[r] == g] == [int(r) for r in members]
            rounds = [[q for q in got if group_of[q] == group_of[r]].index(r) for r in got]
            assert rounds == sorted(rounds)
            # ... and the families in their order inside each round
            for k in set(rounds):
                fam = [
                    families.index(group_of[r]) for r, q in zip(got, rounds, strict=True) if q == k
                ]
                assert fam == sorted(fam)
            at += n
    assert (
        ConcatWindowDataset(src, max_length=24, seed=7, groups=groups, spread=1).order(0).tolist()
        == plain.order(0).tolist()
    )
    with pytest.raises(ConfigError, match="spread must be an integer >= 1"):
        ConcatWindowDataset(src, max_length=24, groups=groups, spread=0)
    with pytest.raises(ConfigError, match="spread > 1 needs family packing"):
        ConcatWindowDataset(src, max_length=24, spread=2)


@pytest.mark.parametrize(
    "groups, match",
    [
        ([np.array([0, 1]), np.array([1, 2, 3])], "repeats a record"),
        ([np.array([0, 1, 2])], "1 records are in no group"),
        ([np.array([0, 1, 2, 9])], "outside"),
        ([np.array([0, 1, 2, 3]), np.array([], dtype=np.int64)], "no members"),
    ],
)
def test_family_packing_rejects_bad_groups(groups, match):
    with pytest.raises(ConfigError, match=match):
        ConcatWindowDataset(random_source(4, 2, 5), max_length=8, groups=groups)


# ---- homolog pairs ----------------------------------------------------------------------------
def split_pair(ds: PairDataset, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(partner residues, target residues) of a row ``<cls> partner <sep> target <eos>``."""
    assert tokens[0] == A.cls_idx and tokens[-1] == A.eos_idx
    seps = np.flatnonzero(tokens == A.sep_idx)
    if len(seps) == 0:
        return tokens[:0], tokens[1:-1]
    assert len(seps) == 1
    return tokens[1 : seps[0]], tokens[seps[0] + 1 : -1]


def contains(whole: np.ndarray, part: np.ndarray) -> bool:
    """Whether ``part`` is a contiguous piece of ``whole``."""
    n, k = len(whole), len(part)
    return any(np.array_equal(whole[i : i + k], part) for i in range(n - k + 1))


def test_pairs_put_a_cropped_protein_after_another_member_of_its_cluster():
    sizes = [3, 1, 4, 2]
    src = random_source(sum(sizes), 20, 300, seed=5)
    groups = family_groups(sizes, seed=6)
    group_of = {int(r): g for g, members in enumerate(groups) for r in members}
    ds = PairDataset(src, groups, max_length=128, seed=2)
    assert ds.half == 62 and ds.n_alone == 1
    kept = set()
    for epoch in range(6):
        for index in range(len(src)):
            tokens = ds[(index, epoch)]["tokens"]
            assert len(tokens) <= ds.lengths[index] <= 128
            partner, target = split_pair(ds, tokens)
            n = len(src[index])
            # the target: a piece of its own protein, [half/2, half] residues or whole
            assert contains(src[index], target)
            assert len(target) == n if n <= 31 else 31 <= len(target) <= 62
            kept.add((index, len(target)))
            p = ds.partner(index, epoch)
            alone = len(groups[group_of[index]]) == 1
            assert p == index if alone else (p != index and group_of[p] == group_of[index])
            assert len(partner) >= 16 and contains(src[p], partner)
            # the partner fills the row when it is cut
            assert len(partner) == len(src[p]) or len(tokens) == 128
    long = [i for i in range(len(src)) if len(src[i]) > 62]
    assert any(len({k for j, k in kept if j == i}) > 2 for i in long)  # lengths vary
    # seeded by (seed, epoch, index); evaluation rows fixed
    again = PairDataset(src, groups, max_length=128, seed=2)
    np.testing.assert_array_equal(again[(4, 3)]["tokens"], ds[(4, 3)]["tokens"])
    assert any(  # a fresh partner and crop every epoch
        not np.array_equal(ds[(i, 1)]["tokens"], ds[(i, 2)]["tokens"]) for i in long
    )
    other = PairDataset(src, groups, max_length=128, seed=3)
    assert any(not np.array_equal(other[(i, 3)]["tokens"], ds[(i, 3)]["tokens"]) for i in long)
    fixed = PairDataset(src, groups, max_length=128, seed=2, train=False)
    np.testing.assert_array_equal(fixed[(5, 0)]["tokens"], fixed[(5, 7)]["tokens"])


def test_pair_partners_cover_the_cluster_and_copy_prob_pairs_a_protein_with_itself():
    src = random_source(5, 30, 40, seed=8)
    groups = [np.arange(5)]
    ds = PairDataset(src, groups, max_length=128)
    seen = {ds.partner(0, e) for e in range(60)}
    assert seen == {1, 2, 3, 4}
    copies = PairDataset(src, groups, max_length=128, copy_prob=1.0)
    for e in range(5):
        tokens = copies[(2, e)]["tokens"]
        partner, target = split_pair(copies, tokens)
        np.testing.assert_array_equal(partner, src[2])  # the whole protein, then its crop
        assert contains(src[2], target)
    half = PairDataset(src, groups, max_length=128, copy_prob=0.5)
    share = np.mean([half.partner(i, e) == i for i in range(5) for e in range(80)])
    assert 0.35 < share < 0.65
    # a cluster of two with several partners allowed: the one other member, or the copy
    pairs = [np.array([0, 1]), np.array([2, 3, 4])]
    for prob, want in ((1.0, [0]), (0.0, [1])):
        ds = PairDataset(src, pairs, max_length=128, copy_prob=prob, max_partners=4)
        assert all(ds.partners(0, e) == want for e in range(5))
    with pytest.raises(ConfigError, match="copy_prob"):
        PairDataset(src, groups, max_length=128, copy_prob=1.5)
    with pytest.raises(ConfigError, match="max_length"):
        PairDataset(src, groups, max_length=6)
    with pytest.raises(ConfigError, match="in no group"):
        PairDataset(src, [np.arange(4)], max_length=128)
    with pytest.raises(ConfigError, match="mask must be one of"):
        PairDataset(src, groups, max_length=128, mask="target")
    protein = PairDataset(src, groups, max_length=128, mask="protein")
    for i in range(5):
        item = protein[(i, 1)]
        tokens, start, n = protein.window(i, 1)
        np.testing.assert_array_equal(item["tokens"], tokens)
        assert item["mask_from"] == start and tokens[start - 1] == A.sep_idx
        assert contains(src[i], tokens[start : start + n])
    assert "mask_from" not in ds[(0, 1)]


def test_pair_alone_rows_hold_the_protein_alone_and_leave_other_partners_unchanged():
    sizes = [3, 4, 2]
    src = random_source(sum(sizes), 20, 300, seed=11)
    groups = family_groups(sizes, seed=12)
    base = PairDataset(src, groups, max_length=128, seed=4, mask="protein")
    some = PairDataset(src, groups, max_length=128, seed=4, mask="protein", alone_prob=0.4)
    alone = 0
    for epoch in range(12):
        for index in range(len(src)):
            item = some[(index, epoch)]
            tokens = item["tokens"]
            if some.alone(index, epoch):
                alone += 1
                assert A.sep_idx not in tokens.tolist() and item["mask_from"] == 1
                assert tokens[0] == A.cls_idx and tokens[-1] == A.eos_idx
                assert contains(src[index], tokens[1:-1])
                # the same crop as the row with a partner
                _, start, n = base.window(index, epoch)
                np.testing.assert_array_equal(
                    tokens[1:-1], base[(index, epoch)]["tokens"][start : start + n]
                )
            else:
                np.testing.assert_array_equal(tokens, base[(index, epoch)]["tokens"])
    assert 0.25 < alone / (12 * len(src)) < 0.55
    assert not any(base.alone(i, e) for i in range(len(src)) for e in range(12))
    every = PairDataset(src, groups, max_length=128, alone_prob=1.0)
    assert all(A.sep_idx not in every[(i, 0)]["tokens"].tolist() for i in range(len(src)))
    with pytest.raises(ConfigError, match="alone_prob"):
        PairDataset(src, groups, max_length=128, alone_prob=-0.1)


def test_pair_alignments_point_each_protein_residue_at_its_partner_residue():
    rng = np.random.default_rng(13)
    base = rng.integers(6, 26, 220).astype(np.uint8)
    variant = base.copy()
    swap = rng.random(220) < 0.2  # 80% identical, same length: aligned residue i to i
    variant[swap] = rng.integers(6, 26, int(swap.sum()))
    src = FlatSource.from_arrays([base, variant, rng.integers(6, 26, 150).astype(np.uint8)])
    ds = PairDataset(src, [np.array([0, 1]), np.array([2])], max_length=256, align=True)
    collate = MLMCollator(A, seed=0)
    for epoch in range(6):
        items = [ds[(i, epoch)] for i in range(3)]
        for i, item in enumerate(items):
            tokens, align = item["tokens"], item["align_to"]
            _, start, n = ds.window(i, epoch)
            assert align.shape == tokens.shape and (align[:start] == -1).all()
            assert (align[start + n :] == -1).all()
            hit = np.flatnonzero(align >= 0)
            assert len(hit) > 0.9 * n and ((align[hit] >= 1) & (align[hit] < start - 1)).all()
            if ds.partner(i, epoch) == i:  # a copy: every residue points at itself
                np.testing.assert_array_equal(tokens[align[hit]], tokens[hit])
                assert len(hit) == n
            else:  # the 80%-identical homolog: mostly the same residue, in order
                assert np.mean(tokens[align[hit]] == tokens[hit]) > 0.7
                assert (np.diff(align[hit]) > 0).all()
        batch = collate(items)
        width = batch["input_ids"].shape[1]
        for row, item in enumerate(items):
            got = batch["align_to"][row].numpy()
            np.testing.assert_array_equal(got[: len(item["align_to"])], item["align_to"])
            assert (got[len(item["align_to"]) : width] == -1).all()
    assert "align_to" not in PairDataset(src, [np.array([0, 1]), np.array([2])], 256)[(0, 0)]
    alone = PairDataset(src, [np.array([0, 1]), np.array([2])], 256, align=True, alone_prob=1.0)
    assert (alone[(0, 0)]["align_to"] == -1).all()


def test_pairs_at_the_shortest_allowed_length_always_hold_a_partner():
    src = random_source(6, 10, 200, seed=9)
    groups = [np.arange(3), np.arange(3, 6)]
    with pytest.raises(ConfigError, match="max_length must be >= 33"):
        PairDataset(src, groups, max_length=32)
    ds = PairDataset(src, groups, max_length=33)
    for epoch in range(10):
        for index in range(6):
            tokens = ds[(index, epoch)]["tokens"]
            assert len(tokens) <= 33
            partner, _ = split_pair(ds, tokens)
            assert len(partner) >= min(16, len(src[ds.partner(index, epoch)]))


def test_pairs_cut_a_long_partner_around_the_region_of_the_target():
    # a protein paired with itself: the kept part of the copy covers the cropped target
    src = FlatSource.from_arrays([np.random.default_rng(4).integers(6, 26, 900).astype(np.uint8)])
    ds = PairDataset(src, [np.array([0])], max_length=256)
    for epoch in range(20):
        partner, target = split_pair(ds, ds[(0, epoch)]["tokens"])
        assert contains(partner, target)


def test_pair_fill_puts_the_partner_among_other_clusters_proteins_up_to_max_length():
    sizes = [3, 4, 2, 5, 1]
    src = random_source(sum(sizes), 20, 120, seed=21)
    groups = family_groups(sizes, seed=22)
    group_of = {int(r): g for g, members in enumerate(groups) for r in members}
    plain = PairDataset(src, groups, max_length=512, seed=4, mask="protein", alone_prob=0.3)
    ds = PairDataset(src, groups, max_length=512, seed=4, mask="protein", alone_prob=0.3, fill=True)
    assert (ds.lengths == 512).all()
    places = set()
    for epoch in range(4):
        for index in range(len(src)):
            item = ds[(index, epoch)]
            tokens, start, n = ds.window(index, epoch)
            np.testing.assert_array_equal(item["tokens"], tokens)
            # the target's crop and mask are those of the plain row; alone rows unchanged
            _, p_start, p_n = plain.window(index, epoch)
            ref = plain[(index, epoch)]["tokens"]
            np.testing.assert_array_equal(tokens[start : start + n], ref[p_start : p_start + p_n])
            assert item["mask_from"] == start and tokens[-1] == A.eos_idx
            if ds.alone(index, epoch):
                np.testing.assert_array_equal(tokens, ref)
                continue
            assert len(tokens) > 512 - 20  # filled (a fill protein too short to keep aside)
            pieces = np.split(
                tokens[1 : start - 1], np.flatnonzero(tokens[1 : start - 1] == A.sep_idx)
            )
            pieces = [p[p != A.sep_idx] for p in pieces]
            partner = ds.partner(index, epoch)
            own = [k for k, p in enumerate(pieces) if contains(src[partner], p) and len(p) >= 16]
            assert own, "the partner is in the row"
            # cut as the plain row cuts it: the fill takes only the room the partner leaves
            np.testing.assert_array_equal(pieces[own[0]], ref[1 : p_start - 1])
            places.add(own[0] * 10 // len(pieces))
            for k, p in enumerate(pieces):  # every other piece: a protein of another cluster
                if k == own[0]:
                    continue
                assert any(
                    contains(src[j], p) and group_of[j] != group_of[index] for j in range(len(src))
                )
    assert len(places) >= 3  # the partner sits at varying places among the fill
    again = PairDataset(
        src, groups, max_length=512, seed=4, mask="protein", alone_prob=0.3, fill=True
    )
    np.testing.assert_array_equal(again[(3, 2)]["tokens"], ds[(3, 2)]["tokens"])
    with pytest.raises(ConfigError, match="fill"):
        PairDataset(src, groups, max_length=512, fill=True, align=True)
    with pytest.raises(ConfigError, match="two groups"):
        PairDataset(src, [np.arange(len(src))], max_length=512, fill=True)


def test_several_partners_are_distinct_members_of_the_cluster_in_a_drawn_number():
    sizes = [9, 1, 5, 2]
    src = random_source(sum(sizes), 20, 60, seed=5)
    groups = family_groups(sizes, seed=6)
    group_of = {int(r): g for g, members in enumerate(groups) for r in members}
    ds = PairDataset(src, groups, max_length=512, seed=2, max_partners=4)
    counts = {}
    for epoch in range(8):
        for index in range(len(src)):
            partners = ds.partners(index, epoch)
            others = len(groups[group_of[index]]) - 1
            if others == 0:
                assert partners == [index]  # a singleton: itself, as with one partner
                continue
            assert len(set(partners)) == len(partners) and index not in partners
            assert 1 <= len(partners) <= min(4, others)
            assert all(group_of[p] == group_of[index] for p in partners)
            counts.setdefault(others, set()).add(len(partners))
            tokens = ds[(index, epoch)]["tokens"]
            assert len(tokens) <= ds.lengths[index] <= 512
            # every partner whole before the protein (512 tokens hold them all)
            assert int((tokens == A.sep_idx).sum()) == len(partners)
    assert counts[8] == {1, 2, 3, 4} and counts[4] == {1, 2, 3, 4} and counts[1] == {1}
    again = PairDataset(src, groups, max_length=512, seed=2, max_partners=4)
    assert again.partners(0, 3) == ds.partners(0, 3)  # seeded by (seed, epoch, index)
    one = PairDataset(src, groups, max_length=512, seed=2)
    assert all(one.partners(i, 1) == [one.partner(i, 1)] for i in range(len(src)))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_max_partners_is_a_whole_number_of_at_least_one(bad):
    src = random_source(4, 20, 40, seed=1)
    with pytest.raises(ConfigError, match="max_partners must be a whole number"):
        PairDataset(src, family_groups([4], seed=1), max_length=128, max_partners=bad)


def test_several_partners_refuse_fill_and_align():
    src = random_source(4, 20, 40, seed=1)
    for extra in ({"fill": True}, {"align": True}):
        with pytest.raises(ConfigError, match="several partners"):
            PairDataset(src, family_groups([2, 2], seed=1), max_length=128, max_partners=3, **extra)
