"""The checks of :class:`~protein_performer.data.datamodule.ProteinDataModule`'s arguments, each
a one-line :class:`~protein_performer.errors.ConfigError` naming the argument: choices, integers,
paths, probabilities, the worker count this machine can run, and :class:`PackingSettings` (how
items are sampled and packed, with the combinations that go together)."""

from __future__ import annotations

import logging
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from protein_performer.data.cluster import (
    CLUSTER_PACKINGS,
    PACKING_MODE,
    PACKINGS,
    SPLIT_BY,
    cluster_uses,
)
from protein_performer.data.datasets import CLUSTER_SAMPLING, PAIR_MASKS
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError
from protein_performer.utils.devices import is_rank_zero, usable_cpus

# the data module's own logger: its warnings read as they always did
log = logging.getLogger("protein_performer.data.datamodule")

PathList = Sequence[str | os.PathLike] | str | os.PathLike | None


def _choice(name: str, value: object, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ConfigError(f"{name} must be one of: {', '.join(choices)}; got {value!r}")
    return str(value)


def _int(name: str, value: object, minimum: int, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        extra = " or None" if optional else ""
        raise ConfigError(f"{name} must be an integer >= {minimum}{extra}; got {value!r}")
    return int(value)


def _paths(name: str, value: PathList) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    try:
        paths = [os.fspath(p) for p in value]
    except TypeError:
        raise ConfigError(f"{name} must be a list of file paths; got {value!r}") from None
    return paths or None


def _check_data_given(sources: Mapping[str, object], *given: object) -> None:
    """In-memory sources are FlatSource objects, and some data is given (``given``: the
    files and shards arguments)."""
    for split, src in sources.items():
        if src is not None and not isinstance(src, FlatSource):
            raise ConfigError(f"{split}_source must be a FlatSource; got {type(src).__name__}")
    if not (any(given) or any(s is not None for s in sources.values())):
        raise ConfigError("no data: give files, val_files, test_files, shards or *_source")


def _probability(name: str, value: object, *, zero: bool) -> float:
    """A number in [0, 1] (``zero=False``: in (0, 1])."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    above = number and (float(value) >= 0.0 if zero else float(value) > 0.0)
    if not (above and float(value) <= 1.0):
        raise ConfigError(
            f"{name} must be a number in {'[0, 1]' if zero else '(0, 1]'}; got {value!r}"
        )
    return float(value)


def usable_workers(num_workers: object) -> int:
    """``num_workers`` checked, capped to the CPUs this process may use (said once, by rank
    zero: torch only warns that more "might freeze"; more workers than CPUs just contend)."""
    workers = _int("num_workers", num_workers, 0)
    cpus = usable_cpus()
    if workers > cpus:
        if is_rank_zero():
            log.warning(
                "num_workers=%d but %d CPU%s usable: using %d data-loading worker%s",
                workers,
                cpus,
                "s are" if cpus != 1 else " is",
                cpus,
                "s" if cpus != 1 else "",
            )
        workers = cpus
    return workers


@dataclass(frozen=True)
class PackingSettings:
    """How training items are drawn and packed (see ProteinDataModule's arguments)."""

    split_by: str
    sample: str
    packing: str
    min_members: int
    family_spread: int
    pair_copy: float
    pair_alone: float
    pair_align: bool
    pair_mask: str
    pair_fill: bool


def packing_settings(
    *,
    mode: str,
    crop: str,
    shards: str | None,
    clusters: str | os.PathLike | Mapping[str, str] | None,
    split_by: str,
    sample: str,
    packing: str,
    min_members: int,
    family_spread: int,
    pair_copy: float,
    pair_alone: float,
    pair_align: bool,
    pair_mask: str,
    pair_fill: bool,
) -> PackingSettings:
    """The split, sampling and packing arguments checked, alone and together (``mode``,
    ``crop`` and ``shards`` already checked)."""
    split_by = _choice("split_by", split_by, SPLIT_BY)
    sample = _choice("sample", sample, ("record", *CLUSTER_SAMPLING))
    packing = _choice("packing", packing, PACKINGS)
    min_members = _int("min_members", min_members, 1)
    family_spread = _int("family_spread", family_spread, 1)
    if family_spread > 1 and packing != "family":
        raise ConfigError("family_spread > 1 needs packing=family")
    if min_members > 1 and packing not in CLUSTER_PACKINGS:
        raise ConfigError("min_members > 1 needs packing=family or pairs (it filters clusters)")
    pair_copy = _probability("pair_copy", pair_copy, zero=True)
    pair_alone = _probability("pair_alone", pair_alone, zero=True)
    if bool(pair_align) and packing != "pairs":
        raise ConfigError("pair_align needs packing=pairs (it aligns each row's two proteins)")
    pair_mask = _choice("pair_mask", pair_mask, PAIR_MASKS)
    if bool(pair_fill) and packing != "pairs":
        raise ConfigError("pair_fill needs packing=pairs (it fills the rows of pairs)")
    if bool(pair_fill) and bool(pair_align):
        raise ConfigError("pair_fill does not work with pair_align (rows of two proteins)")
    need_mode = PACKING_MODE.get(packing)
    if need_mode is not None and mode != need_mode:
        rows = "windows of several proteins" if need_mode == "concat" else "one row per pair"
        raise ConfigError(f"packing={packing} needs mode={need_mode} ({rows})")
    needs = cluster_uses(split_by, sample, packing)
    if needs and clusters is None:
        raise ConfigError(f"{needs[0]} needs clusters (the output of `data cluster`)")
    if split_by == "cluster" and shards is not None:
        raise ConfigError(
            "shards are split when they are made: use `data preprocess --clusters DIR` "
            "instead of split_by=cluster"
        )
    if packing == "pairs" and (sample != "record" or crop != "random"):
        raise ConfigError(
            "packing=pairs draws its own partners and crops: it needs sample=record and crop=random"
        )
    if sample != "record" and mode != "crop":
        raise ConfigError(f"sample={sample} needs mode=crop (one protein per item)")
    return PackingSettings(
        split_by=split_by,
        sample=sample,
        packing=packing,
        min_members=min_members,
        family_spread=family_spread,
        pair_copy=pair_copy,
        pair_alone=pair_alone,
        pair_align=bool(pair_align),
        pair_mask=pair_mask,
        pair_fill=bool(pair_fill),
    )
