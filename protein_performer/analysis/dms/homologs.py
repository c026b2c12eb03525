"""Mutation scores conditioned on homologs (``score context=HOMOLOGS.fasta``): a PSSM baseline
built from them, and the model's masked marginals with them placed before the protein in one
window.

The homologs are a FASTA (a search's ``hits.fasta``, whose headers name their query as
``query=ID``: those of the wild type are taken, by its record id, accession or entry name; a
FASTA without ``query=`` is taken whole). Gaps are removed, letters other than the 20 read as
``X``, and a homolog identical to the wild type is left out (it would hand the model the
answer at every site).

- ``pssm``: :func:`~protein_performer.analysis.dms.profile.build_pssm` of the wild type from them
  (each aligned locally, used when it aligns above chance), ``S[i, mt] − S[i, wt]`` in bits;
- ``masked_marginal_context``: ESM-1v's masked marginal read from the window
  ``<cls> h_1 <sep> … h_k <sep> protein <eos>`` (the layout of
  :func:`~protein_performer.data.context_windows.context_window`; a model trained on packed windows
  gets ``h_1 <sep> … protein <sep>``), the homologs the PSSM used in file order, as many as
  fit. A protein longer than half the window is scored on a window of half its length centred
  on each site, and the homologs that must be cut are cut about the same region. Where the
  whole-protein window holds fewer than ``window_homologs`` of the homologs whole, each site is
  scored on a column crop instead (:mod:`~protein_performer.analysis.dms.windows`).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protein_performer.analysis.dms import variants as var
from protein_performer.analysis.dms.profile import (
    COLUMNS,
    Pssm,
    alignment_profile,
    build_pssm,
    pssm_scores,
)
from protein_performer.analysis.dms.windows import (
    AUTO_WINDOW_HOMOLOGS,
    column_crop,
    column_jobs,
    crop_width,
    masked_log_probs,
    window_homologs_for,
    window_info,
)
from protein_performer.analysis.homolog_pairs import query_names
from protein_performer.analysis.inputs import PathLike, Protein, read_proteins, record_names
from protein_performer.data.alphabet import EMPTY_HINT, Alphabet
from protein_performer.data.context_windows import (
    MIN_CONTEXT_RESIDUES,
    context_window,
    fit_members,
    in_rank_order,
)
from protein_performer.data.msa import (
    FRAGMENT_COVERAGE,
    GAP,
    MSA,
    SAMPLINGS,
    homolog_order,
    no_homolog_error,
    read_msa,
)
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.performer import ProteinLM, reads_columns
from protein_performer.utils.checks import check_choice, check_fraction, check_int

#: The columns this adds to a scan's scores.
PSSM_COLUMN = "pssm"
CONTEXT_COLUMN = "masked_marginal_context"
#: The window (tokens) used when neither the model (rotary positions) nor its training run
#: bounds it.
DEFAULT_CONTEXT_TOKENS = 1024
#: Plain FASTA hits used when no ``max_homologs`` is given (each is aligned for the PSSM).
UNALIGNED_MAX_HOMOLOGS = 16
#: The profile's weight in the retrieval column (Tranception's published value).
DEFAULT_RETRIEVAL = 0.6
#: The column that adds the profile's log-ratio to the model's (Tranception's retrieval).
RETRIEVAL_COLUMN = "context_retrieval"
#: How the window's homologs are chosen when none is named (see :data:`~protein_performer.data.msa.SAMPLINGS`).
DEFAULT_SAMPLING = "first"
#: At most this many homologs in one window, by default: the model's own
#: (:func:`~.windows.window_homologs_for`: windows of 1 and of 64 averaged for a model that reads
#: them at their columns, 64 alone from 150 homologs on, 16 for one that places them whole).
DEFAULT_WINDOW_HOMOLOGS = AUTO_WINDOW_HOMOLOGS
#: Homologs more identical to the wild type than this stay out of the model's windows (the
#: profile keeps them): the homolog models were trained on search hits of at most 90 %
#: identity, and a near-copy first in the file hands the model the wild type at nearly every
#: site (Pab1 with 16 near-copies of 96-99 % before its 51 hits: 0.434 -> 0.194).
DEFAULT_MAX_IDENTITY = 0.9


@dataclass
class ScanContext:
    """The homologs of a wild type read from ``path`` (``read`` records in the file, ``left``
    of them naming another query, ``identical`` to the wild type left out) and its PSSM."""

    path: str
    homologs: list[Protein]
    pssm: Pssm
    read: int = 0
    identical: int = 0
    other_queries: int = 0
    beyond_max: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    #: the alignment, when the file is one (its profile is ``pssm``, which holds the weight
    #: of each of the homologs used)
    msa: MSA | None = None
    #: the number of the wild type's first residue, as it was read (``read_scan_context``)
    offset: int = 1

    @property
    def used(self) -> list[Protein]:
        """The homologs the PSSM used (aligned above chance), in file order."""
        return [h for h, i in zip(self.homologs, self.pssm.homologs, strict=True) if i["used"]]


def single_protein_model(model: ProteinLM) -> str | None:
    """What to say of scoring with homologs by a model whose checkpoint says it was trained on
    single proteins (``trained_with_homologs``, set by ``load_model``); None otherwise."""
    if getattr(model, "trained_with_homologs", None) is not False:
        return None
    return (
        f"this model was trained on single proteins, never after homologs: its {CONTEXT_COLUMN} "
        "reads them as it would any text before the protein; the shipped homolog model reads "
        "them"
    )


def read_scan_context(
    path: PathLike | MSA,
    alphabet: Alphabet,
    sequence: str,
    wild_type_id: str | None,
    max_homologs: int | None = None,
    *,
    min_coverage: float = FRAGMENT_COVERAGE,
    seed: int = 0,
    offset: int = 1,
) -> ScanContext:
    """The homologs of the wild type ``sequence`` (record ``wild_type_id``, None for a
    sequence given as text) in ``path`` and its profile from them.

    An alignment (a3m, a2m, Stockholm, aligned FASTA: :func:`~protein_performer.data.msa.
    read_msa`) gives its homologs covering at least ``min_coverage`` of the query's columns
    (the first ``max_homologs``; None: all) and their weighted profile
    (:func:`~protein_performer.analysis.dms.profile.alignment_profile`; ``seed`` draws the rows
    an alignment too deep to weigh exactly is weighed against). Plain FASTA hits give
    the first ``max_homologs`` (None: :data:`UNALIGNED_MAX_HOMOLOGS`), each aligned locally for
    the PSSM. One-line :class:`DataError` for an empty file, a query that is not the wild
    type, an alignment of its query alone, homologs of other queries only, or none aligning
    above chance. ``path`` may be an alignment :func:`~protein_performer.data.msa.read_msa`
    has read against this wild type (plain hits are read again from their file). ``offset``:
    the number of the wild type's first residue, as the scan numbers it (an alignment's
    ``NAME/START-END`` and what it says of residues count so)."""
    start = time.perf_counter()
    sequence = var.clean_sequence(sequence)  # as the profile reads it: any case, line breaks
    max_homologs = check_int("max_homologs", max_homologs, 1, optional=True)
    min_coverage = check_fraction("min_coverage", min_coverage)  # type: ignore[assignment]
    if not isinstance(path, (str, os.PathLike, MSA)):
        raise TypeError(
            "context must be a path to the homologs (an alignment or FASTA hits), an MSA "
            f"(read_msa) or a ScanContext (read_scan_context); got {type(path).__name__}"
        )
    if isinstance(path, MSA):
        msa, path = _read_against(path, sequence), path.path
    else:
        msa = read_msa(path, sequence, offset=offset)
    if msa.aligned:
        out = _aligned_context(path, msa, alphabet, sequence, max_homologs, min_coverage, seed)
        out.offset = offset
        out.info["read_seconds"] = round(time.perf_counter() - start, 2)
        return out
    if max_homologs is None:
        max_homologs = UNALIGNED_MAX_HOMOLOGS
    try:
        read = read_proteins(path, alphabet, invalid="replace", strip_gaps=True)
    except DataError as e:  # "empty file": say which input it is (score has no invalid=)
        raise DataError(
            f"{e.problem.replace(f' ({EMPTY_HINT})', '')} (context=: the homologs)",
            path=e.path,
            record=e.record,
            record_id=e.record_id,
        ) from None
    named = query_names(read, path)
    chosen = read
    if any(n is not None for n in named):
        queries = list(dict.fromkeys(n for n in named if n is not None))
        if wild_type_id is None and len(queries) > 1:
            raise DataError(
                f"the homologs name {len(queries)} queries ({', '.join(queries[:3])}"
                f"{', ...' if len(queries) > 3 else ''}): give the wild type as fasta= (and "
                "record=) so its id picks its own",
                path=path,
            )
        if wild_type_id is not None:
            names = record_names(wild_type_id)
            chosen = [h for h, n in zip(read, named, strict=True) if n in names]
            if not chosen:
                raise DataError(
                    f"no homolog names the wild type {wild_type_id} as its query (query= names "
                    f"{', '.join(queries[:3])}{', ...' if len(queries) > 3 else ''})",
                    path=path,
                )
    wild = alphabet.encode(sequence)
    kept = [h for h in chosen if not np.array_equal(h.residues, wild)]
    homologs = kept[:max_homologs] if max_homologs else kept
    if not homologs:
        raise DataError(
            f"no homolog of the wild type: the {len(chosen):,} record(s) for it are the wild "
            "type itself",
            path=path,
        )
    try:
        pssm = build_pssm(sequence, [alphabet.decode(h.residues) for h in homologs])
    except DataError as e:
        problem = e.problem.split(": no PSSM")[0].replace("the query", "the wild type")
        raise DataError(
            f"{problem}: these are not homologs of it (context= takes a FASTA of its "
            "homologs, e.g. search's hits.fasta)",
            path=path,
        ) from None
    return ScanContext(
        str(path),
        homologs,
        pssm,
        read=len(read),
        identical=len(chosen) - len(kept),
        other_queries=len(read) - len(chosen),
        beyond_max=len(kept) - len(homologs),
        info={"read_seconds": round(time.perf_counter() - start, 2)},
        offset=offset,
    )


def _read_against(msa: MSA, sequence: str) -> MSA:
    """``msa`` when its columns hold ``sequence``'s residues where its query has them (one-line
    DataError otherwise); plain hits as they are (read again from their file)."""
    if not msa.aligned:
        return msa
    wild = np.array([COLUMNS.find(c) for c in sequence.upper()], dtype=np.int64)
    inside = msa.positions < len(wild)
    here = np.full(len(msa.positions), -2)
    here[inside] = wild[msa.positions[inside]]
    query = msa.query_codes.astype(np.int64)
    wrong = np.nonzero((query != GAP) & (here != query))[0]
    if len(wrong):
        column = int(wrong[0])
        raise DataError(
            f"the alignment was read against another wild type: its column {column + 1} is "
            f"wild-type residue {int(msa.positions[column]) + 1}, "
            f"{COLUMNS[query[column]]} in the alignment's query but "
            f"{sequence[msa.positions[column]] if inside[column] else 'past the end'} here "
            "(read_msa(path, wild_type) with this wild type)",
            path=msa.path,
        )
    return msa


def _aligned_context(
    path: PathLike,
    msa: MSA,
    alphabet: Alphabet,
    sequence: str,
    max_homologs: int | None,
    min_coverage: float,
    seed: int,
) -> ScanContext:
    if not msa.sequences:
        raise no_homolog_error(msa)
    coverage = msa.coverage()
    keep = coverage >= min_coverage
    kept = np.nonzero(keep)[0]
    beyond = 0
    if max_homologs is not None and len(kept) > max_homologs:
        beyond = len(kept) - max_homologs
        keep[kept[max_homologs:]] = False
    if not keep.any():
        raise DataError(
            f"none of the {len(msa.sequences):,} homologs covers {min_coverage:.0%} of the wild "
            f"type's {len(msa.positions):,} aligned columns (context_min_coverage= lowers it)",
            path=path,
        )
    pssm = alignment_profile(sequence, msa, keep=keep, seed=seed)
    identity = msa.identity()
    index = np.nonzero(keep)[0]
    weights = np.asarray(pssm.weights)
    homologs, info = [], []
    for k, i in enumerate(index):
        seq = "".join(c if c in alphabet.residues else "X" for c in msa.sequences[i])
        homologs.append(Protein(msa.ids[i], "", alphabet.encode(seq)))
        info.append(
            {
                "used": True,
                "weight": round(float(weights[k]), 4),
                "identity": round(float(identity[i]), 4),
                "coverage": round(float(coverage[i]), 4),
            }
        )
    pssm.homologs = info
    notes = dict(msa.notes)
    notes["fragments_left_out"] = int((coverage < min_coverage).sum())
    notes["neff"] = pssm.params["neff"]
    if pssm.params["weight_sample"] < pssm.params["sequences"]:
        notes["weights_estimated_from"] = pssm.params["weight_sample"]
    return ScanContext(
        str(path),
        homologs,
        pssm,
        read=int(msa.notes["records_read"]),
        identical=int(msa.notes.get("copies_of_wild_type_left_out", 0)),
        beyond_max=beyond,
        info={"alignment": notes},
        msa=msa,
    )


def _target_width(n: int, max_length: int, style: str) -> tuple[int, int]:
    """``(width, ends)``: the residues of an ``n``-residue protein a ``max_length`` window
    scores (at most half the window) and its end tokens (``<cls>``/``<eos>``, or ``<sep>``)."""
    ends = 2 if style == "crop" else 1
    return min(n, max(1, max_length // 2 - ends)), ends


def _room(n: int, max_length: int, style: str) -> int:
    """Tokens a ``max_length`` window leaves for homologs beside an ``n``-residue protein."""
    width, ends = _target_width(n, max_length, style)
    return max_length - width - ends


def _context_jobs(
    ids: np.ndarray,
    homologs: Sequence[np.ndarray],
    sites: Sequence[int],
    alphabet: Alphabet,
    max_length: int,
    style: str,
) -> tuple[list[tuple[int, np.ndarray, int]], list[int]]:
    """``(site, tokens, position of the site in them)`` of each site's masked window, and
    how many homologs each holds."""
    n = len(ids)
    width, _ = _target_width(n, max_length, style)
    jobs, held = [], []
    for site in sorted(set(sites)):
        start = var.window_start(n, site, width)
        anchor = start / (n - width) if n > width else 0.0
        target = ids[start : start + width].astype(np.int64)
        target[site - start] = alphabet.mask_idx
        tokens, first, n_ctx = context_window(
            target, homologs, alphabet, max_length, style=style, anchor=anchor
        )
        jobs.append((site, tokens, first + site - start))
        held.append(n_ctx)
    return jobs, held


def context_marginals(
    model: ProteinLM,
    alphabet: Alphabet,
    ids: np.ndarray,
    homologs: Sequence[np.ndarray],
    sites: Sequence[int],
    *,
    max_length: int,
    style: str = "crop",
    toks_per_batch: int = 8192,
    progress: bool = False,
) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
    """``{site: (V,) log-probabilities}`` at each masked 0-based ``site`` of the residue ids
    ``ids`` with ``homologs`` (residue ids, in order) before them in windows of
    ``max_length`` tokens (see the module docstring), and what the windows held."""
    jobs, held = _context_jobs(ids, homologs, sites, alphabet, max_length, style)
    out = masked_log_probs(model, alphabet, jobs, toks_per_batch=toks_per_batch, progress=progress)
    info = window_info(held, max_length, None)
    return out, info


def context_columns(
    model: ProteinLM,
    alphabet: Alphabet,
    sequence: str,
    variants: Sequence[var.Variant],
    context: ScanContext,
    *,
    max_length: int | None,
    retrieval: float = DEFAULT_RETRIEVAL,
    **window: Any,
) -> dict[str, np.ndarray]:
    """``{"masked_marginal_context": …, "pssm": …}`` for ``variants`` of ``sequence`` (they
    must fit it; NaN for an indel); the model's column only for a masked LM: the
    masked-marginal log-ratios of :func:`context_log_probs` (``window`` its keyword
    arguments). With ``retrieval`` > 0 also ``"context_retrieval"``: ``(1 − retrieval)``
    times the model's score plus ``retrieval`` times the profile's ``log Q(mt) − log Q(wt)``
    (its frequencies, in nats): Tranception's inference-time retrieval (Notin et al. 2022,
    weight 0.6)."""
    retrieval = check_fraction("retrieval", retrieval)  # type: ignore[assignment]
    if (read_for := context.pssm.query) != var.clean_sequence(sequence):
        where = _first_difference(read_for, sequence, context.offset)
        raise DataError(
            f"the context was read for another wild type ({where}): read it with "
            "read_scan_context for this one",
            path=context.path,
        )
    columns: dict[str, np.ndarray] = {}
    if not getattr(model, "causal", False):
        sites = [s.index for v in variants if not isinstance(v, var.Indel) for s in v]
        logp = context_log_probs(
            model, alphabet, sequence, sites, context, max_length=max_length, **window
        )
        columns[CONTEXT_COLUMN] = _log_ratios(logp, variants, alphabet)
        if retrieval > 0:
            profile = profile_log_ratios(context.pssm, variants)
            columns[RETRIEVAL_COLUMN] = (1 - retrieval) * columns[CONTEXT_COLUMN] + (
                retrieval * profile
            )
            context.info["context_retrieval"] = retrieval
    columns[PSSM_COLUMN] = pssm_scores(context.pssm, list(variants))
    if context.msa is not None:  # the profile knows only the wild type outside its columns
        inside = set(context.msa.positions.tolist())
        context.info["mutants_outside_columns"] = sum(
            1
            for v in variants
            if not isinstance(v, var.Indel) and any(s.index not in inside for s in v)
        )
    return columns


def _first_difference(read_for: str, sequence: str, offset: int = 1) -> str:
    """Where the wild type a context was read for first differs from ``sequence``, in words
    (residues numbered from ``offset``)."""
    sequence = var.clean_sequence(sequence)
    at = next((i for i, (a, b) in enumerate(zip(read_for, sequence, strict=False)) if a != b), None)
    if at is None:
        return f"that one has {len(read_for):,} residues, this one {len(sequence):,}"
    return f"residue {at + offset}: {read_for[at]} there, {sequence[at]} here"


def context_log_probs(
    model: ProteinLM,
    alphabet: Alphabet,
    sequence: str,
    sites: Sequence[int],
    context: ScanContext,
    *,
    max_length: int | None,
    packed: bool = False,
    sampling: str = DEFAULT_SAMPLING,
    samples: int = 1,
    window_homologs: int | str | Sequence[int] | None = DEFAULT_WINDOW_HOMOLOGS,
    max_identity: float | None = DEFAULT_MAX_IDENTITY,
    seed: int = 0,
    crop: bool = True,
    toks_per_batch: int = 8192,
    progress: bool = False,
) -> dict[int, np.ndarray]:
    """``{site: (V,) log-probabilities}`` of a masked LM at each of ``sites`` (0-based
    positions of ``sequence``) masked alone after its homologs: the mean over ``samples``
    windows of ``max_length`` tokens, each filled with the homologs
    :func:`~protein_performer.data.msa.homolog_order` draws for ``sampling`` (seeded by
    ``[seed, sample]``) among those at most ``max_identity`` identical to the wild type (None:
    all; all too when none is), at most ``window_homologs`` of them (None: as many as fit; a
    list: one kind of window for each, all averaged; ``"auto"``:
    :func:`~.windows.window_homologs_for` the model), those that fit placed in file order (a
    search's best first: :func:`~protein_performer.data.context_windows.in_rank_order`). With ``crop``, where that
    window holds fewer than ``window_homologs`` of them whole, each site is scored on the
    residues about it after the homologs' residues in those columns (:mod:`.windows`). The
    windows' contents go to ``context.info``. A window with no room for a homolog beside the
    protein is a :class:`ConfigError` naming the least that has one."""
    samples = check_int("samples", samples, 1)  # type: ignore[assignment]
    check_choice("sampling", sampling, SAMPLINGS)
    max_identity = check_fraction("max_identity", max_identity, allow_none=True)
    max_length = check_int("max_length", max_length, 1, optional=True)
    columns = reads_columns(model)
    window_homologs_for(columns, window_homologs)  # a bad value refused before any work
    ids = alphabet.encode(sequence)
    bad = [s for s in sites if not 0 <= s < len(ids)]
    if bad:
        raise ValueError(f"site {bad[0]} is outside the protein (0-{len(ids) - 1})")
    used, weights, matrix, near = _window_homologs(context, max_identity)
    caps = window_homologs_for(columns, window_homologs, len(used))  # auto: by the depth
    length = max_length or DEFAULT_CONTEXT_TOKENS
    style = "concat" if packed else "crop"
    room = _checked_room(len(ids), length, style, used)
    if columns:
        _check_columns_use(matrix is not None, packed, crop, None not in caps)
    # an alignment's rows hold its columns: placed on the protein once, when a window first crops
    at_wild_type = None
    asked = samples
    if sampling == "first":  # the same homologs in every window: one is enough
        samples = 1
    kinds: dict[int | None, int | None] = {}
    for cap in caps:  # windows of more homologs than there are repeat the window of all of them
        kinds.setdefault(None if cap is None else min(cap, max(len(used), 1)), cap)
    caps = tuple(kinds.values())
    runs, infos = [], []
    for cap in caps:
        cut = _window_crop(
            len(ids), length, style, cap, len(used), crop and matrix is not None, columns
        )
        if cut is not None and at_wild_type is None:
            at_wild_type = _on_wild_type(matrix, context, len(ids))  # type: ignore[arg-type]
        held = []
        for sample in range(samples):
            logp, info = _sample_log_probs(
                model, alphabet, ids, sites, used, weights, matrix,
                None if cut is None else at_wild_type, sampling=sampling, seed=seed,
                sample=sample, limit=_window_limit(used, length, cap), room=room, length=length,
                style=style, cut=cut, window_homologs=cap, toks_per_batch=toks_per_batch,
                progress=progress, columns=columns,
            )  # fmt: skip
            runs.append(logp)
            held.append(info["mean_homologs_in_window"])
        infos.append(info | {"mean_homologs_in_window": float(np.mean(held))})
    merged: dict[str, Any] = {}
    for info in infos:  # what every window shares (tokens, sites)
        merged.update(info)
    if len(caps) > 1:  # what each kind of window held, in the order of the caps
        merged.update({k: [i.get(k) for i in infos] for k in _PER_WINDOW})
    for key in _PER_WINDOW:  # none left from an earlier call
        context.info.pop(key, None)
    context.info.update(
        merged,
        context_sampling=sampling,
        context_samples=samples,
        context_samples_asked=asked,
        context_window_homologs=caps[0] if len(caps) == 1 else list(caps),
        context_max_identity=max_identity,
        homologs_over_max_identity=near,
        seed=seed,
    )
    return {site: np.mean([r[site] for r in runs], axis=0) for site in runs[0]}


def _check_columns_use(aligned: bool, packed: bool, crop: bool, counted: bool) -> None:
    """A one-line :class:`ConfigError` naming what a model that reads homologs at their columns
    lacks: the homologs aligned, the column crop (not packed), a number of them a window."""
    missing = [
        why
        for ok, why in (
            (aligned, "the homologs aligned (an alignment, or FASTA hits aligned for the profile)"),
            (crop and not packed, "the column crop (context_crop=true, not packed)"),
            (counted, "a number of them a window (context_window_homologs=auto or N, not null)"),
        )
        if not ok
    ]
    if missing:
        raise ConfigError(
            "this model reads homologs at the columns they align to: it needs "
            + "; ".join(missing)
            + " (checkpoint=homologs-msa or homologs-deep place them whole)"
        )


#: What :func:`context_log_probs` reports for each kind of window it averages.
_PER_WINDOW = ("context_crop", "mean_homologs_in_window", "sites_scored_whole")


def _window_limit(used: Sequence[Protein], length: int, cap: int | None) -> int:
    """The most homologs a window of ``length`` tokens can take (at most ``cap``)."""
    shortest = min((len(h.residues) for h in used), default=1)
    return min(len(used), length // (shortest + 1) + 1, cap or len(used))


def _window_crop(
    n: int, length: int, style: str, cap: int | None, available: int, crop: bool, columns: bool
) -> int | None:
    """The residues about each site a window of at most ``cap`` homologs is read on (None:
    the whole protein): :func:`~.windows.column_crop` for a model that reads homologs at their
    columns, else :func:`~.windows.crop_width` where ``crop`` asks for it."""
    _, ends = _target_width(n, length, style)  # <cls>/<eos>, or one <sep>
    if columns:  # read at their columns: every window holds the homologs' columns about a site
        return column_crop(n, length, cap, available, ends)  # type: ignore[arg-type]
    return crop_width(n, length, cap, ends) if crop else None


#: The crop draws at most this many homologs per window it fills (each site takes the first of
#: them with residues about it): a greedy diverse draw over a deep alignment is O(N) a pick.
CROP_DRAWS_PER_WINDOW = 16


def _sample_log_probs(
    model: ProteinLM,
    alphabet: Alphabet,
    ids: np.ndarray,
    sites: Sequence[int],
    used: Sequence[Protein],
    weights: np.ndarray | None,
    matrix: np.ndarray | None,
    at_wild_type: np.ndarray | None,
    *,
    sampling: str,
    seed: int,
    sample: int,
    limit: int,
    room: int,
    length: int,
    style: str,
    cut: int | None,
    window_homologs: int | None,
    toks_per_batch: int,
    progress: bool,
    columns: bool = False,
) -> tuple[dict[int, np.ndarray], dict[str, Any]]:
    """One sample's ``{site: log-probabilities}`` and what its windows held: the whole
    protein after the homologs drawn (placed best first), or, where those windows hold fewer
    than ``window_homologs`` of them whole (and fewer than all), the column crop of width
    ``cut``; a site whose crop finds no homolog with residues about it keeps the whole-protein
    window. ``columns``: every site on its crop, homologs at their columns' positions."""
    order = homolog_order(
        sampling, weights=weights, matrix=matrix, seed=seed, sample=sample, limit=limit
    )
    # the draw picks the homologs; they sit best first, as the model was trained
    order = in_rank_order(order, [len(h.residues) for h in used], room)
    whole = [used[i].residues for i in order]
    fitted = fit_members(whole, room)  # the whole ones, then one cut to what is left
    entire = sum(len(m) == len(w) for m, w in zip(fitted, whole, strict=False))
    if cut is None or (not columns and entire >= min(window_homologs or 0, len(used))):
        return context_marginals(
            model, alphabet, ids, whole, sites, max_length=length, style=style,
            toks_per_batch=toks_per_batch, progress=progress,
        )  # fmt: skip
    per = window_homologs or len(used)  # a crop is cut for a number of homologs: never None here
    draws = min(len(used), CROP_DRAWS_PER_WINDOW * per)
    drawn = homolog_order(
        sampling, weights=weights, matrix=matrix, seed=seed, sample=sample, limit=draws
    )
    jobs, counts = column_jobs(
        ids, [(int(i), at_wild_type[i]) for i in drawn], sites, alphabet, length,
        width=cut, per_window=per, style=style,
        positions=columns,
    )  # fmt: skip
    # no homolog covers the region (an alignment of part of the protein): the whole protein
    empty = [] if columns else [j for j, c in enumerate(counts) if c == 0]
    if empty:
        back, back_held = _context_jobs(
            ids, whole, [jobs[j][0] for j in empty], alphabet, length, style
        )
        for j, job, h in zip(empty, back, back_held, strict=True):
            jobs[j], counts[j] = job, h
    logp = masked_log_probs(model, alphabet, jobs, toks_per_batch=toks_per_batch, progress=progress)
    return logp, window_info(counts, length, cut) | {"sites_scored_whole": len(empty)}


def _checked_room(n: int, length: int, style: str, used: Sequence[Protein]) -> int:
    """The tokens a ``length`` window leaves for homologs beside an ``n``-residue protein; a
    :class:`ConfigError` naming the least window that holds one when it leaves none."""
    room = _room(n, length, style)
    # the first homolog of a window goes in whole or cut to MIN_CONTEXT_RESIDUES (and its
    # <sep>), or none does: room for the longest such start leaves no window empty
    longest = max((len(h.residues) for h in used), default=1)
    need = min(longest, MIN_CONTEXT_RESIDUES) + 1
    if room < need:
        least = next(t for t in itertools.count(length + 1) if _room(n, t, style) >= need)
        width, _ = _target_width(n, length, style)
        raise ConfigError(
            f"a window of {length:,} tokens leaves no room for a homolog beside the "
            f"protein's {width:,} residues: raise context_tokens (at least {least:,})"
        )
    return room


def _log_ratios(
    logp: dict[int, np.ndarray], variants: Sequence[var.Variant], alphabet: Alphabet
) -> np.ndarray:
    """``(n,)``: each variant's ``Σ log p(mt) − log p(wt)`` over its sites (``logp``: each
    site's log-probabilities), NaN for an indel."""
    return np.array(
        [
            np.nan
            if isinstance(v, var.Indel)
            else sum(
                logp[s.index][alphabet.index(s.mt)] - logp[s.index][alphabet.index(s.wt)] for s in v
            )
            for v in variants
        ],
        dtype=np.float64,
    )


def _on_wild_type(matrix: np.ndarray, context: ScanContext, n: int) -> np.ndarray:
    """``(N, n)``: the homologs' residues ``matrix`` at each of the wild type's ``n`` positions
    (an alignment's rows hold its columns, placed by ``msa.positions``; FASTA hits' rows are
    already the wild type's positions); :data:`~protein_performer.data.msa.GAP` elsewhere."""
    if context.msa is None:
        return matrix
    rows = np.full((len(matrix), n), GAP, dtype=np.uint8)
    rows[:, context.msa.positions] = matrix
    return rows


def _window_homologs(
    context: ScanContext, max_identity: float | None
) -> tuple[list[Protein], np.ndarray | None, np.ndarray | None, int]:
    """The homologs the model's windows draw from (those the profile used, at most
    ``max_identity`` identical to the wild type; all when none is), their weights and matrix
    rows, and how many were over ``max_identity``."""
    used = context.used
    weights, matrix = context.pssm.weights, context.pssm.matrix
    if max_identity is None:
        return used, weights, matrix, 0
    identity = np.array([h.get("identity", 0.0) for h in context.pssm.homologs if h["used"]])
    keep = np.flatnonzero(identity <= max_identity)
    near = len(used) - len(keep)
    if not len(keep) or not near:  # none left: the near-copies rather than no homolog
        return used, weights, matrix, near
    return (
        [used[i] for i in keep],
        None if weights is None else np.asarray(weights)[keep],
        None if matrix is None else np.asarray(matrix)[keep],
        near,
    )


def profile_log_ratios(pssm: Pssm, variants: Sequence[var.Variant]) -> np.ndarray:
    """``(n,)``: ``Σ_sites log Q(mt) − log Q(wt)`` in nats from the profile's frequencies
    (pseudocounts included), NaN for an indel: the retrieval half of Tranception's score."""
    log_q = np.log(pssm.frequencies)
    index = {aa: i for i, aa in enumerate(COLUMNS)}
    return np.array(
        [
            np.nan
            if isinstance(v, var.Indel)
            else sum(log_q[s.index, index[s.mt]] - log_q[s.index, index[s.wt]] for s in v)
            for v in variants
        ],
        dtype=np.float64,
    )
