"""Structured configuration: plain dataclasses (the library API and the schema of
``conf/train.yaml`` / ``conf/evaluate.yaml``), composed of the rooms' own configs
(:class:`~protein_performer.data.config.DataConfig`,
:class:`~protein_performer.model.config.ModelConfig`) and the sections no room owns (optimizer,
trainer, the analysis commands). A key that is not a field, or a value of the wrong type, is an
error naming the key; :mod:`.validate` adds the value checks (choices, ranges) and
:mod:`protein_performer.cli.hydra` registers these classes with Hydra. Imports nothing but the
rooms' config modules."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protein_performer.data.config import (  # noqa: F401 (data's names, at their old place too)
    INVALID_POLICIES,
    MODES,
    OBJECTIVES,
    SAMPLING,
    DataConfig,
)
from protein_performer.model.config import ModelConfig, as_section

DATA_MODES = MODES  # its old name

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
    # torch's CPU threads (None: the CPUs other work leaves free at the start; see choose_threads)
    threads: int | None = None


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

    checkpoint: str = "auto"  # the shipped model: with context=, the homolog one
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
    # homolog-conditioned scoring, beside the plain score of the same proteins (only those):
    # "cluster" (each protein's cluster members among the evaluated records) or a FASTA of
    # context proteins for every record
    context: str | None = None
    context_min_members: int = 2  # context=cluster: clusters smaller than this are left out
    context_max_proteins: int | None = None  # score a seeded sample of this many (null: all)
    # context=ALIGNMENT: its homologs more identical to its query are left out, as score leaves
    # them out of its windows (null: none; all kept where every one is)
    context_max_identity: float | None = 0.9
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
    truncate: Any = _key(
        "auto",
        "auto: keep the first residues of a record longer than the window (said in the output; "
        "with join=true an error); true: also cut the front of a joined window, the last "
        "record kept; false: a longer record is an error",
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

    checkpoint: str = _key(
        "auto",
        "a checkpoint written by train, or a shipped name (auto: default; with context=: "
        "homologs-msa)",
    )
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
    threshold: Any = _key(
        "auto",
        "attention weight counted as an arc (Vig et al.: 0.3), or auto: the highest of "
        "0.3, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01 at which 3 heads have min_arcs arcs",
    )
    min_arcs: int = _key(100, "heads with fewer arcs are dropped")
    mask_prob: float = _key(0.15, "masking rate of the substitution view")
    seed: int = _key(0, "sampling, masking and null seed")
    context: str | None = _key(
        None,
        "a FASTA of homologs (data search's hits.fasta) or an alignment of the protein of "
        "fasta= (a3m, a2m, Stockholm, aligned FASTA): the cross-homolog view instead: each "
        "protein after its homologs, attention from masked positions into them as log-odds",
    )
    context_max_homologs: int | None = _key(16, "context=: homologs per protein, best first")
    context_max_identity: float | None = _key(
        0.9,
        "context=: an alignment's homologs more identical to its protein are left out "
        "(null: none left out)",
    )
    max_length: int | None = _key(
        None, "context=: window tokens (unset: the model's; 2048 with rotary positions)"
    )


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
    truncate: Any = _key(
        "auto",
        "auto: keep the first residues of a record longer than the window (said in the output; "
        "with join=true an error); true: also cut the front of a joined window, the analysed "
        "record kept; false: a longer record is an error",
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

    checkpoint: str = _key(
        "auto",
        "a checkpoint written by train, or a shipped name (auto: default; with context=: "
        "homologs-columns-deep)",
    )
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
    context: str | None = _key(
        None,
        "the wild type's homologs: an alignment (a3m, a2m, Stockholm, aligned FASTA) or FASTA "
        "hits (search's hits.fasta; query= picks its own): adds their profile and masked "
        "marginals with homologs before the protein",
    )
    context_max_homologs: int | None = _key(
        None,
        "context=: the first N homologs of the file (unset: all of an alignment, 16 FASTA hits)",
    )
    context_tokens: int | None = _key(
        None, "context=: the window in tokens (unset: the length the checkpoint trained on)"
    )
    context_sampling: str = _key(
        "first", "context=: which homologs fill a window: first (file order), weighted, diverse"
    )
    context_samples: int = _key(1, "context=: windows per site, their log-probabilities averaged")
    context_window_homologs: Any = _key(
        "auto",
        "context=: at most N homologs in one window; a list [1,64]: windows of each, their "
        "log-probabilities averaged (auto: [1,64] for a model that reads homologs at their "
        "columns, 64 from 150 homologs on; 16 for one that places them whole; null: as many "
        "as fit)",
    )
    context_max_identity: float | None = _key(
        0.9,
        "context=: homologs more identical to the wild type stay out of the model's windows "
        "(the profile keeps them; null: none left out)",
    )
    context_min_coverage: float = _key(
        0.5, "context=: an aligned homolog covering less of the wild type's columns is left out"
    )
    context_crop: bool = _key(
        True,
        "context=: where the window holds fewer than context_window_homologs of the homologs "
        "whole, each site is scored on the residues about it, after each homolog's residues in "
        "those columns",
    )
    context_retrieval: float = _key(
        0.6, "context=: the profile's weight in the context_retrieval column (0: no column)"
    )
    seed: int = _key(0, "seed of weighted / diverse homolog draws")
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
