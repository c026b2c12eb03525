"""What a training run says: the header before the first step and the result (TrainResult) written to summary.json and printed at the end."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from protein_performer.config.schema import TrainConfig
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.training.builders import max_time_seconds
from protein_performer.training.graceful_stop import STOP_SIGNAL_NAMES, GracefulInterrupt
from protein_performer.training.memory import MemoryEstimate
from protein_performer.training.preflight import shards_split
from protein_performer.training.progress_bar import format_duration
from protein_performer.utils.numbers import number_text
from protein_performer.utils.outputs import json_safe


# ---- train ------------------------------------------------------------------------------------
@dataclass
class TrainResult:
    """What a training run reports (also written to ``summary.json``)."""

    run_dir: str
    attention: str
    objective: str
    steps: int
    val_perplexity: float | None
    val_accuracy: float | None
    val_loss: float | None
    best_val_perplexity: float | None
    tokens_per_s: float
    train_seconds: float
    best_checkpoint: str | None
    last_checkpoint: str | None
    # MLM: val perplexity over the positions shown as <mask> only (see EvalResult.by_input)
    val_perplexity_mask: float | None = None
    # the unigram baseline (training-data residue frequencies) on the same <mask> positions
    val_unigram_perplexity_mask: float | None = None
    # causal: the unigram baseline on the same next-token targets (causal_unigram_sums)
    val_unigram_perplexity: float | None = None
    max_steps: int | None = None
    # why training ended: "max_steps", "max_time", "SIGINT"/"SIGTERM" (interrupted), "stopped"
    stopped_by: str = "max_steps"
    # the step of the last validation (the val_* numbers); None when none ran
    val_step: int | None = None
    resumed_from_step: int | None = None
    # the step whose validation a stop signal cut short (not recorded, not redone on resume)
    validation_cut_at: int | None = None

    @property
    def interrupted(self) -> bool:
        return self.stopped_by in STOP_SIGNAL_NAMES

    def to_dict(self) -> dict[str, Any]:
        return json_safe({**asdict(self), "interrupted": self.interrupted})

    def _perplexity_lines(self, at: str) -> list[str]:
        """The validation lines. An MLM's ``<mask>`` perplexity and its unigram baseline come
        first: the all-positions number (it counts the random and unchanged tokens, whose
        residue the model can see) reads lower and was taken for the model beating the
        baseline."""
        best = f"(best {number_text(self.best_val_perplexity, '.3f')}){at}"
        if self.val_perplexity_mask is None:  # causal, or no <mask> position
            return [
                f"  val perplexity  {number_text(self.val_perplexity, '.3f')}  {best}"
                + (
                    f"; next-token, unigram {number_text(self.val_unigram_perplexity, '.3f')}"
                    if self.val_unigram_perplexity is not None
                    else ""
                ),
                f"  val accuracy    {number_text(self.val_accuracy, '.4f')}",
            ]
        mask, unigram = self.val_perplexity_mask, self.val_unigram_perplexity_mask
        if unigram is None:
            baseline = ""
        else:
            ratio = f", ratio {mask / unigram:.3f}" if mask is not None and unigram else ""
            baseline = f"  vs unigram {number_text(unigram, '.3f')}{ratio} (residue frequencies)"
        return [
            f"  <mask> perplexity {number_text(mask, '.3f')}{baseline}",
            f"  all positions     {number_text(self.val_perplexity, '.3f')}  {best}: <mask>, random "
            "and unchanged tokens together (lower: the unchanged residue is in view)",
            f"  val accuracy      {number_text(self.val_accuracy, '.4f')}",
        ]

    def format(self) -> str:
        verb = "interrupted" if self.interrupted else "finished"
        of = f" of {self.max_steps:,}" if self.max_steps else ""
        why = "" if self.stopped_by == "max_steps" else f" (stopped by {self.stopped_by})"
        at = (
            f" at step {self.val_step:,}"
            if self.val_step is not None and self.val_step != self.steps
            else ""
        )
        return "\n".join(
            [
                f"training {verb}: {self.attention} ({self.objective}), {self.steps:,}{of} "
                f"step{'' if (self.max_steps or self.steps) == 1 else 's'} "
                + (
                    f"({self.steps - self.resumed_from_step:,} of them in this run) "
                    if self.resumed_from_step
                    else ""
                )
                + f"in {self.train_seconds:.0f} s{why}",
                *self._perplexity_lines(at),
                f"  throughput      {self.tokens_per_s:,.0f} tokens/s",
                f"  run directory   {self.run_dir}",
                f"  best checkpoint {self.best_checkpoint or 'n/a'}",
                f"  last checkpoint {self.last_checkpoint or 'n/a'}",
                *(
                    [
                        f"  the validation at step {self.validation_cut_at:,} was cut short: "
                        "not recorded, and a resume goes on training without it (evaluate "
                        "the last checkpoint with split=val for that step's numbers)"
                    ]
                    if self.validation_cut_at is not None
                    else []
                ),
            ]
        )


def stop_cause(cfg: TrainConfig, steps: int, interrupt: GracefulInterrupt) -> str:
    if interrupt.stopped_at is not None and interrupt.stop_reason:
        return interrupt.stop_reason  # under DDP also a signal that reached another rank only
    if steps >= cfg.trainer.max_steps:
        return "max_steps"
    return "max_time" if cfg.trainer.max_time else "stopped"


def run_data_line(dm: ProteinDataModule, cfg: TrainConfig, read_s: float = 0.0) -> str:
    """``train 3,425 proteins (990,112 residues), val 190 (...); split by cluster``: what the
    run reads and how its held-out part was drawn."""
    parts = []
    for split, ds in dm.datasets.items():
        proteins = dm.windows[split][0] if split in dm.windows else len(ds.source)
        word = "protein" if proteins == 1 else "proteins"
        parts.append(f"{split} {proteins:,} {word} ({ds.source.n_residues:,} residues)")
    d = cfg.data
    if d.shards:
        how = {"explicit": "by the files given per split", "cluster": "by cluster"}
        by = shards_split(d.shards)["split_by"]
        split = f"the shards' split ({how.get(by, 'by record')})"
    elif d.val_files or d.test_files:
        split = "held-out files given"
    else:
        split = f"split by {dm.split_by} ({', '.join(f'{f:g}' for f in d.split_fractions)})"
    notes = [f"\n  {s}: {text}" for s, texts in dm.notes.items() for text in texts]
    if cfg.trainer.limit_val_batches is not None and "val" in dm.datasets:
        n = cfg.trainer.limit_val_batches  # its perplexities are of these batches only
        notes.append(
            f"\n  val: each validation reads its first {n:,} batches (trainer.limit_val_batches)"
        )
    took = f" (read in {read_s:.0f} s)" if read_s >= 2 else ""
    return ", ".join(parts) + f"; {split}{took}" + "".join(notes)


def print_header(
    cfg: TrainConfig,
    run_path: Path,
    estimate: MemoryEstimate,
    warning: str | None,
    resume_step: int | None,
    data: str = "",
    threads: tuple[int, str | None] | None = None,
) -> None:
    m, t = cfg.model, cfg.trainer
    shape = f"{m.depth}×{m.dim}, {m.heads} heads" + (
        f", {m.nb_features} features" if m.is_performer or m.attention == "hedgehog" else ""
    )
    if m.exact_layers and m.attention != "transformer":  # (every layer of it is exact)
        shape += f", exact attention in layers {list(m.exact_layers)}"
    if m.nope_layers:
        shape += f", no rotary positions in layers {list(m.nope_layers)}"
    if m.qkv_conv:
        shape += f", q/k/v convolution over {m.qkv_conv}"
    if m.scalable_softmax:
        shape += f", exact scores × log n / log {m.scalable_softmax}"
    steps = f"{t.max_steps:,} step{'' if t.max_steps == 1 else 's'}" + (
        f" (resuming at step {resume_step:,})" if resume_step is not None else ""
    )
    if t.max_time:  # the budget that may stop the run first, in words
        budget = format_duration(max_time_seconds(t.max_time))
        steps += f" or {budget} (trainer.max_time), whichever comes first"
    if isinstance(t.devices, int) and t.devices * t.num_nodes > 1:
        ranks = t.devices * t.num_nodes
        steps += f" on {ranks} processes (each step: a batch per process, {ranks} in all)"
    lines = [
        f"run directory: {run_path}",
        f"model: {m.attention} ({shape}): {estimate.format()}",
        *([f"data: {data}"] if data else []),
        f"training: {steps}, validation "
        + (
            f"every {t.val_check_interval:,} and at the end, last.ckpt "
            if t.val_check_interval < t.max_steps
            else "at the end, last.ckpt "
        )
        + (
            f"every {t.checkpoint_every_minutes:g} min"
            if t.checkpoint_every_minutes
            else "at validations"
        ),
    ]
    if threads is not None:
        count, why = threads
        if why is None:
            lines.append(f"threads: {count}")
        elif why == "OMP_NUM_THREADS":
            lines.append(f"threads: {count} (OMP_NUM_THREADS)")
        else:
            lines.append(f"threads: {count} {why} (trainer.threads=N chooses)")
    if cfg.init_from:
        lines.append(f"weights from: {cfg.init_from} (init_from: a new run, its own optimizer)")
    if warning:
        lines.append(f"warning: {warning}")
    print("\n".join(lines), file=sys.stderr, flush=True)
