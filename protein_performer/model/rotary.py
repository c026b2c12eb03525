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

    def forward(
        self,
        length: int,
        device: torch.device,
        dtype: torch.dtype,
        positions: torch.Tensor | None = None,
    ):
        """Return ``(cos, sin)``, each ``(L, dim_head)`` for positions ``0..L-1``, or
        ``(B, L, dim_head)`` for ``positions`` ``(B, L)`` (any real numbers: tokens given one
        position are rotated alike)."""
        if positions is None:
            t = torch.arange(length, device=device, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq.to(device))
        else:
            t = positions.to(device=device, dtype=torch.float32)
            freqs = t[..., None] * self.inv_freq.to(device)  # the products torch.outer forms
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q``, ``k`` of shape ``(B, H, L, D)`` by position; cos/sin are ``(L, D)``, or
    ``(B, L, D)`` (each row its own positions)."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


class _RotatePacked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        dtype = torch.promote_types(qkv.dtype, cos.dtype)
        c, s = (t.to(dtype)[..., None, None, :] for t in (cos, sin))  # ([B,] L, 1, 1, D)
        ctx.save_for_backward(c, s)
        ctx.input_dtype = qkv.dtype
        out = torch.empty(qkv.shape, dtype=dtype, device=qkv.device)
        x, o, half = qkv[:, :, :2], out[:, :, :2], qkv.shape[-1] // 2
        # x·cos + rotate_half(x)·sin, rotate_half(x) = [-x2, x1]
        torch.mul(x, c, out=o)
        o[..., :half].addcmul_(x[..., half:], s[..., :half], value=-1.0)
        o[..., half:].addcmul_(x[..., :half], s[..., half:])
        out[:, :, 2] = qkv[:, :, 2]
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        c, s = ctx.saved_tensors
        dx = torch.empty(g.shape, dtype=g.dtype, device=g.device)
        gx, o, half = g[:, :, :2], dx[:, :, :2], g.shape[-1] // 2
        # the transpose: dx1 = g1·c1 + g2·s2, dx2 = g2·c2 − g1·s1
        torch.mul(gx, c, out=o)
        o[..., :half].addcmul_(gx[..., half:], s[..., half:])
        o[..., half:].addcmul_(gx[..., :half], s[..., :half], value=-1.0)
        dx[:, :, 2] = g[:, :, 2]
        return dx.to(ctx.input_dtype), None, None


def rotate_packed(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """:func:`apply_rotary` on a packed projection ``qkv`` ``(B, L, 3, H, D)``: queries and keys
    rotated, values passed through, in one new ``(B, L, 3, H, D)`` tensor (the layout
    :meth:`~protein_performer.attention.FavorAttention.forward_packed` reads in place), in the
    dtype ``q * cos`` would have; cos/sin ``(L, D)`` or ``(B, L, D)``."""
    return _RotatePacked.apply(qkv, cos, sin)
