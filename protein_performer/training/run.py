"""``train(cfg, run_dir)``: the library function of ``protein-performer train`` (no Hydra
needed; also ``protein_performer.train``), in the order a run takes: the config and paths
checked (:mod:`.preflight`), the memory estimate (:mod:`.memory`), the run directory claimed
(:mod:`.run_dir`) and locked (:mod:`.run_lock`), then the data, the model and the trainer with
its callbacks (:mod:`.builders`), the header, fit, and the result (:mod:`.report`). Evaluation
is :mod:`protein_performer.evaluation`.

A run directory receives ``config.yaml`` (the resolved config; a resume that changes settings
keeps the earlier one as ``config.N.yaml``), ``overrides.yaml`` (the command line's),
``metrics.csv`` (appended to by a resume; ``tensorboard/`` too with ``trainer.tensorboard``),
``checkpoints/last.ckpt`` and ``checkpoints/best.ckpt`` (lowest ``val/perplexity``) and
``summary.json`` (:class:`~protein_performer.training.report.TrainResult`);
``.protein-performer.lock`` while a process trains in it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch

from protein_performer.config.schema import TrainConfig
from protein_performer.config.validate import (
    validate_train_config,
)
from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.errors import DataError
from protein_performer.training.builders import (
    build_datamodule,
    build_module,
    build_trainer,
    callers_state_kept,
    resolve_precision,
)
from protein_performer.training.callbacks import (
    LastCheckpoint,
    LockGuard,
)
from protein_performer.training.graceful_stop import (
    GracefulInterrupt,
    sigterm_raises,
)
from protein_performer.training.lm_module import ProteinLMModule
from protein_performer.training.memory import (
    check_fits_cpu,
    estimate_memory,
    is_out_of_memory,
    out_of_memory_error,
)
from protein_performer.training.preflight import (
    TRAIN_OPTIONS,
    check_run_paths,
    check_trainer_launch,
    settings_without_effect,
)
from protein_performer.training.report import (
    TrainResult,
    print_header,
    run_data_line,
    stop_cause,
)
from protein_performer.training.run_dir import (
    check_run_dir,
    claim_run_dir,
    config_to_yaml,
    forget_versioned,
    remove_unused_run_dir,
    restore_versioned,
    run_dir_existed,
    write_versioned,
)
from protein_performer.training.run_lock import run_lock
from protein_performer.training.thread_governor import ThreadGovernor
from protein_performer.utils.atomic import make_output_dir, write_text_atomic
from protein_performer.utils.devices import choose_threads, is_rank_zero, usable_cpus

log = logging.getLogger(__name__)


def _fit(
    trainer: pl.Trainer,
    module: ProteinLMModule,
    dm: ProteinDataModule,
    cfg: TrainConfig,
    interrupt: GracefulInterrupt,
) -> None:
    sigint = signal.getsignal(signal.SIGINT)
    try:
        with sigterm_raises(), warnings.catch_warnings():
            # num_workers=0 is the right default on small CPU boxes; the hint is noise there
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            # a resumed run continues in its own checkpoint directory
            warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not")
            # ... or in a new one (hydra.run.dir=NEW): what the run writes is said in its header
            warnings.filterwarnings("ignore", message="The dirpath has changed from")
            # an empty validation split is said once, in words (ProteinDataModule.setup)
            warnings.filterwarnings("ignore", message="Total length of .* across ranks is zero")
            # third-party deprecations are for their developers, not for this run's user
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=FutureWarning)
            # the run logs at log_every_n_steps whatever the epoch's length
            warnings.filterwarnings(
                "ignore", message="The number of training batches .* is smaller"
            )
            # more workers than CPUs is said, and capped, by ProteinDataModule
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            trainer.fit(module, datamodule=dm, ckpt_path=cfg.ckpt_path, weights_only=True)
    except SystemExit as e:
        # Lightning turns a KeyboardInterrupt (Ctrl-C before the first step, or twice) into
        # sys.exit(1) after its own cleanup; the caller gets the KeyboardInterrupt back
        if isinstance(e.__context__, KeyboardInterrupt):
            raise e.__context__ from None
        if interrupt.aborted:
            raise KeyboardInterrupt from None
        raise
    finally:
        interrupt.restore()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, sigint)  # Lightning leaves SIGINT ignored after Ctrl-C
        for logger in trainer.loggers:  # rows logged before a stop in validation are kept
            with contextlib.suppress(Exception):
                logger.save()


def _set_threads(cfg: TrainConfig) -> tuple[int, str | None]:
    """torch's CPU threads for the run, set before any work: a busy machine gets fewer (the
    header says so)."""
    threads = choose_threads(cfg.trainer.threads)
    torch.set_num_threads(threads[0])
    return threads


def _governor(cfg: TrainConfig, threads: tuple[int, str | None] | None) -> list[pl.Callback]:
    """Threads re-checked during the run where the start chose them from the machine's load
    (not ``trainer.threads``, not ``OMP_NUM_THREADS``), in a run of one process."""
    one_process = str(cfg.trainer.devices) in ("1", "auto") and cfg.trainer.num_nodes == 1
    if threads is None or cfg.trainer.threads or threads[1] == "OMP_NUM_THREADS" or not one_process:
        return []
    return [ThreadGovernor(threads[0], usable_cpus())]


def train(
    cfg: TrainConfig,
    run_dir: str | os.PathLike,
    *,
    callbacks: list[pl.Callback] | None = None,
    overrides: Sequence[str] | None = None,
    run_dir_claimed: bool = False,
) -> TrainResult:
    """Train (or resume, with ``cfg.ckpt_path``) a protein LM; outputs go to ``run_dir``.

    A new run needs a new or empty ``run_dir`` (see :func:`claim_run_dir`; pass
    ``run_dir_claimed=True`` when the caller claimed it already). ``overrides`` (the command
    line's) are saved as ``overrides.yaml``.

    SIGINT/SIGTERM stop the run after the current step with its checkpoint and summary
    written (``result.interrupted``); a second signal raises ``KeyboardInterrupt``. The
    caller's global RNG states and environment are as they were afterwards.
    """
    if isinstance(cfg, Mapping):  # TrainConfig(**d): unknown keys are one-line errors there
        cfg = TrainConfig(**cfg)
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"train: cfg must be a TrainConfig, got {type(cfg).__name__}")
    with callers_state_kept():
        return _train(
            cfg, run_dir, callbacks=callbacks, overrides=overrides, run_dir_claimed=run_dir_claimed
        )


def _train(
    cfg: TrainConfig,
    run_dir: str | os.PathLike,
    *,
    callbacks: list[pl.Callback] | None,
    overrides: Sequence[str] | None,
    run_dir_claimed: bool,
) -> TrainResult:
    validate_train_config(cfg)
    check_trainer_launch(cfg.trainer)
    resume_step = check_run_paths(cfg, scan=not run_dir_claimed)
    rank_zero = is_rank_zero()
    if rank_zero:
        for note in settings_without_effect(cfg, overrides or ()):
            log.warning(note)
    if rank_zero and not run_dir_claimed:
        check_run_dir(run_dir, cfg.ckpt_path)
    estimate = estimate_memory(cfg, len(default_alphabet()))
    on_cpu = resolve_precision(cfg.trainer.accelerator, "auto") == "32-true"
    warning = check_fits_cpu(estimate) if on_cpu else None
    threads = _set_threads(cfg) if on_cpu else None
    # a new run's directory held nothing before (claim_run_dir): on an early failure it goes
    created = cfg.ckpt_path is None
    existed = run_dir_existed(run_dir)
    if rank_zero and not run_dir_claimed:
        run_path = claim_run_dir(run_dir, cfg.ckpt_path, config_to_yaml(cfg))
    else:
        run_path = make_output_dir(Path(run_dir).resolve(), "run directory")
    # one writer at a time (a resume while the run still trains is refused)
    with run_lock(run_path, enabled=rank_zero) as held:
        trainer = None
        try:
            if rank_zero and not created:  # a resume: its config, once the lock is ours
                write_versioned(run_path / "config.yaml", config_to_yaml(cfg))
            if rank_zero and overrides is not None:
                write_versioned(run_path / "overrides.yaml", "".join(f"- {o}\n" for o in overrides))
            pl.seed_everything(cfg.seed, workers=True, verbose=False)
            dm = build_datamodule(cfg)
            files = [
                *(cfg.data.files or []),
                *(cfg.data.val_files or []),
                *(cfg.data.test_files or []),
            ]
            if rank_zero and not cfg.data.shards and cfg.trainer.enable_progress_bar:
                # reading 79k proteins takes seconds, millions minutes: said before, timed after
                print(f"reading {len(files):,} FASTA file{'s' if len(files) != 1 else ''} ...",
                      file=sys.stderr, flush=True)  # fmt: skip
            t_read = time.perf_counter()
            dm.setup("fit")  # data errors before anything is printed (fit reuses what is loaded)
            read_s = time.perf_counter() - t_read
            if rank_zero:
                data_line = run_data_line(dm, cfg, read_s)
                print_header(cfg, run_path, estimate, warning, resume_step, data_line, threads)
            module = build_module(cfg, dm.alphabet)
            trainer, throughput, checkpoint = build_trainer(
                cfg, run_path, [*(callbacks or []), LockGuard(held), *_governor(cfg, threads)],
                resume_step,
            )  # fmt: skip
            interrupt = next(c for c in trainer.callbacks if isinstance(c, GracefulInterrupt))
            start = time.perf_counter()
            _fit(trainer, module, dm, cfg, interrupt)
        except BaseException as e:
            if created:
                remove_unused_run_dir(run_path, keep_dir=run_dir_claimed or run_path in existed)
            elif (
                rank_zero
                and (trainer is None or trainer.global_step <= (resume_step or 0))
                and not (held is not None and held.lost(every_s=0.0))  # (now another's)
            ):
                restore_versioned(run_path)  # no step trained with the changed config
            forget_versioned(run_path)
            if is_out_of_memory(e):
                step = int(trainer.global_step) if trainer is not None else None
                raise out_of_memory_error(e, cfg, step) from None
            if isinstance(e, DataError):
                raise e.with_options(TRAIN_OPTIONS) from None
            raise
        forget_versioned(run_path)  # the resume trained with this config: it stays
        elapsed = time.perf_counter() - start
        best = checkpoint.best_model_path or None
        last_cb = next(c for c in trainer.callbacks if isinstance(c, LastCheckpoint))
        last = str(last_cb.path) if last_cb.path.is_file() else None
        best_score = checkpoint.best_model_score
        steps = int(trainer.global_step)
        val_step = module.last_val_step

        # the last validation's metrics: this run's, else the checkpoint's (a resume)
        val = module.last_val_metrics.get

        result = TrainResult(
            run_dir=str(run_path),
            attention=cfg.model.kind_label,
            objective=cfg.objective,
            steps=steps,
            val_perplexity=val("val/perplexity"),
            val_accuracy=val("val/accuracy"),
            val_loss=val("val/loss"),
            best_val_perplexity=None if best_score is None else float(best_score),
            tokens_per_s=throughput.tokens_per_s,
            train_seconds=elapsed,
            best_checkpoint=best,
            last_checkpoint=last,
            val_perplexity_mask=val("val/perplexity_mask"),
            val_unigram_perplexity_mask=val("val/unigram_perplexity_mask"),
            val_unigram_perplexity=val("val/unigram_perplexity"),
            max_steps=cfg.trainer.max_steps,
            stopped_by=stop_cause(cfg, steps, interrupt),
            val_step=val_step,
            resumed_from_step=resume_step,
            validation_cut_at=interrupt.validation_cut_at,
        )
        if trainer.is_global_zero:
            write_text_atomic(
                run_path / "summary.json", json.dumps(result.to_dict(), indent=2) + "\n"
            )
        return result
