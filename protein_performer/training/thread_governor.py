"""torch's CPU threads kept to what other work leaves free during a run, not only at its start.

A run that started on an idle 2-core machine kept 2 threads when the machine got busy (38-41
steps/min); its resume, started busy, took 1 thread and ran 111-114 steps/min: each OpenMP
barrier waits for a time slice on the core another process holds. :class:`ThreadGovernor`
re-checks every ``interval_s`` seconds (between steps, without waiting) and lowers or raises the
threads, within the CPUs the run may use, when two checks in a row agree."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch

from protein_performer.utils.devices import OtherWork, threads_for

#: Seconds between two looks at the machine (reading /proc costs well under a millisecond).
CHECK_EVERY_S = 30.0


class ThreadGovernor(pl.Callback):
    """Sets ``torch.set_num_threads`` to the CPUs other work leaves free, re-checked every
    ``interval_s`` seconds of training; a change is made when two checks in a row ask for it
    (a short job or a compile does not flip it back and forth). ``threads``: the start's
    choice; ``cpus``: the most it may use. ``changes`` keeps ``(step, before, after, others)``."""

    def __init__(
        self,
        threads: int,
        cpus: int,
        *,
        interval_s: float | None = None,
        meter: OtherWork | None = None,
        clock: Callable[[], float] = time.monotonic,
        set_threads: Callable[[int], None] = torch.set_num_threads,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.threads, self.cpus = threads, cpus
        self.interval_s = CHECK_EVERY_S if interval_s is None else interval_s
        self.meter = meter or OtherWork()
        self._clock, self._set = clock, set_threads
        self._say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self._due: float | None = None
        self._pending: int | None = None
        self.changes: list[tuple[int, int, int, float]] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.meter.cpus()  # starts the count
        self._due = self._clock() + self.interval_s

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        self.check(trainer.global_step)

    def check(self, step: int) -> None:
        """Look at the machine if a check is due; change the threads on the second check in a
        row that asks for the same other number."""
        now = self._clock()
        if self._due is None or now < self._due:
            return
        self._due = now + self.interval_s
        others = self.meter.cpus()
        if others is None:
            return
        want = threads_for(self.cpus, others)
        if want == self.threads:
            self._pending = None
            return
        if self._pending != want:
            self._pending = want  # asked once: wait for the next check to agree
            return
        before, self.threads, self._pending = self.threads, want, None
        self._set(want)
        self.changes.append((step, before, want, round(others, 2)))
        why = "busy" if want < before else "free again"
        self._say(
            f"threads: {before} -> {want} at step {step:,} (the machine got {why}: other work "
            f"uses {others:.1f} of {self.cpus} CPUs)"
        )
