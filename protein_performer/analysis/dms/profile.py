"""A position-specific scoring matrix (PSSM) from homologs: the baseline a homolog-conditioned
language model's mutation scores should beat.

Construction (PSI-BLAST's, without its iterations):

1. **Alignment.** Each homolog is aligned to the query on its own, locally
   (:func:`~protein_performer.data.pairwise_alignment.aligned_positions`: Biopython, BLOSUM62,
   gap open −10 / extend −0.5). Local, because homologs are often regions (a search's hits ± a
   margin) or share only a domain with the query: a global alignment would force their unrelated
   ends onto it. A homolog is used when its alignment score stands ``min_z`` standard deviations
   above the scores of ``shuffles`` seeded shuffles of it (PRSS's test; ``min_z=None`` uses
   every homolog): an unrelated sequence still aligns locally, over a third of the query or
   more, at ~30% identity.
2. **Counts.** ``n_ia``: at query position ``i``, the homologs aligned there holding amino
   acid ``a`` (gaps and letters other than the 20 are not counted), plus the query itself
   (``include_query``, as PSI-BLAST). ``N_i = Σ_a n_ia``, ``f_ia = n_ia / N_i``.
3. **Pseudocounts** from BLOSUM62 (Henikoff & Henikoff 1996; PSI-BLAST's data-dependent
   pseudocounts with its fixed weight β = 10): ``g_ia = Σ_b f_ib P(a|b)``, with ``P(a|b)`` the
   substitution probabilities BLOSUM62 implies (:func:`~protein_performer.data.simulate.
   blosum62_model`), and ``Q_ia = (N_i f_ia + β g_ia) / (N_i + β)``. A position with no count
   is the background.
4. **Log-odds** ``S_ia = log2(Q_ia / p_a)`` in bits, ``p`` the BLOSUM62 background (the same
   model's ``q``).

A substitution scores ``S[i, mt] − S[i, wt]``, summed over the sites of a multi-mutant.

No homolog used (none given, or none passes the test) is a one-line :class:`DataError`;
``allow_query_only=True`` instead builds the PSSM from the query alone (with pseudocounts its
rows are then BLOSUM62's conditional probabilities: a BLOSUM62-like baseline), flagged by
``homologs_used == 0``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protein_performer.analysis.dms.variants import (
    Indel,
    Substitution,
    check_mutants,
    clean_sequence,
    misfit_error,
    parse_variant,
)
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS
from protein_performer.data.msa import (
    EXACT_WEIGHT_CELLS,
    GAP,
    MSA,
    WEIGHT_IDENTITY,
    sequence_weights,
    weight_sample_size,
)
from protein_performer.data.pairwise_alignment import aligned_positions, local_aligner
from protein_performer.data.simulate import blosum62_model
from protein_performer.errors import ConfigError, DataError

#: Column order of every matrix here (that of :func:`blosum62_model`).
COLUMNS = STANDARD_AMINO_ACIDS
#: PSI-BLAST's pseudocount weight β.
PSEUDOCOUNT_WEIGHT = 10.0
_INDEX = {aa: i for i, aa in enumerate(COLUMNS)}


@dataclass
class Pssm:
    """A query's PSSM: ``counts`` ``(L, 20)`` residues per query position (query included when
    it was), ``frequencies`` ``(L, 20)`` with pseudocounts, ``scores`` ``(L, 20)`` log2-odds
    against ``background`` ``(20,)``; columns in :data:`COLUMNS`. ``homologs`` holds one dict
    per homolog given (``used``, ``score``, ``z``, ``identity``, ``coverage``)."""

    query: str
    counts: np.ndarray
    frequencies: np.ndarray
    scores: np.ndarray
    background: np.ndarray
    homologs: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    #: each homolog used: its sequence weight ``(N,)`` (1 / neighbours at 80 % identity)
    weights: np.ndarray | None = None
    #: the homologs used, at the query's positions ``(N, L)`` (codes as
    #: :attr:`~protein_performer.data.msa.MSA.matrix`)
    matrix: np.ndarray | None = None

    @property
    def homologs_used(self) -> int:
        return sum(1 for h in self.homologs if h["used"])

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and numbers (JSON)."""
        return {
            "query": self.query,
            "columns": COLUMNS,
            "counts": self.counts.tolist(),
            "frequencies": self.frequencies.tolist(),
            "scores": self.scores.tolist(),
            "background": self.background.tolist(),
            "homologs_used": self.homologs_used,
            "homologs": self.homologs,
            "params": self.params,
        }


def _clean(seq: str, known: frozenset[str]) -> str:
    return "".join(c if c in known else "X" for c in seq.upper())


def alignment_z(
    query: str, homolog: str, shuffles: int, rng: np.random.Generator
) -> tuple[float, float]:
    """``(score, z)``: the local BLOSUM62 alignment score of ``homolog`` to ``query`` and how
    many standard deviations it lies above those of ``shuffles`` shuffles of ``homolog``
    (``inf`` when they all score the same, lower)."""
    aligner, known = local_aligner()
    q, h = _clean(query, known), _clean(homolog, known)
    score = float(aligner.score(h, q))
    letters = np.array(list(h))
    null = np.array([aligner.score("".join(rng.permutation(letters)), q) for _ in range(shuffles)])
    sd = float(null.std())
    if sd == 0.0:
        return score, float("inf") if score > null.mean() else 0.0
    return score, (score - float(null.mean())) / sd


def column_counts(
    query: str,
    homologs: Sequence[str],
    *,
    min_z: float | None = 5.0,
    shuffles: int = 20,
    seed: int = 0,
    include_query: bool = True,
    aligned: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """``(counts (L, 20), homologs info)``: step 1 and 2 of the module docstring. Shuffles of
    homolog ``k`` use the generator ``default_rng([seed, k])``. ``aligned``: a list that
    receives the homologs' residues at the query's positions, ``(N, L)`` codes as
    :attr:`~protein_performer.data.msa.MSA.matrix` (gaps :data:`~protein_performer.data.msa.GAP`)."""
    n = len(query)
    counts = np.zeros((n, 20), dtype=np.float64)
    matrix = np.full((len(homologs), n), GAP, dtype=np.uint8)
    if include_query:
        for i, aa in enumerate(query):
            if aa in _INDEX:
                counts[i, _INDEX[aa]] += 1
    info = []
    for k, homolog in enumerate(homologs):
        hit = aligned_positions(query, homolog)
        rows = np.nonzero(hit >= 0)[0]
        same = sum(query[i] == homolog[hit[i]] for i in rows)
        entry: dict[str, Any] = {
            "identity": round(same / len(rows), 4) if len(rows) else 0.0,
            "coverage": round(len(rows) / n, 4),
        }
        if min_z is not None:
            score, z = alignment_z(query, homolog, shuffles, np.random.default_rng([seed, k]))
            entry |= {"score": score, "z": round(z, 3) if np.isfinite(z) else None}
            entry["used"] = bool(len(rows)) and z >= min_z
        else:
            entry["used"] = bool(len(rows))
        for i in rows:
            aa = homolog[hit[i]].upper()
            if aa in _INDEX:
                matrix[k, i] = _INDEX[aa]
                if entry["used"]:
                    counts[i, _INDEX[aa]] += 1
        info.append(entry)
    if aligned is not None:
        aligned.append(matrix)
    return counts, info


def pssm_from_counts(
    counts: np.ndarray, pseudocount_weight: float = PSEUDOCOUNT_WEIGHT
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(frequencies, scores, background)`` of ``counts`` ``(L, 20)``: steps 3 and 4 of the
    module docstring."""
    model = blosum62_model()
    background = np.asarray(model.q, dtype=np.float64)
    total = counts.sum(1, keepdims=True)  # N_i
    f = np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)
    g = f @ model.transition  # g_ia = Σ_b f_ib P(a|b)
    beta = float(pseudocount_weight)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = (total * f + beta * g) / (total + beta)
    q = np.where(total > 0, q, background[None, :])
    with np.errstate(divide="ignore"):
        scores = np.log2(q / background[None, :])
    return q, scores, background


def build_pssm(
    query: str,
    homologs: Sequence[str],
    *,
    pseudocount_weight: float = PSEUDOCOUNT_WEIGHT,
    min_z: float | None = 5.0,
    shuffles: int = 20,
    seed: int = 0,
    include_query: bool = True,
    allow_query_only: bool = False,
) -> Pssm:
    """The PSSM of ``query`` (a sequence, read as a FASTA record's is) from ``homologs``
    (sequences), as the module docstring describes.

    Raises :class:`ConfigError` for a bad parameter and a one-line :class:`DataError` when no
    homolog is used (unless ``allow_query_only``: the query-only fallback).
    """
    if pseudocount_weight < 0 or not np.isfinite(pseudocount_weight):
        raise ConfigError(f"pseudocount_weight must be >= 0 (got {pseudocount_weight})")
    if shuffles < 2 and min_z is not None:
        raise ConfigError(f"shuffles must be >= 2 (got {shuffles})")
    query = clean_sequence(query)
    if not query:
        raise DataError("the query sequence is empty")
    homologs = [clean_sequence(h) for h in homologs]
    aligned: list[np.ndarray] = []
    counts, info = column_counts(
        query,
        homologs,
        min_z=min_z,
        shuffles=shuffles,
        seed=seed,
        include_query=include_query,
        aligned=aligned,
    )
    used = sum(1 for h in info if h["used"])
    if not used and not allow_query_only:
        if not homologs:
            problem = "no homologs given"
        else:
            best = max((h.get("z") or 0.0 for h in info), default=0.0)
            chance = (  # with min_z None a homolog is used when anything of it aligns
                "at all (no local BLOSUM62 alignment)"
                if min_z is None
                else "above chance (local BLOSUM62 score z >= "
                f"{min_z:g} against shuffles; best z = {best:.1f})"
            )
            problem = f"none of the {len(homologs):,} homologs aligns to the query {chance}"
        raise DataError(
            f"{problem}: no PSSM (allow_query_only builds one from the query alone, a "
            "BLOSUM62-like baseline)"
        )
    if not include_query and not counts.any():
        raise DataError("no residue to count: no homolog aligns and include_query is off")
    frequencies, scores, background = pssm_from_counts(counts, pseudocount_weight)
    params = {
        "alignment": "Biopython local, BLOSUM62, gap open -10 / extend -0.5",
        "pseudocounts": "BLOSUM62 substitution probabilities (Henikoff & Henikoff 1996)",
        "pseudocount_weight": pseudocount_weight,
        "min_z": min_z,
        "shuffles": shuffles,
        "seed": seed,
        "include_query": include_query,
        "units": "bits (log2-odds against the BLOSUM62 background)",
    }
    used_rows = aligned[0][[h["used"] for h in info]] if homologs else aligned[0]
    return Pssm(
        query,
        counts,
        frequencies,
        scores,
        background,
        info,
        params,
        weights=sequence_weights(used_rows, seed=seed),
        matrix=used_rows,
    )


def weighted_column_counts(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(L, 20)``: the summed ``weights`` ``(N,)`` of the rows holding each amino acid in each
    column of ``rows`` ``(N, L)`` (codes as :attr:`~protein_performer.data.msa.MSA.matrix`;
    gaps not counted). One column at a time: memory of one row's length, however deep."""
    out = np.zeros((rows.shape[1], GAP + 1), dtype=np.float64)
    for j in range(rows.shape[1]):
        out[j] = np.bincount(rows[:, j], weights=weights, minlength=GAP + 1)[: GAP + 1]
    return out[:, :20]


def alignment_profile(
    wild_type: str,
    msa: MSA,
    *,
    keep: np.ndarray | None = None,
    identity: float = WEIGHT_IDENTITY,
    pseudocount_weight: float = PSEUDOCOUNT_WEIGHT,
    include_query: bool = True,
    seed: int = 0,
) -> Pssm:
    """The weighted profile of ``wild_type`` from an aligned ``msa``, as the field builds it
    (EVmutation's and DeepSequence's site-independent model): the alignment's own columns (no
    re-alignment); each sequence (the query's row included) weighted by 1 / its neighbours at
    ``identity`` or more (:func:`~protein_performer.data.msa.sequence_weights`); weighted counts
    per column, then steps 3 and 4 of the module docstring (BLOSUM62 pseudocounts, log-odds in
    bits). ``keep`` ``(N,)`` bool: the homologs used (None: all). Wild-type residues outside
    the alignment's columns hold the query alone (BLOSUM62's conditional probabilities).
    ``params["neff"]``: the summed weight of the sequences, the alignment's effective depth; an
    alignment too deep to weigh exactly has its weights estimated from a sample of its rows
    drawn with ``seed`` (``params["weight_sample"]``, see :func:`~protein_performer.data.msa.
    sequence_weights`)."""
    if not msa.aligned:
        raise ValueError(
            "alignment_profile needs an aligned MSA (a3m, a2m, Stockholm, aligned FASTA)"
        )
    wild_type = clean_sequence(wild_type)
    rows = msa.matrix if keep is None else msa.matrix[np.asarray(keep, dtype=bool)]
    if include_query:
        rows = np.concatenate([msa.query_codes[None, :], rows])
    weights = sequence_weights(rows, identity, max_cells=EXACT_WEIGHT_CELLS, seed=seed)
    counts = np.zeros((len(wild_type), 20), dtype=np.float64)
    if include_query:
        for i, aa in enumerate(wild_type):
            if aa in _INDEX:
                counts[i, _INDEX[aa]] = 1.0
        counts[msa.positions] = 0.0  # the query's row counts there, with its weight
    counts[msa.positions] += weighted_column_counts(rows, weights)
    frequencies, scores, background = pssm_from_counts(counts, pseudocount_weight)
    neff = float(weights.sum())
    params = {
        "alignment": f"the columns of {msa.format} {msa.path} as aligned",
        "weights": f"1 / neighbours at >= {identity:g} identity (EVmutation, DeepSequence)",
        "neff": round(neff, 2),
        "sequences": len(rows),
        "weight_sample": weight_sample_size(*rows.shape, EXACT_WEIGHT_CELLS),
        "columns": len(msa.positions),
        "pseudocounts": "BLOSUM62 substitution probabilities (Henikoff & Henikoff 1996)",
        "pseudocount_weight": pseudocount_weight,
        "include_query": include_query,
        "units": "bits (log2-odds against the BLOSUM62 background)",
    }
    homolog_weights = weights[1:] if include_query else weights
    return Pssm(
        wild_type,
        counts,
        frequencies,
        scores,
        background,
        [],
        params,
        homolog_weights,
        rows[1:] if include_query else rows,
    )


def pssm_scores(
    pssm: Pssm,
    mutants: Sequence[Sequence[Substitution] | Indel | str],
    *,
    offset: int = 1,
) -> np.ndarray:
    """``(n,)`` scores of ``mutants`` of ``pssm.query`` (``"H24C"``, ``"H24C:P25A"``, whole
    sequences, or parsed substitutions, positions numbered from ``offset``):
    ``Σ_sites S[i, mt] − S[i, wt]`` in bits, 0 for a synonymous site, NaN for an indel. A
    ValueError names the first mutant that does not fit the query (as ``score_mutants``)."""
    if isinstance(mutants, str):
        mutants = [mutants]
    parsed = [
        parse_variant(m, pssm.query, offset) if isinstance(m, str) else m
        if isinstance(m, Indel) else list(m)
        for m in mutants
    ]  # fmt: skip
    problems = check_mutants(parsed, pssm.query, offset)
    if problems:
        raise misfit_error(problems)
    s = pssm.scores
    return np.array(
        [
            np.nan
            if isinstance(sites, Indel)
            else sum(s[m.index, _INDEX[m.mt]] - s[m.index, _INDEX[m.wt]] for m in sites)
            for sites in parsed
        ],
        dtype=np.float64,
    )


__all__ = [
    "COLUMNS",
    "PSEUDOCOUNT_WEIGHT",
    "Pssm",
    "alignment_profile",
    "alignment_z",
    "build_pssm",
    "column_counts",
    "pssm_from_counts",
    "pssm_scores",
]
