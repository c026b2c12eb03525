"""Training targets and collators: BERT-style masked LM and causal LM.

A collator turns dataset items (``{"tokens", "index", "epoch"}``, see
:mod:`protein_performer.data.datasets`) into the batch dict every model consumes::

    input_ids     (B, L) int64
    labels        (B, L) int64, IGNORE_INDEX (-100) where there is nothing to predict
    padding_mask  (B, L) bool, True at padding

MLM masks are drawn from a generator keyed by ``(seed, epoch, index)`` of each item, so they do
not depend on worker processes or batch composition, and evaluation items (always epoch 0)
get the same masks every epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from protein_performer.data.alphabet import Alphabet
from protein_performer.data.batching import pad_batch, pad_positions
from protein_performer.data.config import OBJECTIVES
from protein_performer.data.datasets import TAG_MASK, Item, keyed_rng
from protein_performer.errors import ConfigError

IGNORE_INDEX = -100

Batch = dict[str, torch.Tensor]


def mask_tokens(
    tokens: np.ndarray,
    alphabet: Alphabet,
    rng: np.random.Generator,
    *,
    mask_prob: float = 0.15,
    mask_token_frac: float = 0.8,
    random_token_frac: float = 0.1,
    start: int = 0,
    at: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Select and corrupt residue positions of one sequence for MLM.

    ``mask_prob`` of the residue positions from ``start`` on (never specials such as
    ``<cls>``/``<eos>``/``<sep>``/``<pad>``) are selected: ``floor(mask_prob * n + u)`` of them with ``u`` uniform
    (unbiased rounding), at least one when the sequence has residues. Of the selected,
    ``mask_token_frac`` become ``<mask>``, ``random_token_frac`` a uniformly drawn standard
    amino acid (possibly the same one), the rest stay unchanged. ``at``: the positions to
    select, chosen by the caller (a row whose homologs were aligned with them unknown).

    Args:
        tokens: ``(L,)`` int token ids.
    Returns:
        ``input_ids`` ``(L,)`` int64 and ``labels`` ``(L,)`` int64: the original token at the
        selected positions, ``IGNORE_INDEX`` elsewhere.
    """
    raw = np.asarray(tokens)
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        raise TypeError(f"tokens must be integer token ids, got dtype {raw.dtype}")
    tokens = raw.astype(np.int64, copy=False)
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be one sequence (L,), got shape {tokens.shape}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= len(alphabet)):
        bad = int(tokens.min()) if tokens.min() < 0 else int(tokens.max())
        raise ValueError(f"token id {bad} is outside the vocabulary (0..{len(alphabet) - 1})")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(seed)), got {rng!r}")
    fracs = {"mask_prob": mask_prob, "mask_token_frac": mask_token_frac}
    fracs["random_token_frac"] = random_token_frac
    for key, value in fracs.items():
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{key} must be in [0, 1], got {value!r}")
    if mask_token_frac + random_token_frac > 1.0:
        raise ValueError("mask_token_frac + random_token_frac must be at most 1")
    labels = np.full(tokens.shape, IGNORE_INDEX, dtype=np.int64)
    inputs = tokens.copy()
    eligible = np.flatnonzero(~alphabet.special_mask(tokens))
    if start:
        eligible = eligible[eligible >= start]
    n = len(eligible)
    if at is not None:
        selected = np.asarray(at, dtype=np.int64)
        if not np.isin(selected, eligible).all() or len(np.unique(selected)) != len(selected):
            raise ValueError("at must name distinct residue positions (from start on)")
        k = len(selected)
    elif n == 0:
        return inputs, labels
    else:
        k = min(n, max(1, int(np.floor(mask_prob * n + rng.random()))))
        selected = rng.choice(eligible, size=k, replace=False)
    labels[selected] = tokens[selected]
    u = rng.random(k)
    to_mask = selected[u < mask_token_frac]
    to_random = selected[(u >= mask_token_frac) & (u < mask_token_frac + random_token_frac)]
    inputs[to_mask] = alphabet.mask_idx
    inputs[to_random] = rng.choice(alphabet.standard_ids, size=len(to_random))
    return inputs, labels


def causal_labels(input_ids: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """Causal-LM labels: ``input_ids`` with padding set to ``IGNORE_INDEX``, NOT shifted.

    The loss shifts (predicts ``labels[:, t + 1]`` from position ``t``). Shapes ``(B, L)``.
    """
    labels = input_ids.clone()
    labels[padding_mask] = IGNORE_INDEX
    return labels


class MLMCollator:
    """Pad items to the longest and apply :func:`mask_tokens` with per-item keyed generators.

    An item with ``"mask_from": k`` is masked only from token ``k`` on (a homolog pair whose
    partner stays whole, see :class:`~protein_performer.data.datasets.PairDataset`), one with
    ``"mask_at"`` at those positions; items with ``"align_to"`` give the batch ``align_to``
    ``(B, L)`` (padded with ``-1``), items with ``"positions"`` the batch ``position_ids``
    ``(B, L)`` float32 (padded with 0).

    Args:
        alphabet: token vocabulary.
        mask_prob: fraction of residue positions selected (0 < p <= 1).
        mask_token_frac: of the selected, fraction replaced by ``<mask>``.
        random_token_frac: of the selected, fraction replaced by a random standard residue.
        seed: masking seed.
    """

    def __init__(
        self,
        alphabet: Alphabet,
        *,
        mask_prob: float = 0.15,
        mask_token_frac: float = 0.8,
        random_token_frac: float = 0.1,
        seed: int = 0,
    ) -> None:
        if not 0.0 < float(mask_prob) <= 1.0:
            raise ConfigError(f"mask_prob must be in (0, 1], got {mask_prob}")
        fracs = (float(mask_token_frac), float(random_token_frac))
        if min(fracs) < 0.0 or sum(fracs) > 1.0:
            raise ConfigError(
                "mask_token_frac and random_token_frac must be >= 0 with sum <= 1, "
                f"got {mask_token_frac} and {random_token_frac}"
            )
        self.alphabet = alphabet
        self.mask_prob = float(mask_prob)
        self.mask_token_frac = float(mask_token_frac)
        self.random_token_frac = float(random_token_frac)
        self.seed = int(seed)

    def __call__(self, items: Sequence[Item]) -> Batch:
        inputs, labels = [], []
        for item in items:
            rng = keyed_rng(TAG_MASK, self.seed, item["epoch"], item["index"])
            x, y = mask_tokens(
                item["tokens"],
                self.alphabet,
                rng,
                mask_prob=self.mask_prob,
                mask_token_frac=self.mask_token_frac,
                random_token_frac=self.random_token_frac,
                start=int(item.get("mask_from", 0)),
                at=item.get("mask_at"),
            )
            if not item.get("scored", True):  # a DDP evening-out repeat: no labels
                y = np.full_like(y, IGNORE_INDEX)
            inputs.append(x)
            labels.append(y)
        input_ids, padding_mask = pad_batch(inputs, self.alphabet.pad_idx)
        label_ids, _ = pad_batch(labels, IGNORE_INDEX)
        batch = {"input_ids": input_ids, "labels": label_ids, "padding_mask": padding_mask}
        if all("align_to" in item for item in items):  # homolog pairs with their alignment
            batch["align_to"], _ = pad_batch([item["align_to"] for item in items], -1)
        if all("positions" in item for item in items):  # rows read at their columns
            positions = [item["positions"] for item in items]
            batch["position_ids"] = pad_positions(positions, input_ids.shape[1])
        return batch


class CausalCollator:
    """Pad items to the longest; labels = inputs with padding ignored (see :func:`causal_labels`),
    and no target where a crop cut the protein: its first residue after ``cut_start`` (it
    follows ``<cls>`` without its context) and the ``<eos>`` after ``cut_end`` (not its end)."""

    def __init__(self, alphabet: Alphabet) -> None:
        self.alphabet = alphabet

    def __call__(self, items: Sequence[Item]) -> Batch:
        input_ids, padding_mask = pad_batch([it["tokens"] for it in items], self.alphabet.pad_idx)
        labels = causal_labels(input_ids, padding_mask)
        for row, item in enumerate(items):
            if not item.get("scored", True):  # a DDP evening-out repeat: no labels
                labels[row] = IGNORE_INDEX
            n = len(item["tokens"])
            if item.get("cut_start") and n > 2:
                labels[row, 1] = IGNORE_INDEX
            if item.get("cut_end") and n > 2:
                labels[row, n - 1] = IGNORE_INDEX
        return {"input_ids": input_ids, "labels": labels, "padding_mask": padding_mask}


def make_collator(
    objective: str, alphabet: Alphabet, *, mask_prob: float = 0.15, seed: int = 0
) -> Callable[[Sequence[Item]], Batch]:
    """``MLMCollator`` for ``"mlm"``, ``CausalCollator`` for ``"causal"``."""
    if objective == "mlm":
        return MLMCollator(alphabet, mask_prob=mask_prob, seed=seed)
    if objective == "causal":
        return CausalCollator(alphabet)
    raise ConfigError(f"objective must be one of: {', '.join(OBJECTIVES)}; got {objective!r}")
