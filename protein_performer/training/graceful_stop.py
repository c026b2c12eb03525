"""Ctrl-C (SIGINT), SIGTERM, SIGHUP and SIGUSR1/2 while training: finish the step, save, stop
cleanly.

The first signal asks the run to stop after the current optimizer step: the final
``checkpoints/last.ckpt`` and ``summary.json`` are written as for any run (marked interrupted)
and the CLI prints how to resume. A second signal aborts at once (``KeyboardInterrupt``), as a
user pressing Ctrl-C twice expects. Under DDP every rank stops at the same step (the request is
reduced across ranks). Signals that arrive before the first step (data loading) abort at once:
there is nothing to save yet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any

import pytorch_lightning as pl
import torch

from protein_performer.utils.devices import is_rank_zero
from protein_performer.utils.interrupts import (
    TERMINATING,
    Terminated,
    raise_terminated,
    sigterm_raises,
    takes_over,
)

__all__ = ["GracefulInterrupt", "Terminated", "sigterm_raises"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Seconds after which the same stop signal again aborts the save (sooner: a duplicate).
REPEAT_S = 2.0
#: Also stop a run cleanly: a closed terminal (SIGHUP) and the warnings a scheduler sends
#: before its time limit or a preemption (Slurm's ``--signal=USR1@90``), where nothing else
#: handles them (:func:`takes_over`).
MORE_STOP_SIGNALS = tuple(s for s in TERMINATING if s != signal.SIGTERM)
#: The names a run stopped by a signal records in ``stopped_by``.
STOP_SIGNAL_NAMES = tuple(signal.Signals(s).name for s in STOP_SIGNALS + MORE_STOP_SIGNALS)


class GracefulInterrupt(pl.Callback):
    """Turns a stop signal during ``fit`` into ``trainer.should_stop`` after the current step."""

    def __init__(self) -> None:
        self.received: str | None = None
        # why the run stops: this process's signal, or (DDP) another rank's
        self.stop_reason: str | None = None
        self.aborted = False
        self.stopped_at: int | None = None
        # the step whose validation this stop cut short (its numbers are not recorded)
        self.validation_cut_at: int | None = None
        self._received_at = 0.0
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()

    def _handle(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:
            return  # a data-loader worker (forked with this handler): the trainer stops it
        name = signal.Signals(signum).name
        if self.received is not None:
            # Ctrl-C again, or the same signal sent again a while later, is a person asking to
            # abort; anything else is a duplicate delivery (srun forwards a scancel's TERM) or
            # a scheduler's later signal while the save is under way: the save goes on
            again = signum == signal.SIGINT or (
                name == self.received and time.monotonic() - self._received_at >= REPEAT_S
            )
            if not again:
                return
            self.aborted = True
            self.restore()
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)
        self.received = name
        self._received_at = time.monotonic()
        if not is_rank_zero():
            return  # said once, by rank 0 (which stops at the same step)
        again = (
            "press Ctrl-C again"
            if signum == signal.SIGINT
            else f"send {name} again after {REPEAT_S:.0f} s"
        )
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            print(
                f"\n{name} received: stopping after this step and saving checkpoints/last.ckpt "
                f"({again} to abort without saving)",
                file=sys.stderr,
                flush=True,
            )

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return
        self._pid = os.getpid()
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue  # started ignoring it (`cmd &` in a script): it stays ignored
            self._previous[sig] = signal.signal(sig, self._handle)
        for sig in MORE_STOP_SIGNALS:
            # the CLI's sigterm_raises holds them now: that is ours, not someone else's
            if takes_over(sig) or signal.getsignal(sig) is raise_terminated:
                self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def _stop_requested(self, trainer: pl.Trainer) -> bool:
        code = 0 if self.received is None else int(signal.Signals[self.received])
        if trainer.world_size > 1:  # every rank must stop at the same step, and say why
            mine = torch.tensor(code, device=trainer.strategy.root_device)
            code = int(trainer.strategy.reduce(mine, reduce_op="max"))
        if code:
            self.stop_reason = self.received or signal.Signals(code).name
        return code != 0

    # Lightning installs its own SIGTERM handler when fit starts; ours goes on top of it then.
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.install()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        if self.stopped_at is None and self._stop_requested(trainer):
            self.stopped_at = trainer.global_step
            trainer.should_stop = True
            # Lightning validates when a run stops early; an interrupted run should not wait
            trainer.limit_val_batches = 0

    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int, *args: Any
    ) -> None:
        # a stop asked for during validation skips the rest of it (one process only: under DDP
        # every rank must run the same collectives, so the validation finishes)
        if self.received and trainer.world_size == 1 and hasattr(pl_module, "skip_validation"):
            if not pl_module.skip_validation and not trainer.sanity_checking:
                self.validation_cut_at = trainer.global_step
            pl_module.skip_validation = True

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or self.stopped_at is not None:
            return
        # under DDP a collective: every rank asks, whatever it received itself
        if self._stop_requested(trainer):
            self.stopped_at = trainer.global_step
            trainer.should_stop = True  # before the next step, not after it

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.restore()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self.restore()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.restore()
