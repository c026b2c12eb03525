"""Search hits as training partners: the table read against a split, weights, and the rows."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.data.datasets import PairDataset
from protein_performer.data.homolog_hits import (
    HitPartners,
    check_regions,
    read_hit_partners,
)
from protein_performer.data.search import TSV_COLUMNS
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError, DataError

A = default_alphabet()
AA = "ACDEFGHIKLMNPQRSTVWY"


def write_table(path: Path, rows: list[tuple[str, str, int, int]]) -> Path:
    """A hits.tsv as `data search` writes it; only query, target and region are meaningful."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, delimiter="\t", lineterminator="\n")
        w.writerow(TSV_COLUMNS)
        for q, t, start, end in rows:
            row = dict.fromkeys(TSV_COLUMNS, "0")
            row.update(query=q, target=t, region_start=str(start), region_end=str(end))
            w.writerow([row[c] for c in TSV_COLUMNS])
    return path


def test_table_is_read_against_the_ids_given_best_first(tmp_path):
    write_table(
        tmp_path / "hits.tsv",
        [
            ("b", "a", 3, 10),
            ("a", "c", 1, 5),
            ("a", "b", 2, 4),
            ("a", "z", 1, 9),  # a target of another split: dropped
            ("a", "c", 7, 9),  # the same pair again: its first (best) row kept
            ("a", "a", 1, 5),  # itself
            ("y", "a", 1, 5),  # a query of another split
        ],
    )
    hits = read_hit_partners(tmp_path, ["a", "b", "c"])  # the directory finds hits.tsv
    assert hits.read == 7 and hits.dropped == 4
    np.testing.assert_array_equal(hits.offsets, [0, 2, 3, 3])
    np.testing.assert_array_equal(hits.target, [2, 1, 0])  # a's hits in the table's order
    np.testing.assert_array_equal(hits.start, [0, 1, 2])  # 1-based inclusive -> 0-based
    np.testing.assert_array_equal(hits.end, [5, 4, 10])
    assert [hits.count(i) for i in range(3)] == [2, 1, 0]
    np.testing.assert_array_equal(hits.longest(), [5, 8, 0])


def test_a_table_with_no_usable_hit_gives_every_record_none(tmp_path):
    # only rows of other splits and self-hits: read, dropped, and no partner for anyone
    write_table(tmp_path / "hits.tsv", [("a", "z", 1, 9), ("b", "b", 1, 5)])
    hits = read_hit_partners(tmp_path, ["a", "b", "c"])
    assert hits.read == 2 and hits.dropped == 2 and len(hits) == 3
    np.testing.assert_array_equal(hits.offsets, [0, 0, 0, 0])
    assert len(hits.target) == 0 and hits.counts().tolist() == [0, 0, 0]
    assert hits.cluster_weights(np.array([0, 1, 2])).shape == (0,)


def test_cluster_weights_count_a_cluster_once_per_query():
    # record 0 hits 1, 2, 3 (1 and 2 in one cluster) ; record 3 hits 0
    hits = HitPartners(
        offsets=np.array([0, 3, 3, 3, 4]),
        target=np.array([1, 2, 3, 0]),
        start=np.zeros(4, dtype=np.int64),
        end=np.full(4, 5),
    )
    group_of = np.array([0, 1, 1, 2])
    np.testing.assert_allclose(hits.cluster_weights(group_of), [0.5, 0.5, 1.0, 1.0])


def test_bad_tables_are_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="no hit table"):
        read_hit_partners(tmp_path, ["a"])
    (tmp_path / "hits.tsv").write_text("query\ttarget\n")
    with pytest.raises(DataError, match="no column region_start, region_end"):
        read_hit_partners(tmp_path, ["a"])
    write_table(tmp_path / "hits.tsv", [("a", "b", 1, 5)])
    lines = (tmp_path / "hits.tsv").read_text().splitlines()
    (tmp_path / "hits.tsv").write_text("\n".join([*lines, "a\tb\tx"]) + "\n")
    with pytest.raises(DataError, match=r"line 3: malformed") as e:
        read_hit_partners(tmp_path, ["a", "b"])
    assert "\n" not in str(e.value) and "hits.tsv" in str(e.value)
    write_table(tmp_path / "hits.tsv", [("a", "b", 5, 4)])
    with pytest.raises(DataError, match="region 5-4 of b is empty"):
        read_hit_partners(tmp_path, ["a", "b"])
    write_table(tmp_path / "hits.tsv", [("a", "b", 1, 12)])
    hits = read_hit_partners(tmp_path, ["a", "b"])
    check_regions(hits, np.array([12, 12]), tmp_path)
    with pytest.raises(DataError, match=r"end past their target.*ending at 12 in a protein of 11"):
        check_regions(hits, np.array([12, 11]), tmp_path)


def source_of(n: int, seed: int = 0) -> FlatSource:
    rng = np.random.default_rng(seed)
    seqs = ["".join(rng.choice(list(AA), size=int(rng.integers(40, 120)))) for _ in range(n)]
    return FlatSource.from_strings(seqs, [f"p{i}" for i in range(n)])


def row_parts(tokens: np.ndarray) -> list[np.ndarray]:
    assert tokens[0] == A.cls_idx and tokens[-1] == A.eos_idx
    return np.split(tokens[1:-1], np.flatnonzero(tokens[1:-1] == A.sep_idx))


def test_rows_hold_drawn_hit_regions_best_first_and_others_draw_from_their_cluster():
    src = source_of(8, seed=1)
    groups = [np.array([0, 5]), np.array([1, 2, 3]), np.array([4]), np.array([6, 7])]
    # protein 0 has four hits (two of them in one cluster); protein 4 none
    rows = [(0, 1, 3, 30), (0, 2, 1, 20), (0, 6, 5, 40), (0, 4, 2, 25), (1, 0, 1, 35)]
    hits = HitPartners(
        offsets=np.array([0, 4, 5, 5, 5, 5, 5, 5, 5]),
        target=np.array([r[1] for r in rows]),
        start=np.array([r[2] for r in rows]),
        end=np.array([r[3] for r in rows]),
    )
    ds = PairDataset(src, groups, max_length=512, max_partners=3, mask="protein", hits=hits)
    assert ds.n_with_hits == 2 and ds.n_alone == 1  # protein 4: alone in its cluster, no hits
    seen: Counter[tuple[int, ...]] = Counter()
    for epoch in range(300):
        drawn = ds.hit_partners(0, epoch)
        assert 1 <= len(drawn) <= 3 and drawn == sorted(set(drawn))  # best first, no repeat
        seen[tuple(drawn)] += 1
        parts = row_parts(ds[(0, epoch)]["tokens"])
        assert np.array_equal(parts[-1][1:], src[0]) or len(src[0]) > ds.half
        for k, part in zip(drawn, parts[:-1], strict=True):
            t, s, e = int(hits.target[k]), int(hits.start[k]), int(hits.end[k])
            np.testing.assert_array_equal(part[1 if part[0] == A.sep_idx else 0 :], src[t][s:e])
    # targets 1 and 2 share a cluster: together they are drawn about as often as 6 or 4 alone
    drawn = Counter(k for d, c in seen.items() for k in d for _ in range(c))
    assert drawn[0] + drawn[1] < 0.8 * (drawn[2] + drawn[3])
    assert {len(d) for d in seen} == {1, 2, 3}
    # without hits: partners from the cluster, as before
    for epoch in range(5):
        assert ds.hit_partners(7, epoch) == []
        parts = row_parts(ds[(7, epoch)]["tokens"])
        np.testing.assert_array_equal(parts[0], src[6])
    # the batching bound holds every row
    for i in range(len(src)):
        for epoch in range(5):
            assert len(ds[(i, epoch)]["tokens"]) <= ds.lengths[i]
    with pytest.raises(ConfigError, match="hits are for 3 records"):
        empty = np.zeros(0, dtype=np.int64)
        PairDataset(src, groups, 512, hits=HitPartners(np.zeros(4, np.int64), empty, empty, empty))
    with pytest.raises(ConfigError, match="several partners do not work with fill"):
        PairDataset(src, groups, max_length=512, fill=True, max_partners=2, hits=hits)
    with pytest.raises(ConfigError, match="hits do not work with fill"):
        PairDataset(src, groups, max_length=512, fill=True, hits=hits)


def test_datamodule_reads_hits_of_its_training_split_only(tmp_path):
    src = source_of(6, seed=3)
    ids = list(src.ids)
    table = {rid: rid for rid in ids}  # every protein its own cluster
    write_table(
        tmp_path / "hits.tsv",
        [("p0", "p1", 1, 20), ("p0", "p9", 1, 20), ("p1", "p0", 5, 30), ("p2", "p0", 1, 10)],
    )
    kw = dict(clusters=table, packing="pairs", max_length=256, batch_size=2, pair_mask="protein")
    dm = ProteinDataModule(train_source=src, pair_homologs=str(tmp_path), pair_partners=4, **kw)
    dm.setup("fit")
    ds = dm.datasets["train"]
    assert ds.n_with_hits == 3 and ds.hits.dropped == 1  # p9 is not here
    parts = row_parts(ds[(1, 0)]["tokens"])
    np.testing.assert_array_equal(parts[0], src[0][4:30])
    assert any("3 of 6 proteins have search hits" in n for n in dm.notes["train"])
    for crop in ("partners", "drawn"):  # columns rows: how their crop is sized reaches the rows
        cols = ProteinDataModule(
            train_source=src, pair_homologs=str(tmp_path), pair_partners=4, pair_columns=True,
            pair_column_crop=crop, **kw,
        )  # fmt: skip
        cols.setup("fit")
        assert cols.datasets["train"].columns and cols.datasets["train"].column_crop == crop
    with pytest.raises(ConfigError, match="pair_homologs needs packing=pairs"):
        ProteinDataModule(train_source=src, clusters=table, pair_homologs=str(tmp_path))
    with pytest.raises(ConfigError, match="pair_homologs does not work with pair_fill"):
        ProteinDataModule(train_source=src, pair_homologs=str(tmp_path), pair_fill=True, **kw)
    write_table(tmp_path / "hits.tsv", [("p0", "p1", 1, 500)])
    bad = ProteinDataModule(train_source=src, pair_homologs=str(tmp_path), **kw)
    with pytest.raises(DataError, match="end past their target"):
        bad.setup("fit")


def test_train_refuses_a_missing_hit_table_before_reading_any_data(tmp_path):
    from protein_performer.cli.compose import compose_job
    from protein_performer.training.preflight import check_train_inputs

    (tmp_path / "members.tsv").write_text("cluster_id\tmember_id\nc\tp\n")
    overrides = [
        "experiment=homologs_msa",
        "data=sample",
        f"data.clusters={tmp_path / 'members.tsv'}",
    ]
    cfg = compose_job("train", [*overrides, f"data.pair_homologs={tmp_path / 'nope'}"]).config
    with pytest.raises(DataError, match=r"data.pair_homologs: no hit table") as e:
        check_train_inputs(cfg)
    assert "nope" in str(e.value) and "\n" not in str(e.value)
    write_table(tmp_path / "hits.tsv", [("p", "q", 1, 5)])
    cfg = compose_job("train", [*overrides, f"data.pair_homologs={tmp_path}"]).config
    check_train_inputs(cfg)  # a search output directory: accepted
