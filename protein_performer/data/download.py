"""Stream a (compressed) FASTA file over HTTP(S) to disk: resumable full downloads or the first N records.

Full download (``max_records=None``)
    Bytes go to ``OUT.part``; the response's validators (ETag / Last-Modified) and the URL go to
    ``OUT.part.json``. A rerun with ``resume=True`` continues an existing ``.part`` with an HTTP
    ``Range`` request (plus ``If-Range`` when a validator was recorded, so a file that changed on
    the server is fetched from scratch instead of being spliced). A server answering ``200``
    instead of ``206`` restarts from byte 0. When all bytes have arrived the file is checked:
    the byte count must match ``Content-Length``, a gzip / bzip2 / xz file must decompress to
    the end of its last member (all members are read; records are counted on the way) and what
    it holds must start as FASTA (not an HTML error page). Only then is ``.part`` renamed to
    ``OUT``.
    A ``.part`` of another URL is refused (``resume=False`` starts over): it may be hours of
    a large download.

    After a failure ``OUT`` is never created or modified. A ``.part`` that is a valid prefix
    (interrupted transfer, timeout) is kept so that the next run resumes it; a ``.part`` whose
    content is wrong (complete length but a corrupt or truncated stream, or text that is not
    FASTA) is deleted; binary data of a format the check does not know is kept.

``max_records=N``
    The response is decompressed on the fly (gzip, bzip2 or xz, detected by their magic
    bytes, multi-member aware), parsed, and the first N complete records are written
    atomically to ``OUT`` (gzip when ``OUT`` ends with ``.gz``, plain otherwise) in 60-column FASTA; the transfer stops
    after the header of record N+1. Fewer than N records is not an error when the source ends
    cleanly (the result says ``records`` and ``source_exhausted``); a source that ends early
    (truncated gzip or short body) is.

Errors are one-line :class:`~protein_performer.errors.DataError` s naming the URL.
"""

from __future__ import annotations

import bz2
import contextlib
import hashlib
import http.client
import itertools
import json
import lzma
import os
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from protein_performer.data.fasta_writer import AtomicFastaWriter
from protein_performer.errors import ConfigError, DataError
from protein_performer.utils.outputs import make_parents, remove_empty
from protein_performer.version import __version__

__all__ = ["UNIREF50_URL", "download"]

UNIREF50_URL = "https://ftp.uniprot.org/pub/databases/uniprot/uniref/uniref50/uniref50.fasta.gz"

_CHUNK = 1 << 20
# Transport failures while reading a body: resets, timeouts, protocol errors.
_TRANSPORT_ERRORS = (OSError, http.client.HTTPException)


def _request(
    url: str, timeout: float, extra_headers: dict[str, str] | None = None, ok: tuple[int, ...] = ()
) -> Any:
    """Open ``url``; return the response (or the ``HTTPError`` for a status in ``ok``)."""
    headers = {
        "User-Agent": f"protein-performer/{__version__}",
        "Accept-Encoding": "identity",
        **(extra_headers or {}),
    }
    req = urllib.request.Request(url, headers=headers)
    try:
        return urllib.request.build_opener().open(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code in ok:
            return exc
        exc.close()
        raise DataError(f"HTTP {exc.code} {exc.reason}", path=url) from None
    except urllib.error.URLError as exc:
        raise DataError(
            f"cannot connect: {exc.reason} (no network? a proxy goes in https_proxy; --url "
            "takes a mirror)",
            path=url,
        ) from None
    except TimeoutError:
        raise DataError(f"no response within {timeout:g} s", path=url) from None
    except _TRANSPORT_ERRORS as exc:
        raise DataError(f"request failed: {exc}", path=url) from None


def _content_length(resp: Any) -> int | None:
    value = resp.headers.get("Content-Length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _content_range(resp: Any) -> tuple[int | None, int | None]:
    """``(start, total)`` from ``Content-Range: bytes START-END/TOTAL`` (or ``bytes */TOTAL``)."""
    value = (resp.headers.get("Content-Range") or "").strip()
    if not value.startswith("bytes "):
        return None, None
    span, _, total = value[len("bytes ") :].partition("/")
    start = span.partition("-")[0]
    return (
        int(start) if start.isdigit() else None,
        int(total) if total.isdigit() else None,
    )


class _Decompressor:
    """Incremental decompression of ``gzip``, ``bzip2`` or ``xz`` data over any number of
    concatenated members / streams (as the FASTA reader accepts them)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._d = self._new()

    def _new(self) -> Any:
        if self.kind == "gzip":
            return zlib.decompressobj(wbits=31)
        if self.kind == "bzip2":
            return bz2.BZ2Decompressor()
        return lzma.LZMADecompressor()

    def feed(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._d.eof:  # the next member starts here
                self._d = self._new()
            out.append(self._d.decompress(data))
            data = self._d.unused_data if self._d.eof else b""
        return b"".join(out)

    @property
    def complete(self) -> bool:
        """True when the data fed so far ends exactly at the end of a member."""
        return self._d.eof


#: leading bytes of the compressed formats the FASTA reader takes
COMPRESSION_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
_DECOMPRESSION_ERRORS = (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError)


def compression_of(head: bytes) -> str | None:
    """``gzip``, ``bzip2`` or ``xz`` from a file's first bytes, None for anything else."""
    return next((kind for magic, kind in COMPRESSION_MAGIC.items() if head.startswith(magic)), None)


def _check_args(url: str, max_records: int | None, timeout: float) -> None:
    if not url.lower().startswith(("http://", "https://")):
        raise ConfigError(f"download: only http:// and https:// URLs are supported, got {url!r}")
    if max_records is not None and (
        isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1
    ):
        raise ConfigError(f"download: max_records must be a positive integer, got {max_records!r}")
    if not timeout > 0:
        raise ConfigError(f"download: timeout must be > 0, got {timeout!r}")


def download(
    url: str,
    out: str | Path,
    *,
    max_records: int | None = None,
    progress: bool = True,
    timeout: float = 60.0,
    resume: bool = True,
    verify: bool = True,
) -> dict[str, Any]:
    """Download ``url`` to ``out`` (see the module docstring for resume/atomicity rules).

    ``verify=False`` skips the post-download gzip scan of a full download (the length check
    still applies). Returns a summary dict: ``path, url, mode ("full" | "max_records"),
    bytes, sha256, records`` (``None`` for an unverified full download), ``seconds``, plus
    ``resumed`` (full) or ``residues, source_exhausted`` (max_records).
    """
    _check_args(url, max_records, timeout)
    out = Path(out)
    made = make_parents(out)
    try:
        return _download(url, out, max_records, progress, timeout, resume, verify)
    except BaseException:
        remove_empty(made)  # folders made for a download that failed (a .part keeps them)
        raise


def _download(
    url: str,
    out: Path,
    max_records: int | None,
    progress: bool,
    timeout: float,
    resume: bool,
    verify: bool,
) -> dict[str, Any]:
    start = time.monotonic()
    if max_records is None:
        part = out.with_name(out.name + ".part")
        meta = out.with_name(out.name + ".part.json")
        _check_own_partial(part, meta)
        resumed, length_known = _download_full(
            url, part, meta, progress=progress, timeout=timeout, resume=resume
        )
        if verify:
            try:
                sha256, records = _verify(part, url, progress)
            except DataError as e:
                if not length_known:  # maybe only cut short: kept for a resume
                    raise
                if isinstance(e, _NotFasta) and e.binary:
                    # data of a format this check does not know: the user's to look at
                    raise DataError(
                        f"{e.problem}; kept as {part} (--no-verify takes it as it is; or delete "
                        "it)",
                        path=e.path,
                    ) from None
                # every advertised byte arrived, yet the data is bad: nothing worth resuming
                part.unlink()
                meta.unlink(missing_ok=True)
                raise DataError(f"{e.problem} (removed)", path=e.path) from None
        else:
            sha256, records = _sha256(part), None
        os.replace(part, out)
        meta.unlink(missing_ok=True)
        result: dict[str, Any] = {
            "mode": "full",
            "records": records,
            "bytes": out.stat().st_size,
            "sha256": sha256,
            "resumed": resumed,
        }
    else:
        result = _download_records(url, out, max_records, progress=progress, timeout=timeout)
    result.update(path=str(out), url=url, seconds=round(time.monotonic() - start, 3))
    return result


def _download_full(
    url: str, part: Path, meta_path: Path, *, progress: bool, timeout: float, resume: bool
) -> tuple[bool, bool]:
    """Bring ``part`` up to the complete server file; return ``(resumed, length_known)``."""
    offset = part.stat().st_size if resume and part.is_file() else 0
    headers: dict[str, str] = {}
    if offset:
        meta = _read_meta(meta_path)
        if meta is not None and meta.get("url") != url:
            # hours of a large download: never thrown away without the user's word
            raise DataError(
                f"holds {offset:,} bytes of a download from {meta.get('url')}; rerun with that "
                "URL to resume it, or with --no-resume to start over from this one",
                path=part,
            )
        else:
            headers["Range"] = f"bytes={offset}-"
            validator = (meta or {}).get("etag") or (meta or {}).get("last_modified")
            if validator:
                headers["If-Range"] = validator
    resp = _request(url, timeout, headers, ok=(416,))
    if resp.getcode() == 416:  # range starts at or past the end of the server's file
        _, total = _content_range(resp)
        resp.close()
        if total == offset:  # .part already holds the whole file
            return True, True
        offset = 0
        resp = _request(url, timeout)
    with contextlib.closing(resp):
        if resp.getcode() == 206:
            range_start, _ = _content_range(resp)
            if range_start != offset:
                raise DataError(
                    f"server answered a range request for byte {offset} from byte {range_start}",
                    path=url,
                )
        else:
            offset = 0  # 200: the whole file follows (no range support, or it changed)
            _write_meta(meta_path, url, resp)
        length = _content_length(resp)
        expected = None if length is None else offset + length
        body = _Body(resp, url, _CHUNK, offset, part)
        bar = tqdm(
            total=expected,
            initial=offset,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=part.name,
            disable=None if progress else True,
        )
        with contextlib.closing(bar), open(part, "ab" if offset else "wb") as f:
            for chunk in body:
                f.write(chunk)
                bar.update(len(chunk))
    received = body.received
    if expected is not None and received != expected:
        raise DataError(
            f"truncated download: got {received} of {expected} bytes; rerun to resume from {part}",
            path=url,
        )
    return offset > 0, expected is not None


class _Body:
    """Iterates a response body in chunks, counting bytes; transport failures → DataError."""

    def __init__(
        self, resp: Any, url: str, chunk_size: int, offset: int = 0, part: Path | None = None
    ) -> None:
        self._resp = resp
        self._url = url
        self._size = chunk_size
        self._hint = f"; rerun to resume from {part}" if part is not None else ""
        self.received = offset

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                chunk = self._resp.read(self._size)
            except TimeoutError:
                raise DataError(
                    f"download stalled (no data in time) after {self.received} bytes{self._hint}",
                    path=self._url,
                ) from None
            except _TRANSPORT_ERRORS as exc:
                raise DataError(
                    f"download interrupted after {self.received} bytes ({exc}){self._hint}",
                    path=self._url,
                ) from None
            if not chunk:
                return
            self.received += len(chunk)
            yield chunk


def _check_own_partial(part: Path, meta: Path) -> None:
    """A ``.part`` file is resumed (or replaced) only when its ``.part.json`` says this module
    wrote it; anything else under those names belongs to the user and is left alone."""
    for path in (part, meta):
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise DataError("is in the way of the partial download; remove or rename it", path=path)
    info = _read_meta(meta) if meta.exists() else None
    if meta.exists() and (info is None or "url" not in info):
        raise DataError(
            "exists but is not a partial download of protein-performer; remove or rename it",
            path=meta,
        )
    if part.exists() and info is None:
        raise DataError(
            f"exists without {meta.name}: not a partial download of protein-performer; "
            "remove or rename it",
            path=part,
        )


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _write_meta(path: Path, url: str, resp: Any) -> None:
    meta = {
        "url": url,
        "etag": resp.headers.get("ETag"),
        "last_modified": resp.headers.get("Last-Modified"),
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(meta) + "\n")
    os.replace(tmp, path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class _RecordCounter:
    """Counts FASTA records (``>`` at the start of a line) across chunk boundaries."""

    def __init__(self) -> None:
        self.records = 0
        self._last = b"\n"

    def feed(self, data: bytes) -> None:
        if data:
            self.records += (self._last + data).count(b"\n>")
            self._last = data[-1:]


class _NotFasta(DataError):
    """What was downloaded is not FASTA; ``binary``: not text either (kept, not removed: it
    may be a format this check does not know)."""

    def __init__(self, problem: str, *, path: object, binary: bool) -> None:
        super().__init__(problem, path=path)
        self.binary = binary


class _Head:
    """The first ``size`` bytes of a stream after its leading blank space (at most
    ``max_blank`` of it), for telling what it holds."""

    def __init__(self, size: int = 64, max_blank: int = 1 << 20) -> None:
        self.size, self.max_blank = size, max_blank
        self.data = b""
        self._blank = 0

    def feed(self, data: bytes) -> bytes:
        if not self.data and self._blank < self.max_blank:
            rest = data.lstrip()
            self._blank += len(data) - len(rest)
            if self._blank < 4 and rest.startswith(b"\xef\xbb\xbf"):  # a byte-order mark
                rest = rest[3:].lstrip()
            self.data = rest[: self.size]
        elif self.data and len(self.data) < self.size:
            self.data += data[: self.size - len(self.data)]
        return data

    def check_fasta(self, url: str, compression: str | None) -> None:
        """A FASTA file starts with ``>`` (after a byte-order mark and blank lines)."""
        text = self.data
        while text.startswith(b";"):  # comment lines of the original FASTA format
            text = text.partition(b"\n")[2].lstrip(b"\r\n")
        if text.startswith(b">"):
            return
        body = f"the decompressed ({compression}) download" if compression else "the download"
        if not text:
            raise _NotFasta(f"not FASTA: {body} is empty", path=url, binary=False)
        # binary: NUL or control bytes other than tab / CR / LF (text may be cut mid-character)
        if any(b < 32 and b not in (9, 10, 13) for b in text) or b"\x7f" in text:
            from protein_performer.data.fasta import COMPRESSION_MAGIC as KNOWN

            first = " ".join(f"{b:02x}" for b in text[:8])
            kind = next((k for magic, k in KNOWN.items() if text.startswith(magic)), None)
            what = (
                f"{kind} data, which this reader does not decompress (decompress it, or "
                "download a gzip, bzip2 or xz file)"
                if kind
                else f"binary data of an unknown format (bytes {first} ...)"
            )
            raise _NotFasta(f"not FASTA: {body} is {what}", path=url, binary=True)
        shown = text[:40].decode("utf-8", "replace").replace("\r", "").split("\n")[0]
        hint = " (an HTML page: an error or login page?)" if text.startswith(b"<") else ""
        raise _NotFasta(f"not FASTA: {body} starts with {shown!r}{hint}", path=url, binary=False)


def _verify(part: Path, url: str, progress: bool) -> tuple[str, int]:
    """Hash ``part`` and count its records; a gzip file must decompress to its end, and what
    it holds must start as FASTA."""
    h = hashlib.sha256()
    counter = _RecordCounter()
    head = _Head()
    bar = tqdm(
        total=part.stat().st_size,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc="verify",
        disable=None if progress else True,
    )
    with open(part, "rb") as f, contextlib.closing(bar):
        kind = compression_of(f.read(8))
        unpack = None if kind is None else _Decompressor(kind)
        f.seek(0)
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            bar.update(len(chunk))
            try:
                counter.feed(head.feed(unpack.feed(chunk) if unpack is not None else chunk))
            except _DECOMPRESSION_ERRORS as exc:
                raise DataError(f"corrupt {kind} data in {part} ({exc})", path=url) from None
    if unpack is not None and not unpack.complete:
        raise DataError(f"truncated {kind} stream in {part}", path=url)
    head.check_fasta(url, kind)
    return h.hexdigest(), counter.records


def _decompressed_chunks(resp: Any, url: str) -> Iterator[bytes]:
    """Yield the body of ``resp``, decompressed when it starts with the magic bytes of gzip,
    bzip2 or xz.

    Raises DataError when the body is shorter than Content-Length or the compressed stream
    ends inside a member.
    """
    body = _Body(resp, url, 64 * 1024)
    chunks = iter(body)
    head = b""
    while len(head) < 8 and (chunk := next(chunks, b"")):
        head += chunk
    kind = compression_of(head)
    unpack = None if kind is None else _Decompressor(kind)
    for chunk in itertools.chain([head], chunks):
        if unpack is None:
            yield chunk
            continue
        try:
            yield unpack.feed(chunk)
        except _DECOMPRESSION_ERRORS as exc:
            raise DataError(f"corrupt {kind} data ({exc})", path=url) from None
    expected = _content_length(resp)
    if expected is not None and body.received != expected:
        raise DataError(f"truncated download: got {body.received} of {expected} bytes", path=url)
    if unpack is not None and not unpack.complete:
        raise DataError(f"truncated {kind} stream", path=url)


def _parse_records(
    chunks: Iterator[bytes], url: str, limit: int, state: dict[str, bool]
) -> Iterator[tuple[str, str, str]]:
    """Yield the first ``limit`` complete ``(id, description, sequence)`` records.

    Sets ``state["more"]`` when it stopped at the header of record ``limit + 1``.
    """
    n = 0
    title: str | None = None
    seq: list[str] = []
    buf = b""

    def lines() -> Iterator[bytes]:
        nonlocal buf
        for chunk in chunks:
            buf += chunk
            *complete, buf = buf.split(b"\n")
            yield from complete
        if buf:
            yield buf

    for line_no, raw in enumerate(lines(), start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            raise DataError(f"line {line_no} is not valid UTF-8", path=url) from None
        if line.startswith(";"):
            continue  # a comment line of the original FASTA format, as FastaReader reads it
        if line.startswith(">"):
            if title is not None:
                yield (*_split_title(title, url, n), "".join(seq))
                if n == limit:
                    state["more"] = True
                    return
            n += 1
            title, seq = line[1:].strip(), []
        elif title is None:
            if line.strip():
                raise DataError(f"not FASTA: line {line_no} comes before any '>' header", path=url)
        else:
            seq.append("".join(line.split()))
    if title is not None:
        yield (*_split_title(title, url, n), "".join(seq))


def _split_title(title: str, url: str, n: int) -> tuple[str, str]:
    parts = title.split(None, 1)
    if not parts:
        raise DataError("empty FASTA header", path=url, record=n)
    return parts[0], parts[1] if len(parts) > 1 else ""


def _download_records(
    url: str, out: Path, limit: int, *, progress: bool, timeout: float
) -> dict[str, Any]:
    resp = _request(url, timeout)
    bar = tqdm(total=limit, unit="rec", desc=out.name, disable=None if progress else True)
    state = {"more": False}
    with contextlib.closing(resp), contextlib.closing(bar), AtomicFastaWriter(out) as writer:
        for record_id, description, sequence in _parse_records(
            _decompressed_chunks(resp, url), url, limit, state
        ):
            writer.write(record_id, sequence, description)
            bar.update(1)
        if writer.records == 0:
            raise DataError("no FASTA records in the response", path=url)
    summary = writer.summary
    assert summary is not None
    return {
        "mode": "max_records",
        "records": summary.records,
        "residues": summary.residues,
        "bytes": summary.bytes,
        "sha256": summary.sha256,
        "source_exhausted": not state["more"],
    }
