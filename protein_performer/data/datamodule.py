"""``ProteinDataModule``: FASTA files, shards or in-memory sources → batched DataLoaders.

Data for each split comes from (first match wins): an in-memory ``*_source``; a shard
directory (``shards``); explicit per-split FASTA (``val_files``/``test_files``, with ``files``
the training set); or ``files`` split by hashing record ids with ``split_fractions`` and
``split_seed``. Only ``test_files`` is enough for evaluating an arbitrary FASTA.

Each rank gets a disjoint, equally long share of every epoch (see
:mod:`protein_performer.data.batching`); rank and world size come from the attached Trainer,
else from ``torch.distributed``, else 0/1. Build the Trainer with
``use_distributed_sampler=False`` (required with more than one device).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from protein_performer.data.alphabet import Alphabet, InvalidPolicy, default_alphabet
from protein_performer.data.batching import (
    FixedBatchSampler,
    ShardedBatchSampler,
    TokenBudgetBatchSampler,
)
from protein_performer.data.cluster import read_members
from protein_performer.data.datamodule_settings import (
    PathList,
    _check_data_given,
    _choice,
    _int,
    _paths,
    _probability,
    packing_settings,
    usable_workers,
)
from protein_performer.data.datasets import (
    ClusterCropDataset,
    ConcatWindowDataset,
    CropDataset,
    EpochDataset,
    PairDataset,
)
from protein_performer.data.digests import DuplicateFinder, digest64
from protein_performer.data.masking import OBJECTIVES, make_collator
from protein_performer.data.shards import ShardSource
from protein_performer.data.sources import (
    FlatSource,
    load_fasta_source,
    select_records,
    split_long_records,
)
from protein_performer.data.splits import parse_fractions
from protein_performer.data.worker_loaders import (
    WorkerTrackingDataLoader,
    _register_exit_hook,
    leave_stop_signals_to_main,
)
from protein_performer.errors import ConfigError, DataError

log = logging.getLogger(__name__)

MODES = ("crop", "concat")
CROPS = ("random", "sliding")
DEFAULT_MAX_LENGTH = {"crop": 1024, "concat": 8192}
SPLIT_NAMES = ("train", "val", "test")
_STAGE_SPLITS: dict[str | None, tuple[str, ...]] = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("test",),
    None: SPLIT_NAMES,
}


def _head(source: FlatSource, n: int | None) -> FlatSource:
    """The first ``n`` records of ``source`` (views, no copy)."""
    if n is None or n >= len(source):
        return source
    end = int(source.offsets[n])
    ids = None if source.ids is None else list(source.ids[:n])
    head = FlatSource(source.tokens[:end], source.offsets[: n + 1], ids, source.alphabet)
    head.encode_counts = source.encode_counts  # what reading the input skipped or replaced
    return head


def _sequence_digests(source: FlatSource) -> np.ndarray:
    """A 64-bit digest of every record's tokens, ``(n,)`` uint64."""
    tokens, offsets = source.tokens, source.offsets
    return np.fromiter(
        (digest64(tokens[offsets[i] : offsets[i + 1]].tobytes()) for i in range(len(source))),
        dtype=np.uint64,
        count=len(source),
    )


def identical_records(source: FlatSource, train_digests: np.ndarray) -> np.ndarray:
    """Indices of ``source``'s records whose tokens equal a training record's
    (``train_digests``: :func:`sequence_digests` of the training records, sorted unique)."""
    return np.flatnonzero(np.isin(_sequence_digests(source), train_digests))


def sequence_digests(source: FlatSource) -> np.ndarray:
    """The sorted distinct 64-bit digests of ``source``'s records (see
    :func:`identical_records`)."""
    return np.unique(_sequence_digests(source))


def _families_of_at_least(
    source: FlatSource,
    groups: list[np.ndarray],
    min_members: int,
    note: Callable[[str], None] | None = None,
) -> tuple[FlatSource, list[np.ndarray]]:
    """``source`` restricted to the groups of at least ``min_members`` records, and those
    groups renumbered into the new source (order kept)."""
    kept = [g for g in groups if len(g) >= min_members]
    if not kept:
        raise ConfigError(
            f"min_members={min_members}: no cluster of the training split has that many members"
        )
    records = np.concatenate(kept)
    if note is not None:
        note(
            f"min_members={min_members} keeps {len(kept):,} of {len(groups):,} clusters "
            f"({len(records):,} of {len(source):,} proteins, "
            f"{int(source.lengths[records].sum()):,} of {source.n_residues:,} residues)"
        )
    sizes = np.array([len(g) for g in kept], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    renumbered = [np.arange(s, s + n, dtype=np.int64) for s, n in zip(starts, sizes, strict=True)]
    return select_records(source, records), renumbered


class ProteinDataModule(pl.LightningDataModule):
    """Protein LM data: datasets, token-budget batching, MLM/causal targets, DDP sharding.

    Batches are dicts ``input_ids`` ``(B, L)`` int64, ``labels`` ``(B, L)`` int64 (-100 =
    ignore) and ``padding_mask`` ``(B, L)`` bool (True at padding).

    Args:
        files: FASTA paths; hash-split into train/val/test, or the train set only when
            ``val_files`` or ``test_files`` is given.
        val_files, test_files: explicit FASTA per split.
        shards: preprocessed shard directory (``protein-performer data preprocess``); overrides
            files.
        train_source, val_source, test_source: in-memory sources; override everything else.
        split_fractions, split_seed: hash split of ``files``.
        objective: ``"mlm"`` or ``"causal"``.
        mode: ``"crop"`` (one protein per row, ``<cls> … <eos>``) or ``"concat"`` (fixed
            windows of a ``<sep>``-joined stream).
        max_length: tokens per row; None means 1024 for crop, 8192 for concat.
        toks_per_batch: budget on ``rows * longest row`` (crop mode).
        batch_size: fixed rows per batch instead of the budget; in concat mode None means
            ``max(1, toks_per_batch // max_length)``.
        mask_prob: MLM selection rate.
        seed: seed of crops, concat order, batch shuffling and masks.
        num_workers, persistent_workers, pin_memory: DataLoader settings.
        invalid: invalid residue policy for FASTA (``error``/``skip``/``replace``).
        strip_gaps: remove alignment gaps (``-``, ``.``) from FASTA sequences first.
        allow_nucleotide: read records that look like DNA/RNA (an error by default).
        clusters: ``data cluster``'s output directory (or its members.tsv, or a mapping
            record id -> cluster id); needed by ``split_by="cluster"`` and cluster sampling.
        split_by: ``record`` (hash each record's key) or ``cluster`` (hash its cluster: whole
            clusters land in one split, no homolog of a test protein in training).
        sample: training items: ``record`` (every protein once per epoch), ``cluster`` (one
            random member per cluster per epoch) or ``cluster_sqrt`` (sqrt(size) draws).
        packing: concat mode's window filling: ``stream`` (proteins in a random order) or
            ``family`` (members of one cluster back to back, then the next cluster; needs
            ``clusters``) or ``copy`` (training windows hold every protein twice in a row: a
            retrieval curriculum; evaluation windows are stream-packed), see
            :class:`~protein_performer.data.datasets.ConcatWindowDataset`. Crop mode's
            ``pairs``: each training row is a protein after one member of its cluster
            (:class:`~protein_performer.data.datasets.PairDataset`; evaluation rows hold one
            protein, as in plain crop mode).
        min_members: family and pairs packing, training split only: clusters with fewer
            members (in that split) are left out of training, so that every protein but the
            first of its family has a homolog before it (a context-learning curriculum; the
            left-out proteins are logged). Validation and test keep every record. 1: keep all.
        family_spread: family packing: interleave the members of this many consecutive
            clusters round-robin, so a protein's homologs sit ~this many proteins away with
            other clusters between (long-distance retrieval); 1: members back to back.
        pair_copy: pairs packing: probability that a protein's partner is itself (a copy, the
            easy case of retrieval) instead of another member of its cluster.
        pair_alone: pairs packing: probability that a training row holds the protein with no
            partner (keeps the model a single-protein model too).
        pair_align: pairs packing: training batches carry ``align_to`` (the partner position
            aligned to each of the protein's residues), for an attention-supervision loss.
        pair_mask: pairs packing: ``all`` (mask the whole row) or ``protein`` (mask only the
            protein after its partner: the partner stays whole, as context does at evaluation).
        pair_partners: pairs packing: up to this many homologs before each protein, how many
            drawn per row (1: one partner).
        pair_fill: pairs packing: fill each row with a partner to ``max_length`` with proteins
            of other clusters, the partner at a random place among them (rows alone stay alone).
        crop: crop mode's treatment of proteins longer than ``max_length``: ``random`` (one
            seeded window each) or ``sliding`` (cut into consecutive windows: every residue
            is in exactly one item).
        max_records: read at most this many FASTA records for training (before the hash
            split, so it also bounds val/test of a hash split); also caps shard/source train
            sets.
        val_max_records: cap on val/test records (None: no cap).
        find_copies: reading the val/test part of ``files`` split by hash, also find its
            records identical to a training record (only hashed as they go by, 8 bytes a
            record): ``copies[split]`` = ``(indices, source)`` (evaluate says how many).
        progress: show a progress bar while reading FASTA.
        alphabet: vocabulary (default: the project's).
    """

    def __init__(
        self,
        *,
        files: PathList = None,
        val_files: PathList = None,
        test_files: PathList = None,
        shards: str | os.PathLike | None = None,
        train_source: FlatSource | None = None,
        val_source: FlatSource | None = None,
        test_source: FlatSource | None = None,
        split_fractions: Sequence[float] | str = (0.9, 0.05, 0.05),
        split_seed: int = 0,
        objective: str = "mlm",
        mode: str = "crop",
        max_length: int | None = None,
        toks_per_batch: int = 16384,
        batch_size: int | None = None,
        mask_prob: float = 0.15,
        seed: int = 0,
        num_workers: int = 0,
        persistent_workers: bool = True,
        pin_memory: bool = False,
        invalid: str = "error",
        max_records: int | None = None,
        val_max_records: int | None = None,
        find_copies: bool = False,
        progress: bool = False,
        alphabet: Alphabet | None = None,
        strip_gaps: bool = False,
        allow_nucleotide: bool = False,
        crop: str = "random",
        clusters: str | os.PathLike | Mapping[str, str] | None = None,
        split_by: str = "record",
        sample: str = "record",
        packing: str = "stream",
        min_members: int = 1,
        family_spread: int = 1,
        pair_copy: float = 0.0,
        pair_alone: float = 0.0,
        pair_align: bool = False,
        pair_mask: str = "all",
        pair_fill: bool = False,
        pair_partners: int = 1,
    ) -> None:
        super().__init__()
        self.files = _paths("files", files)
        self.val_files = _paths("val_files", val_files)
        self.test_files = _paths("test_files", test_files)
        self.shards = None if shards in (None, "") else os.fspath(shards)
        self._sources = {"train": train_source, "val": val_source, "test": test_source}
        _check_data_given(self._sources, self.files, self.val_files, self.test_files, self.shards)
        try:
            self.split_fractions = parse_fractions(split_fractions)
        except ValueError as e:
            raise ConfigError(f"split_fractions: {e}") from None
        self.split_seed = _int("split_seed", split_seed, 0)
        self.objective = _choice("objective", objective, OBJECTIVES)
        self.mode = _choice("mode", mode, MODES)
        min_len = 3 if self.mode == "crop" else 2
        self.max_length = (
            DEFAULT_MAX_LENGTH[self.mode]
            if max_length is None
            else _int("max_length", max_length, min_len)
        )
        self.toks_per_batch = _int("toks_per_batch", toks_per_batch, 1)
        self.batch_size = _int("batch_size", batch_size, 1, optional=True)
        self.mask_prob = _probability("mask_prob", mask_prob, zero=False)
        self.seed = _int("seed", seed, 0)
        self.num_workers = usable_workers(num_workers)
        self.persistent_workers = bool(persistent_workers)
        self.pin_memory = bool(pin_memory)
        self.invalid = _choice("invalid", invalid, [p.value for p in InvalidPolicy])
        self.strip_gaps = bool(strip_gaps)
        self.crop = _choice("crop", crop, CROPS)
        p = packing_settings(
            mode=self.mode, crop=self.crop, shards=self.shards, clusters=clusters,
            split_by=split_by, sample=sample, packing=packing, min_members=min_members,
            family_spread=family_spread, pair_copy=pair_copy, pair_alone=pair_alone,
            pair_align=pair_align, pair_mask=pair_mask, pair_fill=pair_fill,
        )  # fmt: skip
        self.split_by, self.sample, self.packing = p.split_by, p.sample, p.packing
        self.min_members, self.family_spread = p.min_members, p.family_spread
        self.pair_copy, self.pair_alone, self.pair_align = p.pair_copy, p.pair_alone, p.pair_align
        self.pair_mask, self.pair_fill = p.pair_mask, p.pair_fill
        if pair_partners != 1 and self.packing != "pairs":
            raise ConfigError("pair_partners needs packing=pairs (the homologs before a protein)")
        self.pair_partners = pair_partners  # checked by PairDataset
        self.clusters = clusters
        self._cluster_of: Mapping[str, str] | None = None
        # split -> (records, items, records cut) when crop="sliding" cut long records
        self.windows: dict[str, tuple[int, int]] = {}
        # per split, what building it dropped, packed or rewrote (said in the run's header)
        self.notes: dict[str, list[str]] = {}
        self.allow_nucleotide = bool(allow_nucleotide)
        self.find_copies = bool(find_copies)
        self.copies: dict[str, tuple[np.ndarray, FlatSource]] = {}
        self.max_records = _int("max_records", max_records, 1, optional=True)
        self.val_max_records = _int("val_max_records", val_max_records, 1, optional=True)
        self.progress = bool(progress)
        self.alphabet = alphabet or default_alphabet()
        if (
            self.mode == "crop"
            and self.batch_size is None
            and self.toks_per_batch < self.max_length
        ):
            log.warning(
                "toks_per_batch=%d < max_length=%d: the longest rows get a batch of their own "
                "that exceeds the budget",
                self.toks_per_batch,
                self.max_length,
            )
        self.collator = make_collator(
            self.objective, self.alphabet, mask_prob=self.mask_prob, seed=self.seed
        )
        self.datasets: dict[str, EpochDataset] = {}
        self._reported: set[tuple[str, ...]] = set()
        self._train_digests: np.ndarray | None = None

    # ---- loading --------------------------------------------------------------------------
    def _load_source(self, split: str) -> FlatSource | None:
        cap = self.max_records if split == "train" else self.val_max_records
        explicit = self.val_files is not None or self.test_files is not None
        if self._sources[split] is not None:
            src = _head(self._sources[split], cap)
        elif self.shards is not None:
            src = _head(
                ShardSource.open(self.shards, split, alphabet=self.alphabet, load_ids=False), cap
            )
        elif explicit:
            paths = {"train": self.files, "val": self.val_files, "test": self.test_files}[split]
            if paths is None:
                return None
            src = self._read_fasta(paths, None, cap)
        elif self.files is not None:
            src = _head(self._read_fasta(self.files, split, self.max_records), cap)
            if split in self.copies:  # of the records kept (val_max_records)
                shared = self.copies[split][0]
                self.copies[split] = (shared[shared < len(src)], src)
        else:
            return None
        self.alphabet.check_compatible(src.alphabet.to_dict(), where=f"{split} data")
        return src

    @property
    def cluster_of(self) -> Mapping[str, str]:
        """Record id -> cluster id (read once from ``clusters``)."""
        if self._cluster_of is None:
            if isinstance(self.clusters, Mapping):
                self._cluster_of = self.clusters
            else:
                self._cluster_of = read_members(self.clusters)  # type: ignore[arg-type]
        return self._cluster_of

    def _clusters_of_source(self, source: FlatSource, split: str | None = None) -> list[np.ndarray]:
        if source.ids is None:
            what = f"sample={self.sample}" if self.sample != "record" else f"packing={self.packing}"
            raise ConfigError(f"{what} needs record ids (FASTA input, not shards)")
        groups: dict[str, list[int]] = {}
        table = self.cluster_of
        for i, rid in enumerate(source.ids):
            if rid not in table:
                raise DataError(
                    f"record {rid} is not in the clusters table (cluster the same files)",
                    path=self.clusters if not isinstance(self.clusters, Mapping) else None,
                )
            groups.setdefault(table[rid], []).append(i)
        if self.max_records is not None and split is not None:
            # the cap keeps the first records of the files: families are cut where it falls
            sizes = Counter(table.values())
            cut = sum(1 for cid, members in groups.items() if len(members) < sizes[cid])
            if cut:
                elsewhere = ", in another split" if self.split_by == "record" else ""
                self._note(
                    split,
                    f"data.max_records={self.max_records:,}: {cut:,} of {len(groups):,} clusters "
                    f"have members in the table that are not here (after the cap{elsewhere}, "
                    "or in files not given)",
                )
        return [np.asarray(v, dtype=np.int64) for v in groups.values()]

    def _read_fasta(self, paths: list[str], split: str | None, cap: int | None) -> FlatSource:
        source = load_fasta_source(
            paths,
            split=split,
            fractions=self.split_fractions,
            seed=self.split_seed,
            policy=self.invalid,
            max_records=cap,
            alphabet=self.alphabet,
            progress=self.progress,
            strip_gaps=self.strip_gaps,
            allow_nucleotide=self.allow_nucleotide,
            cluster_of=self.cluster_of if self.split_by == "cluster" else None,
            copies_from="train" if self.find_copies and split in ("val", "test") else None,
        )
        if getattr(source, "copies", None) is not None:
            self.copies[split] = (source.copies, source)
        changes = source.encode_counts.changes() if source.encode_counts else None
        if changes and tuple(paths) not in self._reported:  # each split rereads the files
            self._reported.add(tuple(paths))
            log.warning("%s: invalid=%s: %s", ", ".join(paths), self.invalid, changes)
        return source

    def _make_dataset(self, source: FlatSource, split: str) -> EpochDataset:
        self.notes[split] = []
        train = split == "train"
        if self.mode == "crop" and self.crop == "sliding":
            n_records = len(source)
            n_long = int((source.lengths > self.max_length - 2).sum())
            source = split_long_records(source, self.max_length - 2)
            self.windows[split] = (n_records, len(source), n_long)
        if self.mode == "crop" and train and self.sample != "record":
            clusters = self._clusters_of_source(source, split)
            ds = ClusterCropDataset(
                source,
                clusters,
                self.max_length,
                weighting=self.sample,
                seed=self.seed,
                train=train,
            )
            self._note(
                split,
                f"sample={self.sample}: {len(source):,} proteins in {len(clusters):,} clusters "
                f"-> {len(ds):,} items per epoch",
            )
            return ds
        if self.mode == "crop" and train and self.packing == "pairs":
            groups = self._clusters_of_source(source, split)
            if self.min_members > 1:
                source, groups = _families_of_at_least(
                    source, groups, self.min_members, lambda t: self._note(split, t)
                )
            ds = PairDataset(
                source,
                groups,
                self.max_length,
                copy_prob=self.pair_copy,
                alone_prob=self.pair_alone,
                align=self.pair_align,
                mask=self.pair_mask,
                fill=self.pair_fill,
                seed=self.seed,
                train=train,
                max_partners=self.pair_partners,
            )
            fill = ", among other clusters' proteins to max_length" if self.pair_fill else ""
            self._note(
                split,
                f"pairs packing: {len(source):,} proteins in {len(groups):,} clusters, each "
                f"after {self._partners_words()} (pair_copy={self.pair_copy:g}, pair_alone="
                f"{self.pair_alone:g}{fill}); {ds.n_alone:,} with no other member are paired "
                "with themselves",
            )
            return ds
        if self.mode == "crop":
            ds: EpochDataset = CropDataset(source, self.max_length, seed=self.seed, train=train)
            if ds.n_cropped:
                self._note(
                    split,
                    f"{ds.n_cropped:,} of {len(ds):,} proteins longer than max_length="
                    f"{self.max_length:,} tokens: "
                    + (
                        "a random window of each every epoch"
                        if train
                        else "one fixed (seeded) window of each"
                    ),
                )
            return ds
        groups = self._clusters_of_source(source, split) if self.packing == "family" else None
        if groups is not None and train and self.min_members > 1:
            source, groups = _families_of_at_least(
                source, groups, self.min_members, lambda t: self._note(split, t)
            )
        # copy packing is a training curriculum: evaluation windows hold each protein once
        repeat = 2 if self.packing == "copy" and train else 1
        ds = ConcatWindowDataset(
            source,
            self.max_length,
            seed=self.seed,
            train=train,
            groups=groups,
            repeat=repeat,
            spread=self.family_spread,  # > 1 only with family packing (checked above)
        )
        if groups is not None and groups and max(len(g) for g in groups) == 1:
            self._note(
                split,
                "every cluster here has one member: family packing is stream packing (no "
                "protein has a homolog in its window)",
            )
        if groups is not None and train and self.family_spread > len(groups):
            self._note(
                split,
                f"family_spread={self.family_spread:,} is more than the {len(groups):,} "
                "clusters: all of them are interleaved",
            )
        packing = "family" if groups is not None else ("copy" if repeat == 2 else "stream")
        how = f" of {len(groups):,} clusters" if groups is not None else ""
        if ds.keep_tail and len(ds):
            tail = f"last window {int(ds.lengths[-1]):,} tokens"
        else:
            share = ds.dropped_tokens / max(1, ds.total_tokens)
            tail = f"{ds.dropped_tokens:,} trailing tokens ({share:.1%}) left out each epoch"
        self._note(
            split,
            f"{packing} packing{how}: {len(source):,} proteins -> {len(ds):,} windows of "
            f"{self.max_length:,} tokens; {tail}",
        )
        return ds

    def _note(self, split: str, text: str) -> None:
        """What building ``split`` dropped, packed or rewrote, for the run's header
        (:attr:`notes`) and the log."""
        self.notes.setdefault(split, []).append(text)
        log.info("%s: %s", split, text)

    def _partners_words(self) -> str:
        if self.pair_partners == 1:
            return "a partner"
        return f"1 to {self.pair_partners} homologs (drawn per row)"

    def setup(self, stage: str | None = None) -> None:
        """Load the splits a stage needs (``fit``: train+val, ``validate``: val,
        ``test``/``predict``: test, None: every configured split)."""
        if stage not in _STAGE_SPLITS:
            choices = ", ".join(s for s in _STAGE_SPLITS if s)
            raise ConfigError(f"stage must be one of: {choices} or None; got {stage!r}")
        for split in _STAGE_SPLITS[stage]:
            if split in self.datasets:
                continue
            source = self._load_source(split)
            if source is not None:
                self._warn_repeats(split, source)
                self.datasets[split] = self._make_dataset(source, split)
        if stage == "fit":
            self._require("train")
            val = self.datasets.get("val")
            if val is not None and len(val) == 0 and not getattr(self, "_said_empty_val", False):
                self._said_empty_val = True  # setup("fit") runs again inside Trainer.fit
                if self.shards is not None:  # split when they were made: the manifest's
                    why = f"the shards' split, {self.shards}/manifest.json"
                elif self.split_fractions:
                    why = f"split_fractions={list(self.split_fractions)}"
                else:
                    why = "n/a"
                log.warning(
                    "the validation split is empty (%d proteins, %s): a training run gets no "
                    "validation metrics and no best checkpoint (last.ckpt holds its final "
                    "weights)",
                    len(val.source),
                    why,
                )

    def _warn_repeats(self, split: str, source: FlatSource) -> None:
        """Say when a record id repeats inside the training data, or when records of held-out
        files (``val_files``/``test_files``) are identical to training sequences: their metrics
        would not be held out (a hash or cluster split keeps equal ids and clusters apart by
        itself). Once per split; ``train`` is loaded first."""
        if ("repeats", split) in self._reported:
            return
        self._reported.add(("repeats", split))
        # held-out files (not shards, which data.files never override, nor given sources)
        explicit = self.shards is None and (
            self.val_files is not None or self.test_files is not None
        )
        if split == "train":
            ids = list(source.ids) if source.ids is not None else []
            dups = DuplicateFinder()
            for rid in ids:
                dups.add(rid)
            found = dups.result(max_examples=1)
            if found["count"]:
                log.warning(
                    "%d of %d training records repeat an earlier record's id (%s): the same "
                    "protein given twice?",
                    found["count"],
                    len(ids),
                    ids[found["examples"][0]["record"] - 1],
                )
            # a hash split by record puts the same protein under two ids (two strains) on
            # both sides too
            held_out = self.split_fractions is not None and sum(self.split_fractions[1:]) > 0
            by_record = self.shards is None and self.split_by == "record" and held_out
            if explicit or by_record:  # kept only to check held-out records (8 bytes a record)
                self._train_digests = sequence_digests(source)
            return
        if self._train_digests is None or self._sources[split] is not None:
            return
        shared = identical_records(source, self._train_digests)
        if len(shared):
            hint = "" if explicit else " (data.split_by=cluster keeps such copies on one side)"
            log.warning(
                "%d of %d %s records are identical to a training sequence (e.g. %s): their "
                "metrics are not held out%s",
                len(shared),
                len(source),
                split,
                source.record_id(int(shared[0])),
                hint,
            )

    def keep_records(
        self, split: str, records: Sequence[int], source: FlatSource | None = None
    ) -> None:
        """Rebuild ``split`` from its records ``records`` only (indices into ``source``: the
        split's whole records as loaded; default: its dataset's source, which ``crop=sliding``
        cut into windows, so give it then), in source order. The copies of training records
        found in it (``find_copies``) keep the ones kept."""
        if source is None:
            source = self._require(split).source
        records = np.unique(np.asarray(records, dtype=np.int64))
        if len(records) == len(source):  # all of them: the split as it is
            return
        kept = select_records(source, records)
        if split in self.copies:
            self.copies[split] = (np.flatnonzero(np.isin(records, self.copies[split][0])), kept)
        self.windows.pop(split, None)
        self.datasets[split] = self._make_dataset(kept, split)

    def _require(self, split: str) -> EpochDataset:
        ds = self.datasets.get(split)
        if ds is None:
            what = {
                "train": "files, shards or train_source",
                "val": "val_files, files, shards or val_source",
                "test": "test_files, files, shards or test_source",
            }[split]
            raise ConfigError(f"no {split} data configured: give {what}")
        if split == "train" and len(ds) == 0:
            raise ConfigError(
                f"the training set is empty ({len(ds.source)} proteins, mode={self.mode}, "
                f"max_length={self.max_length})"
            )
        return ds

    # ---- loaders --------------------------------------------------------------------------
    def distributed_info(self) -> tuple[int, int]:
        """``(rank, world_size)``: from the Trainer, else torch.distributed, else ``(0, 1)``."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            rank, world = int(trainer.global_rank), int(trainer.world_size)
            connector = getattr(trainer, "_accelerator_connector", None)
            if world > 1 and getattr(connector, "use_distributed_sampler", False):
                raise ConfigError(
                    "ProteinDataModule shards batches per rank itself: build the Trainer with "
                    "use_distributed_sampler=False"
                )
            return rank, world
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    def batch_sampler(self, split: str) -> ShardedBatchSampler:
        """This rank's batch sampler over ``split`` (shuffled per epoch for ``train`` only)."""
        ds = self._require(split)
        rank, world = self.distributed_info()
        shuffle = split == "train"
        sampler: ShardedBatchSampler
        if self.mode == "concat" or self.batch_size is not None:
            bs = self.batch_size or max(1, self.toks_per_batch // self.max_length)
            sampler = FixedBatchSampler(
                len(ds), bs, shuffle=shuffle, seed=self.seed, rank=rank, world_size=world
            )
        else:
            sampler = TokenBudgetBatchSampler(
                ds.lengths,
                self.toks_per_batch,
                shuffle=shuffle,
                seed=self.seed,
                rank=rank,
                world_size=world,
            )
        # evaluation metrics sum over ranks: batches repeated to even them out must not count
        sampler.score_repeats = split == "train"
        return sampler

    def _loader(self, split: str, stage: str) -> DataLoader:
        if split not in self.datasets:
            self.setup(stage)
        ds = self._require(split)
        if self.num_workers > 0:
            _register_exit_hook()
        return WorkerTrackingDataLoader(
            ds,
            batch_sampler=self.batch_sampler(split),
            collate_fn=self.collator,
            num_workers=self.num_workers,
            persistent_workers=self.persistent_workers and self.num_workers > 0,
            pin_memory=self.pin_memory,
            worker_init_fn=leave_stop_signals_to_main if self.num_workers > 0 else None,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", "fit")

    def val_dataloader(self) -> DataLoader | list:
        """Validation batches (same masks every epoch); ``[]`` when there is no val data."""
        if "val" not in self.datasets:
            self.setup("validate")
        if "val" not in self.datasets:
            return []
        return self._loader("val", "validate")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", "test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", "predict")
