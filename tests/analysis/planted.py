"""Models whose attention is set by hand, so the analysis must find what was planted."""

from __future__ import annotations

import numpy as np
import torch

from protein_performer.analysis.inputs import Protein
from protein_performer.data.alphabet import Alphabet, default_alphabet
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM

# BLOSUM-like groups: head h attends to the residues of GROUPS[h]; the last head attends
# within the query's own group. C belongs to no group.
GROUPS = ("DE", "KR", "FYW", "ILVM", "ST", "NQH", "AGP")
ORDER = "ACDEFGHIKLMNPQRSTVWY"


def group_of(aa: str) -> int:
    for g, members in enumerate(GROUPS):
        if aa in members:
            return g
    return len(GROUPS)  # C: a group of its own


def planted_model(alphabet: Alphabet | None = None, strength: float = 10.0) -> ProteinLM:
    """One exact-attention layer, 8 heads of size 8 on one-hot residue embeddings."""
    alphabet = alphabet or default_alphabet()
    cfg = ModelConfig(
        attention="transformer", dim=64, depth=1, heads=8, ffn_dim=16, dropout=0.0, max_len=128
    )
    model = ProteinLM(cfg, len(alphabet), alphabet.pad_idx).eval()
    with torch.no_grad():
        emb = model.embed.tokens.weight
        emb.zero_()
        model.embed.positions.weight.zero_()
        for i, aa in enumerate(ORDER):
            emb[alphabet.index(aa), i] = 1.0
            emb[alphabet.index(aa), 20] = 1.0
        qkv = model.blocks[0].attn.qkv
        qkv.weight.zero_()
        qkv.bias.zero_()
        dim, dh = 64, 8
        for h, members in enumerate(GROUPS):  # head h: every query looks for GROUPS[h]
            qkv.bias[h * dh] = 1.0
            for aa in members:
                qkv.weight[dim + h * dh, ORDER.index(aa)] = strength
        last = len(GROUPS)  # the last head: same group as the query
        for i, aa in enumerate(ORDER):
            g = group_of(aa)
            qkv.weight[last * dh + g, i] = strength / 5
            qkv.weight[dim + last * dh + g, i] = strength / 5
    return model


def random_proteins(
    n: int, length: int, seed: int, alphabet: Alphabet | None = None
) -> list[Protein]:
    alphabet = alphabet or default_alphabet()
    rng = np.random.default_rng(seed)
    lut = np.array([alphabet.index(a) for a in ORDER], dtype=np.uint8)
    return [Protein(f"p{i}", f"p{i} random", lut[rng.integers(0, 20, length)]) for i in range(n)]
