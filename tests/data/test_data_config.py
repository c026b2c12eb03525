"""data/config.py: DataConfig, its option lists and its one validation, which a run's config
and ProteinDataModule both use."""

from __future__ import annotations

import sys

import pytest

from protein_performer.data.alphabet import InvalidPolicy
from protein_performer.data.config import DataConfig
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError

SRC = FlatSource.from_strings(["ACDEFG", "KLMN"])


@pytest.mark.parametrize(
    ("settings", "rule"),
    [
        ({"packing": "family"}, "packing=family needs {p}mode=concat"),
        ({"mode": "concat", "packing": "family", "family_spread": 2, "clusters": "c"}, None),
        ({"mode": "concat", "family_spread": 2}, "family_spread > 1 needs {p}packing=family"),
        ({"min_members": 2}, "min_members > 1 needs {p}packing=family or pairs"),
        ({"pair_fill": True}, "pair_fill needs {p}packing=pairs"),
        ({"packing": "pairs"}, "packing=pairs needs {p}clusters"),
        (
            {"sample": "cluster", "mode": "concat", "clusters": "c"},
            "sample=cluster needs {p}mode=crop",
        ),
        ({"pair_copy": 1.5}, "pair_copy must be a number from 0 to 1"),
        ({"mask_prob": 1.0}, "mask_prob must be in (0, 1)"),
        ({"max_length": 2}, "max_length must be an integer >= 3"),
        ({"split_fractions": [0.5, 0.5, 0.5]}, "split_fractions: split fractions must sum to 1"),
    ],
)
def test_one_rule_says_the_same_from_a_run_config_and_from_the_data_module(settings, rule):
    cfg = DataConfig(**settings)
    if rule is None:
        cfg.validate()
        ProteinDataModule(cfg, train_source=SRC)
        return
    for prefix, build in (
        ("data.", lambda: cfg.validate()),  # as validate_train_config calls it
        ("", lambda: ProteinDataModule(train_source=SRC, **settings)),
        ("", lambda: ProteinDataModule(cfg, train_source=SRC)),
    ):
        with pytest.raises(ConfigError) as e:
            build()
        assert str(e.value).startswith(prefix + rule.format(p=prefix)), str(e.value)


def test_the_data_module_takes_a_data_config_and_settings_over_it():
    cfg = DataConfig(mode="concat", max_length=64, toks_per_batch=256, seed=3, mask_prob=0.2)
    dm = ProteinDataModule(cfg, objective="causal", train_source=SRC, seed=5)
    assert (dm.mode, dm.max_length, dm.toks_per_batch, dm.objective) == (
        "concat",
        64,
        256,
        "causal",
    )
    assert dm.seed == 5 and cfg.seed == 3  # the argument wins; the config is not changed
    assert dm.config == DataConfig(
        mode="concat", max_length=64, toks_per_batch=256, seed=5, mask_prob=0.2
    )
    # no config: max_length left unset is the mode's default, as before
    assert ProteinDataModule(train_source=SRC, mode="concat").max_length == 8192
    assert ProteinDataModule(train_source=SRC).max_length == 1024
    assert ProteinDataModule(train_source=SRC, max_length=None, mode="concat").max_length == 8192
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_len'"):
        ProteinDataModule(train_source=SRC, max_len=10)
    with pytest.raises(ConfigError, match="config must be a DataConfig; got dict"):
        ProteinDataModule({"mode": "crop"}, train_source=SRC)


def test_the_training_builder_hands_over_the_data_section():
    from protein_performer.config.schema import TrainConfig
    from protein_performer.training.builders import build_datamodule

    cfg = TrainConfig(data={"files": ["x.fa"], "mode": "concat", "max_length": 128, "seed": 7})
    dm = build_datamodule(cfg, cls=ProteinDataModule)
    assert dm.config == cfg.data and (dm.max_length, dm.seed, dm.pair_align) == (128, 7, False)
    pairs = TrainConfig(
        data={"files": ["x.fa"], "packing": "pairs", "clusters": "c.tsv"}, align={"weight": 1.0}
    )
    assert build_datamodule(pairs, cls=ProteinDataModule).pair_align


def test_the_option_lists_are_defined_once_and_found_at_their_old_places():
    from protein_performer.config import schema
    from protein_performer.data import DataConfig as from_package
    from protein_performer.data import cluster, context, datamodule, datasets, masking
    from protein_performer.data import config as data_config

    assert schema.DataConfig is from_package is DataConfig
    assert schema.OBJECTIVES is masking.OBJECTIVES is data_config.OBJECTIVES
    assert schema.DATA_MODES is datamodule.MODES is context.STYLES is data_config.MODES
    assert cluster.PACKINGS is data_config.PACKINGS and cluster.SPLIT_BY is data_config.SPLIT_BY
    assert datasets.PAIR_MASKS is data_config.PAIR_MASKS
    assert datasets.CLUSTER_SAMPLING is data_config.CLUSTER_SAMPLING
    assert tuple(p.value for p in InvalidPolicy) == data_config.INVALID_POLICIES


def test_the_data_config_imports_without_torch():
    import subprocess

    code = (
        "import sys, protein_performer.config.schema, protein_performer.config.validate; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
