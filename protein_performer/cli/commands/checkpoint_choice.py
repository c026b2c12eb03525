"""Which checkpoint a command with homologs reads: ``checkpoint=default`` is the shipped homolog
model there."""

from __future__ import annotations

import dataclasses
from typing import Any


def with_context_checkpoint(cfg: Any) -> Any:
    """``cfg`` with ``checkpoint=default`` read as the shipped homolog model when the command
    (evaluate, aa-similarity, score) has homologs (``context=``) and that model is installed:
    the single-protein model was never trained with homologs before a protein. A path, or
    ``checkpoint=homologs``, is kept."""
    from protein_performer.model.checkpoints import shipped

    if getattr(cfg, "context", None) and cfg.checkpoint == "default" and shipped("homologs"):
        return dataclasses.replace(cfg, checkpoint="homologs")
    return cfg
