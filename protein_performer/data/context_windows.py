"""Homolog-conditioned windows: context proteins placed before a target protein.

A context window is ``<cls> c_1 <sep> c_2 <sep> … c_k <sep> target <eos>`` (``style="crop"``,
the layout of one-protein training) or ``c_1 <sep> … c_k <sep> target <sep>`` (``style="concat"``,
the layout of concatenated windows): the target comes last, so a causal model sees its context
too. The target is masked exactly as it would be on
its own (``<cls> target <eos>``, same generator), so its ``<mask>`` perplexity with and without
context is a paired comparison over the very same positions.

Context members are taken in the order given while they fit; the first one that does not fit
is cut to the remaining budget (where: ``anchor``) when at least ``min_context`` residues
remain, and the rest are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from protein_performer.data.alphabet import Alphabet
from protein_performer.data.config import CONTEXT_ORDERS, FILL_PLACES, MODES
from protein_performer.errors import ConfigError

#: a context member cut shorter than this is left out rather than kept as a stub
MIN_CONTEXT_RESIDUES = 16


STYLES = MODES  # the window layouts: crop rows or concat windows


def _ends(alphabet: Alphabet, style: str) -> tuple[list[int], list[int]]:
    if style == "crop":
        return [alphabet.cls_idx], [alphabet.eos_idx]
    if style == "concat":
        return [], [alphabet.sep_idx]
    raise ConfigError(f"style must be one of {', '.join(STYLES)}; got {style!r}")


def single_window(residues: np.ndarray, alphabet: Alphabet, style: str = "crop") -> np.ndarray:
    """``<cls> residues <eos>`` (``crop``) or ``residues <sep>`` (``concat``) as int64."""
    head, tail = _ends(alphabet, style)
    return np.concatenate(
        [np.array(head, dtype=np.int64), np.asarray(residues, dtype=np.int64), np.array(tail)]
    ).astype(np.int64)


def fit_members(
    members: Iterable[np.ndarray],
    budget: int,
    *,
    min_context: int = MIN_CONTEXT_RESIDUES,
    anchor: float = 0.0,
) -> list[np.ndarray]:
    """The members (residue arrays, in order) that fit ``budget`` tokens, one ``<sep>`` after
    each counted: whole while they fit, then the first that does not fit cut to what is left
    (at ``anchor``, see :func:`context_window`) if at least ``min_context`` residues remain;
    the rest are left out. Returns int64 arrays."""
    kept: list[np.ndarray] = []
    for member in members:
        if budget < min(len(member), min_context) + 1:
            break
        take = min(len(member), budget - 1)
        first = round(min(max(anchor, 0.0), 1.0) * (len(member) - take))
        kept.append(np.asarray(member[first : first + take], dtype=np.int64))
        budget -= take + 1
        if take < len(member):
            break
    return kept


def in_rank_order(
    order: Sequence[int],
    lengths: Sequence[int],
    budget: int,
    *,
    min_context: int = MIN_CONTEXT_RESIDUES,
) -> np.ndarray:
    """``order`` (indices into a ranked list of homologs, e.g. a weighted draw) with the ones
    :func:`fit_members` would take whole into ``budget`` tokens placed by rank (ascending index:
    a search's best hit first, as homolog models are trained), then the one it would cut, then
    the rest as drawn: the window holds the same homologs, cut the same way. ``lengths``: each
    homolog's residues (``lengths[i]`` for homolog ``i``). The draw decides which homologs go
    in; the rank, where."""
    order = np.asarray(order, dtype=np.int64)
    members = (np.zeros(lengths[i], dtype=np.int8) for i in order)
    kept = fit_members(members, budget, min_context=min_context)
    whole = sum(len(k) == lengths[i] for k, i in zip(kept, order, strict=False))
    return np.concatenate([np.sort(order[:whole]), order[whole:]])


def context_window(
    target: np.ndarray,
    context: Iterable[np.ndarray],
    alphabet: Alphabet,
    max_length: int,
    *,
    min_context: int = MIN_CONTEXT_RESIDUES,
    style: str = "crop",
    anchor: float = 0.0,
) -> tuple[np.ndarray, int, int]:
    """Tokens of ``<cls> c_1 <sep> … c_k <sep> target <eos>`` (or the ``concat`` style) and how
    much context they hold.

    Args:
        target: ``(n,)`` token ids of the target (residues, possibly already masked); it
            must fit on its own: ``n + 2 <= max_length``.
        context: token ids of context proteins (residues), in the order to place them (any
            iterable: it is read only until the window is full).
        max_length: window length bound in tokens.
        min_context: shortest cut of a context member worth keeping.
        anchor: where a member that must be cut is cut, as a fraction of what is left out: 0
            keeps its N-terminal part; a target cropped from a longer protein passes its own
            relative start, so the kept part of a homolog covers about the same region.
    Returns:
        ``(tokens, start, n_context)``: int64 tokens, the index of the target's first residue
        in them, and how many context members (whole or cut) they hold.
    """
    head, tail = _ends(alphabet, style)
    n = len(target)
    if n + len(head) + len(tail) > max_length:
        raise ConfigError(f"target of {n} residues does not fit a window of {max_length} tokens")
    members = fit_members(
        context, max_length - n - len(head) - len(tail), min_context=min_context, anchor=anchor
    )
    sep = np.array([alphabet.sep_idx], dtype=np.int64)
    parts = [piece for m in members for piece in (m, sep)]
    start = len(head) + sum(len(p) for p in parts)
    tokens = np.concatenate(
        [
            np.array(head, dtype=np.int64),
            *parts,
            np.asarray(target, dtype=np.int64),
            np.array(tail, dtype=np.int64),
        ]
    )
    return tokens, start, len(parts) // 2


def column_width(max_length: int, homologs: int, ends: int = 2) -> int:
    """The widest crop of a protein that leaves room in ``max_length`` tokens for ``homologs``
    (at least 1) cut to the same columns, each with its ``<sep>``, and ``ends`` end tokens."""
    per = max(1, int(homologs))
    return max(1, (max_length - ends - per) // (per + 1))


def column_window(
    target: np.ndarray,
    context: Sequence[tuple[np.ndarray, np.ndarray]],
    alphabet: Alphabet,
    max_length: int,
    *,
    first: int = 0,
    min_context: int = MIN_CONTEXT_RESIDUES,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """:func:`context_window` (``crop`` style) with each token's position in the protein:
    ``context`` holds ``(residues, columns)`` pairs, ``columns[i]`` the 0-based residue of the
    target that residue ``i`` of the homolog is aligned to (counted from the target's first
    residue), so that the residues of one column share a position, as a model trained with
    ``context_positions="columns"`` reads them. ``first``: the protein's number of the target's
    first residue (a crop's start). ``<cls>`` takes ``first - 1``, each ``<sep>`` and ``<eos>``
    ``first + n``.

    Returns ``(tokens, positions, start, n_context)``: int64 tokens, float64 positions of the
    same length, the index of the target's first residue in them, and how many context
    members (whole or cut) they hold."""
    n = len(target)
    for residues, columns in context:
        if len(residues) != len(columns):
            raise ValueError(
                f"a context member has {len(residues)} residues but {len(columns)} columns"
            )
    tokens, start, kept = context_window(
        target, [r for r, _ in context], alphabet, max_length, min_context=min_context
    )
    positions = np.empty(len(tokens), dtype=np.float64)
    positions[0] = first - 1
    at = 1
    for _, columns in context[:kept]:
        # its residues run to the next <sep>: a cut member keeps its first ones
        take = int(np.argmax(tokens[at:start] == alphabet.sep_idx))
        positions[at : at + take] = first + np.asarray(columns[:take], dtype=np.float64)
        positions[at + take] = first + n
        at += take + 1
    positions[start : start + n] = first + np.arange(n)
    positions[start + n :] = first + n
    return tokens, positions, start, kept


__all__ = [
    "CONTEXT_ORDERS",
    "FILL_PLACES",
    "MIN_CONTEXT_RESIDUES",
    "STYLES",
    "column_window",
    "context_window",
    "fit_members",
    "in_rank_order",
    "single_window",
]
