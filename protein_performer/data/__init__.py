"""FASTA → tokens → batches. Knows nothing about models.

Main entry points: :func:`~protein_performer.data.fasta.read_fasta`,
:func:`~protein_performer.data.sources.load_fasta_source`,
:func:`~protein_performer.data.shards.preprocess`, :class:`~protein_performer.data.shards.ShardSource`,
:func:`~protein_performer.data.alphabet.default_alphabet`; the settings:
:class:`~protein_performer.data.config.DataConfig`. The names below are imported on first use, so
that importing :mod:`protein_performer.data.config` (as the run configs do) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from protein_performer.data.alphabet import Alphabet, InvalidPolicy, default_alphabet
    from protein_performer.data.batching import encode_batch
    from protein_performer.data.config import DataConfig
    from protein_performer.data.fasta import FastaRecord, read_fasta
    from protein_performer.data.headers import HeaderInfo, parse_header
    from protein_performer.data.sources import FlatSource, load_fasta_source

#: public name -> the module that holds it
_HOME = {
    "Alphabet": "alphabet",
    "InvalidPolicy": "alphabet",
    "default_alphabet": "alphabet",
    "encode_batch": "batching",
    "DataConfig": "config",
    "FastaRecord": "fasta",
    "read_fasta": "fasta",
    "HeaderInfo": "headers",
    "parse_header": "headers",
    "FlatSource": "sources",
    "load_fasta_source": "sources",
}

__all__ = [
    "Alphabet",
    "DataConfig",
    "FastaRecord",
    "FlatSource",
    "HeaderInfo",
    "InvalidPolicy",
    "default_alphabet",
    "encode_batch",
    "load_fasta_source",
    "parse_header",
    "read_fasta",
]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
