from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.shards import ShardSource, preprocess, read_manifest
from protein_performer.data.sources import load_fasta_source
from protein_performer.errors import DataError

A = default_alphabet()


def _fasta(tmp_path, n=200, name="in.fa.gz", bad_at=None):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n):
        seq = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=int(rng.integers(5, 60))))
        if i == bad_at:
            seq = seq[:2] + "-" + seq[2:]
        lines.append(f">UniRef50_T{i:04d} prot {i} n=1 Tax=t TaxID=1 RepID=T{i}\n{seq}\n")
    p = tmp_path / name
    p.write_bytes(gzip.compress("".join(lines).encode()))
    return p


def test_round_trip_matches_fasta_split(tmp_path):
    src = _fasta(tmp_path)
    out = tmp_path / "shards"
    m = preprocess(src, out, fractions=(0.8, 0.1, 0.1), seed=5, progress=False)
    assert read_manifest(out) == m
    assert sum(m["splits"][s]["records"] for s in m["splits"]) == 200
    assert m["sources"][0]["sha256"] and m["alphabet"]["version"] == A.version
    assert m["sources"][0]["split"] == "hash" and m["split"]["clusters"] is None
    for split in ("train", "val", "test"):
        sh = ShardSource.open(out, split)
        ref = load_fasta_source(src, split=split, fractions=(0.8, 0.1, 0.1), seed=5)
        assert len(sh) == len(ref) == m["splits"][split]["records"]
        assert sh.ids == ref.ids
        for i in range(len(sh)):
            assert np.array_equal(sh[i], ref[i])
    assert oct(out.stat().st_mode & 0o777) != oct(0o700)


def test_explicit_split_files(tmp_path):
    tr, va = _fasta(tmp_path, 30, "tr.fa.gz"), _fasta(tmp_path, 7, "va.fa")
    m = preprocess(tr, tmp_path / "o", val_inputs=[va], progress=False)
    assert [m["splits"][s]["records"] for s in ("train", "val", "test")] == [30, 7, 0]
    assert m["split"]["method"] == "explicit"
    # each file's own counts (not running totals)
    assert [(f["records"], f["records_kept"], f["split"]) for f in m["sources"]] == [
        (30, 30, "train"),
        (7, 7, "val"),
    ]
    assert len(ShardSource.open(tmp_path / "o", "test")) == 0


def test_held_out_files_identical_to_training_records_are_counted(tmp_path, capsys):
    from protein_performer.cli.main import main

    tr = _fasta(tmp_path, 30, "tr.fa.gz")
    va = _fasta(tmp_path, 7, "va.fa")  # the same generator: train's first 7 records
    te = tmp_path / "te.fa"
    te.write_text(">new\nMKVLAAWWYY\n")
    m = preprocess(tr, tmp_path / "o", val_inputs=[va], test_inputs=[te], progress=False)
    assert m["held_out_in_train"] == {
        "val": 7,
        "test": 0,
        "examples": {"val": ["UniRef50_T0000", "UniRef50_T0001", "UniRef50_T0002"], "test": []},
    }
    # a hash split of distinct records: counted (none)
    assert preprocess(tr, tmp_path / "h", progress=False)["held_out_in_train"] == {
        "val": 0,
        "test": 0,
        "examples": {"val": [], "test": []},
    }
    code = main(["data", "preprocess", str(tr), str(tmp_path / "c"), "--val", str(va),
                 "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and err == (
        "warning: 7 of 7 val records are identical to a training record (e.g. UniRef50_T0000): "
        "their metrics are not held out\n"
    )


def test_policy_counts_in_manifest(tmp_path):
    src = _fasta(tmp_path, 50, bad_at=10)
    m = preprocess(src, tmp_path / "skip", policy="skip", progress=False)
    assert m["counts"]["skipped_invalid"] == 1 and m["counts"]["records_kept"] == 49
    assert m["counts"]["invalid_characters"] == {"-": 1}
    m = preprocess(src, tmp_path / "rep", policy="replace", progress=False)
    assert m["counts"]["records_replaced"] == 1 and m["counts"]["residues_replaced"] == 1


def test_failure_leaves_nothing_behind(tmp_path):
    src = _fasta(tmp_path, 300, bad_at=290)
    out = tmp_path / "out"
    before = set(os.listdir(tmp_path))
    with pytest.raises(DataError, match=r"record 291 \(UniRef50_T0290\): invalid residue '-'"):
        preprocess(src, out, progress=False)
    assert set(os.listdir(tmp_path)) == before  # no OUTDIR, no temp dir


def test_existing_outdir_needs_overwrite(tmp_path):
    src = _fasta(tmp_path, 20)
    out = tmp_path / "o"
    preprocess(src, out, progress=False)
    with pytest.raises(DataError, match="exists"):
        preprocess(src, out, progress=False)
    m = preprocess(src, out, fractions=(1, 0, 0), overwrite=True, progress=False)
    assert m["splits"]["train"]["records"] == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.fa.gz", "o"]


def test_corrupt_shards_are_detected(tmp_path):
    out = tmp_path / "o"
    preprocess(_fasta(tmp_path, 40), out, progress=False)
    with open(out / "train" / "tokens.bin", "ab") as fh:
        fh.write(b"\x06")
    with pytest.raises(DataError, match="does not match manifest"):
        ShardSource.open(out, "train")
    with pytest.raises(DataError, match=r"no manifest\.json"):
        ShardSource.open(tmp_path, "train")
    man = json.loads((out / "manifest.json").read_text())
    man["format_version"] = 99
    (out / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(DataError, match="format version 99"):
        ShardSource.open(out, "val")


def test_bytes_that_are_no_residue_are_a_corrupt_shard(tmp_path):
    out = tmp_path / "o"
    preprocess(_fasta(tmp_path, 40), out, fractions=(1, 0, 0), progress=False)
    src = ShardSource.open(out, "train")
    path = out / "train" / "tokens.bin"
    data = bytearray(path.read_bytes())
    original = bytes(data)
    at = int(src.offsets[3]) + 1  # inside the fourth record
    data[at] = 250
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=rf"tokens\.bin: token 250 at position {at} \(record 4\)"):
        ShardSource.open(out, "train")
    data[at], first = original[at], original[0]
    data[0] = 250  # the first byte of the file is checked too
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"token 250 at position 0 \(record 1\)"):
        ShardSource.open(out, "train")
    data[0] = first
    for small in (0, 3):  # <pad>, <mask>: ids, but not of residues
        data[at] = small
        path.write_bytes(bytes(data))
        with pytest.raises(DataError, match=f"token {small} .* is not a residue"):
            ShardSource.open(out, "train")
    assert len(ShardSource.open(out, "train", verify=False)) == len(src)  # a worker's reopen


def test_pickle_reopens_instead_of_copying(tmp_path):
    import pickle

    out = tmp_path / "o"
    preprocess(_fasta(tmp_path, 300), out, fractions=(1, 0, 0), progress=False)
    src = ShardSource.open(out, "train")
    blob = pickle.dumps(src)
    assert len(blob) < 1000 < src.n_residues  # no token data inside
    back = pickle.loads(blob)
    assert isinstance(back.tokens, np.memmap) and back.ids == src.ids
    assert all(np.array_equal(back[i], src[i]) for i in range(len(src)))


def test_a_hash_split_counts_held_out_copies_of_training_records(tmp_path, capsys):
    """The same protein under two ids (two strains): a hash split puts copies on both sides;
    preprocess counts them (exactly) and says so, with what keeps them apart."""
    from protein_performer.cli.main import main

    rng = np.random.default_rng(0)
    seqs = ["".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 30)) for _ in range(100)]
    body = "".join(f">a{i}\n{q}\n>b{i}\n{q}\n" for i, q in enumerate(seqs))
    (tmp_path / "two.fa").write_text(body)
    m = preprocess(tmp_path / "two.fa", tmp_path / "s", fractions=[0.6, 0.2, 0.2], progress=False)
    leaks = m["held_out_in_train"]
    ids = {s: ShardSource.open(tmp_path / "s", s).ids for s in ("train", "val", "test")}
    train_seqs = {seqs[int(r[1:])] for r in ids["train"]}
    expected = {s: sum(seqs[int(r[1:])] in train_seqs for r in ids[s]) for s in ("val", "test")}
    assert {s: leaks[s] for s in ("val", "test")} == expected and expected["val"] > 0
    code = main(["data", "preprocess", str(tmp_path / "two.fa"), str(tmp_path / "c"),
                 "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "val records are identical to a training record" in err
    assert "--clusters keeps such copies on one side" in err


def test_duplicate_examples_name_records_of_the_file_past_skipped_ones(tmp_path):
    """Numbers in the manifest are the file's own records, not the kept ones' positions."""
    src = tmp_path / "d.fa"
    src.write_text(">x\nMKV1LL\n>y\nMKVLLA\n>z\nMKVLLW\n>y\nMKVLLC\n")
    m = preprocess(src, tmp_path / "o", policy="skip", progress=False)
    assert m["duplicate_ids"]["count"] == 1
    assert m["duplicate_ids"]["examples"][0] == {
        "record": 4, "first": 2, "file": str(src), "first_file": str(src),
    }  # fmt: skip


def test_an_empty_validation_split_of_shards_names_their_split(tmp_path, caplog):
    """The warning quoted data.split_fractions' unused defaults for a shard run."""
    from protein_performer.data.datamodule import ProteinDataModule

    out = tmp_path / "s"
    preprocess(_fasta(tmp_path, 40), out, fractions=(1, 0, 0), progress=False)
    dm = ProteinDataModule(shards=out, max_length=64, toks_per_batch=640)
    with caplog.at_level("WARNING"):
        dm.setup("fit")
    assert f"the validation split is empty (0 proteins, the shards' split, {out}/" in caplog.text
    assert "split_fractions" not in caplog.text
