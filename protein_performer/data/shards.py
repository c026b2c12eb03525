"""Preprocess FASTA into per-split token shards + a JSON manifest (the scale path).

Layout of an output directory::

    OUTDIR/manifest.json
    OUTDIR/<split>/tokens.bin    uint8 residue ids of all records, concatenated (no specials)
    OUTDIR/<split>/offsets.bin   int64 little-endian, n_records + 1 entries
    OUTDIR/<split>/ids.txt       one record id per line

Preprocessing streams (memory does not grow with residues; 8 bytes per record for the exact
duplicate check) and is atomic: everything is written into a hidden temporary directory next to
OUTDIR that is renamed into place only when complete, and removed on any error or interrupt.
"""

from __future__ import annotations

import json
import os
import sys
import time
from array import array
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from protein_performer.data.alphabet import Alphabet, InvalidPolicy, default_alphabet
from protein_performer.data.cluster import members_digest
from protein_performer.data.digests import DuplicateFinder, digest64
from protein_performer.data.encoding import EncodeCounts, iter_encoded
from protein_performer.data.fasta import FastaReader, PathLike
from protein_performer.data.sources import FlatSource, split_key
from protein_performer.data.splits import SPLITS, SplitAssigner, parse_fractions
from protein_performer.data.stats import LengthHistogram
from protein_performer.errors import DataError
from protein_performer.utils.outputs import check_output_dir, staged_dir

FORMAT = "protein-performer-shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class _SplitWriter:
    """Appends records of one split to tokens.bin / offsets.bin / ids.txt."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True)
        self.dir = directory
        self._tokens: BinaryIO = open(directory / "tokens.bin", "wb", buffering=1 << 20)  # noqa: SIM115
        self._offsets: BinaryIO = open(directory / "offsets.bin", "wb")  # noqa: SIM115
        self._ids = open(directory / "ids.txt", "w", encoding="utf-8", buffering=1 << 20)  # noqa: SIM115
        self._offbuf = array("q", [0])
        self.position = 0
        self.lengths = LengthHistogram()

    def add(self, record_id: str, ids: np.ndarray) -> None:
        self._tokens.write(ids.tobytes())
        self.position += len(ids)
        self._offbuf.append(self.position)
        if len(self._offbuf) >= 65536:
            self._flush_offsets()
        self._ids.write(record_id.replace("\n", " ") + "\n")
        self.lengths.add(len(ids))

    def _flush_offsets(self) -> None:
        buf = self._offbuf
        if sys.byteorder != "little":
            buf.byteswap()
        self._offsets.write(buf.tobytes())
        self._offbuf = array("q")

    def close(self) -> None:
        self._flush_offsets()
        for fh in (self._tokens, self._offsets, self._ids):
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()


SHARD_DIR_ENTRIES = frozenset({MANIFEST, *SPLITS})
SPLIT_FILES = frozenset({"tokens.bin", "offsets.bin", "ids.txt"})


class _HeldOutCopies:
    """Records of explicit val/test files identical to a training record (train files come
    first): their metrics would not be held out. 64-bit digests of the token bytes."""

    def __init__(self) -> None:
        self._train = array("Q")  # 8 bytes a training record
        self._sorted: np.ndarray | None = None
        self.counts = {"val": 0, "test": 0}
        self.examples: dict[str, list[str]] = {"val": [], "test": []}

    def add(self, split: str, record_id: str, ids: np.ndarray) -> None:
        digest = digest64(ids.tobytes())
        if split == "train":
            self._train.append(digest)
            return
        if self._sorted is None:
            self._sorted = np.unique(np.frombuffer(self._train, dtype=np.uint64))
            self._train = array("Q")
        at = int(np.searchsorted(self._sorted, np.uint64(digest)))
        if at < len(self._sorted) and int(self._sorted[at]) == digest:
            self.counts[split] += 1
            if len(self.examples[split]) < 3:
                self.examples[split].append(record_id)

    def result(self) -> dict[str, Any]:
        return {**self.counts, "examples": self.examples}


class _HashSplitCopies:
    """The same count for a hash split, where train and held-out records interleave: digests
    of every record kept by split (8 bytes a record), compared at the end. Examples are the
    held-out copies met after their training twin (the ids of all held-out records are not
    kept); the counts are exact."""

    def __init__(self) -> None:
        self._digests = {"train": array("Q"), "val": array("Q"), "test": array("Q")}
        self._seen_train: set[int] = set()
        self.examples: dict[str, list[str]] = {"val": [], "test": []}

    def add(self, split: str, record_id: str, ids: np.ndarray) -> None:
        digest = digest64(ids.tobytes())
        self._digests[split].append(digest)
        if split == "train":
            if len(self._seen_train) < 1_000_000:  # for examples only: bounded
                self._seen_train.add(digest)
        elif len(self.examples[split]) < 3 and digest in self._seen_train:
            self.examples[split].append(record_id)

    def result(self) -> dict[str, Any]:
        train = np.unique(np.frombuffer(self._digests["train"], dtype=np.uint64))
        counts = {
            split: int(np.isin(np.frombuffer(self._digests[split], dtype=np.uint64), train).sum())
            for split in ("val", "test")
        }
        return {**counts, "examples": self.examples}


def is_shard_dir(path: PathLike) -> bool:
    """Whether ``path`` is a shard directory written by :func:`preprocess` and holds nothing
    else (only such a directory may be replaced by ``overwrite``)."""
    p = Path(path)
    try:
        names = {c.name for c in p.iterdir()}
        manifest = json.loads((p / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    if not (
        isinstance(manifest, dict)
        and manifest.get("format") == FORMAT
        and MANIFEST in names
        and names <= SHARD_DIR_ENTRIES
    ):
        return False
    for split in names - {MANIFEST}:  # nothing of the user's inside the split folders either
        d = p / split
        if d.is_symlink() or not d.is_dir():
            return False
        for child in d.iterdir():
            if child.name not in SPLIT_FILES or child.is_symlink() or not child.is_file():
                return False
    return (p / MANIFEST).is_file() and not (p / MANIFEST).is_symlink()


def check_shard_outdir(outdir: PathLike, overwrite: bool) -> Path:
    """Refuse, before any work, an OUTDIR that would replace something a user owns."""
    return check_output_dir(
        outdir, "OUTDIR", overwrite=overwrite, is_ours=is_shard_dir, what="shard directory"
    )


def _stream_records(
    readers: list[tuple[FastaReader, str | None]],
    writers: dict[str, _SplitWriter],
    split_of: Any,
    *,
    alphabet: Alphabet,
    policy: InvalidPolicy,
    counts: EncodeCounts,
    dups: DuplicateFinder,
    leaks: Any,
    strip_gaps: bool,
    allow_nucleotide: bool,
    progress: bool,
) -> list[dict[str, Any]]:
    """Every record of ``readers`` encoded into its split's writer (a reader's fixed split, else
    ``split_of(record, path)``), counted and checked for repeated ids and held-out copies, with
    a progress bar over the input bytes; returns the manifest's ``sources``."""
    from protein_performer.utils.progress import progress as progress_bar

    sources = []
    t0 = time.perf_counter()
    total_bytes = sum(r.size for r, _ in readers)
    with progress_bar(
        total=total_bytes,
        desc="preprocess",
        unit="byte",
        enabled=progress,
        tty_unit="B",  # tqdm's scaled bytes (kB, MB)
        leave=True,
        unit_scale=True,
        unit_divisor=1024,
        dynamic_ncols=True,
    ) as bar:
        for reader, fixed_split in readers:
            kept_before = counts.records_kept
            last = 0
            encoded = iter_encoded(
                reader,
                alphabet,
                policy,
                counts,
                strip_gaps=strip_gaps,
                allow_nucleotide=allow_nucleotide,
            )
            for rec, ids in encoded:
                split = fixed_split or split_of(rec, reader.path)
                writers[split].add(rec.id, ids)  # type: ignore[arg-type]
                dups.add(rec.id, rec.number, str(reader.path))
                if leaks is not None:
                    leaks.add(split, rec.id, ids)  # type: ignore[arg-type]
                if counts.records_kept % 2048 == 0:
                    now = reader.compressed_bytes_read
                    bar.update(now - last)
                    last = now
                    el = time.perf_counter() - t0
                    bar.set_postfix(rec_per_s=f"{counts.records_kept / max(el, 1e-9):,.0f}")
            bar.update(reader.size - last)
            sources.append(
                {
                    "path": str(reader.path),
                    "bytes": reader.size,
                    "compression": reader.compression,
                    "sha256": reader.sha256,
                    "records": reader.records_read,
                    "records_kept": counts.records_kept - kept_before,
                    "split": fixed_split or "hash",
                }
            )
    return sources


def _split_manifest(
    explicit: bool,
    frac: Sequence[float],
    seed: int,
    cluster_of: Mapping[str, str] | None,
    clusters: PathLike | None,
) -> dict[str, Any]:
    """The manifest's ``split``: how records were assigned to the splits."""
    return {
        "method": "explicit" if explicit else "hash",
        "fractions": None if explicit else list(frac),
        "seed": None if explicit else seed,
        "key": None
        if explicit
        else "cluster of the members table"
        if cluster_of is not None
        else "UniRef cluster id, else UniProt accession, else id",
        "clusters": None
        if explicit or cluster_of is None or clusters is None
        else os.path.abspath(clusters),
        # the member -> cluster map the split was drawn from: a table made again
        # at that path later is another split (evaluate and training check it)
        "clusters_digest": None if explicit or cluster_of is None else members_digest(cluster_of),
    }


def preprocess(
    inputs: PathLike | Sequence[PathLike],
    outdir: PathLike,
    *,
    val_inputs: Sequence[PathLike] = (),
    test_inputs: Sequence[PathLike] = (),
    fractions: Sequence[float] | str = (0.9, 0.05, 0.05),
    seed: int = 0,
    policy: InvalidPolicy | str = InvalidPolicy.ERROR,
    alphabet: Alphabet | None = None,
    overwrite: bool = False,
    progress: bool = True,
    strip_gaps: bool = False,
    allow_nucleotide: bool = False,
    cluster_of: Mapping[str, str] | None = None,
    clusters: PathLike | None = None,
) -> dict[str, Any]:
    """Tokenize FASTA file(s) into per-split shards under ``outdir``; return the manifest.

    ``clusters``: where ``cluster_of`` was read from (``data cluster``'s output), recorded in
    the manifest so that a model trained on the shards can be evaluated on their split.

    With ``val_inputs``/``test_inputs`` the splits are explicit (``inputs`` → train);
    otherwise every record goes to the split given by hashing its key (UniRef cluster id,
    else accession; with ``cluster_of``, its cluster from ``data cluster``) with ``fractions``
    and ``seed``.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    alphabet = alphabet or default_alphabet()
    policy = InvalidPolicy.parse(policy)
    explicit = bool(val_inputs or test_inputs)
    frac = parse_fractions(fractions)
    assigner = SplitAssigner(frac, seed)
    plan: list[tuple[PathLike, str | None]] = [(p, "train" if explicit else None) for p in inputs]
    plan += [(p, "val") for p in val_inputs] + [(p, "test") for p in test_inputs]
    outdir = check_shard_outdir(outdir, overwrite)
    readers = [(FastaReader(p), split) for p, split in plan]  # fail fast on missing files
    with staged_dir(outdir, lambda: check_shard_outdir(outdir, overwrite)) as tmp:
        writers = {s: _SplitWriter(tmp / s) for s in SPLITS}
        counts = EncodeCounts()
        dups = DuplicateFinder()
        leaks = _HeldOutCopies() if explicit else _HashSplitCopies()
        t0 = time.perf_counter()
        sources = _stream_records(
            readers,
            writers,
            lambda rec, path: assigner(split_key(rec, cluster_of, path)),
            alphabet=alphabet,
            policy=policy,
            counts=counts,
            dups=dups,
            leaks=leaks,
            strip_gaps=strip_gaps,
            allow_nucleotide=allow_nucleotide,
            progress=progress,
        )
        done_bytes = sum(r.size for r, _ in readers)
        for w in writers.values():
            w.close()
        elapsed = time.perf_counter() - t0
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "alphabet": alphabet.to_dict(),
            "sources": sources,
            "split": _split_manifest(explicit, frac, seed, cluster_of, clusters),
            "invalid_policy": policy.value,
            "strip_gaps": strip_gaps,
            "allow_nucleotide": allow_nucleotide,
            "counts": counts.to_dict(),
            "duplicate_ids": dups.result(),
            "held_out_in_train": None if leaks is None else leaks.result(),
            "splits": {},
            "elapsed_s": round(elapsed, 3),
            "records_per_s": round(counts.records_read / elapsed, 1) if elapsed else None,
            "mb_per_s": round(done_bytes / 1e6 / elapsed, 2) if elapsed else None,
        }
        for s, w in writers.items():
            summary = w.lengths.summary()
            manifest["splits"][s] = {
                "records": summary.pop("count"),
                "residues": summary.pop("residues"),
                "lengths": summary,
            }
        with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2)
            fh.write("\n")
    return manifest


def read_manifest(outdir: PathLike) -> dict[str, Any]:
    """Load and check ``OUTDIR/manifest.json``."""
    path = Path(outdir) / MANIFEST
    if not path.is_file():
        raise DataError("not a shard directory (no manifest.json)", path=outdir)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"unreadable manifest ({e})", path=path) from None
    if manifest.get("format") != FORMAT:
        raise DataError(f"not a {FORMAT} manifest", path=path)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DataError(
            f"shard format version {manifest.get('format_version')} is not supported "
            f"(this build reads {FORMAT_VERSION}); re-run preprocessing",
            path=path,
        )
    return manifest


class ShardSource(FlatSource):
    """A :class:`FlatSource` over memory-mapped shards of one split."""

    @classmethod
    def open(  # type: ignore[override]
        cls,
        outdir: PathLike,
        split: str,
        *,
        alphabet: Alphabet | None = None,
        load_ids: bool = True,
        verify: bool = True,
    ) -> ShardSource:
        """Memory-map ``OUTDIR/<split>``; checks the manifest, alphabet and file sizes and
        (``verify``: one pass over the tokens) that every token is a residue of the alphabet."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
        manifest = read_manifest(outdir)
        alphabet = alphabet or default_alphabet()
        alphabet.check_compatible(manifest["alphabet"], where=f"shards {outdir}")
        d = Path(outdir) / split
        expect = manifest["splits"][split]
        tok_path, off_path = d / "tokens.bin", d / "offsets.bin"
        for p in (tok_path, off_path):
            if not p.is_file():
                raise DataError("missing shard file", path=p)
        n_tok = tok_path.stat().st_size
        n_off = off_path.stat().st_size // 8
        if n_tok != expect["residues"] or n_off != expect["records"] + 1:
            raise DataError(
                f"shard size does not match manifest ({n_tok} tokens / {n_off - 1} records, "
                f"manifest says {expect['residues']} / {expect['records']})",
                path=d,
            )
        tokens = np.memmap(tok_path, dtype=np.uint8, mode="r") if n_tok else np.zeros(0, np.uint8)
        offsets = np.fromfile(off_path, dtype="<i8").astype(np.int64, copy=False)
        if len(offsets) > 1 and np.any(np.diff(offsets) < 0):
            raise DataError("offsets are not monotonic (corrupt shard)", path=off_path)
        if verify:
            _check_tokens(tokens, offsets, alphabet, tok_path)
        ids = None
        if load_ids:
            ids = (d / "ids.txt").read_text(encoding="utf-8").splitlines()
            if len(ids) != expect["records"]:
                raise DataError("ids.txt does not match the manifest", path=d / "ids.txt")
        src = cls(tokens, offsets, ids, alphabet)
        src.manifest = manifest
        src._open_args = (str(outdir), split, alphabet.to_dict(), load_ids)
        return src

    def __reduce__(self):
        # Pickling a memmap copies its data; DataLoader workers started with spawn/forkserver
        # would each hold the whole shard. Re-open the files on the other side instead.
        return (_reopen_shards, self._open_args)


def _reopen_shards(outdir: str, split: str, alphabet: dict, load_ids: bool) -> ShardSource:
    # checked when first opened: a DataLoader worker does not read the whole shard again
    return ShardSource.open(
        outdir, split, alphabet=Alphabet.from_dict(alphabet), load_ids=load_ids, verify=False
    )


def _check_tokens(
    tokens: np.ndarray, offsets: np.ndarray, alphabet: Alphabet, path: Path, chunk: int = 1 << 26
) -> None:
    """One-line :class:`DataError` naming the record when a token of ``tokens`` is not a
    residue (or ``<unk>``) of ``alphabet``: bytes a shard cannot hold unless it is corrupt."""
    residues = [i for i, t in enumerate(alphabet.tokens) if len(t) == 1]
    valid = np.zeros(256, dtype=bool)
    valid[[*residues, alphabet.unk_idx]] = True
    for start in range(0, len(tokens), chunk):
        block = np.asarray(tokens[start : start + chunk])
        bad = np.flatnonzero(~valid[block])
        if len(bad):
            at = start + int(bad[0])
            record = int(np.searchsorted(offsets, at, side="right"))  # 1-based
            raise DataError(
                f"token {int(tokens[at])} at position {at:,} (record {record:,}) is not a "
                f"residue of alphabet {alphabet.version}: corrupt shard; run `data preprocess` "
                "again",
                path=path,
            )
