"""FASTA → tokens → batches. Knows nothing about models.

Main entry points: :func:`~protein_performer.data.fasta.read_fasta`,
:func:`~protein_performer.data.sources.load_fasta_source`,
:func:`~protein_performer.data.shards.preprocess`, :class:`~protein_performer.data.shards.ShardSource`,
:func:`~protein_performer.data.alphabet.default_alphabet`.
"""

from protein_performer.data.alphabet import Alphabet, InvalidPolicy, default_alphabet
from protein_performer.data.batching import encode_batch
from protein_performer.data.fasta import FastaRecord, read_fasta
from protein_performer.data.headers import HeaderInfo, parse_header
from protein_performer.data.sources import FlatSource, load_fasta_source

__all__ = [
    "Alphabet",
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
