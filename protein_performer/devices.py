"""The device a command runs on, from its ``device=auto|cpu|cuda`` setting."""

from __future__ import annotations

import torch

from protein_performer.errors import ConfigError


def pick_device(name: str) -> torch.device:
    """``auto`` (CUDA when available), ``cpu`` or ``cuda`` (an error when there is none)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is available; use device=cpu")
    if name not in ("cpu", "cuda"):
        raise ConfigError(f"device must be auto, cpu or cuda (got {name!r})")
    return torch.device(name)
