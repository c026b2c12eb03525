"""Token and learned absolute position embeddings, and the tied output head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class TokenPositionEmbedding(nn.Module):
    """``(B, L)`` token ids -> ``(B, L, dim)``: token embedding (+ learned absolute position)."""

    def __init__(
        self, vocab_size: int, dim: int, max_len: int, pad_idx: int, learned_positions: bool
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=pad_idx)
        self.positions = nn.Embedding(max_len, dim) if learned_positions else None
        self.max_len = max_len

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(input_ids)
        if self.positions is not None:
            pos = torch.arange(input_ids.shape[1], device=input_ids.device)
            x = x + self.positions(pos)[None]
        return x


class TiedLMHead(nn.Module):
    """``(B, L, dim)`` -> ``(B, L, vocab)`` logits: dense + GELU + LayerNorm, then the transposed
    token embedding matrix (tied weights, passed in at call time) plus a free bias."""

    def __init__(self, dim: int, vocab_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, h: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
        h = self.norm(F.gelu(self.dense(h)))
        return F.linear(h, embedding_weight, self.bias)
