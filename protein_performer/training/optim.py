"""Optimizer (Adam / AdamW with decoupled weight decay) and learning-rate schedules."""

from __future__ import annotations

import math

import torch
from torch import nn

from protein_performer.config.schema import OptimConfig

#: Module names that FSDP and activation-checkpoint wrappers insert into parameter names.
WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def param_dims(model: nn.Module) -> dict[str, int]:
    """Each parameter's number of dimensions by name, recorded before any wrapping (FSDP
    hands the optimizer flattened 1-D shards of every parameter)."""
    return {name: p.dim() for name, p in model.named_parameters()}


def param_groups(
    model: nn.Module, weight_decay: float, dims: dict[str, int] | None = None
) -> list[dict]:
    """Weight decay on matrices only; biases, LayerNorm and 1-D parameters are not decayed.
    ``dims`` (:func:`param_dims` of the unwrapped model) decides by name where given."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        for prefix in WRAPPER_PREFIXES:
            name = name.replace(prefix, "")
        ndim = p.dim() if dims is None else dims.get(name, p.dim())
        (decay if ndim >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, dims: dict[str, int] | None = None
) -> torch.optim.Optimizer:
    """``adamw``: decoupled weight decay (as flax's Adam used by the Performer paper);
    ``adam``: PyTorch Adam, where weight decay is an L2 term in the gradient. ``dims``: see
    :func:`param_groups`."""
    cls = torch.optim.AdamW if cfg.name == "adamw" else torch.optim.Adam
    return cls(
        param_groups(model, cfg.weight_decay, dims),
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
