"""``ProteinLMModule.training_step`` against the loss computed by hand: the returned loss is
the mean cross-entropy over the predicted positions (plus ``align.weight`` × the attention
supervision), and the logged loss, perplexity and accuracy are those of the same positions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from protein_performer.config.schema import AlignConfig
from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.masking import IGNORE_INDEX
from protein_performer.model import ModelConfig
from protein_performer.model.metrics import alignment_nll
from protein_performer.training.lm_module import ProteinLMModule

A = default_alphabet()


def _module(align: AlignConfig | None = None) -> tuple[ProteinLMModule, dict[str, float]]:
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=32, max_len=64)
    module = ProteinLMModule(cfg, alphabet=A, align=align).double().eval()
    logged: dict[str, float] = {}
    module.log = lambda name, value, **kw: logged.__setitem__(name, float(value))  # type: ignore[method-assign]
    group = SimpleNamespace(param_groups=[{"lr": 1e-3}])
    module.optimizers = lambda: group  # type: ignore[method-assign]
    module._trainer = SimpleNamespace(world_size=1, precision="64-true")  # one process
    return module, logged


def _batch(seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 24, (2, 12), generator=g)
    padding = torch.zeros(2, 12, dtype=torch.bool)
    padding[1, 9:] = True
    ids[padding] = A.pad_idx
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, [2, 5, 7]] = ids[0, [2, 5, 7]]
    labels[1, [1, 4]] = (ids[1, [1, 4]] + 1) % 20 + 4  # predicted positions only: 5 in all
    return {"input_ids": ids, "labels": labels, "padding_mask": padding}


def test_the_loss_is_the_mean_cross_entropy_of_the_predicted_positions():
    module, logged = _module()
    batch = _batch()
    with torch.no_grad():
        logits = module(batch)["logits"]
    # two of the five predicted as the model would: an accuracy of 2/5, not of 2/21 tokens
    batch["labels"][0, [2, 5]] = logits[0, [2, 5]].argmax(-1)
    loss = module.training_step(batch, 0)
    keep = batch["labels"] != IGNORE_INDEX
    ce = F.cross_entropy(logits[keep], batch["labels"][keep], reduction="mean")
    assert keep.sum() == 5
    assert loss.item() == pytest.approx(ce.item(), rel=1e-6)  # the count is float32
    assert logged["train/loss"] == pytest.approx(ce.item(), rel=1e-6)
    assert logged["train/perplexity"] == pytest.approx(ce.exp().item(), rel=1e-6)
    correct = (logits[keep].argmax(-1) == batch["labels"][keep]).double().mean()
    assert logged["train/accuracy"] == pytest.approx(correct.item()) and correct >= 0.4
    assert logged["train/lr"] == 1e-3
    assert module.last_batch_tokens == 21  # 12 + 9 residues, padding left out
    loss.backward()  # the loss is the graph's: gradients reach the weights
    assert all(p.grad is not None for p in module.model.embed.parameters())


def test_attention_supervision_adds_its_weighted_loss():
    module, logged = _module(AlignConfig(weight=0.5, layer=-1, head=-1))
    batch = _batch()
    align_to = torch.full_like(batch["input_ids"], -1)
    align_to[0, [2, 5]] = torch.tensor([8, 9])
    batch["align_to"] = align_to
    loss = module.training_step(batch, 0)
    with torch.no_grad():
        out = module(batch, probe=(-1, -1))
    keep = batch["labels"] != IGNORE_INDEX
    ce = F.cross_entropy(out["logits"][keep], batch["labels"][keep])
    nll, mass = alignment_nll(out["probe_attention"], align_to, batch["labels"])
    expected = -torch.log(out["probe_attention"][0, [2, 5], [8, 9]] + 1e-6).mean()
    assert nll.item() == pytest.approx(expected.item(), rel=1e-9)
    assert loss.item() == pytest.approx(ce.item() + 0.5 * nll.item(), rel=1e-6)
    assert logged["train/align_loss"] == pytest.approx(nll.item(), rel=1e-6)
    assert logged["train/align_mass"] == pytest.approx(mass.item(), rel=1e-6)
