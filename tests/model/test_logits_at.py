"""``ProteinLM.logits_at``: the logits at chosen positions, computed with the last block's
attention, residual and feed-forward for those rows only, equal to the full forward's there."""

from __future__ import annotations

import pytest
import torch

import protein_performer
from protein_performer.model import ATTENTION_KINDS, ModelConfig, ProteinLM

VOCAB = 25
VARIANTS = {
    "plain": {},
    "rotary-nope-exact-last-conv": {
        "position": "rotary", "nope_layers": [-1], "exact_layers": [-1], "qkv_conv": 3,
    },
    "local-heads-conv": {"position": "rotary", "local_heads": 1, "local_window": 2, "qkv_conv": 4},
    "exact-first-only": {"exact_layers": [0]},
    "scalable-softmax": {"exact_layers": [-1], "scalable_softmax": 16},
}  # fmt: skip


def _model(attention: str, causal: bool = False, **overrides) -> ProteinLM:
    if overrides.get("scalable_softmax") and attention != "transformer":
        overrides.setdefault("exact_layers", [-1])
    config = ModelConfig(
        attention=attention, dim=16, depth=2, heads=2, ffn_dim=32, dropout=0.2, max_len=64,
        nb_features=16, **overrides,
    )  # fmt: skip
    torch.manual_seed(0)
    model = ProteinLM(config, VOCAB, pad_idx=0, causal=causal).double().eval()
    with torch.no_grad():  # away from the identity starts: a wrong row or head must show
        for block in model.blocks:
            block.attn.qkv.weight.mul_(8.0)
            if block.attn.conv is not None:
                block.attn.conv.weight.normal_(0.0, 0.5)
            for kind, _ in block.attn.kinds():
                for p in kind.parameters():
                    p.add_(torch.randn_like(p) * 0.3)
    return model


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(4, VOCAB, (3, 23), generator=g)
    ids[1, 15:] = 0  # padding
    ids[2, 20:] = 0
    positions = torch.tensor([[0, 11, 22, 11], [14, 3, 7, 9], [19, 19, 1, 12]])
    return ids, ids == 0, positions


def _gathered(logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return torch.stack([logits[b, positions[b]] for b in range(len(positions))])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_logits_at_are_the_forwards_logits_there(attention: str, variant: str, causal: bool):
    model = _model(attention, causal, **VARIANTS[variant])
    ids, pad, positions = _batch()
    with torch.no_grad():
        want = _gathered(model(ids, pad)["logits"], positions)
        got = model.logits_at(ids, pad, positions)
    assert got.shape == (3, 4, VOCAB)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-9)
    # the mask by default, as forward: padding read from the ids
    torch.testing.assert_close(model.logits_at(ids, None, positions), got, atol=1e-12, rtol=0)


def test_the_padding_mask_and_the_rows_matter():
    """The comparison above can fail: another row, or padding seen, is another answer."""
    model = _model("performer_softmax", exact_layers=[-1], qkv_conv=3)
    ids, pad, positions = _batch()
    with torch.no_grad():
        want = _gathered(model(ids, pad)["logits"], positions)
        assert not torch.allclose(model.logits_at(ids, pad, positions.flip(1)), want)
        unpadded = ids.clone()
        unpadded[pad] = 5  # the same rows with residues where the padding was
        seen = model.logits_at(unpadded, torch.zeros_like(pad), positions)
        assert not torch.allclose(seen[1:], want[1:], atol=1e-6)


def test_positions_are_checked():
    model = _model("transformer")
    ids, pad, _ = _batch()
    with pytest.raises(ValueError, match=r"0\.\.22"):
        model.logits_at(ids, pad, torch.tensor([[23], [0], [0]]))
    with pytest.raises(ValueError, match=r"\(B, P\)"):
        model.logits_at(ids, pad, torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="integer"):
        model.logits_at(ids, pad, torch.zeros(3, 1))


def test_the_shipped_homolog_model_reads_the_same_logits():
    model, alphabet = protein_performer.load("homologs")
    g = torch.Generator().manual_seed(55)
    ids = torch.randint(4, 24, (2, 300), generator=g)
    ids[:, 0] = alphabet.cls_idx
    ids[1, 250:] = alphabet.pad_idx
    pad = ids == alphabet.pad_idx
    positions = torch.tensor([[120], [249]])
    ids[0, 120] = ids[1, 249] = alphabet.mask_idx
    with torch.no_grad():
        want = _gathered(model(ids, pad)["logits"], positions)
        got = model.logits_at(ids, pad, positions)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
