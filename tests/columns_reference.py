"""The reference a columns model's scores are checked against: one site's window built by hand
from aligned rows (each homolog's residues at its columns, every token at its column's
position)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from protein_performer.data.alphabet import Alphabet
from protein_performer.data.context_windows import column_window


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
