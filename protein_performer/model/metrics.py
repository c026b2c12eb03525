"""Language-model loss and metrics over the predicted positions of a batch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from protein_performer.data.alphabet import Alphabet
from protein_performer.data.masking import IGNORE_INDEX


@dataclass
class TokenStats:
    """Sums over predicted positions: ``nll_sum`` (keeps the graph), ``count``, ``correct``."""

    nll_sum: torch.Tensor
    count: torch.Tensor
    correct: torch.Tensor


def lm_token_stats(logits: torch.Tensor, labels: torch.Tensor, causal: bool) -> TokenStats:
    """Cross-entropy summed over the positions that have a label.

    ``logits`` ``(B, L, V)``, ``labels`` ``(B, L)`` with ``-100`` = nothing to predict. MLM
    (``causal=False``): position ``t`` predicts ``labels[t]`` (set only at masked positions).
    Causal: labels are not shifted; position ``t`` predicts ``labels[t + 1]``.
    """
    if causal:
        logits = logits[:, :-1]
        labels = labels[:, 1:]
    # every position through ignore_index, not a boolean selection: no host sync on a GPU
    flat = logits.reshape(-1, logits.shape[-1])
    target = labels.reshape(-1)
    if flat.dtype in (torch.float16, torch.bfloat16):
        flat = flat.float()  # the loss is always computed in at least fp32
    selected = target != IGNORE_INDEX
    nll_sum = F.cross_entropy(flat, target, ignore_index=IGNORE_INDEX, reduction="sum")
    correct = ((flat.detach().argmax(-1) == target) & selected).sum()
    return TokenStats(nll_sum, selected.sum(), correct)


def alignment_nll(
    attention: torch.Tensor, align_to: torch.Tensor, labels: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Attention supervision: the mean over scored positions (``labels`` set) that have an
    aligned partner residue (``align_to >= 0``) of ``-log(attention[i, align_to[i]] + eps)``,
    and the mean attention on that residue. ``(None, None)`` when no position qualifies.

    Args:
        attention: ``(B, L, L)`` one head's attention rows.
        align_to: ``(B, L)`` int64 key position per query, ``-1`` where none.
        labels: ``(B, L)`` with :data:`IGNORE_INDEX` at unscored positions.
    """
    keep = (align_to >= 0) & (labels != IGNORE_INDEX)
    if not bool(keep.any()):
        return None, None
    rows, cols = keep.nonzero(as_tuple=True)
    on = attention[rows, cols, align_to[rows, cols]]
    on = on.to(torch.promote_types(on.dtype, torch.float32))  # bf16 logs in float32
    return -(on + eps).log().mean(), on.detach().mean()


def perplexity(nll_sum: float, count: float) -> float:
    """``exp(mean NLL)`` (nan when nothing was predicted; inf past float range)."""
    if not count > 0:
        return float("nan")
    try:
        return math.exp(nll_sum / count)
    except OverflowError:  # a diverged model's loss above ~709.8 nats
        return math.inf


# What the model saw at an MLM-predicted position (BERT's 80/10/10 corruption).
MLM_INPUT_KINDS: tuple[str, ...] = ("mask", "random", "unchanged")


def mlm_input_kind_stats(
    logits: torch.Tensor, labels: torch.Tensor, input_ids: torch.Tensor, mask_idx: int
) -> dict[str, TokenStats]:
    """MLM sums split by what the input showed at each predicted position.

    ``logits`` ``(B, L, V)``; ``labels``, ``input_ids`` ``(B, L)``. ``"mask"``: the input held
    ``<mask>``; ``"unchanged"``: the true residue (BERT's 10% kept, or a random draw that hit
    it); ``"random"``: another token. The ``"unchanged"`` positions can be predicted by copying
    the input, so they flatter the overall perplexity; ``"mask"`` is the number to compare
    with models evaluated on ``<mask>`` only. Detached (for evaluation).
    """
    selected = labels != IGNORE_INDEX
    target = labels[selected]
    shown = input_ids[selected]
    picked = logits[selected].detach()
    if picked.dtype in (torch.float16, torch.bfloat16):
        picked = picked.float()
    nll = F.cross_entropy(picked, target, reduction="none")
    correct = picked.argmax(-1) == target
    kinds = {
        "mask": shown == mask_idx,
        "unchanged": shown == target,
        "random": (shown != mask_idx) & (shown != target),
    }
    return {
        k: TokenStats(nll[kinds[k]].sum(), kinds[k].sum(), correct[kinds[k]].sum())
        for k in MLM_INPUT_KINDS
    }


def batch_sums(
    logits: torch.Tensor,
    labels: torch.Tensor,
    input_ids: torch.Tensor,
    causal: bool,
    mask_idx: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Detached float64 ``(nll_sum, count, correct)`` of a batch, shape ``(3,)``, and for MLM
    the same per input kind, ``(len(MLM_INPUT_KINDS), 3)`` (rows partition the total, so the
    cross-entropy is computed once); causal: ``None``. For evaluation and validation."""
    if causal:
        st = lm_token_stats(logits.detach(), labels, causal=True)
        return _row(st), None
    kinds = mlm_input_kind_stats(logits, labels, input_ids, mask_idx)
    rows = torch.stack([_row(kinds[k]) for k in MLM_INPUT_KINDS])
    return rows.sum(0), rows


def _row(st: TokenStats) -> torch.Tensor:
    return torch.stack([st.nll_sum.detach().double(), st.count.double(), st.correct.double()])


def unigram_log_probs(counts: Any, alphabet: Alphabet) -> torch.Tensor:
    """``(V,)`` log-probabilities of residue frequencies (add-one smoothed over the residue
    letters; special tokens get -inf): the unigram baseline of masked-LM perplexity."""
    counts = torch.as_tensor(np.asarray(counts, dtype=np.float64)[: len(alphabet)])
    residue = torch.tensor([len(t) == 1 for t in alphabet.tokens], dtype=torch.bool)
    weights = torch.where(residue, counts + 1.0, torch.zeros_like(counts))
    logp = torch.log(weights / weights.sum())
    return logp.float()


def add_next_token_counts(hist: torch.Tensor, labels: torch.Tensor) -> None:
    """Add the causal targets of ``labels`` ``(B, L)`` (position t predicts ``labels[t + 1]``;
    ``IGNORE_INDEX`` not counted) to the histogram ``hist`` ``(V,)``, in place, without a host
    sync."""
    targets = labels[:, 1:].flatten()
    hist.index_add_(0, targets.clamp_min(0), (targets != IGNORE_INDEX).to(hist.dtype))


def causal_unigram_sums(
    target_hist: torch.Tensor, counts: Any, alphabet: Alphabet, counts_from: str
) -> tuple[torch.Tensor, str]:
    """``(nll_sum, count, correct)`` of the unigram baseline of a causal model on targets
    with histogram ``target_hist`` ``(V,)``, and where its frequencies come from.

    Residues keep the training data's (add-one smoothed) frequencies, scaled to the share of
    residue targets; the special tokens a causal model is asked for (``<eos>``, ``<sep>``)
    have no residue count, so they get their own rate among these targets (a structural
    statistic, one per protein or window, not the residues' distribution)."""
    hist = target_hist.double()
    n = float(hist.sum())
    residue = torch.tensor([len(t) == 1 for t in alphabet.tokens], dtype=torch.bool)
    residue_p = unigram_log_probs(counts, alphabet).double().exp()
    special_share = float(hist[~residue].sum()) / n if n else 0.0
    p = torch.where(residue, residue_p * (1.0 - special_share), hist / max(n, 1.0))
    seen = hist > 0
    nll = float(-(hist[seen] * p[seen].log()).sum())
    correct = float(hist[int(p.argmax())])
    where = counts_from
    if special_share:
        where += " residue and target <eos>/<sep>"
    return torch.tensor([nll, n, correct], dtype=torch.float64), where
