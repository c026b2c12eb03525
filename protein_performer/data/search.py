"""Find homologs of query proteins in FASTA databases with MMseqs2 (``easy-search``).

``search(query_fasta, db_fastas, out_dir)`` reads the FASTA files with the project's validation,
runs ``mmseqs easy-search`` (the binary :func:`~protein_performer.data.cluster.find_mmseqs`
finds for clustering), applies the filters and writes an output directory atomically (a hidden
temporary directory renamed into place; nothing appears when anything fails)::

    OUT/hits.fasta     one record per kept hit: the hit's aligned region ± ``margin`` residues,
                       >TARGET/START-END query=QUERY identity=0.873 evalue=2.1e-40
                        range=START-END aligned=TSTART-TEND
                       (1-based, inclusive; ``range`` is the region written, ``aligned`` the
                       part MMseqs2 aligned)
    OUT/hits.tsv       the hit table (:data:`TSV_COLUMNS`), one row per kept hit, best first
                       per query (E-value, then bit score)
    OUT/manifest.json  inputs (sha256), parameters, MMseqs2 version, counts per filter

A hit is kept when its identity (MMseqs2's ``fident``: identical residues / alignment columns)
lies in ``[min_identity, max_identity]``, it covers at least ``min_coverage`` of the query
(``(qend - qstart + 1) / qlen``), its E-value is at most ``max_evalue``, and it is not the
query itself: the same record id, or a record naming the same UniProt entry (``sp|P00974|…``
and ``P00974``) with the identical sequence. The best ``max_hits`` of each query are kept.

No hit passing the filters is a one-line :class:`~protein_performer.errors.DataError` (saying
which filter removed the hits MMseqs2 found), and no output directory is written: an empty
hits file is never what a user of it wants.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from protein_performer.data.alphabet import InvalidPolicy, default_alphabet
from protein_performer.data.cluster import find_mmseqs, mmseqs_version, run_mmseqs
from protein_performer.data.encoding import EncodeCounts, iter_encoded
from protein_performer.data.fasta import FastaReader, PathLike
from protein_performer.errors import ConfigError, DataError
from protein_performer.utils.outputs import check_output_dir, dir_with_manifest, staged_dir

FORMAT = "protein-performer-search"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
HITS_FASTA = "hits.fasta"
HITS_TSV = "hits.tsv"
#: The working folder inside the staged output while MMseqs2 runs (gone before it is renamed).
SCRATCH = ".mmseqs-work"
#: Columns MMseqs2 writes (``--format-output``), in this order.
MMSEQS_COLUMNS = (
    "query", "target", "fident", "alnlen", "qstart", "qend", "qlen", "tstart", "tend", "tlen",
    "evalue", "bits",
)  # fmt: skip
#: Columns of ``hits.tsv``.
TSV_COLUMNS = (
    "query", "target", "record", "identity", "alignment_length", "query_start", "query_end",
    "query_length", "query_coverage", "target_start", "target_end", "target_length",
    "region_start", "region_end", "evalue", "bits",
)  # fmt: skip

#: Whether a directory holds a :func:`search` output and nothing else.
is_search_dir = dir_with_manifest(MANIFEST, FORMAT, {HITS_FASTA, HITS_TSV})


@dataclass
class Hit:
    """One alignment MMseqs2 reported: record indices into the query / database files read,
    identity in [0, 1], 1-based inclusive ranges, E-value and bit score."""

    query: int
    target: int
    identity: float
    alignment_length: int
    query_start: int
    query_end: int
    query_length: int
    target_start: int
    target_end: int
    target_length: int
    evalue: float
    bits: float

    @property
    def query_coverage(self) -> float:
        return (self.query_end - self.query_start + 1) / self.query_length

    def region(self, margin: int) -> tuple[int, int]:
        """1-based inclusive ``(start, end)`` of the aligned target region ± ``margin``,
        clipped to the target."""
        return max(1, self.target_start - margin), min(self.target_length, self.target_end + margin)


def _check_params(
    min_identity: float,
    max_identity: float,
    min_coverage: float,
    max_evalue: float,
    margin: int,
    max_hits: int | None,
    threads: int | None,
    iterations: int,
) -> None:
    """One-line :class:`ConfigError` for a value out of range."""
    checks = [
        (0.0 <= min_identity <= 1.0, f"min_identity must be in [0, 1] (got {min_identity})"),
        (0.0 <= max_identity <= 1.0, f"max_identity must be in [0, 1] (got {max_identity})"),
        (min_identity <= max_identity, "min_identity must be <= max_identity"),
        (0.0 <= min_coverage <= 1.0, f"min_coverage must be in [0, 1] (got {min_coverage})"),
        (
            math.isfinite(max_evalue) and max_evalue > 0,
            f"max_evalue must be a number > 0 (got {max_evalue})",
        ),
        (
            not isinstance(margin, bool) and int(margin) == margin and margin >= 0,
            f"margin must be an integer >= 0 (got {margin!r})",
        ),
        (
            max_hits is None or (not isinstance(max_hits, bool) and max_hits >= 1),
            f"max_hits must be >= 1 or None (got {max_hits!r})",
        ),
        (
            threads is None or (not isinstance(threads, bool) and threads >= 1),
            f"threads must be >= 1 (got {threads!r})",
        ),
        (
            not isinstance(iterations, bool) and iterations in range(1, 11),  # 3.0 is 3
            f"iterations must be an integer in [1, 10] (got {iterations!r})",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"search: {message}")


def _write_validated(
    paths: Sequence[PathLike],
    out: Path,
    prefix: str,
    counts: EncodeCounts,
    policy: InvalidPolicy | str = InvalidPolicy.ERROR,
    strip_gaps: bool = False,
) -> tuple[list[str], list[dict[str, Any]]]:
    """Read ``paths`` with the project's validation (invalid letters, nucleotides, empty
    records: one-line errors naming file and record, or skipped / replaced as ``policy``
    says; ``strip_gaps`` drops alignment gaps) and write the kept records to ``out`` as
    ``>{prefix}{i}`` records (MMseqs2 keeps only the first header word). Returns the kept
    records' ids in order and each file's ``{path, sha256, records}``."""
    alphabet = default_alphabet()
    ids: list[str] = []
    sources = []
    with open(out, "w", encoding="ascii") as fh:
        for path in paths:
            reader = FastaReader(path)
            kept = iter_encoded(reader, alphabet, policy, counts, strip_gaps=strip_gaps)
            for rec, residues in kept:
                fh.write(f">{prefix}{len(ids)}\n{alphabet.decode(residues)}\n")
                ids.append(rec.id)
            sources.append(
                {"path": str(reader.path), "sha256": reader.sha256, "records": reader.records_read}
            )
    return ids, sources


def _read_sequences(path: Path, wanted: set[int]) -> dict[int, str]:
    """The sequences of records ``wanted`` (indices) of a file :func:`_write_validated` wrote."""
    out: dict[int, str] = {}
    with open(path, encoding="ascii") as fh:
        for index, (_, seq) in enumerate(zip(fh, fh, strict=True)):
            if index in wanted:
                out[index] = seq.rstrip("\n")
    return out


def _parse_hits(path: Path) -> Iterator[Hit]:
    """The hits of MMseqs2's table (:data:`MMSEQS_COLUMNS`), ids ``q{i}`` / ``t{j}``."""
    with open(path, encoding="ascii") as fh:
        for line in fh:
            f = line.rstrip("\n").split("\t")
            if len(f) != len(MMSEQS_COLUMNS):
                continue
            yield Hit(
                int(f[0][1:]), int(f[1][1:]), float(f[2]), int(f[3]), int(f[4]), int(f[5]),
                int(f[6]), int(f[7]), int(f[8]), int(f[9]), float(f[10]), float(f[11]),
            )  # fmt: skip


def _entry_names(record_id: str) -> set[str]:
    """The id, and for a UniProt id ``sp|P00974|BPT1_BOVIN`` its accession and entry name (as
    ``analysis.inputs.record_names``, kept here so the data layer does not import torch)."""
    parts = record_id.split("|")
    if len(parts) == 3 and parts[0] in ("sp", "tr") and parts[1] and parts[2]:
        return {record_id, parts[1], parts[2]}
    return {record_id}


def _is_self(query_id: str, target_id: str, query_seq: str, target_seq: str) -> bool:
    """The query itself: the same id, or ids naming the same UniProt entry with the same
    sequence."""
    if query_id == target_id:
        return True
    return bool(_entry_names(query_id) & _entry_names(target_id)) and query_seq == target_seq


def filter_hits(
    hits: Sequence[Hit],
    query_ids: Sequence[str],
    target_ids: Sequence[str],
    query_seqs: Sequence[str],
    target_seqs: dict[int, str],
    *,
    min_identity: float,
    max_identity: float,
    min_coverage: float,
    max_evalue: float,
    max_hits: int | None,
) -> tuple[list[Hit], dict[str, int]]:
    """The hits that pass every filter, best first per query (E-value, then bit score, then
    target order), at most ``max_hits`` per query; and how many each filter removed (a hit is
    counted under the first filter it fails, in the order of the returned dict)."""
    removed = {"self": 0, "evalue": 0, "identity_below": 0, "identity_above": 0, "coverage": 0}
    kept: dict[int, list[Hit]] = {}
    for h in hits:
        if _is_self(query_ids[h.query], target_ids[h.target], query_seqs[h.query],
                    target_seqs[h.target]):  # fmt: skip
            removed["self"] += 1
        elif h.evalue > max_evalue:
            removed["evalue"] += 1
        elif h.identity < min_identity:
            removed["identity_below"] += 1
        elif h.identity > max_identity:
            removed["identity_above"] += 1
        elif h.query_coverage < min_coverage:
            removed["coverage"] += 1
        else:
            kept.setdefault(h.query, []).append(h)
    removed["max_hits"] = 0
    out: list[Hit] = []
    for q in sorted(kept):
        ranked = sorted(kept[q], key=lambda h: (h.evalue, -h.bits, h.target, h.target_start))
        if max_hits is not None and len(ranked) > max_hits:
            removed["max_hits"] += len(ranked) - max_hits
            ranked = ranked[:max_hits]
        out.extend(ranked)
    return out, removed


def _no_hits_message(raw: int, removed: dict[str, int], params: dict[str, Any]) -> str:
    """Why nothing was kept, in one line."""
    if raw == 0:
        return (
            f"MMseqs2 found no hit with E-value <= {params['max_evalue']:g}, identity >= "
            f"{params['min_identity']:g} and query coverage >= {params['min_coverage']:g} "
            f"at sensitivity {params['sensitivity']:g}"
            + (f" in {params['iterations']} profile rounds" if params["iterations"] > 1 else "")
            + " (loosen max_evalue / min_identity / min_coverage"
            + (", raise sensitivity to 7.5" if params["sensitivity"] < 7.5 else "")
            + (", search in profile rounds with iterations 3" if params["iterations"] < 2 else "")
            + ", or search a larger database); nothing was written"
        )
    names = {
        "self": "the query itself",
        "evalue": f"E-value > {params['max_evalue']:g}",
        "identity_below": f"identity < {params['min_identity']:g}",
        "identity_above": f"identity > {params['max_identity']:g}",
        "coverage": f"query coverage < {params['min_coverage']:g}",
    }
    why = ", ".join(f"{n:,} {names[k]}" for k, n in removed.items() if n and k in names)
    return f"no hit passes the filters: MMseqs2 found {raw:,} ({why}); nothing was written"


def _record_names(kept: Sequence[Hit], target_ids: Sequence[str], margin: int) -> list[str]:
    """``TARGET/START-END`` of each kept hit, made unique (``_2``, ``_3``) when two queries
    find the same region."""
    used: set[str] = set()
    names = []
    for h in kept:
        start, end = h.region(margin)
        base = "".join(c if not c.isspace() else "_" for c in target_ids[h.target])
        name, k = f"{base}/{start}-{end}", 1
        while name in used:
            k += 1
            name = f"{base}/{start}-{end}_{k}"
        used.add(name)
        names.append(name)
    return names


def _write_outputs(
    final: Path,
    kept: Sequence[Hit],
    names: Sequence[str],
    query_ids: Sequence[str],
    target_ids: Sequence[str],
    target_seqs: dict[int, str],
    margin: int,
) -> None:
    """``hits.fasta`` and ``hits.tsv`` into ``final``."""
    with (
        open(final / HITS_FASTA, "w", encoding="utf-8") as fa,
        open(final / HITS_TSV, "w", encoding="utf-8", newline="") as tsv,
    ):
        writer = csv.writer(tsv, delimiter="\t", lineterminator="\n")
        writer.writerow(TSV_COLUMNS)
        for h, name in zip(kept, names, strict=True):
            start, end = h.region(margin)
            seq = target_seqs[h.target][start - 1 : end]
            fa.write(
                f">{name} query={query_ids[h.query]} identity={h.identity:.3f} "
                f"evalue={h.evalue:.2g} range={start}-{end} "
                f"aligned={h.target_start}-{h.target_end}\n"
            )
            fa.writelines(seq[i : i + 60] + "\n" for i in range(0, len(seq), 60))
            writer.writerow([
                query_ids[h.query], target_ids[h.target], name, f"{h.identity:.3f}",
                h.alignment_length, h.query_start, h.query_end, h.query_length,
                f"{h.query_coverage:.3f}", h.target_start, h.target_end, h.target_length,
                start, end, f"{h.evalue:.3g}", f"{h.bits:g}",
            ])  # fmt: skip


def _easy_search_options(params: Mapping[str, Any], threads: int) -> list[str]:
    """MMseqs2 ``easy-search``'s options for :func:`search`'s parameters (``params``, as its
    manifest records them)."""
    return [
        "--format-output", ",".join(MMSEQS_COLUMNS), "-e", f"{params['max_evalue']:g}",
        "--min-seq-id", f"{params['min_identity']:g}", "-c", f"{params['min_coverage']:g}",
        "--cov-mode", "2", "-s", f"{params['sensitivity']:g}",
        "--max-seqs", str(max(300, 4 * (params["max_hits"] or 0))), "--threads", str(threads),
        "-v", "1",
    ] + (["--num-iterations", str(params["iterations"])] if params["iterations"] > 1 else [])  # fmt: skip


def _progress(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"search: {message}", file=sys.stderr, flush=True)


def search(
    query_fasta: PathLike,
    db_fastas: PathLike | Sequence[PathLike],
    out_dir: PathLike,
    *,
    min_identity: float = 0.3,
    max_identity: float = 1.0,
    min_coverage: float = 0.5,
    max_evalue: float = 1e-3,
    margin: int = 0,
    max_hits: int | None = 100,
    threads: int | None = None,
    sensitivity: float = 5.7,
    iterations: int = 1,
    invalid: str = "error",
    strip_gaps: bool = False,
    overwrite: bool = False,
    quiet: bool = True,
) -> dict[str, Any]:
    """Search the proteins of ``query_fasta`` against ``db_fastas`` with MMseqs2 and write
    ``out_dir`` (see the module docstring); returns its manifest.

    ``threads``: MMseqs2's (default: every core); ``sensitivity``: its ``-s`` (1 fast .. 7.5
    sensitive); ``iterations``: MMseqs2's ``--num-iterations``: above 1, each round searches
    again with a profile of the query and the hits so far (as ColabFold builds its MSAs), which
    finds homologs too distant for one sequence search. ``invalid`` (``error``, ``skip``,
    ``replace``) and ``strip_gaps``: what is done with a record holding other letters, or
    none, as ``data preprocess`` does; what was skipped or replaced is said and counted in the
    manifest. One-line errors: :class:`ConfigError` for a bad parameter or MMseqs2 missing
    (saying how to install it), :class:`DataError` for a bad FASTA (file, record, problem), an
    output directory in the way, a failed MMseqs2 run or no hit left.
    """
    if isinstance(db_fastas, (str, os.PathLike)):
        db_fastas = [db_fastas]
    if not db_fastas:
        raise ConfigError("search needs at least one database FASTA")
    _check_params(
        min_identity, max_identity, min_coverage, max_evalue, margin, max_hits, threads, iterations
    )
    policy = InvalidPolicy.parse(invalid)
    threads = threads or os.cpu_count() or 1
    params = {
        "min_identity": min_identity, "max_identity": max_identity,
        "min_coverage": min_coverage, "max_evalue": max_evalue, "margin": int(margin),
        "max_hits": max_hits, "sensitivity": sensitivity, "iterations": int(iterations),
    }  # fmt: skip

    def check() -> Path:
        return check_output_dir(
            out_dir, "OUTDIR", overwrite=overwrite, is_ours=is_search_dir, what="search directory"
        )

    outdir = check()
    binary = find_mmseqs()  # before any work: MMseqs2 missing is a one-line ConfigError
    version = mmseqs_version(binary)
    for path in [query_fasta, *db_fastas]:
        FastaReader(path)  # fail fast on a missing or unreadable file
    t0 = time.perf_counter()
    with staged_dir(outdir, check) as final:
        # MMseqs2's inputs, results and temporary files, removed before the folder is renamed
        work = final / SCRATCH
        work.mkdir()
        counts = EncodeCounts()
        query_ids, query_sources = _write_validated(
            [query_fasta], work / "query.fasta", "q", counts, policy, strip_gaps
        )
        dup = next((i for i, n in Counter(query_ids).items() if n > 1), None)
        if dup is not None:
            raise DataError(f"query id {dup} occurs more than once", path=query_fasta)
        target_ids, db_sources = _write_validated(
            db_fastas, work / "db.fasta", "t", counts, policy, strip_gaps
        )
        changed = counts.changes()
        _progress(f"{len(query_ids):,} queries against {len(target_ids):,} records"
                  + (f" ({changed})" if changed else ""), quiet)  # fmt: skip
        mm_tmp = work / "mmseqs_tmp"
        mm_tmp.mkdir()
        cmd = [binary, "easy-search", str(work / "query.fasta"), str(work / "db.fasta"),
               str(work / "result.m8"), str(mm_tmp), *_easy_search_options(params, threads)]  # fmt: skip
        code = run_mmseqs(cmd, work / "mmseqs.log", quiet, who="search")
        lines = (work / "mmseqs.log").read_text(errors="replace").splitlines()
        last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "no output")
        if code != 0 or not (work / "result.m8").is_file():
            raise DataError(f"MMseqs2 easy-search failed (exit {code}): {last}")
        hits = list(_parse_hits(work / "result.m8"))
        query_seqs = list(
            _read_sequences(work / "query.fasta", set(range(len(query_ids)))).values()
        )
        target_seqs = _read_sequences(work / "db.fasta", {h.target for h in hits})
        kept, removed = filter_hits(
            hits, query_ids, target_ids, query_seqs, target_seqs,
            min_identity=min_identity, max_identity=max_identity, min_coverage=min_coverage,
            max_evalue=max_evalue, max_hits=max_hits,
        )  # fmt: skip
        if not kept:
            raise DataError(_no_hits_message(len(hits), removed, params), path=query_fasta)
        names = _record_names(kept, target_ids, int(margin))
        _write_outputs(final, kept, names, query_ids, target_ids, target_seqs, int(margin))
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "mmseqs": {"version": version, "command": "easy-search", "args": cmd[6:]},
            "params": params,
            "invalid_policy": policy.value,
            "strip_gaps": strip_gaps,
            "records": counts.to_dict(),
            "query": query_sources[0],
            "databases": db_sources,
            "counts": _hit_counts(hits, kept, removed, query_ids, len(target_ids)),
            "elapsed_s": round(time.perf_counter() - t0, 3),
        }
        (final / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(work)
    _progress(f"wrote {outdir}: {len(kept):,} hits for {manifest['counts']['queries_with_hits']:,} "
              f"of {len(query_ids):,} queries; {per_query_text(counts_of(manifest))}", quiet)  # fmt: skip
    return manifest


def _hit_counts(
    hits: Sequence[Hit],
    kept: Sequence[Hit],
    removed: dict[str, int],
    query_ids: Sequence[str],
    database_records: int,
) -> dict[str, Any]:
    """The manifest's ``counts``: MMseqs2's hits, what each filter removed, what was kept."""
    return {
        "queries": len(query_ids),
        "database_records": database_records,
        "mmseqs_hits": len(hits),
        "removed": removed,
        "hits": len(kept),
        "queries_with_hits": len({h.query for h in kept}),
        "hits_per_query": hits_per_query(kept, query_ids),
    }


def search_rounds(hits_fasta: PathLike) -> int | None:
    """The ``iterations`` of the :func:`search` that wrote ``hits_fasta`` (its folder's
    manifest; 1 for manifests older than the option), or None when it is not such a file."""
    path = Path(hits_fasta)
    if path.name != HITS_FASTA:
        return None
    try:
        manifest = json.loads((path.parent / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None
    params = manifest.get("params")
    rounds = params.get("iterations", 1) if isinstance(params, dict) else None
    return rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else None


def counts_of(manifest: Mapping[str, Any]) -> dict[str, int]:
    """A search manifest's hits per query."""
    return dict(manifest["counts"]["hits_per_query"])


def hits_per_query(kept: Sequence[Hit], query_ids: Sequence[str]) -> dict[str, int]:
    """Hits kept for each query, by query id in the query file's order (0 for none)."""
    n = Counter(h.query for h in kept)
    return {qid: n.get(i, 0) for i, qid in enumerate(query_ids)}


def per_query_text(counts: Mapping[str, int], limit: int = 12) -> str:
    """``hits per query: P1 16, P2 0, ...``: the first ``limit`` queries in file order, then
    how many more (all of them in the manifest's ``counts.hits_per_query``)."""
    shown = [f"{q} {n:,}" for q, n in list(counts.items())[:limit]]
    more = len(counts) - limit
    tail = f", ... {more:,} more (manifest.json: counts.hits_per_query)" if more > 0 else ""
    return "hits per query: " + ", ".join(shown) + tail


__all__ = [
    "FORMAT",
    "HITS_FASTA",
    "HITS_TSV",
    "TSV_COLUMNS",
    "Hit",
    "filter_hits",
    "hits_per_query",
    "per_query_text",
    "search",
]
