"""Guards found missing by mutation testing: checkpoint projections after redraws, resume
checks (objective, alphabet) and the shape check of weight loading."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from protein_performer.config.schema import EvalConfig
from protein_performer.data.alphabet import Alphabet, default_alphabet
from protein_performer.errors import ConfigError, DataError
from protein_performer.evaluation.evaluate import evaluate
from protein_performer.model import ProteinLM
from protein_performer.model.checkpoints import (
    META_KEY,
    check_resume_compatible,
    load_model,
    load_weights,
    make_metadata,
    read_checkpoint,
)
from protein_performer.training.run import train
from tests.model.test_model import tiny_config as tiny_model_config
from tests.training.helpers import tiny_config

ALPHABET = default_alphabet()


class _KeepFinalModel(pl.Callback):
    """Keeps a copy of the trained model's state at the end of training."""

    state: dict[str, torch.Tensor] | None = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.state = {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()}


def _ids(b: int = 3, n: int = 24) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(6, 26, (b, n), generator=g)
    ids[:, 0], ids[:, -1] = ALPHABET.cls_idx, ALPHABET.eos_idx
    return ids


def test_load_model_and_evaluate_use_the_redrawn_projections_of_the_checkpoint(
    tiny_fasta, tmp_path
):
    cfg = tiny_config(tiny_fasta, max_steps=4, val_check_interval=4)
    cfg.model.redraw_interval = 1  # a new projection every step: the last one is draw 3
    keep = _KeepFinalModel()
    result = train(cfg, tmp_path / "run", callbacks=[keep])
    meta = read_checkpoint(result.last_checkpoint)[META_KEY]
    stored = meta["projections"]
    assert len(stored) == cfg.model.depth

    # the run has redrawn: the stored projections are not what a fresh model draws
    fresh = dict(ProteinLM(cfg.model, len(ALPHABET)).named_buffers())
    for name, proj in stored.items():
        assert not torch.equal(proj, fresh[name]), name

    model, _ = load_model(result.last_checkpoint)
    buffers = dict(model.named_buffers())
    for name, proj in stored.items():
        torch.testing.assert_close(buffers[name], proj, rtol=0, atol=0)
        counter = name.removesuffix("projection") + "redraw_counter"
        assert int(buffers[counter]) == 3

    # the loaded model computes exactly what the trained module computed
    trained = ProteinLM(cfg.model, len(ALPHABET)).eval()
    trained.load_state_dict(keep.state)
    with torch.no_grad():
        torch.testing.assert_close(
            model(_ids())["logits"], trained(_ids())["logits"], rtol=0, atol=0
        )

    # and evaluate() on the run's val split reproduces its final validation
    assert result.val_step == 4 and result.val_perplexity is not None
    val = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint,
            fasta=[str(tiny_fasta)],
            split="val",
            split_fractions=[0.8, 0.2, 0.0],
            toks_per_batch=640,
            device="cpu",
        )
    )
    assert val.perplexity == pytest.approx(result.val_perplexity, rel=1e-5)
    assert val.accuracy == pytest.approx(result.val_accuracy, rel=1e-5)


def _meta(objective: str = "mlm", alphabet: Alphabet = ALPHABET) -> tuple[ProteinLM, dict]:
    model = ProteinLM(tiny_model_config("performer_relu"), len(ALPHABET))
    return model, make_metadata(model, alphabet, objective)


def test_resume_check_refuses_another_objective():
    model, meta = _meta("mlm")
    check_resume_compatible(meta, model.config, ALPHABET, "mlm", "a.ckpt")  # the same run: fine
    with pytest.raises(
        ConfigError,
        match=r"cannot resume from a\.ckpt: .*objective: checkpoint 'mlm', config 'causal'",
    ):
        check_resume_compatible(meta, model.config, ALPHABET, "causal", "a.ckpt")


def test_resume_check_refuses_another_alphabet():
    # same size and tokens, another vocabulary version: the weights would load silently
    other = Alphabet(version="pp-aa-test")
    assert len(other) == len(ALPHABET)
    model, meta = _meta("mlm", other)
    with pytest.raises(DataError, match=r"alphabet pp-aa-test .* but this is pp-aa-v1"):
        check_resume_compatible(meta, model.config, ALPHABET, "mlm", "a.ckpt")


def test_resume_of_an_mlm_run_as_causal_is_refused(tiny_fasta, tmp_path):
    first = train(tiny_config(tiny_fasta, max_steps=1, val_check_interval=1), tmp_path / "a")
    cfg = tiny_config(tiny_fasta, max_steps=2)
    cfg.objective = "causal"
    cfg.ckpt_path = first.last_checkpoint
    with pytest.raises(ConfigError, match="objective: checkpoint 'mlm', config 'causal'"):
        train(cfg, tmp_path / "b")


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"ffn_dim": 48}, "blocks.0.ff"),  # a weight of another shape
        ({"max_len": 32, "position": "learned"}, "pos"),
    ],
)
def test_load_weights_refuses_tensors_of_another_shape(change, key):
    source = ProteinLM(tiny_model_config("performer_relu", position="learned"), len(ALPHABET))
    target = ProteinLM(
        tiny_model_config("performer_relu", **{"position": "learned", **change}), len(ALPHABET)
    )
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(ConfigError, match=r"does not fit this model: \d+ shape mismatches") as e:
        load_weights(target, source.state_dict(), "src.ckpt")
    assert "checkpoint src.ckpt" in str(e.value) and key in str(e.value)
    for k, v in target.state_dict().items():  # nothing was copied
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_resume_check_refuses_other_nope_layers():
    rotary = ProteinLM(tiny_model_config("performer_relu", position="rotary"), len(ALPHABET))
    meta = make_metadata(rotary, ALPHABET, "mlm")
    nope = tiny_model_config("performer_relu", position="rotary", nope_layers=[-1])
    with pytest.raises(
        ConfigError, match=r"cannot resume from a\.ckpt: .*model\.nope_layers: checkpoint \[\]"
    ):
        check_resume_compatible(meta, nope, ALPHABET, "mlm", "a.ckpt")
    # -1 and the last layer's number are the same model; an old checkpoint has no such key
    nope_meta = make_metadata(ProteinLM(nope, len(ALPHABET)), ALPHABET, "mlm")
    last = nope.depth - 1
    same = tiny_model_config("performer_relu", position="rotary", nope_layers=[last])
    check_resume_compatible(nope_meta, same, ALPHABET, "mlm", "a.ckpt")
    del meta["model"]["nope_layers"]
    check_resume_compatible(meta, rotary.config, ALPHABET, "mlm", "a.ckpt")


def test_resume_check_refuses_other_exact_layers():
    _, meta = _meta()
    hybrid = ProteinLM(tiny_model_config("performer_relu", exact_layers=[-1]), len(ALPHABET))
    with pytest.raises(
        ConfigError, match=r"cannot resume from a\.ckpt: .*model\.exact_layers: checkpoint \[\]"
    ):
        check_resume_compatible(meta, hybrid.config, ALPHABET, "mlm", "a.ckpt")
    # the same layers named another way (-1 is the last layer) is the same model
    hybrid_meta = make_metadata(hybrid, ALPHABET, "mlm")
    last = tiny_model_config("performer_relu").depth - 1
    same = ProteinLM(tiny_model_config("performer_relu", exact_layers=[last]), len(ALPHABET))
    check_resume_compatible(hybrid_meta, same.config, ALPHABET, "mlm", "a.ckpt")


def test_resume_check_refuses_another_scalable_softmax():
    plain = tiny_model_config("transformer")
    meta = make_metadata(ProteinLM(plain, len(ALPHABET)), ALPHABET, "mlm")
    scaled = tiny_model_config("transformer", scalable_softmax=512)
    with pytest.raises(
        ConfigError, match=r"cannot resume from a\.ckpt: .*model\.scalable_softmax: checkpoint 0"
    ):
        check_resume_compatible(meta, scaled, ALPHABET, "mlm", "a.ckpt")
    del meta["model"]["scalable_softmax"]  # a checkpoint from before the option: off
    check_resume_compatible(meta, plain, ALPHABET, "mlm", "a.ckpt")
