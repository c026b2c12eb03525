"""How training checkpoints reach the disk: whole, or not at all."""

from __future__ import annotations

from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from protein_performer.utils.atomic import write_atomic


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``CheckpointIO`` writing local checkpoints through a temporary file in
    their own folder, renamed over the old one. Lightning's default stages them in the system
    temp folder, and when that is another file system (a run directory on scratch or network
    storage) it truncates and rewrites ``last.ckpt`` in place, so a kill during the copy would
    lose the last good checkpoint. Remote URLs (``s3://`` ...) go to Lightning's own code.
    A module-level class: spawning strategies pickle the trainer's plugins."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        write_atomic(path, lambda fh: torch.save(checkpoint, fh))
