"""protein-performer: Performer (FAVOR+) protein language models and attention analysis."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protein_performer.version import __version__

__all__ = ["__version__", "load"]

if TYPE_CHECKING:
    from protein_performer.pretrained import load


def __getattr__(name: str) -> Any:
    """``load`` on first use: ``import protein_performer`` stays cheap (no torch)."""
    if name == "load":
        from protein_performer.pretrained import load

        return load
    raise AttributeError(f"module 'protein_performer' has no attribute {name!r}")
