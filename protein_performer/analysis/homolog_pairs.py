"""Proteins paired with their homologs, read from FASTA: the input of the homolog-conditioned
analyses (:mod:`~protein_performer.analysis.cross_homolog`, :mod:`~protein_performer.analysis.dms.profile`).

The homologs come from a FASTA whose headers name their query as ``query=ID`` (what
:func:`protein_performer.data.search.search` writes in ``hits.fasta``), or from a plain FASTA of
homologs that then go with every query (as ``evaluate context=FASTA`` uses them), or from an
alignment (a3m, a2m, Stockholm, aligned FASTA: :func:`~protein_performer.data.msa.read_msa`),
whose homologs go with the protein it aligns.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import numpy as np

from protein_performer.analysis.inputs import PathLike, Protein, read_proteins, record_names
from protein_performer.data.alphabet import Alphabet
from protein_performer.data.msa import alignment_records, read_msa
from protein_performer.errors import DataError

log = logging.getLogger(__name__)

#: A protein and its homologs.
HomologPair = tuple[Protein, list[Protein]]

_QUERY = re.compile(r"(?:^|\s)query=(\S+)")


def query_of(description: str) -> str | None:
    """The ``query=ID`` a homolog's header names (after its id), or None."""
    m = _QUERY.search(description)
    return None if m is None else m.group(1)


def query_names(homologs: Sequence[Protein], path: PathLike) -> list[str | None]:
    """Each homolog's ``query=`` (all None: a file for every query). One-line
    :class:`DataError` when some records name their query and others do not."""
    named = [query_of(h.description) for h in homologs]
    if any(n is not None for n in named):
        missing = next((h for h, n in zip(homologs, named, strict=True) if n is None), None)
        if missing is not None:
            raise DataError(
                f"{missing.id}: no query=ID in its header, while other records name their "
                "query (a search's hits.fasta names each)",
                path=path,
            )
    return named


def read_homolog_pairs(
    query_fasta: PathLike,
    homolog_fasta: PathLike,
    alphabet: Alphabet,
    *,
    max_homologs: int | None = None,
    max_identity: float | None = None,
    invalid: str = "error",
) -> list[HomologPair]:
    """``[(query, [homologs])]`` in the order of ``query_fasta``, each query's homologs in the
    order of ``homolog_fasta`` (best first in a search's ``hits.fasta``), at most
    ``max_homologs`` each; queries without a homolog are left out, and so are copies of a
    query among its homologs (said in a warning). An alignment's homologs more than
    ``max_identity`` identical to its protein are left out first (all kept when every one
    is; said in a warning); FASTA hits are taken as given (``data search --max-identity``
    bounds theirs).

    Homolog headers with ``query=ID`` go with that query (an id, or a UniProt accession or
    entry name of it); a file without any goes with every query. One-line
    :class:`DataError`: some headers with ``query=`` and some without, or no query with a
    homolog.
    """
    queries = read_proteins(query_fasta, alphabet, invalid=invalid)
    kind, records = alignment_records(homolog_fasta)
    if kind != "fasta":
        pair = _alignment_pair(
            queries, records, homolog_fasta, alphabet, max_homologs, query_fasta, max_identity
        )
        return [pair]
    homologs = read_proteins(homolog_fasta, alphabet, invalid=invalid)
    named = query_names(homologs, homolog_fasta)
    if all(n is None for n in named):
        groups = {i: list(homologs) for i in range(len(queries))}
    else:
        index: dict[str, int] = {}
        for i, q in enumerate(queries):
            for name in record_names(q.id):
                index.setdefault(name, i)
        groups = {}
        for h, n in zip(homologs, named, strict=True):
            if n in index:
                groups.setdefault(index[n], []).append(h)
    copies = 0
    for i, members in groups.items():  # a copy of a protein is not a homolog of it
        own = queries[i].residues
        kept = [h for h in members if not np.array_equal(h.residues, own)]
        copies += len(members) - len(kept)
        groups[i] = kept
    if copies:
        log.warning(
            "%s: %s identical to the protein of %s %s left out (a copy is not a homolog)",
            homolog_fasta,
            f"{copies:,} record" + ("s" if copies > 1 else ""),
            query_fasta,
            "they go with" if copies > 1 else "it goes with",
        )
    pairs = [
        (queries[i], groups[i][:max_homologs] if max_homologs else groups[i])
        for i in range(len(queries))
        if groups.get(i)
    ]
    if not pairs:
        raise DataError(
            f"no homolog names a query of {query_fasta} (query=ID in the headers)",
            path=homolog_fasta,
        )
    return pairs


def _alignment_pair(
    queries: Sequence[Protein],
    records: Sequence[tuple[str, str]],
    path: PathLike,
    alphabet: Alphabet,
    max_homologs: int | None,
    query_fasta: PathLike,
    max_identity: float | None = None,
) -> HomologPair:
    """The protein of ``queries`` an alignment is of (its query is it, or a stretch of it),
    with the alignment's homologs in file order (read by :func:`~protein_performer.data.msa.
    read_msa`: copies of it and duplicates left out; those more than ``max_identity``
    identical to it too, unless that leaves none)."""

    def pair(q: Protein) -> HomologPair:
        msa = read_msa(path, alphabet.decode(q.residues))
        keep = np.arange(len(msa.sequences))
        if max_identity is not None:
            close = msa.identity() > max_identity
            if close.any() and not close.all():
                keep = np.flatnonzero(~close)
                log.warning(
                    "%s: %s of its %s homologs more than %g%% identical to %s left out "
                    "(context_max_identity=%g; null keeps them)",
                    path,
                    f"{int(close.sum()):,}",
                    f"{len(close):,}",
                    round(100 * max_identity, 1),
                    q.id,
                    max_identity,
                )
        homologs = [
            Protein(
                msa.ids[i],
                "",
                alphabet.encode(
                    "".join(c if c in alphabet.residues else "X" for c in msa.sequences[i])
                ),
            )
            for i in keep
        ]
        return q, homologs[:max_homologs] if max_homologs else homologs

    for q in queries:
        sequence = alphabet.decode(q.residues)
        if any(seq in sequence for _, seq in records[:1]) or any(
            seq == sequence for _, seq in records
        ):
            return pair(q)
    if len(queries) == 1:  # the reader places a query cut to its focus columns, or says where
        return pair(queries[0])  # it differs from the protein
    first = records[0][0] if records else "(none)"
    raise DataError(
        f"the alignment's query {first} (its first record) is none of the proteins of "
        f"{query_fasta}: give the protein it aligns as fasta=",
        path=path,
    )


__all__ = ["HomologPair", "query_of", "read_homolog_pairs"]
