"""One rank of the 2-process CPU DDP test (started by test_ddp.py, not collected by pytest).

Usage: python ddp_worker.py OUT_DIR FASTA RANK PORT
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import protein_performer.training.lm_module as lm_module
from protein_performer.training.run import train
from tests.training.helpers import tiny_config

STEPS = 3


def ddp_config(fasta: str, **trainer):
    cfg = tiny_config(Path(fasta), max_steps=STEPS, val_check_interval=STEPS, **trainer)
    cfg.model.dropout = 0.0
    cfg.model.redraw_interval = 1  # new features every step: they must agree across ranks
    return cfg


class Recorder(pl.Callback):
    def __init__(self) -> None:
        self.batches: list[dict[str, torch.Tensor]] = []
        self.losses: list[float] = []
        # each step's gradients as the optimizer gets them (DDP: averaged over the ranks)
        self.grads: list[dict[str, torch.Tensor]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append({k: v.clone() for k, v in batch.items()})

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(trainer.callback_metrics["train/loss"]))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads.append(
            {
                n: p.grad.detach().clone()
                for n, p in pl_module.model.named_parameters()
                if p.grad is not None
            }
        )


def main() -> None:
    out, fasta, rank, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=port,
        WORLD_SIZE="2",
        NODE_RANK="0",
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)
    cfg = ddp_config(fasta, accelerator="cpu", devices=2, strategy="ddp")
    recorder = Recorder()
    # Each rank's own redraw, recorded before the forward pass (where DDP would broadcast
    # rank 0's buffers and hide a disagreement).
    own_draws: list[dict[str, torch.Tensor]] = []
    redraw = lm_module.redraw_all

    def recording_redraw(module, step):
        n = redraw(module, step)
        own_draws.append(
            {k: b.clone() for k, b in module.named_buffers() if k.endswith(".projection")}
        )
        return n

    lm_module.redraw_all = recording_redraw
    captured = {}

    class Capture(pl.Callback):
        def on_train_end(self, trainer, pl_module):
            captured["buffers"] = {
                n: b.clone() for n, b in pl_module.model.named_buffers() if ".favor." in f".{n}"
            }
            captured["params"] = {
                n: p.detach().clone() for n, p in pl_module.model.named_parameters()
            }

    train(cfg, Path(out) / "run", callbacks=[recorder, Capture()])
    torch.save(
        {
            "batches": recorder.batches,
            "losses": recorder.losses,
            "grads": recorder.grads,
            "draws": own_draws,
            **captured,
        },
        Path(out) / f"rank{rank}.pt",
    )


if __name__ == "__main__":
    main()
