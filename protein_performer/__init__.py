"""protein-performer: Performer (FAVOR+) protein language models and attention analysis.

``load`` (a shipped or trained model), ``train`` and ``evaluate`` (the library functions of the
commands of those names) are imported on first use."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from protein_performer.version import __version__

#: oneDNN (torch's CPU kernels) keeps the compiled kernels of every input shape it has seen, up
#: to 1,024 of 3-13 MB each and never given back: a scan's or an evaluation's hundreds of
#: window lengths grew a process by gigabytes. Read when the first kernel is built; a user's
#: own setting wins. 64 costs no speed in training or scoring on a 2-core Xeon.
ONEDNN_CACHE = "64"
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_CACHE)

__all__ = ["__version__", "evaluate", "load", "train"]

if TYPE_CHECKING:
    from protein_performer.evaluation.evaluate import evaluate
    from protein_performer.pretrained import load
    from protein_performer.training.run import train


def __getattr__(name: str) -> Any:
    """``load``, ``train`` and ``evaluate`` on first use: ``import protein_performer`` stays
    cheap (no torch)."""
    if name == "load":
        from protein_performer.pretrained import load

        return load
    if name == "train":
        from protein_performer.training.run import train

        return train
    if name == "evaluate":
        from protein_performer.evaluation.evaluate import evaluate

        return evaluate
    raise AttributeError(f"module 'protein_performer' has no attribute {name!r}")
