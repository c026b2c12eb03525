"""Rows read at their columns (``data.pair_columns``): the crop, the blind alignment, each
homolog residue at its column's position, the masked residues the collator masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import protein_performer.data.datasets as datasets_module
from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.datasets import PairDataset
from protein_performer.data.homolog_hits import HitPartners
from protein_performer.data.masking import MLMCollator, mask_tokens
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError

A = default_alphabet()
AA = "ACDEFGHIKLMNPQRSTVWY"


def _family(seed: int = 0) -> FlatSource:
    """Protein 0 (300 residues); 1: its residues 20-260 with every 7th changed and residues
    100-104 left out; 2: protein 0 itself (a copy); 3: unrelated."""
    rng = np.random.default_rng(seed)
    p0 = "".join(rng.choice(list(AA), 300))
    p1 = list(p0[20:260])
    for i in range(0, len(p1), 7):
        p1[i] = AA[(AA.index(p1[i]) + 3) % 20]
    p1 = "".join(p1[:80] + p1[85:])  # protein 0's residues 100-104 missing
    p3 = "".join(rng.choice(list(AA), 200))
    return FlatSource.from_strings([p0, p1, p0, p3], ["p0", "p1", "p2", "p3"])


def _dataset(src: FlatSource, targets: list[int], **kw) -> PairDataset:
    n = len(targets)
    hits = HitPartners(
        offsets=np.array([0, n, n, n, n]),
        target=np.array(targets),
        start=np.zeros(n, dtype=np.int64),
        end=np.array([len(src[t]) for t in targets]),
    )
    groups = [np.array([i]) for i in range(len(src))]
    options = dict(max_partners=4, mask="protein", hits=hits, columns=True)
    return PairDataset(src, groups, max_length=512, **{**options, **kw})


def test_a_columns_row_gives_each_homolog_residue_the_column_it_aligns_to():
    src = _family()
    ds = _dataset(src, [1, 2])
    assert ds.column_width == (512 - 2 - 4) // 5  # 101: four homologs cut to it fit beside it
    # the bounds batches are packed by: the crop and each hit (2 here) cut to it; no hits, alone
    assert ds.lengths[0] == 101 + 2 * 102 + 2 and ds.lengths[3] == 101 + 2
    for epoch in range(6):
        item = ds[(0, epoch)]
        assert len(item["tokens"]) <= ds.lengths[0]  # batches are packed by these bounds
        tokens, positions, at = item["tokens"], item["positions"], item["mask_at"]
        assert len(tokens) == len(positions) <= 512 and tokens[0] == A.cls_idx
        seps = np.flatnonzero(tokens == A.sep_idx)
        start = int(seps[-1]) + 1 if len(seps) else 1
        first = int(positions[start])
        crop = src[0][first : first + ds.column_width]
        np.testing.assert_array_equal(tokens[start : start + len(crop)], crop)
        np.testing.assert_array_equal(
            positions[start : start + len(crop)], first + np.arange(len(crop))
        )
        assert positions[0] == first - 1 and positions[-1] == first + len(crop)
        # the masked residues: in the crop, about 15 % of it, distinct
        assert np.all((at >= start) & (at < start + len(crop))) and len(set(at)) == len(at)
        assert abs(len(at) - 0.15 * len(crop)) <= 1
        # every homolog residue sits at the protein residue it stands for: protein 1 is
        # protein 0's residues 20-260 less 100-104, so residue j of it is 20 + j (or + 5)
        if len(seps) == 0:
            continue
        homolog = tokens[1 : seps[0]]
        pos = positions[1 : seps[0]].astype(int)
        assert len(seps) == 1  # the copy (protein 2) is left out
        assert (np.diff(pos) > 0).all()  # one residue a column, in order
        sure = (pos < 98) | (pos > 106)  # a gap's place next to the deletion may vary
        own = np.where(pos < 100, pos - 20, pos - 25)[sure]
        np.testing.assert_array_equal(homolog[sure], src[1][own])
        assert sure.sum() > 0.9 * len(pos) > 40
        assert positions[seps[0]] == first + len(crop)


def test_the_homologs_are_aligned_with_the_masked_residues_unknown(monkeypatch):
    src = _family()
    ds = _dataset(src, [1])
    seen: list[str] = []
    real = datasets_module.aligned_positions

    def spy(query: str, subject: str) -> np.ndarray:
        seen.append(query)
        return real(query, subject)

    monkeypatch.setattr(datasets_module, "aligned_positions", spy)
    item = ds[(0, 3)]
    start = int(np.flatnonzero(item["tokens"] == A.sep_idx)[-1]) + 1
    blind = np.array(list(seen[-1]))
    hidden = item["mask_at"] - start
    assert set(np.flatnonzero(blind == "X").tolist()) == set(hidden.tolist())
    first = int(item["positions"][start])
    truth = np.array(list(A.decode(src[0][first : first + len(blind)])))
    np.testing.assert_array_equal(np.delete(blind, hidden), np.delete(truth, hidden))


def test_the_collator_masks_the_rows_chosen_residues_and_batches_their_positions():
    src = _family()
    ds = _dataset(src, [1])
    items = [ds[(0, 0)], ds[(3, 0)]]
    batch = MLMCollator(A, seed=0)([{**it} for it in items])
    for row, item in enumerate(items):
        labelled = torch.nonzero(batch["labels"][row] != -100).flatten().numpy()
        np.testing.assert_array_equal(np.sort(labelled), np.sort(item["mask_at"]))
        n = len(item["tokens"])
        np.testing.assert_array_equal(batch["position_ids"][row, :n].numpy(), item["positions"])
        assert (batch["position_ids"][row, n:] == 0).all()
    assert batch["position_ids"].dtype == torch.float32
    # chosen positions must be residues after mask_from, each once
    tokens = items[0]["tokens"]
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="distinct residue positions"):
        mask_tokens(tokens, A, rng, at=np.array([0]))
    with pytest.raises(ValueError, match="distinct residue positions"):
        mask_tokens(tokens, A, rng, at=np.array([5, 5]))


def test_columns_rows_are_refused_where_they_cannot_work():
    src = _family()
    with pytest.raises(ConfigError, match="columns needs mask='protein'"):
        _dataset(src, [1], mask="all")
    with pytest.raises(ConfigError, match="mask_prob must be in"):
        _dataset(src, [1], mask_prob=0.0)


def test_the_crop_starts_anywhere_and_a_short_protein_is_whole():
    rng = np.random.default_rng(5)
    seqs = ["".join(rng.choice(list(AA), n)) for n in (102, 60)]
    src = FlatSource.from_strings(seqs, ["long", "short"])
    hits = HitPartners(np.zeros(3, np.int64), *(np.zeros(0, np.int64),) * 3)
    groups = [np.array([0]), np.array([1])]
    ds = PairDataset(src, groups, 512, max_partners=4, mask="protein", hits=hits, columns=True)
    firsts = {int(ds[(0, epoch)]["positions"][1]) for epoch in range(40)}
    assert firsts == {0, 1}  # 102 residues, a crop of 101: both starts drawn
    short = ds[(1, 0)]
    assert len(short["tokens"]) == 62 and short["positions"].tolist() == [-1, *range(61)]


def test_a_drawn_crop_leaves_room_for_the_homologs_the_row_draws():
    """``column_crop="drawn"``: the widest crop for the homologs a row holds (the copy left
    out), as the scorer crops; ``"partners"``: every crop for ``max_partners``."""
    src = _family()
    fixed = _dataset(src, [1, 2], max_partners=64)
    assert fixed.column_width == (512 - 2 - 64) // 65 == 6
    drawn = _dataset(src, [1, 2], max_partners=64, column_crop="drawn")
    assert drawn.lengths[0] == 512 and drawn.lengths[3] == 200 + 2  # bounds: the whole protein
    for epoch in range(4):
        for ds, width in ((fixed, 6), (drawn, (512 - 2 - 1) // 2)):  # 1 homolog: 254 residues
            item = ds[(0, epoch)]
            tokens = item["tokens"]
            seps = np.flatnonzero(tokens == A.sep_idx)  # a 6-residue crop may align no hit
            start = int(seps[-1]) + 1 if len(seps) else 1
            assert len(tokens) - start - 1 == width and tokens[-1] == A.eos_idx
            assert ds is fixed or len(seps) == 1  # the wide crop holds its homolog
            assert len(tokens) <= ds.lengths[0]
    alone = drawn[(3, 0)]["tokens"]  # no homolog: the whole protein (200 residues)
    assert len(alone) == 202
    with pytest.raises(ConfigError, match="column_crop must be one of partners, drawn"):
        _dataset(src, [1], column_crop="widest")


def test_a_homolog_residue_aligned_to_the_first_column_keeps_it():
    # a 60-residue protein and a homolog one residue different: every column, the first too
    rng = np.random.default_rng(9)
    p0 = "".join(rng.choice(list(AA), 60))
    p1 = p0[:30] + AA[(AA.index(p0[30]) + 5) % 20] + p0[31:]
    src = FlatSource.from_strings([p0, p1, p0[::-1], p1[::-1]], ["p0", "p1", "r0", "r1"])
    ds = _dataset(src, [1])
    for epoch in range(4):
        item = ds[(0, epoch)]
        tokens, positions = item["tokens"], item["positions"]
        sep = int(np.flatnonzero(tokens == A.sep_idx)[0])
        hidden = set((item["mask_at"] - sep - 1).tolist())
        pos = positions[1:sep].astype(int)
        # a masked residue at an end may be left unaligned; any other column is held
        ends = {0, 59} & hidden
        assert set(range(60)) - ends <= set(pos.tolist()) <= set(range(60))
        np.testing.assert_array_equal(tokens[1:sep], src[1][pos])
