"""Training progress: one bar over the run's optimizer steps (not per epoch), with the total
and an ETA, on stderr and only on a terminal; a redirected log gets a line every
``log_every_s`` seconds instead of redraws."""

from __future__ import annotations

import sys
import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks.progress import ProgressBar


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class StepProgressBar(ProgressBar):
    """``train 1,200/6,000 [..] loss=2.91 val_ppl=14.2`` (the total survives a resume)."""

    def __init__(
        self, log_every_s: float = 30.0, stream: Any = None, max_seconds: float | None = None
    ) -> None:
        super().__init__()
        self.max_seconds = max_seconds  # trainer.max_time: the ETA never reads past it
        self._enabled = True
        self.log_every_s = log_every_s
        self.stream = stream
        self._bar: Any = None
        self._t0 = 0.0
        self._step0 = 0
        # the rate is measured from the end of the first step: it holds one-off work (the
        # first batches, a kernel's first use) that would make the first ETA read hours
        self._t1: float | None = None
        self._step1 = 0
        self._last_line = 0.0
        self._lines = 0
        self._val_step: int | None = None

    # the ProgressBar interface Lightning expects
    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    @property
    def _out(self) -> Any:
        return self.stream if self.stream is not None else sys.stderr

    def _metrics(self, trainer: pl.Trainer) -> dict[str, str]:
        m = trainer.callback_metrics
        out = {}
        for key, name in (("train/loss", "loss"), ("val/perplexity", "val_ppl")):
            if key in m:
                out[name] = f"{float(m[key]):.3f}"
        val_step = getattr(self, "_val_step", None)
        if "val_ppl" in out and val_step is not None and val_step != trainer.global_step:
            out["val_ppl"] += f" (step {val_step:,})"  # the last validation's, not this step's
        return out

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._val_step = trainer.global_step

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not (self._enabled and trainer.is_global_zero):
            return
        self._t0 = self._last_line = time.monotonic()
        self._step0 = trainer.global_step
        isatty = getattr(self._out, "isatty", None)
        if isatty is not None and isatty():
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=trainer.max_steps,
                initial=trainer.global_step,
                desc="train",
                unit="step",
                file=self._out,
                dynamic_ncols=True,
                leave=True,
            )

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        if not (self._enabled and trainer.is_global_zero):
            return
        step, total = trainer.global_step, trainer.max_steps
        if self._t1 is None:
            self._t1, self._step1 = time.monotonic(), step
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            self._bar.set_postfix(self._metrics(trainer), refresh=False)
            return
        now = time.monotonic()
        # the first line after a few seconds (the ETA early), then every log_every_s
        wait = self.log_every_s if self._lines else min(5.0, self.log_every_s)
        if now - self._last_line < wait and step < total:
            return
        self._lines += 1
        self._last_line = now
        rate, eta = self.rate_and_eta(now, step, total)
        metrics = "".join(f" {k} {v}" for k, v in self._metrics(trainer).items())
        pct = f" ({100 * step / total:.0f}%)" if total > 0 else ""
        print(
            f"step {step:,}/{total:,}{pct}{metrics} · {rate * 60:,.0f} steps/min{eta}",
            file=self._out,
            flush=True,
        )

    def rate_and_eta(self, now: float, step: int, total: int) -> tuple[float, str]:
        """Steps per second since the first step ended, and ``, ETA ...`` (empty until a
        second step has ended); with ``max_seconds`` the ETA is the time budget's when that
        comes first."""
        t1 = self._t1 if self._t1 is not None else self._t0
        done = step - (self._step1 if self._t1 is not None else self._step0)
        rate = done / (now - t1) if now > t1 and done > 0 else 0.0
        if rate <= 0 or total <= 0:
            return rate, ""
        left = (total - step) / rate
        if self.max_seconds is not None:
            budget = max(0.0, self.max_seconds - (now - self._t0))
            if budget < left:
                return (
                    rate,
                    f", ETA {format_duration(budget)} (max_time; {total - step:,} steps left)",
                )
        return rate, f", ETA {format_duration(left)}"

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self.on_train_end(trainer, pl_module)
