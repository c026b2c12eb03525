"""Optimizer preset, schedules, precision choice, optional TensorBoard."""

from __future__ import annotations

import importlib.util
import itertools

import pytest
import torch

from protein_performer.config.schema import OptimConfig
from protein_performer.errors import ConfigError
from protein_performer.model import ModelConfig, ProteinLM
from protein_performer.training.builders import build_trainer, resolve_precision
from protein_performer.training.optim import build_optimizer, build_scheduler, lr_factor
from protein_performer.training.run import train
from tests.training.helpers import tiny_config


def test_paper_preset_optimizer():
    model = ProteinLM(ModelConfig(dim=32, depth=1, heads=4, ffn_dim=64, max_len=16), 31)
    opt = build_optimizer(model, OptimConfig())
    assert isinstance(opt, torch.optim.AdamW)
    decay, no_decay = opt.param_groups
    assert decay["betas"] == (0.9, 0.98) and decay["eps"] == 1e-9 and decay["lr"] == 1e-3
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])  # biases and LayerNorm
    n_params = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == n_params
    adam = build_optimizer(model, OptimConfig(name="adam"))
    assert type(adam) is torch.optim.Adam


def test_weight_decay_follows_the_shapes_recorded_before_fsdp_flattened_them():
    from torch import nn

    from protein_performer.training.optim import param_dims

    model = ProteinLM(ModelConfig(dim=32, depth=1, heads=4, ffn_dim=64, max_len=16), 31)
    dims = param_dims(model)
    decayed = {n for n, p in model.named_parameters() if p.dim() >= 2}

    class Wrapped(nn.Module):  # FSDP's use_orig_params: wrapper names, flat 1-D shards
        def __init__(self) -> None:
            super().__init__()
            self._fsdp_wrapped_module = nn.Module()
            for name, p in model.named_parameters():
                holder = self._fsdp_wrapped_module
                *path, leaf = name.split(".")
                for part in path:
                    if not hasattr(holder, part):
                        holder.add_module(part, nn.Module())
                    holder = getattr(holder, part)
                holder.register_parameter(leaf, nn.Parameter(p.detach().flatten()))

    flat = Wrapped()
    names = {id(p): n.replace("_fsdp_wrapped_module.", "") for n, p in flat.named_parameters()}
    blind, _ = build_optimizer(flat, OptimConfig()).param_groups
    assert not blind["params"]  # every shard is 1-D: without the record nothing is decayed
    decay, no_decay = build_optimizer(flat, OptimConfig(), dims).param_groups
    assert {names[id(p)] for p in decay["params"]} == decayed and decay["weight_decay"] == 0.1
    assert {names[id(p)] for p in no_decay["params"]} == set(dims) - decayed


def test_warmup_and_cosine_schedule():
    cfg = OptimConfig(schedule="cosine", warmup_steps=10, min_lr_ratio=0.1)
    assert lr_factor(0, cfg, 110) == pytest.approx(0.1)
    assert lr_factor(9, cfg, 110) == pytest.approx(1.0)
    assert lr_factor(10, cfg, 110) == pytest.approx(1.0)
    assert lr_factor(60, cfg, 110) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_factor(110, cfg, 110) == pytest.approx(0.1)
    assert lr_factor(500, cfg, 110) == pytest.approx(0.1)
    factors = [lr_factor(s, cfg, 110) for s in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(factors))
    assert lr_factor(1000, OptimConfig(), 10) == 1.0
    # edges: one warmup step is the full rate at once; a decay of one step ends at the floor
    one = OptimConfig(schedule="cosine", warmup_steps=1, min_lr_ratio=0.1)
    assert lr_factor(0, one, 10) == 1.0 and lr_factor(1, one, 10) == pytest.approx(1.0)
    assert lr_factor(11, cfg, 11) == pytest.approx(0.1)
    assert lr_factor(10, cfg, 10) == pytest.approx(1.0)  # all warmup: no room to decay
    # the scheduler applies it per optimizer step
    p = torch.nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = build_scheduler(opt, cfg, 110)
    for _ in range(60):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.55)  # factor at step 60


def test_precision_is_bf16_on_gpu_and_fp32_on_cpu():
    assert resolve_precision("cpu", "auto") == "32-true"
    assert resolve_precision("gpu", "auto") == "bf16-mixed"
    assert resolve_precision("cuda", "auto") == "bf16-mixed"
    expected = "bf16-mixed" if torch.cuda.is_available() else "32-true"
    assert resolve_precision("auto", "auto") == expected
    assert resolve_precision("gpu", "32-true") == "32-true"


def test_precision_auto_is_fp16_autocast_on_gpus_without_native_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for native, expected in ((True, "bf16-mixed"), (False, "16-mixed")):
        monkeypatch.setattr(
            torch.cuda, "is_bf16_supported", lambda including_emulation=True, n=native: n
        )
        assert resolve_precision("gpu", "auto") == expected
        assert resolve_precision("auto", "auto") == expected
    assert resolve_precision("cpu", "auto") == "32-true"


@pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is not None
    or importlib.util.find_spec("tensorboardX") is not None,
    reason="tensorboard is installed",
)
def test_tensorboard_without_the_package_is_a_clear_error(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, tensorboard=True)
    with pytest.raises(ConfigError, match=r"protein-performer\[tensorboard\]"):
        build_trainer(cfg, tmp_path)
    # and before any data is read or a run directory made
    with pytest.raises(ConfigError, match=r"protein-performer\[tensorboard\]"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_folder_named_like_a_package_is_not_the_package(tmp_path, monkeypatch) -> None:
    """A run directory's tensorboard/ folder in the working directory imports as a namespace
    package: not the tensorboard a run needs."""
    from protein_performer.training.preflight import _installed

    (tmp_path / "ppfakepkg").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not _installed("ppfakepkg")
    (tmp_path / "ppfakepkg" / "__init__.py").write_text("")
    importlib.invalidate_caches()
    assert _installed("ppfakepkg")
