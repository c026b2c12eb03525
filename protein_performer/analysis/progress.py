"""Moved to :mod:`protein_performer.progress` (the data commands use it too)."""

from protein_performer.progress import LineProgress, progress

__all__ = ["LineProgress", "progress"]
