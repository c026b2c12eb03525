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

import dataclasses
import logging
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from protein_performer.data.alphabet import Alphabet, default_alphabet
from protein_performer.data.batching import (
    FixedBatchSampler,
    ShardedBatchSampler,
    TokenBudgetBatchSampler,
)
from protein_performer.data.cluster import read_members
from protein_performer.data.config import CROPS, DEFAULT_MAX_LENGTH, MODES, DataConfig
from protein_performer.data.datamodule_settings import check_data_given, usable_workers
from protein_performer.data.datasets import (
    ClusterCropDataset,
    ConcatWindowDataset,
    CropDataset,
    EpochDataset,
    PairDataset,
)
from protein_performer.data.digests import DuplicateFinder, digest64
from protein_performer.data.homolog_hits import HitPartners, check_regions, read_hit_partners
from protein_performer.data.masking import make_collator
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
    leave_stop_signals_to_main,
    register_exit_hook,
)
from protein_performer.errors import ConfigError, DataError

log = logging.getLogger(__name__)

__all__ = [
    "CROPS",
    "DEFAULT_MAX_LENGTH",
    "MODES",
    "ProteinDataModule",
]  # the first three: their old place
SPLIT_NAMES = ("train", "val", "test")
_STAGE_SPLITS: dict[str | None, tuple[str, ...]] = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("test",),
    None: SPLIT_NAMES,
}


_FIELDS = frozenset(f.name for f in dataclasses.fields(DataConfig))


def _settings(config: DataConfig | None, settings: Mapping[str, Any]) -> DataConfig:
    """A copy of ``config`` with ``settings`` (DataConfig's fields given as arguments) over
    it; without a config, ``max_length`` left unset is the mode's default."""
    unknown = sorted(set(settings) - _FIELDS)
    if unknown:
        raise TypeError(f"ProteinDataModule() got an unexpected keyword argument {unknown[0]!r}")
    if config is not None and not isinstance(config, DataConfig):
        raise ConfigError(f"config must be a DataConfig; got {type(config).__name__}")
    return dataclasses.replace(config or DataConfig(max_length=None), **settings)  # type: ignore[arg-type]


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
        config: the data settings (:class:`~protein_performer.data.config.DataConfig`, what
            a run's ``data`` section holds); unset: its defaults, with ``max_length`` the
            mode's (1024 for crop, 8192 for concat).
        **settings: any of :class:`~protein_performer.data.config.DataConfig`'s fields, given
            here instead of (or over) ``config``: ``files``, ``val_files``, ``test_files``,
            ``shards``, ``split_fractions``, ``mode``, ``max_length`` (None: the mode's),
            ``toks_per_batch``, ``mask_prob``, ``clusters`` (also a mapping record id ->
            cluster id), ``packing``, ...
        objective: ``"mlm"`` or ``"causal"``.
        crop: crop mode's treatment of proteins longer than ``max_length``: ``random`` (one
            seeded window each) or ``sliding`` (cut into consecutive windows: every residue
            is in exactly one item).
        pair_align: pairs packing: training batches carry ``align_to`` (the partner position
            aligned to each of the protein's residues), for an attention-supervision loss.
        train_source, val_source, test_source: in-memory sources; override everything else.
        persistent_workers, pin_memory: DataLoader settings.
        find_copies: reading the val/test part of ``files`` split by hash, also find its
            records identical to a training record (only hashed as they go by, 8 bytes a
            record): ``copies[split]`` = ``(indices, source)`` (evaluate says how many).
        progress: show a progress bar while reading FASTA.
        alphabet: vocabulary (default: the project's).
    """

    def __init__(
        self,
        config: DataConfig | None = None,
        *,
        objective: str = "mlm",
        crop: str = "random",
        pair_align: bool = False,
        train_source: FlatSource | None = None,
        val_source: FlatSource | None = None,
        test_source: FlatSource | None = None,
        persistent_workers: bool = True,
        pin_memory: bool = False,
        find_copies: bool = False,
        progress: bool = False,
        alphabet: Alphabet | None = None,
        **settings: Any,
    ) -> None:
        super().__init__()
        cfg = _settings(config, settings)
        cfg.validate("", objective=objective, crop=crop, pair_align=pair_align)
        self.config = cfg
        self.files, self.val_files, self.test_files = (
            [os.fspath(p) for p in paths] or None if paths else None
            for paths in (cfg.files, cfg.val_files, cfg.test_files)
        )
        self.shards = None if cfg.shards in (None, "") else os.fspath(cfg.shards)
        self._sources = {"train": train_source, "val": val_source, "test": test_source}
        check_data_given(self._sources, self.files, self.val_files, self.test_files, self.shards)
        self.split_fractions = parse_fractions(cfg.split_fractions)
        self.split_seed = int(cfg.split_seed)
        self.objective, self.mode, self.crop = objective, cfg.mode, crop
        self.max_length = int(cfg.max_length or DEFAULT_MAX_LENGTH[cfg.mode])
        self.toks_per_batch = int(cfg.toks_per_batch)
        self.batch_size = None if cfg.batch_size is None else int(cfg.batch_size)
        self.mask_prob = float(cfg.mask_prob)
        self.seed = int(cfg.seed)
        self.num_workers = usable_workers(cfg.num_workers)
        self.persistent_workers = bool(persistent_workers)
        self.pin_memory = bool(pin_memory)
        self.invalid = cfg.invalid
        self.strip_gaps = bool(cfg.strip_gaps)
        self.split_by, self.sample, self.packing = cfg.split_by, cfg.sample, cfg.packing
        self.min_members, self.family_spread = int(cfg.min_members), int(cfg.family_spread)
        self.pair_copy, self.pair_alone = float(cfg.pair_copy), float(cfg.pair_alone)
        self.pair_align, self.pair_mask = bool(pair_align), cfg.pair_mask
        self.pair_fill, self.pair_partners = bool(cfg.pair_fill), int(cfg.pair_partners)
        self.pair_homologs = cfg.pair_homologs
        self.pair_columns = bool(cfg.pair_columns)
        self.pair_column_crop = cfg.pair_column_crop
        self.clusters = cfg.clusters
        self._cluster_of: Mapping[str, str] | None = None
        # split -> (records, items, records cut) when crop="sliding" cut long records
        self.windows: dict[str, tuple[int, int]] = {}
        # per split, what building it dropped, packed or rewrote (said in the run's header)
        self.notes: dict[str, list[str]] = {}
        self.allow_nucleotide = bool(cfg.allow_nucleotide)
        self.find_copies = bool(find_copies)
        self.copies: dict[str, tuple[np.ndarray, FlatSource]] = {}
        self.max_records = None if cfg.max_records is None else int(cfg.max_records)
        self.val_max_records = None if cfg.val_max_records is None else int(cfg.val_max_records)
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
            hits = self._hit_partners(source, split)
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
                hits=hits,
                columns=self.pair_columns,
                mask_prob=self.mask_prob,
                column_crop=self.pair_column_crop,
            )
            if hits is not None:
                self._note(
                    split,
                    f"pair_homologs: {ds.n_with_hits:,} of {len(source):,} proteins have search "
                    f"hits in this split ({len(hits.target):,} hits; {hits.dropped:,} rows of "
                    "the table left out: into other splits or not read here); the others draw "
                    "partners from their cluster",
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

    def _hit_partners(self, source: FlatSource, split: str) -> HitPartners | None:
        """The search hits among ``source``'s records (``pair_homologs``), or None."""
        if self.pair_homologs is None:
            return None
        if source.ids is None:
            raise ConfigError("data.pair_homologs needs record ids (FASTA input, not shards)")
        hits = read_hit_partners(self.pair_homologs, source.ids)
        check_regions(hits, source.lengths, self.pair_homologs)
        return hits

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
            register_exit_hook()
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
