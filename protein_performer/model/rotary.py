"""Rotary position embedding (RoFormer), applied to queries and keys before the attention
kernel / random-feature map, so relative positions enter the dot products q·k."""

from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """Cos/sin tables for an even head size ``dim_head``; ``base`` sets the frequency range."""

    def __init__(self, dim_head: int, base: float = 10000.0) -> None:
        super().__init__()
        if dim_head % 2:
            raise ValueError(f"rotary embedding needs an even head size, got {dim_head}")
        inv_freq = 1.0 / (base ** (torch.arange(0, dim_head, 2, dtype=torch.float64) / dim_head))
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def forward(self, length: int, device: torch.device, dtype: torch.dtype):
        """Return ``(cos, sin)``, each ``(L, dim_head)``."""
        t = torch.arange(length, device=device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq.to(device))
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q``, ``k`` of shape ``(B, H, L, D)`` by position; cos/sin are ``(L, D)``."""
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
