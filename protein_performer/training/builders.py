"""What a training run is built from: precision, the datamodule (and its split settings), the LightningModule and the Trainer with the project's callbacks."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Timer
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from protein_performer.config.schema import TrainConfig, TrainerConfig
from protein_performer.data.alphabet import Alphabet
from protein_performer.data.config import DataConfig
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.errors import ConfigError
from protein_performer.model.checkpoints import init_weights_from
from protein_performer.training.callbacks import (
    BestCheckpoint,
    LastCheckpoint,
    TokenThroughput,
    ValidateOnFinalStep,
)
from protein_performer.training.checkpoint_io import AtomicCheckpointIO
from protein_performer.training.graceful_stop import GracefulInterrupt
from protein_performer.training.lm_module import ProteinLMModule
from protein_performer.training.metrics_csv import RunCSVLogger
from protein_performer.training.preflight import TENSORBOARD_MISSING, split_settings
from protein_performer.training.progress_bar import StepProgressBar
from protein_performer.training.resumable import ResumableLoader
from protein_performer.training.run_dir import CHECKPOINT_DIR
from protein_performer.utils.devices import bf16_native

log = logging.getLogger(__name__)


class _QuietLightning(logging.Filter):
    """Drops Lightning's lines that say nothing about this run: product tips, the
    ``GPU available: False`` / ``TPU available`` banner on machines without them, and the
    ``Trainer.fit stopped`` line (the run summary says why it stopped), the restoring lines of
    a resume (the header says "resuming at step N")."""

    NOISE = (
        "💡 Tip",
        "GPU available: False",
        "TPU available",
        "HPU available",
        "`Trainer.fit` stopped",
        "Restoring states from the checkpoint",
        "Restored all states from the checkpoint",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.NOISE)


@contextlib.contextmanager
def callers_state_kept() -> Any:
    """What :func:`train` changes for the run and gives back to its caller (a library user's
    own experiment continues as it was): the global RNGs (Lightning's ``seed_everything``
    reseeds them; CUDA's only when CUDA was initialised before the run), the environment
    variables it sets for data workers and Lightning's logger filter
    (:class:`_QuietLightning`)."""
    import random

    rngs = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    env = {k: os.environ.get(k) for k in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")}
    quiet = _QuietLightning()
    logger = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        random.setstate(rngs[0])
        np.random.set_state(rngs[1])
        torch.set_rng_state(rngs[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def resolve_precision(accelerator: str, precision: str) -> str:
    """``auto``: bf16 autocast on CUDA GPUs that compute in bf16 (Ampere and later), fp16
    autocast on older ones (where bf16 would be emulated or fall back to fp32), fp32 on CPU."""
    if precision != "auto":
        return precision
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if not gpu:
        return "32-true"
    if torch.cuda.is_available() and not bf16_native():
        return "16-mixed"
    return "bf16-mixed"


class TrainingDataModule(ProteinDataModule):
    """ProteinDataModule whose train loader resumes mid-epoch exactly (see ResumableLoader)."""

    def train_dataloader(self) -> ResumableLoader:  # type: ignore[override]
        return ResumableLoader(super().train_dataloader(), getattr(self, "trainer", None))


def build_datamodule(
    cfg: TrainConfig, *, cls: type[ProteinDataModule] = TrainingDataModule
) -> ProteinDataModule:
    """The run's data: its ``data`` section, the objective, and alignment targets in the
    batches when ``align.weight > 0``."""
    return cls(cfg.data, objective=cfg.objective, pair_align=cfg.align.weight > 0)


def pair_settings(d: DataConfig) -> dict[str, Any]:
    """How a ``pairs``-packed run built its rows (partners, copies, rows alone, the hits
    table), kept in the checkpoint so a model card or a later run can say what it was
    trained on; empty for the other packings."""
    if d.packing != "pairs":
        return {}
    return {
        "pair_partners": d.pair_partners,
        "pair_alone": d.pair_alone,
        "pair_copy": d.pair_copy,
        "pair_mask": d.pair_mask,
        "pair_fill": d.pair_fill,
        "pair_homologs": os.path.abspath(d.pair_homologs) if d.pair_homologs else None,
        "pair_columns": d.pair_columns,
        "pair_column_crop": d.pair_column_crop,
    }


def build_module(cfg: TrainConfig, alphabet: Alphabet) -> ProteinLMModule:
    d = cfg.data
    data_info = {
        "mode": d.mode,
        "max_length": d.max_length,
        "mask_prob": d.mask_prob,
        "packing": d.packing,
        "min_members": d.min_members,
        "family_spread": d.family_spread,
        # the training files (absolute), so that evaluate can say when it scores them whole
        "files": [os.path.abspath(f) for f in d.files] if d.files and not d.shards else None,
        # val/test read from files of their own: ``files`` is the training part only
        "held_out_files": bool(d.val_files or d.test_files),
        # the records read before the hash split (shards cap their train split after it;
        # explicit val/test files have no split to cap)
        "max_records": None if d.shards or d.val_files or d.test_files else d.max_records,
        # which run wrote a checkpoint (a resume keeps its checkpoint's): a checkpoint of
        # another run is not continued in this run's directory
        "run_id": uuid.uuid4().hex,
        **split_settings(d),
        **pair_settings(d),
    }
    module = ProteinLMModule(
        cfg.model,
        cfg.optim,
        objective=cfg.objective,
        alphabet=alphabet,
        seed=cfg.seed,
        total_steps=cfg.trainer.max_steps,
        data_info=data_info,
        align=cfg.align,
    )
    if cfg.init_from:
        init_weights_from(module.model, cfg.init_from, alphabet, cfg.objective)
    return module


def build_trainer(
    cfg: TrainConfig,
    run_dir: Path,
    extra_callbacks: list[pl.Callback] | None = None,
    resume_step: int | None = None,
) -> tuple[pl.Trainer, TokenThroughput, pl.callbacks.ModelCheckpoint]:

    t = cfg.trainer
    loggers: list[Any] = [RunCSVLogger(run_dir, resume_step)]
    if t.tensorboard:
        try:
            from pytorch_lightning.loggers import TensorBoardLogger

            loggers.append(TensorBoardLogger(save_dir=str(run_dir), name="tensorboard", version=""))
        except ModuleNotFoundError:
            raise ConfigError(TENSORBOARD_MISSING) from None
    throughput = TokenThroughput()
    checkpoint = BestCheckpoint(
        dirpath=str(run_dir / CHECKPOINT_DIR),
        filename="best",
        monitor="val/perplexity",
        mode="min",
        save_top_k=1,
        auto_insert_metric_name=False,
        enable_version_counter=False,
    )
    last = LastCheckpoint(run_dir / CHECKPOINT_DIR, every_minutes=t.checkpoint_every_minutes)
    callbacks: list[pl.Callback] = [
        GracefulInterrupt(),
        throughput,
        checkpoint,
        last,
        ValidateOnFinalStep(),
    ]
    if t.enable_progress_bar:
        callbacks.append(StepProgressBar(max_seconds=max_time_seconds(t.max_time)))
    a = cfg.analysis
    if a.similarity_every_n_steps:
        from protein_performer.analysis.callback import SimilarityCallback

        callbacks.append(
            SimilarityCallback(
                a.similarity_every_n_steps,
                a.similarity_proteins,
                a.similarity_threshold,
                a.similarity_min_arcs,
                cfg.seed,
            )
        )
    callbacks += list(extra_callbacks or [])
    try:
        trainer = _lightning_trainer(t, run_dir, loggers, callbacks)
    except (ValueError, TypeError, MisconfigurationException) as e:
        # Lightning's checks of accelerator/devices/strategy/precision: one line, not a traceback
        message = " ".join(str(e).split())
        raise ConfigError(f"trainer settings rejected by Lightning: {message}") from None
    return trainer, throughput, checkpoint


def max_time_seconds(max_time: str | None) -> float | None:
    """``DD:HH:MM:SS`` (``trainer.max_time`` once validated) in seconds."""
    if not max_time:
        return None
    days, hours, minutes, seconds = (int(x) for x in str(max_time).split(":"))
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


class SessionTimer(Timer):
    """``trainer.max_time`` for this invocation: Lightning's timer restores the time a resumed
    run had used, so every later job of a chain (each resuming with the same budget, under its
    scheduler's limit) stopped at once; this one starts from zero on every start."""

    @property
    def state_key(self) -> str:
        return "Timer"  # the key Lightning's timer used: older checkpoints find it

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


def _lightning_trainer(
    t: TrainerConfig, run_dir: Path, loggers: list[Any], callbacks: list[pl.Callback]
) -> pl.Trainer:
    if t.max_time:
        callbacks = [*callbacks, SessionTimer(duration=t.max_time, interval="step")]
    return pl.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=t.strategy,
        precision=resolve_precision(t.accelerator, t.precision),
        max_steps=t.max_steps,
        max_epochs=-1,
        val_check_interval=t.val_check_interval,
        check_val_every_n_epoch=None,
        limit_val_batches=t.limit_val_batches,
        num_sanity_val_steps=0,
        log_every_n_steps=t.log_every_n_steps,
        gradient_clip_val=t.gradient_clip_val or None,
        accumulate_grad_batches=t.accumulate_grad_batches,
        enable_progress_bar=t.enable_progress_bar,
        enable_model_summary=t.model_summary,
        deterministic=t.deterministic,
        use_distributed_sampler=False,  # ProteinDataModule shards by rank itself
        default_root_dir=str(run_dir),
        logger=loggers,
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],
    )
