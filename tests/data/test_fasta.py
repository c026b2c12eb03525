from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re

import numpy as np
import pytest

from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.fasta import FastaReader, detect_compression, read_fasta
from protein_performer.data.sources import load_fasta_source
from protein_performer.data.splits import SplitAssigner
from protein_performer.errors import DataError

TEXT = ">sp|P1|A_HUMAN first OS=Homo sapiens OX=9606\nMKV\nLLA\n>UniRef50_Q2 second n=3 Tax=x TaxID=5 RepID=Q2\nACDEF*\n>plain third\nwy\n"


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("name", "compress", "kind"),
    [
        ("a.fa", lambda b: b, "plain"),
        ("a.fa", gzip.compress, "gzip"),  # gzip without .gz extension: detected by magic
        ("a.fa.gz", lambda b: b, "plain"),  # .gz name but plain content
        ("a.bz2", bz2.compress, "bzip2"),
        ("a.xz", lzma.compress, "xz"),
    ],
)
def test_compression_by_magic_bytes(tmp_path, name, compress, kind):
    p = _write(tmp_path / name, compress(TEXT.encode()))
    assert detect_compression(p) == kind
    recs = list(read_fasta(p))
    assert [r.id for r in recs] == ["sp|P1|A_HUMAN", "UniRef50_Q2", "plain"]
    assert [r.sequence for r in recs] == ["MKVLLA", "ACDEF*", "wy"]
    assert recs[0].header.organism == "Homo sapiens"
    assert recs[1].header.members == 3


@pytest.mark.parametrize("compress", [lambda b: b, gzip.compress])
def test_a_utf8_byte_order_mark_is_read_as_text_start(tmp_path, compress):
    # Windows editors save UTF-8 with a BOM; it is not part of the first header
    p = _write(tmp_path / "bom.fa", compress(b"\xef\xbb\xbf" + TEXT.encode()))
    recs = list(read_fasta(p))
    assert [r.id for r in recs] == ["sp|P1|A_HUMAN", "UniRef50_Q2", "plain"]
    assert recs[0].sequence == "MKVLLA"


def test_sha256_and_counts(tmp_path):
    import hashlib

    data = gzip.compress(TEXT.encode())
    p = _write(tmp_path / "x", data)
    reader = FastaReader(p)
    assert len(list(reader)) == 3
    assert reader.sha256 == hashlib.sha256(data).hexdigest()
    assert reader.records_read == 3


def _err(path) -> str:
    with pytest.raises(DataError) as ei:
        list(read_fasta(path))
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(str(path))
    return msg


def test_missing_path(tmp_path):
    assert _err(tmp_path / "nope.fa").endswith("no such file")


def test_directory(tmp_path):
    assert "is a directory" in _err(tmp_path)


def test_empty_file(tmp_path):
    assert _err(_write(tmp_path / "e.fa", b"")).endswith("empty file")


def test_empty_gzip(tmp_path):
    assert "no records" in _err(_write(tmp_path / "e.fa.gz", gzip.compress(b"")))


def test_no_header(tmp_path):
    msg = _err(_write(tmp_path / "s.fa", b"MKVLLA\nACDEF\n"))
    assert "line 1 does not start with '>'" in msg


def test_text_before_first_header_is_an_error_not_dropped(tmp_path):
    msg = _err(_write(tmp_path / "s.fa", b"\nMKV\n>a\nMKV\n"))
    assert "line 2 does not start with '>'" in msg


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"@read1\nACGT\n+\nIIII\n", "it looks like FASTQ"),
        (b"LOCUS       AB000001   120 aa\n", "it looks like GenBank"),
        (b"ID   BPT1_BOVIN   Reviewed;   100 AA.\n", "UniProt/EMBL flat file"),
        (b"# STOCKHOLM 1.0\n", "it looks like an alignment"),
        (b"MKVLLA\n", "or text before the first header"),
    ],
)
def test_other_formats_are_named(tmp_path, content, says):
    assert says in _err(_write(tmp_path / "x.fa", content))


def test_tar_and_double_gzip_are_named(tmp_path):
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b">a\nMKV\n"
        info = tarfile.TarInfo("a.fa")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert "it looks like a tar archive" in _err(_write(tmp_path / "x.tar", buf.getvalue()))
    twice = gzip.compress(gzip.compress(b">a\nMKV\n"))
    assert _err(_write(tmp_path / "x.fa.gz", twice)).endswith(
        "gzip inside gzip: decompress it once more"
    )


def test_header_without_sequence(tmp_path):
    msg = _err(_write(tmp_path / "h.fa", b">a\nMKV\n>b desc\n>c\nMK\n"))
    assert msg.endswith("record 2 (b): header has no sequence")


def test_last_header_without_sequence(tmp_path):
    assert "record 2 (b): header has no sequence" in _err(_write(tmp_path / "h.fa", b">a\nM\n>b\n"))


def test_empty_header(tmp_path):
    assert "record 2: empty header" in _err(_write(tmp_path / "h.fa", b">a\nM\n>\nMK\n"))


def test_non_utf8(tmp_path):
    msg = _err(_write(tmp_path / "b.fa", b">a\nMKV\n>b\nMK\xff\xfeV\n"))
    assert "not UTF-8" in msg and "0xff" in msg


def test_binary_file(tmp_path):
    assert "not UTF-8" in _err(_write(tmp_path / "b.bin", b"\x00\x01\x02\xff" * 50))


def test_truncated_gzip(tmp_path):
    body = "".join(f">r{i}\n{'MKVLA' * 40}\n" for i in range(2000)).encode()
    data = gzip.compress(body)
    msg = _err(_write(tmp_path / "t.fa.gz", data[: len(data) // 2]))
    assert "truncated gzip" in msg
    assert "record " in msg  # tells how far it got


def test_stream_errors_never_pair_a_record_number_with_another_records_id(tmp_path):
    # text is decoded ahead of parsing: the bad byte (in record 2 here) is at or after the
    # record named, and the id given is the last one read whole
    msg = _err(_write(tmp_path / "l.fa", b">first\nMKTAYIAKQR\n>second caf\xe9\nMKV\n"))
    assert "not UTF-8 text (byte 0xe9)" in msg and "at or after record 1" in msg
    body = "".join(f">r{i}\n{'MKVLA' * 40}\n" for i in range(2000)).encode()
    data = gzip.compress(body)
    msg = _err(_write(tmp_path / "t.fa.gz", data[:-4]))
    n, last = re.search(r"at or after record ([\d,]+), after r(\d+)", msg).groups()
    assert int(n.replace(",", "")) == int(last) + 2  # record N+1 follows r(N-1), 0-based ids


def test_corrupt_gzip(tmp_path):
    data = bytearray(gzip.compress(b">a\nMKV\n" * 1000))
    data[20:40] = b"\x00" * 20
    assert "gzip" in _err(_write(tmp_path / "c.gz", bytes(data)))


def test_unsupported_compression(tmp_path):
    assert "zstd-compressed" in _err(_write(tmp_path / "z.fa.zst", b"(\xb5/\xfd" + b"\0" * 20))


def test_load_source_policies(tmp_path):
    p = _write(tmp_path / "p.fa", b">a\nMKV\n>b\nMK-V\n>c\nAC1\n>d\nWY\n")
    with pytest.raises(DataError, match=r"record 2 \(b\): invalid residue '-' at position 3"):
        load_fasta_source(p)
    s = load_fasta_source(p, policy="skip")
    assert [s.record_id(i) for i in range(len(s))] == ["a", "d"]
    r = load_fasta_source(p, policy="replace")
    a = default_alphabet()
    assert [a.decode(r[i]) for i in range(len(r))] == ["MKV", "MKXV", "ACX", "WY"]
    # what the policy did is kept with the source and said in words (reported to users)
    assert s.encode_counts.changes() == (
        "2 of 4 records skipped (invalid characters: '-', '1'); "
        "skipped: b (p.fa:record 2), c (p.fa:record 3)"
    )
    assert r.encode_counts.changes() == (
        "2 records had 2 residues replaced by X (invalid characters: '-', '1')"
    )
    assert load_fasta_source(p, max_records=1).encode_counts.changes() is None


def test_load_source_split_partitions_records(tmp_path):
    body = "".join(f">sp|P{i:05d}|X_Y n\n{'ACDEFGHIK'[i % 9] * (5 + i % 7)}\n" for i in range(300))
    p = _write(tmp_path / "s.fa", body.encode())
    full = load_fasta_source(p)
    parts = {
        s: load_fasta_source(p, split=s, fractions=(0.6, 0.2, 0.2), seed=3)
        for s in ("train", "val", "test")
    }
    ids = [set(parts[s].ids) for s in parts]
    assert sum(len(x) for x in ids) == len(full) == 300
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert 130 < len(ids[0]) < 230  # ~60%
    assign = SplitAssigner((0.6, 0.2, 0.2), seed=3)  # keyed by accession, file order kept
    assert parts["val"].ids == [i for i in full.ids if assign(i.split("|")[1]) == "val"]
    other = load_fasta_source(p, split="val", fractions=(0.6, 0.2, 0.2), seed=4)
    assert other.ids != parts["val"].ids
    assert np.array_equal(load_fasta_source(p, max_records=10).lengths, full.lengths[:10])


def test_max_records_counts_skipped_records(tmp_path):
    p = _write(tmp_path / "m.fa", b">a\nMKV\n>b\nM-K\n>c\nWY\n>d\nAC\n")
    assert load_fasta_source(p, policy="skip", max_records=2).ids == ["a"]
    assert load_fasta_source(p, policy="skip", max_records=3).ids == ["a", "c"]
    # the limit stops reading at once, also when the records after it would be skipped
    q = _write(tmp_path / "q.fa", b">a\nM-V\n>b\nM-K\n>c\nWY\n")
    first = load_fasta_source(q, policy="skip", max_records=1)
    assert first.ids == [] and first.encode_counts.records_kept == 0
    assert first.encode_counts.changes() == (
        "1 of 1 records skipped (invalid characters: '-'); skipped: a (q.fa:record 1)"
    )


def test_skipped_records_are_named_the_first_few(tmp_path):
    body = b"".join(b">r%d\n%s\n" % (i, b"M1" if i % 2 else b"MK") for i in range(10))
    p = _write(tmp_path / "k.fa", body + b">e\n*\n")
    counts = load_fasta_source(p, policy="skip").encode_counts
    assert counts.skipped_examples == [
        "r1 (k.fa:record 2)",
        "r3 (k.fa:record 4)",
        "r5 (k.fa:record 6)",
    ]
    assert counts.changes().endswith(
        "; first skipped: r1 (k.fa:record 2), r3 (k.fa:record 4), r5 (k.fa:record 6)"
    )
    assert counts.to_dict()["skipped_examples"] == counts.skipped_examples


def test_content_errors_in_a_damaged_gzip_file_name_the_damage(tmp_path):
    """Damage inside a gzip stream can decompress to garbage that looks like bad residues; the
    checksum at the end tells the two apart, so the error says which one it is."""
    body = "".join(f">r{i}\n{'ACDEFGHIKLMNPQRSTVWY' * 3}\n" for i in range(50))
    body += ">bad\nACD=EF\n" + "".join(f">s{i}\nMKV\n" for i in range(50))
    data = bytearray(gzip.compress(body.encode(), mtime=0))
    intact = _write(tmp_path / "intact.fa.gz", bytes(data))
    with pytest.raises(DataError, match=r"record 51 \(bad\): invalid residue '='") as ei:
        load_fasta_source(intact)
    assert "corrupt" not in str(ei.value)
    data[-8] ^= 0xFF  # the CRC-32 of the uncompressed data
    damaged = _write(tmp_path / "damaged.fa.gz", bytes(data))
    with pytest.raises(DataError) as ei:
        load_fasta_source(damaged)
    message = str(ei.value)
    assert message.startswith(f"{damaged}: record 51 (bad): corrupt gzip file (")
    assert "which explains: invalid residue '='" in message and "\n" not in message


def test_the_first_records_of_a_source_keep_what_reading_it_changed(tmp_path):
    from protein_performer.data.datamodule import _head

    p = _write(tmp_path / "h.fa", b">a\nM-V\n>b\nMKV\n>c\nWY\n>d\nAC\n")
    source = load_fasta_source(p, policy="skip")
    head = _head(source, 2)
    assert len(head) == 2 and head.encode_counts is source.encode_counts


def test_a_record_left_empty_by_gap_removal_is_named_for_it_and_skippable(tmp_path):
    from protein_performer.data.encoding import EncodeCounts, iter_encoded
    from protein_performer.errors import DataError

    path = tmp_path / "aln.fa"
    path.write_text(">gaps\n--------\n>stop\n*\n>two\nMK-V\n")
    alphabet = default_alphabet()
    with pytest.raises(
        DataError, match=r"record 1 \(gaps\): sequence is empty after removing gaps \(invalid="
    ):
        list(iter_encoded(FastaReader(path), alphabet, "error", EncodeCounts(), strip_gaps=True))
    # what was removed, and only that: the stop alone, both
    for body, said in (("*", "the stop '\\*'"), ("-.-*", "gaps and the stop '\\*'")):
        (tmp_path / "one.fa").write_text(f">x\n{body}\n")
        with pytest.raises(DataError, match=rf"record 1 \(x\): sequence is empty after removing "
                           rf"{said} \("):  # fmt: skip
            list(iter_encoded(FastaReader(tmp_path / "one.fa"), alphabet, "error", EncodeCounts(),
                              strip_gaps=True))  # fmt: skip
    counts = EncodeCounts()
    kept = list(iter_encoded(FastaReader(path), alphabet, "skip", counts, strip_gaps=True))
    assert [rec.id for rec, _ in kept] == ["two"]
    assert counts.skipped_empty == 2 and counts.records_kept == 1
    assert counts.changes() == (
        "2 records with no residues skipped; skipped: gaps (aln.fa:record 1), "
        "stop (aln.fa:record 2)"
    )


def test_comment_lines_of_the_old_fasta_format_are_not_residues(tmp_path):
    path = tmp_path / "pearson.fa"
    path.write_text(";file comment\n>a desc\nMKVLAAGIV\n;comment line\nKK\n>b\nMKV\n")
    reader = FastaReader(path)
    assert [(r.id, r.sequence) for r in reader] == [("a", "MKVLAAGIVKK"), ("b", "MKV")]
    assert reader.comment_lines == 2
    # and said wherever records are read (train, evaluate, preprocess, analysis)
    from protein_performer.data.encoding import EncodeCounts, iter_encoded

    counts = EncodeCounts()
    kept = list(iter_encoded(FastaReader(path), default_alphabet(), "error", counts))
    assert len(kept) == 2 and counts.changes() == "2 ';' comment lines skipped"
    # the project's own writer never wraps a ';' to the start of a line
    from protein_performer.data.fasta_writer import AtomicFastaWriter

    with pytest.raises(ValueError, match="';'"), AtomicFastaWriter(tmp_path / "w.fa") as w:
        w.write("a", "M" * 60 + ";" + "K" * 10)
    assert not (tmp_path / "w.fa").exists()


def test_a_pipe_is_refused_as_one_not_as_an_empty_file(tmp_path):
    """Inputs are read more than once: a pipe (``/dev/stdin``, ``<(zcat x.gz)``) is refused
    for that reason (it was "empty file", or "a directory?"), and nothing is read from it."""
    from protein_performer.data.fasta import check_readable_file

    fifo = tmp_path / "stream"
    os.mkfifo(fifo)
    for call in (lambda: FastaReader(fifo), lambda: check_readable_file(fifo)):
        with pytest.raises(
            DataError, match=r"a pipe or other stream, not a file: .* write it to a file"
        ):
            call()
    with pytest.raises(DataError, match="'-' for standard input is not read"):
        check_readable_file("-")


def test_a_link_that_leads_nowhere_is_one_line(tmp_path):
    """A loop of symbolic links raised RuntimeError (a traceback) in the duplicate check."""
    from protein_performer.data.fasta import check_distinct_inputs, check_readable_file

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "missing.fa")
    for link in ("a", "gone"):
        path = str(tmp_path / link)
        check_distinct_inputs({"data.files": [path]})  # no traceback: the next check says it
        with pytest.raises(DataError, match=r"no such file \(a symbolic link that leads nowhere"):
            check_readable_file(path)


@pytest.mark.parametrize("change", ["cut", "appended"])
def test_a_file_that_changes_while_it_is_read_is_refused(tmp_path, change):
    """A file cut (or still written) while preprocess read it: the run ended "fine" with a
    cut-short last protein, and a manifest pairing the first size with the other file's hash."""
    from protein_performer.data.fasta import FastaReader

    path = tmp_path / "x.fa"
    path.write_text("".join(f">p{i}\n{'ACDEFGHIKL' * 30}\n" for i in range(200)))
    reader = FastaReader(path)  # the size is taken here, as when a command opens it
    with open(path, "r+b") as fh:
        if change == "cut":
            fh.truncate(path.stat().st_size // 2)
        else:
            fh.seek(0, 2)
            fh.write(b">more\nACDE\n")
    with pytest.raises(DataError, match=r"x\.fa: the file changed while it was read"):
        list(reader)
    assert len(list(FastaReader(path))) > 100 * (change == "appended")  # read again: fine


def test_concatenated_bom_files_utf16_and_control_characters(tmp_path):
    from protein_performer.data.fasta import FastaReader

    one = "\ufeff>a first\nACDE\n>b\nFGHI\n"
    both = tmp_path / "both.fa"  # two Windows exports joined with cat: a BOM before each
    both.write_bytes((one + one.replace(">a", ">c").replace(">b", ">d")).encode("utf-8"))
    assert [r.id for r in FastaReader(both)] == ["a", "b", "c", "d"]
    for enc in ("utf-16-le", "utf-16-be"):  # no BOM: NUL bytes between the characters
        utf16 = tmp_path / "u16.fa"
        utf16.write_bytes(">a first\nACDE\n".encode(enc))
        with pytest.raises(DataError, match=r"u16\.fa: NUL bytes between the characters"):
            list(FastaReader(utf16))
    nul = tmp_path / "nul.fa"  # one NUL in a UTF-8 header: read, as any other header is
    nul.write_bytes(b">a\x00b desc\nACDE\n")
    assert [r.title for r in FastaReader(nul)] == ["a\x00b desc"]
    err = DataError("invalid residue", path="x.fa", record=1, record_id="a\x1b[31mRED\x00")
    assert str(err) == "x.fa: record 1 (a\\x1b[31mRED\\x00): invalid residue"


def test_bytes_after_a_compressed_stream_are_hashed_and_counted(tmp_path):
    """drain() read past the stream without counting or hashing: a wrong sha256, and (with
    the size check) a false "changed while it was read"."""
    import hashlib

    from protein_performer.data.fasta import FastaReader

    path = tmp_path / "x.fa.bz2"  # bz2 stops at data that is no stream: the rest is drained
    data = bz2.compress(b">a\nACDE\n") + b"not bzip2 " * (300 << 10)  # 3 MiB after it
    path.write_bytes(data)
    reader = FastaReader(path)
    assert [r.id for r in reader] == ["a"]
    assert reader.sha256 == hashlib.sha256(data).hexdigest()


def test_files_with_no_records_say_what_they_hold(tmp_path):
    for name, data, said in (
        ("blank.fasta", b"\n \n", "no records (file holds only blank lines)"),
        ("notes.fasta", b"; a comment\n\n", "no records (file holds only comment and blank lines)"),
        ("empty.fasta.gz", gzip.compress(b"\n"), "no records (file is empty after decompression)"),
    ):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError, match=re.escape(f"{name}: {said}")):
            list(read_fasta(tmp_path / name))
    (tmp_path / "x.fasta").write_text(">a\nMKV\n")
    reader = FastaReader(tmp_path / "x.fasta")
    assert [r.sequence for r in reader] == ["MKV"] and reader.comment_lines == 0


def test_a_checkpoint_or_a_zip_given_as_fasta_is_said(tmp_path):
    import zipfile

    for name, said in (
        ("model.ckpt", "a PyTorch checkpoint, not a FASTA file (checkpoint= and fasta= swapped?)"),
        ("seqs.zip", "zip-compressed files are not supported (use plain, gzip, bzip2 or xz"),
    ):
        with zipfile.ZipFile(tmp_path / name, "w") as z:
            z.writestr("data.pkl", b">a\nMKV\n")
        with pytest.raises(DataError, match=re.escape(f"{name}: {said}")):
            FastaReader(tmp_path / name)
