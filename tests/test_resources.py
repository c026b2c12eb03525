"""Hints for input paths that do not exist: the shipped sample, the presets' proteomes."""

from __future__ import annotations

import pytest

from protein_performer.cli.main import main
from protein_performer.utils.resources import missing_path_hint, project_path, project_root


def test_a_shipped_file_named_from_another_directory_is_pointed_to(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    sample = project_path("data/simulated_families.fasta.gz")
    hint = missing_path_hint("data/simulated_families.fasta.gz")
    assert hint == f" (the shipped simulated_families.fasta.gz is at {sample})"
    assert missing_path_hint("data/nothing_like_it.fasta") == ""


def test_a_path_leading_out_of_the_package_is_no_shipped_file(monkeypatch, tmp_path):
    import protein_performer.utils.resources as resources

    root = tmp_path / "checkout"
    (root / "data").mkdir(parents=True)
    (root / "data" / "sample.fa").write_text(">a\nMKV\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "other.fa").write_text(">b\nMKV\n")
    monkeypatch.setattr(resources, "project_root", lambda: root)
    monkeypatch.setattr(resources, "resources_dir", lambda: root / "pkg" / "_resources")
    monkeypatch.chdir(tmp_path)  # neither path exists from here
    assert "the shipped sample.fa is at" in missing_path_hint("data/sample.fa")
    assert "shipped" not in missing_path_hint("../shared/other.fa")  # beside it, not in it


def test_the_presets_proteomes_say_where_they_are_read_from(tmp_path):
    beside = project_root().parent / "shared" / "data" / "uniprot_UPX.fasta"
    assert "reads the proteomes of ../shared/data beside a checkout" in missing_path_hint(beside)
    assert missing_path_hint(tmp_path / "mine.fasta") == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["data", "stats", "data/simulated_families.fasta.gz"],
        ["train", "data.files=[data/simulated_families.fasta.gz]"],
        ["train", "experiment=demo", "data.clusters=data/simulated_families.members.tsv"],
    ],
)
def test_commands_name_the_shipped_sample_when_run_elsewhere(argv, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "(the shipped simulated_families." in err and str(project_root()) in err
    assert not (tmp_path / "outputs").exists()


def test_only_paths_inside_the_shared_data_folder_get_the_proteomes_hint():
    parent = project_root().parent
    inside = "reads the proteomes of ../shared/data"
    assert inside in missing_path_hint(parent / "shared" / "data" / "sub" / "x.fasta")
    # a sibling whose name starts the same is another folder
    for other in ("data2", "data_old", "datasets"):
        assert missing_path_hint(parent / "shared" / other / "x.fasta") == "", other
    assert missing_path_hint(parent / "shared2" / "data" / "x.fasta") == ""
    assert missing_path_hint(parent / "shared" / "x.fasta") == ""


def test_importing_the_package_bounds_onednns_kernel_cache_unless_the_user_set_it():
    import os
    import subprocess
    import sys

    code = "import os, protein_performer; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'])"
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "64", run.stderr
    env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = "8"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.stdout.strip() == "8"
