"""What evaluate covers and how (its public helpers): the split's copies of training records, repeated ids, the context file, the scope note, packing and cropping, the unigram baseline, the homolog-context targets."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from protein_performer.config.schema import EvalConfig
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, Alphabet
from protein_performer.data.cluster import read_members
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.data.msa import GAP, MSA, no_homolog_error, read_msa
from protein_performer.data.sources import FlatSource, load_fasta_source
from protein_performer.errors import ConfigError, DataError
from protein_performer.evaluation.context_perplexity import Target, cluster_targets, fixed_targets
from protein_performer.model.metrics import MLM_INPUT_KINDS, perplexity
from protein_performer.utils.paths import require_file

log = logging.getLogger(__name__)


def training_copies(dm: ProteinDataModule, split: str) -> str | None:
    """How many records of the held-out part ``split`` are identical to a training record
    (``find_copies``: two strains' copies under two ids, which a split by record puts on both
    sides), said and returned; None when there are none."""
    found = dm.copies.get(split)
    if found is None or not len(found[0]):
        return None
    shared, source = found
    problem = (
        f"{len(shared):,} of {len(source):,} {split} records are identical to a training "
        f"sequence (e.g. {source.record_id(int(shared[0]))}): their metrics are not held out "
        "(the run split by record; data.split_by=cluster keeps such copies on one side)"
    )
    log.warning("%s", problem)
    return problem


def same_files(given: Sequence[str], stored: Sequence[str] | None) -> bool:
    """Whether ``given`` names the files of ``stored`` (a checkpoint's, absolute): by any
    path that leads to them, or moved (the same file names: what "give fasta=" asks for when
    they are not where the run read them)."""
    if not stored:
        return False
    if sorted(map(os.path.realpath, given)) == sorted(map(os.path.realpath, stored)):
        return True
    return sorted(map(os.path.basename, given)) == sorted(map(os.path.basename, stored))


def training_files(given: Sequence[str], stored: Sequence[str] | None) -> list[str]:
    """The files of ``given`` that are files the training run read (``stored``, a
    checkpoint's, absolute): by any path that leads to them (a symlink, a relative one), or by
    file name (the run's files moved, or the shipped checkpoints' read on another machine)."""
    trained = {os.path.realpath(f) for f in stored or []}
    names = {os.path.basename(f) for f in stored or []}
    return [f for f in given if os.path.realpath(f) in trained or os.path.basename(f) in names]


def warn_repeated_ids(source: Any, cfg: EvalConfig) -> None:
    """A record id given twice is said (training says it too): scored twice, and with
    ``context=cluster`` each copy is the other's homolog."""
    ids = getattr(source, "ids", None)
    if not ids:
        return
    counts = Counter(ids)
    repeats = sum(n - 1 for n in counts.values() if n > 1)
    if repeats:
        example = next(rid for rid, n in counts.items() if n > 1)
        log.warning(
            "%d of %d evaluated records repeat an earlier record's id (e.g. %s): the same "
            "protein given twice?%s",
            repeats,
            len(ids),
            example,
            " With context=cluster each is the other's homolog."
            if cfg.context == "cluster"
            else "",
        )


def check_context_file(path: str) -> None:
    """``context=``: ``cluster`` or a FASTA file; a near miss says what was meant."""
    p = Path(path)
    if not p.exists() and path.strip().lower() in ("cluster", "clusters"):
        raise ConfigError(f"context={path}: did you mean context=cluster?")
    if p.is_dir() and (p / "members.tsv").is_file():
        raise ConfigError(
            f"context={path} is a clusters folder: context=cluster clusters={path} scores each "
            "protein after its own cluster's members"
        )
    require_file(path, "context")


def scope_note(
    cfg: EvalConfig,
    stored: Mapping[str, Any],
    fasta: Sequence[str],
    run_cap: int | None,
    objective: str = "mlm",
) -> str | None:
    """What the scored records are, where it is not what a reader assumes: ``split=train``
    (trained on); the run's ``data.max_records`` applied before its split; no ``split=`` on
    a file the checkpoint's run trained on (most of its records were)."""
    notes = []
    if cfg.mask_prob is not None and objective == "causal":
        notes.append("mask_prob has no effect on a causal checkpoint (nothing is masked)")
    if cfg.split == "train":
        notes.append("split=train: proteins of the run's training split, not held out")
    if run_cap:
        notes.append(
            f"as in the training run, only the first {run_cap:,} records of the files were "
            f"read (its data.max_records) before the split"
        )
    if cfg.context == "cluster" and cfg.split and stored.get("split_by") == "record":
        notes.append(
            f"context=cluster takes homologs among the {cfg.split} records only; the run split "
            "by record, so most cluster members sit in its training split and only proteins "
            "with a member in this part are scored with context"
        )
    if not cfg.split and stored.get("split_by") in ("record", "cluster"):
        shared = training_files(fasta, stored.get("files"))
        if shared:
            notes.append(
                f"{', '.join(shared)}: the training run's data, and without split= every "
                "record is scored, most of them trained on (split=test scores the run's "
                "held-out part)"
            )
    return "; ".join(notes) or None


def eval_packing(
    cfg: EvalConfig, stored: Mapping[str, Any], mode: str
) -> tuple[str, str | None, str | None]:
    """``(packing, words, clusters table)`` of evaluate's concat windows: with ``split=`` (the
    run's own files) family packing when the training run packed by family and its clusters
    table (or ``clusters=``) is here, so that ``split=val`` measures what the run's validation
    did; stream packing otherwise (other files need not be in the run's table), said."""
    if mode != "concat":
        return "stream", None, None
    trained = stored.get("packing")
    table = cfg.clusters or stored.get("clusters")
    run_table = stored.get("clusters")
    if cfg.split and cfg.context == "cluster" and run_table and Path(run_table).exists():
        table = run_table  # clusters= picks the context only (see _eval_split)
    if trained == "family" and cfg.split and table and Path(table).exists():
        spread = int(stored.get("family_spread") or 1)
        how = f", family_spread={spread}" if spread > 1 else ""
        return "family", f"concat, family packing ({table}{how}), as the training run", str(table)
    if trained == "family":
        why = (
            "without split= the files need not be the run's"
            if not cfg.split
            else "its clusters table is not here (clusters=DIR packs these the same way)"
        )
        return (
            "stream",
            f"concat, stream packing (proteins in a seeded order): the training run packed by "
            f"family; {why}",
            None,
        )
    return "stream", "concat, stream packing (proteins in a seeded order)", None


def unigram_summary(
    sums: torch.Tensor, kinds: torch.Tensor | None, counts_from: str
) -> dict[str, Any] | None:
    nll, n, correct = sums.tolist()
    if not n:
        return None
    out: dict[str, Any] = {
        "from": counts_from,
        "perplexity": perplexity(nll, n),
        "accuracy": correct / n,
        "mask_perplexity": None,
        "mask_accuracy": None,
    }
    if kinds is not None:
        m_nll, m_n, m_correct = kinds[MLM_INPUT_KINDS.index("mask")].tolist()
        if m_n:
            out["mask_perplexity"] = perplexity(m_nll, m_n)
            out["mask_accuracy"] = m_correct / m_n
    return out


def cropping_summary(
    dm: ProteinDataModule, split: str, mode: str, max_length: int
) -> dict[str, Any]:
    """How many records crop mode cut, and the share of residues inside the scored items."""
    ds = dm.datasets[split]
    if split in dm.windows:  # crop=sliding: every residue is in exactly one item
        records, items, cut = dm.windows[split]
        return {"records": records, "cropped": cut, "share": 1.0, "windows": items}
    if mode != "crop":
        return {"records": len(ds.source), "cropped": 0, "share": 1.0, "windows": None}
    lengths = ds.source.lengths
    total = int(lengths.sum())
    inside = int(np.minimum(lengths, max_length - 2).sum())
    return {
        "records": len(ds.source),
        "cropped": int(np.count_nonzero(lengths > max_length - 2)),
        "share": inside / total if total else 1.0,
        "windows": None,
    }


def context_targets(
    cfg: EvalConfig, source: Any, stored: dict[str, Any], alphabet: Alphabet, order: list[int]
) -> tuple[list[Target], str | None]:
    """The proteins ``context=`` scores, each with its context proteins, in ``order``, and
    what a context file held (None for ``context=cluster``)."""
    if cfg.context == "cluster":
        clusters = cfg.clusters or stored.get("clusters")
        if not clusters:
            raise ConfigError("context=cluster needs clusters=DIR (the output of `data cluster`)")
        try:
            cluster_of = read_members(clusters)
        except DataError as e:
            if cfg.clusters or not any(w in e.problem for w in ("not found", "no such file")):
                raise
            # the training run's table, which the user never named: say where it came from
            raise DataError(
                f"{e.problem}: the training run's clusters table is not here; give "
                "clusters=DIR (the output of `data cluster`)",
                path=e.path,
            ) from None
        ids = source.ids or []
        missing = [rid for rid in ids if rid not in cluster_of]
        if missing and len(missing) == len(ids):
            raise DataError(
                f"context=cluster: none of the {len(missing):,} evaluated records is in the "
                f"clusters table (e.g. {missing[0]}; the table lists ids such as "
                f"{next(iter(cluster_of))}): a table of other files?",
                path=clusters,
            )
        if missing:
            log.warning(
                "context=cluster: %s of %s evaluated records are not in the clusters table %s "
                "(e.g. %s); each is its own cluster, without context",
                f"{len(missing):,}",
                f"{len(ids):,}",
                clusters,
                missing[0],
            )
        targets = cluster_targets(
            source, cluster_of, min_members=cfg.context_min_members, order=order
        )
        if not targets:
            raise DataError(
                f"context=cluster: no evaluated protein has {cfg.context_min_members - 1} or "
                "more cluster members among the evaluated records",
                path=clusters,
            )
        return targets, None
    require_file(cfg.context, "context")
    proteins, note = context_file(cfg, alphabet, source)
    return fixed_targets(source, proteins, order=order), note


def context_file(
    cfg: EvalConfig, alphabet: Alphabet, source: FlatSource | None = None
) -> tuple[list[np.ndarray], str]:
    """The proteins of ``context=FILE`` (token ids) and what was read. An alignment is read as
    ``score context=`` reads it (:func:`~protein_performer.data.msa.read_msa`, its first record
    the query): its homologs, the query, copies of it, duplicates and rows without a residue in
    its columns left out, and those over ``cfg.context_max_identity`` identical to its query
    (all kept where every one is); one-line errors for a malformed one; a warning where its
    query is none of the records of ``source`` (the evaluated file). FASTA: every record."""
    msa = read_msa(cfg.context, None)  # an alignment's first record is its query
    kind = msa.format
    if kind != "fasta":
        rows = [  # named by id: the query, copies and duplicates are not counted here
            alphabet.clean_encode(seq, cfg.invalid, path=cfg.context, record_id=name)
            for name, seq in zip(msa.ids, msa.sequences, strict=True)
        ]
        encoded = [r.ids for r in rows]
        if not any(ids is not None for ids in encoded):
            raise no_homolog_error(msa)
        near, limit = np.zeros(len(encoded), bool), cfg.context_max_identity
        if limit is not None and msa.aligned:
            near = msa.identity() > limit
            if near.all():  # as score does: all over the limit, all kept (and said)
                log.warning("%s: every homolog is over %.0f%% identical to its query: all kept",
                            cfg.context, 100 * limit)  # fmt: skip
                near[:] = False
        proteins = [ids for ids, far in zip(encoded, ~near, strict=True) if ids is not None and far]
        if source is not None and not _holds_query(msa, source, alphabet):
            log.warning(
                "%s: the alignment's query %s is %s: its homologs are read before %s (fasta= "
                "the protein it aligns)",
                cfg.context,
                msa.query_id,
                "not the evaluated protein"
                if len(source) == 1
                else f"none of the {len(source):,} evaluated proteins",
                "it" if len(source) == 1 else "each of them",
            )
        n = msa.notes
        over = f"over {100 * limit:.0f}% identical to it" if limit is not None else ""
        gapped = ("row without residues in its columns", "rows without residues in its columns")
        left = {  # (said of one, of several): how many
            ("copy of it", "copies of it"): n.get("copies_of_wild_type_left_out", 0),
            (over, over): int(near.sum()),
            ("duplicate", "duplicates"): n.get("duplicates_left_out", 0),
            gapped: n.get("gap_only_rows", 0),
        }
        said = ", ".join(f"{v:,} {k[v != 1]}" for k, v in left.items() if v)
        return proteins, (
            f"{cfg.context}: {kind} alignment, {n['records_read']:,} records, {len(proteins):,} "
            f"homologs (its query{', ' + said if said else ''} left out)"
        )
    homologs = load_fasta_source(
        [cfg.context],
        policy=cfg.invalid,
        alphabet=alphabet,
        strip_gaps=cfg.strip_gaps,
        allow_nucleotide=cfg.allow_nucleotide,
    )
    if len(homologs) == 0:
        raise DataError("context: no records", path=cfg.context)
    return [homologs[i] for i in range(len(homologs))], f"{cfg.context}: {len(homologs):,} proteins"


def _holds_query(msa: MSA, source: FlatSource, alphabet: Alphabet) -> bool:
    """Whether a record of ``source`` is the alignment's query or holds it (a domain): its
    residues where the query has them in the alignment's columns, from some start."""
    residues = msa.query_codes < GAP
    at = msa.positions[residues] - (msa.positions[residues].min() if residues.any() else 0)
    want = alphabet.encode("".join(STANDARD_AMINO_ACIDS[c] for c in msa.query_codes[residues]))
    if not len(at):
        return True  # nothing to tell it by
    need = int(at.max()) + 1
    for i in range(len(source)):
        record = source[i]
        if len(record) < need:
            continue
        starts = np.flatnonzero(record[: len(record) - need + 1] == want[0])
        if any(np.array_equal(record[s + at], want) for s in starts):
            return True
    return False


def drop_copies(targets: Sequence[Target]) -> int:
    """Leave out of each target's context the proteins identical to it (a copy of a protein
    is not a homolog of it: it would hand the model every residue); how many were left out."""
    left = 0
    for t in targets:
        own = np.asarray(t.residues)
        kept = [c for c in t.context if len(c) != len(own) or not np.array_equal(c, own)]
        left += len(t.context) - len(kept)
        t.context = kept
    return left
