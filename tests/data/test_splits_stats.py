from __future__ import annotations

import numpy as np
import pytest

from protein_performer.data.digests import DuplicateFinder
from protein_performer.data.splits import SplitAssigner, hash_unit, parse_fractions
from protein_performer.data.stats import LengthHistogram, fasta_stats


def test_fractions_validation():
    assert parse_fractions("0.8,0.1,0.1") == (0.8, 0.1, 0.1)
    for bad, msg in [
        ("0.8,0.1", "3 values"),
        ("0.8,0.3,0.1", "sum to 1"),
        ("1.1,-0.1,0", ">= 0"),
        ("a,b,c", "not numbers"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_fractions(bad)


def test_hash_split_deterministic_and_proportional():
    keys = [f"UniRef50_K{i}" for i in range(20000)]
    a = SplitAssigner((0.7, 0.2, 0.1), seed=1)
    out = [a(k) for k in keys]
    assert out == [SplitAssigner((0.7, 0.2, 0.1), seed=1)(k) for k in keys]
    frac = {s: out.count(s) / len(out) for s in ("train", "val", "test")}
    assert abs(frac["train"] - 0.7) < 0.015 and abs(frac["val"] - 0.2) < 0.015
    assert out != [SplitAssigner((0.7, 0.2, 0.1), seed=2)(k) for k in keys]
    assert {SplitAssigner((1, 0, 0))(k) for k in keys[:100]} == {"train"}
    u = np.array([hash_unit(k, 0) for k in keys])
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01


def test_the_default_split_is_90_5_5():
    keys = [f"UniRef50_K{i}" for i in range(20000)]
    a = SplitAssigner()
    out = [a(k) for k in keys]
    frac = {s: out.count(s) / len(out) for s in ("train", "val", "test")}
    assert frac == pytest.approx({"train": 0.9, "val": 0.05, "test": 0.05}, abs=0.008)
    assert out == [SplitAssigner((0.9, 0.05, 0.05), seed=0)(k) for k in keys]


def test_length_histogram_edges():
    # empty: a count of nothing; a length at the initial size's edge grows the table
    assert LengthHistogram().summary() == {"count": 0, "residues": 0}
    h = LengthHistogram()
    for x in (1024, 3, 1023):
        h.add(x)
    s = h.summary()
    assert (s["count"], s["residues"], s["min"], s["max"], s["median"]) == (3, 2050, 3, 1024, 1023)
    # every percentile named, by nearest rank (a length some record has)
    h = LengthHistogram()
    for x in range(1, 201):
        h.add(x)
    s = h.summary()
    want = {f"p{p}": int(np.ceil(p / 100 * 200)) for p in (1, 5, 25, 50, 75, 95, 99)}
    assert {k: v for k, v in s.items() if k.startswith("p")} == want


def test_length_histogram_matches_numpy():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 5000, size=100_000)
    h = LengthHistogram()
    for x in lengths:
        h.add(int(x))
    s = h.summary()
    assert s["count"] == len(lengths) and s["residues"] == int(lengths.sum())
    assert s["min"] == lengths.min() and s["max"] == lengths.max()
    for p in (5, 50, 95):
        assert s[f"p{p}"] == int(np.percentile(lengths, p, method="inverted_cdf"))
    assert s["median"] == np.median(lengths)
    for sample in ([7], [3, 8], [3, 4], [1, 9, 2], [5, 5, 6, 6], [0, 0, 4, 8]):
        h = LengthHistogram()
        for x in sample:
            h.add(x)
        assert h.summary()["median"] == np.median(sample), sample


def test_duplicate_finder_reports_record_numbers():
    d = DuplicateFinder()
    for key in ["a", "b", "a", "c", "b", "a"]:
        d.add(key)
    r = d.result()
    assert r["count"] == 3
    assert r["examples"] == [
        {"record": 3, "first": 1},
        {"record": 5, "first": 2},
        {"record": 6, "first": 1},
    ]


def test_stats_reports_problems_without_failing(tmp_path):
    p = tmp_path / "s.fa"
    p.write_text(">a\nMKVx*\n>b\nMK-V\n>a\nAC#DE\n>c\nUUOX\n")
    s = fasta_stats(p)
    assert s["records"] == 4 and s["residues"] == 4 + 4 + 5 + 4
    assert s["invalid_characters"] == {"#": 1, "-": 1}
    assert s["records_with_lowercase"] == 1 and s["records_with_stop"] == 1
    assert s["records_without_residues"] == 0
    spaced = tmp_path / "spaced.fa"  # whitespace inside a line is not a residue
    spaced.write_text(">a\nMK V\tL\n")
    got = fasta_stats(spaced)
    assert got["residues"] == 4 and got["invalid_characters"] == {}
    star = tmp_path / "star.fa"
    star.write_text(">a\nMKV\n>b\n*\n")
    assert fasta_stats(star)["records_without_residues"] == 1
    assert s["nonstandard_residues"] == {"X": 2, "U": 2, "O": 1}
    assert s["composition"]["M"] == 2 and s["composition"]["K"] == 2
    assert s["duplicate_ids"] == {
        "count": 1,
        "examples": [{"record": 3, "first": 1, "file": str(p), "first_file": str(p)}],
    }
    assert s["lengths"]["min"] == 4 and s["lengths"]["max"] == 5
    other = tmp_path / "t.fa"
    other.write_text(">c\nMKV\n>d\nMKV\n")
    assert s["identical_sequences"]["count"] == 0
    stats = fasta_stats([p, other])
    both = stats["duplicate_ids"]
    assert stats["identical_sequences"] == {  # the same protein under two ids
        "count": 1,
        "examples": [{"record": 2, "first": 1, "file": str(other), "first_file": str(other)}],
    }
    assert both["count"] == 2  # record numbers are each file's own
    assert both["examples"][1] == {
        "record": 1,
        "first": 4,
        "file": str(other),
        "first_file": str(p),
    }
