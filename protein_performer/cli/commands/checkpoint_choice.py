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


def context_checkpoint_note(cfg: Any) -> str:
    """One line for the printed summary when a command with homologs reads the shipped homolog
    model (``checkpoint=default`` is switched to it): its single-protein numbers are that
    model's, not the ``default`` model's of a run without ``context=``. Empty otherwise."""
    if not getattr(cfg, "context", None) or cfg.checkpoint != "homologs":
        return ""
    return (
        "\n  model: checkpoint=homologs (the shipped homolog model, read with context=; without "
        "context= checkpoint=default scores, so every model column can differ)"
    )
