"""A preset's clusters table from one command (`data cluster --experiment NAME OUTDIR`), and a
mismatch error that says how the run's table was built instead of blaming the user."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protein_performer.cli.commands import cluster as cluster_command
from protein_performer.cli.main import main
from protein_performer.data import cluster as cluster_lib
from protein_performer.data.cluster import check_run_clustering, members_digest
from protein_performer.data.cluster_recipes import (
    MANIFEST,
    MEMBERS,
    SHIPPED_TABLES,
    describe_recipe,
    preset_recipe,
    table_recipe,
)
from protein_performer.errors import ConfigError, DataError

ECOLI = "uniprot_UP000000625_ecoli_k12.fasta"
YEAST = "uniprot_UP000002311_yeast_s288c.fasta.gz"
PROTEOMES = [
    "uniprot_UP000001014_styphimurium_lt2.fasta.gz",
    "uniprot_UP000001197_panserina_s.fasta.gz",
    "uniprot_UP000001203_cyanothece_atcc51142.fasta.gz",
    "uniprot_UP000001450_pfalciparum_3d7.fasta.gz",
    "uniprot_UP000002483_anabaena_pcc7120.fasta.gz",
    "uniprot_UP000002717_selongatus_pcc7942.fasta.gz",
    "uniprot_UP000008066_cthermophilum.fasta.gz",
    "uniprot_UP000008524_tbrucei_927.fasta.gz",
    "uniprot_UP000008962_styphimurium_sl1344.fasta.gz",
    "uniprot_UP000031513_pknowlesi_h.fasta.gz",
    "uniprot_UP000074855_pberghei_anka.fasta.gz",
    "uniprot_UP000221734_kstuttgartiensis.fasta.gz",
]


def test_the_file_names_are_data_clusters():
    assert (MANIFEST, MEMBERS) == (cluster_lib.MANIFEST, cluster_lib.MEMBERS)


def test_the_preset_lists_its_files_in_the_default_checkpoints_clustering_order():
    """checkpoint=default split by the 14 files read in this order with --keep-order (58,171
    clusters: E. coli, yeast, then the shell glob of proteomes/, i.e. name order); the preset
    listed another order, which gave 58,173 clusters and a refused table."""
    names = [Path(f).name for f in cluster_command.preset_files("cpu_recipe_14")]
    assert names == [ECOLI, YEAST, *PROTEOMES]
    assert preset_recipe("cpu_recipe_14").keep_order
    assert preset_recipe("cpu_recipe_14").options() == ["--keep-order", "--min-seq-id", "0.5"]
    # the homolog model's run read the same files in name order (58,177 clusters)
    homologs = preset_recipe("homologs")
    assert not homologs.keep_order and homologs.options() == ["--min-seq-id", "0.5"]
    assert sorted(Path(f).name for f in cluster_command.preset_files("homologs")) == sorted(names)
    assert preset_recipe("concat8192") == preset_recipe("homolog_pairs")  # the default recipe


def _capture(monkeypatch) -> dict:
    seen: dict = {}

    def fake(inputs, outdir, **kw):
        seen.update(inputs=list(inputs), outdir=outdir, **kw)
        return {"counts": {"clusters": 1}}

    monkeypatch.setattr(cluster_lib, "cluster_fasta", fake)
    monkeypatch.setattr(cluster_command, "_check_shipped_table", lambda *a: None)
    return seen


def test_data_cluster_experiment_runs_the_presets_recipe_and_prints_it(monkeypatch, capsys):
    seen = _capture(monkeypatch)
    assert main(["data", "cluster", "--experiment", "cpu_recipe_14", "c14"]) == 0
    assert [Path(f).name for f in seen["inputs"]] == [ECOLI, YEAST, *PROTEOMES]
    assert seen["outdir"] == "c14" and seen["keep_order"] is True and seen["min_seq_id"] == 0.5
    err = capsys.readouterr().err
    assert "cluster: protein-performer data cluster " in err
    assert err.strip().endswith("c14 --keep-order --min-seq-id 0.5")
    assert main(["data", "cluster", "--experiment", "homologs", "h14"]) == 0
    assert seen["keep_order"] is False and seen["min_seq_id"] == 0.5
    # files listed by hand: the defaults as before
    assert main(["data", "cluster", "a.fa", "b.fa", "out"]) == 0
    assert seen["inputs"] == ["a.fa", "b.fa"] and seen["min_seq_id"] == 0.5
    assert seen["keep_order"] is False


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--experiment", "cpu_recipe_14", "a.fa", "out"], "takes the OUTDIR only"),
        (["--experiment", "cpu_recipe_14", "--keep-order", "out"], "the preset's recipe sets"),
        (["--experiment", "cpu_recipe_14", "--min-seq-id", "0.3", "out"], "recipe sets"),
        (["--experiment", "no_such_preset", "out"], "no preset 'no_such_preset'"),
    ],
)
def test_data_cluster_experiment_refuses_what_would_change_the_table(
    monkeypatch, capsys, argv, message
):
    seen = _capture(monkeypatch)
    assert main(["data", "cluster", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not seen


def _cluster_dir(path: Path, rows: dict[str, str], files: list[str], order: str) -> Path:
    path.mkdir()
    (path / MEMBERS).write_text(
        "cluster_id\tmember_id\n" + "".join(f"{c}\t{m}\n" for m, c in rows.items())
    )
    manifest = {
        "params": {"min_seq_id": 0.4, "coverage": 0.8, "method": "linclust", "file_order": order},
        "sources": [{"path": f"/data/{f}", "sha256": "x", "records": 1} for f in files],
        "counts": {"clusters": len(set(rows.values()))},
    }
    (path / MANIFEST).write_text(json.dumps(manifest))
    return path


def test_a_run_records_how_its_table_was_built_and_a_mismatch_names_it(tmp_path, monkeypatch):
    rows = {"a": "c1", "b": "c1", "c": "c2"}
    table = _cluster_dir(tmp_path / "clusters", rows, ["z.fa", "a.fa"], "as given")
    recipe = table_recipe(table)
    assert recipe == {
        "files": ["z.fa", "a.fa"], "file_order": "as given", "min_seq_id": 0.4,
        "coverage": 0.8, "method": "linclust", "clusters": 2,
    }  # fmt: skip
    assert table_recipe(table / MEMBERS) == recipe
    hand_made = tmp_path / "mine.tsv"
    hand_made.write_text((table / MEMBERS).read_text())
    assert table_recipe(hand_made) is None
    stored = {"clusters": str(table), "clusters_digest": members_digest(rows)}
    stored["clusters_recipe"] = recipe
    assert describe_recipe(stored) == (
        "built by `data cluster` from z.fa, a.fa (as listed, --keep-order, --min-seq-id 0.4: "
        "2 clusters)"
    )
    # re-made into the run's path: refused, saying how the run's table was built
    (table / MEMBERS).write_text("cluster_id\tmember_id\nc1\ta\nc2\tb\nc2\tc\n")
    other = members_digest({"a": "c1", "b": "c2", "c": "c2"})
    with pytest.raises(DataError) as refused:
        check_run_clustering(table, other, stored, "test")
    text = str(refused.value)
    assert "not the one the training run split by (changed since the run: other files" in text
    assert "the run's table was built by `data cluster` from z.fa, a.fa (as listed" in text
    assert "`data cluster` run again into it" not in text  # no blame for what the user did not do
    # the name order said so; no recipe recorded (an older checkpoint): no claim
    stored["clusters_recipe"] = {**recipe, "file_order": "name"}
    assert "(in name order, --min-seq-id 0.4" in describe_recipe(stored)
    del stored["clusters_recipe"]
    with pytest.raises(DataError) as refused:
        check_run_clustering(table, other, stored, "test")
    assert "was built by" not in str(refused.value)


def test_the_shipped_checkpoints_tables_are_named_by_the_command_that_rebuilds_them():
    from protein_performer.model.checkpoints import load_model, shipped

    commands = {
        "default": "--experiment cpu_recipe_14",
        "homologs": "--experiment homologs",
        "homologs-msa": "--experiment homologs",  # trained on from homologs, its split
        "homologs-columns": "--experiment homologs",  # trained on from homologs-msa
        "homologs-columns-deep": "--experiment homologs",  # trained on from homologs-columns
    }
    for name, command in commands.items():
        if not shipped(name):
            pytest.skip(f"checkpoint={name} is not installed")
        stored = load_model(name)[1]["data"]
        assert stored["clusters_digest"] in SHIPPED_TABLES
        text = describe_recipe(stored)
        assert text is not None and command in text, text
        other = "0" * 64
        problem = check_run_clustering(Path("elsewhere.tsv"), other, stored, "test")
        assert problem is not None and command in problem


def test_training_keeps_the_recipe_in_its_split_settings(tmp_path):
    from protein_performer.config.schema import DataConfig
    from protein_performer.training.preflight import split_settings

    rows = {"a": "c1", "b": "c2"}
    table = _cluster_dir(tmp_path / "clusters", rows, ["x.fa"], "name")
    info = split_settings(DataConfig(files=["x.fa"], clusters=str(table), split_by="cluster"))
    assert info["clusters_digest"] == members_digest(rows)
    assert info["clusters_recipe"]["files"] == ["x.fa"]
    assert info["clusters_recipe"]["file_order"] == "name"
    with pytest.raises(ConfigError):
        cluster_command.preset_files("no_such_preset")
