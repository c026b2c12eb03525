"""``protein_performer.load``: a shipped checkpoint by name or a checkpoint file by path ->
(model in eval mode, alphabet), as ESM's ``load_model_and_alphabet``."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import protein_performer
from protein_performer.data.alphabet import default_alphabet
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.checkpoints import load_model, save_model_checkpoint
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM

SEQUENCE = "MKTAYIAKQRQISFVKSHFSRQ"


def test_the_default_model_loads_in_eval_mode_with_its_alphabet():
    model, alphabet = protein_performer.load("default")
    assert isinstance(model, ProteinLM) and not model.training
    assert alphabet.decode(alphabet.encode(SEQUENCE)) == SEQUENCE
    shipped, _ = load_model("default")  # the CLI's checkpoint=default
    for (name, got), (_, want) in zip(
        model.state_dict().items(), shipped.state_dict().items(), strict=True
    ):
        assert torch.equal(got, want), name  # the same stored tensors, not a fresh draw
    assert protein_performer.load()[0].config == model.config  # "default" by default


def test_a_checkpoint_file_loads_by_path(tmp_path):
    torch.manual_seed(0)
    config = ModelConfig(attention="performer_relu", dim=32, depth=1, heads=4, ffn_dim=64)
    alphabet = default_alphabet()
    written = ProteinLM(config, len(alphabet), alphabet.pad_idx).eval()
    path = tmp_path / "mine.ckpt"
    save_model_checkpoint(path, written, alphabet, "mlm")
    ids = torch.tensor([[alphabet.cls_idx, *alphabet.encode(SEQUENCE), alphabet.eos_idx]])
    for given in (path, str(path)):
        model, got = protein_performer.load(given)
        assert got == alphabet and not model.training
        with torch.no_grad():  # the same model, the same calls: the same numbers
            torch.testing.assert_close(model(ids)["logits"], written(ids)["logits"], rtol=0, atol=0)


def test_an_unknown_name_is_a_one_line_error_naming_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"no shipped checkpoint named 'esm2'") as e:
        protein_performer.load("esm2")
    names = (
        "the names are default, homologs, homologs-msa, homologs-deep, homologs-columns, "
        "homologs-columns-deep"
    )
    assert names in str(e.value) and "\n" not in str(e.value)


def test_a_shipped_name_missing_from_the_installation_is_named(monkeypatch):
    from protein_performer.model import checkpoints

    monkeypatch.setitem(checkpoints.SHIPPED_CHECKPOINTS, "homologs", "data/pretrained/gone.ckpt")
    with pytest.raises(DataError, match="the shipped 'homologs' checkpoint is not in this"):
        protein_performer.load("homologs")
    assert not checkpoints.shipped("homologs") and checkpoints.shipped("default")


def test_a_missing_file_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "runs" / "best.ckpt"
    with pytest.raises(DataError, match="checkpoint: no such file") as e:
        protein_performer.load(missing)
    assert str(missing) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_importing_the_package_does_not_import_torch():
    code = (
        "import sys, protein_performer; assert 'torch' not in sys.modules, 'torch imported'; "
        "assert callable(protein_performer.load)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _lineage(before: str, after: str) -> tuple[tuple, tuple]:
    """The shipped checkpoints ``before`` and ``after`` (``(model, metadata)`` each), ``after``
    checked to be ``before``'s architecture trained on (most tensors changed, not a copy);
    skipped where they are not installed."""
    from protein_performer.model.checkpoints import shipped

    if not (shipped(before) and shipped(after)):
        pytest.skip("the shipped homolog checkpoints are not installed")
    old, new = load_model(before), load_model(after)
    assert new[0].config == old[0].config and not new[0].training
    pairs = zip(old[0].state_dict().values(), new[0].state_dict().values(), strict=True)
    assert sum(not torch.equal(a, b) for a, b in pairs) > len(old[0].state_dict()) // 2
    return old, new


def test_the_alignment_model_is_the_homolog_model_trained_on_with_its_split():
    (_, meta1), (_, meta2) = _lineage("homologs", "homologs-msa")
    assert meta2["data"]["max_length"] == 4096 and meta1["data"]["max_length"] == 1024
    # the same held-out clusters: the split's table and its digest are the homolog model's
    assert meta2["data"]["clusters_digest"] == meta1["data"]["clusters_digest"]


def test_the_deep_model_is_the_alignment_model_trained_on_for_depth():
    (_, meta_msa), (_, meta) = _lineage("homologs-msa", "homologs-deep")
    assert (meta["data"]["max_length"], meta["data"]["pair_partners"]) == (8192, 64)
    assert meta_msa["data"]["max_length"] == 4096


def test_the_columns_model_is_the_alignment_model_trained_to_read_columns():
    import dataclasses

    from protein_performer.model.checkpoints import shipped

    if not (shipped("homologs-msa") and shipped("homologs-columns")):
        pytest.skip("the shipped homolog checkpoints are not installed")
    (old, meta_old), (new, meta) = load_model("homologs-msa"), load_model("homologs-columns")
    # the same architecture, rotary positions in every layer, homologs read at their columns
    assert new.config == dataclasses.replace(
        old.config, nope_layers=[], context_positions="columns"
    )
    pairs = zip(old.state_dict().values(), new.state_dict().values(), strict=True)
    assert sum(not torch.equal(a, b) for a, b in pairs) > len(old.state_dict()) // 2
    assert meta["data"]["clusters_digest"] == meta_old["data"]["clusters_digest"]
    assert meta["data"]["pair_columns"] and meta["data"]["max_length"] == 4096
    if not shipped("homologs-columns-deep"):
        return
    deep, meta_deep = load_model("homologs-columns-deep")  # trained on from it, up to 64 a row
    assert deep.config == new.config
    assert meta_deep["data"]["clusters_digest"] == meta["data"]["clusters_digest"]
    assert meta_deep["data"]["pair_partners"] == 64
    assert meta_deep["data"]["pair_column_crop"] == "drawn"


def test_every_shipped_model_names_the_files_it_was_trained_on():
    """evaluate says "the training run's data" of these files (by name on another machine):
    each shipped checkpoint records its run's 14 proteomes, all of them split."""
    from protein_performer.model.checkpoints import SHIPPED_CHECKPOINTS, shipped

    for name in SHIPPED_CHECKPOINTS:
        if not shipped(name):
            continue
        data = load_model(name)[1]["data"]
        names = {f.rsplit("/", 1)[-1] for f in data["files"]}
        assert len(names) == 14 and "uniprot_UP000002311_yeast_s288c.fasta.gz" in names, name
        assert data["held_out_files"] is False and data["split_by"] == "cluster", name


def test_evaluate_from_python_reads_auto_as_the_cli_does(capsys):
    """EvalConfig's checkpoint=auto: the shipped homolog model with homologs, the
    single-protein one without; ``default`` named is read as named."""
    from protein_performer.config.schema import EvalConfig
    from protein_performer.evaluation.evaluate import evaluate
    from protein_performer.model.checkpoints import resolve_checkpoint, shipped

    if not shipped("homologs-msa"):
        pytest.skip("the shipped homolog checkpoint is not installed")
    common = dict(fasta="data/simulated_families.fasta.gz", max_records=12, device="cpu")
    with_homologs = dict(common, clusters="data/simulated_families.members.tsv", context="cluster")
    assert evaluate(EvalConfig(**with_homologs)).checkpoint == "homologs-msa"
    assert evaluate(EvalConfig(**with_homologs, checkpoint="default")).checkpoint == "default"
    alone = evaluate(EvalConfig(**common))
    assert alone.checkpoint == "default" and alone.attention.startswith("performer_relu")
    assert resolve_checkpoint("auto") == resolve_checkpoint("default")
    # the command's configuration leaves it to auto too (conf/evaluate.yaml)
    import json

    from protein_performer.cli.main import main

    args = [f"{k}={v}" for k, v in with_homologs.items() if k != "device"]
    assert main(["evaluate", *args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"] == "homologs-msa"
