"""A train-loader wrapper that lets Lightning resume mid-epoch exactly.

The project's batch samplers and collators are deterministic functions of ``(seed, epoch,
index)``, so the stream of batches of an epoch is fixed. Lightning restarts a non-stateful
loader from the start of the epoch after a resume; this wrapper is ``Stateful`` (Lightning
stores its state in the checkpoint) and skips the batches already trained on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytorch_lightning as pl
from lightning_fabric.utilities.data import _set_sampler_epoch


class ResumableLoader:
    """Wraps a DataLoader; ``state_dict`` records the epoch position, ``load_state_dict``
    makes the next ``iter()`` skip that many batches. ``sampler``/``batch_sampler`` are
    exposed so Lightning's ``set_epoch`` reaches the wrapped sampler."""

    def __init__(self, loader: Any, trainer: pl.Trainer | None = None) -> None:
        self.loader = loader
        self.trainer = trainer
        self._skip = 0
        self._skip_epoch = 0

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
            # the iterator may be created before Lightning calls set_epoch on a resume
            _set_sampler_epoch(self.loader, epoch)
        it = iter(self.loader)
        for _ in range(skip):
            next(it, None)
        yield from it

    def state_dict(self) -> dict[str, int]:
        if self.trainer is None:
            return {"epoch": 0, "batches": 0}
        progress = self.trainer.fit_loop.epoch_loop.batch_progress.current
        return {"epoch": int(self.trainer.current_epoch), "batches": int(progress.ready)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._skip = int(state.get("batches", 0))
        self._skip_epoch = int(state.get("epoch", 0))
