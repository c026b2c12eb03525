"""Misuse of the Python API (no Hydra): one-line errors where torch or Lightning would fail deep
inside, or where a wrong value would train or score silently."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from protein_performer.analysis import mutations as mut
from protein_performer.analysis import representations
from protein_performer.analysis.inputs import as_protein
from protein_performer.config.schema import OptimConfig
from protein_performer.data import encode_batch
from protein_performer.data.alphabet import STRING_HINT, default_alphabet
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.errors import ConfigError
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM
from protein_performer.training.lm_module import ProteinLMModule

ALPHABET = default_alphabet()
SMALL = dict(dim=16, depth=1, heads=2, ffn_dim=16, max_len=32, nb_features=8)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("dropout", "0.1", "dropout must be in"),
        ("redraw_interval", None, "redraw_interval must be an integer"),
        ("orthogonal", "no", "orthogonal must be true or false"),
        ("dim", True, "dim must be a positive integer"),
        ("feature_seed", 1.5, "feature_seed must be an integer"),
    ],
)
def test_model_config_values_of_the_wrong_type_are_named(key, value, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**{**SMALL, key: value}).validate()


def test_numpy_scalars_in_a_model_config_read_as_python_values():
    import numpy as np

    cfg = ModelConfig(
        **{**SMALL, "dim": np.int64(16), "dropout": np.float32(0.25), "orthogonal": np.bool_(False)}
    )
    cfg.validate()
    assert (cfg.dim, cfg.dropout, cfg.orthogonal) == (16, 0.25, False)
    assert type(cfg.dim) is int and type(cfg.orthogonal) is bool


def test_a_model_takes_a_dict_config_and_names_what_it_cannot_take():
    model = ProteinLM(dict(SMALL), len(ALPHABET))
    assert model.config == ModelConfig(**SMALL)
    with pytest.raises(ConfigError, match=r"config.depht is not a key of config"):
        ProteinLM({**SMALL, "depht": 2}, len(ALPHABET))
    with pytest.raises(ConfigError, match=r"config must be a ModelConfig .* got int"):
        ProteinLM(64, len(ALPHABET))
    with pytest.raises(TypeError, match=r"input_ids must be a .* tensor of token ids, got list"):
        model([[1, 6, 2]])


def test_the_lightning_module_checks_its_objective_and_takes_dict_sections():
    with pytest.raises(ConfigError, match="objective must be one of: mlm, causal; got 'Causal'"):
        ProteinLMModule(ModelConfig(**SMALL), objective="Causal")
    module = ProteinLMModule(dict(SMALL), {"lr": 3e-4}, align={"weight": 0.0})
    assert module.optim_config == OptimConfig(lr=3e-4)
    with pytest.raises(ConfigError, match=r"optim.learning_rate is not a key of optim"):
        ProteinLMModule(ModelConfig(**SMALL), {"learning_rate": 3e-4})


def test_a_datamodule_of_another_objective_is_refused_before_training(tiny_fasta, tmp_path):
    dm = ProteinDataModule(
        files=[tiny_fasta], objective="causal", max_length=32, toks_per_batch=256
    )
    module = ProteinLMModule(ModelConfig(**SMALL), objective="mlm")
    trainer = pl.Trainer(
        max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="datamodule makes objective='causal' batches"):
        trainer.fit(module, datamodule=dm)
    assert module.global_step == 0


def test_sequences_given_as_strings_are_checked_like_records():
    with pytest.raises(ValueError, match="sequence 2 is empty"):
        encode_batch(["MKV", " \n"])
    with pytest.raises(TypeError, match="sequences must be a list of strings, got NoneType"):
        encode_batch(None)
    with pytest.raises(TypeError, match="alphabet must be an Alphabet"):
        encode_batch(["MKV"], "pp-aa-v1")
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        as_protein("", ALPHABET)
    # the advice fits a string: no invalid= option exists here
    with pytest.raises(ValueError) as err:
        encode_batch(["MKJT"])
    assert STRING_HINT in str(err.value) and "invalid=" not in str(err.value)
    assert encode_batch(["mk v*"])["input_ids"].shape == (1, 5)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return ProteinLM(ModelConfig(**SMALL), len(ALPHABET), ALPHABET.pad_idx).eval()


def test_scoring_refuses_windows_and_batches_it_cannot_score(model):
    wt = "MKTAYIAKQR"
    for bad in (1, 2):  # a window without room for a residue between <cls> and <eos>
        with pytest.raises(ConfigError, match=f"max_tokens must be >= 3 \\(got {bad}\\)"):
            mut.score_mutants(model, ALPHABET, wt, ["K2A"], max_tokens=bad)
    with pytest.raises(ConfigError, match="max_tokens=100 exceeds the checkpoint's max_len=32"):
        mut.score_mutants(model, ALPHABET, wt, ["K2A"], max_tokens=100)
    for call in (
        lambda: mut.score_mutants(model, ALPHABET, wt, ["K2A"], toks_per_batch=0),
        lambda: mut.pseudo_log_likelihood(model, ALPHABET, wt, toks_per_batch=0),
        lambda: list(representations(model, [wt], ALPHABET, toks_per_batch=0)),
    ):
        with pytest.raises(ConfigError, match="toks_per_batch must be a positive integer"):
            call()
    with pytest.raises(TypeError, match=r"a mutant must be a string .* got int 2"):
        mut.score_mutants(model, ALPHABET, wt, [2])
    with pytest.raises(TypeError, match="alphabet must be an Alphabet"):
        mut.score_mutants(model, None, wt, ["K2A"])
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        mut.score_mutants(model, ALPHABET, "", ["K2A"])
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        mut.pseudo_log_likelihood(model, ALPHABET, "")
    scores = mut.score_mutants(model, ALPHABET, wt, ["K2A"], max_tokens=3)  # smallest window
    assert all(v.shape == (1,) for v in scores.values())


def test_a_batch_with_position_ids_is_read_at_them():
    """Rows read at their columns (data.pair_columns) carry position_ids: the module's forward
    hands them to the model."""
    cfg = ModelConfig(**{**SMALL, "position": "rotary", "context_positions": "columns"})
    module = ProteinLMModule(cfg).eval()
    ids = torch.randint(6, 26, (2, 12))
    pad = torch.zeros(2, 12, dtype=torch.bool)
    pos = torch.tensor([[0.0, 1, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8]] * 2)
    with torch.no_grad():
        got = module({"input_ids": ids, "padding_mask": pad, "position_ids": pos})["logits"]
        want = module.model(ids, pad, position_ids=pos)["logits"]
        plain = module({"input_ids": ids, "padding_mask": pad})["logits"]
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, plain)
