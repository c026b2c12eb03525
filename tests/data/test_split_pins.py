"""Pinned hash-split assignments: a changed split key or hash input reshuffles every split (and
silently leaks records between train and test across versions), so the exact assignment of a
few known headers is fixed here, and checked end to end through preprocessing and the data
module, where UniProtKB isoforms must stay with their canonical entry."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.data.headers import parse_header
from protein_performer.data.shards import preprocess
from protein_performer.data.splits import SPLITS, SplitAssigner, hash_unit

ISO1 = "sp|P12345|X_HUMAN Foo OS=Homo sapiens OX=9606 PE=1 SV=1"
ISO2 = "sp|P12345-2|X_HUMAN Isoform 2 of Foo OS=Homo sapiens OX=9606"
ISO3 = "sp|P12345-3|X_HUMAN Isoform 3 of Foo OS=Homo sapiens OX=9606"
BPTI = "sp|P00974|BPT1_BOVIN Pancreatic trypsin inhibitor OS=Bos taurus OX=9913 PE=1 SV=2"
TREMBL = "tr|A0A0B4J2F0|A0A0B4J2F0_HUMAN Some protein OS=Homo sapiens OX=9606 GN=X PE=4 SV=1"
UR50 = "UniRef50_Q9K794 Putative AgrB-like protein n=2 Tax=Bacillus TaxID=1386 RepID=AGRB_BACHD"
UR90 = "UniRef90_P0A7B8 ATP-dependent protease n=1 Tax=Escherichia coli TaxID=562 RepID=HSLV_ECOLI"
UR100 = "UniRef100_A0A011 Cytochrome c n=1 Tax=Escherichia coli TaxID=562 RepID=A0A011_ECOLI"
GENERIC = "P69905 generic header"

# Computed once with the released split code: (title, seed, fractions) -> split.
PINS: dict[tuple[int, tuple[float, float, float]], dict[str, str]] = {
    (0, (0.9, 0.05, 0.05)): {
        ISO1: "train",
        ISO2: "train",
        ISO3: "train",
        BPTI: "train",
        TREMBL: "train",
        UR50: "val",
        UR90: "test",
        UR100: "train",
        GENERIC: "train",
    },
    (7, (0.4, 0.3, 0.3)): {
        ISO1: "val",
        ISO2: "val",
        ISO3: "val",
        BPTI: "train",
        TREMBL: "val",
        UR50: "val",
        UR90: "test",
        UR100: "train",
        GENERIC: "test",
    },
    (42, (0.5, 0.25, 0.25)): {
        ISO1: "val",
        ISO2: "val",
        ISO3: "val",
        BPTI: "train",
        TREMBL: "val",
        UR50: "test",
        UR90: "val",
        UR100: "test",
        GENERIC: "val",
    },
}
CASES = [(t, seed, fr, split) for (seed, fr), table in PINS.items() for t, split in table.items()]


@pytest.mark.parametrize(("title", "seed", "fractions", "split"), CASES)
def test_pinned_split_of_known_headers(title, seed, fractions, split):
    assert SplitAssigner(fractions, seed)(parse_header(title).split_key) == split


def test_pinned_hash_values():
    assert hash_unit("P12345", 0) == 0.6475015884100705
    assert hash_unit("P12345", 7) == 0.681985187693409
    assert hash_unit("UniRef50_Q9K794", 0) == 0.9039702875446644
    assert hash_unit("UniRef50_Q9K794", 7) == 0.4078196975178363


def _fasta(path: Path, titles: list[str]) -> Path:
    aa = "ACDEFGHIKLMNPQRSTVWY"
    with open(path, "w") as f:
        for i, title in enumerate(titles):
            f.write(f">{title}\n{(aa[i % 20 :] + aa) * 2}\n")
    return path


def _shard_ids(outdir: Path) -> dict[str, list[str]]:
    return {s: (outdir / s / "ids.txt").read_text().splitlines() for s in SPLITS}


def _datamodule_ids(fasta: Path, seed: int, fractions) -> dict[str, list[str]]:
    dm = ProteinDataModule(files=[str(fasta)], split_fractions=fractions, split_seed=seed)
    dm.setup(None)
    return {s: list(dm.datasets[s].source.ids) for s in SPLITS}


def test_pinned_splits_through_preprocess_and_the_datamodule(tmp_path):
    seed, fractions = 7, (0.4, 0.3, 0.3)
    table = PINS[seed, fractions]
    fasta = _fasta(tmp_path / "pins.fasta", list(table))
    expected = {s: sorted(t.split()[0] for t, v in table.items() if v == s) for s in SPLITS}
    preprocess(fasta, tmp_path / "shards", fractions=fractions, seed=seed, progress=False)
    assert {s: sorted(v) for s, v in _shard_ids(tmp_path / "shards").items()} == expected
    got = _datamodule_ids(fasta, seed, fractions)
    assert {s: sorted(v) for s, v in got.items()} == expected


def _isoform_titles(n: int = 30) -> tuple[list[str], dict[str, str]]:
    """Canonical entries with one or two isoforms each; returns titles and id -> accession."""
    titles, accession = [], {}
    for i in range(n):
        acc = f"Q{i * 7919 % 99991:05d}"
        for suffix in ["", "-2", "-3"][: 2 + i % 2]:
            rid = f"sp|{acc}{suffix}|P{i}_HUMAN"
            titles.append(f"{rid} Protein {i}{suffix} OS=Homo sapiens OX=9606")
            accession[rid] = acc
    return titles, accession


def test_isoforms_share_a_split_and_file_order_does_not_matter(tmp_path):
    seed, fractions = 3, (0.4, 0.3, 0.3)
    titles, accession = _isoform_titles()
    shuffled = random.Random(0).sample(titles, len(titles))
    in_order = _fasta(tmp_path / "a.fasta", titles)
    reordered = _fasta(tmp_path / "b.fasta", shuffled)
    preprocess(in_order, tmp_path / "a", fractions=fractions, seed=seed, progress=False)
    preprocess(reordered, tmp_path / "b", fractions=fractions, seed=seed, progress=False)
    ids = _shard_ids(tmp_path / "a")
    assert all(ids[s] for s in SPLITS)  # every split is used
    # file order does not change which records land in which split
    assert {s: set(v) for s, v in _shard_ids(tmp_path / "b").items()} == {
        s: set(v) for s, v in ids.items()
    }
    # every isoform is in the split of its canonical accession
    assigner = SplitAssigner(fractions, seed)
    for split, records in ids.items():
        for rid in records:
            assert assigner(accession[rid]) == split, rid
    # the data module (reading the FASTA itself) and the shards agree
    for fasta in (in_order, reordered):
        got = _datamodule_ids(fasta, seed, fractions)
        assert {s: set(v) for s, v in got.items()} == {s: set(v) for s, v in ids.items()}
    dm = ProteinDataModule(shards=tmp_path / "b", split_fractions=fractions, split_seed=seed)
    dm.setup(None)
    assert {s: len(dm.datasets[s].source) for s in SPLITS} == {s: len(v) for s, v in ids.items()}
