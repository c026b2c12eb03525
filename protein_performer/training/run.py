"""``train(cfg, run_dir)`` and ``evaluate(cfg)``: the library entry points (no Hydra needed).

A run directory receives ``config.yaml`` (the resolved config), ``metrics.csv`` (CSVLogger),
``checkpoints/last.ckpt`` and ``checkpoints/best.ckpt`` (lowest val perplexity) and
``summary.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import importlib.util
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Timer
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from protein_performer.config.schema import DataConfig, EvalConfig, TrainConfig, TrainerConfig
from protein_performer.config.validate import (
    eval_fasta_paths,
    fasta_unset,
    validate_eval_config,
    validate_train_config,
)
from protein_performer.data.alphabet import EXTRA_RESIDUES, Alphabet, default_alphabet
from protein_performer.data.cluster import (
    check_run_clustering,
    members_file,
    read_members,
    table_digest,
)
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.data.fasta import STREAM_HINT, check_distinct_inputs
from protein_performer.data.shards import read_manifest
from protein_performer.data.sources import load_fasta_source
from protein_performer.errors import ConfigError, DataError
from protein_performer.evaluation.context import (
    Target,
    cluster_fill,
    cluster_targets,
    context_perplexity,
    fixed_targets,
    record_order,
    sample_targets,
)
from protein_performer.model.checkpoints import (
    META_KEY,
    check_finite_weights,
    check_init_from,
    check_resume_compatible,
    init_weights_from,
    load_model,
    model_state,
    read_checkpoint,
    run_files,
)
from protein_performer.training.callbacks import (
    BestCheckpoint,
    LastCheckpoint,
    LockGuard,
    TokenThroughput,
    ValidateOnFinalStep,
)
from protein_performer.training.checkpoint_io import AtomicCheckpointIO
from protein_performer.training.graceful_stop import (
    STOP_SIGNAL_NAMES,
    GracefulInterrupt,
    sigterm_raises,
)
from protein_performer.training.lm_module import ProteinLMModule
from protein_performer.training.memory import (
    MemoryEstimate,
    check_fits_cpu,
    estimate_memory,
    is_out_of_memory,
    out_of_memory_error,
)
from protein_performer.training.metrics import (
    MLM_INPUT_KINDS,
    add_next_token_counts,
    batch_sums,
    causal_unigram_sums,
    perplexity,
    unigram_log_probs,
)
from protein_performer.training.metrics_csv import RunCSVLogger
from protein_performer.training.progress_bar import StepProgressBar
from protein_performer.training.resumable import ResumableLoader
from protein_performer.training.run_lock import LOCK_NAME, check_unlocked, run_lock
from protein_performer.utils.atomic import check_writable_file, make_output_dir, write_text_atomic
from protein_performer.utils.devices import is_rank_zero, pick_device, usable_cpus
from protein_performer.utils.outputs import (
    check_output_dir,
    check_output_file,
    entries,
    json_with_keys,
)
from protein_performer.utils.progress import progress as progress_bar
from protein_performer.utils.resources import missing_path_hint

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"


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
def _callers_state_kept() -> Any:
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


# ---- small helpers --------------------------------------------------------------------------
def config_to_yaml(cfg: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def _require_file(path: str, what: str) -> None:
    """One-line :class:`DataError` ``PATH: WHAT: not found`` (or ``not a file``)."""
    if not str(path).strip():  # Path("") is the working directory
        raise ConfigError(f"{what}: an empty path (a file is needed)")
    p = Path(path)
    if not p.is_file():
        if not p.exists():
            problem = "not found"
        elif p.is_dir():
            problem = "a directory, not a file"
        else:
            problem = f"a pipe or other stream, not a file: {STREAM_HINT}"
        hint = missing_path_hint(path) if problem == "not found" else ""
        raise DataError(f"{what}: {problem}{hint}", path=path)


def _num(x: float | None, fmt: str) -> str:
    if x is None:
        return "n/a"
    if math.isfinite(x) and abs(x) >= 1e6 and fmt.endswith("f"):
        return format(x, ".4g")  # a diverged model's perplexity, not 300 digits
    return format(x, fmt)


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as None: ``NaN`` and ``Infinity`` are not JSON,
    and strict parsers reject the whole file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def check_train_inputs(cfg: TrainConfig) -> int | None:
    """Validate ``cfg`` and every input path it names, before anything is written; returns
    the global step of ``cfg.ckpt_path`` (None when not resuming)."""
    validate_train_config(cfg)
    _check_trainer(cfg.trainer, warn=False)  # train() says the warnings, once
    return _check_paths(cfg, warn=False)  # train() checks again, and says what it notices


def _check_paths(cfg: TrainConfig, warn: bool = True, scan: bool = True) -> int | None:
    """Check every input path before any work; returns the global step of ``cfg.ckpt_path``
    (None when not resuming). ``scan``: read every weight of ``cfg.ckpt_path`` for NaN/inf
    (train() skips it when the CLI's :func:`check_train_inputs` did it)."""
    d = cfg.data
    for key in ("files", "val_files", "test_files"):
        for p in getattr(d, key) or []:
            _require_file(p, f"data.{key}")
    check_distinct_inputs(
        {f"data.{k}": getattr(d, k) for k in ("files", "val_files", "test_files")}
    )
    if d.clusters and not Path(d.clusters).exists():
        raise DataError(
            "data.clusters: not found (the output of `data cluster`)"
            + missing_path_hint(d.clusters),
            path=d.clusters,
        )
    if d.shards and not Path(d.shards).is_dir():
        problem = (
            "a file, not a shard directory (`data preprocess` writes one; FASTA goes to data.files)"
            if Path(d.shards).exists()
            else "shard directory not found"
        )
        raise DataError(f"data.shards: {problem}", path=d.shards)
    warn = warn and is_rank_zero()
    if d.clusters and d.split_by == "record" and not d.shards and warn:
        log.warning(
            "data.clusters is given but data.split_by=record: the train/val/test split is by "
            "record, so members of one cluster can sit on both sides; data.split_by=cluster "
            "keeps clusters apart"
        )
    if d.shards and warn:
        unread = [f"data.{k}" for k in ("files", "val_files", "test_files") if getattr(d, k)]
        if unread:
            log.warning(
                "data.shards is given: %s not read (the shards' own splits are used; "
                "data=shards starts from none)",
                " and ".join(unread) + (" are" if len(unread) > 1 else " is"),
            )
    if cfg.init_from:  # "default": the shipped checkpoint, as in the analysis commands
        try:  # before any data is read (its metadata only: mapped, not loaded)
            meta = read_checkpoint(cfg.init_from, mmap=True)[META_KEY]
        except DataError as e:
            raise DataError(f"init_from: {e.problem}", path=e.path) from None
        check_init_from(meta, cfg.model, default_alphabet(), cfg.objective, cfg.init_from)
    if cfg.ckpt_path:
        try:
            ckpt = read_checkpoint(cfg.ckpt_path, mmap=True)
        except DataError as e:
            raise DataError(f"ckpt_path: {e.problem}", path=cfg.ckpt_path) from None
        if "loops" not in ckpt or "optimizer_states" not in ckpt:
            raise DataError(
                "ckpt_path: not a training checkpoint (no trainer state; a model-only export?); "
                "use init_from=PATH to start a new run from its weights",
                path=cfg.ckpt_path,
            )
        # before the run directory is touched: a refused resume leaves its config as it was
        check_resume_compatible(
            ckpt.get(META_KEY), cfg.model, default_alphabet(), cfg.objective, "ckpt_path"
        )
        _check_resume_split((ckpt.get(META_KEY) or {}).get("data"), cfg.data)
        try:
            if scan:  # every tensor read: once per start (the CLI's first pass does it)
                check_finite_weights(model_state(ckpt), cfg.ckpt_path)
        except DataError as e:
            raise DataError(f"ckpt_path: {e.problem}", path=cfg.ckpt_path) from None
        step = int(ckpt.get("global_step", 0))
        _check_resume_processes(ckpt, cfg.trainer)
        if step >= cfg.trainer.max_steps:
            # Lightning would run no step and the run's summary would be rewritten empty
            raise ConfigError(
                f"ckpt_path: the run is already at step {step:,} of trainer.max_steps="
                f"{cfg.trainer.max_steps:,}; raise trainer.max_steps to train further "
                "(nothing was changed)"
            )
        # said by the first check that finds it (it puts the kept values into cfg.optim, so
        # the config the run directory records is what trains and a later check finds none)
        _warn_unapplied_optimizer_settings(ckpt, cfg.optim)
        return step
    return None


#: what a launcher of one process per node sets (torchrun, SLURM, Lightning's own variables)
NODE_LAUNCH_ENV = (
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "NODE_RANK",
    "WORLD_SIZE",
    "LSB_JOBID",
)
#: what mpirun sets; Lightning reads the ranks from it only through mpi4py
MPI_LAUNCH_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def settings_without_effect(cfg: TrainConfig, overrides: Sequence[str]) -> list[str]:
    """What the run will not do that the command line asked for (``overrides``), or that
    makes a setting moot: one sentence each."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    notes = []
    o, t, m, d = cfg.optim, cfg.trainer, cfg.model, cfg.data
    if o.warmup_steps >= t.max_steps and o.warmup_steps > 0:
        notes.append(
            f"optim.warmup_steps={o.warmup_steps:,} >= trainer.max_steps={t.max_steps:,}: the "
            "learning rate never reaches optim.lr"
        )
    if cfg.objective == "causal" and "data.mask_prob" in given:
        notes.append("data.mask_prob has no effect with objective=causal (nothing is masked)")
    if cfg.objective == "causal" and "model.save_features" in given and m.save_features:
        notes.append(
            "model.save_features has no effect with objective=causal (causal FAVOR always "
            "rebuilds its features in the backward)"
        )
    if not (m.is_performer or m.attention == "hedgehog"):
        for key in ("model.nb_features", "model.redraw_interval", "model.save_features"):
            if key in given:
                notes.append(f"{key} has no effect with model.attention={m.attention}")
    if d.batch_size is not None and "data.toks_per_batch" in given:
        notes.append(
            f"data.toks_per_batch has no effect: data.batch_size={d.batch_size} sets the batch"
        )
    return notes


TENSORBOARD_MISSING = (
    "trainer.tensorboard=true needs the tensorboard package "
    "(pip install tensorboard: the extra 'protein-performer[tensorboard]')"
)


def _installed(module: str) -> bool:
    """Whether ``module`` is an installed package (not a folder of that name in the working
    directory, which imports as a namespace package)."""
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.origin not in (None, "namespace")


def _check_trainer(t: TrainerConfig, warn: bool = True) -> None:
    """Before any data is read or a run directory claimed: what Lightning would find only
    later, in its own words, or not at all (a multi-node run waits forever for nodes that
    nobody started)."""
    _check_accelerator(t.accelerator)
    on_cuda = t.accelerator in ("gpu", "cuda") or (
        t.accelerator == "auto" and torch.cuda.is_available()
    )
    on_mps = t.accelerator == "mps" or (
        t.accelerator == "auto" and not on_cuda and torch.backends.mps.is_available()
    )
    on_gpu = on_cuda or on_mps
    if t.tensorboard and not any(_installed(m) for m in ("tensorboard", "tensorboardX")):
        raise ConfigError(TENSORBOARD_MISSING)
    if t.strategy == "fsdp" and not on_cuda:
        raise ConfigError(
            "trainer.strategy=fsdp runs on CUDA GPUs only; on the CPU use trainer.strategy=ddp "
            "trainer.accelerator=cpu trainer.devices=N"
        )
    if not on_gpu and t.precision in ("16-mixed", "16-true"):
        raise ConfigError(
            f"trainer.precision={t.precision} needs a CUDA GPU (float16 autocast); on the "
            "CPU use 32-true or bf16-mixed"
        )
    mpi = any(os.environ.get(v) for v in MPI_LAUNCH_ENV)
    if t.num_nodes > 1 and mpi and importlib.util.find_spec("mpi4py") is None:
        raise ConfigError(
            f"trainer.num_nodes={t.num_nodes} under mpirun needs mpi4py (pip install mpi4py) "
            "for Lightning to read the ranks; without it every process waits for the others "
            "forever"
        )
    if t.num_nodes > 1 and not mpi and not any(os.environ.get(v) for v in NODE_LAUNCH_ENV):
        raise ConfigError(
            f"trainer.num_nodes={t.num_nodes} needs one launch per node (torchrun --nnodes="
            f"{t.num_nodes} ..., srun or mpirun, see the README); no launcher was detected "
            f"(none of {', '.join(NODE_LAUNCH_ENV + MPI_LAUNCH_ENV)} is set), so it would wait for the "
            "other nodes forever (on one machine: trainer.num_nodes=1)"
        )
    launched = any(os.environ.get(v) for v in NODE_LAUNCH_ENV + MPI_LAUNCH_ENV)
    several = (isinstance(t.devices, int) and t.devices > 1) or (
        isinstance(t.devices, (list, tuple)) and len(t.devices) > 1
    )
    if not launched and t.num_nodes == 1 and (several or t.strategy in ("ddp", "fsdp")):
        _check_rendezvous()  # Lightning starts the ranks itself and meets them there
    world = os.environ.get("WORLD_SIZE", "1")
    counted = isinstance(t.devices, int) and t.devices > 0  # not auto / -1 / indices
    if os.environ.get("TORCHELASTIC_RUN_ID") and world.isdigit() and int(world) > 1 and counted:
        ranks = t.devices * t.num_nodes
        if t.devices == 1 and t.strategy not in ("ddp", "fsdp"):
            raise ConfigError(
                f"torchrun started {world} processes but the trainer runs one: each would train "
                f"the same model alone; add trainer=ddp trainer.devices={int(world) // t.num_nodes}"
            )
        if ranks != int(world):
            raise ConfigError(
                f"torchrun started {world} processes but trainer.devices={t.devices} x "
                f"trainer.num_nodes={t.num_nodes} makes {ranks}: make them agree"
            )
    if warn and not on_gpu and isinstance(t.devices, int) and t.devices > 1 and is_rank_zero():
        cpus = usable_cpus()
        if t.devices > cpus:
            log.warning(
                "trainer.devices=%d CPU processes on %d CPU core%s: every step runs %d ranks "
                "(a batch each) sharing the cores, slower than one process",
                t.devices,
                cpus,
                "s" if cpus != 1 else "",
                t.devices,
            )


def planned_devices(t: TrainerConfig) -> int | None:
    """Processes per node that ``trainer.devices`` asks for, as Lightning resolves it: a count,
    a list of indices, or ``auto`` / ``-1`` (every GPU when the accelerator may be one, else
    one CPU process); None when it cannot be told here (e.g. ``mps``)."""
    devices = t.devices
    if isinstance(devices, str):
        devices = devices.strip()
        if "," in devices:  # "0,1": those indices
            return len([d for d in devices.split(",") if d.strip()])
        devices = int(devices) if devices.lstrip("-").isdigit() else devices
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, int) and devices > 0:
        return devices
    if devices in ("auto", -1):
        if t.accelerator == "cpu":
            return 1
        if t.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
            return torch.cuda.device_count()
        return 1 if t.accelerator == "auto" else None
    return None


def _check_resume_processes(ckpt: dict[str, Any], t: TrainerConfig) -> None:
    """A run interrupted mid-epoch resumes on as many processes or fewer: on more, Lightning's
    restored count of the epoch's batches (per process) would end the epoch before the data
    does, and part of it would never be trained."""
    try:
        state = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
        saved, done = int(state.get("world_size", 0)), int(state.get("batches", 0))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return  # older checkpoints, other loaders: nothing to compare
    per_node = planned_devices(t)
    now = per_node * t.num_nodes if per_node else None
    world = os.environ.get("WORLD_SIZE", "")
    if any(os.environ.get(v) for v in NODE_LAUNCH_ENV + MPI_LAUNCH_ENV) and world.isdigit():
        now = int(world)  # a launcher started the processes: it says how many
    if saved and done and now and now > saved:
        raise ConfigError(
            f"ckpt_path: the run stopped inside an epoch on {saved} process"
            f"{'es' if saved != 1 else ''}; resumed on {now} it would leave part of that epoch "
            f"untrained: resume on {saved} (trainer.devices={saved // t.num_nodes or 1}), or "
            "start a new run from its weights with init_from="
        )


def _check_rendezvous() -> None:
    """Where the processes of a one-machine run meet (``MASTER_ADDR``/``MASTER_PORT``, often
    left exported by an earlier torchrun or SLURM job): a port in use crashed rank 0 and
    orphaned rank 1, a foreign address waited 30 minutes, both deaf to Ctrl-C."""
    port = os.environ.get("MASTER_PORT")
    if port:
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"MASTER_PORT={port!r} is not a port number (unset it)")
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("", int(port)))
            except OSError:
                raise ConfigError(
                    f"MASTER_PORT={port} is in use on this machine (another run, or an export "
                    "left from an earlier job): unset MASTER_PORT or choose a free port"
                ) from None
    addr = os.environ.get("MASTER_ADDR")
    if addr:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with socket.socket(family) as s:
            try:
                s.bind((addr, 0))
            except OSError:  # not an address of this machine (or not one at all)
                raise ConfigError(
                    f"MASTER_ADDR={addr} is not this machine, where a one-machine run "
                    "(trainer.num_nodes=1) meets its processes: unset MASTER_ADDR (an export "
                    "left from an earlier job?)"
                ) from None


def _check_accelerator(accelerator: str) -> None:
    """Before any data is read: Lightning would find no GPU only after loading it."""
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={accelerator} but no CUDA GPU is available here; use "
            "trainer.accelerator=cpu (trainer=cpu: one process on the CPU)"
        )
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.accelerator=mps but MPS is not available here; use trainer=cpu")


def _warn_unapplied_optimizer_settings(ckpt: dict[str, Any], optim: Any) -> None:
    """A resume restores the optimizer (Lightning loads its state, learning rate included):
    say so when the config asks for other values than the checkpoint's, which it keeps, and
    put the kept values in ``optim`` (the run's ``config.yaml`` records what trains)."""
    try:
        group = ckpt["optimizer_states"][0]["param_groups"][0]
        stored = {
            "optim.lr": ckpt["lr_schedulers"][0]["base_lrs"][0],
            "optim.betas": list(group["betas"]),
            "optim.eps": group["eps"],
            # the first group decays (param_groups: decayed weights, then the rest)
            "optim.weight_decay": group["weight_decay"],
        }
    except (KeyError, IndexError, TypeError):
        return
    given = {"optim.lr": optim.lr, "optim.betas": [float(b) for b in optim.betas]}
    given["optim.eps"] = optim.eps
    given["optim.weight_decay"] = optim.weight_decay
    changed = [k for k in stored if not _same_number(stored[k], given[k])]
    if changed:
        log.warning(
            "%s: the resumed run keeps the checkpoint's optimizer (%s); start a new run with "
            "init_from= to train on with other settings",
            ", ".join(f"{k}={given[k]}" for k in changed),
            ", ".join(f"{k.removeprefix('optim.')}={stored[k]}" for k in changed),
        )
        for key in changed:
            setattr(optim, key.removeprefix("optim."), stored[key])


def _same_number(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_number(x, y) for x, y in zip(a, b, strict=True))
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except (TypeError, ValueError):
        return a == b


RUN_DIR_ENTRIES = re.compile(
    r"(config(\.\d+)?\.yaml|overrides(\.\d+)?\.yaml|hparams(\.\d+)?\.yaml|metrics(\.\d+)?\.csv"
    rf"|summary\.json|{CHECKPOINT_DIR}|tensorboard(\.\d+)?|{re.escape(LOCK_NAME)})"
)


#: What an attempt that saved no checkpoint leaves once set aside for a new start.
SET_ASIDE = re.compile(
    rf"(config|overrides|hparams)\.\d+\.yaml|metrics\.\d+\.csv|tensorboard\.\d+"
    rf"|{re.escape(LOCK_NAME)}|{CHECKPOINT_DIR}"
)


def _only_temporaries(folder: Path) -> bool:
    """Whether ``folder`` is missing or holds nothing but hidden temporaries (an interrupted
    checkpoint write's)."""
    return not folder.is_dir() or all(p.name.startswith(".") for p in folder.iterdir())


def _set_aside_only(p: Path) -> bool:
    """Whether ``p`` holds nothing but attempts set aside by :func:`set_aside_attempt` (at
    least one: a folder of other things is a user's) and no checkpoint."""
    names = entries(p)
    return (
        any(re.fullmatch(r"config\.\d+\.yaml", n) for n in names)
        and all(SET_ASIDE.fullmatch(n) for n in names)
        and _only_temporaries(p / CHECKPOINT_DIR)
    )


#: An attempt's files and folders, set aside as ``NAME.N.EXT`` (nothing is removed: this
#: project never writes ``hparams.yaml``, so one there is a user's or an older version's).
_ATTEMPT_FILES = (
    ("config", ".yaml"),
    ("overrides", ".yaml"),
    ("hparams", ".yaml"),
    ("metrics", ".csv"),
    ("tensorboard", ""),
)


def saved_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoints a run saved in ``run_dir`` (not an interrupted write's hidden
    temporary)."""
    folder = run_dir / CHECKPOINT_DIR
    return (
        [p for p in folder.glob("*.ckpt") if not p.name.startswith(".")] if folder.is_dir() else []
    )


def attempt_without_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run's files and no checkpoint (an attempt killed before its
    first, or diverged): what :func:`set_aside_attempt` may set aside."""
    if not run_dir.is_dir() or not _is_run_config(run_dir / "config.yaml"):
        return False
    if (run_dir / "summary.json").exists():
        return False  # a run that ended (its checkpoints removed since): not to redo unasked
    names = entries(run_dir)
    return all(RUN_DIR_ENTRIES.fullmatch(n) for n in names) and _only_temporaries(
        run_dir / CHECKPOINT_DIR
    )


def set_aside_attempt(run_dir: Path) -> list[str]:
    """Rename an :func:`attempt_without_checkpoint`'s files to ``NAME.N.EXT`` (N the first
    number free for all of them) so that the run can start again in ``run_dir``; returns the
    new names ([] and nothing touched for any other directory, or one a live run holds)."""
    if not attempt_without_checkpoint(run_dir):
        return []
    check_unlocked(run_dir)
    n = 1
    while any((run_dir / f"{stem}.{n}{ext}").exists() for stem, ext in _ATTEMPT_FILES):
        n += 1
    kept = []
    for stem, ext in _ATTEMPT_FILES:
        path = run_dir / f"{stem}{ext}"
        if path.exists():
            path.rename(run_dir / f"{stem}.{n}{ext}")
            kept.append(f"{stem}.{n}{ext}")
    return kept


def _resuming_in(p: Path, ckpt_path: str | None) -> bool:
    return ckpt_path is not None and Path(ckpt_path).resolve().parent == (
        p.resolve() / CHECKPOINT_DIR
    )


def _run_id(path: Path) -> str | None:
    """The run that wrote the checkpoint at ``path`` (None: unreadable, or from before run
    ids were recorded)."""
    try:
        meta = read_checkpoint(path, mmap=True).get(META_KEY) or {}
    except DataError:
        return None
    run_id = (meta.get("data") or {}).get("run_id")
    return run_id if isinstance(run_id, str) else None


def _check_same_run(run_dir: Path, ckpt_path: str) -> None:
    """Refuse to continue, in ``run_dir``, a checkpoint that another run wrote (one copied
    into its checkpoints/): the resume would replace this run's metrics after that step and
    its checkpoints with the other run's continuation."""
    last = run_dir / CHECKPOINT_DIR / "last.ckpt"
    if not last.is_file() or last.resolve() == Path(ckpt_path).resolve():
        return
    mine, theirs = _run_id(last), _run_id(Path(ckpt_path))
    if mine and theirs and mine != theirs:
        raise DataError(
            f"ckpt_path: {Path(ckpt_path).name} was written by another run than this "
            f"directory's ({last} is of another): resuming it here would replace this run's "
            "metrics and checkpoints with that run's continuation; resume it in its own "
            "directory, or start a new run from its weights with init_from=PATH",
            path=run_dir,
        )


def _is_run_config(path: Path) -> bool:
    """A ``config.yaml`` that a training run wrote (its top-level sections), not a user's."""
    try:
        text = path.read_text(encoding="utf-8")[: 1 << 20]
    except (OSError, UnicodeDecodeError):
        return False
    return all(re.search(rf"^{k}:", text, re.M) for k in ("model", "data", "trainer", "objective"))


def check_run_dir(
    run_dir: str | os.PathLike, ckpt_path: str | None = None, key: str = "run directory"
) -> Path:
    """Refuse, before any work, a run directory whose files a run would replace.

    A new run needs a directory that does not exist yet or is empty. A directory holding a run
    is only continued by resuming from one of its own checkpoints
    (``ckpt_path=RUN/checkpoints/last.ckpt``); anything else (a user's files, another run) is
    never written into.
    """
    p = Path(run_dir)
    if p.is_symlink() and p.is_dir():
        p = p.resolve()  # writing into the directory a link points to replaces nothing
    p = check_output_dir(p, key, is_ours=lambda _: True, overwrite=True, what=key)
    if p.is_dir():
        check_unlocked(p)  # a run training there now: nothing of it is touched
    if _resuming_in(p, ckpt_path):
        _check_same_run(p, ckpt_path)  # type: ignore[arg-type]
        # before the steps it would lose: their checkpoint could not be saved
        check_writable_file(p / CHECKPOINT_DIR / "last.ckpt", "resuming the run")
        return p
    if not p.is_dir() or not any(p.iterdir()):
        return p
    if _set_aside_only(p):
        return p  # earlier attempts that saved no checkpoint, set aside (ckpt_path=last)
    names = sorted(entries(p))
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    # every run writes config.yaml first: a folder without one (a metrics.csv, a
    # checkpoints/ of the user's own) is not a run, whatever its names
    ours = _is_run_config(p / "config.yaml")
    if not ours or any(not RUN_DIR_ENTRIES.fullmatch(n) for n in names):
        raise DataError(
            f"{key}: not empty ({shown}); a new run needs a new or empty directory "
            "(choose another one)",
            path=p,
        )
    last = p / CHECKPOINT_DIR / "last.ckpt"
    if last.is_file():
        raise DataError(
            f"{key}: already holds a run ({shown}); continue it with ckpt_path={last}, or "
            "choose a new one",
            path=p,
        )
    if set(names) <= RUN_CONFIG_FILES:
        raise DataError(
            f"{key}: holds a run that has not trained yet ({shown}: another run starting now, "
            "or one stopped while loading); choose a new one, or start it again there with "
            "ckpt_path=last (its files are kept as NAME.1.EXT)",
            path=p,
        )
    others = saved_checkpoints(p)
    if others:  # last.ckpt removed, best.ckpt kept
        raise DataError(
            f"{key}: holds a run without checkpoints/last.ckpt ({shown}); continue it from "
            f"another of its checkpoints with ckpt_path={others[0]}, or choose a new one",
            path=p,
        )
    if (p / "summary.json").exists():
        raise DataError(
            f"{key}: holds a run that ended (summary.json) and whose checkpoints are gone "
            f"({shown}); choose a new one (its metrics and summary are kept there)",
            path=p,
        )
    raise DataError(
        f"{key}: holds a run that saved no checkpoint to resume from ({shown}); choose a new "
        "one, or start it again there with ckpt_path=last (its files are kept as NAME.1.EXT)",
        path=p,
    )


def claim_run_dir(
    run_dir: str | os.PathLike,
    ckpt_path: str | None,
    config_text: str,
    *,
    key: str = "run directory",
    find_free: bool = False,
) -> Path:
    """Check ``run_dir`` (see :func:`check_run_dir`) and claim it by writing ``config.yaml``.

    A new run creates ``config.yaml`` exclusively, so two runs started at once into one
    directory cannot both have it: the second gets an error, or with ``find_free`` the next
    free ``RUN_1``, ``RUN_2``, ... (for default, timestamped directories). A resume writes
    nothing here: :func:`train` writes its config once it holds the run's lock (a changed one
    kept as ``config.N.yaml``, put back if no step trains with it).
    """
    base = Path(run_dir)
    for n in range(1000 if find_free else 1):
        candidate = base if n == 0 else base.with_name(f"{base.name}_{n}")
        try:
            p = check_run_dir(candidate, ckpt_path, key)
        except DataError:
            if find_free and ckpt_path is None:
                continue
            raise
        p = make_output_dir(p.resolve(), key)
        if _resuming_in(p, ckpt_path):
            return p  # its config is written by train() once it holds the run's lock
        try:
            fd = os.open(p / "config.yaml", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            if find_free:
                continue
            raise DataError(
                f"{key}: another run started in this directory at the same time", path=p
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(config_text)
        return p
    raise DataError(f"{key}: no free directory next to it (tried {base}_1 to _999)", path=base)


#: Files a resume's claim kept as ``NAME.N.EXT`` (path -> where the old one went): put back
#: when the resume stops before training (:func:`restore_versioned`), so a run's history
#: holds no config that never trained a step.
_versioned: dict[Path, Path] = {}


def restore_versioned(run_dir: Path) -> None:
    """Put back the files :func:`_write_versioned` replaced in ``run_dir`` (said)."""
    for path, old in list(_versioned.items()):
        if path.parent == run_dir:
            del _versioned[path]
            if old.is_file():
                os.replace(old, path)
                log.warning("%s put back (the resume stopped before training)", path.name)


def _forget_versioned(run_dir: Path) -> None:
    for path in [p for p in _versioned if p.parent == run_dir]:
        del _versioned[path]


def _write_versioned(path: Path, text: str) -> None:
    """Write ``path``; when it exists with other content (ignoring ``ckpt_path`` and
    ``hydra.run.dir``, which a resume changes) keep the old one as ``NAME.N.EXT``."""

    def meaningful(t: str) -> list[str]:
        return [
            ln
            for ln in t.splitlines()
            if not re.match(r"^(- )?(ckpt_path|hydra\.run\.dir)[:=]", ln)
        ]

    if path.is_file() and meaningful(path.read_text(encoding="utf-8")) != meaningful(text):
        n = 1
        while path.with_name(f"{path.stem}.{n}{path.suffix}").exists():
            n += 1
        old = path.with_name(f"{path.stem}.{n}{path.suffix}")
        changes = _changed_keys(path.read_text(encoding="utf-8"), text)
        os.replace(path, old)
        _versioned[path] = old
        log.warning(
            "%s changed on resuming%s; the previous one is %s",
            path.name,
            f" ({changes})" if changes else "",
            old.name,
        )
    write_text_atomic(path, text)


def _changed_keys(before: str, after: str, shown: int = 4) -> str:
    """``seed: 0 -> 7; data.files: [...] -> [...]`` for two YAML configs' differing leaves
    (``ckpt_path`` aside), or "" when either is no mapping."""
    from omegaconf import OmegaConf

    def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(node, dict):
            return {prefix: node}
        out: dict[str, Any] = {}
        for k, v in node.items():
            out |= leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
        return out

    try:  # (hydra's own YAML reader: no other dependency)
        a, b = (OmegaConf.to_container(OmegaConf.create(t)) for t in (before, after))
    except Exception:  # not a mapping, not YAML: no detail, the files say it
        return ""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return ""
    la, lb = leaves(a), leaves(b)
    keys = [k for k in {**la, **lb} if k != "ckpt_path" and la.get(k) != lb.get(k)]

    def short(v: Any) -> str:
        text = str(v)
        return text if len(text) <= 40 else text[:37] + "..."

    parts = [f"{k}: {short(la.get(k))} -> {short(lb.get(k))}" for k in keys[:shown]]
    return "; ".join(parts) + (f"; {len(keys) - shown} more" if len(keys) > shown else "")


def resolve_precision(accelerator: str, precision: str) -> str:
    """``auto``: bf16 autocast on CUDA GPUs that compute in bf16 (Ampere and later), fp16
    autocast on older ones (where bf16 would be emulated or fall back to fp32), fp32 on CPU."""
    if precision != "auto":
        return precision
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if not gpu:
        return "32-true"
    if torch.cuda.is_available() and not _bf16_native():
        return "16-mixed"
    return "bf16-mixed"


def _eval_autocast(device: torch.device) -> Any:
    """Evaluation's precision on ``device``: what ``precision=auto`` trains with there."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if _bf16_native() else torch.float16
    return torch.autocast("cuda", dtype=dtype)


def _bf16_native() -> bool:
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch without the argument
        return bool(torch.cuda.is_bf16_supported())


class TrainingDataModule(ProteinDataModule):
    """ProteinDataModule whose train loader resumes mid-epoch exactly (see ResumableLoader)."""

    def train_dataloader(self) -> ResumableLoader:  # type: ignore[override]
        return ResumableLoader(super().train_dataloader(), getattr(self, "trainer", None))


def build_datamodule(cfg: TrainConfig, *, cls: type[ProteinDataModule] = TrainingDataModule):
    d = cfg.data
    return cls(
        files=d.files,
        val_files=d.val_files,
        test_files=d.test_files,
        shards=d.shards,
        split_fractions=tuple(d.split_fractions),
        split_seed=d.split_seed,
        clusters=d.clusters,
        split_by=d.split_by,
        sample=d.sample,
        packing=d.packing,
        min_members=d.min_members,
        family_spread=d.family_spread,
        pair_copy=d.pair_copy,
        pair_alone=d.pair_alone,
        pair_align=cfg.align.weight > 0,
        pair_mask=d.pair_mask,
        pair_fill=d.pair_fill,
        objective=cfg.objective,
        mode=d.mode,
        max_length=d.max_length,
        toks_per_batch=d.toks_per_batch,
        batch_size=d.batch_size,
        mask_prob=d.mask_prob,
        seed=d.seed,
        num_workers=d.num_workers,
        invalid=d.invalid,
        strip_gaps=d.strip_gaps,
        allow_nucleotide=d.allow_nucleotide,
        max_records=d.max_records,
        val_max_records=d.val_max_records,
    )


def shards_split(shards: str | os.PathLike) -> dict[str, Any]:
    """The split a shard directory was made with, as the checkpoint's data settings:
    ``split_by`` ``record`` / ``cluster`` (hashed; the clusters table when preprocess recorded
    it) or ``explicit`` (files given per split: not reproducible from one FASTA)."""
    split = read_manifest(shards).get("split") or {}
    if split.get("method") != "hash":
        return {
            "split_by": "explicit",
            "split_fractions": None,
            "split_seed": None,
            "clusters": None,
        }
    by_cluster = str(split.get("key", "")).startswith("cluster")
    out = {
        "split_by": "cluster" if by_cluster else "record",
        "split_fractions": split.get("fractions"),
        "split_seed": split.get("seed"),
        "clusters": split.get("clusters") if by_cluster else None,
    }
    if by_cluster and split.get("clusters_digest"):
        out["clusters_digest"] = split["clusters_digest"]  # the table the shards were split by
    return out


def split_settings(d: DataConfig) -> dict[str, Any]:
    """How the train/val/test split is made, as the checkpoint keeps it (so that evaluate
    split=test reproduces it, and a resume can tell a changed split): ``split_by``,
    ``split_fractions``, ``split_seed``, ``clusters`` (absolute path) and ``clusters_digest``
    (the table's member -> cluster map, :func:`members_digest`)."""
    info: dict[str, Any] = {
        "split_by": d.split_by,
        "split_fractions": list(d.split_fractions),
        "split_seed": d.split_seed,
        "clusters": os.path.abspath(d.clusters) if d.clusters else None,
    }
    if d.shards:  # the shards' own split, not data.split_* (which shards do not use)
        info.update(shards_split(d.shards))
    table = info["clusters"]
    by_cluster = info["split_by"] == "cluster"
    if "clusters_digest" not in info:  # shards keep the digest of the table they were split by
        info["clusters_digest"] = (
            table_digest(table) if by_cluster and table and Path(table).exists() else None
        )
    return info


def _check_resume_split(stored: Mapping[str, Any] | None, d: DataConfig) -> None:
    """A resume must keep the run's train/val/test split: another one would put proteins the
    model trained on into its validation and test sets (and best.ckpt would be chosen over two
    validation sets)."""
    if not isinstance(stored, Mapping) or "split_fractions" not in stored:
        return  # a checkpoint that does not record its split
    now = split_settings(d)
    changed = []
    for key in ("split_by", "split_fractions", "split_seed"):
        before, after = stored.get(key), now[key]
        if key == "split_fractions" and before is not None and after is not None:
            same = [round(float(x), 12) for x in before] == [round(float(x), 12) for x in after]
        else:
            same = before == after
        if not same:
            changed.append(f"data.{key}: {before!r} -> {after!r}")
    if now["split_by"] == "cluster" and stored.get("split_by") == "cluster":
        if stored.get("clusters_digest") and now["clusters_digest"]:
            if stored["clusters_digest"] != now["clusters_digest"]:
                changed.append(f"data.clusters: another clustering ({d.clusters})")
        elif (
            stored.get("clusters")
            and now["clusters"]
            and members_file(stored["clusters"]) != members_file(now["clusters"])
        ):
            # a checkpoint from before the digest: only the path, which may have moved
            log.warning(
                "resuming with data.clusters=%s, the run used %s: the split is the run's only "
                "if the table is the same",
                now["clusters"],
                stored["clusters"],
            )
    if changed:
        raise ConfigError(
            "ckpt_path: resuming would change the run's train/val/test split "
            f"({'; '.join(changed)}),"
            " so proteins it trained on would be validated and tested; resume with the run's "
            "data settings, or start a new run from its weights with init_from=PATH"
        )


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
        callbacks.append(StepProgressBar())
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
                f"  val perplexity  {_num(self.val_perplexity, '.3f')}"
                f"  (best {_num(self.best_val_perplexity, '.3f')}){at}"
                + (
                    f"; next-token, unigram {_num(self.val_unigram_perplexity, '.3f')}"
                    if self.val_unigram_perplexity is not None
                    else ""
                ),
                f"  val accuracy    {_num(self.val_accuracy, '.4f')}",
                *(
                    [
                        f"  <mask> only     {_num(self.val_perplexity_mask, '.3f')}  (val perplexity"
                        + (
                            f"; unigram {_num(self.val_unigram_perplexity_mask, '.3f')})"
                            if self.val_unigram_perplexity_mask is not None
                            else ")"
                        )
                    ]
                    if self.val_perplexity_mask is not None
                    else []
                ),
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


def _metric(trainer: pl.Trainer, key: str) -> float | None:
    value = trainer.callback_metrics.get(key)
    return None if value is None else float(value)


def _stopped_by(cfg: TrainConfig, steps: int, interrupt: GracefulInterrupt) -> str:
    if interrupt.stopped_at is not None and interrupt.stop_reason:
        return interrupt.stop_reason  # under DDP also a signal that reached another rank only
    if steps >= cfg.trainer.max_steps:
        return "max_steps"
    return "max_time" if cfg.trainer.max_time else "stopped"


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


def _data_line(dm: ProteinDataModule, cfg: TrainConfig, read_s: float = 0.0) -> str:
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
    took = f" (read in {read_s:.0f} s)" if read_s >= 2 else ""
    return ", ".join(parts) + f"; {split}{took}" + "".join(notes)


def _print_header(
    cfg: TrainConfig,
    run_path: Path,
    estimate: MemoryEstimate,
    warning: str | None,
    resume_step: int | None,
    data: str = "",
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
    if cfg.init_from:
        lines.append(f"weights from: {cfg.init_from} (init_from: a new run, its own optimizer)")
    if warning:
        lines.append(f"warning: {warning}")
    print("\n".join(lines), file=sys.stderr, flush=True)


# option names in data error messages -> the keys that set them for train / evaluate
TRAIN_OPTIONS = {
    "invalid=": "data.invalid=",
    "allow_nucleotide=": "data.allow_nucleotide=",
    "strip_gaps": "data.strip_gaps=true",
}
EVAL_OPTIONS = {"strip_gaps": "strip_gaps=true"}

# what a run writes before it trains (its lock too: removed with them when nothing trained)
RUN_CONFIG_FILES = frozenset({"config.yaml", "overrides.yaml", LOCK_NAME})


def remove_unused_run_dir(path: Path, *, keep_dir: bool = False) -> None:
    """A run that failed before training (bad data, settings, out of memory, Ctrl-C while
    loading) leaves no directory behind that holds only its config files: it would look like
    a run. Only the files a run writes go; the directory itself goes only when it is then
    empty and ``keep_dir`` is false (a directory the user made before the run stays)."""
    names = {p.name for p in path.iterdir()} if path.is_dir() else set()
    ckpts = path / CHECKPOINT_DIR
    if not path.is_dir() or not names <= RUN_CONFIG_FILES | {CHECKPOINT_DIR}:
        return
    if ckpts.is_dir() and any(ckpts.iterdir()):
        return
    for name in names & RUN_CONFIG_FILES:
        (path / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        if ckpts.is_dir():
            ckpts.rmdir()
        if not keep_dir:
            path.rmdir()


def run_dir_existed(run_dir: str | os.PathLike) -> set[Path]:
    """The directories :func:`claim_run_dir` might pick for ``run_dir`` that exist already
    (``run_dir`` and its ``_N`` siblings): on failure those are kept, emptied of the run's
    files, and only the ones the run created are removed."""
    base = Path(run_dir).resolve()
    if not base.parent.is_dir():
        return set()
    return {p for p in base.parent.glob(glob.escape(base.name) + "*") if p.is_dir()}


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
    with _callers_state_kept():
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
    _check_trainer(cfg.trainer)
    resume_step = _check_paths(cfg, scan=not run_dir_claimed)
    rank_zero = is_rank_zero()
    if rank_zero:
        for note in settings_without_effect(cfg, overrides or ()):
            log.warning(note)
    if rank_zero and not run_dir_claimed:
        check_run_dir(run_dir, cfg.ckpt_path)
    estimate = estimate_memory(cfg, len(default_alphabet()))
    on_cpu = resolve_precision(cfg.trainer.accelerator, "auto") == "32-true"
    warning = check_fits_cpu(estimate) if on_cpu else None
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
                _write_versioned(run_path / "config.yaml", config_to_yaml(cfg))
            if rank_zero and overrides is not None:
                _write_versioned(
                    run_path / "overrides.yaml", "".join(f"- {o}\n" for o in overrides)
                )
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
                data_line = _data_line(dm, cfg, read_s)
                _print_header(cfg, run_path, estimate, warning, resume_step, data_line)
            module = build_module(cfg, dm.alphabet)
            trainer, throughput, checkpoint = build_trainer(
                cfg, run_path, [*(callbacks or []), LockGuard(held)], resume_step
            )
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
            _forget_versioned(run_path)
            if is_out_of_memory(e):
                step = int(trainer.global_step) if trainer is not None else None
                raise out_of_memory_error(e, cfg, step) from None
            if isinstance(e, DataError):
                raise e.with_options(TRAIN_OPTIONS) from None
            raise
        _forget_versioned(run_path)  # the resume trained with this config: it stays
        elapsed = time.perf_counter() - start
        best = checkpoint.best_model_path or None
        last_cb = next(c for c in trainer.callbacks if isinstance(c, LastCheckpoint))
        last = str(last_cb.path) if last_cb.path.is_file() else None
        best_score = checkpoint.best_model_score
        steps = int(trainer.global_step)
        val_step = module.last_val_step

        def val(key: str) -> float | None:  # this run's, else the checkpoint's (a resume)
            value = _metric(trainer, key)
            return module.last_val_metrics.get(key) if value is None else value

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
            stopped_by=_stopped_by(cfg, steps, interrupt),
            val_step=val_step,
            resumed_from_step=resume_step,
            validation_cut_at=interrupt.validation_cut_at,
        )
        if trainer.is_global_zero:
            write_text_atomic(
                run_path / "summary.json", json.dumps(result.to_dict(), indent=2) + "\n"
            )
        return result


# ---- evaluate ---------------------------------------------------------------------------------
EVAL_JSON_KEYS = ("checkpoint", "fasta", "perplexity")


@dataclass
class EvalResult:
    checkpoint: str
    fasta: str
    attention: str
    objective: str
    sequences: int
    tokens: int
    predicted_tokens: int
    loss: float
    perplexity: float
    accuracy: float
    seconds: float
    seed: int
    # MLM only: the same metrics split by what the input showed at the predicted position
    # ("mask" / "random" / "unchanged", see metrics.mlm_input_kind_stats); None for causal.
    by_input: dict[str, dict[str, Any]] | None = None
    # what invalid=skip/replace did to the input (None: nothing)
    input_changes: str | None = None
    # the baseline on the same positions: residue frequencies of the training data (stored in
    # the checkpoint; older checkpoints: of the evaluated data), "from" says which
    unigram: dict[str, Any] | None = None
    # crop mode: proteins longer than max_length (crop=random scores one window of each;
    # crop=sliding cuts them into `windows` items); share of all residues inside the items
    crop: str | None = None
    cropped_records: int = 0
    residues_in_windows: float = 1.0
    windows: int | None = None
    # context=...: the paired with/without-context scores (training.context_eval)
    context: dict[str, Any] | None = None
    # split=: which part of which split was scored ({"part", "by", "fractions", "seed",
    # "clusters"}); None: every record
    split: dict[str, Any] | None = None
    # predicted positions whose true letter is X or another non-standard one (B, Z, U, O)
    nonstandard_targets: int = 0
    # concat mode: how the windows were packed, in words (None: crop mode)
    packing: str | None = None
    # no split= on a checkpoint that records its split: every record was scored, said
    scope: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))

    def format(self) -> str:
        seqs = "sequence" if self.sequences == 1 else "sequences"
        files = self.fasta.split(", ")
        name = self.fasta if len(files) <= 2 else f"{files[0]} and {len(files) - 1} more files"
        text = (
            f"{name}: perplexity {_num(self.perplexity, '.3f')}, accuracy {self.accuracy:.4f} "
            f"({self.predicted_tokens:,} predicted token{'' if self.predicted_tokens == 1 else 's'}"
            f" in {self.sequences:,} {seqs}; {self.attention}, {self.objective})"
        )
        if not math.isfinite(self.perplexity):
            text += (
                "\n  the perplexity is not finite: the model's outputs overflow or are NaN on "
                "these proteins (weights of a run that diverged?)"
            )
        if self.predicted_tokens < 100:
            # perplexity over a handful of positions says little: said next to it
            text += (
                f"\n  warning: {self.predicted_tokens} predicted "
                f"position{'' if self.predicted_tokens == 1 else 's'} only: these numbers "
                "are noisy (more or longer records, or another seed= to see how much)"
            )
        if self.input_changes:
            text += f"\n  input: {self.input_changes}"
        if self.nonstandard_targets:
            text += (
                f"\n  {self.nonstandard_targets:,} of the predicted positions hold X or another "
                "non-standard letter (B/Z/U/O); the model's and the unigram numbers include them"
            )
        if self.cropped_records and self.crop == "random":
            text += (
                f"\n  cropped: {self.cropped_records:,} of {self.sequences:,} proteins are longer "
                f"than max_length; {100 * self.residues_in_windows:.1f}% of all residues were in "
                "the scored windows (crop=sliding scores every residue)"
            )
        elif self.cropped_records:
            text += (
                f"\n  windows: {self.cropped_records:,} proteins longer than max_length were cut "
                f"into consecutive windows ({self.windows:,} items); every residue was in one"
            )
        if self.packing:
            text += f"\n  windows: {self.packing}"
        if self.scope:
            text += f"\n  note: {self.scope}"
        if self.unigram:
            u = self.unigram
            line = f"\n  unigram baseline ({u['from']} frequencies): perplexity {_num(u['perplexity'], '.3f')}"
            mask = (self.by_input or {}).get("mask") or {}
            if u.get("mask_perplexity") and mask.get("perplexity"):
                ratio = mask["perplexity"] / u["mask_perplexity"]
                line += f"; on <mask> positions {_num(u['mask_perplexity'], '.3f')} (model/unigram {_num(ratio, '.3f')})"
            else:
                line += (
                    f" (model/unigram {_num(self.perplexity / u['perplexity'], '.3f')} on every "
                    "scored position: none was <mask>)"
                    if self.by_input is not None and not mask.get("predicted_tokens")
                    else f" (model/unigram {_num(self.perplexity / u['perplexity'], '.3f')})"
                )
            text += line
        if self.by_input:
            parts = [
                f"{kind} {_num(m['perplexity'], '.3f')} / {_num(m['accuracy'], '.4f')} "
                f"({m['predicted_tokens']:,})"
                for kind, m in self.by_input.items()
            ]
            text += "\n  by input at the predicted position (perplexity / accuracy): " + "; ".join(
                parts
            )
        if self.context:
            c = self.context
            text += (
                f"\n  with context ({c['source']}): {c['proteins']:,} proteins, "
                f"{c['positions']:,} <mask> positions, {c['mean_context_proteins']:.1f} context "
                f"proteins ({c['mean_context_tokens']:.0f} tokens) on average: perplexity "
                f"{_num(c['with_context']['perplexity'], '.3f')} with context vs "
                f"{_num(c['without_context']['perplexity'], '.3f')} alone (ratio "
                f"{_num(c['ratio'], '.3f')}); unigram {_num(c['unigram_perplexity'], '.3f')}"
            )
            if c["positions"] < 100:
                text += (
                    f"\n    warning: {c['positions']} <mask> positions only: the ratio is noisy "
                    "(more proteins, or context_max_proteins unset)"
                )
            if c.get("targets_cut"):
                text += (
                    f"\n    {c['targets_cut']:,} of {c['proteins']:,} proteins are longer than "
                    "half "
                    f"of max_length={c['max_length']:,} (the other half is the context's room): a "
                    f"seeded half-window of each was scored, "
                    f"{100 * c['target_residues_in_windows']:.1f}% of their residues"
                )
            if c.get("context_proteins_cut"):
                text += (
                    f"\n    {c['context_proteins_cut']:,} of {c['proteins']:,} windows hold a "
                    f"context protein cut to the room left in max_length={c['max_length']:,}"
                )
            if "with_fill_only" in c:
                text += (
                    f"\n    fill ({c['mean_fill_tokens']:.0f} tokens of other clusters' proteins "
                    f"and separators on average) without the homologs: "
                    f"{_num(c['with_fill_only']['perplexity'], '.3f')} (with context / fill only "
                    f"{_num(c['ratio_vs_fill'], '.3f')})"
                )
                if c.get("short_fill_windows"):
                    text += (
                        f"\n    warning: {c['short_fill_windows']:,} windows could not be filled "
                        f"to {c['max_length']:,} tokens (too few proteins of other clusters)"
                    )
            for key, what in (
                ("identical", "with an identical sequence in context"),
                ("no_identical", "without one"),
            ):
                part = (c.get("by_context") or {}).get(key)
                if part and part["proteins"] and c["targets_with_identical_context"]:
                    text += (
                        f"\n    {what}: {part['proteins']:,} proteins, {part['positions']:,} "
                        f"positions: {_num(part['with_context']['perplexity'], '.3f')} vs "
                        f"{_num(part['without_context']['perplexity'], '.3f')} (ratio "
                        f"{_num(part['ratio'], '.3f')})"
                    )
        return text


def _eval_split(cfg: EvalConfig, stored: dict[str, Any]) -> dict[str, Any]:
    """The split evaluate reproduces: the values given, else the checkpoint's training run's
    (so ``split=test`` scores that run's held-out proteins), else the defaults. ``caveats``:
    the warnings why its held-out part may hold proteins the model trained on (said as they
    are found; the result keeps them)."""
    caveats: list[str] = []
    # clusters= alone implies a cluster split, except when it is there for context=cluster
    implied = "cluster" if cfg.clusters and cfg.context != "cluster" else None
    if cfg.split and stored.get("split_by") == "explicit":
        raise ConfigError(
            f"split={cfg.split}: the training run's shards were split by files given per split "
            "(preprocess --val/--test), which no FASTA split reproduces; evaluate that file "
            "without split="
        )
    if cfg.split and implied and not cfg.split_by and stored.get("split_by") == "record":
        # another split than the run's: its "held-out" part would hold training proteins
        raise ConfigError(
            f"split={cfg.split} with clusters=: the training run split by record, so a cluster "
            "split's held-out part would hold proteins the model trained on; leave clusters= "
            "out for the run's own split, or add split_by=cluster to mean another one"
        )
    by = cfg.split_by or implied or stored.get("split_by") or "record"
    if cfg.split and stored.get("split_by") and by != stored["split_by"]:
        caveats.append(
            f"split={cfg.split} split_by={by}: the training run split by {stored['split_by']}; "
            "this held-out part may hold proteins the model trained on"
        )
        log.warning("%s", caveats[-1])
    clusters = cfg.clusters or (stored.get("clusters") if by == "cluster" else None)
    if cfg.split and cfg.context == "cluster" and by == "cluster" and stored.get("clusters"):
        # the split is the training run's; clusters= is the context's table
        table = stored["clusters"]
        if not cfg.clusters or Path(cfg.clusters).resolve() == Path(table).resolve():
            clusters = table
        elif Path(table).exists():
            log.warning(
                "split=%s uses the training run's clusters table %s; clusters=%s only picks "
                "the context",
                cfg.split,
                table,
                cfg.clusters,
            )
            clusters = table
        else:  # moved or made elsewhere: the table given is the only one there is
            caveats.append(
                f"split={cfg.split}: the training run's clusters table {table} is not here; the "
                f"split is drawn from clusters={cfg.clusters} (the run's own split only if it "
                "is the same clustering)"
            )
            log.warning("%s", caveats[-1])
    if cfg.split is None:
        given = [
            k
            for k in ("split_by", "clusters", "split_fractions", "split_seed")
            if getattr(cfg, k) is not None and not (k == "clusters" and cfg.context == "cluster")
        ]
        if given:
            log.warning(
                "%s only apply with split=train|val|test; every record is scored", ", ".join(given)
            )
        # every record is scored: no split, so no clusters table (the training run's may
        # have moved since)
        by, clusters = "record", None
    elif by == "cluster" and not clusters:
        raise ConfigError("split_by=cluster needs clusters=DIR (the output of `data cluster`)")
    elif by == "cluster" and not Path(clusters).exists():
        raise DataError(
            "clusters: not found (the training run's clusters table; give clusters=DIR)",
            path=clusters,
        )
    if cfg.split and by == "cluster" and stored.get("split_by") == "cluster":
        problem = check_run_clustering(clusters, table_digest(clusters), stored, cfg.split)
        if problem:
            caveats.append(problem)
    fractions = list(cfg.split_fractions or stored.get("split_fractions") or [0.9, 0.05, 0.05])
    seed = cfg.split_seed if cfg.split_seed is not None else (stored.get("split_seed") or 0)
    for key, value in (("split_seed", seed), ("split_fractions", fractions)):
        if cfg.split and stored.get(key) is not None and not _same_number(value, stored[key]):
            caveats.append(
                f"split={cfg.split} {key}={value}: the training run split with {stored[key]}; "
                f"this {cfg.split} part is not the run's (it holds proteins the run "
                f"{'did not train on' if cfg.split == 'train' else 'trained on'})"
            )
            log.warning("%s", caveats[-1])
    return {
        "caveats": caveats,
        "by": by,
        "clusters": clusters if by == "cluster" else None,
        "fractions": fractions,
        "seed": seed,
    }


def _training_copies(dm: ProteinDataModule, split: str) -> str | None:
    """How many records of the held-out part ``split`` are identical to a training record
    (``find_copies``: two strains' copies under two ids, which a split by record puts on both
    sides), said and returned; None when there are none."""
    found = dm.copies.get(split)
    if found is None or not len(found[0]):
        return None
    shared, source = found
    problem = (
        f"{len(shared):,} of {len(source):,} {split} records are identical to a training "
        f"sequence (e.g. {source.record_id(int(shared[0]))}): their metrics are not held out "
        "(the run split by record; data.split_by=cluster keeps such copies on one side)"
    )
    log.warning("%s", problem)
    return problem


def _same_files(given: Sequence[str], stored: Sequence[str] | None) -> bool:
    """Whether ``given`` names the files of ``stored`` (a checkpoint's, absolute): by any
    path that leads to them, or moved (the same file names: what "give fasta=" asks for when
    they are not where the run read them)."""
    if not stored:
        return False
    if sorted(map(os.path.realpath, given)) == sorted(map(os.path.realpath, stored)):
        return True
    return sorted(map(os.path.basename, given)) == sorted(map(os.path.basename, stored))


def _warn_repeated_ids(source: Any, cfg: EvalConfig) -> None:
    """A record id given twice is said (training says it too): scored twice, and with
    ``context=cluster`` each copy is the other's homolog."""
    ids = getattr(source, "ids", None)
    if not ids:
        return
    counts = Counter(ids)
    repeats = sum(n - 1 for n in counts.values() if n > 1)
    if repeats:
        example = next(rid for rid, n in counts.items() if n > 1)
        log.warning(
            "%d of %d evaluated records repeat an earlier record's id (e.g. %s): the same "
            "protein given twice?%s",
            repeats,
            len(ids),
            example,
            " With context=cluster each is the other's homolog."
            if cfg.context == "cluster"
            else "",
        )


def _check_context_file(path: str) -> None:
    """``context=``: ``cluster`` or a FASTA file; a near miss says what was meant."""
    p = Path(path)
    if not p.exists() and path.strip().lower() in ("cluster", "clusters"):
        raise ConfigError(f"context={path}: did you mean context=cluster?")
    if p.is_dir() and (p / "members.tsv").is_file():
        raise ConfigError(
            f"context={path} is a clusters folder: context=cluster clusters={path} scores each "
            "protein after its own cluster's members"
        )
    _require_file(path, "context")


def _scope_note(
    cfg: EvalConfig,
    stored: Mapping[str, Any],
    fasta: Sequence[str],
    run_cap: int | None,
    objective: str = "mlm",
) -> str | None:
    """What the scored records are, where it is not what a reader assumes: ``split=train``
    (trained on); the run's ``data.max_records`` applied before its split; no ``split=`` on
    a file the checkpoint's run trained on (most of its records were)."""
    notes = []
    if cfg.mask_prob is not None and objective == "causal":
        notes.append("mask_prob has no effect on a causal checkpoint (nothing is masked)")
    if cfg.split == "train":
        notes.append("split=train: proteins of the run's training split, not held out")
    if run_cap:
        notes.append(
            f"as in the training run, only the first {run_cap:,} records of the files were "
            f"read (its data.max_records) before the split"
        )
    if cfg.context == "cluster" and cfg.split and stored.get("split_by") == "record":
        notes.append(
            f"context=cluster takes homologs among the {cfg.split} records only; the run split "
            "by record, so most cluster members sit in its training split and only proteins "
            "with a member in this part are scored with context"
        )
    # the same file by another path (a symlink, a relative one) is the same data
    trained = {os.path.realpath(f) for f in stored.get("files") or []}
    if not cfg.split and stored.get("split_by") in ("record", "cluster"):
        shared = [f for f in fasta if os.path.realpath(f) in trained]
        if shared:
            notes.append(
                f"{', '.join(shared)}: the training run's data, and without split= every "
                "record is scored, most of them trained on (split=test scores the run's "
                "held-out part)"
            )
    return "; ".join(notes) or None


def _eval_packing(
    cfg: EvalConfig, stored: Mapping[str, Any], mode: str
) -> tuple[str, str | None, str | None]:
    """``(packing, words, clusters table)`` of evaluate's concat windows: with ``split=`` (the
    run's own files) family packing when the training run packed by family and its clusters
    table (or ``clusters=``) is here, so that ``split=val`` measures what the run's validation
    did; stream packing otherwise (other files need not be in the run's table), said."""
    if mode != "concat":
        return "stream", None, None
    trained = stored.get("packing")
    table = cfg.clusters or stored.get("clusters")
    run_table = stored.get("clusters")
    if cfg.split and cfg.context == "cluster" and run_table and Path(run_table).exists():
        table = run_table  # clusters= picks the context only (see _eval_split)
    if trained == "family" and cfg.split and table and Path(table).exists():
        spread = int(stored.get("family_spread") or 1)
        how = f", family_spread={spread}" if spread > 1 else ""
        return "family", f"concat, family packing ({table}{how}), as the training run", str(table)
    if trained == "family":
        why = (
            "without split= the files need not be the run's"
            if not cfg.split
            else "its clusters table is not here (clusters=DIR packs these the same way)"
        )
        return (
            "stream",
            f"concat, stream packing (proteins in a seeded order): the training run packed by "
            f"family; {why}",
            None,
        )
    return "stream", "concat, stream packing (proteins in a seeded order)", None


def _unigram_summary(
    sums: torch.Tensor, kinds: torch.Tensor | None, counts_from: str
) -> dict[str, Any] | None:
    nll, n, correct = sums.tolist()
    if not n:
        return None
    out: dict[str, Any] = {
        "from": counts_from,
        "perplexity": perplexity(nll, n),
        "accuracy": correct / n,
        "mask_perplexity": None,
        "mask_accuracy": None,
    }
    if kinds is not None:
        m_nll, m_n, m_correct = kinds[MLM_INPUT_KINDS.index("mask")].tolist()
        if m_n:
            out["mask_perplexity"] = perplexity(m_nll, m_n)
            out["mask_accuracy"] = m_correct / m_n
    return out


def _cropping(dm: ProteinDataModule, split: str, mode: str, max_length: int) -> dict[str, Any]:
    """How many records crop mode cut, and the share of residues inside the scored items."""
    ds = dm.datasets[split]
    if split in dm.windows:  # crop=sliding: every residue is in exactly one item
        records, items, cut = dm.windows[split]
        return {"records": records, "cropped": cut, "share": 1.0, "windows": items}
    if mode != "crop":
        return {"records": len(ds.source), "cropped": 0, "share": 1.0, "windows": None}
    lengths = ds.source.lengths
    total = int(lengths.sum())
    inside = int(np.minimum(lengths, max_length - 2).sum())
    return {
        "records": len(ds.source),
        "cropped": int(np.count_nonzero(lengths > max_length - 2)),
        "share": inside / total if total else 1.0,
        "windows": None,
    }


def _context_targets(
    cfg: EvalConfig, source: Any, stored: dict[str, Any], alphabet: Alphabet, order: list[int]
) -> list[Target]:
    """The proteins ``context=`` scores, each with its context proteins, in ``order``."""
    if cfg.context == "cluster":
        clusters = cfg.clusters or stored.get("clusters")
        if not clusters:
            raise ConfigError("context=cluster needs clusters=DIR (the output of `data cluster`)")
        try:
            cluster_of = read_members(clusters)
        except DataError as e:
            if cfg.clusters or "not found" not in e.problem:
                raise
            # the training run's table, which the user never named: say where it came from
            raise DataError(
                f"{e.problem}: the training run's clusters table is not here; give "
                "clusters=DIR (the output of `data cluster`)",
                path=e.path,
            ) from None
        ids = source.ids or []
        missing = [rid for rid in ids if rid not in cluster_of]
        if missing and len(missing) == len(ids):
            raise DataError(
                f"context=cluster: none of the {len(missing):,} evaluated records is in the "
                f"clusters table (e.g. {missing[0]}; the table lists ids such as "
                f"{next(iter(cluster_of))}): a table of other files?",
                path=clusters,
            )
        if missing:
            log.warning(
                "context=cluster: %s of %s evaluated records are not in the clusters table %s "
                "(e.g. %s); each is its own cluster, without context",
                f"{len(missing):,}",
                f"{len(ids):,}",
                clusters,
                missing[0],
            )
        targets = cluster_targets(
            source, cluster_of, min_members=cfg.context_min_members, order=order
        )
        if not targets:
            raise DataError(
                f"context=cluster: no evaluated protein has {cfg.context_min_members - 1} or "
                "more cluster members among the evaluated records",
                path=clusters,
            )
        return targets
    _require_file(cfg.context, "context")
    homologs = load_fasta_source(
        [cfg.context],
        policy=cfg.invalid,
        alphabet=alphabet,
        strip_gaps=cfg.strip_gaps,
        allow_nucleotide=cfg.allow_nucleotide,
    )
    if len(homologs) == 0:
        raise DataError("context: no records", path=cfg.context)
    return fixed_targets(
        source,
        [homologs[i] for i in range(len(homologs))],
        order=order,
    )


@torch.inference_mode()
def evaluate(cfg: EvalConfig) -> EvalResult:
    """Perplexity and accuracy of a checkpoint on FASTA file(s): every record, or one part of
    their hash split (``cfg.split``).

    MLM masks and crops are drawn from ``cfg.seed`` (deterministic). Writes the result as JSON
    to ``cfg.output`` when set.
    """
    validate_eval_config(cfg)
    if fasta_unset(cfg.fasta):  # split= alone: the training run's own files
        cfg = dataclasses.replace(cfg, fasta=run_files(cfg.checkpoint, cfg.split))
    fasta = eval_fasta_paths(cfg)
    for path in fasta:
        _require_file(path, "fasta")
    if cfg.context and cfg.context != "cluster":
        _check_context_file(cfg.context)
    output = None
    if cfg.output:
        output = check_output_file(
            cfg.output,
            "output",
            overwrite=cfg.overwrite,
            is_ours=json_with_keys(EVAL_JSON_KEYS),
            what="evaluation JSON file",
            overwrite_hint="overwrite=true",
        )
    model, meta = load_model(cfg.checkpoint, attention=cfg.attention, nb_features=cfg.nb_features)
    alphabet = Alphabet.from_dict(meta["alphabet"])
    stored = meta.get("data") or {}
    mode = cfg.mode or stored.get("mode", "crop")
    max_length = cfg.max_length or stored.get("max_length") or model.config.max_len
    mask_prob = cfg.mask_prob or stored.get("mask_prob", 0.15)
    if model.config.position == "learned" and max_length > model.config.max_len:
        raise ConfigError(
            f"max_length={max_length} exceeds the checkpoint's model.max_len="
            f"{model.config.max_len} (learned positions); use max_length<={model.config.max_len}"
        )
    split_info = _eval_split(cfg, stored)
    split = cfg.split or "test"
    files = {"files": fasta} if cfg.split else {"test_files": fasta}
    packing, packing_note, family_table = _eval_packing(cfg, stored, mode)
    run_cap = stored.get("max_records") if cfg.split else None
    dm = ProteinDataModule(
        **files,
        split_fractions=tuple(split_info["fractions"]),
        split_seed=split_info["seed"],
        clusters=split_info["clusters"] or family_table,
        split_by=split_info["by"],
        packing=packing,
        family_spread=int(stored.get("family_spread") or 1) if packing == "family" else 1,
        objective=meta["objective"],
        mode=mode,
        max_length=max_length,
        toks_per_batch=cfg.toks_per_batch,
        mask_prob=mask_prob,
        seed=cfg.seed,
        invalid=cfg.invalid,
        strip_gaps=cfg.strip_gaps,
        allow_nucleotide=cfg.allow_nucleotide,
        crop=cfg.crop,
        # the run's own split: of the records it read (data.max_records caps before the split)
        max_records=min(x for x in (run_cap, cfg.max_records) if x)
        if split == "train" and (run_cap or cfg.max_records)
        else run_cap,
        val_max_records=cfg.max_records,
        alphabet=alphabet,
        # the run's own split by record of its own files: copies of training records said
        find_copies=cfg.split in ("val", "test")
        and split_info["by"] == stored.get("split_by") == "record"
        and not split_info["caveats"]  # (another seed: most of it was trained on anyway)
        and _same_files(fasta, stored.get("files")),
    )
    stage = {"train": "fit", "val": "validate", "test": "test"}[split]
    try:
        dm.setup(stage)
    except DataError as e:
        raise e.with_options(EVAL_OPTIONS) from None
    source = dm.datasets[split].source if split in dm.datasets else None
    _warn_repeated_ids(source, cfg)
    counts = getattr(source, "encode_counts", None)
    changes = counts.changes() if counts is not None else None
    if source is None or len(dm.datasets[split]) == 0:
        if (
            counts is not None
            and counts.records_kept == 0
            and counts.skipped_invalid + counts.skipped_empty
        ):
            problem = f"no usable records ({changes})"
        elif cfg.split is None:
            problem = "no records to evaluate"
        else:
            problem = f"the {split} split is empty"
        raise DataError(problem, path=", ".join(fasta))
    caveats = split_info["caveats"]
    copies = _training_copies(dm, split)
    if copies:
        caveats.append(copies)
    targets = fill = None
    if cfg.context:
        if meta["objective"] == "causal":
            raise ConfigError("context= scores masked-LM checkpoints; this one is causal")
        # whole proteins (crop=sliding cut the dataset's copy into windows)
        whole = dm._load_source(split) if split in dm.windows else source
        order = record_order(whole, cfg.context_order)
        targets = _context_targets(cfg, whole, stored, alphabet, order)
        targets = sample_targets(targets, cfg.context_max_proteins, cfg.seed)
        if cfg.context_fill:
            fill = cluster_fill(
                whole,
                read_members(cfg.clusters or stored.get("clusters")),
                order=order,
            )
    loader = {
        "train": dm.train_dataloader,
        "val": dm.val_dataloader,
        "test": dm.test_dataloader,
    }[split]()
    device = pick_device(cfg.device)
    model.to(device)
    causal = meta["objective"] == "causal"
    autocast = _eval_autocast(device)
    # (nll sum, count, correct) in total and per MLM input kind, summed on the device
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    kinds = (
        None if causal else torch.zeros(len(MLM_INPUT_KINDS), 3, dtype=torch.float64, device=device)
    )
    tokens = torch.zeros((), dtype=torch.int64, device=device)
    # targets that are X (unknown) or another non-standard letter: counted, and said
    extra = torch.tensor(
        [alphabet.index(c) for c in EXTRA_RESIDUES if c in alphabet.tokens], device=device
    )
    extra_targets = torch.zeros((), dtype=torch.int64, device=device)
    counts_from = "training data" if stored.get("unigram_counts") else "evaluated data"
    unigram_counts = stored.get("unigram_counts") or np.bincount(
        np.asarray(dm.datasets[split].source.tokens), minlength=len(alphabet)
    )
    uni_logp = unigram_log_probs(unigram_counts, alphabet).to(device)
    # the same sums for the unigram baseline on the same positions (causal: from the targets'
    # histogram at the end, as <eos>/<sep> are targets there and have no residue count)
    uni_sums = torch.zeros_like(sums)
    uni_kinds = None if kinds is None else torch.zeros_like(kinds)
    target_hist = torch.zeros(len(alphabet), dtype=torch.float64, device=device)
    start = time.perf_counter()
    for batch in progress_bar(loader, desc="evaluating", unit="batch"):
        batch = {k: v.to(device) for k, v in batch.items()}
        with autocast:
            logits = model(batch["input_ids"], batch["padding_mask"])["logits"]
        total, per_kind = batch_sums(
            logits, batch["labels"], batch["input_ids"], causal, alphabet.mask_idx
        )
        sums += total
        if kinds is not None:
            kinds += per_kind
        if causal:
            add_next_token_counts(target_hist, batch["labels"])
        else:
            uni = uni_logp.expand(*batch["labels"].shape, -1)
            total, per_kind = batch_sums(
                uni, batch["labels"], batch["input_ids"], causal, alphabet.mask_idx
            )
            uni_sums += total
            if uni_kinds is not None:
                uni_kinds += per_kind
        tokens += (~batch["padding_mask"]).sum()
        scored = batch["labels"][:, 1:] if causal else batch["labels"]
        extra_targets += torch.isin(scored, extra).sum()
    nll, count, correct = sums.tolist()
    if causal:
        uni_sums, counts_from = causal_unigram_sums(
            target_hist.cpu(), unigram_counts, alphabet, counts_from
        )
    unigram = _unigram_summary(uni_sums, uni_kinds, counts_from)
    context = None
    if targets is not None:
        with _eval_autocast(device):  # the same precision as the plain pass
            context = context_perplexity(
                model,
                alphabet,
                targets,
                max_length=max_length,
                style="concat" if mode == "concat" else "crop",
                mask_prob=mask_prob,
                seed=cfg.seed,
                toks_per_batch=cfg.toks_per_batch,
                device=device,
                unigram_log_probs=uni_logp,
                progress=True,
                fill=fill,
                fill_place=cfg.context_fill_place,
            )
        context["max_length"] = max_length
        context["source"] = (
            f"each protein's cluster, >= {cfg.context_min_members} members"
            + (
                f", among other clusters' proteins to {max_length} tokens"
                + (", right before the protein" if cfg.context_fill_place == "adjacent" else "")
                if fill
                else ""
            )
            if cfg.context == "cluster"
            else cfg.context
        )
    cropping = _cropping(dm, split, mode, max_length)
    if count == 0:
        raise DataError("nothing to predict (no residues)", path=cfg.fasta)
    by_input = None
    if kinds is not None:
        by_input = {  # None, not NaN, for a kind without positions: the JSON stays valid
            kind: {
                "predicted_tokens": int(n),
                "loss": s / n if n else None,
                "perplexity": perplexity(s, n) if n else None,
                "accuracy": c / n if n else None,
            }
            for kind, (s, n, c) in zip(MLM_INPUT_KINDS, kinds.tolist(), strict=True)
        }
    result = EvalResult(
        checkpoint=str(cfg.checkpoint),
        fasta=", ".join(fasta),
        attention=model.config.kind_label,
        objective=meta["objective"],
        sequences=cropping["records"],
        tokens=int(tokens),
        predicted_tokens=int(count),
        loss=nll / count,
        perplexity=perplexity(nll, count),
        accuracy=correct / count,
        seconds=time.perf_counter() - start,
        seed=cfg.seed,
        by_input=by_input,
        input_changes=changes,
        unigram=unigram,
        nonstandard_targets=int(extra_targets),
        crop=cfg.crop if mode == "crop" else None,
        cropped_records=cropping["cropped"],
        residues_in_windows=cropping["share"],
        windows=cropping["windows"],
        packing=packing_note,
        scope="; ".join(
            n for n in (_scope_note(cfg, stored, fasta, run_cap, meta["objective"]), *caveats) if n
        )
        or None,
        context=context,
        split=None
        if not cfg.split
        else {
            "part": cfg.split,
            "by": split_info["by"],
            "fractions": list(split_info["fractions"]),
            "seed": split_info["seed"],
            "clusters": split_info["clusters"],
            "caveats": caveats,
        },
    )
    if cfg.output:
        try:
            write_text_atomic(output, json.dumps(result.to_dict(), indent=2) + "\n")
        except OSError as e:
            raise DataError(f"output: not written ({e.strerror or e})", path=cfg.output) from None
    return result
