"""Structured configs and the Hydra glue: composition, one-line errors, sweeps, help."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest
import torch

from protein_performer.cli.compose import compose_job
from protein_performer.cli.groups import config_groups, group_options
from protein_performer.cli.hydra import run_hydra
from protein_performer.cli.overrides import expand_overrides
from protein_performer.config.schema import DataConfig, EvalConfig, TrainConfig
from protein_performer.config.validate import validate_train_config
from protein_performer.errors import ConfigError
from protein_performer.model import ModelConfig
from protein_performer.utils.resources import project_root

REPO = Path(__file__).resolve().parents[1]


def _error(overrides: list[str], command: str = "train") -> str:
    with pytest.raises(ConfigError) as info:
        compose_job(command, expand_overrides(overrides, multirun=False, command=command)[0])
    message = str(info.value)
    assert "\n" not in message
    return message


def test_default_config_composes_to_the_dataclasses(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # conf/ and the sample are found from the package location
    job = compose_job("train", [])
    cfg = job.config
    assert isinstance(cfg, TrainConfig)
    assert isinstance(cfg.model, ModelConfig) and cfg.model.attention == "performer_relu"
    sample = Path(cfg.data.files[0])
    assert sample.is_absolute() and sample == REPO / "data" / "simulated_families.fasta.gz"
    assert job.run_dir.startswith("outputs/")
    # keys the YAML files leave alone keep the dataclass defaults
    assert cfg.model.feature_seed == ModelConfig().feature_seed
    assert cfg.optim.betas == [0.9, 0.98] and cfg.optim.eps == 1e-9
    assert cfg.trainer.gradient_clip_val == 0.5
    assert project_root() == REPO


@pytest.mark.slow
def test_every_group_option_and_experiment_composes():
    groups = config_groups()
    assert {"model", "data", "trainer", "optim", "experiment"} <= set(groups)
    assert group_options("model") == [
        "hedgehog",
        "performer_relu",
        "performer_softmax",
        "taylor",
        "transformer",
    ]
    for group in groups:
        for option in group_options(group):
            overrides = [f"{group}={option}"]
            if option == "fasta":
                overrides.append("data.files=[x.fasta]")
            elif option in ("shards", "paper_trembl_1024"):
                overrides.append("data.shards=x")
            elif option in (
                "cpu_recipe_14",
                "concat8192",
                "homologs2048",
                "homolog_pairs",
                "homolog_fill",
                "homolog_lookup",
                "homologs",
            ):
                overrides.append("data.clusters=clusters14")
            elif option in (
                "homologs_msa",
                "homologs_deep",
                "homologs_columns",
                "homologs_columns_deep",
            ):
                overrides += ["data.clusters=clusters14", "data.pair_homologs=hits14"]
            cfg = compose_job("train", overrides).config
            validate_train_config(cfg)
    lookup = compose_job("train", ["experiment=homolog_lookup", "data.clusters=c"]).config
    m = lookup.model
    assert (m.attention, m.exact_layers, m.nope_layers, m.qkv_conv) == (
        "performer_softmax",
        [-1],
        [-1],
        9,
    )
    assert (lookup.data.packing, lookup.data.max_length, m.max_len) == ("pairs", 512, 8192)
    c14 = compose_job("train", ["experiment=cpu_recipe_14", "data.clusters=c"]).config
    assert (c14.data.split_by, c14.data.sample, len(c14.data.files)) == ("cluster", "cluster", 14)
    with pytest.raises(ConfigError, match=r"needs data\.clusters"):
        compose_job("train", ["experiment=cpu_recipe_14"])
    with pytest.raises(ConfigError, match=r"data\.packing=family needs data\.mode=concat"):
        validate_train_config(compose_job("train", ["data.packing=family"]).config)
    with pytest.raises(ConfigError, match=r"data\.packing=family needs data\.clusters"):
        validate_train_config(
            compose_job("train", ["data.packing=family", "data.mode=concat"]).config
        )
    fam = ["data.packing=family", "data.mode=concat", "data.clusters=c.tsv"]
    validate_train_config(compose_job("train", fam).config)
    long = compose_job("train", ["experiment=concat8192", "data.clusters=c"]).config
    assert (long.data.mode, long.data.max_length, long.model.max_len) == ("concat", 8192, 8192)
    assert (long.data.packing, long.data.split_by, long.trainer.accelerator) == (
        "family",
        "cluster",
        "cpu",
    )
    gpu = compose_job("train", ["experiment=concat8192", "data.clusters=c", "trainer=gpu"]).config
    assert (gpu.trainer.accelerator, gpu.data.max_length) == ("gpu", 8192)
    stage1 = compose_job("train", ["experiment=homologs2048", "data.clusters=c"]).config
    assert (stage1.data.packing, stage1.data.min_members, stage1.data.max_length) == (
        "family",
        2,
        2048,
    )
    with pytest.raises(ConfigError, match=r"data\.packing=copy needs data\.mode=concat"):
        validate_train_config(compose_job("train", ["data.packing=copy"]).config)
    copy = ["experiment=homologs2048", "data.clusters=c", "data.packing=copy", "data.min_members=1"]
    validate_train_config(compose_job("train", copy).config)
    with pytest.raises(ConfigError, match=r"data\.min_members > 1 needs data\.packing=family"):
        validate_train_config(compose_job("train", ["data.min_members=2"]).config)
    with pytest.raises(ConfigError, match=r"data\.family_spread > 1 needs data\.packing=family"):
        validate_train_config(compose_job("train", ["data.family_spread=4"]).config)
    spread = compose_job("train", [*fam, "data.family_spread=4"]).config
    validate_train_config(spread)
    from protein_performer.training.builders import build_datamodule

    assert build_datamodule(spread).family_spread == 4  # the setting reaches the data
    with pytest.raises(ConfigError, match=r"data\.min_members must be an integer >= 1"):
        validate_train_config(compose_job("train", [*fam, "data.min_members=0"]).config)
    pairs = compose_job("train", ["experiment=homolog_pairs", "data.clusters=c"]).config
    assert (pairs.data.packing, pairs.data.mode, pairs.data.split_by) == (
        "pairs",
        "crop",
        "cluster",
    )
    assert (pairs.model.qkv_conv, pairs.data.pair_alone) == (3, 0.2)  # the recipe that retrieved
    assert compose_job("train", ["model.qkv_conv=5"]).config.model.qkv_conv == 5
    assert _error(["model.qkv_conv=-1"]).startswith("model.qkv_conv must be a kernel size")
    validate_train_config(
        compose_job(
            "train", ["experiment=homolog_pairs", "data.clusters=c", "data.min_members=2"]
        ).config
    )
    with pytest.raises(ConfigError, match=r"data\.packing=pairs needs data\.mode=crop"):
        validate_train_config(
            compose_job("train", ["data.packing=pairs", "data.mode=concat"]).config
        )
    with pytest.raises(ConfigError, match=r"data\.pair_mask needs data\.packing=pairs"):
        validate_train_config(compose_job("train", ["data.pair_mask=protein"]).config)
    with pytest.raises(ConfigError, match=r"data\.packing=pairs needs data\.clusters"):
        validate_train_config(compose_job("train", ["data.packing=pairs"]).config)
    for wrong in ("data.sample=cluster", "data.sample=cluster_sqrt"):
        with pytest.raises(ConfigError, match=r"packing=pairs draws its own partners: it needs"):
            validate_train_config(
                compose_job("train", ["experiment=homolog_pairs", "data.clusters=c", wrong]).config
            )
    pairs_job = ["experiment=homolog_pairs", "data.clusters=c"]
    with pytest.raises(ConfigError, match=r"align\.weight > 0 needs data\.packing=pairs"):
        validate_train_config(compose_job("train", ["align.weight=1"]).config)
    validate_train_config(compose_job("train", [*pairs_job, "align.weight=0.5"]).config)
    for wrong, match in [
        (["align.weight=0.5", "objective=causal", "data.pair_mask=all"], "align.weight > 0 needs"),
        (["align.weight=-1"], r"align\.weight must be a number >= 0"),
        (["align.weight=1", "align.layer=4"], r"align\.layer=4 is out of range for 4 layers"),
        (["align.weight=1", "align.head=-5"], r"align\.head=-5 is out of range for 4 heads"),
        (["align.weight=1", "model.local_heads=2", "align.head=1"], "is a local head"),
    ]:
        with pytest.raises(ConfigError, match=match):
            validate_train_config(compose_job("train", [*pairs_job, *wrong]).config)
    with pytest.raises(ConfigError, match=r"data\.pair_copy must be a number from 0 to 1"):
        validate_train_config(
            compose_job(
                "train", ["experiment=homolog_pairs", "data.clusters=c", "data.pair_copy=2"]
            ).config
        )


def test_unknown_model_name_lists_the_choices():
    msg = _error(["model=performer_lsh"])
    assert msg == (
        "unknown model 'performer_lsh'; valid choices for model: "
        "hedgehog, performer_relu, performer_softmax, taylor, transformer"
    )


def test_unknown_experiment_lists_the_choices():
    msg = _error(["experiment=nope"])
    assert "valid choices for experiment:" in msg and "demo" in msg and "cpu_recipe" in msg


def test_unknown_key_names_it_and_lists_valid_keys():
    msg = _error(["trainer.max_stpes=3"])
    assert msg.startswith(
        "unknown config key 'trainer.max_stpes' (did you mean 'trainer.max_steps'?)"
    )
    assert "valid keys in 'trainer': accelerator," in msg
    # a key of another group, given bare: its full name
    assert "(did you mean 'optim.lr'?)" in _error(["lr=0.1"])
    assert "(did you mean 'trainer.max_steps'?)" in _error(["max_steps=3"])
    assert "did you mean" not in _error(["blah=1"])
    # other tools' names (ESM, Lightning)
    assert "(did you mean 'trainer.max_steps'?)" in _error(["max_epochs=3"])
    assert "(did you mean 'checkpoint'?)" in _error(["ckpt=x", "fasta=y"], "evaluate")
    assert "(did you mean 'ckpt_path'?)" in _error(["ckpt=x"])
    assert "unknown config key 'foo'" in _error(["+foo=1"])
    assert "unknown config key 'model.dimm'" in _error(["+model.dimm=1"])


def test_wrong_type_names_the_key():
    assert _error(["trainer.max_steps=abc"]) == "trainer.max_steps: must be an integer; got 'abc'"
    # omegaconf's wording in the user's terms
    assert _error(["trainer.max_steps=1e3"]) == (
        "trainer.max_steps: must be an integer; got 1000.0: write 1000"
    )
    assert _error(["model.dim=null"]) == "model.dim: cannot be null"
    assert _error(["trainer.deterministic=maybe"]) == (
        "trainer.deterministic: must be true or false; got 'maybe'"
    )
    assert _error(["optim.lr=1e-3,"]).startswith("cannot read 'optim.lr=1e-3,': quote a value")
    # a sweep outside train: no advice to add -m, which only train takes
    assert "evaluate runs one setting at a time" in _error(
        ["checkpoint=x", "fasta=y", "seed=0,1"], "evaluate"
    )
    assert _error(["data.split_fractions=0.5"]).startswith("data.split_fractions: expected a list")


@pytest.mark.slow
def test_one_value_for_a_list_key_is_a_list_of_one():
    def compose(*overrides: str):
        return compose_job("train", expand_overrides(list(overrides), multirun=False)[0])

    job = compose("data.files=x.fasta", "data.val_files='my file.fa'", "model.exact_layers=-1")
    assert job.config.data.files == ["x.fasta"]
    assert job.config.data.val_files == ["my file.fa"]
    assert job.config.model.exact_layers == [-1]
    assert "data.files=[x.fasta]" in job.overrides  # what config.yaml and a resume record
    assert compose("data.files=[a.fa,b.fa]").config.data.files == ["a.fa", "b.fa"]
    assert compose("data.files=[x.fa]", "data.val_files=null").config.data.val_files is None
    assert compose("data.files=123").config.data.files == ["123"]
    assert compose("data.files=1.10").config.data.files == ["1.10"]  # a name, not 1.1
    both = compose("data.files=[a.fa,b.fa]", "data.val_files=${data.files}").config.data
    assert both.val_files == ["a.fa", "b.fa"]  # an interpolation is left to OmegaConf
    home = compose("data.files=${oc.env:HOME}/x.fa").config.data.files
    assert home == [os.path.expanduser("~/x.fa")]  # a path with a resolver in it: still a list
    assert compose("data.files=[x.fa]", "init_from=1.10").config.init_from == "1.10"
    assert compose_job("evaluate", ["fasta=1.10"]).config.fasta == "1.10"
    assert compose("data.files=uniref50.fa").overrides[0] == "data.files=[uniref50.fa]"
    assert _error(["model.exact_layers=abc"]).startswith("model.exact_layers: expected a list")


def test_negative_lr_and_bad_values_are_rejected():
    assert _error(["optim.lr=-0.1"]) == "optim.lr must be a positive number (got -0.1)"
    assert _error(["model.attention=lsh"]) == (
        "model.attention='lsh' is not valid; choose one of: "
        "performer_relu, performer_softmax, taylor, hedgehog, transformer"
    )
    assert "model.dim (100) must be divisible by model.heads (8)" in _error(["model.dim=100"])
    assert "data.max_length=2048 exceeds model.max_len=1024" in _error(["data.max_length=2048"])


def test_bad_overrides_through_run_hydra(capsys):
    with pytest.raises(ConfigError, match="valid choices for model"):
        run_hydra("train", ["model=foo"])
    with pytest.raises(ConfigError, match="unknown option '--frobnicate'"):
        run_hydra("train", ["--frobnicate"])
    with pytest.raises(ConfigError, match="add -m/--multirun"):
        run_hydra("train", ["model=transformer,performer_relu"])
    with pytest.raises(ConfigError, match=r"fasta=\.\.\. is required"):
        run_hydra("evaluate", [])
    assert capsys.readouterr().out == ""


def test_sweep_expansion_is_a_cartesian_product():
    jobs = expand_overrides(["seed=1,2", "model=performer_relu,transformer"], True)
    assert jobs == [
        ["seed=1", "model=performer_relu"],
        ["seed=1", "model=transformer"],
        ["seed=2", "model=performer_relu"],
        ["seed=2", "model=transformer"],
    ]
    with pytest.raises(ConfigError, match="valid choices for model"):
        expand_overrides(["model=performer_relu,bogus"], True)


def test_cfg_job_prints_the_resolved_config(capsys):
    assert run_hydra("train", ["--cfg", "job", "model=transformer", "optim.lr=3e-4"]) == 0
    out = capsys.readouterr().out
    assert "attention: transformer" in out and "lr: 0.0003" in out
    assert "${" not in out
    argv = ["--cfg", "all", "--json", "-m", "seed=1,2", "model=transformer"]
    assert run_hydra("train", argv) == 0
    lines = capsys.readouterr().out.splitlines()
    jobs = [json.loads(line) for line in lines]  # one JSON object per job, not YAML
    assert [j["seed"] for j in jobs] == [1, 2] and jobs[0]["model"]["attention"] == "transformer"
    assert jobs[0]["hydra"]["run"]["dir"]


def test_help_lists_groups_and_options(capsys):
    assert run_hydra("train", ["--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: protein-performer train" in out
    assert "hedgehog, performer_relu, performer_softmax, taylor, transformer" in out
    assert run_hydra("evaluate", ["--help"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint=PATH fasta=PATH" in out and "--multirun" not in out
    # every evaluate key is listed with its default
    for key in ("split:", "invalid:", "device:", "seed:", "attention:", "output:"):
        assert key in out, key
    assert "[error]" in out and "[16384]" in out
    keys = out.split("keys (KEY=VALUE", 1)[1].splitlines()[1:]
    for line in (x for x in keys if x.startswith("  ") and ":" in x):
        assert re.match(r"  \w+: {2,}\S", line), line  # the key never runs into its text
    from protein_performer.cli.help import _EVALUATE_KEYS

    assert set(_EVALUATE_KEYS) == {f.name for f in dataclasses.fields(EvalConfig)}


def _leaf_keys(cls, prefix: str = "") -> set[str]:
    keys = set()
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            keys |= _leaf_keys(type(default), f"{prefix}{f.name}.")
        else:
            keys.add(prefix + f.name)
    return keys


def test_train_help_says_what_every_key_does(capsys):
    from protein_performer.config.help import TRAIN_KEY_HELP

    assert set(TRAIN_KEY_HELP) == _leaf_keys(TrainConfig)
    assert run_hydra("train", ["--help"]) == 0
    out = capsys.readouterr().out.split("default configuration", 1)[1]
    # every key line but the six section headers carries its meaning
    lines = [ln for ln in out.splitlines()[1:] if re.match(r" +\w+:", ln)]
    assert sum(" # " in ln for ln in lines) == len(TRAIN_KEY_HELP) == len(lines) - 6
    assert re.search(r"packing: stream +# concat: stream \| family", out)
    assert re.search(r"  seed: 0 +# model initialisation", out)  # top-level, not data.seed
    assert re.search(r"    seed: 0 +# seed of crops", out)
    assert re.search(r"    files: +# FASTA files", out)


def test_library_validation_without_hydra():
    cfg = TrainConfig(data=DataConfig(files=["a.fasta"]))
    validate_train_config(cfg)
    bad = dataclasses.replace(cfg, objective="mask")
    with pytest.raises(
        ConfigError, match="objective='mask' is not valid; choose one of: mlm, causal"
    ):
        validate_train_config(bad)
    with pytest.raises(ConfigError, match=r"data\.files or data\.shards must be set"):
        validate_train_config(TrainConfig())


def test_evaluate_config_accepts_one_or_several_fasta_files():
    from protein_performer.config.validate import eval_fasta_paths

    one = compose_job("evaluate", ["checkpoint=c.ckpt", "fasta=a.fasta"]).config
    assert eval_fasta_paths(one) == ["a.fasta"]
    two = compose_job("evaluate", ["checkpoint=c.ckpt", "fasta=[a.fasta,b.fa.gz]", "split=test"])
    assert eval_fasta_paths(two.config) == ["a.fasta", "b.fa.gz"]
    msg = _error(["checkpoint=c", "fasta=a", "split=holdout"], command="evaluate")
    assert msg == "split='holdout' is not valid; choose one of: train, val, test"
    msg = _error(["checkpoint=c", "fasta=a", "attention=lsh"], command="evaluate")
    assert "choose one of: performer_relu, performer_softmax, taylor, hedgehog, transformer" in msg


def test_nope_layers_compose_from_the_command_line():
    job = compose_job("train", ["model.position=rotary", "model.nope_layers=[-1]"])
    assert job.config.model.nope_layers == [-1]
    assert not job.config.model.layer_rotary(job.config.model.depth - 1)
    assert job.config.model.layer_rotary(0)
    assert _error(["model.position=rotary", "model.nope_layers=[9]"]).startswith(
        "model.nope_layers must list layer"
    )
    assert "needs model.position=rotary" in _error(["model.nope_layers=[0]"])


def test_scalable_softmax_and_pair_fill_compose_from_the_command_line():
    job = compose_job(
        "train",
        [
            "experiment=homolog_pairs",
            "data.clusters=c.tsv",
            "model.scalable_softmax=2048",
            "data.pair_fill=true",
            "data.max_length=2048",
        ],
    )
    assert job.config.model.scalable_softmax == 2048 and job.config.data.pair_fill
    assert "applies to exact global heads" in _error(
        ["model=performer_relu", "model.scalable_softmax=512"]
    )
    assert "data.pair_fill needs data.packing=pairs" in _error(["data.pair_fill=true"])
    assert "does not work with data.pair_fill" in _error(
        ["experiment=homolog_pairs", "data.clusters=c.tsv", "data.pair_fill=true", "align.weight=1"]
    )


def test_exact_layers_compose_from_the_command_line():
    job = compose_job("train", ["model=performer_softmax", "model.exact_layers=[-1]"])
    assert job.config.model.exact_layers == [-1]
    assert job.config.model.layer_kinds()[-1] == "transformer"
    assert job.config.model.layer_kinds()[0] == "performer_softmax"
    assert _error(["model.exact_layers=[9]"]).startswith("model.exact_layers must list layer")
    assert "model.exact_layers:" in _error(["model.exact_layers=x"])


def test_preset_worker_counts_fit_the_cpus(monkeypatch):
    import os

    from protein_performer.cli.groups import worker_count

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert [worker_count(n) for n in (4, "4", 1, 0)] == [2, 2, 1, 0]
    cfg = compose_job("train", ["data=shards", "data.shards=x"]).config
    assert cfg.data.num_workers == 2


def test_max_time_takes_the_usual_forms_and_refuses_the_rest():
    from protein_performer.config.validate import parse_max_time

    assert parse_max_time("00:01:00:00") == "00:01:00:00"
    assert parse_max_time("01:30:00") == "00:01:30:00"
    assert parse_max_time("1h30m") == "00:01:30:00"
    assert parse_max_time("90s") == "00:00:01:30"
    assert parse_max_time("2d") == "02:00:00:00"
    for bad in ("10", "5:00", "abc", "1x"):
        with pytest.raises(ConfigError, match="is not a duration"):
            parse_max_time(bad)
    with pytest.raises(ConfigError, match="no time at all"):
        parse_max_time("00:00:00:00")
    assert _error(["trainer.max_time=30"]).startswith("trainer.max_time='30' is not a duration")
    job = compose_job("train", ["trainer.max_time=45m"])
    assert job.config.trainer.max_time == "00:00:45:00"  # what Lightning reads
    # Lightning's other forms, from Python: the same string
    from datetime import timedelta

    assert parse_max_time(timedelta(days=1, hours=2)) == "01:02:00:00"
    assert parse_max_time(timedelta(days=30)) == "30:00:00:00"
    assert parse_max_time({"minutes": 90}) == "00:01:30:00"
    with pytest.raises(ConfigError, match="no time at all"):
        parse_max_time(timedelta(0))
    with pytest.raises(ConfigError, match="timedelta's keys"):
        parse_max_time({"weeks_": 1})


def test_devices_must_be_a_count_all_auto_or_indices():
    assert _error(["trainer.strategy=ddp_spawn"]).startswith(
        "trainer.strategy=ddp_spawn is not supported"
    )
    for bad in ("0", "-2", "two"):
        assert _error([f"trainer.devices={bad}"]).startswith("trainer.devices=")
    for good in ("1", "-1", "auto", "[0,1]"):
        compose_job("train", [f"trainer.devices={good}"])


def test_trainer_settings_this_machine_cannot_run_stop_before_any_work(monkeypatch, caplog):
    import torch

    from protein_performer.config.schema import TrainerConfig
    from protein_performer.training.preflight import NODE_LAUNCH_ENV, check_trainer_launch

    for var in NODE_LAUNCH_ENV:
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match=r"trainer\.num_nodes=2 needs one launch per node"):
        check_trainer_launch(TrainerConfig(accelerator="cpu", num_nodes=2))
    monkeypatch.setenv("NODE_RANK", "0")  # a node of a launched multi-node job
    check_trainer_launch(TrainerConfig(accelerator="cpu", num_nodes=2))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without GPUs
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="16-mixed needs a CUDA GPU"):
        check_trainer_launch(TrainerConfig(accelerator="auto", precision="16-mixed"))
    with pytest.raises(ConfigError, match="fsdp runs on CUDA GPUs only"):
        check_trainer_launch(TrainerConfig(accelerator="cpu", strategy="fsdp"))
    # mpirun: Lightning reads its ranks only through mpi4py
    from protein_performer.training.preflight import MPI_LAUNCH_ENV

    monkeypatch.delenv("NODE_RANK")
    monkeypatch.setenv(MPI_LAUNCH_ENV[0], "4")
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(ConfigError, match="needs mpi4py"):
        check_trainer_launch(TrainerConfig(accelerator="cpu", num_nodes=2))
    monkeypatch.undo()  # (restores the patches above too: set again what the rest needs)
    for var in NODE_LAUNCH_ENV + MPI_LAUNCH_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # an Apple GPU: float16 runs there, FSDP does not
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    check_trainer_launch(TrainerConfig(accelerator="auto", precision="16-mixed"))
    with pytest.raises(ConfigError, match="fsdp runs on CUDA GPUs only"):
        check_trainer_launch(TrainerConfig(accelerator="auto", strategy="fsdp"))
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1}, raising=False)
    with caplog.at_level("WARNING"):
        check_trainer_launch(TrainerConfig(accelerator="cpu", devices=4))
    assert "trainer.devices=4 CPU processes on 2 CPU cores" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        check_trainer_launch(TrainerConfig(accelerator="cpu", devices=4), warn=False)
    assert not caplog.text


def test_a_leading_tilde_in_a_path_is_home(monkeypatch, tmp_path):
    from protein_performer.cli.compose import parse_args
    from protein_performer.cli.overrides import quote_home

    monkeypatch.setenv("HOME", str(tmp_path))
    assert quote_home("data.files=~/x.fa") == "data.files='~/x.fa'"
    assert quote_home("data.files=[~/a.fa,b.fa]") == "data.files=['~/a.fa',b.fa]"
    assert quote_home("~model.dim") == "~model.dim"  # Hydra's delete syntax stays
    argv = ["data.files=~/x.fa", "data.val_files=[~/v.fa]", "init_from=~/m.ckpt"]
    overrides = parse_args(argv).overrides
    job = compose_job("train", expand_overrides(overrides, multirun=False)[0])
    assert job.config.data.files == [f"{tmp_path}/x.fa"]
    assert job.config.data.val_files == [f"{tmp_path}/v.fa"]
    assert job.config.init_from == f"{tmp_path}/m.ckpt"
    # the run directory too (a folder named "~" in the working directory otherwise)
    assert compose_job("train", ["hydra.run.dir=~/runs/x"]).run_dir == f"{tmp_path}/runs/x"
    ev = compose_job("evaluate", ["checkpoint=~/c.ckpt", "fasta='~/t.fa'"]).config
    assert (ev.checkpoint, ev.fasta) == (f"{tmp_path}/c.ckpt", f"{tmp_path}/t.fa")


def test_settings_that_would_do_nothing_are_said():
    from protein_performer.training.preflight import settings_without_effect

    def notes(*overrides: str) -> list[str]:
        job = compose_job("train", expand_overrides(list(overrides), multirun=False)[0])
        return settings_without_effect(job.config, job.overrides)

    assert notes() == []
    assert notes("trainer.max_steps=6", "optim.warmup_steps=100") == [
        "optim.warmup_steps=100 >= trainer.max_steps=6: the learning rate never reaches optim.lr"
    ]
    assert notes("objective=causal", "data.mask_prob=0.3") == [
        "data.mask_prob has no effect with objective=causal (nothing is masked)"
    ]
    assert notes("objective=causal") == []  # the default mask_prob is not the user's
    assert notes("objective=causal", "model.save_features=true") == [
        "model.save_features has no effect with objective=causal (causal FAVOR always "
        "rebuilds its features in the backward)"
    ]
    assert notes("model=transformer", "model.nb_features=16") == [
        "model.nb_features has no effect with model.attention=transformer"
    ]
    assert (
        "data.toks_per_batch has no effect"
        in notes("data.batch_size=4", "data.toks_per_batch=1024")[0]
    )


def test_a_one_machine_ddp_run_refuses_a_busy_port_or_a_foreign_address(monkeypatch):
    """Left-over MASTER_PORT / MASTER_ADDR exports: the run crashed rank 0 and orphaned rank 1
    (port in use) or waited 30 minutes (address of another machine), deaf to Ctrl-C."""
    import socket

    from protein_performer.config.schema import TrainerConfig
    from protein_performer.training.preflight import (
        MPI_LAUNCH_ENV,
        NODE_LAUNCH_ENV,
        check_trainer_launch,
    )

    for var in NODE_LAUNCH_ENV + MPI_LAUNCH_ENV + ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    ddp = TrainerConfig(accelerator="cpu", strategy="ddp", devices=2)
    check_trainer_launch(ddp, warn=False)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        monkeypatch.setenv("MASTER_PORT", str(busy.getsockname()[1]))
        with pytest.raises(ConfigError, match=r"MASTER_PORT=\d+ is in use on this machine"):
            check_trainer_launch(ddp, warn=False)
        check_trainer_launch(
            TrainerConfig(accelerator="cpu"), warn=False
        )  # one process: no rendezvous
    monkeypatch.setenv("MASTER_PORT", "port")
    with pytest.raises(ConfigError, match="is not a port number"):
        check_trainer_launch(ddp, warn=False)
    monkeypatch.delenv("MASTER_PORT")
    monkeypatch.setenv("MASTER_ADDR", "192.0.2.1")  # TEST-NET-1: never this machine
    with pytest.raises(ConfigError, match=r"MASTER_ADDR=192\.0\.2\.1 is not this machine"):
        check_trainer_launch(ddp, warn=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    check_trainer_launch(ddp, warn=False)
    monkeypatch.setenv("WORLD_SIZE", "2")  # a launcher's process: it set these itself
    monkeypatch.setenv("MASTER_ADDR", "192.0.2.1")
    check_trainer_launch(ddp, warn=False)


def test_torchrun_with_a_trainer_that_does_not_match_is_refused(monkeypatch):
    from protein_performer.config.schema import TrainerConfig
    from protein_performer.training.preflight import check_trainer_launch

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("NODE_RANK", "0")
    with pytest.raises(ConfigError, match="each would train the same model alone"):
        check_trainer_launch(TrainerConfig(accelerator="cpu"), warn=False)
    with pytest.raises(ConfigError, match=r"trainer\.devices=4 x trainer\.num_nodes=1 makes 4"):
        check_trainer_launch(
            TrainerConfig(accelerator="cpu", strategy="ddp", devices=4), warn=False
        )
    check_trainer_launch(TrainerConfig(accelerator="cpu", strategy="ddp", devices=2), warn=False)
    # two nodes of two: four ranks, as torchrun --nnodes=2 --nproc-per-node=2 starts
    monkeypatch.setenv("WORLD_SIZE", "4")
    check_trainer_launch(
        TrainerConfig(accelerator="cpu", strategy="ddp", devices=2, num_nodes=2), warn=False
    )
    # torchrun with one process: one trainer process is what it started
    monkeypatch.setenv("WORLD_SIZE", "1")
    check_trainer_launch(TrainerConfig(accelerator="cpu"), warn=False)


def test_a_resume_inside_an_epoch_on_more_processes_is_refused_fewer_is_fine(monkeypatch):
    from protein_performer.config.schema import TrainerConfig
    from protein_performer.training.preflight import _check_resume_processes

    def ckpt(world: int, batches: int) -> dict:
        state = {"epoch": 3, "batches": batches, "world_size": world}
        return {"loops": {"fit_loop": {"state_dict": {"combined_loader": [state]}}}}

    with pytest.raises(ConfigError, match="stopped inside an epoch on 1 process; resumed on 2"):
        _check_resume_processes(ckpt(1, 5), TrainerConfig(devices=2))
    _check_resume_processes(ckpt(2, 5), TrainerConfig(devices=1))  # fewer: goes on exactly
    _check_resume_processes(ckpt(1, 0), TrainerConfig(devices=2))  # at an epoch's start
    _check_resume_processes({"loops": {}}, TrainerConfig(devices=2))  # older checkpoints
    # a launcher that sets no WORLD_SIZE (Slurm's own variables): the trainer's count holds
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "4")
    _check_resume_processes(ckpt(2, 5), TrainerConfig(devices=1))
    with pytest.raises(ConfigError, match="on 2 processes; resumed on 3"):
        _check_resume_processes(ckpt(2, 5), TrainerConfig(devices=3))


def test_the_resume_check_counts_devices_given_as_lists_strings_or_auto(monkeypatch):
    from protein_performer.config.schema import TrainerConfig
    from protein_performer.training.preflight import _check_resume_processes, planned_devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    gpu = {"accelerator": "gpu"}
    for devices, count in [
        (2, 2), ("2", 2), ([0, 1, 2], 3), ("0,1", 2), ("auto", 4), (-1, 4), ("-1", 4),
    ]:  # fmt: skip
        assert planned_devices(TrainerConfig(devices=devices, **gpu)) == count, devices
    assert planned_devices(TrainerConfig(accelerator="cpu", devices="auto")) == 1
    assert planned_devices(TrainerConfig(accelerator="mps", devices="auto")) is None
    state = {"epoch": 3, "batches": 5, "world_size": 2}
    ckpt = {"loops": {"fit_loop": {"state_dict": {"combined_loader": [state]}}}}
    # trainer=ddp's devices: auto on a 4-GPU node, and a list of four
    for devices in ("auto", [0, 1, 2, 3]):
        with pytest.raises(ConfigError, match="on 2 processes; resumed on 4"):
            _check_resume_processes(ckpt, TrainerConfig(devices=devices, **gpu))
    # under a launcher (torchrun --nproc-per-node=2 on the 4-GPU node) its count is the one
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setenv("WORLD_SIZE", "2")
    _check_resume_processes(ckpt, TrainerConfig(devices="auto", **gpu))
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ConfigError, match="on 2 processes; resumed on 3"):
        _check_resume_processes(ckpt, TrainerConfig(devices="auto", **gpu))


def test_torchrun_with_devices_left_to_lightning_is_not_refused(monkeypatch):
    from protein_performer.config.schema import TrainerConfig
    from protein_performer.training.preflight import check_trainer_launch

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("NODE_RANK", "0")
    for devices in ("auto", -1):
        check_trainer_launch(
            TrainerConfig(accelerator="cpu", strategy="ddp", devices=devices), warn=False
        )


def test_library_configs_take_what_python_users_write():
    """From Python: a section as a dict, one path as a string (they failed deep inside)."""
    cfg = TrainConfig(model={"dim": 64, "heads": 4}, data=DataConfig(files="a.fasta"))
    assert isinstance(cfg.model, ModelConfig) and cfg.model.dim == 64
    assert cfg.data.files == ["a.fasta"] and DataConfig(val_files=Path("v.fa")).val_files == [
        "v.fa"
    ]
    with pytest.raises(ConfigError, match=r"optim\.learning_rate is not a key of optim .*lr"):
        TrainConfig(optim={"learning_rate": 1e-3})


def test_bf16_true_is_refused_where_it_would_cast_rotary_buffers():
    from protein_performer.config.schema import ModelConfig, TrainConfig, TrainerConfig

    def cfg(**model):
        trainer = TrainerConfig(precision="bf16-true")
        return TrainConfig(
            model=ModelConfig(**model), trainer=trainer, data=DataConfig(files="x.fa")
        )

    with pytest.raises(ConfigError, match=r"rotary frequencies in bf16.*use bf16-mixed"):
        validate_train_config(cfg(attention="transformer", position="rotary"))
    with pytest.raises(ConfigError, match=r"rotary frequencies in bf16"):
        validate_train_config(cfg(attention="performer_relu", position="rotary"))
    validate_train_config(cfg(attention="transformer"))  # learned positions, exact: nothing cast
    # FAVOR keeps its projections and statistics in full precision under the cast
    validate_train_config(cfg(attention="performer_softmax"))


def test_fsdp_is_refused_with_what_it_cannot_do():
    from protein_performer.config.schema import (
        ModelConfig,
        TrainAnalysisConfig,
        TrainConfig,
        TrainerConfig,
    )

    fsdp = TrainerConfig(strategy="fsdp", accelerator="gpu")
    data = DataConfig(files="x.fa")
    with pytest.raises(ConfigError, match="similarity_every_n_steps runs the model on rank 0"):
        analysis = TrainAnalysisConfig(similarity_every_n_steps=10)
        validate_train_config(TrainConfig(trainer=fsdp, analysis=analysis, data=data))
    softmax = ModelConfig(attention="performer_softmax")
    with pytest.raises(ConfigError, match=r"running OPRF statistics.*FSDP does not"):
        validate_train_config(
            TrainConfig(trainer=fsdp, model=softmax, objective="causal", data=data)
        )
    validate_train_config(TrainConfig(trainer=fsdp, model=softmax, data=data))  # per batch


@pytest.mark.parametrize(
    ("given", "meant"), [("32", "32-true"), ("bf16", "bf16-mixed"), ("16", "16-mixed")]
)
def test_lightnings_short_precision_names_are_read(given, meant):
    from protein_performer.config.schema import TrainerConfig

    cfg = TrainConfig(trainer=TrainerConfig(precision=given), data=DataConfig(files="x.fa"))
    validate_train_config(cfg)
    assert cfg.trainer.precision == meant


@pytest.mark.parametrize("seed", [-1, 2**32, True, 1.5])
def test_seeds_outside_what_numpy_takes_are_one_line_errors(seed) -> None:
    """seed_everything and numpy refuse them with a traceback deep in a run."""
    from protein_performer.config.schema import GenerateConfig, SimilarityConfig
    from protein_performer.config.validate import validate_analysis_config, validate_eval_config

    cfg = compose_job("train", []).config
    cfg.seed = seed
    with pytest.raises(ConfigError, match=r"^seed must be an integer in 0\.\.4294967295"):
        validate_train_config(cfg)
    with pytest.raises(ConfigError, match=r"^seed must be an integer"):
        validate_eval_config(EvalConfig(checkpoint="x.ckpt", fasta="x.fa", seed=seed))
    for kind in (SimilarityConfig, GenerateConfig):
        with pytest.raises(ConfigError, match=r"^seed must be an integer"):
            validate_analysis_config(kind(seed=seed))
    cfg.seed = 2**32 - 1
    validate_train_config(cfg)
    import numpy as np

    cfg.seed = np.int64(3)  # a sweep over np.arange(...)
    validate_train_config(cfg)


def test_the_homologs_recipe_composes_and_pair_partners_is_checked():
    msa = compose_job(
        "train", ["experiment=homologs_msa", "data.clusters=c", "data.pair_homologs=h"]
    ).config
    assert msa.data.pair_homologs == "h" and msa.data.max_length == 4096
    assert msa.data.pair_partners == 32 and msa.model.exact_layers == [-1]
    deep = compose_job(
        "train", ["experiment=homologs_deep", "data.clusters=c", "data.pair_homologs=h"]
    ).config
    assert (deep.data.max_length, deep.data.pair_partners, deep.optim.lr) == (8192, 64, 3e-4)
    assert deep.model == msa.model and deep.data.pair_alone == msa.data.pair_alone
    job = compose_job("train", ["experiment=homologs", "data.clusters=c.tsv"])
    d = job.config.data
    assert d.packing == "pairs" and d.pair_partners == 8 and d.max_length == 1024
    assert job.config.model.exact_layers == [-1] and job.config.model.qkv_conv == 9
    assert "data.pair_partners needs data.packing=pairs" in _error(["data.pair_partners=3"])
    assert "data.pair_partners must be" in _error(
        ["experiment=homologs", "data.clusters=c.tsv", "data.pair_partners=0"]
    )
    assert "does not work with data.pair_fill or align.weight" in _error(
        ["experiment=homologs", "data.clusters=c.tsv", "align.weight=1"]
    )


def test_the_analysis_rooms_rules_are_checked_when_a_command_is_composed():
    # score's method names and generate's sampling settings are analysis's own checks (config
    # does not import analysis); the command line still runs them before any work
    score = ["mutations=m.csv", "out=o.csv", "sequence=MKT"]
    assert _error([*score, "method=[]"], "score").startswith("method: give at least one of")
    assert _error([*score, "method=marginal"], "score") == (
        "method='marginal' is not valid; choose one of: masked-marginal, wt-marginal, "
        "pseudo-ll, log-likelihood"
    )
    compose_job("score", [*score, "method=[masked_marginal,ll]"])  # aliases are fine
    gen = ["checkpoint=c.ckpt", "out=g.fasta"]
    assert _error([*gen, "temperature=0"], "generate").startswith("temperature must be")
    assert _error([*gen, "min_length=9", "max_length=10"], "generate").startswith("min_length")


def test_rows_read_at_their_columns_and_a_model_that_reads_them_go_together():
    base = ["experiment=homologs_columns", "data.clusters=c", "data.pair_homologs=h"]
    cfg = compose_job("train", base).config
    validate_train_config(cfg)
    assert cfg.data.pair_columns and cfg.model.context_positions == "columns"
    assert cfg.model.nope_layers == [] and cfg.data.pair_partners == 16
    for extra, match in (
        (["data.pair_columns=false"], "go together"),
        (["model.context_positions=window"], "go together"),
        (["data.pair_mask=all"], "pair_columns needs data.pair_mask=protein"),
        (["model.position=learned", "model.nope_layers=[]"], "context_positions=columns needs"),
        (["model.context_positions=rows"], "context_positions"),
        (
            ["data.pair_column_crop=widest"],
            "pair_column_crop='widest' is not valid; choose one of: partners, drawn",
        ),
    ):
        with pytest.raises(ConfigError, match=match):
            validate_train_config(compose_job("train", [*base, *extra]).config)
    assert cfg.data.pair_column_crop == "partners"  # the shipped recipe: every crop for 16
    deep = ["experiment=homologs_columns_deep", "data.clusters=c", "data.pair_homologs=h"]
    cfg = compose_job("train", deep).config
    validate_train_config(cfg)
    assert (cfg.data.pair_partners, cfg.data.pair_column_crop) == (64, "drawn")
    with pytest.raises(ConfigError, match=r"pair_column_crop sizes the crop of data\.pair_columns"):
        pairs = ["experiment=homolog_pairs", "data.clusters=c", "data.pair_column_crop=drawn"]
        validate_train_config(compose_job("train", pairs).config)


def test_analysis_options_are_checked_when_given_and_left_alone_when_not() -> None:
    from protein_performer.config.schema import ExtractConfig, SimilarityConfig
    from protein_performer.config.validate import check_truncate, validate_analysis_config

    validate_analysis_config(
        SimilarityConfig(out="sim", fasta="x.fa")
    )  # n_proteins, max_length unset: fine
    for key in ("n_proteins", "max_length"):
        with pytest.raises(ConfigError, match=rf"^{key} must be"):
            validate_analysis_config(SimilarityConfig(out="sim", fasta="x.fa", **{key: 0}))
    assert [check_truncate(v) for v in ("auto", "TRUE", True, "false", False)] == [
        "auto", True, True, False, False,
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="truncate must be auto, true or false"):
        check_truncate("sometimes")
    cfg = ExtractConfig(out="maps", fasta="x.fa", truncate="auto")
    validate_analysis_config(cfg)
    assert cfg.truncate == "auto"


def test_context_settings_without_a_context_are_refused() -> None:
    from protein_performer.config.validate import validate_eval_config

    base = {"checkpoint": "x.ckpt", "fasta": "x.fa"}
    validate_eval_config(EvalConfig(**base))
    with pytest.raises(ConfigError, match="context_max_proteins set without context="):
        validate_eval_config(EvalConfig(**base, context_max_proteins=5))
    validate_eval_config(EvalConfig(**base, context="hits.fasta", context_max_proteins=5))


def test_optimizer_settings_are_checked() -> None:
    cfg = compose_job("train", []).config
    cfg.optim.min_lr_ratio = 0.0  # decay to nothing: allowed
    validate_train_config(cfg)
    for ratio in (-0.1, 1.5):
        cfg.optim.min_lr_ratio = ratio
        with pytest.raises(ConfigError, match=r"optim.min_lr_ratio must be in \[0, 1\]"):
            validate_train_config(cfg)
    cfg.optim.min_lr_ratio = 0.1
    for betas in ([0.9, 1.0], [0.9], [-0.1, 0.9]):
        cfg.optim.betas = betas
        with pytest.raises(ConfigError, match=r"optim.betas must be two numbers in \[0, 1\)"):
            validate_train_config(cfg)


def test_an_error_hydra_does_not_name_keeps_its_own_words():
    from omegaconf.errors import ValidationError

    from protein_performer.cli.overrides import to_config_error

    plain = to_config_error(RuntimeError("the config store is locked\nmore detail"), "train")
    assert str(plain) == "the config store is locked more detail"
    assert str(to_config_error(RuntimeError(""), "train")) == "RuntimeError"  # nothing to say
    chained = RuntimeError("composition failed")
    chained.__cause__ = ValueError("underneath")
    assert str(to_config_error(chained, "train")) == "composition failed"
    bare = ValidationError("Value 'abc' could not be converted to Integer")
    assert "abc" in str(to_config_error(bare, "train"))  # no key: the message alone
