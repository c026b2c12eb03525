"""Tiny FASTA files and configs that train in seconds (shared by the training tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from protein_performer.config.schema import DataConfig, OptimConfig, TrainConfig, TrainerConfig
from protein_performer.model import ModelConfig

AA = "ACDEFGHIKLMNPQRSTVWY"


def write_fasta(path: Path, n: int = 80, seed: int = 0, min_len: int = 20, max_len: int = 60):
    """``n`` proteins built from a few repeated motifs (learnable), generic headers."""
    rng = np.random.default_rng(seed)
    motifs = ["".join(rng.choice(list(AA), size=8)) for _ in range(4)]
    with open(path, "w") as f:
        for i in range(n):
            length = int(rng.integers(min_len, max_len + 1))
            seq = "".join(motifs[int(rng.integers(4))] for _ in range(length // 8 + 1))[:length]
            f.write(f">sp|T{i:05d}|TINY{i}_TEST tiny protein {i}\n{seq}\n")
    return path


def tiny_overrides(fasta: Path, run_dir: Path, attention: str = "performer_relu") -> list[str]:
    """Hydra overrides for a seconds-long run on ``fasta`` writing into ``run_dir``."""
    return [
        f"model={attention}",
        "data=fasta",
        f"data.files=['{fasta}']",
        "data.max_length=64",
        "data.toks_per_batch=640",
        "data.split_fractions=[0.8,0.2,0.0]",
        "model.dim=32",
        "model.depth=2",
        "model.heads=4",
        "model.ffn_dim=64",
        "model.max_len=64",
        "model.nb_features=16",
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        f"hydra.run.dir={run_dir}",
    ]


def tiny_config(fasta: Path, attention: str = "performer_relu", **trainer) -> TrainConfig:
    """The same run as :func:`tiny_overrides`, built without Hydra."""
    t = dict(max_steps=4, val_check_interval=2, log_every_n_steps=1, enable_progress_bar=False)
    t.update(trainer)
    return TrainConfig(
        model=ModelConfig(
            attention=attention,
            dim=32,
            depth=2,
            heads=4,
            ffn_dim=64,
            max_len=64,
            nb_features=16,
        ),
        data=DataConfig(
            files=[str(fasta)],
            max_length=64,
            toks_per_batch=640,
            split_fractions=[0.8, 0.2, 0.0],
        ),
        optim=OptimConfig(),
        trainer=TrainerConfig(**t),
    )


def train_losses(run_dir: Path) -> dict[int, float]:
    """``{step: train/loss}`` from a run's metrics.csv."""
    import csv

    with open(run_dir / "metrics.csv") as f:
        return {
            int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")
        }
