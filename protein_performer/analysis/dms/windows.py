"""The masked windows a scan is scored in with homologs: scoring them in batches, and the
column crop of a protein too long for a window's homologs to sit beside it whole.

A window holds ``<cls> h_1 <sep> … h_k <sep> protein <eos>``. A protein of ``n`` residues
leaves room for few whole homologs of its length (a 900-residue protein: 4 in 4,096 tokens),
while the homolog models read best after 12 to 16. Where the homologs are aligned to the
protein (an alignment's columns, or FASTA hits aligned for the profile), each site can instead
be scored on the ``w`` residues about it, after each homolog's residues in those same columns
(gaps, insertions and letters other than the 20 left out): ``k`` homologs then fit. On 30
held-out proteins of 600 to 1,664 residues with 16 search hits each (`homologs-msa`, 4,096
tokens, 360 sites), perplexity at the masked site 7.63 with the crop built from hits aligned
blind to the site (7.29 aligned with it known, as a user's alignment is) against 8.82 with the
whole protein (4.9 homologs); on proteins of 250-580 residues 9.00 blind against 8.96 whole:
no gain there but the alignment's (``benchmarks/long_windows.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, Alphabet
from protein_performer.data.batching import pad_batch, pad_positions
from protein_performer.data.context_windows import (
    MIN_CONTEXT_RESIDUES,
    column_width,
    column_window,
    context_window,
)
from protein_performer.data.msa import GAP
from protein_performer.errors import ConfigError
from protein_performer.model.performer import ProteinLM, evaluating
from protein_performer.utils.checks import check_counts
from protein_performer.utils.progress import progress as progress_bar

#: The fewest residues of the protein a cropped window keeps about its site: a window with
#: less room is not cropped (4,096 tokens and 16 homologs crop to 239; 1,024 or 2,048 tokens
#: with 16 keep the whole-protein windows they were measured with).
MIN_CROP_RESIDUES = 128

#: ``(site, tokens, position of the masked site in them)``: one masked window; a window for a
#: model that reads homologs at their columns adds each token's position (``position_ids``).
Job = tuple[int, np.ndarray, int] | tuple[int, np.ndarray, int, np.ndarray]


def crop_width(n: int, max_length: int, per_window: int | None, ends: int = 2) -> int | None:
    """The residues about each site an ``n``-residue protein is scored on so that
    ``per_window`` homologs cut to the same columns fit beside them in ``max_length`` tokens
    (each with its ``<sep>``; ``ends`` tokens for ``<cls>``/``<eos>``). None, and the protein
    scored whole: when it is no longer than that, when that is under
    :data:`MIN_CROP_RESIDUES` (a window too short to crop), or when ``per_window`` is None (as
    many whole homologs as fit)."""
    if per_window is None:
        return None
    width = (max_length - ends - per_window) // (per_window + 1)
    return width if MIN_CROP_RESIDUES <= width < n else None


#: ``context_window_homologs`` asks for the model's own default: :func:`window_homologs_for`.
AUTO_WINDOW_HOMOLOGS = "auto"
#: The windows of a model that reads homologs at their columns, by default: one after its best
#: homolog alone (the widest crop: most proteins whole) and one after up to 64 (a narrow crop),
#: each site's log-probabilities averaged. On 40 held-out proteins with 65 to 515 search hits
#: (12 sites each, 4,096 tokens, ``homologs-columns-deep``) the masked site reads at perplexity
#: 7.94 after the first homolog alone, 7.06 after 64 (crop 62), and averaged: 6.36 with 1 and
#: 64, 6.43 with 2 and 64, 6.59 with 4, 6.70 with 8 (16 and 64: 6.98; the next 64 after the
#: first 64: 9.08); the weighted profile of all the hits 7.79. On 60 with 16-48 hits: 6.78
#: after 64, 6.32 with 1 and 64, profile 6.90. The crop narrows only for homologs there are
#: (:func:`column_crop`).
COLUMNS_WINDOW_HOMOLOGS = (1, 64)
#: From this many homologs on, a columns model's default is one window of up to 64 alone: the
#: window of the first homolog stops helping with depth. Per protein of the 40 above (log
#: perplexity, 1 and 64 against 64 alone): -0.20 on average under 150 homologs (better in 19 of
#: 22), +0.02 from 150 to 515 (better in 7 of 18; +0.04 from 300), and the pilin's own alignment
#: of 5,383 rows reads 2.07 with both windows against 1.88 with 64 alone.
DEEP_ALIGNMENT_HOMOLOGS = 150
#: A columns model's default for an alignment of :data:`DEEP_ALIGNMENT_HOMOLOGS` or more.
DEEP_WINDOW_HOMOLOGS = (64,)
#: The default for a model that places homologs whole (see ``homologs.DEFAULT_WINDOW_HOMOLOGS``).
WHOLE_WINDOW_HOMOLOGS = (16,)


def window_homologs_for(
    columns: bool, value: Any, available: int | None = None
) -> tuple[int | None, ...]:
    """The windows each site is scored in, by the homologs each holds at most (their
    log-probabilities averaged): ``value`` (a whole number, or a list of distinct ones), or for
    ``"auto"``, when the model reads homologs at their columns (``columns``),
    :data:`COLUMNS_WINDOW_HOMOLOGS`, or :data:`DEEP_WINDOW_HOMOLOGS` where ``available``
    homologs are :data:`DEEP_ALIGNMENT_HOMOLOGS` or more, and :data:`WHOLE_WINDOW_HOMOLOGS`
    otherwise; ``(None,)`` (as many as fit) for None. A :class:`ConfigError` for anything else."""
    counts = check_counts("context_window_homologs", value, (AUTO_WINDOW_HOMOLOGS,))
    if counts is not None:
        return counts
    if value is None:
        return (None,)
    if not columns:
        return WHOLE_WINDOW_HOMOLOGS
    deep = available is not None and available >= DEEP_ALIGNMENT_HOMOLOGS
    return DEEP_WINDOW_HOMOLOGS if deep else COLUMNS_WINDOW_HOMOLOGS


def column_crop(n: int, max_length: int, per_window: int, available: int, ends: int = 2) -> int:
    """The residues about each site an ``n``-residue protein is read on by a model that reads
    homologs at their columns: the widest crop that leaves room for ``per_window`` homologs
    cut to it, or for the ``available`` ones when there are fewer (each with its ``<sep>``,
    ``ends`` tokens for ``<cls>``/``<eos>``); the whole protein when that is no longer."""
    return min(n, column_width(max_length, min(per_window, available), ends))


def column_jobs(
    ids: np.ndarray,
    rows: Sequence[tuple[int, np.ndarray]],
    sites: Sequence[int],
    alphabet: Alphabet,
    max_length: int,
    *,
    width: int,
    per_window: int,
    style: str = "crop",
    positions: bool = False,
) -> tuple[list[Job], list[int]]:
    """Each site's masked window on the ``width`` residues of ``ids`` about it (clamped at
    the ends), after the first ``per_window`` homologs of ``rows`` — ``(rank, (L,) codes at
    the protein's positions)`` in the order they are drawn; :data:`~protein_performer.data.msa.GAP`
    where a homolog has no residue — with at least ``MIN_CONTEXT_RESIDUES`` residues in those
    columns (or all of them, when fewer), each cut to its residues there and placed by rank
    (best first, as the homolog models were trained); and how many homologs each holds. With
    ``positions`` each job also gives each token's position, the homologs' residues at their
    columns' (:func:`~protein_performer.data.context_windows.column_window`), for a model with
    ``context_positions="columns"``."""
    if positions and style != "crop":
        raise ConfigError("a model that reads homologs at their columns scores crop windows")
    n = len(ids)
    token = np.array([alphabet.index(a) for a in STANDARD_AMINO_ACIDS] + [-1], dtype=np.int64)
    jobs: list[Job] = []
    held: list[int] = []
    for site in sorted(set(sites)):
        start = min(max(site - width // 2, 0), n - width)
        target = ids[start : start + width].astype(np.int64)
        target[site - start] = alphabet.mask_idx
        chosen = []
        for rank, codes in rows:
            part = codes[start : start + width]
            columns = np.flatnonzero(part != GAP)
            if len(columns) >= min(MIN_CONTEXT_RESIDUES, width):
                chosen.append((rank, token[part[columns]], columns))
                if len(chosen) == per_window:
                    break
        chosen.sort(key=lambda c: c[0])
        if positions:
            members = [(m, c) for _, m, c in chosen]
            tokens, place, first, n_ctx = column_window(
                target, members, alphabet, max_length, first=start
            )
            jobs.append((site, tokens, first + site - start, place))
        else:
            members = [m for _, m, _ in chosen]
            tokens, first, n_ctx = context_window(
                target, members, alphabet, max_length, style=style
            )
            jobs.append((site, tokens, first + site - start))
        held.append(n_ctx)
    return jobs, held


#: Window lengths are padded up to a multiple of this (see :func:`masked_log_probs`).
SHAPE_MULTIPLE = 64


@torch.no_grad()
def masked_log_probs(
    model: ProteinLM,
    alphabet: Alphabet,
    jobs: Sequence[Job],
    *,
    toks_per_batch: int = 8192,
    progress: bool = False,
) -> dict[int, np.ndarray]:
    """``{site: (V,) log-probabilities}`` at the masked position of each window of ``jobs``,
    in batches of about ``toks_per_batch`` tokens (windows of like length together)."""
    device = next(model.parameters()).device
    cap = None if getattr(model, "rotary", None) is not None else model.config.max_len
    order = sorted(range(len(jobs)), key=lambda j: len(jobs[j][1]))
    out: dict[int, np.ndarray] = {}
    bar = progress_bar(total=len(jobs), desc="scoring with homologs", unit="site", enabled=progress)
    i = 0
    with evaluating(model):
        while i < len(order):
            rows = max(1, toks_per_batch // len(jobs[order[i]][1]))
            group = [jobs[j] for j in order[i : i + rows]]
            # lengths rounded to SHAPE_MULTIPLE: each new shape costs oneDNN's caches ~13 MB
            # that are never given back (a scan's cropped windows have hundreds of lengths)
            tokens, pad = pad_batch([g[1] for g in group], alphabet.pad_idx, SHAPE_MULTIPLE, cap)
            at = torch.tensor([[g[2]] for g in group], device=device)
            place = None
            if len(group[0]) > 3:  # each token's position: homologs at their columns
                place = pad_positions([g[3] for g in group], tokens.shape[1]).to(device)
            # only the masked site of each row is read: the last block computes that row only
            extra = {} if place is None else {"position_ids": place}
            logits = model.logits_at(tokens.to(device), pad.to(device), at, **extra)[:, 0]
            logp = torch.log_softmax(logits.float(), -1).cpu()
            for row, (site, *_) in enumerate(group):
                out[site] = logp[row].numpy()
            bar.update(len(group))
            i += len(group)
    bar.close()
    return out


def window_info(held: Sequence[int], max_length: int, crop: int | None) -> dict[str, Any]:
    """What a scan's windows held: tokens, mean homologs, sites, the crop (None: whole)."""
    return {
        "context_window_tokens": max_length,
        "mean_homologs_in_window": float(np.mean(held)) if len(held) else 0.0,
        "sites": len(held),
        "context_crop": crop,
    }


__all__ = [
    "MIN_CROP_RESIDUES",
    "column_jobs",
    "crop_width",
    "masked_log_probs",
    "window_info",
]
