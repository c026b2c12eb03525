"""The shipped checkpoints give the logits they gave before the attention kinds became
plug-ins (``data/pretrained_logits.pt``: computed by the code before that change, on a fixed
batch of two rows, the second padded), so a refactor of the attention cannot move a number."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import protein_performer

REFERENCE = Path(__file__).with_name("data") / "pretrained_logits.pt"


@pytest.mark.parametrize("name", ["default", "homologs"])
def test_a_shipped_checkpoint_gives_the_logits_it_gave(name: str) -> None:
    stored = torch.load(REFERENCE, weights_only=True)
    model, _ = protein_performer.load(name)
    ids, pad = stored["input_ids"], stored["padding_mask"]
    with torch.no_grad():
        logits = model(ids, pad)["logits"]
    keep = ~pad  # what padded positions read is nobody's business
    torch.testing.assert_close(logits[keep], stored[name][keep], rtol=1e-4, atol=1e-4)
