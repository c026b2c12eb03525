"""Protein language models with exact or FAVOR+ (Performer) attention.

``ModelConfig`` is importable without torch; ``ProteinLM`` is loaded on first access.
"""

from typing import Any

from protein_performer.model.config import ATTENTION_KINDS, POSITION_KINDS, ModelConfig

__all__ = ["ATTENTION_KINDS", "POSITION_KINDS", "ModelConfig", "ProteinLM"]


def __getattr__(name: str) -> Any:
    if name == "ProteinLM":
        from protein_performer.model.performer import ProteinLM

        return ProteinLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
