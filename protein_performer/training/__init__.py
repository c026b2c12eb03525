"""Training: the LightningModule, callbacks, safe checkpoints and the ``train`` entry point.

``train(cfg, run_dir)`` takes the plain dataclass config of :mod:`protein_performer.config.schema`
(also ``protein_performer.train``); :func:`~protein_performer.cli.hydra.run_hydra` is the Hydra
command-line glue. Submodules are imported on first use (no torch/Lightning at import).
"""

from typing import Any

__all__ = ["ProteinLMModule", "load_model", "train"]


def __getattr__(name: str) -> Any:
    if name == "train":
        from protein_performer.training.run import train

        return train
    if name == "evaluate":
        # the old place of ``protein_performer.evaluate``, kept for one release
        from protein_performer.evaluation.evaluate import evaluate

        return evaluate
    if name == "ProteinLMModule":
        from protein_performer.training.lm_module import ProteinLMModule

        return ProteinLMModule
    if name == "load_model":
        from protein_performer.model.checkpoints import load_model

        return load_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
