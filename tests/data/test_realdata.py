"""The real proteomes in ../shared/data (skipped when absent): counts, headers, stats, shards."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.fasta import read_fasta
from protein_performer.data.shards import ShardSource, preprocess
from protein_performer.data.stats import fasta_stats

pytestmark = pytest.mark.realdata


def test_ecoli_stats(ecoli_fasta):
    s = fasta_stats(ecoli_fasta)
    assert s["records"] == 4363 and s["residues"] == 1_358_898
    assert (s["lengths"]["min"], s["lengths"]["p50"], s["lengths"]["max"]) == (13, 274, 2358)
    assert s["nonstandard_residues"] == {"X": 8, "U": 3}
    assert s["invalid_characters"] == {} and s["header_kinds"] == {"uniprotkb": 4363}
    assert s["files"][0]["sha256"] == (
        "f8878198b8798e87f6ce930c39c659891ed1b82fdff3164a9b47d60f538dec9f"
    )


def test_yeast_headers_and_counts(yeast_fasta):
    recs = list(read_fasta(yeast_fasta))
    assert len(recs) == 6077
    assert sum(len(r.sequence) for r in recs) == 2_949_369
    assert all(r.header.kind == "uniprotkb" and r.header.db == "sp" for r in recs)
    assert {r.header.organism_id for r in recs} == {559292}
    nmd2 = next(r for r in recs if r.header.accession == "P38798")
    assert nmd2.header.entry_name == "NMD2_YEAST" and nmd2.header.gene == "NMD2"
    assert nmd2.header.name == "Nonsense-mediated mRNA decay protein 2"
    assert sum("-" in r.header.accession for r in recs) == 28  # isoforms


def test_bpti(bpti_fasta):
    (rec,) = list(read_fasta(bpti_fasta))
    assert rec.header.kind == "generic" and rec.id == "P00974" and len(rec.sequence) == 100
    assert rec.sequence[35:93] == "RPDFCLEPPYTGPCKARIIRYFYNAKAGLCQTFVYGGCRAKRNNFKSAEDCMRTCGGA"


def test_preprocess_both_proteomes_round_trip(tmp_path, ecoli_fasta, yeast_fasta):
    out = tmp_path / "shards"
    m = preprocess([ecoli_fasta, yeast_fasta], out, progress=False)
    assert [s["records"] for s in m["sources"]] == [4363, 6077]
    assert m["counts"]["records_kept"] == 10440
    assert sum(m["splits"][s]["records"] for s in m["splits"]) == 10440
    assert sum(m["splits"][s]["residues"] for s in m["splits"]) == 1_358_898 + 2_949_369
    assert m["sources"][1]["sha256"] == (
        "113881c941cf992a5de2e2d64c2e02aeef066fae47650d1dbc3cb79d7f0c0877"
    )
    # every record is in exactly one split, with its tokens intact
    a = default_alphabet()
    digest = {}
    for split in ("train", "val", "test"):
        src = ShardSource.open(out, split)
        for i in range(len(src)):
            digest.setdefault(src.record_id(i), []).append(
                hashlib.md5(a.decode(src[i]).encode()).hexdigest()
            )
    for path in (ecoli_fasta, yeast_fasta):
        for rec in read_fasta(path):
            assert hashlib.md5(rec.sequence.encode()).hexdigest() in digest[rec.id]
    frac = m["splits"]["train"]["records"] / 10440
    assert abs(frac - 0.9) < 0.02
    assert np.isclose(sum(len(v) for v in digest.values()), 10440)
