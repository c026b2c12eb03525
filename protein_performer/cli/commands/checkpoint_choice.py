"""Which checkpoint a command that can read homologs reads when none is named
(``checkpoint=auto``, the default): the shipped homolog model with ``context=``, the shipped
single-protein model (``default``) without; a checkpoint named, ``default`` included, is read."""

from __future__ import annotations

import dataclasses
from typing import Any

from protein_performer.model.checkpoints import (
    CONTEXT_CHECKPOINTS,
    SCORE_CONTEXT_CHECKPOINTS,
    choose_checkpoint,
)

__all__ = ["CONTEXT_CHECKPOINTS", "SCORE_CONTEXT_CHECKPOINTS", "with_context_checkpoint"]

_NOTES = {
    "homologs-columns-deep": "the shipped homolog model that reads homologs at their columns, "
    "trained with up to 64 a row",
    "homologs-columns": "the shipped homolog model that reads homologs at their columns",
    "homologs-msa": "the shipped homolog model trained on alignment-like rows",
    "homologs": "the shipped homolog model",
}


def with_context_checkpoint(cfg: Any, names: tuple[str, ...] = CONTEXT_CHECKPOINTS) -> Any:
    """``cfg`` with ``checkpoint=auto`` read as the shipped model for the job
    (:func:`~protein_performer.model.checkpoints.choose_checkpoint`; ``names``: the homolog
    models in order, ``score``'s :data:`SCORE_CONTEXT_CHECKPOINTS`); a checkpoint named is kept."""
    chosen = choose_checkpoint(cfg.checkpoint, bool(getattr(cfg, "context", None)), names)
    return cfg if chosen == cfg.checkpoint else dataclasses.replace(cfg, checkpoint=chosen)


def context_checkpoint_note(cfg: Any) -> str:
    """One line for the printed summary when a command with homologs reads a shipped homolog
    model (``checkpoint=auto`` is read as it): its single-protein numbers are that model's,
    not the ``default`` model's of a run without ``context=``. Empty otherwise."""
    if not getattr(cfg, "context", None) or cfg.checkpoint not in _NOTES:
        return ""
    return (
        f"\n  model: checkpoint={cfg.checkpoint} ({_NOTES[cfg.checkpoint]}, read with context=; "
        "without context= the single-protein checkpoint=default scores, so every model column "
        "can differ)"
    )
