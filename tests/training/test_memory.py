"""Memory estimate printed before a run, the up-front refusal of a model that cannot fit, and
out-of-memory errors as one line with no stray run directory."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from protein_performer.data.alphabet import default_alphabet
from protein_performer.errors import ConfigError
from protein_performer.model.performer import ProteinLM
from protein_performer.training.memory import count_parameters, estimate_memory
from protein_performer.training.run import train
from tests.training.helpers import tiny_config


@pytest.mark.parametrize("attention", ["performer_relu", "transformer"])
def test_parameter_count_is_exact_without_allocating(tiny_fasta, attention):
    cfg = tiny_config(tiny_fasta, attention)
    n = len(default_alphabet())
    real = ProteinLM(cfg.model, n, default_alphabet().pad_idx)
    assert count_parameters(cfg.model, n) == sum(p.numel() for p in real.parameters())
    # 7 billion parameters are counted instantly on the meta device
    cfg.model.dim, cfg.model.ffn_dim, cfg.model.depth = 4096, 16384, 32
    assert count_parameters(cfg.model, n) > 6e9


def test_counting_parameters_draws_no_projection(tiny_fasta, monkeypatch):
    """(A head of 32,768 once drew and factorised an 8.6 GB orthogonal block just to be
    counted, and the run died with a traceback instead of the memory estimate's line.)"""
    from protein_performer.attention import favor

    def refuse(*args, **kwargs):
        raise AssertionError("a projection was drawn")

    cfg = tiny_config(tiny_fasta, "performer_relu")
    n = len(default_alphabet())
    expected = count_parameters(cfg.model, n)
    monkeypatch.setattr(favor, "draw_projection", refuse)
    assert count_parameters(cfg.model, n) == expected
    cfg.model.dim, cfg.model.heads = 65536, 2
    assert count_parameters(cfg.model, n) > 1e10


def test_activation_estimate_scales_like_the_attention(tiny_fasta):
    cfg = tiny_config(tiny_fasta, "transformer")
    cfg.model.max_len = cfg.data.max_length = 4096
    cfg.data.toks_per_batch = 8192
    n = len(default_alphabet())
    exact_4k = estimate_memory(cfg, n).activation_bytes
    cfg.model.attention = "performer_relu"
    favor_4k = estimate_memory(cfg, n).activation_bytes
    cfg.data.max_length = cfg.model.max_len = 1024
    favor_1k = estimate_memory(cfg, n).activation_bytes
    cfg.model.attention = "transformer"
    exact_1k = estimate_memory(cfg, n).activation_bytes
    # same tokens per batch: FAVOR's memory does not depend on the length, exact attention's
    # grows with it (scores per query ~ L)
    assert favor_4k == favor_1k
    assert exact_4k > 2 * exact_1k > 2 * favor_1k


def test_a_model_larger_than_memory_is_refused_before_any_work(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta)
    cfg.model.ffn_dim = 2**31  # 2 x 32 x 2^31 weights: terabytes with optimizer state
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"^the model needs ≈ .* GB .*reduce model\.dim") as err:
        train(cfg, run_dir)
    assert "\n" not in str(err.value) and not run_dir.exists()


class RaiseAt(pl.Callback):
    def __init__(self, exc: BaseException, step: int = 0) -> None:
        self.exc, self.step = exc, step

    def on_train_batch_start(self, trainer, pl_module, batch, idx) -> None:
        if trainer.global_step == self.step:
            raise self.exc


@pytest.mark.parametrize(
    ("exc", "asked"),
    [
        (
            RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                "allocate memory: you tried to allocate 274877906944 bytes. Error code 12"
            ),
            "asked for 274.9 GB",
        ),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."), "2.00 GiB"),
    ],
)
def test_out_of_memory_is_one_line_that_says_what_to_reduce(tiny_fasta, tmp_path, exc, asked):
    cfg = tiny_config(tiny_fasta, "transformer", max_steps=5)
    cfg.trainer.checkpoint_every_minutes = None
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        train(cfg, run_dir, callbacks=[RaiseAt(exc)])
    message = str(err.value)
    assert message.startswith("out of memory while building the model or the first step")
    assert asked in message
    assert "data.toks_per_batch (now 640)" in message and "model=performer_relu" in message
    assert "\n" not in message
    # a run that never wrote a checkpoint leaves no directory that looks like a run
    assert not run_dir.exists()
    # later in a run: the step is named, and the checkpoints written so far stay
    with pytest.raises(ConfigError, match=r"^out of memory at step 3"):
        train(cfg, run_dir, callbacks=[RaiseAt(exc, step=3)])
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_other_errors_are_not_called_out_of_memory(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, max_steps=5)
    with pytest.raises(RuntimeError, match="something else"):
        train(cfg, tmp_path / "run", callbacks=[RaiseAt(RuntimeError("something else"))])


def test_exact_layers_cost_exact_memory_in_those_layers_only(tiny_fasta):
    cfg = tiny_config(tiny_fasta, "performer_relu")
    cfg.model.max_len = cfg.data.max_length = 4096
    cfg.model.depth = 4
    n = len(default_alphabet())
    favor = estimate_memory(cfg, n).activation_bytes
    cfg.model.exact_layers = [-1]
    one_exact = estimate_memory(cfg, n).activation_bytes
    cfg.model.exact_layers, cfg.model.attention = [], "transformer"
    exact = estimate_memory(cfg, n).activation_bytes
    # the attention part of the estimate: a quarter of the exact model's for one layer of four
    assert favor < one_exact < exact
    assert one_exact - favor == pytest.approx((exact - favor) / 4, rel=0.05)


def test_qkv_conv_adds_its_parameters_and_a_linear_activation_term(tiny_fasta):
    cfg = tiny_config(tiny_fasta, "performer_relu")
    n = len(default_alphabet())
    plain = estimate_memory(cfg, n)
    cfg.model.qkv_conv = 3
    conv = estimate_memory(cfg, n)
    m = cfg.model
    # one depthwise filter of 3 taps and a bias per q/k/v channel and layer
    assert conv.parameters - plain.parameters == m.depth * 3 * m.dim * (3 + 1)
    # the activation term is what autograd keeps: measured on the model itself
    ids = torch.randint(4, 24, (2, m.max_len))
    kept = []
    for qkv_conv in (0, 3):
        torch.manual_seed(0)
        m.qkv_conv = qkv_conv
        kept.append(_saved_for_backward(ProteinLM(m, n), ids))
    per_token = (conv.activation_bytes - plain.activation_bytes) / conv.tokens
    assert (kept[1] - kept[0]) / ids.numel() == pytest.approx(per_token, rel=0.05)


@pytest.mark.parametrize("attention", ["performer_softmax", "performer_relu"])
def test_kept_favor_features_are_in_the_estimate_as_measured(tiny_fasta, attention):
    cfg = tiny_config(tiny_fasta, attention)
    n = len(default_alphabet())
    m = cfg.model
    ids = torch.randint(4, 24, (2, m.max_len))
    estimates, kept = [], []
    for save in (True, False):
        torch.manual_seed(0)
        m.save_features = save
        estimates.append(estimate_memory(cfg, n))
        kept.append(_saved_for_backward(ProteinLM(m, n), ids))
    per_token = (
        estimates[0].activation_bytes - estimates[1].activation_bytes
    ) / cfg.data.toks_per_batch
    # features for q and k; q (and k for ReLU) no longer saved
    shared = 1 if attention == "performer_softmax" else 2
    assert per_token == 4 * m.heads * (2 * m.nb_features - shared * m.dim_head) * m.depth
    assert (kept[0] - kept[1]) / ids.numel() == pytest.approx(per_token, rel=0.05)
    cfg.objective = "causal"  # the causal kernel always rebuilds
    m.save_features = True
    assert estimate_memory(cfg, n).activation_bytes == estimates[1].activation_bytes


def _saved_for_backward(model: torch.nn.Module, ids: torch.Tensor) -> int:
    """Bytes of the distinct non-parameter storages autograd keeps for the backward."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(ids)
    return sum(kept.values())


def test_a_budget_below_one_row_is_estimated_at_the_row_it_trains(tiny_fasta):
    cfg = tiny_config(tiny_fasta, "performer_relu")
    cfg.data.toks_per_batch, cfg.data.max_length = 10, 512
    n = len(default_alphabet())
    small = estimate_memory(cfg, n)
    assert small.tokens == min(512, cfg.model.max_len)
    cfg.data.toks_per_batch = small.tokens
    assert estimate_memory(cfg, n).activation_bytes == small.activation_bytes
