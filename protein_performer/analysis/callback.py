"""A Lightning callback that logs the amino-acid similarity views (r with BLOSUM62) during
training, so ``metrics.csv`` shows whether biology emerges."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytorch_lightning as pl

from protein_performer.analysis.inputs import Protein
from protein_performer.analysis.similarity import aa_similarity, sample_indices, sample_proteins

log = logging.getLogger(__name__)


class SimilarityCallback(pl.Callback):
    """Every ``every_n_steps`` optimizer steps (rank 0), compute :func:`aa_similarity` on a
    seeded sample of ``n_proteins`` validation proteins (training proteins when there is no
    validation split) and log ``analysis/r_<view>`` and ``analysis/heads_kept``."""

    def __init__(
        self,
        every_n_steps: int,
        n_proteins: int = 100,
        threshold: float = 0.3,
        min_arcs: int = 100,
        seed: int = 0,
    ) -> None:
        self.every_n_steps = int(every_n_steps)
        self.n_proteins = int(n_proteins)
        self.threshold = float(threshold)
        self.min_arcs = int(min_arcs)
        self.seed = int(seed)
        self._proteins: list[Protein] | None = None
        self.history: list[dict[str, Any]] = []

    def _sample(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> list[Protein]:
        if self._proteins is None:
            datasets = getattr(trainer.datamodule, "datasets", {})
            ds = datasets.get("val") if len(datasets.get("val") or []) else datasets["train"]
            source = ds.source
            # pick the sample first: only those records become Protein objects
            idx = sample_indices(len(source), self.n_proteins, self.seed)
            proteins = [
                Protein(
                    source.record_id(int(i)) if source.ids is not None else str(i),
                    "",
                    np.asarray(source[int(i)]),
                )
                for i in idx
            ]
            max_residues = pl_module.model.config.max_len - 2
            self._proteins = sample_proteins(proteins, None, max_residues, self.seed)
        return self._proteins

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        step = trainer.global_step
        if step == 0 or step % self.every_n_steps or not trainer.is_global_zero:
            return
        if self.history and self.history[-1]["step"] == step:
            return  # gradient accumulation: several batches end on the same optimizer step
        result = aa_similarity(  # in eval mode, the model's mode restored after (@evaluates)
            pl_module.model,
            self._sample(trainer, pl_module),
            pl_module.alphabet,
            threshold=self.threshold,
            min_arcs=self.min_arcs,
            seed=self.seed,
        )
        metrics = {
            f"analysis/r_{name}": value for name, value in result.r.items() if value is not None
        }
        metrics["analysis/heads_kept"] = float(result.info["heads_kept"])
        self.history.append({"step": step, **metrics})
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
