"""Optimizer (Adam / AdamW with decoupled weight decay) and learning-rate schedules."""

from __future__ import annotations

import math

import torch
from torch import nn

from protein_performer.config import OptimConfig


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only; biases, LayerNorm and 1-D parameters are not decayed."""
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """``adamw``: decoupled weight decay (as flax's Adam used by the Performer paper);
    ``adam``: PyTorch Adam, where weight decay is an L2 term in the gradient."""
    cls = torch.optim.AdamW if cfg.name == "adamw" else torch.optim.Adam
    return cls(
        param_groups(model, cfg.weight_decay),
        lr=cfg.lr,
        betas=(float(cfg.betas[0]), float(cfg.betas[1])),
        eps=cfg.eps,
    )


def lr_factor(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """Multiplier of ``cfg.lr`` at optimizer step ``step`` (0-based): linear warmup over
    ``warmup_steps``, then constant or cosine decay to ``min_lr_ratio`` at ``total_steps``."""
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, cfg, total_steps)
    )
