"""Value checks of the run settings (choices, ranges, paths given): the dataclasses in
:mod:`.schema` hold the types; these say what a value may be, in one-line
:class:`~protein_performer.errors.ConfigError` messages naming the key."""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from datetime import timedelta
from typing import Any

from protein_performer.config.schema import (
    ACCELERATORS,
    OPTIMIZERS,
    PRECISION_ALIASES,
    PRECISIONS,
    SCHEDULES,
    STRATEGIES,
    EvalConfig,
    ExtractConfig,
    GenerateConfig,
    PlotHeadsConfig,
    ScoreConfig,
    SimilarityConfig,
    TrainConfig,
)
from protein_performer.data.config import (
    CONTEXT_ORDERS,
    FILL_PLACES,
    INVALID_POLICIES,
    MODES,
    OBJECTIVES,
    SPLIT_BY,
)
from protein_performer.errors import ConfigError
from protein_performer.model.config import ATTENTION_KINDS
from protein_performer.utils.checks import (
    check_choice,
    check_counts,
    check_fraction,
    check_int,
)
from protein_performer.utils.paths import check_distinct_inputs


def _validate_score_config(cfg: ScoreConfig) -> None:
    for key in ("checkpoint", "mutations", "out"):
        if getattr(cfg, key) in (None, "", "???"):
            raise ConfigError(f"{key}=PATH is required")
    if (cfg.sequence is None) == (cfg.fasta is None):
        raise ConfigError("give the wild type as sequence=SEQ or fasta=PATH (one of them)")
    if cfg.record is not None and cfg.fasta is None:
        raise ConfigError("record= picks a record of fasta=; give fasta=PATH")
    if cfg.context is not None and not str(cfg.context).strip():
        raise ConfigError("context= is empty: give a FASTA of the wild type's homologs")
    check_int("context_max_homologs", cfg.context_max_homologs, 1, optional=True)
    check_int("context_tokens", cfg.context_tokens, 1, optional=True)
    check_int("context_samples", cfg.context_samples, 1)
    check_counts("context_window_homologs", cfg.context_window_homologs, ("auto",))
    check_choice("context_sampling", cfg.context_sampling, ("first", "weighted", "diverse"))
    if not isinstance(cfg.context_crop, bool):
        raise ConfigError(f"context_crop must be true or false (got {cfg.context_crop!r})")
    for key in ("context_min_coverage", "context_retrieval", "context_max_identity"):
        value = getattr(cfg, key)
        if value is None and key == "context_max_identity":
            continue
        check_fraction(key, value)
    _positive("toks_per_batch", cfg.toks_per_batch)
    _check_device(cfg.device)
    if cfg.attention is not None:
        check_choice("attention", cfg.attention, ATTENTION_KINDS)
    if cfg.nb_features is not None:
        _positive("nb_features", cfg.nb_features)


def validate_analysis_config(cfg: Any) -> None:
    """Value checks of an analysis command's config (``score``, ``generate``, ``extract``,
    ``aa-similarity``, ``plot-heads``). The rules the analysis room owns (score's method names,
    generate's sampling settings) are its own checks, which the command line runs after
    these (:func:`protein_performer.cli.compose.check_analysis_rules`)."""
    if hasattr(cfg, "seed"):
        cfg.seed = check_seed("seed", cfg.seed)
    if isinstance(cfg, ScoreConfig):
        _validate_score_config(cfg)
        return
    if isinstance(cfg, GenerateConfig):
        for key in ("checkpoint", "out"):
            if getattr(cfg, key) in (None, "", "???"):
                raise ConfigError(f"{key}=PATH is required")
        _check_device(cfg.device)
        return
    for key in ("checkpoint", "out"):
        if getattr(cfg, key) in (None, "", "???"):
            raise ConfigError(f"{key}=PATH is required")
    if not fasta_unset(cfg.fasta) or getattr(cfg, "split", None) is None:
        eval_fasta_paths(cfg)  # type: ignore[arg-type]
    check_choice("invalid", cfg.invalid, INVALID_POLICIES)
    _check_device(cfg.device)
    if cfg.attention is not None:
        check_choice("attention", cfg.attention, ATTENTION_KINDS)
    if cfg.nb_features is not None:
        _positive("nb_features", cfg.nb_features)
    if isinstance(cfg, ExtractConfig):
        _positive("toks_per_batch", cfg.toks_per_batch)
        _positive("chunk_size", cfg.chunk_size)
        if cfg.max_records is not None:
            _positive("max_records", cfg.max_records)
        if cfg.records is not None and not cfg.records:
            raise ConfigError("records= is empty: name at least one record, or leave it unset")
    if isinstance(cfg, SimilarityConfig):
        if cfg.split is not None:
            check_choice("split", cfg.split, ("train", "val", "test"))
        if cfg.n_proteins is not None:
            _positive("n_proteins", cfg.n_proteins)
        _positive("max_residues", cfg.max_residues)
        _positive("min_arcs", cfg.min_arcs)
        cfg.threshold = check_threshold(cfg.threshold)
        if not 0.0 < cfg.mask_prob < 1.0:
            raise ConfigError(f"mask_prob must be in (0, 1) (got {cfg.mask_prob!r})")
        if cfg.context is not None:
            if cfg.split is not None:
                raise ConfigError("context= takes fasta= (the proteins searched), not split=")
            check_int("context_max_homologs", cfg.context_max_homologs, 1, optional=True)
            if cfg.context_max_identity is not None:
                check_fraction("context_max_identity", cfg.context_max_identity)
        if cfg.max_length is not None:
            _positive("max_length", cfg.max_length)
    if isinstance(cfg, (ExtractConfig, PlotHeadsConfig)):
        cfg.truncate = check_truncate(cfg.truncate)
    if isinstance(cfg, (ExtractConfig, PlotHeadsConfig)) and cfg.max_length is not None:
        _positive("max_length", cfg.max_length)
    if isinstance(cfg, PlotHeadsConfig) and cfg.zoom is not None:
        _positive("zoom", cfg.zoom)


def _check_device(value: Any) -> None:
    from protein_performer.utils.devices import DEVICE_NAME

    if not (isinstance(value, str) and DEVICE_NAME.fullmatch(value)):
        raise ConfigError(f"device={value!r} is not valid; choose one of: auto, cpu, cuda, cuda:N")


def check_seed(key: str, value: Any) -> int:
    """A seed numpy and Lightning accept: an integer in 0 .. 2**32 - 1, returned as an int
    (a numpy integer would not go into the saved config or JSON)."""
    integer = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not integer or not 0 <= value < 2**32:
        raise ConfigError(f"{key} must be an integer in 0..4294967295 (got {value!r})")
    return int(value)


def _positive(key: str, value: Any, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = ok and (value >= 0 if allow_zero else value > 0)
    if not ok:
        what = "a number >= 0" if allow_zero else "a positive number"
        raise ConfigError(f"{key} must be {what} (got {value!r})")


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_max_time(value: object) -> str:
    """``trainer.max_time`` as Lightning's ``DD:HH:MM:SS``, from that form, ``HH:MM:SS``, or a
    number with a unit (``90s``, ``30m``, ``2h``, ``1d``; several add up: ``1h30m``)."""
    if isinstance(value, dict):  # Lightning's other forms, from Python
        try:
            value = timedelta(**value)
        except TypeError:
            raise ConfigError(
                f"trainer.max_time={value!r}: a dict takes timedelta's keys (days, hours, "
                "minutes, seconds)"
            ) from None
    if isinstance(value, timedelta):
        value = f"{max(0, round(value.total_seconds()))}s"  # whole seconds, never 1e+06
    text = str(value).strip().lower()
    problem = (
        f"trainer.max_time={value!r} is not a duration; write DD:HH:MM:SS, HH:MM:SS or e.g. "
        "30m, 2h, 1h30m"
    )
    if re.fullmatch(r"\d+(:\d+){1,3}", text):
        parts = [int(x) for x in text.split(":")]
        if len(parts) == 2:
            raise ConfigError(problem + " (MM:SS or HH:MM is ambiguous)")
        days, hours, minutes, seconds = [0] * (4 - len(parts)) + parts
        total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    elif re.fullmatch(r"(\d+(\.\d+)?[smhd])+", text):
        total = sum(
            float(n) * _DURATION_UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhd])", text)
        )
    else:
        raise ConfigError(problem)
    total = round(total)
    if total <= 0:
        raise ConfigError(f"trainer.max_time={value!r} is no time at all; give a positive duration")
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{days:02d}:{hours:02d}:{minutes:02d}:{seconds:02d}"


def validate_train_config(cfg: TrainConfig) -> None:
    """Value checks beyond the types; raises a one-line :class:`ConfigError` naming the key."""
    cfg.model.validate("model")
    cfg.seed = check_seed("seed", cfg.seed)
    check_choice("objective", cfg.objective, OBJECTIVES)
    _check_align(cfg)  # first: its own words for the pairs settings it needs
    cfg.data.validate("data.", objective=cfg.objective, pair_align=cfg.align.weight > 0)
    _check_data(cfg)
    _check_optim(cfg)
    _check_trainer(cfg)
    _check_analysis(cfg)


def _check_align(cfg: TrainConfig) -> None:
    """``align``: the attention-supervision loss, which needs pairs packing."""
    d = cfg.data
    a = cfg.align
    if isinstance(a.weight, bool) or not a.weight >= 0.0:
        raise ConfigError(f"align.weight must be a number >= 0 (got {a.weight!r})")
    if a.weight > 0:
        if d.packing != "pairs" or cfg.objective != "mlm":
            raise ConfigError("align.weight > 0 needs data.packing=pairs and objective=mlm")
        if d.pair_fill:
            raise ConfigError(
                "align.weight > 0 does not work with data.pair_fill=true (it aligns rows of "
                "two proteins)"
            )
        for key, value, size in (
            ("layer", a.layer, cfg.model.depth),
            ("head", a.head, cfg.model.heads),
        ):
            if not -size <= value < size:
                raise ConfigError(f"align.{key}={value} is out of range for {size} {key}s")
        if a.head % cfg.model.heads < cfg.model.local_heads:
            raise ConfigError(
                f"align.head={a.head} is a local head (model.local_heads={cfg.model.local_heads}): "
                "it cannot see the partner; pick a global head"
            )


def _check_data(cfg: TrainConfig) -> None:
    """``data`` as training uses it (data's own rules: :meth:`DataConfig.validate`): training
    files, and a window the model's positions cover."""
    d = cfg.data
    if not d.files and not d.shards:
        raise ConfigError(
            "data.files or data.shards must be set (no training data given): "
            "data.files=[a.fasta,b.fasta.gz] or data.shards=DIR"
        )
    if (
        d.max_length is not None
        and d.max_length > cfg.model.max_len
        and cfg.model.position == "learned"
    ):
        raise ConfigError(
            f"data.max_length={d.max_length} exceeds model.max_len={cfg.model.max_len} "
            "(learned positions); raise model.max_len or use model.position=rotary"
        )
    columns = cfg.model.context_positions == "columns"
    if bool(d.pair_columns) != columns:
        raise ConfigError(
            "data.pair_columns=true and model.context_positions=columns go together (the rows "
            f"give each homolog residue its column); got data.pair_columns={d.pair_columns} and "
            f"model.context_positions={cfg.model.context_positions}"
        )


def _check_optim(cfg: TrainConfig) -> None:
    """``optim``, and ``init_from`` / ``ckpt_path`` (one way to start from weights)."""
    o = cfg.optim
    check_choice("optim.name", o.name, OPTIMIZERS)
    check_choice("optim.schedule", o.schedule, SCHEDULES)
    _positive("optim.lr", o.lr)
    _positive("optim.eps", o.eps)
    _positive("optim.weight_decay", o.weight_decay, allow_zero=True)
    _positive("optim.warmup_steps", o.warmup_steps, allow_zero=True)
    if len(o.betas) != 2 or not all(0.0 <= b < 1.0 for b in o.betas):
        raise ConfigError(f"optim.betas must be two numbers in [0, 1) (got {list(o.betas)})")
    if not 0.0 <= o.min_lr_ratio <= 1.0:
        raise ConfigError(f"optim.min_lr_ratio must be in [0, 1] (got {o.min_lr_ratio!r})")
    if cfg.init_from and cfg.ckpt_path:
        raise ConfigError(
            "init_from= and ckpt_path= both set: ckpt_path resumes a run (its weights and "
            "optimizer), init_from starts a new one from a checkpoint's weights; give one"
        )


def _check_trainer(cfg: TrainConfig) -> None:
    """``trainer``: accelerator, precision, strategy, steps, devices, checkpoints."""
    t = cfg.trainer
    check_choice("trainer.accelerator", t.accelerator, ACCELERATORS)
    t.precision = PRECISION_ALIASES.get(str(t.precision), t.precision)
    check_choice("trainer.precision", t.precision, PRECISIONS)
    # (FAVOR's projections and statistics keep their precision under a bf16 cast)
    if t.precision == "bf16-true" and cfg.model.position == "rotary":
        raise ConfigError(
            "trainer.precision=bf16-true would store the model's rotary frequencies in bf16 "
            "(rotary angles off by up to π at 8,192 positions); use bf16-mixed, whose "
            "autocast keeps them float32"
        )
    if t.strategy == "ddp_spawn":
        raise ConfigError(
            "trainer.strategy=ddp_spawn is not supported: it trains in child processes whose "
            "steps, metrics and checkpoints this run's summary cannot see; use "
            "trainer.strategy=ddp (on GPUs: trainer=ddp; on the CPU: trainer.strategy=ddp "
            "trainer.accelerator=cpu trainer.devices=N)"
        )
    check_choice("trainer.strategy", t.strategy, STRATEGIES)
    if t.strategy == "fsdp":
        if cfg.analysis.similarity_every_n_steps is not None:
            raise ConfigError(
                "analysis.similarity_every_n_steps runs the model on rank 0 alone, which FSDP's "
                "sharded parameters do not allow; use trainer.strategy=ddp, or run aa-similarity "
                "on the checkpoints"
            )
        if cfg.objective == "causal" and "performer_softmax" in cfg.model.layer_kinds():
            raise ConfigError(
                "causal performer_softmax keeps running OPRF statistics in buffers that DDP "
                "broadcasts from rank 0 and FSDP does not (each rank would draw other features); "
                "use trainer.strategy=ddp"
            )
    _positive("trainer.max_steps", t.max_steps)
    _positive("trainer.val_check_interval", t.val_check_interval)
    _positive("trainer.log_every_n_steps", t.log_every_n_steps)
    _positive("trainer.num_nodes", t.num_nodes)
    if t.threads is not None:
        _positive("trainer.threads", t.threads)
    if t.max_time is not None:
        t.max_time = parse_max_time(t.max_time)
    devices = t.devices
    if (
        isinstance(devices, bool)
        or (isinstance(devices, int) and (devices == 0 or devices < -1))
        or (
            isinstance(devices, str)
            and not re.fullmatch(r"auto|-1|\d*[1-9]\d*|(\d+,)+\d*", devices)
        )
    ):
        raise ConfigError(
            f"trainer.devices={devices!r}: give a count >= 1, -1 (all), auto, or a list of "
            "device indices such as [0,1]"
        )
    _positive("trainer.accumulate_grad_batches", t.accumulate_grad_batches)
    _positive("trainer.gradient_clip_val", t.gradient_clip_val, allow_zero=True)
    if t.checkpoint_every_minutes is not None:
        _positive("trainer.checkpoint_every_minutes", t.checkpoint_every_minutes, allow_zero=True)
    if t.limit_val_batches is not None:
        _positive("trainer.limit_val_batches", t.limit_val_batches)


def _check_analysis(cfg: TrainConfig) -> None:
    """``analysis``: the similarity views during training."""
    a = cfg.analysis
    if a.similarity_every_n_steps is not None:
        _positive("analysis.similarity_every_n_steps", a.similarity_every_n_steps)
    _positive("analysis.similarity_proteins", a.similarity_proteins)
    _positive("analysis.similarity_min_arcs", a.similarity_min_arcs)
    if not 0.0 < a.similarity_threshold <= 1.0:
        raise ConfigError(
            f"analysis.similarity_threshold must be in (0, 1] (got {a.similarity_threshold!r})"
        )


def fasta_unset(value: Any) -> bool:
    return value is None or value in ("", "???") or (isinstance(value, (list, tuple)) and not value)


def eval_fasta_paths(cfg: EvalConfig) -> list[str]:
    """``cfg.fasta`` as a list of paths (it may be one path or a list)."""
    value = cfg.fasta
    if fasta_unset(value) and getattr(cfg, "split", None) is None:
        raise ConfigError(
            "fasta=... is required (a FASTA path or a list [a.fa,b.fa]; or split=val|test "
            "alone for the training run's held-out part of its own files)"
        )
    paths = [value] if isinstance(value, str) else list(value or [])
    if not paths or not all(isinstance(p, str) and p not in ("", "???") for p in paths):
        raise ConfigError("fasta=PATH (or fasta=[A,B]) is required")
    check_distinct_inputs({"fasta": paths})  # a file listed twice would count twice
    return paths


def validate_eval_config(cfg: EvalConfig) -> None:
    if cfg.checkpoint in (None, "", "???"):
        raise ConfigError("checkpoint=PATH is required (evaluate checkpoint=... fasta=...)")
    cfg.seed = check_seed("seed", cfg.seed)
    if cfg.split is not None:
        check_choice("split", cfg.split, ("train", "val", "test"))
    if not fasta_unset(cfg.fasta) or cfg.split is None:
        eval_fasta_paths(cfg)
    if cfg.split_by is not None:
        check_choice("split_by", cfg.split_by, SPLIT_BY)
    if cfg.attention is not None:
        check_choice("attention", cfg.attention, ATTENTION_KINDS)
    if cfg.nb_features is not None:
        _positive("nb_features", cfg.nb_features)
    if cfg.mode is not None:
        check_choice("mode", cfg.mode, MODES)
    check_choice("invalid", cfg.invalid, INVALID_POLICIES)
    check_choice("crop", cfg.crop, ("random", "sliding"))
    _check_device(cfg.device)
    _positive("toks_per_batch", cfg.toks_per_batch)
    if cfg.context is not None and (not isinstance(cfg.context, str) or not cfg.context):
        raise ConfigError("context must be 'cluster' or a FASTA path")
    if cfg.context_max_proteins is not None:
        _positive("context_max_proteins", cfg.context_max_proteins)
    if cfg.context_max_identity is not None:
        check_fraction("context_max_identity", cfg.context_max_identity)
    if cfg.context is None:
        # settings of the context evaluation that would silently do nothing
        defaults = {f.name: f.default for f in dataclasses.fields(EvalConfig)}
        given = [
            k
            for k in (
                "context_max_proteins",
                "context_max_identity",
                "context_min_members",
                "context_order",
            )
            if getattr(cfg, k) != defaults[k]
        ]
        if given:
            raise ConfigError(f"{', '.join(given)} set without context=cluster or context=FASTA")
    if not isinstance(cfg.context_fill, bool):
        raise ConfigError(f"context_fill must be true or false (got {cfg.context_fill!r})")
    if cfg.context_fill and cfg.context != "cluster":
        raise ConfigError(
            "context_fill=true needs context=cluster (fill comes from other clusters)"
        )
    check_choice("context_fill_place", cfg.context_fill_place, FILL_PLACES)
    check_choice("context_order", cfg.context_order, CONTEXT_ORDERS)
    if cfg.context_fill_place != "random" and not cfg.context_fill:
        raise ConfigError("context_fill_place needs context_fill=true")
    if not isinstance(cfg.context_min_members, int) or cfg.context_min_members < 2:
        raise ConfigError(
            f"context_min_members must be an integer >= 2 (got {cfg.context_min_members!r})"
        )
    if cfg.max_length is not None:
        _positive("max_length", cfg.max_length)
    if cfg.max_records is not None:
        _positive("max_records", cfg.max_records)
    if cfg.mask_prob is not None and not 0.0 < cfg.mask_prob < 1.0:
        raise ConfigError(f"mask_prob must be in (0, 1) (got {cfg.mask_prob!r})")


def check_threshold(value: Any) -> float | str:
    """``threshold=``: ``auto`` or an attention weight in (0, 1]."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not 0.0 < number <= 1.0:
        raise ConfigError(f"threshold must be auto or in (0, 1] (got {value!r})")
    return number


def check_truncate(value: Any) -> bool | str:
    """``truncate=``: ``auto``, ``true`` or ``false``."""
    text = str(value).strip().lower()
    if value is True or text == "true":
        return True
    if value is False or text == "false":
        return False
    if text == "auto":
        return "auto"
    raise ConfigError(f"truncate must be auto, true or false (got {value!r})")
