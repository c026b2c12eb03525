"""Data settings: :class:`DataConfig` (the ``data`` section of ``conf/train.yaml`` and the
settings of :class:`~protein_performer.data.datamodule.ProteinDataModule`), the option lists
it draws from, and its one validation (:meth:`DataConfig.validate`). Plain Python: importing it
reads no data and imports neither torch nor the rest of :mod:`protein_performer.data`."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from protein_performer.data.splits import parse_fractions
from protein_performer.errors import ConfigError
from protein_performer.utils.checks import check_choice, check_fraction, check_int

#: ``objective``: masked LM or next-token (causal) LM.
OBJECTIVES: tuple[str, ...] = ("mlm", "causal")
#: ``mode``: one protein per row (``<cls> … <eos>``), or fixed windows of a ``<sep>``-joined
#: stream of proteins.
MODES: tuple[str, ...] = ("crop", "concat")
#: tokens per row when ``max_length`` is not given, per mode
DEFAULT_MAX_LENGTH: dict[str, int] = {"crop": 1024, "concat": 8192}
#: crop mode's treatment of a longer protein: one seeded window, or consecutive windows
CROPS: tuple[str, ...] = ("random", "sliding")
#: ``invalid``: what a record with a character that is not a residue letter does
INVALID_POLICIES: tuple[str, ...] = ("error", "skip", "replace")
#: ``split_by`` choices: hash each record, or hash its cluster (whole clusters in one split).
SPLIT_BY: tuple[str, ...] = ("record", "cluster")
#: ``sample`` choices other than ``record`` (every protein once per epoch): one random member
#: per cluster per epoch, or sqrt(size) draws
CLUSTER_SAMPLING: tuple[str, ...] = ("cluster", "cluster_sqrt")
SAMPLING: tuple[str, ...] = ("record", *CLUSTER_SAMPLING)
#: ``packing`` choices: concat windows of consecutive proteins, of a cluster's members together,
#: of every protein twice in a row (a retrieval curriculum); or crop-mode rows of a protein after
#: one member of its cluster (``pairs``: the layout ``evaluate context=cluster`` scores).
PACKINGS: tuple[str, ...] = ("stream", "family", "copy", "pairs")
#: the ``mode`` each packing other than ``stream`` needs
PACKING_MODE: dict[str, str] = {"family": "concat", "copy": "concat", "pairs": "crop"}
#: packings that need a clusters table
CLUSTER_PACKINGS: tuple[str, ...] = ("family", "pairs")
#: ``pair_mask``: mask the whole row, or only the protein after its partner
PAIR_MASKS: tuple[str, ...] = ("all", "protein")
#: How a columns row's crop is sized (``pair_column_crop``): ``partners`` leaves room for
#: ``pair_partners`` homologs in every row; ``drawn`` for the homologs the row holds, as the
#: scorer crops for the homologs there are.
COLUMN_CROPS: tuple[str, ...] = ("partners", "drawn")
#: homolog-conditioned evaluation: where filled windows put the homologs (among the fill at
#: random, or right before the target)
FILL_PLACES: tuple[str, ...] = ("random", "adjacent")
#: How context evaluation walks the records: "id" (sorted by record id, a shared id by
#: sequence: the same proteins, homolog order and fill whatever order the files came in) or
#: "given" (the order of the files and their records, as evaluations before 2026-12-04).
CONTEXT_ORDERS: tuple[str, ...] = ("id", "given")

#: the pairs packing settings and their values that leave it off
_PAIR_SETTINGS = (
    ("pair_copy", 0.0),
    ("pair_alone", 0.0),
    ("pair_mask", "all"),
    ("pair_fill", False),
    ("pair_partners", 1),
    ("pair_homologs", None),
    ("pair_columns", False),
    ("pair_column_crop", "partners"),
)


def cluster_uses(split_by: str, sample: str, packing: str, prefix: str = "") -> list[str]:
    """The settings among these that need a clusters table (``prefix`` names them as a config
    does, e.g. ``"data."``), in the order they are reported."""
    uses = (
        (f"{prefix}split_by=cluster", split_by == "cluster"),
        (f"{prefix}sample={sample}", sample != "record"),
        (f"{prefix}packing={packing}", packing in CLUSTER_PACKINGS),
    )
    return [what for what, on in uses if on]


@dataclass
class DataConfig:
    """What to read and how to batch it: the settings of
    :class:`~protein_performer.data.datamodule.ProteinDataModule` (the objective comes from the
    top-level ``objective``). Paths may be absolute or relative to the cwd.

    Attributes:
        files: FASTA paths; hash-split into train/val/test, or the train set only when
            ``val_files`` or ``test_files`` is given.
        val_files, test_files: explicit FASTA per split.
        shards: preprocessed shard directory (``protein-performer data preprocess``); overrides
            files.
        split_fractions, split_seed: hash split of ``files``.
        mode: ``"crop"`` (one protein per row, ``<cls> … <eos>``) or ``"concat"`` (fixed
            windows of a ``<sep>``-joined stream).
        max_length: tokens per row (None, from Python: 1024 for crop, 8192 for concat).
        toks_per_batch: budget on ``rows * longest row`` (crop mode).
        batch_size: fixed rows per batch instead of the budget; in concat mode None means
            ``max(1, toks_per_batch // max_length)``.
        mask_prob: MLM selection rate.
        seed: seed of crops, concat order, batch shuffling and masks.
        num_workers: DataLoader worker processes (capped to the CPUs this process may use).
        invalid: invalid residue policy for FASTA (``error``/``skip``/``replace``).
        strip_gaps: remove alignment gaps (``-``, ``.``) from FASTA sequences first.
        allow_nucleotide: read records that look like DNA/RNA (an error by default).
        clusters: ``data cluster``'s output directory (or its members.tsv, or a mapping
            record id -> cluster id); needed by ``split_by="cluster"`` and cluster sampling.
        split_by: ``record`` (hash each record's key) or ``cluster`` (hash its cluster: whole
            clusters land in one split, no homolog of a test protein in training).
        sample: training items: ``record`` (every protein once per epoch), ``cluster`` (one
            random member per cluster per epoch) or ``cluster_sqrt`` (sqrt(size) draws).
        packing: concat mode's window filling: ``stream`` (proteins in a random order) or
            ``family`` (members of one cluster back to back, then the next cluster; needs
            ``clusters``) or ``copy`` (training windows hold every protein twice in a row: a
            retrieval curriculum; evaluation windows are stream-packed), see
            :class:`~protein_performer.data.datasets.ConcatWindowDataset`. Crop mode's
            ``pairs``: each training row is a protein after one member of its cluster
            (:class:`~protein_performer.data.datasets.PairDataset`; evaluation rows hold one
            protein, as in plain crop mode).
        min_members: family and pairs packing, training split only: clusters with fewer
            members (in that split) are left out of training, so that every protein but the
            first of its family has a homolog before it (a context-learning curriculum; the
            left-out proteins are logged). Validation and test keep every record. 1: keep all.
        family_spread: family packing: interleave the members of this many consecutive
            clusters round-robin, so a protein's homologs sit ~this many proteins away with
            other clusters between (long-distance retrieval); 1: members back to back.
        pair_copy: pairs packing: probability that a protein's partner is itself (a copy, the
            easy case of retrieval) instead of another member of its cluster.
        pair_alone: pairs packing: probability that a training row holds the protein with no
            partner (keeps the model a single-protein model too).
        pair_mask: pairs packing: ``all`` (mask the whole row) or ``protein`` (mask only the
            protein after its partner: the partner stays whole, as context does at evaluation).
        pair_partners: pairs packing: up to this many homologs before each protein, how many
            drawn per row (1: one partner).
        pair_fill: pairs packing: fill each row with a partner to ``max_length`` with proteins
            of other clusters, the partner at a random place among them (rows alone stay alone).
        pair_homologs: pairs packing: a ``data search`` output of the files against
            themselves (its ``hits.tsv``): a protein with hits in its split is placed after 1 to
            ``pair_partners`` of them (weighted by cluster, best first, each its hit region),
            rows like an alignment's; hits into other splits are never used. None: partners
            are members of the protein's cluster.
        pair_columns: pairs packing: rows read at their columns, for a model with
            ``model.context_positions=columns``: the protein cropped so that ``pair_partners``
            homologs fit beside it, each homolog aligned to the crop (its masked residues
            unknown) and cut to the residues in its columns, every token at its column's
            position (:class:`~protein_performer.data.datasets.PairDataset` ``columns``).
        pair_column_crop: with ``pair_columns``, ``partners``: every row's crop leaves room for
            ``pair_partners`` homologs; ``drawn``: for the homologs the row draws (a row of 3
            crops wider than one of 64), as ``score`` crops a site for the homologs it has.
        max_records: read at most this many FASTA records for training (before the hash
            split, so it also bounds val/test of a hash split); also caps shard/source train
            sets.
        val_max_records: cap on val/test records (None: no cap).
    """

    files: list[str] | None = None
    val_files: list[str] | None = None
    test_files: list[str] | None = None
    shards: str | None = None
    split_fractions: list[float] = field(default_factory=lambda: [0.9, 0.05, 0.05])
    split_seed: int = 0
    clusters: str | None = None
    split_by: str = "record"
    sample: str = "record"
    mode: str = "crop"
    packing: str = "stream"
    min_members: int = 1
    family_spread: int = 1
    pair_copy: float = 0.0
    pair_mask: str = "all"
    pair_alone: float = 0.0
    pair_fill: bool = False
    pair_partners: int = 1
    pair_homologs: str | None = None
    pair_columns: bool = False
    pair_column_crop: str = "partners"
    max_length: int = 1024
    toks_per_batch: int = 16384
    batch_size: int | None = None
    mask_prob: float = 0.15
    seed: int = 0
    num_workers: int = 0
    invalid: str = "error"
    strip_gaps: bool = False
    allow_nucleotide: bool = False
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

    def validate(
        self,
        prefix: str = "data.",
        *,
        objective: str = "mlm",
        crop: str = "random",
        pair_align: bool = False,
    ) -> None:
        """Every rule of the data settings, alone and together; a one-line
        :class:`ConfigError` naming the key (``prefix`` + field: ``data.mode`` in a run's
        config, ``mode`` as a ProteinDataModule argument). ``objective``, ``crop`` (evaluate's
        ``crop=``) and ``pair_align`` (training's ``align.weight > 0``) are the settings of
        other sections that data's rules read. Values are checked, not changed."""
        p = prefix
        check_choice("objective", objective, OBJECTIVES)
        align = "align.weight > 0" if p else "pair_align"  # its name where it is set
        check_choice(f"{p}mode", self.mode, MODES)
        check_choice("crop", crop, CROPS)
        check_choice(f"{p}invalid", self.invalid, INVALID_POLICIES)
        try:
            parse_fractions(self.split_fractions)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{p}split_fractions: {e}") from None
        check_int(f"{p}split_seed", self.split_seed, 0)
        check_int(f"{p}seed", self.seed, 0)
        check_int(f"{p}num_workers", self.num_workers, 0)
        shortest = 3 if self.mode == "crop" else 2  # <cls> residue <eos>; residue <sep>
        check_int(f"{p}max_length", self.max_length, shortest, optional=True)
        check_int(f"{p}toks_per_batch", self.toks_per_batch, 1)
        check_int(f"{p}batch_size", self.batch_size, 1, optional=True)
        check_int(f"{p}max_records", self.max_records, 1, optional=True)
        check_int(f"{p}val_max_records", self.val_max_records, 1, optional=True)
        m = self.mask_prob
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0.0 < m < 1.0:
            raise ConfigError(f"{p}mask_prob must be in (0, 1) (got {m!r})")
        self._check_packing(p, objective, crop, align if pair_align else None)

    def _check_packing(self, p: str, objective: str, crop: str, align: str | None) -> None:
        """How training items are drawn and packed, and the pairs settings."""
        check_choice(f"{p}split_by", self.split_by, SPLIT_BY)
        check_choice(f"{p}sample", self.sample, SAMPLING)
        packing = check_choice(f"{p}packing", self.packing, PACKINGS)
        need_mode = PACKING_MODE.get(packing)
        if need_mode is not None and self.mode != need_mode:
            rows = "windows of several proteins" if need_mode == "concat" else "one row per pair"
            raise ConfigError(f"{p}packing={packing} needs {p}mode={need_mode} ({rows})")
        check_int(f"{p}min_members", self.min_members, 1)
        check_int(f"{p}family_spread", self.family_spread, 1)
        if self.family_spread > 1 and packing != "family":
            raise ConfigError(f"{p}family_spread > 1 needs {p}packing=family")
        if self.min_members > 1 and packing not in CLUSTER_PACKINGS:
            raise ConfigError(
                f"{p}min_members > 1 needs {p}packing=family or pairs (it filters clusters)"
            )
        check_fraction(f"{p}pair_copy", self.pair_copy)
        check_fraction(f"{p}pair_alone", self.pair_alone)
        check_choice(f"{p}pair_mask", self.pair_mask, PAIR_MASKS)
        check_int(f"{p}pair_partners", self.pair_partners, 1)
        if packing != "pairs":
            for key, off in _PAIR_SETTINGS:
                if getattr(self, key) != off:
                    raise ConfigError(f"{p}{key} needs {p}packing=pairs")
            if align:
                raise ConfigError(
                    f"{align} needs {p}packing=pairs (it aligns each row's two proteins)"
                )
        if self.pair_fill and align:
            raise ConfigError(f"{p}pair_fill does not work with {align} (rows of two proteins)")
        if self.pair_homologs is not None and (self.pair_fill or align):
            raise ConfigError(
                f"{p}pair_homologs does not work with {p}pair_fill or "
                f"{align or 'pair_align'} (rows of two proteins)"
            )
        if self.pair_partners > 1 and (self.pair_fill or align):
            raise ConfigError(
                f"{p}pair_partners > 1 does not work with {p}pair_fill or "
                f"{align or 'pair_align'} (rows of two proteins)"
            )
        check_choice(f"{p}pair_column_crop", self.pair_column_crop, COLUMN_CROPS)
        if self.pair_column_crop != "partners" and not self.pair_columns:
            raise ConfigError(
                f"{p}pair_column_crop sizes the crop of {p}pair_columns rows: set "
                f"{p}pair_columns=true"
            )
        if self.pair_columns and (self.pair_fill or align or self.pair_mask != "protein"):
            raise ConfigError(
                f"{p}pair_columns needs {p}pair_mask=protein, without {p}pair_fill or "
                f"{align or 'pair_align'}"
            )
        if self.pair_mask == "protein" and objective != "mlm":
            raise ConfigError(
                f"{p}pair_mask=protein needs objective=mlm (it selects masked positions)"
            )
        needs = cluster_uses(self.split_by, self.sample, packing, prefix=p)
        if needs and self.clusters is None:
            where = f"{p}clusters=DIR" if p else "clusters"
            raise ConfigError(f"{needs[0]} needs {where} (the output of `data cluster`)")
        if self.split_by == "cluster" and self.shards:
            raise ConfigError(
                "shards are split when they are made: use `data preprocess --clusters DIR` "
                f"instead of {p}split_by=cluster"
            )
        if packing == "pairs" and (self.sample != "record" or crop != "random"):
            raise ConfigError(
                f"{p}packing=pairs draws its own partners: it needs {p}sample=record and "
                f"crop=random (got {p}sample={self.sample}, crop={crop})"
            )
        if self.sample != "record" and self.mode != "crop":
            raise ConfigError(f"{p}sample={self.sample} needs {p}mode=crop (one protein per item)")
