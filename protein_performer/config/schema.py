"""Structured configuration: plain dataclasses (the library API) registered in Hydra's ConfigStore.

The dataclasses are the schema of ``conf/train.yaml`` / ``conf/evaluate.yaml``: a key that is not
a field, or a value of the wrong type, is an error naming the key. :func:`validate_train_config`
adds the value checks (choices, ranges). The Hydra glue (:func:`run_hydra`) lives in
:mod:`protein_performer.cli.hydra`; Hydra is only imported when it runs.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from protein_performer.data.cluster import (
    CLUSTER_PACKINGS,
    PACKING_MODE,
    PACKINGS,
    SPLIT_BY,
    cluster_uses,
)
from protein_performer.data.context import CONTEXT_ORDERS, FILL_PLACES
from protein_performer.data.datasets import PAIR_MASKS
from protein_performer.errors import ConfigError
from protein_performer.model.config import ATTENTION_KINDS, ModelConfig, _choice, as_section

OBJECTIVES: tuple[str, ...] = ("mlm", "causal")
DATA_MODES: tuple[str, ...] = ("crop", "concat")
SAMPLING: tuple[str, ...] = ("record", "cluster", "cluster_sqrt")
INVALID_POLICIES: tuple[str, ...] = ("error", "skip", "replace")
OPTIMIZERS: tuple[str, ...] = ("adamw", "adam")
SCHEDULES: tuple[str, ...] = ("constant", "cosine")
ACCELERATORS: tuple[str, ...] = ("auto", "cpu", "gpu", "cuda", "mps")
PRECISIONS: tuple[str, ...] = (
    "auto",
    "32-true",
    "64-true",
    "bf16-mixed",
    "bf16-true",
    "16-mixed",
)
#: Lightning's short names for them (what a Lightning config may hold).
PRECISION_ALIASES = {"32": "32-true", "64": "64-true", "16": "16-mixed", "bf16": "bf16-mixed"}
STRATEGIES: tuple[str, ...] = ("auto", "ddp", "fsdp", "single_device")


@dataclass
class DataConfig:
    """Arguments of :class:`protein_performer.data.datamodule.ProteinDataModule` (the objective
    comes from the top-level ``objective``). Paths may be absolute or relative to the cwd."""

    files: list[str] | None = None
    val_files: list[str] | None = None
    test_files: list[str] | None = None
    shards: str | None = None
    split_fractions: list[float] = field(default_factory=lambda: [0.9, 0.05, 0.05])
    split_seed: int = 0
    # `data cluster` output (directory or members.tsv): split_by=cluster holds out whole
    # clusters; sample=cluster|cluster_sqrt draws members of clusters for training
    clusters: str | None = None
    split_by: str = "record"
    sample: str = "record"
    mode: str = "crop"
    # concat mode: stream (proteins in random order), family (a cluster's members together) or
    # copy (training windows hold every protein twice in a row: a retrieval curriculum);
    # crop mode: pairs (each training row is a protein after one member of its cluster)
    packing: str = "stream"
    # family and pairs packing: training uses only clusters of at least this many members
    min_members: int = 1
    # family packing: interleave the members of this many families round-robin, so homologs
    # sit ~this many proteins apart with other families between (1: members back to back)
    family_spread: int = 1
    # pairs packing: probability that a protein's partner is itself (a copy), and which part of
    # the row is masked: all, or only the protein (its partner stays whole, as context does)
    pair_copy: float = 0.0
    pair_mask: str = "all"
    # pairs packing: probability that a training row holds the protein with no partner
    pair_alone: float = 0.0
    # pairs packing: fill each row to max_length with other clusters' proteins, the partner at
    # a random place among them (the layout of evaluate context_fill=true)
    pair_fill: bool = False
    max_length: int = 1024
    toks_per_batch: int = 16384
    batch_size: int | None = None
    mask_prob: float = 0.15
    seed: int = 0
    num_workers: int = 0
    invalid: str = "error"
    strip_gaps: bool = False  # remove alignment gaps (-, .) instead of treating them as invalid
    allow_nucleotide: bool = False  # read records that look like DNA/RNA (an error otherwise)
    max_records: int | None = None
    val_max_records: int | None = None

    def __post_init__(self) -> None:
        # one path is a list of one (from Python; Hydra's overrides do the same)
        for key in ("files", "val_files", "test_files"):
            value = getattr(self, key)
            if isinstance(value, (str, os.PathLike)):
                setattr(self, key, [os.fspath(value)])
            elif value is not None:
                if isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
                    value = None  # refused below
                else:
                    value = list(value)  # a tuple or generator: read once, kept as a list
                if value is None or not all(isinstance(v, (str, os.PathLike)) for v in value):
                    raise ConfigError(
                        f"data.{key} must be a FASTA path or a list of them "
                        f"(got {getattr(self, key)!r})"
                    )
                setattr(self, key, value)


@dataclass
class OptimConfig:
    """Optimizer and learning-rate schedule. Defaults are the Performer paper's protein preset:
    Adam(0.9, 0.98, eps 1e-9) with decoupled weight decay 0.1, lr 1e-3 (clip 0.5 is in
    ``trainer.gradient_clip_val``)."""

    name: str = "adamw"
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-9
    weight_decay: float = 0.1
    schedule: str = "constant"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1


@dataclass
class TrainerConfig:
    """Lightning ``Trainer`` settings. ``precision=auto``: bf16 autocast on GPUs that compute
    in bf16, fp16 autocast on older ones, fp32 on CPU."""

    accelerator: str = "cpu"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "auto"
    max_steps: int = 1000
    max_time: str | None = None
    # also write checkpoints/last.ckpt every this many minutes of training (0/None: only at
    # validations and at the end), so that a crash loses at most this much work
    checkpoint_every_minutes: float | None = 5.0
    val_check_interval: int = 200
    limit_val_batches: int | None = None
    log_every_n_steps: int = 10
    gradient_clip_val: float = 0.5
    accumulate_grad_batches: int = 1
    enable_progress_bar: bool = True  # a bar on a terminal, a line every 30 s in a log
    model_summary: bool = False  # print Lightning's layer table at the start
    tensorboard: bool = False
    deterministic: bool = False


@dataclass
class TrainAnalysisConfig:
    """Analysis during training: ``similarity_every_n_steps`` (unset: off) logs the amino-acid
    similarity r values (``analysis/r_attention`` ...) of a seeded sample of validation
    proteins to ``metrics.csv``."""

    similarity_every_n_steps: int | None = None
    similarity_proteins: int = 100
    similarity_threshold: float = 0.3
    similarity_min_arcs: int = 100


@dataclass
class AlignConfig:
    """Attention supervision on homolog pairs (``data.packing=pairs``): with ``weight`` > 0 the
    loss adds ``weight`` × the mean of -log(attention of head ``head`` of layer ``layer`` from
    each ``<mask>`` position of the protein to the partner residue aligned to it), a local
    BLOSUM62 alignment of the two (negative indices count from the end; the default, the last
    head of the last layer, is a global head also in a hybrid block)."""

    weight: float = 0.0
    layer: int = -1
    head: int = -1


@dataclass
class TrainConfig:
    """Everything ``train`` needs. ``init_from``: start from another checkpoint's weights (e.g. an
    exact-attention model converted to a Performer); ``ckpt_path``: resume a run exactly."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    analysis: TrainAnalysisConfig = field(default_factory=TrainAnalysisConfig)
    align: AlignConfig = field(default_factory=AlignConfig)
    objective: str = "mlm"
    seed: int = 0
    init_from: str | None = None
    ckpt_path: str | None = None

    def __post_init__(self) -> None:
        # sections given as dicts from Python (``TrainConfig(model={"dim": 64})``)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping) and f.default_factory is not dataclasses.MISSING:
                setattr(self, f.name, as_section(type(f.default_factory()), value, f.name))


@dataclass
class EvalConfig:
    """``evaluate``: perplexity/accuracy of ``checkpoint`` on ``fasta`` (one path or a list).

    Every record is used unless ``split`` picks one part (``train``/``val``/``test``) of the
    hash split given by ``split_fractions``/``split_seed`` (as in training). Unset data
    settings (``max_length``, ``mode``, ``mask_prob``) default to the checkpoint's training
    values. ``seed`` fixes masking and cropping, so results are reproducible. ``attention`` /
    ``nb_features`` run the checkpoint with another attention kind (e.g. a ``transformer``
    checkpoint as ``performer_softmax``, before any fine-tuning).
    """

    checkpoint: str = "default"
    fasta: Any = None  # unset with split=: the training run's own files
    split: str | None = None
    # unset: the checkpoint's training run's values (so split=test is that run's test split)
    split_fractions: list[float] | None = None
    split_seed: int | None = None
    clusters: str | None = None
    split_by: str | None = None
    max_length: int | None = None
    mode: str | None = None
    mask_prob: float | None = None
    toks_per_batch: int = 16384
    seed: int = 0
    crop: str = "random"
    invalid: str = "error"
    strip_gaps: bool = False
    allow_nucleotide: bool = False
    max_records: int | None = None
    device: str = "auto"
    output: str | None = None
    overwrite: bool = False
    attention: str | None = None
    nb_features: int | None = None
    # homolog-conditioned scoring besides the plain one: "cluster" (each protein's cluster
    # members among the evaluated records) or a FASTA of context proteins for every record
    context: str | None = None
    context_min_members: int = 2  # context=cluster: clusters smaller than this are left out
    context_max_proteins: int | None = None  # score a seeded sample of this many (null: all)
    # the order targets, homologs and fill are drawn in: "id" (by record id: the same sample
    # whatever order the files are given in, unless max_records= cuts the records read first)
    # or "given" (file order: results before 2026-12-04)
    context_order: str = "id"
    # context=cluster: fill each window to max_length with proteins of other clusters, the
    # homologs at a random place among them (and score the fill alone as a third baseline)
    context_fill: bool = False
    # context_fill=true: "random" (homologs at a random place among the fill) or "adjacent"
    # (right before the target, the fill before them: distance apart from the distractors)
    context_fill_place: str = "random"


def _key(default: Any, help: str) -> Any:
    """A config field with its ``--help`` line."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class _AnalysisInputs:
    checkpoint: str = _key("default", "a checkpoint written by train (default: the shipped one)")
    fasta: Any = _key("???", "FASTA file, or a list [a.fa,b.fa.gz] (required)")
    out: str = _key("???", "output directory (created; never replaces what is not ours)")
    layers: Any = _key(None, "attention layers: 0-3, [0,2], -1 (last) (unset: all)")
    heads: Any = _key(None, "attention heads, same syntax (unset: all)")
    invalid: str = _key("error", "invalid residues: error, skip (drop the record) or replace (X)")
    strip_gaps: bool = _key(False, "remove alignment gaps (- and .) from the sequences")
    device: str = _key("auto", "auto, cpu, cuda or cuda:N")
    overwrite: bool = _key(False, "replace an out directory this command wrote before")
    attention: str | None = _key(None, "run the weights with another attention kind")
    nb_features: int | None = _key(None, "random features for a Performer attention")


@dataclass
class ExtractConfig(_AnalysisInputs):
    """``extract``: one ``RECORD.npz`` per FASTA record (attention maps, representations)."""

    include: list[str] = _key(["attention", "mean"], "any of attention, per_tok, mean")
    repr_layers: Any = _key([-1], "representation layers (0: embeddings, -1: the last)")
    max_length: int | None = _key(None, "tokens per record with <cls>/<eos> (unset: the model's)")
    truncate: bool = _key(
        False,
        "keep the first residues of longer records; with join=true cut the front of the "
        "window, the last record kept (else an error)",
    )
    keep_specials: bool = _key(False, "keep the <cls>/<eos> rows and columns")
    float16: bool = _key(False, "store float16 (half the size)")
    toks_per_batch: int = _key(4096, "tokens per batch for representations")
    chunk_size: int = _key(256, "attention rows computed at a time")
    records: list[str] | None = _key(
        None, "record ids (or UniProt accessions / entry names) to extract (unset: every record)"
    )
    max_records: int | None = _key(None, "read at most this many records (unset: all)")
    join: bool = _key(
        False, "one window of every record read, <sep> between, in one file (file order)"
    )


@dataclass
class SimilarityConfig(_AnalysisInputs):
    """``aa-similarity``: amino-acid similarity views of a model against BLOSUM62."""

    fasta: Any = _key(
        None,
        "FASTA file, or a list [a.fa,b.fa.gz] (required; left unset with split=: the "
        "training run's own files)",
    )
    split: str | None = _key(None, "use only this part (train/val/test) of the training split")
    clusters: str | None = _key(
        None, "`data cluster` output for a cluster split (unset: the run's)"
    )
    n_proteins: int | None = _key(800, "proteins sampled (seeded; null: all)")
    max_residues: int = _key(510, "residues kept per protein (its first ones)")
    threshold: float = _key(0.3, "attention weight counted as an arc (Vig et al.: 0.3; 0.1)")
    min_arcs: int = _key(100, "heads with fewer arcs are dropped")
    mask_prob: float = _key(0.15, "masking rate of the substitution view")
    seed: int = _key(0, "sampling, masking and null seed")


@dataclass
class PlotHeadsConfig(_AnalysisInputs):
    """``plot-heads``: a layers × heads attention grid of one protein, and a head ranking."""

    record: str | None = _key(
        None,
        "record id (or UniProt accession / entry name) to plot (unset: the first record); "
        "with join=true the one analysed, placed after all the others",
    )
    zoom: int | None = _key(25, "also plot the first N residues (null: no zoom figure)")
    shared_scale: bool = _key(False, "one colour scale for every panel")
    max_length: int | None = _key(None, "tokens with <cls>/<eos> (unset: the model's)")
    truncate: bool = _key(
        False,
        "keep the first residues of a longer record; with join=true cut the front of the "
        "window, the analysed record kept (else an error)",
    )
    join: bool = _key(
        False,
        "one window of all records, <sep> between (the last one, or record=, after its homologs)",
    )
    homologs: list[str] | None = _key(
        None, "join: ids of the records the last one is aligned to (unset: every earlier one)"
    )


@dataclass
class ScoreConfig:
    """``score``: zero-shot variant-effect scores (masked marginals as ESM-1v; causal: log-likelihood)."""

    checkpoint: str = _key("default", "a checkpoint written by train (default: the shipped one)")
    mutations: str = _key("???", "CSV with a column of mutants like H24C or H24C:P25A (required)")
    out: str = _key(
        "???", "output CSV: the input plus one column per score; OUT.json summary (required)"
    )
    sequence: str | None = _key(None, "the wild-type sequence (or fasta=)")
    fasta: str | None = _key(None, "FASTA holding the wild type (its first record, or record=)")
    record: str | None = _key(
        None, "record id (or UniProt accession / entry name) of the wild type in fasta"
    )
    method: Any = _key(
        None,
        "masked-marginal, wt-marginal, pseudo-ll (masked LM), log-likelihood (causal), or a "
        "list (unset: masked-marginal, or log-likelihood for a causal checkpoint)",
    )
    offset: int = _key(1, "the number of the sequence's first residue in the mutant notation")
    mutation_col: str = _key(
        "mutant", "CSV column with the mutants (H24C, or whole sequences as ProteinGym's indels)"
    )
    sequence_col: str | None = _key(
        None,
        "CSV column with each variant's whole sequence instead (e.g. mutated_sequence): "
        "indels scored by pseudo-ll / log-likelihood",
    )
    fitness_col: str | None = _key(
        None, "CSV column with measured fitness: Spearman + scatter plot"
    )
    skip_mismatched: bool = _key(False, "leave rows whose wild type does not match unscored")
    toks_per_batch: int = _key(8192, "tokens per forward batch")
    device: str = _key("auto", "auto, cpu, cuda or cuda:N")
    overwrite: bool = _key(False, "replace an existing out CSV written by score")
    attention: str | None = _key(None, "run the weights with another attention kind")
    nb_features: int | None = _key(None, "random features for a Performer attention")


@dataclass
class GenerateConfig:
    """``generate``: proteins sampled from a causal checkpoint, written as FASTA."""

    checkpoint: str = _key("???", "a checkpoint of an objective=causal run (required)")
    out: str = _key("???", "output FASTA (.fasta or .fasta.gz; required)")
    n: int = _key(10, "proteins to sample")
    prompt: str = _key("", "residues every protein starts with (e.g. M)")
    max_length: int | None = _key(
        None, "tokens with <cls>/<eos> (unset: the length the model trained on)"
    )
    min_length: int = _key(1, "residues (prompt included) before <eos> may be drawn")
    temperature: float = _key(1.0, "softmax temperature (< 1: more likely residues)")
    top_k: int | None = _key(None, "draw among the k likeliest tokens only (unset: all)")
    top_p: float | None = _key(
        None, "nucleus sampling: the likeliest tokens holding p (unset: all)"
    )
    seed: int = _key(0, "sampling seed (the same seed gives the same proteins)")
    batch_size: int = _key(16, "proteins sampled together")
    device: str = _key("auto", "auto, cpu, cuda or cuda:N")
    overwrite: bool = _key(False, "replace an out FASTA written by generate")


ANALYSIS_COMMANDS: dict[str, type] = {
    "score": ScoreConfig,
    "generate": GenerateConfig,
    "extract": ExtractConfig,
    "aa-similarity": SimilarityConfig,
    "plot-heads": PlotHeadsConfig,
}


def _validate_score_config(cfg: ScoreConfig) -> None:
    for key in ("checkpoint", "mutations", "out"):
        if getattr(cfg, key) in (None, "", "???"):
            raise ConfigError(f"{key}=PATH is required")
    if (cfg.sequence is None) == (cfg.fasta is None):
        raise ConfigError("give the wild type as sequence=SEQ or fasta=PATH (one of them)")
    if cfg.record is not None and cfg.fasta is None:
        raise ConfigError("record= picks a record of fasta=; give fasta=PATH")
    from protein_performer.analysis.mutations import METHODS, method_name

    if cfg.method is not None:
        methods = [cfg.method] if isinstance(cfg.method, str) else list(cfg.method)
        if not methods:
            raise ConfigError(f"method: give at least one of {', '.join(METHODS)}")
        for m in methods:
            _choice("method", method_name(m), METHODS)
    _positive("toks_per_batch", cfg.toks_per_batch)
    _check_device(cfg.device)
    if cfg.attention is not None:
        _choice("attention", cfg.attention, ATTENTION_KINDS)
    if cfg.nb_features is not None:
        _positive("nb_features", cfg.nb_features)


def validate_analysis_config(cfg: Any) -> None:
    if hasattr(cfg, "seed"):
        cfg.seed = check_seed("seed", cfg.seed)
    if isinstance(cfg, ScoreConfig):
        _validate_score_config(cfg)
        return
    if isinstance(cfg, GenerateConfig):
        from protein_performer.analysis.generation import check_sampling

        for key in ("checkpoint", "out"):
            if getattr(cfg, key) in (None, "", "???"):
                raise ConfigError(f"{key}=PATH is required")
        check_sampling(
            cfg.temperature,
            cfg.top_k,
            cfg.top_p,
            cfg.n,
            # unset: checked against the model's once it is loaded
            max(3, cfg.min_length + 2) if cfg.max_length is None else cfg.max_length,
            cfg.batch_size,
            cfg.min_length,
        )
        _check_device(cfg.device)
        return
    for key in ("checkpoint", "out"):
        if getattr(cfg, key) in (None, "", "???"):
            raise ConfigError(f"{key}=PATH is required")
    if not fasta_unset(cfg.fasta) or getattr(cfg, "split", None) is None:
        eval_fasta_paths(cfg)  # type: ignore[arg-type]
    _choice("invalid", cfg.invalid, INVALID_POLICIES)
    _check_device(cfg.device)
    if cfg.attention is not None:
        _choice("attention", cfg.attention, ATTENTION_KINDS)
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
            _choice("split", cfg.split, ("train", "val", "test"))
        if cfg.n_proteins is not None:
            _positive("n_proteins", cfg.n_proteins)
        _positive("max_residues", cfg.max_residues)
        _positive("min_arcs", cfg.min_arcs)
        if not 0.0 < cfg.threshold <= 1.0:
            raise ConfigError(f"threshold must be in (0, 1] (got {cfg.threshold!r})")
        if not 0.0 < cfg.mask_prob < 1.0:
            raise ConfigError(f"mask_prob must be in (0, 1) (got {cfg.mask_prob!r})")
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
    _choice("objective", cfg.objective, OBJECTIVES)
    d = cfg.data
    _choice("data.mode", d.mode, DATA_MODES)
    _choice("data.invalid", d.invalid, INVALID_POLICIES)
    _choice("data.split_by", d.split_by, SPLIT_BY)
    _choice("data.sample", d.sample, SAMPLING)
    _choice("data.packing", d.packing, PACKINGS)
    need_mode = PACKING_MODE.get(d.packing)
    if need_mode is not None and d.mode != need_mode:
        raise ConfigError(f"data.packing={d.packing} needs data.mode={need_mode}")
    _positive("data.min_members", d.min_members)
    _positive("data.family_spread", d.family_spread)
    if d.family_spread > 1 and d.packing != "family":
        raise ConfigError("data.family_spread > 1 needs data.packing=family")
    if d.min_members > 1 and d.packing not in CLUSTER_PACKINGS:
        raise ConfigError("data.min_members > 1 needs data.packing=family or pairs")
    for key in ("pair_copy", "pair_alone"):
        value = getattr(d, key)
        if isinstance(value, bool) or not 0.0 <= value <= 1.0:
            raise ConfigError(f"data.{key} must be a number in [0, 1] (got {value!r})")
    _choice("data.pair_mask", d.pair_mask, PAIR_MASKS)
    if d.packing != "pairs" and (
        d.pair_copy or d.pair_alone or d.pair_mask != "all" or d.pair_fill
    ):
        raise ConfigError(
            "data.pair_copy, data.pair_alone, data.pair_mask and data.pair_fill need "
            "data.packing=pairs"
        )
    if d.packing == "pairs" and d.sample != "record":
        raise ConfigError(
            "data.packing=pairs draws its own partners: it needs data.sample=record "
            f"(got data.sample={d.sample})"
        )
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
    if d.pair_mask == "protein" and cfg.objective != "mlm":
        raise ConfigError(
            "data.pair_mask=protein needs objective=mlm (it selects masked positions)"
        )
    needs = cluster_uses(d.split_by, d.sample, d.packing, prefix="data.")
    if needs and not d.clusters:
        raise ConfigError(f"{needs[0]} needs data.clusters=DIR (the output of `data cluster`)")
    if not d.files and not d.shards:
        raise ConfigError("data.files or data.shards must be set (no training data given)")
    _positive("data.max_length", d.max_length)
    _positive("data.toks_per_batch", d.toks_per_batch)
    if d.batch_size is not None:
        _positive("data.batch_size", d.batch_size)
    if not 0.0 < d.mask_prob < 1.0:
        raise ConfigError(f"data.mask_prob must be in (0, 1) (got {d.mask_prob!r})")
    if d.max_length > cfg.model.max_len and cfg.model.position == "learned":
        raise ConfigError(
            f"data.max_length={d.max_length} exceeds model.max_len={cfg.model.max_len} "
            "(learned positions); raise model.max_len or use model.position=rotary"
        )
    o = cfg.optim
    _choice("optim.name", o.name, OPTIMIZERS)
    _choice("optim.schedule", o.schedule, SCHEDULES)
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
    t = cfg.trainer
    _choice("trainer.accelerator", t.accelerator, ACCELERATORS)
    t.precision = PRECISION_ALIASES.get(str(t.precision), t.precision)
    _choice("trainer.precision", t.precision, PRECISIONS)
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
    _choice("trainer.strategy", t.strategy, STRATEGIES)
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
    from protein_performer.data.fasta import check_distinct_inputs

    check_distinct_inputs({"fasta": paths})  # a file listed twice would count twice
    return paths


def validate_eval_config(cfg: EvalConfig) -> None:
    if cfg.checkpoint in (None, "", "???"):
        raise ConfigError("checkpoint=PATH is required (evaluate checkpoint=... fasta=...)")
    cfg.seed = check_seed("seed", cfg.seed)
    if cfg.split is not None:
        _choice("split", cfg.split, ("train", "val", "test"))
    if not fasta_unset(cfg.fasta) or cfg.split is None:
        eval_fasta_paths(cfg)
    if cfg.split_by is not None:
        _choice("split_by", cfg.split_by, SPLIT_BY)
    if cfg.attention is not None:
        _choice("attention", cfg.attention, ATTENTION_KINDS)
    if cfg.nb_features is not None:
        _positive("nb_features", cfg.nb_features)
    if cfg.mode is not None:
        _choice("mode", cfg.mode, DATA_MODES)
    _choice("invalid", cfg.invalid, INVALID_POLICIES)
    _choice("crop", cfg.crop, ("random", "sliding"))
    _check_device(cfg.device)
    _positive("toks_per_batch", cfg.toks_per_batch)
    if cfg.context is not None and (not isinstance(cfg.context, str) or not cfg.context):
        raise ConfigError("context must be 'cluster' or a FASTA path")
    if cfg.context_max_proteins is not None:
        _positive("context_max_proteins", cfg.context_max_proteins)
    if cfg.context is None:
        # settings of the context evaluation that would silently do nothing
        defaults = {f.name: f.default for f in dataclasses.fields(EvalConfig)}
        given = [
            k
            for k in ("context_max_proteins", "context_min_members", "context_order")
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
    _choice("context_fill_place", cfg.context_fill_place, FILL_PLACES)
    _choice("context_order", cfg.context_order, CONTEXT_ORDERS)
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


def register_configs() -> None:
    """Register the schemas in Hydra's ConfigStore (``train_schema``, ``evaluate_schema``)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="evaluate_schema", node=EvalConfig)
    for name, node in ANALYSIS_COMMANDS.items():
        cs.store(name=f"{name}_schema", node=node)


def run_hydra(command: str, argv: list[str]) -> int:
    """Run ``train`` or ``evaluate`` from Hydra-style arguments; returns the exit code.

    See :func:`protein_performer.cli.hydra.run_hydra`.
    """
    from protein_performer.cli.hydra import run_hydra as _run

    return _run(command, argv)
