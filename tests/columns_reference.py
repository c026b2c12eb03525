"""The reference a columns model's scores are checked against: one site's window built by hand
from aligned rows (each homolog's residues at its columns, every token at its column's
position)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from protein_performer.data.alphabet import Alphabet
from protein_performer.data.context_windows import column_window


def columns_model(alphabet: Alphabet, scale: float = 4.0) -> torch.nn.Module:
    """A small seeded model that reads homologs at their columns, in eval mode, its weights
    times ``scale`` (larger weights: the homologs a window holds move its logits)."""
    from protein_performer.model.config import ModelConfig
    from protein_performer.model.performer import ProteinLM

    torch.manual_seed(0)
    cfg = ModelConfig(
        attention="transformer", dim=16, depth=2, heads=2, ffn_dim=16, max_len=64,
        position="rotary", context_positions="columns",
    )  # fmt: skip
    model = ProteinLM(cfg, len(alphabet), alphabet.pad_idx).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


def column_members(alphabet: Alphabet, rows: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each aligned row (``-`` gaps, the protein's length) as ``(residue ids, columns)``."""
    members = []
    for row in rows:
        columns = np.array([j for j, c in enumerate(row) if c != "-"])
        members.append((alphabet.encode("".join(row[j] for j in columns)), columns))
    return members


def site_logits(
    model: torch.nn.Module,
    alphabet: Alphabet,
    sequence: str,
    members: Sequence[tuple[np.ndarray, np.ndarray]],
    site: int,
    max_length: int,
) -> torch.Tensor:
    """``(V,)`` logits at ``site`` masked in the whole ``sequence`` after ``members``."""
    target = alphabet.encode(sequence).astype(np.int64)
    target[site] = alphabet.mask_idx
    tokens, place, first, _ = column_window(target, members, alphabet, max_length)
    with torch.no_grad():
        return model.logits_at(
            torch.as_tensor(tokens)[None], None, torch.tensor([[first + site]]),
            position_ids=torch.as_tensor(place, dtype=torch.float32)[None],
        )[0, 0]  # fmt: skip
