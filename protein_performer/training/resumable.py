"""A train-loader wrapper that lets Lightning resume mid-epoch exactly.

The project's batch samplers and collators are deterministic functions of ``(seed, epoch,
index)``, so the stream of batches of an epoch is fixed. Lightning restarts a non-stateful
loader from the start of the epoch after a resume; this wrapper is ``Stateful`` (Lightning
stores its state in the checkpoint) and skips the batches already trained on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytorch_lightning as pl
from lightning_fabric.utilities.data import _set_sampler_epoch

log = logging.getLogger(__name__)


class ResumableLoader:
    """Wraps a DataLoader; ``state_dict`` records the epoch position, ``load_state_dict``
    makes the next ``iter()`` skip that many batches. ``sampler``/``batch_sampler`` are
    exposed so Lightning's ``set_epoch`` reaches the wrapped sampler."""

    def __init__(self, loader: Any, trainer: pl.Trainer | None = None) -> None:
        self.loader = loader
        self.trainer = trainer
        self._skip = 0
        self._skip_epoch = 0
        self._saved_world = 1

    @property
    def sampler(self) -> Any:
        return getattr(self.loader, "sampler", None)

    @property
    def batch_sampler(self) -> Any:
        return getattr(self.loader, "batch_sampler", None)

    @property
    def dataset(self) -> Any:
        return getattr(self.loader, "dataset", None)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        # A generator: nothing runs until the first batch is requested, i.e. after Lightning
        # has finished restoring its loops (and possibly moved on to the next epoch).
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        skip, self._skip = self._skip, 0
        if self.trainer is not None:
            epoch = int(self.trainer.current_epoch)
            if epoch != self._skip_epoch:
                skip = 0  # the saved epoch was finished; a new one starts from its beginning
            skip = self._rescale(skip)
            # the iterator may be created before Lightning calls set_epoch on a resume
            _set_sampler_epoch(self.loader, epoch)
        it = iter(self.loader)
        for _ in range(skip):
            next(it, None)
        yield from it

    def _rescale(self, skip: int) -> int:
        """``skip`` (batches per rank, saved on ``_saved_world`` ranks) on this run's ranks.

        Rank ``r`` of ``n`` takes global batches ``r, r + n, ...``: the saved position is
        ``skip · saved`` global batches; every rank skips the same whole number of its own, and
        the few global batches that no longer divide evenly are trained again (said)."""
        world = int(getattr(self.trainer, "world_size", 1) or 1)
        saved, self._saved_world = self._saved_world, world
        if not skip or saved == world:
            return skip
        done = skip * saved
        new = done // world
        if getattr(self.trainer, "is_global_zero", True):
            again = done - new * world
            log.warning(
                "resumed on %d process%s from a checkpoint of %d: each step now trains %d "
                "batch%s instead of %d; the interrupted epoch goes on after its first %d "
                "batches%s",
                world,
                "es" if world != 1 else "",
                saved,
                world,
                "es" if world != 1 else "",
                saved,
                done,
                f" ({again} trained again)" if again else "",
            )
        return new

    def state_dict(self) -> dict[str, int]:
        if self.trainer is None:
            return {"epoch": 0, "batches": 0, "world_size": 1}
        progress = self.trainer.fit_loop.epoch_loop.batch_progress.current
        return {
            "epoch": int(self.trainer.current_epoch),
            "batches": int(progress.ready),
            "world_size": int(self.trainer.world_size),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._skip = int(state.get("batches", 0))
        self._skip_epoch = int(state.get("epoch", 0))
        # checkpoints written before this was saved: assume the run's own process count
        self._saved_world = int(state.get("world_size", 0)) or int(
            getattr(self.trainer, "world_size", 1) or 1
        )
