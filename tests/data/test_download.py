"""download(): against a local ThreadingHTTPServer on 127.0.0.1 (no other network)."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from protein_performer.data.download import UNIREF50_URL, download
from protein_performer.errors import ConfigError, DataError


def make_fasta(n: int, start: int = 0) -> str:
    lines = []
    for i in range(start, start + n):
        seq = ("MKVLAACDEFGHIKLMNPQRSTVWY" * (1 + i % 7))[: 30 + 13 * i]
        lines.append(f">UniRef50_T{i:04d} Test protein {i} n=1 Tax=Test TaxID=1 RepID=T{i:04d}")
        lines.extend(seq[j : j + 70] for j in range(0, len(seq), 70))  # 70 columns on purpose
    return "\n".join(lines) + "\n"


def parse(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for block in text.split(">")[1:]:
        header, _, seq = block.partition("\n")
        out.append((header, seq.replace("\n", "")))
    return out


@dataclass
class Route:
    body: bytes
    etag: str = '"v1"'
    ranges: bool = True
    truncate_next: int | None = None  # send only this many bytes of the next response
    status: int = 200


@dataclass
class Server:
    base: str
    routes: dict[str, Route]
    requests: list[dict[str, str]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base + path


class Handler(BaseHTTPRequestHandler):
    server_state: Server

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def do_GET(self):
        state = self.server_state
        state.requests.append({"path": self.path, **dict(self.headers.items())})
        route = state.routes.get(self.path)
        if route is None or route.status != 200:
            self.send_error(404 if route is None else route.status)
            return
        body, start = route.body, 0
        rng = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if rng and route.ranges and (if_range is None or if_range == route.etag):
            start = int(rng.removeprefix("bytes=").rstrip("-"))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        payload = body[start:]
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("ETag", route.etag)
        if route.ranges:
            self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if route.truncate_next is not None:
            payload, route.truncate_next = payload[: route.truncate_next], None
        self.wfile.write(payload)


@pytest.fixture
def server(monkeypatch) -> Iterator[Server]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    state = Server(base="", routes={})
    handler = type("BoundHandler", (Handler,), {"server_state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def gz_fasta() -> tuple[str, bytes]:
    text = make_fasta(60)
    return text, gzip.compress(text.encode(), mtime=0)


def files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


# ---------------------------------------------------------------- full downloads


def test_full_download_is_byte_identical(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    server.routes["/u.fasta.gz"] = Route(blob)
    out = tmp_path / "sub" / "u.fasta.gz"  # parent directory is created
    r = download(server.url("/u.fasta.gz"), out, progress=False)
    assert out.read_bytes() == blob
    assert r["records"] == 60 and r["bytes"] == len(blob) and r["resumed"] is False
    assert r["sha256"] == hashlib.sha256(blob).hexdigest() and r["mode"] == "full"
    assert files(out.parent) == ["u.fasta.gz"]  # no .part / .part.json left
    assert "Range" not in server.requests[0]


def test_interrupted_download_resumes_with_range(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    half = len(blob) // 2
    server.routes["/u.gz"] = Route(blob, truncate_next=half)
    out = tmp_path / "u.gz"
    with pytest.raises(DataError, match=f"truncated download: got {half} of {len(blob)} bytes"):
        download(server.url("/u.gz"), out, progress=False)
    assert not out.exists()
    part = tmp_path / "u.gz.part"
    assert part.read_bytes() == blob[:half]
    assert json.loads((tmp_path / "u.gz.part.json").read_text())["etag"] == '"v1"'

    r = download(server.url("/u.gz"), out, progress=False)
    assert out.read_bytes() == blob and r["resumed"] is True and r["records"] == 60
    last = server.requests[-1]
    assert last["Range"] == f"bytes={half}-" and last["If-Range"] == '"v1"'
    assert files(tmp_path) == ["u.gz"]


def test_a_part_file_this_module_did_not_write_is_left_alone(server, gz_fasta, tmp_path):
    """OUT.part without OUT.part.json (or with a foreign one) is the user's: never resumed,
    replaced or deleted."""
    _, blob = gz_fasta
    server.routes["/u.gz"] = Route(blob)
    out = tmp_path / "u.gz"
    part = tmp_path / "u.gz.part"
    part.write_bytes(blob[:100])
    with pytest.raises(DataError, match=r"u\.gz\.part: exists without u\.gz\.part\.json"):
        download(server.url("/u.gz"), out, progress=False)
    assert part.read_bytes() == blob[:100] and not out.exists() and not server.requests
    meta = tmp_path / "u.gz.part.json"
    meta.write_text("my notes")
    with pytest.raises(DataError, match="not a partial download of protein-performer"):
        download(server.url("/u.gz"), out, progress=False)
    assert meta.read_text() == "my notes" and part.read_bytes() == blob[:100]


def test_server_without_range_support_restarts(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    server.routes["/u.gz"] = Route(blob, ranges=False)
    (tmp_path / "u.gz.part").write_bytes(b"garbage that must be discarded")
    # a partial download of this module (its metadata names the URL)
    (tmp_path / "u.gz.part.json").write_text(json.dumps({"url": server.url("/u.gz")}))
    r = download(server.url("/u.gz"), tmp_path / "u.gz", progress=False)
    assert (tmp_path / "u.gz").read_bytes() == blob and r["resumed"] is False
    assert server.requests[-1]["Range"] == f"bytes={len(b'garbage that must be discarded')}-"


def test_changed_file_on_server_is_not_spliced(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    server.routes["/u.gz"] = Route(blob, etag='"v2"')
    (tmp_path / "u.gz.part").write_bytes(b"\x1f\x8b old version prefix")
    meta = {"url": server.url("/u.gz"), "etag": '"v1"', "last_modified": None}
    (tmp_path / "u.gz.part.json").write_text(json.dumps(meta))
    r = download(server.url("/u.gz"), tmp_path / "u.gz", progress=False)
    assert (tmp_path / "u.gz").read_bytes() == blob and r["resumed"] is False
    assert server.requests[-1]["If-Range"] == '"v1"'


def test_part_of_another_url_is_kept_unless_told(server, gz_fasta, tmp_path):
    """A partial download from another URL (a mirror switched after a dropped connection) may
    be hours of work: refused, kept; resume=False starts over."""
    _, blob = gz_fasta
    server.routes["/u.gz"] = Route(blob)
    (tmp_path / "u.gz.part").write_bytes(blob[:50])
    meta = {"url": server.url("/other.gz"), "etag": '"v1"'}
    (tmp_path / "u.gz.part.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"holds 50 bytes of a download from .*/other\.gz"):
        download(server.url("/u.gz"), tmp_path / "u.gz", progress=False)
    assert (tmp_path / "u.gz.part").read_bytes() == blob[:50] and not server.requests
    r = download(server.url("/u.gz"), tmp_path / "u.gz", progress=False, resume=False)
    assert (tmp_path / "u.gz").read_bytes() == blob and r["resumed"] is False
    assert "Range" not in server.requests[-1]


def test_complete_part_is_finalised_after_416(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    server.routes["/u.gz"] = Route(blob)
    (tmp_path / "u.gz.part").write_bytes(blob)
    (tmp_path / "u.gz.part.json").write_text(json.dumps({"url": server.url("/u.gz")}))
    r = download(server.url("/u.gz"), tmp_path / "u.gz", progress=False)
    assert (tmp_path / "u.gz").read_bytes() == blob and r["resumed"] is True
    assert r["records"] == 60 and files(tmp_path) == ["u.gz"]


def test_resume_false_ignores_part(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    server.routes["/u.gz"] = Route(blob)
    (tmp_path / "u.gz.part").write_bytes(blob[:10])
    (tmp_path / "u.gz.part.json").write_text(json.dumps({"url": server.url("/u.gz")}))
    r = download(server.url("/u.gz"), tmp_path / "u.gz", progress=False, resume=False)
    assert (tmp_path / "u.gz").read_bytes() == blob and r["resumed"] is False
    assert "Range" not in server.requests[-1]


def test_truncated_gzip_with_full_length_is_rejected_and_part_deleted(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    server.routes["/bad.gz"] = Route(blob[:-20])  # server's own file is cut short
    with pytest.raises(DataError, match=r"truncated gzip stream in .*bad\.gz\.part \(removed\)$"):
        download(server.url("/bad.gz"), tmp_path / "bad.gz", progress=False)
    assert files(tmp_path) == []


def test_corrupt_gzip_is_rejected(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    corrupt = blob[:40] + bytes(b ^ 0xFF for b in blob[40:80]) + blob[80:]
    server.routes["/bad.gz"] = Route(corrupt)
    with pytest.raises(DataError, match="corrupt gzip data"):
        download(server.url("/bad.gz"), tmp_path / "bad.gz", progress=False)
    assert files(tmp_path) == []


def test_verify_false_skips_gzip_scan(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    server.routes["/bad.gz"] = Route(blob[:-20])
    r = download(server.url("/bad.gz"), tmp_path / "bad.gz", progress=False, verify=False)
    assert r["records"] is None and (tmp_path / "bad.gz").read_bytes() == blob[:-20]


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        (b"<!DOCTYPE html>\n<html>Sign in</html>", "starts with '<!DOCTYPE html>' (an HTML page"),
        (b"<html>\r\n<body>502</body>\r\n", "starts with '<html>' (an HTML page"),  # CRLF: text
        (b"id\tscore\r\nP1\t0.5\r\n", r"starts with 'id\tscore'"),
        (b"", "the download is empty"),
        (gzip.compress(b"\n\n"), "the decompressed (gzip) download is empty"),
        (
            gzip.compress(b"ID   P12345 Reviewed;\n"),
            "decompressed (gzip) download starts with 'ID   P1",
        ),
    ],
)
def test_a_body_that_is_not_fasta_is_refused(server, tmp_path, body, expect):
    """An error or login page served with 200 OK is not saved as the user's FASTA."""
    server.routes["/u.fasta.gz"] = Route(body)
    with pytest.raises(DataError, match=re.escape(expect)) as info:
        download(server.url("/u.fasta.gz"), tmp_path / "u.fasta.gz", progress=False)
    assert str(info.value).startswith(server.url("/u.fasta.gz") + ": not FASTA: ")
    assert files(tmp_path) == []


def test_a_fasta_after_a_byte_order_mark_and_blank_lines_is_fasta(server, tmp_path):
    server.routes["/u.fa"] = Route(b"\xef\xbb\xbf\n\n" + make_fasta(3).encode())
    assert download(server.url("/u.fa"), tmp_path / "u.fa", progress=False)["records"] == 3
    server.routes["/blank.fa"] = Route(b"\n" * 5000 + make_fasta(2).encode())  # > any head
    assert download(server.url("/blank.fa"), tmp_path / "b.fa", progress=False)["records"] == 2


def test_comment_lines_of_the_original_fasta_format_are_read_as_the_reader_reads_them(
    server, tmp_path
):
    body = (
        b";Pearson file comment\n>a x\n"
        + b"M" * 57
        + b"\n;a comment\n"
        + b"K" * 70
        + b"\n>b\nMKV\n"
    )
    server.routes["/c.fa"] = Route(body)
    assert download(server.url("/c.fa"), tmp_path / "c.fa", progress=False)["records"] == 2
    download(server.url("/c.fa"), tmp_path / "first.fa", max_records=1, progress=False)
    assert parse((tmp_path / "first.fa").read_text()) == [("a x", "M" * 57 + "K" * 70)]


@pytest.mark.parametrize("kind", ["bz2", "xz"])
def test_bzip2_and_xz_downloads_are_checked_and_counted(server, tmp_path, kind):
    """The FASTA reader takes them, so the download does: decompressed to the end (several
    streams too), records counted, a truncated stream refused."""
    import bz2
    import lzma

    pack = bz2.compress if kind == "bz2" else lzma.compress
    blob = pack(make_fasta(4).encode()) + pack(make_fasta(3, 4).encode())
    server.routes[f"/u.{kind}"] = Route(blob)
    out = tmp_path / f"u.fa.{kind}"
    r = download(server.url(f"/u.{kind}"), out, progress=False)
    assert r["records"] == 7 and out.read_bytes() == blob
    server.routes[f"/cut.{kind}"] = Route(blob[:-30])
    with pytest.raises(DataError, match=r"truncated (bzip2|xz) stream"):
        download(server.url(f"/cut.{kind}"), tmp_path / f"c.{kind}", progress=False)
    assert (
        r["records"]
        == download(
            server.url(f"/u.{kind}"), tmp_path / f"m.fa.{kind}", max_records=10, progress=False
        )["records"]
    )


def test_binary_data_of_an_unknown_format_is_kept(server, tmp_path):
    other = b"\x00\x01\x02\x03" + bytes(range(200))
    server.routes["/u.bin"] = Route(other)
    with pytest.raises(DataError, match=r"binary data of an unknown format \(bytes 00 01 02 03"):
        download(server.url("/u.bin"), tmp_path / "u.fa.bin", progress=False)
    assert (tmp_path / "u.fa.bin.part").read_bytes() == other  # the user's to look at
    zstd = b"\x28\xb5\x2f\xfd" + bytes(range(200))  # a format known by name: named
    server.routes["/u.zst"] = Route(zstd)
    with pytest.raises(DataError, match=r"is zstd data, which this reader does not decompress"):
        download(server.url("/u.zst"), tmp_path / "u.fa.zst", progress=False)
    assert (tmp_path / "u.fa.zst.part").read_bytes() == zstd


def test_multi_member_gzip_and_plain_files_are_counted(server, tmp_path):
    members = gzip.compress(make_fasta(5).encode()) + gzip.compress(make_fasta(7, 5).encode())
    server.routes["/multi.gz"] = Route(members)
    server.routes["/plain.fa"] = Route(make_fasta(9).encode())
    assert download(server.url("/multi.gz"), tmp_path / "m.gz", progress=False)["records"] == 12
    assert download(server.url("/plain.fa"), tmp_path / "p.fa", progress=False)["records"] == 9


# ---------------------------------------------------------------- max_records


@pytest.mark.parametrize("n", [1, 7, 59, 60])
def test_max_records_writes_exactly_n_complete_records(server, gz_fasta, tmp_path, n):
    text, blob = gz_fasta
    server.routes["/u.gz"] = Route(blob)
    out = tmp_path / "first.fasta.gz"
    r = download(server.url("/u.gz"), out, max_records=n, progress=False)
    got = parse(gzip.decompress(out.read_bytes()).decode())
    assert got == parse(text)[:n]
    assert r["records"] == n and r["mode"] == "max_records"
    assert r["residues"] == sum(len(s) for _, s in got)
    assert r["source_exhausted"] is (n == 60)
    assert r["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert files(tmp_path) == ["first.fasta.gz"]


def test_max_records_beyond_source_writes_all(server, gz_fasta, tmp_path):
    text, blob = gz_fasta
    server.routes["/u.gz"] = Route(blob)
    r = download(server.url("/u.gz"), tmp_path / "all.fa", max_records=1000, progress=False)
    assert r["records"] == 60 and r["source_exhausted"] is True
    written = (tmp_path / "all.fa").read_text()  # plain: no .gz suffix
    assert parse(written) == parse(text)
    assert max(len(line) for line in written.splitlines() if line[0] != ">") == 60


def test_max_records_from_plain_and_multi_member_sources(server, tmp_path):
    server.routes["/plain.fa"] = Route(make_fasta(10).encode())
    multi = gzip.compress(make_fasta(3).encode()) + gzip.compress(make_fasta(4, 3).encode())
    server.routes["/multi.gz"] = Route(multi)
    r = download(server.url("/plain.fa"), tmp_path / "a.fa", max_records=4, progress=False)
    assert parse((tmp_path / "a.fa").read_text()) == parse(make_fasta(10))[:4]
    r = download(server.url("/multi.gz"), tmp_path / "b.fa", max_records=6, progress=False)
    assert r["records"] == 6
    assert parse((tmp_path / "b.fa").read_text()) == parse(make_fasta(7))[:6]


def test_max_records_on_truncated_gzip_fails_without_output(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    server.routes["/cut.gz"] = Route(blob[: len(blob) // 2])
    with pytest.raises(DataError, match="truncated gzip stream"):
        download(server.url("/cut.gz"), tmp_path / "x.fa.gz", max_records=1000, progress=False)
    assert files(tmp_path) == []


def test_max_records_on_short_body_fails_without_output(server, gz_fasta, tmp_path):
    _, blob = gz_fasta
    server.routes["/u.gz"] = Route(blob, truncate_next=len(blob) // 2)
    with pytest.raises(DataError, match="truncated download"):
        download(server.url("/u.gz"), tmp_path / "x.fa", max_records=1000, progress=False)
    assert files(tmp_path) == []


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"<html>not fasta</html>\n", "not FASTA: line 1"),
        (b"", "no FASTA records"),
        (b">ok\nMK\n>\nMK\n", r"record 2: empty FASTA header"),
        (b">ok\nMK\xff\n", "line 2 is not valid UTF-8"),
    ],
)
def test_max_records_rejects_non_fasta(server, tmp_path, body, match):
    server.routes["/x"] = Route(body)
    with pytest.raises(DataError, match=match):
        download(server.url("/x"), tmp_path / "x.fa", max_records=5, progress=False)
    assert files(tmp_path) == []


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("max_records", [None, 3])
def test_http_404_names_url_and_status(server, tmp_path, max_records):
    url = server.url("/missing.fasta.gz")
    with pytest.raises(DataError) as info:
        download(url, tmp_path / "m.gz", max_records=max_records, progress=False)
    message = str(info.value)
    assert message == f"{url}: HTTP 404 Not Found"
    assert files(tmp_path) == []


def test_http_500_is_a_data_error(server, tmp_path):
    server.routes["/boom"] = Route(b"", status=500)
    with pytest.raises(DataError, match="HTTP 500"):
        download(server.url("/boom"), tmp_path / "b.gz", progress=False)
    assert files(tmp_path) == []


@pytest.mark.parametrize("max_records", [None, 3])
def test_connection_refused_is_a_data_error(tmp_path, monkeypatch, max_records):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as s:  # grab a free port, then close it so nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/u.gz"
    with pytest.raises(DataError, match=r"cannot connect: .*(refused|Errno)") as info:
        download(url, tmp_path / "u.gz", max_records=max_records, progress=False, timeout=5)
    assert str(info.value).startswith(url + ": ") and "\n" not in str(info.value)
    assert files(tmp_path) == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(url="ftp://example.org/x.gz"), "only http"),
        (dict(max_records=0), "max_records"),
        (dict(max_records=True), "max_records"),
        (dict(timeout=0), "timeout"),
    ],
)
def test_invalid_arguments_are_config_errors(tmp_path, kwargs, match):
    kwargs = {"url": "http://127.0.0.1:9/x", **kwargs}
    with pytest.raises(ConfigError, match=match):
        download(kwargs.pop("url"), tmp_path / "x", progress=False, **kwargs)
    assert files(tmp_path) == []


@pytest.mark.parametrize("level", ["uniref50", "uniref90", "uniref100"])
def test_cli_requests_the_uniprot_url_of_each_release(tmp_path, monkeypatch, level):
    import protein_performer.data.download as download_module
    from protein_performer.cli.main import main

    urls: list[str] = []

    def fake_download(url, out, **kwargs):
        urls.append(url)
        return {"path": str(out)}

    monkeypatch.setattr(download_module, "download", fake_download)
    assert main(["data", "download", level, str(tmp_path / "u.fa.gz"), "--no-progress"]) == 0
    base = "https://ftp.uniprot.org/pub/databases/uniprot/uniref"
    assert urls == [f"{base}/{level}/{level}.fasta.gz"]
    if level == "uniref50":  # the library constant is the URL the CLI uses
        assert urls == [UNIREF50_URL]


# ---------------------------------------------------------------- through the CLI


def test_cli_download_max_records_and_error(server, gz_fasta, tmp_path, capsys):
    from protein_performer.cli.main import main

    server.routes["/uniref50.fasta.gz"] = Route(body=gz_fasta[1])
    out = tmp_path / "u.fa.gz"
    url = server.url("/uniref50.fasta.gz")
    code = main(
        [
            "data",
            "download",
            "uniref50",
            str(out),
            "--url",
            url,
            "--max-records",
            "7",
            "--no-progress",
            "--json",
        ]
    )
    assert code == 0
    assert len(parse(gzip.decompress(out.read_bytes()).decode())) == 7
    capsys.readouterr()
    # printed, one line in words: counts and digest of what was written
    import hashlib

    plain = tmp_path / "p.fa"
    args = ["data", "download", "uniref50", str(plain), "--url", url, "--no-progress"]
    assert main([*args, "--max-records", "3"]) == 0
    line = capsys.readouterr().out.strip()
    records = parse(plain.read_text())
    residues = sum(len(seq) for _, seq in records)
    assert line.startswith(f"downloaded {plain}: 3 records, {residues:,} residues, ")
    assert f"{plain.stat().st_size:,} bytes (the first records; the source has more)" in line
    assert line.endswith(f"from {url}; sha256 {hashlib.sha256(plain.read_bytes()).hexdigest()}")
    code = main(
        [
            "data",
            "download",
            "uniref50",
            str(tmp_path / "m.fa.gz"),
            "--url",
            server.url("/missing.gz"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "404" in err and err.count("\n") == 1
    assert files(tmp_path) == ["p.fa", "u.fa.gz"]


def test_cli_notes_a_name_that_does_not_say_the_compression(server, gz_fasta, tmp_path, capsys):
    from protein_performer.cli.main import main

    server.routes["/plain.fa"] = Route(make_fasta(3).encode())
    server.routes["/u.gz"] = Route(gz_fasta[1])
    args = ["data", "download", "uniref50"]
    assert main([*args, str(tmp_path / "a.fa.gz"), "--url", server.url("/plain.fa")]) == 0
    assert capsys.readouterr().err.endswith("a.fa.gz is not compressed but its name ends in .gz\n")
    assert main([*args, str(tmp_path / "b.fa"), "--url", server.url("/u.gz")]) == 0
    err = capsys.readouterr().err
    assert err.endswith("b.fa is gzip-compressed but its name says no compression\n")
    import bz2

    server.routes["/u.bz2"] = Route(bz2.compress(make_fasta(2).encode()))
    assert main([*args, str(tmp_path / "d.fa.gz"), "--url", server.url("/u.bz2")]) == 0
    err = capsys.readouterr().err
    assert err.endswith("d.fa.gz is bzip2-compressed but its name ends in .gz\n")
    assert main([*args, str(tmp_path / "e.fa.bz2"), "--url", server.url("/u.bz2")]) == 0
    assert "note:" not in capsys.readouterr().err
    assert main([*args, str(tmp_path / "c.fa.gz"), "--url", server.url("/u.gz")]) == 0
    assert "note:" not in capsys.readouterr().err
