"""What :class:`~protein_performer.data.datamodule.ProteinDataModule` checks beyond its
:class:`~protein_performer.data.config.DataConfig` (whose rules live with it): the in-memory
sources given, and the worker count this machine can run."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError
from protein_performer.utils.checks import check_int
from protein_performer.utils.devices import is_rank_zero, usable_cpus

# the data module's own logger: its warnings read as they always did
log = logging.getLogger("protein_performer.data.datamodule")


def check_data_given(sources: Mapping[str, object], *given: object) -> None:
    """In-memory sources are FlatSource objects, and some data is given (``given``: the
    files and shards arguments)."""
    for split, src in sources.items():
        if src is not None and not isinstance(src, FlatSource):
            raise ConfigError(f"{split}_source must be a FlatSource; got {type(src).__name__}")
    if not (any(given) or any(s is not None for s in sources.values())):
        raise ConfigError("no data: give files, val_files, test_files, shards or *_source")


def usable_workers(num_workers: object) -> int:
    """``num_workers`` checked, capped to the CPUs this process may use (said once, by rank
    zero: torch only warns that more "might freeze"; more workers than CPUs just contend)."""
    workers = check_int("num_workers", num_workers, 0)
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
