"""Homolog-conditioned evaluation: a protein's ``<mask>`` perplexity with homologs placed before
it in the window, next to the same positions scored without them.

Each target is masked once (generator keyed by ``(seed, index)``, as evaluation always is) and
scored twice: alone (``<cls> target <eos>``) and after its context
(``<cls> c_1 <sep> … <sep> target <eos>``, see :mod:`protein_performer.data.context_windows`),
so the two perplexities are over the very same ``<mask>`` positions. A target longer than half the
window is cropped to half (a seeded window, the same in both runs), so context has room.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from protein_performer.data.alphabet import Alphabet
from protein_performer.data.batching import pad_batch
from protein_performer.data.context_windows import (
    CONTEXT_ORDERS,
    FILL_PLACES,
    MIN_CONTEXT_RESIDUES,
    context_window,
    fit_members,
    single_window,
)
from protein_performer.data.datasets import TAG_CROP, TAG_FILL, TAG_MASK, TAG_ORDER, keyed_rng
from protein_performer.data.masking import mask_tokens
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError
from protein_performer.model.performer import ProteinLM, require_window_positions
from protein_performer.utils.progress import progress as progress_bar


@dataclass
class Target:
    """One protein to score: ``residues`` (token ids) and its context proteins (a sequence of
    token-id arrays, read only as far as the window needs)."""

    id: str
    residues: np.ndarray
    context: Sequence[np.ndarray]
    group: str | None = None  # its cluster: fill proteins are drawn from other groups
    record: int | None = None  # its index in the source it was drawn from (None: not from one)


@dataclass
class Fill:
    """Unrelated proteins that fill the rest of each context window (``records[i]`` token ids,
    ``groups[i]`` its cluster): the homologs then sit at a seeded random place among them, up
    to a whole window away from the target, as they would in a long packed window."""

    records: Sequence[np.ndarray]
    groups: Sequence[str]


class _Members(Sequence):
    """The records ``indices`` of ``source`` without ``exclude``, built on access (a cluster of
    n members costs O(n) per target, not n arrays each)."""

    def __init__(self, source: FlatSource, indices: list[int], exclude: int) -> None:
        self.source = source
        self.indices = [j for j in indices if j != exclude]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k):  # type: ignore[override]
        return np.asarray(self.source[self.indices[k]])


def record_order(source: FlatSource, how: str = "id") -> list[int]:
    """Indices of ``source``'s records in the order context evaluation walks them (see
    :data:`CONTEXT_ORDERS`): by id, records sharing an id by sequence (identical records
    are interchangeable), so no file order is left; without ids, the order given."""
    if how not in CONTEXT_ORDERS:
        raise ConfigError(f"context_order must be one of {', '.join(CONTEXT_ORDERS)}; got {how!r}")
    ids = source.ids
    if how == "given" or ids is None:
        return list(range(len(source)))
    order = sorted(range(len(source)), key=ids.__getitem__)
    start = 0
    for end in range(1, len(order) + 1):
        if end == len(order) or ids[order[end]] != ids[order[start]]:
            if end - start > 1:  # a shared id: by residues
                order[start:end] = sorted(
                    order[start:end], key=lambda i: np.asarray(source[i]).tobytes()
                )
            start = end
    return order


def cluster_targets(
    source: FlatSource,
    cluster_of: Mapping[str, str],
    *,
    min_members: int = 2,
    order: Sequence[int] | None = None,
) -> list[Target]:
    """Every record of ``source`` whose cluster has at least ``min_members`` members in
    ``source`` (itself included), with the cluster's other members as context; targets and
    members in ``order`` (record indices, :func:`record_order`; None: source order). Records
    missing from ``cluster_of`` are their own cluster."""
    if source.ids is None:
        raise ValueError("cluster context needs record ids")
    walk = range(len(source)) if order is None else order
    groups: dict[str, list[int]] = {}
    for i in walk:
        groups.setdefault(cluster_of.get(source.ids[i], f"\0{source.ids[i]}"), []).append(i)
    targets = []
    for i in walk:
        rid = source.ids[i]
        key = cluster_of.get(rid, f"\0{rid}")
        members = groups[key]
        if len(members) >= min_members:
            context = _Members(source, members, i)
            targets.append(Target(rid, np.asarray(source[i]), context, key, record=i))
    return targets


def cluster_fill(
    source: FlatSource, cluster_of: Mapping[str, str], order: Sequence[int] | None = None
) -> Fill:
    """Every record of ``source`` as a fill protein, grouped by ``cluster_of`` (a record it
    does not list is its own cluster), in ``order`` (as for :func:`cluster_targets`), for
    :func:`context_perplexity`'s ``fill``."""
    if source.ids is None:
        raise ValueError("cluster fill needs record ids")
    if order is None:
        return Fill(source, [cluster_of.get(rid, f"\0{rid}") for rid in source.ids])
    ids = [source.ids[i] for i in order]
    return Fill(_Members(source, list(order), -1), [cluster_of.get(r, f"\0{r}") for r in ids])


def sample_targets(targets: list[Target], max_proteins: int | None, seed: int) -> list[Target]:
    """``evaluate``'s ``context_max_proteins``: a seeded sample of ``targets``, in their order
    (all of them when there are no more than ``max_proteins`` or it is None)."""
    if max_proteins is None or len(targets) <= max_proteins:
        return targets
    pick = keyed_rng(TAG_ORDER, seed, 1).choice(len(targets), max_proteins, replace=False)
    return [targets[i] for i in sorted(pick)]


def _draw_fill(
    fill: Fill, group: str | None, budget: int, rng: np.random.Generator
) -> tuple[list, bool]:
    """Fill proteins of groups other than ``group`` in a seeded random order (no record
    twice), whole while they fit and the last cut to what is left: at most ``budget`` tokens
    with one ``<sep>`` after each. Also says whether the pool ran out before the budget did."""
    chosen: list[int] = []
    total = 0
    for i in rng.permutation(len(fill.records)):
        if total >= budget:
            break
        if fill.groups[i] != group:
            chosen.append(int(i))
            total += len(fill.records[i]) + 1
    return fit_members((fill.records[i] for i in chosen), budget), total < budget


def fixed_targets(
    source: FlatSource, context: Sequence[np.ndarray], order: Sequence[int] | None = None
) -> list[Target]:
    """Every record of ``source`` (in ``order``, as for :func:`cluster_targets`) with the same
    ``context`` proteins (e.g. a FASTA of homologs)."""
    ids = source.ids or [str(i) for i in range(len(source))]
    walk = range(len(source)) if order is None else order
    return [Target(ids[i], np.asarray(source[i]), list(context), record=i) for i in walk]


def scoring_windows(
    targets: Sequence[Target],
    alphabet: Alphabet,
    *,
    max_length: int,
    style: str,
    mask_prob: float,
    seed: int,
    fill: Fill | None = None,
    fill_place: str = "random",
    shuffle: bool = True,
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[np.ndarray], dict]:
    """Masked single and context windows with their labels (``<mask>`` positions only).

    Each target's context goes in a seeded random order (``shuffle``: cluster members have
    none of their own) or in the order given (False: search hits best first, as ``score
    context=`` fills its windows).

    With ``fill`` the context windows are filled to ``max_length`` with unrelated proteins,
    the homologs at a seeded random place among them (``fill_place="random"``) or right
    before the target (``"adjacent"``), and ``info["fill_windows"]`` / ``info["fill_labels"]``
    hold the same windows without the homologs (the fill alone)."""
    if fill_place not in FILL_PLACES:
        raise ConfigError(f"fill_place must be one of {', '.join(FILL_PLACES)}; got {fill_place!r}")
    ends = 2 if style == "crop" else 1
    half = max(1, max_length // 2 - ends)
    single, single_y, ctx, ctx_y = [], [], [], []
    members = tokens = fill_tokens = short_fills = members_cut = targets_cut = 0
    target_residues = residues_scored = 0
    identical: list[bool] = []
    fill_x: list[np.ndarray] = []
    fill_y: list[np.ndarray] = []
    for index, t in enumerate(targets):
        res = t.residues
        anchor = 0.0
        target_residues += len(res)
        if len(res) > half:
            targets_cut += 1
            start = int(keyed_rng(TAG_CROP, seed, 0, index).integers(0, len(res) - half + 1))
            anchor = start / (len(res) - half)
            res = res[start : start + half]
        residues_scored += len(res)
        window = single_window(res, alphabet, style)
        x, y = mask_tokens(
            window, alphabet, keyed_rng(TAG_MASK, seed, 0, index), mask_prob=mask_prob
        )
        y = np.where(x == alphabet.mask_idx, y, -100)  # score the <mask> positions
        order = (
            keyed_rng(TAG_ORDER, seed, 0, index).permutation(len(t.context))
            if shuffle
            else np.arange(len(t.context))
        )
        head = 1 if style == "crop" else 0
        body = x[head : head + len(res)]
        homologs = fit_members(
            (t.context[k] for k in order),
            max_length - len(res) - ends,
            anchor=anchor,
        )
        n_ctx = len(homologs)
        if n_ctx and len(homologs[-1]) < len(t.context[order[n_ctx - 1]]):
            members_cut += 1  # the last one that went in was cut to the window's room
        members_in = homologs
        if fill is not None:
            budget = max_length - len(res) - ends - sum(len(h) + 1 for h in homologs)
            rng = keyed_rng(TAG_FILL, seed, 0, index)
            others, short = _draw_fill(fill, t.group, budget, rng)
            short_fills += short
            at = int(rng.integers(len(others) + 1)) if fill_place == "random" else len(others)
            members_in = [*others[:at], *homologs, *others[at:]]
            fill_tokens += sum(len(o) + 1 for o in others)
            fx, fstart, _ = context_window(body, others, alphabet, max_length, style=style)
            fy = np.full(len(fx), -100, dtype=np.int64)
            fy[fstart : fstart + len(res)] = y[head : head + len(res)]
            fill_x.append(fx)
            fill_y.append(fy)
        cx, start, _ = context_window(body, members_in, alphabet, max_length, style=style)
        cy = np.full(len(cx), -100, dtype=np.int64)
        cy[start : start + len(res)] = y[head : head + len(res)]
        single.append(x)
        single_y.append(y)
        ctx.append(cx)
        ctx_y.append(cy)
        members += n_ctx
        tokens += sum(len(h) + 1 for h in homologs)
        identical.append(any(np.array_equal(t.context[k], t.residues) for k in order[:n_ctx]))
    if targets and not members:  # every "with context" window would be the protein alone
        raise ConfigError(
            f"max_length={max_length} leaves no room for a homolog before any protein (each "
            f"takes up to half the window, a homolog at least {MIN_CONTEXT_RESIDUES} residues "
            "or all of its own); raise max_length"
        )
    n = max(1, len(targets))
    info = {
        "mean_context_proteins": members / n,
        "mean_context_tokens": tokens / n,
        "context_proteins_cut": members_cut,
        # targets longer than half the window: a seeded half-window of each is scored
        "targets_cut": targets_cut,
        "target_residues_in_windows": residues_scored / max(1, target_residues),
        "targets_with_identical_context": int(sum(identical)),
        "identical": np.array(identical, dtype=bool),
    }
    if fill is not None:
        info |= {
            "mean_fill_tokens": fill_tokens / n,  # residues and their <sep>s
            "fill_place": fill_place,
            "short_fill_windows": short_fills,  # the pool ran out before max_length
            "fill_windows": fill_x,
            "fill_labels": fill_y,
        }
    return single, single_y, ctx, ctx_y, info


def _score(
    model: ProteinLM,
    inputs: list[np.ndarray],
    labels: list[np.ndarray],
    *,
    pad_idx: int,
    toks_per_batch: int,
    device: torch.device,
    uni_logp: torch.Tensor,
    desc: str = "scoring",
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-position ``(nll, correct, unigram nll)`` at labelled positions, in input order."""
    order = np.argsort([len(x) for x in inputs], kind="stable")
    results: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    bar = progress_bar(total=len(inputs), desc=desc, unit="protein", enabled=progress)
    i = 0
    while i < len(order):
        width = len(inputs[order[i]])
        j = i + 1
        while j < len(order) and (j - i + 1) * max(width, len(inputs[order[j]])) <= toks_per_batch:
            width = max(width, len(inputs[order[j]]))
            j += 1
        rows = order[i:j]
        ids, pad = pad_batch([inputs[r] for r in rows], pad_idx)
        y, _ = pad_batch([labels[r] for r in rows], -100)
        ids, pad, y = ids.to(device), pad.to(device), y.to(device)
        logp = torch.log_softmax(model(ids, pad)["logits"].float(), -1)
        for row, r in enumerate(rows):
            sel = y[row] != -100
            target = y[row][sel]
            lp = logp[row][sel]
            nll = -lp.gather(-1, target[:, None])[:, 0]
            correct = lp.argmax(-1) == target
            uni = -uni_logp[target]
            results[int(r)] = (nll.cpu().numpy(), correct.cpu().numpy(), uni.cpu().numpy())
        bar.update(len(rows))
        i = j
    bar.close()
    parts = [results[r] for r in range(len(inputs))]
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]


@torch.inference_mode()
def context_perplexity(
    model: ProteinLM,
    alphabet: Alphabet,
    targets: Sequence[Target],
    *,
    max_length: int,
    style: str = "crop",
    mask_prob: float = 0.15,
    seed: int = 0,
    toks_per_batch: int = 16384,
    device: torch.device | str = "cpu",
    unigram_log_probs: torch.Tensor | None = None,
    progress: bool = False,
    fill: Fill | None = None,
    fill_place: str = "random",
    shuffle: bool = True,
) -> dict[str, Any]:
    """Score ``targets`` with and without their context (the model in eval mode on ``device``;
    ``progress``: a bar, or a line every 30 s in a log, per pass; ``shuffle``: the context in
    a seeded order, or as given, see :func:`scoring_windows`).

    Returns ``{"proteins", "positions", "with_context": {"perplexity", "accuracy"},
    "without_context": {...}, "unigram_perplexity", "ratio", "mean_context_proteins",
    "mean_context_tokens", "context_proteins_cut", "targets_cut",
    "target_residues_in_windows", "targets_with_identical_context", "by_context"}``;
    ``targets_cut``: targets longer than half the window (a seeded half-window of each is
    scored; ``target_residues_in_windows`` is the share of the targets' residues scored);
    ``context_proteins_cut``: windows whose last context protein was cut to the room left
    (at the target's relative position; the ones after it left out); ``ratio`` is with /
    without; ``by_context`` holds the same paired numbers (``proteins`` to ``ratio``) for
    the targets with an identical sequence in their context (``identical``) and the others
    (``no_identical``).

    ``fill`` (see :class:`Fill`): every context window is filled to ``max_length`` with
    unrelated proteins, the homologs among them (``fill_place``: at a random place, or
    ``"adjacent"``, right before the target: the distance apart from the distractors;
    ``short_fill_windows`` counts windows the pool could not fill); the same windows without
    the homologs are scored too (``with_fill_only``, and ``ratio_vs_fill``: with context /
    fill only), since
    unrelated proteins before a target can change its perplexity by themselves.
    """
    require_window_positions(model, "evaluate context=")
    device = torch.device(device)
    single, single_y, ctx, ctx_y, info = scoring_windows(
        targets,
        alphabet,
        max_length=max_length,
        style=style,
        mask_prob=mask_prob,
        seed=seed,
        fill=fill,
        fill_place=fill_place,
        shuffle=shuffle,
    )
    uni = unigram_log_probs
    if uni is None:
        uni = torch.full((len(alphabet),), -math.log(len(alphabet.standard_ids)))
    uni = uni.to(device)
    kw = {"pad_idx": alphabet.pad_idx, "toks_per_batch": toks_per_batch, "device": device}
    alone = _score(model, single, single_y, uni_logp=uni, desc="alone", progress=progress, **kw)
    with_ctx = _score(model, ctx, ctx_y, uni_logp=uni, desc="with context", progress=progress, **kw)
    fill_only = None
    if fill is not None:
        fx, fy = info.pop("fill_windows"), info.pop("fill_labels")
        fill_only = _score(model, fx, fy, uni_logp=uni, desc="fill only", progress=progress, **kw)
    # which positions belong to a target whose context holds an identical sequence
    flags = info.pop("identical")
    per_target = np.array([int((y != -100).sum()) for y in single_y], dtype=np.int64)
    copied = np.repeat(flags, per_target)

    def summary(nll: np.ndarray, correct: np.ndarray) -> dict[str, float | None]:
        if not len(nll):
            return {"perplexity": None, "accuracy": None}
        return {"perplexity": math.exp(float(nll.mean())), "accuracy": float(correct.mean())}

    def paired(sel: np.ndarray, proteins: int) -> dict[str, Any]:
        part = {
            "proteins": proteins,
            "positions": int(sel.sum()),
            "with_context": summary(with_ctx[0][sel], with_ctx[1][sel]),
            "without_context": summary(alone[0][sel], alone[1][sel]),
            "unigram_perplexity": math.exp(float(alone[2][sel].mean())) if sel.any() else None,
        }
        w, a = part["with_context"]["perplexity"], part["without_context"]["perplexity"]
        part["ratio"] = w / a if w and a else None
        if fill_only is not None:
            part["with_fill_only"] = summary(fill_only[0][sel], fill_only[1][sel])
            f = part["with_fill_only"]["perplexity"]
            part["ratio_vs_fill"] = w / f if w and f else None
        return part

    out = paired(np.ones(len(alone[0]), dtype=bool), len(targets)) | info
    # an identical sequence in context is a copy, not an alignment: report the two apart
    out["by_context"] = {
        "identical": paired(copied, int(flags.sum())),
        "no_identical": paired(~copied, int((~flags).sum())),
    }
    return out


__all__ = [
    "CONTEXT_ORDERS",
    "Fill",
    "Target",
    "cluster_fill",
    "cluster_targets",
    "context_perplexity",
    "fixed_targets",
    "record_order",
    "sample_targets",
]
