"""What the analysis commands read: proteins from FASTA (as the model saw them in training,
``<cls> residues <eos>``), the checkpoint's model, and layer/head selections."""

from __future__ import annotations

import numbers
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from protein_performer.data.alphabet import STRING_HINT, Alphabet, InvalidPolicy
from protein_performer.data.batching import pad_batch
from protein_performer.data.encoding import EncodeCounts, iter_encoded
from protein_performer.data.fasta import FastaReader, FastaRecord, check_distinct_inputs
from protein_performer.data.sources import split_key
from protein_performer.data.splits import SPLITS, SplitAssigner
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.performer import ProteinLM

PathLike = str | os.PathLike


@dataclass
class Protein:
    """One FASTA record to analyse: ``residues`` are uint8 token ids (no specials);
    ``cropped`` counts residues dropped from its end (``truncate``)."""

    id: str
    description: str
    residues: np.ndarray
    cropped: int = 0

    @property
    def sequence_length(self) -> int:
        return len(self.residues)

    def tokens(self, alphabet: Alphabet) -> torch.Tensor:
        """``(1, L + 2)`` int64 ``<cls> residues <eos>``, the layout the model trained on."""
        ids = np.empty(len(self.residues) + 2, dtype=np.int64)
        ids[0], ids[-1] = alphabet.cls_idx, alphabet.eos_idx
        ids[1:-1] = self.residues
        return torch.from_numpy(ids)[None]


def as_protein(item: Protein | str, alphabet: Alphabet, index: int = 0) -> Protein:
    """``item`` as a :class:`Protein`: a sequence string is read as a FASTA record's is (any
    case, whitespace removed; named ``seq{index}``)."""
    if not isinstance(alphabet, Alphabet):
        raise TypeError(
            f"alphabet must be an Alphabet (e.g. default_alphabet()), got {type(alphabet).__name__}"
        )
    if isinstance(item, Protein):
        return item
    if isinstance(item, str):
        ids = alphabet.clean_encode(item, record=index + 1, hint=STRING_HINT).ids
        assert ids is not None  # policy error: invalid letters raise
        if not len(ids):
            raise ValueError(f"sequence {index + 1} is empty (no residues)")
        return Protein(f"seq{index}", "", ids)
    raise TypeError(
        f"expected a Protein (read_proteins) or a sequence string, got {type(item).__name__}"
    )


def as_proteins(
    items: Sequence[Protein | str] | Protein | str, alphabet: Alphabet
) -> list[Protein]:
    """One protein or a list of them (:func:`as_protein` each)."""
    if isinstance(items, (Protein, str)):
        items = [items]
    if not isinstance(items, Iterable):
        raise TypeError(
            f"expected proteins (read_proteins) or sequence strings, got {type(items).__name__}"
        )
    return [as_protein(item, alphabet, i) for i, item in enumerate(items)]


def check_toks_per_batch(value: object) -> int:
    """``toks_per_batch`` as a positive int, or a one-line :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"toks_per_batch must be a positive integer (got {value!r})")
    return int(value)


def token_batches(proteins: Sequence[Protein], toks_per_batch: int) -> list[list[int]]:
    """Indices of ``proteins`` grouped in order so that a padded batch (``<cls>``/``<eos>``
    included) holds at most ``toks_per_batch`` tokens (a longer protein is a batch alone)."""
    check_toks_per_batch(toks_per_batch)
    batches: list[list[int]] = []
    longest = 0
    for i, p in enumerate(proteins):
        width = p.sequence_length + 2
        if batches and (len(batches[-1]) + 1) * max(longest, width) <= toks_per_batch:
            batches[-1].append(i)
            longest = max(longest, width)
        else:
            batches.append([i])
            longest = width
    return batches


def padded_tokens(proteins: Sequence[Protein], alphabet: Alphabet) -> torch.Tensor:
    """``(B, L)`` int64 ``<cls> residues <eos>`` of each protein, right-padded."""
    return pad_batch([p.tokens(alphabet)[0] for p in proteins], alphabet.pad_idx)[0]


def max_tokens(
    model: ProteinLM,
    max_length: int | None,
    trained_length: int | None = None,
    name: str = "max_length",
) -> int | None:
    """Tokens per protein the model accepts: ``max_length`` when given (checked against the
    model's learned positions; errors call it ``name``), else the model's ``max_len`` capped
    at ``trained_length`` (the crop length it trained on: learned positions beyond it never
    trained), None for rotary positions."""
    limit = None if model.rotary is not None else model.config.max_len
    if max_length is None:
        if limit is not None and trained_length:
            return min(limit, int(trained_length))
        return limit
    if isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral):
        raise ConfigError(f"{name} must be an integer >= 3 or None (got {max_length!r})")
    if max_length < 3:  # <cls>, one residue, <eos>
        raise ConfigError(f"{name} must be >= 3 (got {max_length})")
    if limit is not None and max_length > limit:
        raise ConfigError(
            f"{name}={max_length} exceeds the checkpoint's max_len={limit} (learned positions)"
        )
    return max_length


def read_proteins(
    paths: PathLike | Sequence[PathLike],
    alphabet: Alphabet,
    *,
    max_tokens: int | None = None,
    truncate: bool = False,
    invalid: InvalidPolicy | str = InvalidPolicy.ERROR,
    strip_gaps: bool = False,
    allow_nucleotide: bool = False,
    max_records: int | None = None,
    ids: Sequence[str] | None = None,
    keep: Callable[[FastaRecord, PathLike], bool] | None = None,
    counts: EncodeCounts | None = None,
    max_kept: int | None = None,
) -> list[Protein]:
    """Read and validate every record of ``paths`` (or only those whose id is in ``ids``).

    A record longer than ``max_tokens - 2`` residues is an error naming it, unless
    ``truncate`` (its first residues are kept, like ESM's ``truncation_seq_length``). No
    record at all, or an id of ``ids`` not found, is an error too. ``keep(record, path)``
    filters records (e.g. :func:`split_filter`). ``counts`` receives what the ``invalid``
    policy dropped or changed; ``max_kept`` stops after that many proteins.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    check_distinct_inputs({"fasta": paths})  # a file listed twice would be read twice
    wanted = None if ids is None else set(ids)
    out: list[Protein] = []
    where: list[str] = []  # each kept protein's file and record number, for messages
    counts = EncodeCounts() if counts is None else counts
    seen: list[str] = []  # ids of records not asked for, for suggestions
    filtered = 0
    for path in paths:
        reader = FastaReader(path)
        encoded = iter_encoded(
            reader,
            alphabet,
            invalid,
            counts,
            max_records,
            strip_gaps=strip_gaps,
            allow_nucleotide=allow_nucleotide,
        )
        for rec, residues in encoded:
            if wanted is not None and not (record_names(rec.id) & wanted):
                if len(seen) < 100_000:
                    seen.append(rec.id)
                continue
            if keep is not None and not keep(rec, path):
                filtered += 1
                continue
            residues = np.asarray(residues)
            cropped = 0
            if max_tokens is not None and len(residues) > max_tokens - 2:
                if not truncate:
                    raise DataError(
                        f"{len(residues):,} residues exceed the {max_tokens - 2:,} that fit "
                        f"max_length={max_tokens} tokens (with <cls>/<eos>); "
                        "truncate=true keeps the first ones",
                        path=path,
                        record=rec.number,
                        record_id=rec.id,
                    )
                cropped = len(residues) - (max_tokens - 2)
                residues = residues[: max_tokens - 2]
            out.append(Protein(rec.id, rec.title, residues, cropped))
            where.append(f"{Path(path).name} record {rec.number:,}")
            if max_kept is not None and len(out) >= max_kept:
                break
        if max_kept is not None and len(out) >= max_kept:
            break
    names = ", ".join(str(p) for p in paths)
    if wanted is not None:
        missing = sorted(wanted - {n for p in out for n in record_names(p.id)})
        if missing:
            shown = ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
            like = [i for i in seen if any(m.lower() in i.lower() for m in missing)][:3]
            hint = (
                f"; did you mean {', '.join(like)}?"
                if like
                else " (a record's id is the first word of its header)"
            )
            skipped = counts.changes()
            if skipped:
                hint += f"; {skipped}"
            if max_records is not None:
                hint += f"; only the first {max_records:,} records of each file were read (max_records=)"
            raise DataError(f"no record with id {shown}{hint}", path=names)
        chosen: set[int] = set()
        for name in sorted(wanted):
            # an exact id first; a UniProt accession or entry name only when no id is it
            exact = [i for i, p in enumerate(out) if p.id == name]
            hits = exact or [i for i, p in enumerate(out) if name in record_names(p.id)]
            if len(hits) > 1:  # which one was meant cannot be told
                shown = "; ".join(f"{out[i].id} in {where[i]}" for i in hits[:3])
                fix = (
                    "give each record a unique id (the first word of its header)"
                    if exact
                    else "give the full id"
                )
                raise DataError(
                    f"record id {name} names {len(hits)} records ({shown}); {fix}", path=names
                )
            chosen.update(hits)
        out = [p for i, p in enumerate(out) if i in chosen]
    if not out:
        skipped = counts.changes()
        if filtered:
            raise DataError(f"none of the {filtered:,} records falls in this split", path=names)
        raise DataError("no protein records" + (f" ({skipped})" if skipped else ""), path=names)
    return out


def record_names(record_id: str) -> set[str]:
    """The names ``record=`` finds a record by: its id, and for a UniProt id
    ``sp|P00974|BPT1_BOVIN`` its accession and entry name too."""
    parts = record_id.split("|")
    if len(parts) == 3 and parts[0] in ("sp", "tr") and parts[1] and parts[2]:
        return {record_id, parts[1], parts[2]}
    return {record_id}


def split_filter(
    split: str, stored: Mapping[str, Any], clusters: PathLike | None = None
) -> Callable[[FastaRecord, PathLike], bool]:
    """``keep`` for :func:`read_proteins`: the records that the checkpoint's training run put
    in ``split`` (its ``split_by``, clusters table, fractions and seed; ``clusters`` overrides
    where the table is now)."""
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)} (got {split!r})")
    if "split_fractions" not in stored:
        raise ConfigError(
            f"split={split}: the checkpoint does not record how its training data was split "
            "(a weights-only checkpoint?); leave split unset and pass the proteins to use"
        )
    if stored.get("split_by") == "explicit":
        raise ConfigError(
            f"split={split}: the training run's shards were split by files given per split "
            "(preprocess --val/--test), which no FASTA split reproduces; pass that file "
            "without split="
        )
    cluster_of = None
    if stored.get("split_by") == "cluster":
        table = clusters or stored.get("clusters")
        if not table:
            raise ConfigError("the run split by cluster: give clusters=DIR (`data cluster` output)")
        from protein_performer.data.cluster import (
            check_run_clustering,
            members_digest,
            read_members,
        )

        if not clusters and not Path(table).exists():
            raise DataError(
                f"split={split}: the checkpoint's run split by cluster with this clusters table, "
                "not found here; give clusters=DIR (the `data cluster` output for the same "
                "files) or leave split unset to use every protein",
                path=table,
            )
        cluster_of = read_members(table)
        check_run_clustering(table, members_digest(cluster_of), stored, split)
    assigner = SplitAssigner(
        stored.get("split_fractions") or (0.9, 0.05, 0.05), int(stored.get("split_seed") or 0)
    )

    def keep(rec: FastaRecord, path: PathLike) -> bool:
        return assigner(split_key(rec, cluster_of, path)) == split

    return keep


def parse_indices(spec: Any, size: int, key: str, *, keep_order: bool = False) -> list[int]:
    """Resolve a selection of layers or heads into sorted indices in ``[0, size)``.

    Accepts None or ``"all"`` (everything), an int, ``"0-3"`` (inclusive range), ``"1,3"``,
    or a list of ints/ranges; negative indices count from the end (``-1``: the last).
    ``keep_order``: in the order given instead (``[-1, 0]`` -> ``[size - 1, 0]``), and an index
    selected twice is an error (the caller would get fewer rows than it asked for).
    """
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "all"):
        return list(range(size))
    items: list[Any] = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    chosen: dict[int, None] = {}
    for item in items:
        parts = item.split(",") if isinstance(item, str) else [item]
        for part in parts:
            if isinstance(part, bool):
                raise ConfigError(f"{key}: expected indices, got {part!r}")
            if isinstance(part, int):
                lo = hi = part
            else:
                m = re.fullmatch(r"\s*(-?\d+)\s*(?:-\s*(-?\d+)\s*)?", str(part))
                if not m:
                    raise ConfigError(f"{key}: cannot read {part!r} (use e.g. 0-3, [0,2] or all)")
                lo = int(m.group(1))
                hi = int(m.group(2)) if m.group(2) is not None else lo
            lo, hi = (lo + size if lo < 0 else lo), (hi + size if hi < 0 else hi)
            if lo > hi and 0 <= hi < size and 0 <= lo < size:
                raise ConfigError(f"{key}: {part!r} is a reversed range (write {hi}-{lo})")
            if not (0 <= lo < size and 0 <= hi < size):
                raise ConfigError(f"{key}: {part!r} is outside 0-{size - 1} (the model has {size})")
            for i in range(lo, hi + 1):
                if keep_order and i in chosen:
                    raise ConfigError(f"{key}: {i} is selected twice")
                chosen[i] = None
    if not chosen:
        raise ConfigError(f"{key}: selects nothing")
    return list(chosen) if keep_order else sorted(chosen)


def checkpoint_label(path: PathLike) -> str:
    """A short name for figures: ``run/checkpoints/best.ckpt`` -> ``run/best``."""
    p = Path(path)
    run = p.parent.parent.name if p.parent.name == "checkpoints" else p.parent.name
    return f"{run}/{p.stem}" if run else p.stem


def source_names(fasta: PathLike | Sequence[PathLike]) -> str:
    """The input file(s) as an error or summary names them: ``a.fa, b.fa``."""
    return ", ".join(map(str, [fasta] if isinstance(fasta, (str, os.PathLike)) else fasta))


def join_proteins(
    proteins: list[Protein],
    alphabet: Alphabet,
    limit: int | None,
    *,
    truncate: bool,
    model: ProteinLM | None = None,
    source: str | None = None,
) -> tuple[Protein, list[tuple[int, int]], list[Protein]]:
    """One protein of ``p_1 <sep> p_2 … <sep> p_n``, each part's ``(start, stop)`` in it and
    the proteins it holds (``truncate``: the front is cut, the last protein always kept).
    ``model``: the model it is for (a window past its learned positions is not suggested).
    Fewer than two proteins is a :class:`DataError` naming ``source`` (the files read)."""
    if len(proteins) < 2:
        raise DataError("join=true puts several proteins in one window; found one", path=source)
    parts, segments, pos = [], [], 0
    for i, p in enumerate(proteins):
        if i:
            parts.append(np.array([alphabet.sep_idx], dtype=p.residues.dtype))
            pos += 1
        parts.append(p.residues)
        segments.append((pos, pos + len(p.residues)))
        pos += len(p.residues)
    residues = np.concatenate(parts)
    cropped = 0
    if limit is not None and len(residues) + 2 > limit:
        if not truncate:
            longer = model is None or model.rotary is not None or limit < model.config.max_len
            raise ConfigError(
                f"join: {len(proteins)} proteins make {len(residues) + 2} tokens, more than "
                f"{limit}; give fewer records"
                + (", a larger max_length=" if longer else "")
                + ", or truncate=true (cuts the front of the window, the last record kept)"
            )
        last = segments[-1][1] - segments[-1][0]
        if last + 2 > limit:
            raise ConfigError(
                f"join: the last protein ({proteins[-1].id}, {last} residues) alone exceeds "
                f"{limit} tokens, the model's window: no homolog fits before it (plot it alone "
                "with truncate=true, or use a model with longer windows)"
            )
        # cut the front (the earliest context): the last protein is the one analysed
        cropped = len(residues) + 2 - limit
        residues = residues[cropped:]
        kept = [(a - cropped, b - cropped) for a, b in segments if b > cropped]
        proteins = proteins[len(segments) - len(kept) :]
        segments = [(max(a, 0), b) for a, b in kept]
        if len(segments) == 1:  # nothing of the others fits: no joined window to analyse
            raise ConfigError(
                f"join: only the last protein ({proteins[-1].id}, {last} residues) fits in "
                f"{limit} tokens with truncate=true: no homolog before it (plot it alone, or "
                "use a model with longer windows)"
            )
    name = proteins[-1].id if len(proteins) == 1 else f"{proteins[-1].id}+{len(proteins) - 1}"
    joined = Protein(name, f"{len(proteins)} proteins joined", residues, cropped)
    return joined, segments, proteins
