"""Checks made before a run starts: input paths, trainer settings the machine can honour, launcher and rendezvous variables, settings that would have no effect. Each failure is a one-line ConfigError naming the key."""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from protein_performer.config.schema import DataConfig, TrainConfig, TrainerConfig
from protein_performer.config.validate import validate_train_config
from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.cluster import members_file, table_digest
from protein_performer.data.cluster_recipes import table_recipe
from protein_performer.data.fasta import check_distinct_inputs
from protein_performer.data.homolog_hits import hit_table_path
from protein_performer.data.shards import read_manifest
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.checkpoints import (
    META_KEY,
    check_finite_weights,
    check_init_from,
    check_resume_compatible,
    model_state,
    read_checkpoint,
)
from protein_performer.utils.devices import is_rank_zero, usable_cpus
from protein_performer.utils.numbers import same_number
from protein_performer.utils.paths import require_file
from protein_performer.utils.resources import missing_path_hint

log = logging.getLogger(__name__)


def check_train_inputs(cfg: TrainConfig) -> int | None:
    """Validate ``cfg`` and every input path it names, before anything is written; returns
    the global step of ``cfg.ckpt_path`` (None when not resuming)."""
    validate_train_config(cfg)
    check_trainer_launch(cfg.trainer, warn=False)  # train() says the warnings, once
    return check_run_paths(cfg, warn=False)  # train() checks again, and says what it notices


def check_run_paths(cfg: TrainConfig, warn: bool = True, scan: bool = True) -> int | None:
    """Check every input path before any work; returns the global step of ``cfg.ckpt_path``
    (None when not resuming). ``scan``: read every weight of ``cfg.ckpt_path`` for NaN/inf
    (train() skips it when the CLI's :func:`check_train_inputs` did it)."""
    d = cfg.data
    for key in ("files", "val_files", "test_files"):
        for p in getattr(d, key) or []:
            require_file(p, f"data.{key}")
    check_distinct_inputs(
        {f"data.{k}": getattr(d, k) for k in ("files", "val_files", "test_files")}
    )
    if d.clusters and not Path(d.clusters).exists():
        raise DataError(
            "data.clusters: no such file or directory (the output of `data cluster`)"
            + missing_path_hint(d.clusters),
            path=d.clusters,
        )
    if d.pair_homologs:
        try:
            hit_table_path(d.pair_homologs)
        except DataError as e:
            raise DataError(
                f"data.pair_homologs: {e.problem}" + missing_path_hint(d.pair_homologs),
                path=e.path,
            ) from None
    if d.shards and not Path(d.shards).is_dir():
        problem = (
            "a file, not a shard directory (`data preprocess` writes one; FASTA goes to data.files)"
            if Path(d.shards).exists()
            else "no such shard directory"
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


def check_trainer_launch(t: TrainerConfig, warn: bool = True) -> None:
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
    changed = [k for k in stored if not same_number(stored[k], given[k])]
    if changed:
        log.warning(
            "%s: the resumed run keeps the checkpoint's optimizer (%s); start a new run with "
            "init_from= to train on with other settings",
            ", ".join(f"{k}={given[k]}" for k in changed),
            ", ".join(f"{k.removeprefix('optim.')}={stored[k]}" for k in changed),
        )
        for key in changed:
            setattr(optim, key.removeprefix("optim."), stored[key])


# option names in data error messages -> the keys that set them for train
TRAIN_OPTIONS = {
    "invalid=": "data.invalid=",
    "allow_nucleotide=": "data.allow_nucleotide=",
    "strip_gaps": "data.strip_gaps=true",
}


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
    (the table's member -> cluster map, :func:`members_digest`) with ``clusters_recipe``
    (how ``data cluster`` built it, :func:`table_recipe`)."""
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
        if info["clusters_digest"]:  # how it was built, for a mismatch to name later
            info["clusters_recipe"] = table_recipe(table)
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
