"""AtomicFastaWriter / write_fasta: exact layout, gzip by suffix, determinism, atomicity."""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
from collections.abc import Iterator

import pytest

from protein_performer.data.fasta_writer import AtomicFastaWriter, write_fasta


def test_plain_layout_is_exact(tmp_path):
    seq = "ACDEFGHIKL" * 13  # 130 residues -> 60 + 60 + 10
    out = tmp_path / "x.fasta"
    summary = write_fasta(
        out, [("id1", "some protein n=1", seq), ("id2", None, "MK"), ("id3", "", "W" * 60)]
    )
    expected = (
        f">id1 some protein n=1\n{seq[:60]}\n{seq[60:120]}\n{seq[120:]}\n"
        ">id2\nMK\n"
        f">id3\n{'W' * 60}\n"  # exact multiple of the width: no empty line
    )
    data = out.read_bytes()
    assert data.decode() == expected
    assert summary.records == 3
    assert summary.residues == 130 + 2 + 60
    assert summary.bytes == len(data)
    assert summary.sha256 == hashlib.sha256(data).hexdigest()
    assert summary.compressed is False
    assert summary.path == out


def test_custom_line_width_and_empty_sequence(tmp_path):
    out = tmp_path / "w.fa"
    write_fasta(out, [("a", None, "ABCDEFG"), ("b", "empty", "")], line_width=3)
    assert out.read_text() == ">a\nABC\nDEF\nG\n>b empty\n"


def test_gzip_chosen_by_suffix_and_overridable(tmp_path):
    records = [("r1", "d", "MKV" * 50)]
    gz = tmp_path / "a.fasta.gz"
    s = write_fasta(gz, records)
    raw = gz.read_bytes()
    assert raw[:2] == b"\x1f\x8b" and s.compressed
    assert gzip.decompress(raw).decode().startswith(">r1 d\nMKVMKV")
    assert s.sha256 == hashlib.sha256(raw).hexdigest()

    plain = tmp_path / "b.fasta.gz"
    write_fasta(plain, records, compress=False)
    assert plain.read_bytes() == gzip.decompress(raw)

    forced = tmp_path / "c.fasta"
    write_fasta(forced, records, compress=True)
    assert gzip.decompress(forced.read_bytes()) == gzip.decompress(raw)


def test_gzip_output_is_byte_reproducible(tmp_path):
    records = [(f"s{i}", f"protein {i}", "ACDEFGHIKLMNPQRSTVWY" * (i + 1)) for i in range(20)]
    a = write_fasta(tmp_path / "a.fa.gz", records)
    b = write_fasta(tmp_path / "sub_name_differs.fa.gz", records)
    assert a.sha256 == b.sha256
    header = (tmp_path / "a.fa.gz").read_bytes()[:10]
    assert header[4:8] == b"\x00\x00\x00\x00"  # mtime = 0
    assert header[3] & 0x08 == 0  # FNAME flag unset: no file name stored


def test_failure_in_iterator_leaves_nothing_and_keeps_previous_file(tmp_path):
    out = tmp_path / "keep.fasta.gz"
    write_fasta(out, [("old", None, "MK")])
    before = out.read_bytes()

    def records() -> Iterator[tuple[str, str | None, str]]:
        yield ("new1", None, "AAAA")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_fasta(out, records())
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.fasta.gz"]


def test_failure_on_fresh_path_creates_no_file(tmp_path):
    out = tmp_path / "new.fasta"
    with pytest.raises(ValueError, match="whitespace"):
        write_fasta(out, [("ok", None, "MK"), ("bad id", None, "MK")])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("record", "match"),
    [
        (("", None, "MK"), "non-empty"),
        (("a\tb", None, "MK"), "whitespace"),
        (("a", "line\nbreak", "MK"), "line break"),
        (("a", None, "MK\nV"), "sequence"),
        (("a", None, "MK>V"), "sequence"),
    ],
)
def test_invalid_records_are_rejected(tmp_path, record, match):
    with pytest.raises(ValueError, match=match):
        write_fasta(tmp_path / "x.fa", [record])
    assert list(tmp_path.iterdir()) == []


def test_empty_record_stream_gives_valid_empty_files(tmp_path):
    plain = write_fasta(tmp_path / "e.fa", [])
    gz = write_fasta(tmp_path / "e.fa.gz", [])
    assert (tmp_path / "e.fa").read_bytes() == b""
    assert gzip.decompress((tmp_path / "e.fa.gz").read_bytes()) == b""
    assert plain.records == gz.records == 0


def test_final_file_mode_follows_umask_not_tempfile(tmp_path):
    old = os.umask(0o022)
    try:
        write_fasta(tmp_path / "m.fa", [("a", None, "M")])
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.fa").stat().st_mode) == 0o644


def test_missing_directory_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_fasta(tmp_path / "nope" / "x.fa", [("a", None, "M")])


def test_writer_context_manager_streams_records(tmp_path):
    out = tmp_path / "cm.fa"
    with AtomicFastaWriter(out, line_width=4) as w:
        w.write("a", "MKVLA", "first")
        assert not out.exists()  # nothing visible before commit
        w.write("b", "QQ")
    assert out.read_text() == ">a first\nMKVL\nA\n>b\nQQ\n"
    assert w.summary is not None and w.summary.records == 2 and w.summary.residues == 7
    with pytest.raises(RuntimeError, match="outside"):
        w.write("c", "M")
