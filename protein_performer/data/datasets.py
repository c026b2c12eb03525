"""Map-style datasets over a :class:`FlatSource`: cropped proteins or fixed concatenated windows.

Every random choice (crop start, protein order) is drawn from a generator keyed by
``(seed, epoch, index)``, so an item does not depend on the worker that builds it, on the
number of workers or on the order items are requested in.

Epochs. A key may be a plain index or an ``(index, epoch)`` pair. The batch samplers in
:mod:`protein_performer.data.batching` yield pairs, so the epoch travels with every request
from the main process to the workers (robust with persistent workers). For a plain index the
dataset uses its own epoch counter, set by :meth:`set_epoch` and held in a shared-memory tensor
that worker processes see too. Evaluation datasets (``train=False``) always use epoch 0.

Items are dicts ``{"tokens": (L,) int64 array, "index": int, "epoch": int}``; the collators in
:mod:`protein_performer.data.masking` turn a list of them into a batch. A cropped protein's item
also says where the window cuts it (``cut_start``: residues before the window, so its first
residue follows ``<cls>`` without its context; ``cut_end``: residues after, so its ``<eos>`` is
not the protein's end): a causal model is not asked to predict either.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from protein_performer.data.config import CLUSTER_SAMPLING, COLUMN_CROPS, PAIR_MASKS
from protein_performer.data.context_windows import (
    MIN_CONTEXT_RESIDUES,
    column_width,
    column_window,
    context_window,
    fit_members,
)
from protein_performer.data.homolog_hits import HitPartners
from protein_performer.data.pairwise_alignment import aligned_positions
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError

log = logging.getLogger(__name__)

Item = dict[str, Any]

# Stream tags keep the generators of different random choices independent.
TAG_CROP = 1
TAG_ORDER = 2
TAG_MASK = 3
TAG_BATCH = 4
TAG_MEMBER = 5
TAG_PAIR = 6
TAG_ALONE = 7
TAG_FILL = 8
TAG_BLIND = 9

_U64 = (1 << 64) - 1


def keyed_rng(tag: int, seed: int, epoch: int = 0, index: int = 0) -> np.random.Generator:
    """Generator determined only by ``(tag, seed, epoch, index)`` (any ints, reduced mod 2**64)."""
    return np.random.default_rng([int(k) & _U64 for k in (tag, seed, epoch, index)])


class EpochDataset(Dataset[Item]):
    """Base: seed, train/eval mode and a process-shared epoch counter."""

    def __init__(self, source: FlatSource, *, seed: int = 0, train: bool = True) -> None:
        self.source = source
        self.alphabet = source.alphabet
        self.seed = int(seed)
        self.train = bool(train)
        # Shared memory, so persistent workers see set_epoch() made in the main process.
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch: int) -> None:
        """Epoch used for plain integer keys (keys from our batch samplers carry their own)."""
        self._epoch[0] = int(epoch)

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    def __len__(self) -> int:
        raise NotImplementedError

    @staticmethod
    def _flags(key: int | tuple[int, ...]) -> dict[str, bool]:
        """``{"scored": False}`` for a sampler key ``(index, epoch, 0)`` (a batch repeated
        only to even out DDP ranks, see :mod:`~protein_performer.data.batching`), else ``{}``."""
        if isinstance(key, tuple) and len(key) > 2 and not key[2]:
            return {"scored": False}
        return {}

    def _resolve(self, key: int | tuple[int, ...]) -> tuple[int, int]:
        if isinstance(key, tuple):
            index, epoch = operator.index(key[0]), operator.index(key[1])
        else:
            index, epoch = operator.index(key), self.epoch
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for dataset of {n} items")
        return index, (epoch if self.train else 0)


class CropDataset(EpochDataset):
    """One protein per item: ``<cls> residues <eos>``, at most ``max_length`` tokens.

    A longer protein is cropped to a window of ``max_length - 2`` residues (``<cls>``/``<eos>``
    kept). Training crops start at a random offset drawn from ``(seed, epoch, index)``; eval
    crops (``train=False``) use the epoch-0 offset, i.e. a fixed random window per protein that
    is the same in every epoch (not biased to the N-terminus).

    Args:
        source: proteins (residue ids, no specials).
        max_length: tokens per item including the two specials (≥ 3); 1024 as in the
            Performer paper.
        seed: crop seed.
        train: random crop per epoch (True) or fixed crop (False).
    """

    def __init__(
        self, source: FlatSource, max_length: int = 1024, *, seed: int = 0, train: bool = True
    ) -> None:
        super().__init__(source, seed=seed, train=train)
        if int(max_length) < 3:
            raise ConfigError(f"max_length must be >= 3 for crop mode, got {max_length}")
        self.max_length = int(max_length)
        self.lengths: np.ndarray = np.minimum(source.lengths + 2, self.max_length)
        """``(n,)`` int64 token count of each item (what batching pads to)."""
        self.n_cropped = int(np.count_nonzero(source.lengths > self.max_length - 2))

    def __len__(self) -> int:
        return len(self.source)

    def crop_start(self, index: int, epoch: int) -> int:
        """First residue of the crop of record ``index`` in ``epoch`` (0 when not cropped)."""
        excess = int(self.source.lengths[index]) - (self.max_length - 2)
        if excess <= 0:
            return 0
        if not self.train:
            epoch = 0
        return int(keyed_rng(TAG_CROP, self.seed, epoch, index).integers(0, excess + 1))

    def _cropped(self, record: int, epoch: int) -> tuple[np.ndarray, dict[str, bool]]:
        """``<cls> residues <eos>`` of ``record``, cropped for ``epoch``, and where the window
        (or a piece of a longer protein, :func:`split_long_records`) leaves residues out:
        ``{"cut_start": True}`` before it, ``{"cut_end": True}`` after it, ``{}`` for neither."""
        residues = self.source[record]
        start = self.crop_start(record, epoch)
        stop = start + self.max_length - 2
        piece = self.source.cut
        cut = {
            "cut_start": start > 0 or (piece is not None and bool(piece[record, 0])),
            "cut_end": stop < len(residues) or (piece is not None and bool(piece[record, 1])),
        }
        residues = residues[start:stop]
        tokens = np.empty(len(residues) + 2, dtype=np.int64)
        tokens[0] = self.alphabet.cls_idx
        tokens[1:-1] = residues
        tokens[-1] = self.alphabet.eos_idx
        return tokens, {k: True for k, v in cut.items() if v}

    def __getitem__(self, key: int | tuple[int, ...]) -> Item:
        index, epoch = self._resolve(key)
        tokens, cut = self._cropped(index, epoch)
        return {"tokens": tokens, "index": index, "epoch": epoch, **self._flags(key), **cut}


class ClusterCropDataset(CropDataset):
    """Training on clusters (UniRef50 -> UniRef90-style, as ESM does): an item is a cluster
    and draws one of its members anew every epoch, keyed by ``(seed, epoch, item)``, then crops
    it like :class:`CropDataset`. So one large family is one item per epoch instead of one per
    member. ``weighting="cluster_sqrt"`` gives a cluster of ``n`` members ``round(sqrt(n))``
    items (a middle ground, each item drawing its own member).

    Args:
        source: the proteins.
        clusters: ``(n_clusters,)`` arrays of record indices into ``source``.
        weighting: ``cluster`` (one item per cluster) or ``cluster_sqrt``.
    """

    def __init__(
        self,
        source: FlatSource,
        clusters: list[np.ndarray],
        max_length: int = 1024,
        *,
        weighting: str = "cluster",
        seed: int = 0,
        train: bool = True,
    ) -> None:
        super().__init__(source, max_length, seed=seed, train=train)
        if weighting not in CLUSTER_SAMPLING:
            raise ConfigError(f"weighting must be one of {CLUSTER_SAMPLING}, got {weighting!r}")
        if not clusters or any(len(c) == 0 for c in clusters):
            raise ConfigError("every cluster needs at least one member")
        copies = [
            1 if weighting == "cluster" else max(1, round(float(np.sqrt(len(c))))) for c in clusters
        ]
        self.items: list[np.ndarray] = [
            c for c, k in zip(clusters, copies, strict=True) for _ in range(k)
        ]
        self.n_clusters = len(clusters)
        member_lengths = np.minimum(source.lengths + 2, self.max_length)
        # batching packs by these lengths: the longest member bounds what an item can hold
        self.lengths = np.array([int(member_lengths[m].max()) for m in self.items], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.items)

    def member(self, index: int, epoch: int) -> int:
        """The record that item ``index`` uses in ``epoch``."""
        members = self.items[index]
        if len(members) == 1:
            return int(members[0])
        pick = keyed_rng(TAG_MEMBER, self.seed, epoch if self.train else 0, index)
        return int(members[int(pick.integers(len(members)))])

    def __getitem__(self, key: int | tuple[int, ...]) -> Item:
        index, epoch = self._resolve(key)
        tokens, cut = self._cropped(self.member(index, epoch), epoch)
        return {"tokens": tokens, "index": index, "epoch": epoch, **self._flags(key), **cut}


class PairDataset(CropDataset):
    """Homolog pairs (``data.packing=pairs``): each item is ``<cls> partner <sep> protein <eos>``,
    the layout that ``evaluate context=cluster`` scores, so that a model learns to find the
    aligned residue in a homolog before the protein and copy it, substitutions and all.

    Every protein is the target of one item per epoch. Its partner is another member of its
    cluster, drawn anew every epoch from ``(seed, epoch, index)``; the protein itself (a copy:
    the easy case of retrieval, a curriculum) with probability ``copy_prob``, and always when its
    cluster has no other member. With probability ``alone_prob`` the row holds the protein with
    no partner (``<cls> protein <eos>``), so that the model stays a single-protein model too and
    its perplexity without homologs, the denominator of the context ratio, does not drift. The
    target is cropped to a random length in
    ``[half / 2, half]`` residues (``half = max_length // 2 - 2``, as the context evaluation
    crops) at a random start, so where its residues sit relative to the partner's varies (a
    fixed crop puts a copy at a fixed distance, which rotary positions find without reading
    content); a protein of at most ``half / 2`` residues is kept whole. The partner fills the rest of the row, cut
    around the same relative region when it is too long
    (:func:`~protein_performer.data.context_windows.context_window`). ``mask="protein"`` marks the
    item so that the collator masks only the protein (``"mask_from"``): the partner stays
    whole, as a homolog in context does at evaluation, and every prediction is one the partner
    can help with; ``mask="all"`` masks the row like any other.

    Args:
        source: proteins (residue ids, no specials).
        groups: ``(n_groups,)`` arrays of record indices that together hold every record once.
        max_length: tokens per row (≥ 33: room for a protein and a partner).
        copy_prob: probability that the partner is the protein itself.
        alone_prob: probability that the row has no partner (drawn apart from the partner, so
            the partners of the other rows do not change with it).
        align: give each item ``"align_to"``: ``(len(tokens),)`` int64, for each of the
            protein's residues the row position of the partner residue aligned to it (a local
            BLOSUM62 alignment,
            :func:`~protein_performer.data.pairwise_alignment.aligned_positions`), ``-1`` elsewhere:
            the target of an attention-supervision loss.
        mask: ``"all"`` or ``"protein"``: which part of the row the collator masks.
        max_partners: up to this many homologs before the protein: each row draws how many
            (1 to this, at most the cluster's other members) and which, so that a model learns
            to pool a family, as a profile does, not only to copy one partner. 1: a pair.
        fill: fill every row that has a partner to ``max_length`` tokens with proteins of other
            groups (drawn at random from ``(seed, epoch, index)``, the last cut to fit), the
            partner at a random place among them: the layout of ``evaluate context_fill=true``,
            where the partner has to be found among unrelated proteins. Rows alone stay alone.
        seed: seed of partners, crops and (through the collator) masks.
        train: a fresh draw every epoch (True) or the epoch-0 draw (False).
        hits: each protein's search hits among ``source``
            (:func:`~protein_performer.data.homolog_hits.read_hit_partners`): a protein with
            hits is placed after 1 to ``max_partners`` of them (how many drawn per row), drawn
            without replacement with :meth:`HitPartners.cluster_weights` (one cluster counts
            as one) and placed best hit first, each its hit region: rows that look like an
            alignment's rows. A protein without hits draws from its cluster as above.
        columns: rows read at their columns (``model.context_positions=columns``): the protein
            cropped to :attr:`column_width` residues (the most that ``max_partners`` homologs
            cut to the same columns leave room for), its masked positions drawn here
            (``mask_prob`` of them, the item's ``"mask_at"``), each homolog aligned to the crop
            with those residues unknown (``X``: as blind as a scored site) and cut to its
            residues aligned to the crop's columns, and every token given its column as its
            position (the item's ``"positions"``,
            :func:`~protein_performer.data.context_windows.column_window`). Needs
            ``mask="protein"``.
        mask_prob: with ``columns``, the share of the protein's residues masked.
        column_crop: with ``columns``, ``"partners"``: every row's crop is
            :attr:`column_width`; ``"drawn"``: the widest that leaves room for the homologs the
            row draws (:func:`~protein_performer.data.context_windows.column_width`), as the
            scorer crops a site for the homologs it has.
    """

    def __init__(
        self,
        source: FlatSource,
        groups: list[np.ndarray],
        max_length: int = 1024,
        *,
        copy_prob: float = 0.0,
        alone_prob: float = 0.0,
        align: bool = False,
        mask: str = "all",
        fill: bool = False,
        seed: int = 0,
        train: bool = True,
        max_partners: int = 1,
        hits: HitPartners | None = None,
        columns: bool = False,
        mask_prob: float = 0.15,
        column_crop: str = "partners",
    ) -> None:
        if (
            isinstance(max_partners, bool)
            or not isinstance(max_partners, (int, np.integer))
            or (max_partners < 1)
        ):
            raise ConfigError(f"max_partners must be a whole number >= 1, got {max_partners!r}")
        self.max_partners = int(max_partners)
        if self.max_partners > 1 and (fill or align):
            raise ConfigError("several partners do not work with fill or align (rows of two)")
        if mask not in PAIR_MASKS:
            raise ConfigError(f"mask must be one of {', '.join(PAIR_MASKS)}, got {mask!r}")
        if fill and align:
            raise ConfigError("align needs rows of two proteins; it does not work with fill")
        if columns and (fill or align or mask != "protein"):
            raise ConfigError("columns needs mask='protein' and works without fill or align")
        if not 0.0 < float(mask_prob) <= 1.0:
            raise ConfigError(f"mask_prob must be in (0, 1], got {mask_prob!r}")
        if column_crop not in COLUMN_CROPS:
            raise ConfigError(
                f"column_crop must be one of {', '.join(COLUMN_CROPS)}, got {column_crop!r}"
            )
        self.columns, self.mask_prob = bool(columns), float(mask_prob)
        self.column_crop = column_crop
        self.mask = mask
        self.fill = bool(fill)
        # the partner's budget is at least max_length - max_length // 2 tokens; below this a
        # partner of MIN_CONTEXT_RESIDUES would not fit and rows would hold the protein alone
        shortest = 2 * MIN_CONTEXT_RESIDUES + 1
        if int(max_length) < shortest:
            raise ConfigError(
                f"max_length must be >= {shortest} for pairs (room for a partner), got {max_length}"
            )
        super().__init__(source, max_length, seed=seed, train=train)
        if isinstance(copy_prob, bool) or not 0.0 <= float(copy_prob) <= 1.0:
            raise ConfigError(f"copy_prob must be a number in [0, 1], got {copy_prob!r}")
        self.copy_prob = float(copy_prob)
        if isinstance(alone_prob, bool) or not 0.0 <= float(alone_prob) <= 1.0:
            raise ConfigError(f"alone_prob must be a number in [0, 1], got {alone_prob!r}")
        self.alone_prob = float(alone_prob)
        self.align = bool(align)
        self.group_of = _group_numbers(groups, len(source))
        self.groups = [np.asarray(g, dtype=np.int64) for g in groups]
        self.half = self.max_length // 2 - 2
        longest = np.array([int(source.lengths[g].max()) for g in self.groups], dtype=np.int64)
        # batching packs by these lengths: target (at most half) + the longest partners + 3
        partners = np.minimum(
            np.array([len(g) - 1 for g in self.groups], dtype=np.int64), self.max_partners
        ).clip(min=1)
        bound = (
            np.minimum(source.lengths, self.half)
            + (longest * partners)[self.group_of]
            + partners[self.group_of]
            + 2
        )
        self.lengths = np.minimum(bound, self.max_length).astype(np.int64)
        if self.fill:
            if len(self.groups) < 2:
                raise ConfigError(
                    "fill needs proteins of at least two groups (fill is from others)"
                )
            self.lengths[:] = self.max_length
        self.n_alone = int(sum(len(g) for g in self.groups if len(g) == 1))
        self.hits = hits
        if hits is not None:
            self._use_hits(hits, source)
        #: the protein's crop in a columns row: max_partners homologs cut to it fit beside it
        self.column_width = column_width(self.max_length, self.max_partners)
        if self.columns:  # batches are packed by these: the crop and k homologs cut to it
            # "drawn": a row of fewer homologs crops wider, but never past the whole protein
            # or the window, so the protein's length bounds its crop
            widest = self.column_width if column_crop == "partners" else self.max_length
            keep = np.minimum(source.lengths, widest)
            sizes = np.array([len(self.groups[g]) - 1 for g in self.group_of], dtype=np.int64)
            k = np.minimum(sizes, self.max_partners)
            if hits is not None:
                counts = hits.counts()
                k = np.where(counts > 0, np.minimum(counts, self.max_partners), k)
            self.lengths = np.minimum(keep + k * (keep + 1) + 2, self.max_length).astype(np.int64)

    def _use_hits(self, hits: HitPartners, source: FlatSource) -> None:
        if len(hits) != len(source):
            raise ConfigError(f"hits are for {len(hits):,} records, the source has {len(source):,}")
        if (fill := self.fill) or self.align:
            raise ConfigError(f"hits do not work with {'fill' if fill else 'align'}")
        self.hit_weights = hits.cluster_weights(self.group_of)
        counts = hits.counts()
        has = counts > 0
        k = np.minimum(counts, self.max_partners)
        bound = np.minimum(source.lengths, self.half) + k * (hits.longest() + 1) + 2
        self.lengths[has] = np.minimum(bound[has], self.max_length)
        self.n_alone = int(sum(len(g) for g in self.groups if len(g) == 1 and not has[g[0]]))
        self.n_with_hits = int(has.sum())

    def hit_partners(self, index: int, epoch: int) -> list[int]:
        """Positions in :attr:`hits` of the hits placed before protein ``index`` in ``epoch``
        (best first; empty when it has none)."""
        if self.hits is None:
            return []
        lo, hi = int(self.hits.offsets[index]), int(self.hits.offsets[index + 1])
        if hi == lo:
            return []
        rng = keyed_rng(TAG_PAIR, self.seed, epoch if self.train else 0, index)
        count = int(rng.integers(1, min(self.max_partners, hi - lo) + 1))
        w = self.hit_weights[lo:hi]
        chosen = rng.choice(hi - lo, count, replace=False, p=w / w.sum())
        return [lo + int(c) for c in np.sort(chosen)]

    def partner_residues(self, index: int, epoch: int) -> list[np.ndarray]:
        """The residues placed before protein ``index`` in ``epoch``, in order (whole
        records, or hit regions when :attr:`hits` holds some for it)."""
        if self.alone(index, epoch):
            return []
        if self.hits is not None:
            drawn = self.hit_partners(index, epoch)
            if drawn:
                h = self.hits
                return [self.source[int(h.target[k])][h.start[k] : h.end[k]] for k in drawn]
        return [self.source[p] for p in self.partners(index, epoch)]

    def partners(self, index: int, epoch: int) -> list[int]:
        """The records placed before protein ``index`` in ``epoch``: :meth:`partner` alone, or
        with ``max_partners`` > 1 a drawn number of distinct other members of its cluster."""
        members = self.groups[int(self.group_of[index])]
        others = members[members != index]
        if self.max_partners == 1 or len(others) <= 1:
            return [self.partner(index, epoch)]
        rng = keyed_rng(TAG_PAIR, self.seed, epoch if self.train else 0, index)
        count = int(rng.integers(1, min(self.max_partners, len(others)) + 1))
        return [int(x) for x in rng.choice(others, count, replace=False)]

    def partner(self, index: int, epoch: int) -> int:
        """The record placed before protein ``index`` in ``epoch`` (``index`` itself: a copy)."""
        members = self.groups[int(self.group_of[index])]
        rng = keyed_rng(TAG_PAIR, self.seed, epoch if self.train else 0, index)
        if len(members) == 1 or rng.random() < self.copy_prob:
            return index
        k = int(rng.integers(len(members) - 1))
        others = members[members != index]
        return int(others[k])

    def alone(self, index: int, epoch: int) -> bool:
        """Whether protein ``index`` has no partner in ``epoch``'s row."""
        if self.alone_prob == 0.0:
            return False
        rng = keyed_rng(TAG_ALONE, self.seed, epoch if self.train else 0, index)
        return bool(rng.random() < self.alone_prob)

    def window(self, index: int, epoch: int) -> tuple[np.ndarray, int, int]:
        """``(tokens, start, n)``: the row, where the target's residues start and how many."""
        if not self.train:
            epoch = 0
        residues = self.source[index]
        n = len(residues)
        rng = keyed_rng(TAG_CROP, self.seed, epoch, index)
        keep = min(n, int(rng.integers(max(1, self.half // 2), self.half + 1)))
        first = int(rng.integers(0, n - keep + 1))
        anchor = first / (n - keep) if n > keep else 0.0
        partners = self.partner_residues(index, epoch)
        if self.fill and partners:
            partners = self._filled(index, epoch, partners[0], keep, anchor)
        tokens, start, _ = context_window(
            residues[first : first + keep],
            partners,
            self.alphabet,
            self.max_length,
            anchor=anchor,
        )
        return tokens, start, keep

    def _filled(
        self, index: int, epoch: int, partner: np.ndarray, keep: int, anchor: float
    ) -> list[np.ndarray]:
        """The partner (cut to fit as :func:`context_window` would) at a random place among
        proteins of other groups that fill the row to ``max_length``."""
        budget = self.max_length - keep - 2  # <cls> ... <eos> around the target
        partner_fit = fit_members([partner], budget, anchor=anchor)
        budget -= sum(len(p) + 1 for p in partner_fit)
        rng = keyed_rng(TAG_FILL, self.seed, epoch, index)
        own = self.group_of[index]
        drawn: list[np.ndarray] = []
        total = 0
        while total < budget:
            other = int(rng.integers(len(self.source)))
            if self.group_of[other] != own:
                drawn.append(self.source[other])
                total += len(drawn[-1]) + 1
        others = fit_members(drawn, budget)
        at = int(rng.integers(len(others) + 1))
        return [*others[:at], *partner_fit, *others[at:]]

    def column_row(self, index: int, epoch: int) -> Item:
        """The ``columns`` row of protein ``index``: ``tokens``, ``positions`` and ``mask_at``
        (the masked residues' places in ``tokens``)."""
        if not self.train:
            epoch = 0
        residues = self.source[index]
        n = len(residues)
        # a copy would hand over the masked residues
        partners = [
            p for p in self.partner_residues(index, epoch) if not np.array_equal(p, residues)
        ]
        width = self.column_width
        if self.column_crop == "drawn":
            width = column_width(self.max_length, min(len(partners), self.max_partners))
        keep = min(n, width)
        first = int(keyed_rng(TAG_CROP, self.seed, epoch, index).integers(0, n - keep + 1))
        target = residues[first : first + keep]
        rng = keyed_rng(TAG_BLIND, self.seed, epoch, index)
        count = min(keep, max(1, int(np.floor(self.mask_prob * keep + rng.random()))))
        masked = np.sort(rng.choice(keep, count, replace=False))
        blind = np.array(list(self.alphabet.decode(target)))
        blind[masked] = "X"
        members = []
        for partner in partners:
            hit = aligned_positions("".join(blind), self.alphabet.decode(partner))
            cols = np.flatnonzero(hit >= 0)
            if len(cols) >= min(MIN_CONTEXT_RESIDUES, keep):
                members.append((np.asarray(partner)[hit[cols]], cols))
        tokens, positions, start, _ = column_window(
            target, members, self.alphabet, self.max_length, first=first
        )
        return {"tokens": tokens, "positions": positions, "mask_at": start + masked}

    def __getitem__(self, key: int | tuple[int, ...]) -> Item:
        index, epoch = self._resolve(key)
        if self.columns:
            row = self.column_row(index, epoch)
            return {**row, "index": index, "epoch": epoch, **self._flags(key)}
        tokens, start, n = self.window(index, epoch)
        item = {"tokens": tokens, "index": index, "epoch": epoch, **self._flags(key)}
        if self.mask == "protein":
            item["mask_from"] = start
        if self.align:
            item["align_to"] = self.alignment(tokens, start, n)
        return item

    def alignment(self, tokens: np.ndarray, start: int, n: int) -> np.ndarray:
        """``(len(tokens),)`` int64: for the protein's residues ``tokens[start:start + n]``, the
        row position of the partner residue aligned to each (``-1``: none, or no partner)."""
        out = np.full(len(tokens), -1, dtype=np.int64)
        if start <= 2:  # no partner before the protein
            return out
        partner = self.alphabet.decode(tokens[1 : start - 1])
        hit = aligned_positions(self.alphabet.decode(tokens[start : start + n]), partner)
        out[start : start + n] = np.where(hit >= 0, hit + 1, -1)
        return out


class ConcatWindowDataset(EpochDataset):
    """Fixed windows of exactly ``max_length`` tokens cut from a stream of joined proteins.

    The stream is ``p_0 <sep> p_1 <sep> ... p_{n-1} <sep>`` (every protein followed by
    ``<sep>``; no ``<cls>``/``<eos>``), where ``p_k`` is the residues of record ``order[k]``.
    Window ``w`` is ``stream[w * max_length : (w + 1) * max_length]``: no padding. The stream is
    never built; a window is located by binary search over the cumulative segment lengths.

    Attention crosses protein boundaries inside a window, as in the Performer paper's
    concatenated-protein experiment; ``<sep>`` marks the boundaries and a protein may be split
    across two windows.

    Order: for training, a permutation drawn from ``(seed, epoch)`` (``reshuffle=False``: the
    epoch-0 permutation every epoch); for evaluation (``train=False``) the source order.

    Family packing (``groups`` given, ``data.packing=family``): the stream holds the members of
    one group (a cluster, a family) back to back, in a random order, then the next group: the
    groups are permuted and each group's members shuffled, all from ``(seed, epoch)`` (evaluation:
    the epoch-0 layout). Windows are cut from that stream as above, so a window starts with
    members of one family and tops up with the next family when the first is used up; a family
    longer than a window continues in the next one. Every protein is in the stream exactly once
    per epoch, as in stream packing (the same tail policy). Each
    process computes the layout of an epoch once (O(n) time, ~16 bytes per record) and caches
    it. Training drops the trailing ``dropped_tokens`` (< ``max_length``) of each epoch's
    stream (a fresh order every epoch moves the cut; logged and exposed, never silent);
    evaluation keeps them as one shorter last window (``keep_tail``), so every held-out token
    is scored.

    Copy packing (``repeat=2``, ``data.packing=copy``): every protein is followed by itself in
    the stream (``p_k <sep> p_k <sep>``), so the masked residues of the second copy are visible,
    unmasked, in the first (unless masked there too): a retrieval curriculum on real proteins
    (the copy probe of ``benchmarks/retrieval.py``), before family windows. Windows are still cut
    from the stream, so a window boundary can fall between the two copies (the second then has
    no source in its window): about ``length / max_length`` of the second copies' tokens, and
    all of them for proteins longer than about half a window.

    Args:
        source: proteins (residue ids, no specials).
        max_length: window length in tokens (8192 by default for this mode).
        seed: order seed.
        train: per-epoch permuted order (True) or source order (False).
        reshuffle: draw a new order every epoch (train only).
        keep_tail: end with a shorter window holding the stream's remainder (default: for
            evaluation, ``train=False``).
        groups: family packing: ``(n_groups,)`` arrays of record indices that together hold
            every record exactly once (None: stream packing).
        repeat: times each protein appears in a row in the stream (2: copy packing).
        spread: family packing: interleave the members of this many consecutive families
            (round-robin: the first member of each, then the second of each, ...), so a
            protein's homologs sit about ``spread`` proteins away instead of next to it, with
            other families' proteins between (1: members back to back).
    """

    def __init__(
        self,
        source: FlatSource,
        max_length: int = 8192,
        *,
        seed: int = 0,
        train: bool = True,
        reshuffle: bool = True,
        keep_tail: bool | None = None,
        groups: list[np.ndarray] | None = None,
        repeat: int = 1,
        spread: int = 1,
    ) -> None:
        super().__init__(source, seed=seed, train=train)
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ConfigError(f"repeat must be an integer >= 1, got {repeat!r}")
        if isinstance(spread, bool) or not isinstance(spread, int) or spread < 1:
            raise ConfigError(f"spread must be an integer >= 1, got {spread!r}")
        if spread > 1 and groups is None:
            raise ConfigError("spread > 1 needs family packing (groups)")
        self.repeat = int(repeat)
        self.spread = int(spread)
        if int(max_length) < 2:
            raise ConfigError(f"max_length must be >= 2 for concat mode, got {max_length}")
        self.max_length = int(max_length)
        self.group_of: np.ndarray | None = None
        """``(n,)`` group number of each record (family packing), else None."""
        if groups is not None:
            self.group_of = _group_numbers(groups, len(source))
        self.reshuffle = bool(reshuffle)
        self.total_tokens = self.repeat * (int(source.lengths.sum()) + len(source))
        self.num_windows = self.total_tokens // self.max_length
        self.dropped_tokens = self.total_tokens - self.num_windows * self.max_length
        self.lengths: np.ndarray = np.full(self.num_windows, self.max_length, dtype=np.int64)
        self.keep_tail = (not self.train) if keep_tail is None else bool(keep_tail)
        if self.keep_tail and self.dropped_tokens:
            self.lengths = np.append(self.lengths, self.dropped_tokens)
            self.num_windows += 1
            self.dropped_tokens = 0
        self._layout: tuple[int, np.ndarray | None, np.ndarray] | None = None
        if self.num_windows == 0:
            log.warning(
                "concat stream of %d tokens is shorter than one window of %d: no windows",
                self.total_tokens,
                self.max_length,
            )
        elif self.dropped_tokens:
            log.info(
                "concat mode: %d windows of %d tokens; last %d of %d stream tokens dropped",
                self.num_windows,
                self.max_length,
                self.dropped_tokens,
                self.total_tokens,
            )

    def __len__(self) -> int:
        return self.num_windows

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_layout"] = None  # recomputed lazily; can be large
        return state

    def order(self, epoch: int) -> np.ndarray:
        """``(repeat · n,)`` int64 record index at each stream position in ``epoch``."""
        order, _ = self._epoch_layout(epoch)
        return np.arange(len(self.source), dtype=np.int64) if order is None else order

    def _epoch_layout(self, epoch: int) -> tuple[np.ndarray | None, np.ndarray]:
        if not self.train or not self.reshuffle:
            epoch = 0
        if self._layout is None or self._layout[0] != epoch:
            seg = self.source.lengths + 1
            order = None
            if self.group_of is not None:
                rng = keyed_rng(TAG_ORDER, self.seed, epoch)
                rank = rng.permutation(int(self.group_of.max()) + 1)
                # members of a group together (groups in `rank` order), shuffled inside it
                group_rank = rank[self.group_of]
                order = np.lexsort((rng.random(len(self.source)), group_rank))
                if self.spread > 1:
                    # round-robin over blocks of `spread` groups: (block, member number, group)
                    g = group_rank[order]  # ascending
                    member = np.arange(len(g)) - np.searchsorted(g, g, side="left")
                    order = order[np.lexsort((g, member, g // self.spread))]
                seg = seg[order]
            elif self.train:
                order = keyed_rng(TAG_ORDER, self.seed, epoch).permutation(len(self.source))
                seg = seg[order]
            if self.repeat > 1:
                if order is None:
                    order = np.arange(len(self.source), dtype=np.int64)
                    seg = seg[order]
                order, seg = np.repeat(order, self.repeat), np.repeat(seg, self.repeat)
            cum = np.zeros(len(seg) + 1, dtype=np.int64)
            np.cumsum(seg, out=cum[1:])
            self._layout = (epoch, order, cum)
        return self._layout[1], self._layout[2]

    def __getitem__(self, key: int | tuple[int, ...]) -> Item:
        index, epoch = self._resolve(key)
        order, cum = self._epoch_layout(epoch)
        src_tokens, src_offsets = self.source.tokens, self.source.offsets
        length = int(self.lengths[index])
        start = index * self.max_length
        out = np.empty(length, dtype=np.int64)
        k = int(np.searchsorted(cum, start, side="right")) - 1  # segment holding `start`
        pos = 0
        while pos < length:
            rec = k if order is None else int(order[k])
            off = start + pos - int(cum[k])  # offset inside segment k (residues + <sep>)
            n_res = int(src_offsets[rec + 1] - src_offsets[rec])
            take = min(n_res + 1 - off, length - pos)
            n_from_res = max(0, min(take, n_res - off))
            if n_from_res:
                base = int(src_offsets[rec]) + off
                out[pos : pos + n_from_res] = src_tokens[base : base + n_from_res]
            if take > n_from_res:
                out[pos + n_from_res] = self.alphabet.sep_idx
            pos += take
            k += 1
        return {"tokens": out, "index": index, "epoch": epoch, **self._flags(key)}


def _group_numbers(groups: list[np.ndarray], n: int) -> np.ndarray:
    """``(n,)`` int64 group number of each record; every record must be in exactly one group."""
    group_of = np.full(n, -1, dtype=np.int64)
    for g, members in enumerate(groups):
        members = np.asarray(members, dtype=np.int64)
        if len(members) == 0:
            raise ConfigError(f"group {g} has no members")
        if members.min() < 0 or members.max() >= n:
            raise ConfigError(f"group {g} names a record outside 0..{n - 1}")
        if (group_of[members] != -1).any() or len(np.unique(members)) != len(members):
            raise ConfigError(f"group {g} repeats a record that another group (or it) holds")
        group_of[members] = g
    missing = np.flatnonzero(group_of < 0)
    if len(missing):
        raise ConfigError(f"{len(missing)} records are in no group (first: record {missing[0]})")
    return group_of
