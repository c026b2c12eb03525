"""Which checkpoint a command with homologs reads: ``checkpoint=default`` is the shipped homolog
model there."""

from __future__ import annotations

import dataclasses
from typing import Any

#: the shipped homolog models ``checkpoint=default`` is read as with ``context=``, the first
#: installed: the one trained on alignment-like rows (search hits, up to 32 in 4,096 tokens),
#: then the earlier one (cluster members in 1,024 tokens), still reachable by name
CONTEXT_CHECKPOINTS = ("homologs-msa", "homologs")
#: ``score``'s: first the models that read homologs at the columns they align to (the one
#: trained with up to 64 of them a row, then the one with 16)
SCORE_CONTEXT_CHECKPOINTS = ("homologs-columns-deep", "homologs-columns", *CONTEXT_CHECKPOINTS)

_NOTES = {
    "homologs-columns-deep": "the shipped homolog model that reads homologs at their columns, "
    "trained with up to 64 a row",
    "homologs-columns": "the shipped homolog model that reads homologs at their columns",
    "homologs-msa": "the shipped homolog model trained on alignment-like rows",
    "homologs": "the shipped homolog model",
}


def with_context_checkpoint(cfg: Any, names: tuple[str, ...] = CONTEXT_CHECKPOINTS) -> Any:
    """``cfg`` with ``checkpoint=default`` read as the first installed of
    ``names`` (:data:`CONTEXT_CHECKPOINTS`; ``score``: :data:`SCORE_CONTEXT_CHECKPOINTS`) when
    the command (evaluate, aa-similarity, score) has homologs (``context=``): the
    single-protein model was never trained with homologs before a protein.
    A path, or a name such as ``checkpoint=homologs``, is kept."""
    from protein_performer.model.checkpoints import shipped

    if getattr(cfg, "context", None) and cfg.checkpoint == "default":
        for name in names:
            if shipped(name):
                return dataclasses.replace(cfg, checkpoint=name)
    return cfg


def context_checkpoint_note(cfg: Any) -> str:
    """One line for the printed summary when a command with homologs reads a shipped homolog
    model (``checkpoint=default`` is switched to it): its single-protein numbers are that
    model's, not the ``default`` model's of a run without ``context=``. Empty otherwise."""
    if not getattr(cfg, "context", None) or cfg.checkpoint not in _NOTES:
        return ""
    return (
        f"\n  model: checkpoint={cfg.checkpoint} ({_NOTES[cfg.checkpoint]}, read with context=; "
        "without context= checkpoint=default scores, so every model column can differ)"
    )
