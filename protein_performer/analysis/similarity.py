"""Amino-acid similarity read out of a model, compared with BLOSUM62 over the 190 pairs.

Four views, each a symmetric 20×20 matrix in :data:`AA_ORDER` (physico-chemical groups):

- ``attention`` — Vig et al. 2020 ("BERTology Meets Biology", §4.3), the method the Performer
  paper applied: per head, the attention arcs of weight ≥ θ whose target is a standard residue;
  the share of those arcs landing on each amino acid gives a 20-vector per head; heads with
  fewer than ``min_arcs`` arcs are dropped; the similarity of amino acids a and b is the
  Pearson correlation of their shares across the remaining heads. ``attention_null``: the same
  with each arc's target redrawn uniformly within its protein (the row-permutation null).
- ``flow`` — attention-weighted co-occurrence: attention mass flowing from residues of type a
  to residues of type b (all selected heads), as log2-odds against the mass expected if every
  row spread its residue attention uniformly over its own protein's residues.
- ``substitution`` — the model's own substitution matrix: at masked positions whose true residue
  is a, the mean predicted probability of b (renormalised over the 20), turned into symmetric
  log2-odds against the marginals, the way BLOSUM is built from aligned blocks.
- ``embedding`` — cosine similarity of the input token embeddings.

``<cls>``/``<eos>`` are dropped (arcs to them do not count); only the 20 standard residues
take part (X, B, Z, U, O are neither sources nor targets).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from protein_performer.analysis.extraction import attention_maps
from protein_performer.analysis.inputs import Protein, padded_tokens, token_batches
from protein_performer.data.alphabet import Alphabet
from protein_performer.data.blosum62 import blosum62_matrix
from protein_performer.model.performer import ProteinLM, evaluates
from protein_performer.utils.progress import progress as progress_bar

#: Amino acids by physico-chemical group (aliphatic, aromatic, C, G/P, polar, basic, acidic).
AA_ORDER = "AVLIMFWYCGPSTNQHKRDE"
AA_GROUPS = (
    ("AVLIM", "aliphatic"),
    ("FWY", "aromatic"),
    ("C", ""),
    ("GP", ""),
    ("STNQ", "polar"),
    ("HKR", "basic"),
    ("DE", "acidic"),
)
VIEWS = ("attention", "flow", "substitution", "embedding")
#: Published reference points (Pearson r with BLOSUM62 over the off-diagonal pairs).
REFERENCE_POINTS = {
    "TAPE BERT (Pfam), Vig et al. 2020": 0.73,
    "ProtBert / ProtBert-BFD / ProtXLNet, Vig et al. 2020": "0.68-0.75",
    "row-permuted attention null, Vig et al. 2020": "-0.05 to 0.21",
}


def blosum62() -> np.ndarray:
    """BLOSUM62 (biopython) as a 20×20 float array in :data:`AA_ORDER`."""
    m = blosum62_matrix()
    return np.array([[m[a, b] for b in AA_ORDER] for a in AA_ORDER], dtype=np.float64)


#: The amino-acid pairs a 20×20 similarity matrix compares (its upper off-diagonal entries).
N_PAIRS = 190


def offdiag_pairs(matrix: np.ndarray | None) -> int:
    """How many of the 190 upper off-diagonal entries of ``matrix`` are finite."""
    if matrix is None:
        return 0
    return int(np.isfinite(np.asarray(matrix, dtype=np.float64)[np.triu_indices(20, k=1)]).sum())


def offdiag_pearson(
    matrix: np.ndarray | None, reference: np.ndarray, min_pairs: int = 20
) -> float | None:
    """Pearson r between the upper off-diagonal entries of two 20×20 matrices, over the pairs
    where ``matrix`` is finite (an amino acid no head ever targets has no correlation); None
    when fewer than ``min_pairs`` remain or either side is constant there."""
    if matrix is None:
        return None
    iu = np.triu_indices(len(reference), k=1)
    x, y = np.asarray(matrix, dtype=np.float64)[iu], np.asarray(reference, dtype=np.float64)[iu]
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < min_pairs or _constant(x) or _constant(y):
        return None
    return float(np.corrcoef(x, y)[0, 1])


def _constant(x: np.ndarray) -> bool:
    """Constant up to float rounding (cosines of equal angles differ in the last bits): a
    correlation with such a side is the rounding's, not the data's."""
    return float(x.std()) <= 1e-12 * max(1.0, float(np.abs(x).max()))


def aa_index(alphabet: Alphabet) -> np.ndarray:
    """``(V,)`` position of each token in :data:`AA_ORDER`, -1 for others."""
    idx = np.full(len(alphabet), -1, dtype=np.int64)
    for i, aa in enumerate(AA_ORDER):
        idx[alphabet.index(aa)] = i
    return idx


def standard_residues(
    attention: np.ndarray, types: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The maps restricted to standard residues, float64 ``(H, n, n)``, their types ``(n,)``,
    one-hot ``(n, 20)`` and composition ``(20,)``; None when the protein has none."""
    std = types >= 0
    if not std.any():
        return None
    t = types[std]
    onehot = np.zeros((len(t), 20), dtype=np.float64)
    onehot[np.arange(len(t)), t] = 1.0
    return attention[:, std][:, :, std].astype(np.float64), t, onehot, onehot.sum(0) / len(t)


@dataclass
class AttentionCounts:
    """What the attention views accumulate over proteins (see :meth:`add`)."""

    n_heads: int
    threshold: float
    seed: int = 0
    causal: bool = False
    #: also accumulate the flow view (one of several counters over the same maps need not)
    with_flow: bool = True
    arcs: np.ndarray = field(init=False)  # (heads, 20) arcs >= threshold by target type
    null_arcs: np.ndarray = field(init=False)
    flow: np.ndarray = field(init=False)  # (20, 20) attention mass from type a to type b
    expected: np.ndarray = field(init=False)
    proteins: int = 0
    residues: int = 0

    def __post_init__(self) -> None:
        self.arcs = np.zeros((self.n_heads, 20), dtype=np.int64)
        self.null_arcs = np.zeros((self.n_heads, 20), dtype=np.int64)
        self.flow = np.zeros((20, 20), dtype=np.float64)
        self.expected = np.zeros((20, 20), dtype=np.float64)
        self._rng = np.random.default_rng(self.seed)

    @property
    def min_keys(self) -> int:
        """Causal: arcs are counted from query rows that see at least this many keys. A row of
        k keys has a weight >= 1/k whatever it attends to, so the first rows of every protein
        would pass any threshold; from 10/θ keys on, uniform attention is a tenth of θ."""
        return math.ceil(10 / self.threshold) if self.causal else 0

    def add(self, attention: np.ndarray, types: np.ndarray) -> None:
        """``attention`` ``(heads, L, L)`` over one protein's residues (specials removed),
        ``types`` ``(L,)`` index in :data:`AA_ORDER` or -1 (non-standard)."""
        standard = standard_residues(attention, types)
        if standard is not None:
            self.add_standard(*standard)

    def add_standard(
        self, att: np.ndarray, t: np.ndarray, onehot: np.ndarray, comp: np.ndarray
    ) -> None:
        """:meth:`add` on what :func:`standard_residues` returned (prepared once for several
        counters over the same maps)."""
        # Vig: arcs >= threshold, counted by the target's type; null: targets redrawn
        high = att >= self.threshold  # (H, n, n)
        if self.min_keys:  # causal: row i sees i + 1 keys
            high[:, : self.min_keys - 1] = False
        self.arcs += np.einsum("hij,ja->ha", high, onehot).astype(np.int64)
        per_head = high.sum(axis=(1, 2))
        for h, k in enumerate(per_head):
            if k:
                self.null_arcs[h] += self._rng.multinomial(int(k), comp)
        self.proteins += 1
        self.residues += len(t)
        if not self.with_flow:
            return
        # flow: mass from type a to type b, against uniform spread over the keys each row sees
        # (the protein; causal: the residues up to the query)
        total = att.sum(0)  # (n, n)
        self.flow += onehot.T @ total @ onehot
        if self.causal:
            seen = np.cumsum(onehot, axis=0) / np.arange(1, len(t) + 1)[:, None]
            self.expected += onehot.T @ (total.sum(1)[:, None] * seen)
        else:
            self.expected += np.outer(onehot.T @ total.sum(1), comp)


def vig_similarity(arcs: np.ndarray, min_arcs: int) -> tuple[np.ndarray | None, np.ndarray]:
    """``(similarity or None, kept heads mask)``: Pearson correlation across heads of the
    amino acids' shares of each head's high-attention arcs (heads with ≥ ``min_arcs``)."""
    totals = arcs.sum(1)
    kept = totals >= min_arcs
    if kept.sum() < 3:
        return None, kept
    shares = arcs[kept] / totals[kept, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.corrcoef(shares.T)
    return sim, kept


def flow_log_odds(flow: np.ndarray, expected: np.ndarray) -> np.ndarray | None:
    """Symmetric log2-odds ``log2((F + Fᵀ) / (E + Eᵀ))``; cells without mass are NaN."""
    f, e = flow + flow.T, expected + expected.T
    if e.sum() <= 0:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log2(f / e)
    return np.where(np.isfinite(out), out, np.nan)  # no data: left out of r


def substitution_log_odds(joint: np.ndarray) -> np.ndarray | None:
    """``joint[a, b]``: summed predicted probability of b at masked positions of true a.
    Returns symmetric log2-odds ``log2(q_ab / (p_a p_b))`` with ``q`` the symmetrised, normalised
    joint and ``p`` its marginal (BLOSUM's construction)."""
    total = joint.sum()
    if total <= 0:
        return None
    q = (joint + joint.T) / (2 * total)
    p = q.sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log2(q / np.outer(p, p))
    return np.where(np.isfinite(out), out, np.nan)  # no data: left out of r


def embedding_cosine(model: ProteinLM, alphabet: Alphabet) -> np.ndarray:
    ids = [alphabet.index(a) for a in AA_ORDER]
    w = model.embed.tokens.weight.detach().double().cpu()[ids]
    w = w / w.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (w @ w.T).numpy()


@torch.no_grad()
@evaluates
def substitution_joint(
    model: ProteinLM,
    proteins: Sequence[Protein],
    alphabet: Alphabet,
    *,
    mask_prob: float = 0.15,
    seed: int = 0,
    toks_per_batch: int = 8192,
) -> tuple[np.ndarray, int]:
    """``(joint, positions)``: summed predicted distribution over the 20 (renormalised) at
    masked positions, by true residue; each protein gets its own seeded mask (at least one
    position), every masked position shows ``<mask>``."""
    device = next(model.parameters()).device
    types = aa_index(alphabet)
    cols = torch.tensor([alphabet.index(a) for a in AA_ORDER], device=device)
    joint = np.zeros((20, 20), dtype=np.float64)
    positions = 0
    order = sorted(range(len(proteins)), key=lambda i: proteins[i].sequence_length)
    ordered = [proteins[i] for i in order]
    for batch in token_batches(ordered, toks_per_batch):
        ids = padded_tokens([ordered[j] for j in batch], alphabet)
        masked = torch.zeros_like(ids, dtype=torch.bool)
        for row, j in enumerate(batch):
            i, n = order[j], ordered[j].sequence_length
            rng = np.random.default_rng([seed, i])
            pick = rng.random(n) < mask_prob
            if not pick.any():
                pick[rng.integers(n)] = True
            masked[row, 1 : n + 1] = torch.from_numpy(pick)
        truth = ids[masked]
        ids[masked] = alphabet.mask_idx
        logits = model(ids.to(device))["logits"][masked.to(device)]
        probs = torch.softmax(logits.float()[:, cols], dim=-1).double().cpu().numpy()
        t = types[truth.numpy()]
        ok = t >= 0
        np.add.at(joint, t[ok], probs[ok])
        positions += int(ok.sum())
    return joint, positions


@dataclass
class SimilarityResult:
    """Matrices (20×20 in :data:`AA_ORDER`, None when a view has nothing to show) and the
    Pearson r of each with BLOSUM62 over the 190 off-diagonal pairs."""

    matrices: dict[str, np.ndarray | None]
    r: dict[str, float | None]
    info: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"r_vs_blosum62": self.r, **self.info, "reference_points": REFERENCE_POINTS}

    def format(self) -> str:
        def show(x: float | None) -> str:
            return "n/a" if x is None else f"{x:+.3f}"

        i = self.info
        views = ("attention", "flow", "substitution", "embedding")
        pairs = {v: i["pairs"].get(v, 0) for v in views if self.matrices.get(v) is not None}
        short = {v: n for v, n in pairs.items() if n < N_PAIRS}
        # r is over the pairs a view defines: "190 pairs" above 45 defined misled
        defined = (
            f"{N_PAIRS} pairs"
            if not short
            else "over the pairs defined: "
            + ", ".join(f"{v} {n} of {N_PAIRS}" for v, n in short.items())
            + (f"; the others all {N_PAIRS}" if len(short) < len(pairs) else "")
        )
        lines = [
            f"amino-acid similarity vs BLOSUM62 (Pearson r, {defined}), {i['proteins']:,} "
            f"proteins / {i['residues']:,} residues:",
            f"  attention (Vig et al., θ={i['threshold']}"
            + (" chosen by threshold=auto" if i.get("threshold_auto") else "")
            + f"): r = {show(self.r['attention'])}, "
            f"{i['heads_kept']} of {i['heads_total']} heads with ≥ {i['min_arcs']} arcs "
            f"(row-permutation null: r = {show(self.r['attention_null'])}; "
            f"{i['pairs']['attention']} of {N_PAIRS} pairs defined)",
            f"  attention flow log-odds:  r = {show(self.r['flow'])}",
            f"  model substitution log-odds: r = {show(self.r['substitution'])} "
            + (
                f"({i['masked_positions']:,} masked positions)"
                if i.get("masked_positions") or not i.get("causal")
                else "(not defined: a causal model never predicts at a masked site)"
            ),
            f"  token embedding cosine:   r = {show(self.r['embedding'])}",
            "  published: TAPE BERT 0.73, ProtBert/ProtXLNet 0.68-0.75, permuted null -0.05..0.21",
        ]
        if i.get("note"):
            lines.append(f"  note: {i['note']}")
        if short or any(self.r.get(v) is None for v in pairs):
            lines.append(
                f"  note: too few proteins ({i['proteins']:,}) for every view: amino-acid pairs "
                "that no arc or masked site reached are "
                "left out, and a view with fewer than 20 pairs has no r; more proteins define "
                "them (published views use hundreds)"
            )
        return "\n".join(lines)


#: ``threshold=auto`` tries these, highest first (Vig et al. used 0.3).
AUTO_THRESHOLDS = (0.3, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01)


@torch.no_grad()
@evaluates
def aa_similarity(
    model: ProteinLM,
    proteins: Sequence[Protein],
    alphabet: Alphabet,
    *,
    threshold: float | str = 0.3,
    min_arcs: int = 100,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    mask_prob: float = 0.15,
    seed: int = 0,
    progress: bool = False,
) -> SimilarityResult:
    """Compute every view over ``proteins`` (already sampled and cropped by the caller), in
    eval mode. ``threshold="auto"``: arcs are counted at each of :data:`AUTO_THRESHOLDS` in the
    same pass and the highest at which 3 heads have ``min_arcs`` arcs is used (the lowest when
    none is), so a model with diffuse attention still gets an attention view."""
    depth, n_heads = model.config.depth, model.config.heads
    layers = list(range(depth)) if layers is None else list(layers)
    heads = list(range(n_heads)) if heads is None else list(heads)
    types = aa_index(alphabet)
    causal = bool(getattr(model, "causal", False))
    auto = threshold == "auto"
    ladder = AUTO_THRESHOLDS if auto else (float(threshold),)
    n = len(layers) * len(heads)
    counters = [
        AttentionCounts(n, theta, seed, causal=causal, with_flow=i == 0)
        for i, theta in enumerate(ladder)
    ]
    for p in progress_bar(proteins, desc="attention", unit="protein", enabled=progress):
        maps = attention_maps(model, p, alphabet, layers=layers, heads=heads)
        standard = standard_residues(
            maps.reshape(-1, *maps.shape[2:]), types[p.residues.astype(np.int64)]
        )
        for c in counters if standard is not None else ():
            c.add_standard(*standard)
    chosen = next((c for c in counters if (c.arcs.sum(1) >= min_arcs).sum() >= 3), counters[-1])
    counts = counters[0]  # the flow view's (the same whatever the threshold)
    threshold = chosen.threshold
    sim, kept = vig_similarity(chosen.arcs, min_arcs)
    null, _ = vig_similarity(np.where(kept[:, None], chosen.null_arcs, 0), min_arcs)
    # a causal model never saw <mask>: its prediction there is no substitution preference
    joint, positions = (
        (None, 0)
        if getattr(model, "causal", False)
        else substitution_joint(model, proteins, alphabet, mask_prob=mask_prob, seed=seed)
    )
    matrices = {
        "attention": sim,
        "attention_null": null,
        "flow": flow_log_odds(counts.flow, counts.expected),
        "substitution": None if joint is None else substitution_log_odds(joint),
        "embedding": embedding_cosine(model, alphabet),
    }
    ref = blosum62()
    r = {name: offdiag_pearson(m, ref) for name, m in matrices.items()}
    max_weight_note = None
    if sim is None:
        lower = f"; a lower threshold (e.g. {threshold / 2:g}) finds more arcs"
        if causal:  # a lower threshold asks rows to see more keys (AttentionCounts.min_keys)
            lower = (
                f"; a causal model's arcs come from rows that see >= {chosen.min_keys} keys: "
                f"longer proteins, or a higher threshold (e.g. {2 * threshold:g}: "
                f">= {math.ceil(5 / threshold)} keys)"
            )
        max_weight_note = (
            f"{int(kept.sum())} of {len(kept)} heads "
            f"{'has' if int(kept.sum()) == 1 else 'have'} >= {min_arcs} attention weights "
            f">= {threshold} (3 are needed for the attention view{lower})"
        )
    info = {
        "proteins": counts.proteins,
        "residues": counts.residues,
        "threshold": threshold,
        "threshold_auto": auto,
        "min_arcs": min_arcs,
        "heads_total": len(kept),
        "heads_kept": int(kept.sum()),
        "arcs": int(chosen.arcs.sum()),
        "arcs_per_head": {
            f"L{layer}H{head}": int(n)
            for (layer, head), n in zip(
                [(a, b) for a in layers for b in heads], chosen.arcs.sum(1), strict=True
            )
        },
        "pairs": {name: offdiag_pairs(m) for name, m in matrices.items()},
        "masked_positions": positions,
        "causal": causal,
        # causal: arcs only from query rows that see this many keys (AttentionCounts.min_keys)
        "causal_min_keys": chosen.min_keys or None,
        "mask_prob": mask_prob,
        "seed": seed,
        "amino_acid_order": AA_ORDER,
        "note": "; ".join(
            n
            for n in (
                max_weight_note,
                "causal model: no substitution view (it never saw <mask>)" if joint is None else "",
                f"causal model: attention arcs from query rows that see >= {chosen.min_keys} keys"
                if causal
                else "",
            )
            if n
        )
        or None,
    }
    return SimilarityResult(matrices, r, info)


def sample_indices(total: int, n: int | None, seed: int) -> np.ndarray:
    """Sorted indices of a seeded sample of ``n`` of ``total`` items (all when fewer or None)."""
    if n is None or n >= total:
        return np.arange(total)
    return np.sort(np.random.default_rng(seed).choice(total, n, replace=False))


def sample_proteins(
    proteins: Sequence[Protein], n: int | None, max_residues: int, seed: int
) -> list[Protein]:
    """A seeded sample of ``n`` proteins (all when fewer or None), each cropped to its first
    ``max_residues`` residues (Vig et al. used sequences of at most 512 tokens)."""
    idx = sample_indices(len(proteins), n, seed)
    out = []
    for i in idx:
        p = proteins[int(i)]
        if p.sequence_length > max_residues:
            p = Protein(
                p.id,
                p.description,
                p.residues[:max_residues],
                p.cropped + p.sequence_length - max_residues,
            )
        out.append(p)
    return out
