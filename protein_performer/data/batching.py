"""Batch samplers (token budget or fixed size; shuffled per epoch; DDP-sharded) and padding.

The samplers yield lists of ``(index, epoch)`` keys, which the datasets in
:mod:`protein_performer.data.datasets` accept, so the epoch reaches worker processes with every
batch. Use them as ``DataLoader(dataset, batch_sampler=sampler, collate_fn=...)``.

DDP: every rank builds the same global list of batches for the epoch (same seed, same
epoch), pads it by repeating batches from its start until its length is a multiple of
``world_size``, and takes every ``world_size``-th batch from position ``rank``. Ranks get
disjoint batches (apart from the repeated ones, counted in :attr:`num_padding_batches`) and
the same number of them; nothing is dropped. With ``score_repeats=False`` (evaluation) the
repeated batches' keys carry a third element ``0`` ("not scored"): the datasets mark those
items and the collators give them no labels, so metrics summed over ranks count every item
exactly once.

Lightning calls ``set_epoch`` on ``dataloader.batch_sampler.sampler``, so the samplers expose
``.sampler`` (themselves). With more than one device the Trainer must be built with
``use_distributed_sampler=False`` so Lightning does not try to replace the sampler.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

from protein_performer.data.alphabet import (
    STRING_HINT,
    Alphabet,
    InvalidResidueError,
    default_alphabet,
)
from protein_performer.data.datasets import TAG_BATCH, keyed_rng
from protein_performer.errors import ConfigError

Key = tuple[int, int] | tuple[int, int, int]


def _check_rank(rank: int, world_size: int) -> None:
    if int(world_size) < 1:
        raise ConfigError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= int(rank) < int(world_size):
        raise ConfigError(f"rank must be in [0, {world_size}), got {rank}")


class ShardedBatchSampler(Sampler[list[Key]]):
    """Base: per-epoch global batches → this rank's share. Subclasses implement ``_global``.

    ``score_repeats``: whether the batches repeated to even out the ranks count in metrics
    (True for training; set False for evaluation).
    """

    score_repeats: bool = True

    def __init__(
        self, *, shuffle: bool = True, seed: int = 0, rank: int = 0, world_size: int = 1
    ) -> None:
        super().__init__()
        _check_rank(rank, world_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.epoch = 0

    # Lightning's _set_sampler_epoch looks at dataloader.batch_sampler.sampler.
    @property
    def sampler(self) -> ShardedBatchSampler:
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    @property
    def num_global_batches(self) -> int:
        """Batches in one epoch over all ranks, before padding."""
        raise NotImplementedError

    def _global(self, epoch: int) -> list[np.ndarray]:
        raise NotImplementedError

    @property
    def num_padding_batches(self) -> int:
        """Batches repeated so that every rank gets the same count."""
        n = self.num_global_batches
        return len(self) * self.world_size - n if n else 0

    def __len__(self) -> int:
        return math.ceil(self.num_global_batches / self.world_size)

    def _share(self, epoch: int) -> list[tuple[np.ndarray, bool]]:
        """This rank's ``(batch, is_repeat)`` pairs for ``epoch``."""
        batches = self._global(epoch)
        n = len(batches)
        if n == 0:
            return []
        total = len(self) * self.world_size
        padded = batches + [batches[i % n] for i in range(total - n)]
        return [(padded[p], p >= n) for p in range(self.rank, total, self.world_size)]

    def rank_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches (arrays of dataset indices) for ``epoch`` (default: current)."""
        return [b for b, _ in self._share(self.epoch if epoch is None else int(epoch))]

    def __iter__(self) -> Iterator[list[Key]]:
        epoch = self.epoch
        for batch, repeat in self._share(epoch):
            if repeat and not self.score_repeats:
                yield [(i, epoch, 0) for i in batch.tolist()]
            else:
                yield [(i, epoch) for i in batch.tolist()]


class TokenBudgetBatchSampler(ShardedBatchSampler):
    """Length-bucketed batches whose padded size ``len(batch) * max(length) <= toks_per_batch``.

    Items are sorted by length (ties broken at random per epoch) and packed greedily; an item
    longer than the budget gets a batch of its own. With ``shuffle`` the batch order is
    permuted per epoch from ``(seed, epoch)``; without it batches run shortest first.

    Args:
        lengths: ``(n,)`` padded token count of each item (e.g. ``CropDataset.lengths``).
        toks_per_batch: budget on ``batch_size * longest`` (like ESM's ``toks_per_batch``).
        max_batch_size: optional cap on items per batch.
        shuffle, seed, rank, world_size: see :class:`ShardedBatchSampler`.
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        toks_per_batch: int,
        *,
        max_batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        super().__init__(shuffle=shuffle, seed=seed, rank=rank, world_size=world_size)
        if int(toks_per_batch) < 1:
            raise ConfigError(f"toks_per_batch must be >= 1, got {toks_per_batch}")
        if max_batch_size is not None and int(max_batch_size) < 1:
            raise ConfigError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if self.lengths.ndim != 1 or (len(self.lengths) and self.lengths.min() < 1):
            raise ValueError("lengths must be a 1-D array of positive token counts")
        self.toks_per_batch = int(toks_per_batch)
        self.max_batch_size = None if max_batch_size is None else int(max_batch_size)
        # Batch boundaries in sorted order do not depend on how ties are broken: compute once.
        self._bounds = self._pack(np.sort(self.lengths))

    def _pack(self, sorted_lengths: np.ndarray) -> np.ndarray:
        """Greedy packing of ascending lengths; returns ``(n_batches + 1,)`` boundaries."""
        n = len(sorted_lengths)
        budget = self.toks_per_batch
        bounds = [0]
        s = 0
        while s < n:
            # largest k with k * sorted_lengths[s + k - 1] <= budget (monotone in k), k >= 1
            hi = min(n - s, max(1, budget // int(sorted_lengths[s])))
            if self.max_batch_size is not None:
                hi = min(hi, self.max_batch_size)
            lo = 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if mid * int(sorted_lengths[s + mid - 1]) <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            s += lo
            bounds.append(s)
        return np.asarray(bounds, dtype=np.int64)

    @property
    def num_global_batches(self) -> int:
        return len(self._bounds) - 1

    def _global(self, epoch: int) -> list[np.ndarray]:
        if self.num_global_batches == 0:
            return []
        if self.shuffle:
            rng = keyed_rng(TAG_BATCH, self.seed, epoch)
            order = np.lexsort((rng.random(len(self.lengths)), self.lengths))
        else:
            order = np.argsort(self.lengths, kind="stable")
        batches = np.split(order, self._bounds[1:-1])
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


class FixedBatchSampler(ShardedBatchSampler):
    """Batches of ``batch_size`` items (the last one may be smaller), e.g. concat windows.

    With ``shuffle`` the items are permuted per epoch from ``(seed, epoch)``.

    Args:
        num_items: dataset length.
        batch_size: items per batch.
        shuffle, seed, rank, world_size: see :class:`ShardedBatchSampler`.
    """

    def __init__(
        self,
        num_items: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        super().__init__(shuffle=shuffle, seed=seed, rank=rank, world_size=world_size)
        if int(batch_size) < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if int(num_items) < 0:
            raise ValueError(f"num_items must be >= 0, got {num_items}")
        self.num_items = int(num_items)
        self.batch_size = int(batch_size)

    @property
    def num_global_batches(self) -> int:
        return math.ceil(self.num_items / self.batch_size)

    def _global(self, epoch: int) -> list[np.ndarray]:
        if self.shuffle:
            order = keyed_rng(TAG_BATCH, self.seed, epoch).permutation(self.num_items)
        else:
            order = np.arange(self.num_items, dtype=np.int64)
        return [order[i : i + self.batch_size] for i in range(0, self.num_items, self.batch_size)]


def pad_batch(
    sequences: Sequence[np.ndarray | torch.Tensor],
    pad_idx: int,
    multiple: int = 1,
    cap: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-D token arrays to the longest one, rounded up to a ``multiple`` (at most
    ``cap``, never below the longest): batches of a few shapes, not one per length.

    Returns:
        ``tokens`` ``(B, L)`` int64 and ``padding_mask`` ``(B, L)`` bool (True at padding),
        ``L = max(len(s))`` rounded so.
    """
    if len(sequences) == 0:
        raise ValueError("cannot pad an empty batch")
    lengths = [len(s) for s in sequences]
    width = -(-max(lengths) // multiple) * multiple
    width = max(max(lengths), min(width, cap if cap is not None else width))
    tokens = torch.full((len(sequences), width), int(pad_idx), dtype=torch.int64)
    padding_mask = torch.ones((len(sequences), width), dtype=torch.bool)
    for row, (seq, n) in enumerate(zip(sequences, lengths, strict=True)):
        tokens[row, :n] = torch.as_tensor(np.asarray(seq), dtype=torch.int64)
        padding_mask[row, :n] = False
    return tokens, padding_mask


def pad_positions(positions: Sequence[np.ndarray], width: int) -> torch.Tensor:
    """Each row's token positions (``position_ids``, e.g. from
    :func:`~protein_performer.data.context_windows.column_window`) right-padded with 0 to
    ``width`` (the padded batch's length): ``(B, width)`` float32."""
    out = torch.zeros((len(positions), width), dtype=torch.float32)
    for row, p in enumerate(positions):
        out[row, : len(p)] = torch.as_tensor(np.asarray(p), dtype=torch.float32)
    return out


def encode_batch(
    sequences: Sequence[str], alphabet: Alphabet | None = None
) -> dict[str, torch.Tensor]:
    """Sequences as a model batch (ESM's batch converter): ``input_ids`` ``(B, L)`` int64,
    ``<cls> residues <eos>`` right-padded, and ``padding_mask`` ``(B, L)`` bool, True at
    padding; ``model(**encode_batch(seqs, alphabet))``. Each sequence is read as a FASTA
    record's is (any case, whitespace removed, a final ``*`` dropped); an invalid letter is a
    ValueError naming it."""
    if isinstance(sequences, str):
        raise TypeError("sequences must be a list of strings, got one string: wrap it in [...]")
    if not isinstance(sequences, Iterable):
        raise TypeError(f"sequences must be a list of strings, got {type(sequences).__name__}")
    alphabet = alphabet or default_alphabet()
    if not isinstance(alphabet, Alphabet):
        raise TypeError(
            f"alphabet must be an Alphabet (e.g. default_alphabet()), got {type(alphabet).__name__}"
        )
    rows = []
    for i, seq in enumerate(sequences):
        if not isinstance(seq, str):
            raise TypeError(f"sequence {i + 1} must be a string, got {type(seq).__name__}")
        try:
            ids = alphabet.clean_encode(seq, hint=STRING_HINT).ids
        except InvalidResidueError as e:  # a list's item, not a file's record
            err = InvalidResidueError(f"sequence {i + 1}: {e.problem}")
            err.residue_problem = e.residue_problem
            raise err from None
        assert ids is not None  # policy error: invalid letters raise
        if not len(ids):
            raise ValueError(f"sequence {i + 1} is empty (no residues)")
        rows.append(np.concatenate([[alphabet.cls_idx], ids, [alphabet.eos_idx]]))
    input_ids, padding_mask = pad_batch(rows, alphabet.pad_idx)
    return {"input_ids": input_ids, "padding_mask": padding_mask}
