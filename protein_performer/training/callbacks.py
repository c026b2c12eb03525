"""Training callbacks: token throughput, a validation at the final step, ``last.ckpt``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from protein_performer.errors import DataError
from protein_performer.training.graceful_stop import GracefulInterrupt


class TokenThroughput(pl.Callback):
    """Logs ``train/tokens_per_s`` (non-padding tokens of the global batch per second of
    training wall time, data loading included, validation and the wait for the first batch
    excluded) and keeps run totals."""

    def __init__(self) -> None:
        self.total_tokens = 0
        self.total_seconds = 0.0
        self._mark: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.total_tokens / self.total_seconds if self.total_seconds > 0 else 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._mark = None

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int
    ) -> None:
        # timed from the first batch in hand: the data workers' start (and a resume's
        # fast-forward through the epoch's done batches) is not training
        if self._mark is None:
            self._mark = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        now = time.perf_counter()
        tokens = int(getattr(pl_module, "last_batch_tokens", 0))
        if self._mark is not None and now > self._mark:
            dt = now - self._mark
            self.total_tokens += tokens
            self.total_seconds += dt
            pl_module.log("train/tokens_per_s", tokens / dt, on_step=True, on_epoch=False)
        self._mark = now

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._mark = time.perf_counter()  # do not count validation time as training time


class ValidateOnFinalStep(pl.Callback):
    """Make the last training step (``max_steps``) end with a validation, so the final metrics
    and the ``last``/``best`` checkpoints always describe the finished model."""

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        if trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps:
            trainer.should_stop = True


class BestCheckpoint(ModelCheckpoint):
    """``best.ckpt`` (lowest validation perplexity); an interrupted, skipped validation is no
    candidate."""

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not getattr(pl_module, "skip_validation", False):
            super().on_validation_end(trainer, pl_module)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A run resumed in another directory (a copied or moved run, ``hydra.run.dir=NEW``)
        keeps its best score: Lightning restores it only in the same directory, so the first
        validation after the resume replaced best.ckpt whatever its perplexity. Its best file
        is the one now beside this directory's checkpoints if it was copied along, else the
        stored one (never deleted from there: Lightning removes files in its own folder only);
        with neither, the best starts afresh."""
        stored = state_dict.get("dirpath")
        if stored is None or Path(stored) == Path(self.dirpath or ""):
            super().load_state_dict(state_dict)
            return
        old = state_dict.get("best_model_path") or ""
        here = Path(self.dirpath or "") / Path(old).name if old else None
        best = here if here is not None and here.is_file() else Path(old) if old else None
        if best is None or not best.is_file() or state_dict.get("best_model_score") is None:
            return
        score = state_dict["best_model_score"]
        self.best_model_score = score
        self.best_model_path = self.kth_best_model_path = str(best)
        self.kth_value = score
        self.best_k_models = {str(best): score}


def _interrupted(trainer: pl.Trainer) -> bool:
    """Whether Ctrl-C / SIGTERM (:class:`GracefulInterrupt`) stopped this run."""
    return any(
        isinstance(c, GracefulInterrupt) and c.stopped_at is not None for c in trainer.callbacks
    )


def _validates(trainer: pl.Trainer) -> bool:
    """Whether the run has validation batches to run (a final validation follows a stop)."""
    limit = trainer.limit_val_batches
    return bool(limit) and sum(trainer.num_val_batches or [0]) > 0


class LastCheckpoint(ModelCheckpoint):
    """``last.ckpt``: the model after every validation, every ``every_minutes`` of training
    (independent of validation, so a crash loses at most that much work) and at the end.

    Lightning's ``save_last`` rewrites ``last.ckpt`` only when the monitored checkpoint is
    saved too (i.e. when validation improved), so a run whose last validations did not improve
    would resume from an older step. This one saves unconditionally (no monitor, one file).
    Every save is a full training state: resumable with ``ckpt_path``.
    """

    def __init__(self, dirpath: str | Path, every_minutes: float | None = None) -> None:
        super().__init__(
            dirpath=str(dirpath),
            filename="last",
            monitor=None,
            save_top_k=1,
            enable_version_counter=False,
        )
        self._step_written: int | None = None
        self.every_seconds = every_minutes * 60.0 if every_minutes else None
        self._saved_at = time.monotonic()

    @property
    def path(self) -> Path:
        return Path(self.dirpath) / f"last{self.FILE_EXTENSION}"

    def _save_now(self, trainer: pl.Trainer) -> None:
        trainer.save_checkpoint(self.path, weights_only=False)  # full state: resumable
        self._step_written = trainer.global_step
        self._saved_at = time.monotonic()
        self.best_model_path = str(self.path)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._saved_at = time.monotonic()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, idx)
        if self._step_written == trainer.global_step:
            return
        stopping = _interrupted(trainer) or (trainer.should_stop and not _validates(trainer))
        if stopping and trainer.global_step > 0:
            # a stop mid-epoch (Ctrl-C; max_steps or max_time without validation data): saved
            # now, inside the epoch. Saved at on_train_end the run would count as a finished
            # epoch, and a resume would start the next one, skipping the rest of this one.
            # (A stop followed by a validation is saved after it, at on_validation_end.)
            self._save_now(trainer)
            return
        if self.every_seconds is None:
            return
        due = time.monotonic() - self._saved_at >= self.every_seconds
        if trainer.world_size > 1:  # saving is collective: rank 0's clock decides for all
            due = bool(trainer.strategy.broadcast(due, src=0))
        if due:
            self._save_now(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if getattr(pl_module, "skip_validation", False):
            # an interrupted validation: the state after the last step, saved inside the epoch
            # (see on_train_batch_end)
            if (
                _interrupted(trainer)
                and trainer.global_step > 0
                and self._step_written != trainer.global_step
            ):
                self._save_now(trainer)
            return
        super().on_validation_end(trainer, pl_module)
        if self.best_model_path:
            self._step_written = trainer.global_step
            self._saved_at = time.monotonic()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # training stopped without a validation at its last step (no validation data, Ctrl-C)
        if trainer.global_step > 0 and self._step_written != trainer.global_step:
            self._save_now(trainer)


class LockGuard(pl.Callback):
    """Stops a run whose run-directory lock another process has taken over (this one was
    paused past the lock's staleness: a stopped job, a frozen node) before it writes more steps,
    rows or checkpoints over that process's. Rank 0 holds the lock (``held``; None on other
    ranks): every :attr:`every_steps` steps all ranks learn its answer together, so all stop
    at the same step."""

    #: steps between two checks of the lock while training (a collective under DDP)
    every_steps = 20

    def __init__(self, held: Any) -> None:
        self.held = held

    def _lost(self) -> str | None:
        return None if self.held is None else self.held.lost(every_s=0.0)

    def _stop(self, holder: str) -> None:
        path = None if self.held is None else self.held.path.parent
        raise DataError(
            f"run directory: another process ({holder}) took this run's lock over while this "
            "one was paused; stopping without writing more (that process goes on with the run)",
            path=path,
        )

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step % self.every_steps:
            return
        holder = self._lost()
        if trainer.world_size > 1:  # every rank asks: the same answer, the same step
            flag = torch.tensor(float(holder is not None), device=trainer.strategy.root_device)
            if float(trainer.strategy.reduce(flag, reduce_op="sum")) > 0:
                self._stop(holder or "rank 0's lock")
        elif holder is not None:
            self._stop(holder)

    def on_save_checkpoint(self, trainer: pl.Trainer, *args: Any) -> None:
        # never a checkpoint over the other process's (one process: no collective to keep)
        if trainer.world_size == 1 and (holder := self._lost()) is not None:
            self._stop(holder)

    def on_train_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.world_size == 1 and (holder := self._lost()) is not None:
            self._stop(holder)  # nor its summary
