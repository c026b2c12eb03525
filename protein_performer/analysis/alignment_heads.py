"""Alignment heads: how much of a protein's attention lands on the residues aligned to it in the
homologs before it in the window (the "alignment stripe" of a cross-protein head).

A model that uses a homolog by finding the aligned position and reading it off should have
heads whose rows, for the last protein of a joined window, peak on the aligned residue. The
alignment comes from :func:`~protein_performer.data.pairwise_alignment.aligned_positions`
(Biopython, local, BLOSUM62), so the measure does not depend on the model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from protein_performer.analysis.inputs import Protein, record_names
from protein_performer.data.pairwise_alignment import aligned_positions
from protein_performer.errors import ConfigError


def alignment_pairs(
    segments: Sequence[tuple[int, int]], sequences: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Window positions ``(queries, keys)`` of the last segment's residues and the residues
    aligned to them in each earlier segment (one pair per residue and homolog it aligns to).

    Args:
        segments: ``(start, stop)`` of each protein in the window (as ``join_proteins`` gives).
        sequences: the residues of each segment, as letters.
    """
    if len(segments) != len(sequences):
        raise ValueError(f"{len(segments)} segments but {len(sequences)} sequences")
    (q_start, q_stop), query = segments[-1], sequences[-1]
    if q_stop - q_start != len(query):
        raise ValueError("the last segment's length differs from its sequence")
    queries, keys = [], []
    for (start, stop), subject in zip(segments[:-1], sequences[:-1], strict=True):
        if stop - start != len(subject):
            raise ValueError("a segment's length differs from its sequence")
        hit = aligned_positions(query, subject)
        (rows,) = np.nonzero(hit >= 0)
        queries.append(q_start + rows)
        keys.append(start + hit[rows])
    if not queries:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(queries), np.concatenate(keys)


def aligned_mass(
    attention: np.ndarray, queries: np.ndarray, keys: np.ndarray, causal: bool = False
) -> tuple[np.ndarray, float]:
    """Per head, the mean over aligned queries of the attention they put on their aligned keys.

    Args:
        attention: ``(layers, heads, L, L)`` attention over the window's residues (rows are
            renormalised over these ``L`` columns).
        queries, keys: ``(P,)`` window positions from :func:`alignment_pairs`.
    Returns:
        ``(mass, uniform)``: ``(layers, heads)`` means in [0, 1], and what uniform attention
        over the window would give (aligned keys per query / L; ``causal``: the aligned keys it
        sees / the keys it sees, ``query + 1``); ``nan`` when nothing aligns.
    """
    n = attention.shape[-1]
    if len(queries) == 0:
        return np.full(attention.shape[:2], np.nan), float("nan")
    rows, inverse = np.unique(queries, return_inverse=True)
    a = attention.astype(np.float64)
    totals = np.clip(a[..., rows, :].sum(-1), 1e-30, None)  # (layers, heads, Q)
    picked = a[..., queries, keys]  # (layers, heads, P)
    on = np.zeros((*a.shape[:2], len(rows)))
    np.add.at(on, (..., inverse), picked)
    mass = (on / totals).mean(-1)
    if causal:
        visible = np.zeros(len(rows))
        np.add.at(visible, inverse, keys <= queries)
        uniform = float((visible / (rows + 1)).mean())
    else:
        uniform = float(np.bincount(inverse).mean() / n)
    return mass, uniform


def homolog_segments(
    proteins: list[Protein], ids: list[str] | None, read_ids: list[str], fasta: str
) -> list[int]:
    """Indices of the joined ``proteins`` the last one is aligned to: those named by ``ids``
    (``homologs=``), or every one before it. ``read_ids``: the records read, before a
    ``truncate=true`` join dropped front ones (named in the error when a homolog was dropped)."""
    if ids is None:
        return list(range(len(proteins) - 1))
    where = f"the joined window of {fasta}"
    if not ids:
        raise ConfigError("homologs=[] names no record; leave homologs unset to use every one")
    others, last = proteins[:-1], proteins[-1]
    chosen: set[int] = set()
    for h in ids:
        # as record= finds them: an exact id first, else a UniProt accession or entry name
        exact = [i for i, p in enumerate(others) if p.id == h]
        hits = exact or [i for i, p in enumerate(others) if h in record_names(p.id)]
        is_last = last.id == h or (not exact and h in record_names(last.id))
        if len(hits) > 1 or (hits and is_last):
            which = ", the last (aligned) one among them" if is_last else ""
            raise ConfigError(
                f"homologs: {h} names more than one record of {where}{which}; give each "
                "record a unique id (or the full id)"
            )
        if hits:
            chosen.add(hits[0])
            continue
        if is_last:
            problem = "is the last record (the one aligned to the others)"
        elif any(h in record_names(r) for r in read_ids):
            problem = "was cut from the front of the window by truncate=true"
        else:
            problem = "is not a record of the FASTA"
        raise ConfigError(f"homologs: {h} {problem} ({where})")
    return sorted(chosen)


def cross_protein_mass(attention: np.ndarray, segments: list[tuple[int, int]]) -> np.ndarray:
    """``(layers, heads)``: mean over the last segment's queries of the attention they put on
    the other segments (the cross-protein heads of a homolog window)."""
    start, stop = segments[-1]
    others = np.zeros(attention.shape[-1], dtype=bool)
    for a, b in segments[:-1]:
        others[a:b] = True
    rows = attention[..., start:stop, :].astype(np.float64)
    total = np.clip(rows.sum(-1), 1e-30, None)
    return (rows[..., others].sum(-1) / total).mean(-1)
