"""A run whose loss becomes non-finite stops before that step's update, says so in one line,
and leaves finite checkpoints; checkpoints with non-finite weights are refused; results stay
valid JSON and readable when a model diverged."""

from __future__ import annotations

import json
import math

import pytest
import torch

from protein_performer.cli.main import main
from protein_performer.data.alphabet import default_alphabet
from protein_performer.errors import DataError, TrainingDiverged
from protein_performer.evaluation.evaluate import EvalResult
from protein_performer.model.checkpoints import (
    check_finite_weights,
    load_model,
    model_state,
    save_model_checkpoint,
)
from protein_performer.model.config import ModelConfig
from protein_performer.model.metrics import perplexity
from protein_performer.model.performer import ProteinLM
from protein_performer.training.run import train
from protein_performer.utils.numbers import number_text
from tests.training.helpers import tiny_config, tiny_overrides, write_fasta


def test_a_diverging_run_stops_before_the_non_finite_update(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, max_steps=60, val_check_interval=1000)
    cfg.optim.lr = 1e4
    cfg.trainer.gradient_clip_val = 0.0
    cfg.trainer.checkpoint_every_minutes = 1e-6  # last.ckpt after every step
    with pytest.raises(
        TrainingDiverged, match=r"^training diverged: the loss is (nan|inf) at step"
    ):
        train(cfg, tmp_path / "run")
    saved = sorted((tmp_path / "run" / "checkpoints").glob("*.ckpt"))
    assert saved  # the steps before the divergence were saved ...
    for path in saved:  # ... with finite weights: the bad update was never applied
        check_finite_weights(model_state(torch.load(path, weights_only=True)), path)


def test_the_command_line_says_it_in_one_line(tmp_path, capsys):
    fasta = write_fasta(tmp_path / "t.fasta", n=60)
    argv = [o for o in tiny_overrides(fasta, tmp_path / "run") if "max_steps" not in o]
    code = main(
        ["train", *argv, "trainer.max_steps=60", "optim.lr=1e4", "trainer.gradient_clip_val=0"]
    )
    err = capsys.readouterr().err
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "training diverged" in line and "optim.lr" in line and "Traceback" not in err


def test_checkpoints_with_non_finite_weights_are_refused(tmp_path):
    alphabet = default_alphabet()
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=32)
    model = ProteinLM(cfg, len(alphabet), alphabet.pad_idx)
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("nan")
    save_model_checkpoint(tmp_path / "nan.ckpt", model, alphabet, "mlm")
    with pytest.raises(DataError, match=r"holds non-finite weights \(1 of \d+ tensors"):
        load_model(tmp_path / "nan.ckpt")  # evaluate, the analysis commands, init_from


def test_overflowing_perplexities_are_inf_readable_and_null_in_json():
    assert perplexity(1e6, 1) == math.inf  # exp(1e6): no OverflowError mid-validation
    assert number_text(8.79e289, ".3f") == "8.79e+289" and number_text(16.5, ".3f") == "16.500"
    result = EvalResult(
        checkpoint="c",
        fasta="f",
        attention="performer_relu",
        objective="mlm",
        sequences=1,
        tokens=10,
        predicted_tokens=2,
        loss=float("nan"),
        perplexity=float("inf"),
        accuracy=0.0,
        seconds=0.1,
        seed=0,
    )
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["loss"] is None and data["perplexity"] is None
    assert "the perplexity is not finite" in result.format()


def test_fp16_leaves_a_lone_overflow_to_its_loss_scaler():
    from protein_performer.training.lm_module import FP16_NONFINITE_STEPS, diverged

    assert diverged(1, "32-true") and diverged(1, "bf16-mixed")
    assert not diverged(FP16_NONFINITE_STEPS - 1, "16-mixed")
    assert diverged(FP16_NONFINITE_STEPS, "16-mixed")


def test_a_non_finite_validation_stops_the_run_before_its_checkpoints(tiny_fasta, tmp_path):
    """Finite weights whose outputs overflow: the checkpoint of that step would be broken."""
    import pytorch_lightning as pl

    class Overflow(pl.Callback):
        def on_validation_batch_start(self, trainer, pl_module, *args):
            if trainer.global_step == 4:
                with torch.no_grad():
                    for p in pl_module.parameters():
                        p.fill_(3e38)  # finite, but every output overflows

    cfg = tiny_config(tiny_fasta, max_steps=20, val_check_interval=2)
    with pytest.raises(TrainingDiverged, match=r"the validation loss is (nan|inf) at step 4"):
        train(cfg, tmp_path / "run", callbacks=[Overflow()])
    best = tmp_path / "run" / "checkpoints" / "best.ckpt"
    assert torch.load(best, weights_only=True)["global_step"] == 2  # not the broken step


def test_a_resume_from_non_finite_weights_is_refused_once_scanned(tmp_path, capsys):
    fasta = write_fasta(tmp_path / "t.fasta", n=60)
    argv = ["train", *tiny_overrides(fasta, tmp_path / "run")]
    assert main(argv) == 0
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    key = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point())
    ckpt["state_dict"][key].view(-1)[0] = float("nan")
    torch.save(ckpt, last)
    capsys.readouterr()
    assert main([*argv, f"ckpt_path={last}", "trainer.max_steps=6"]) == 2
    assert "holds non-finite weights" in capsys.readouterr().err
