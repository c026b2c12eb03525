"""A wheel built from the sdist (no checkout around it) carries the Hydra configs and the
sample data, and the CLI's configs compose from it."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import json, protein_performer
from protein_performer.cli.compose import compose_job
from protein_performer.cli.groups import config_dir, group_options
job = compose_job("train", ["experiment=demo"])
print(json.dumps({"package": protein_performer.__file__, "conf": str(config_dir()),
                  "models": group_options("model"), "files": list(job.config.data.files)}))
"""


def _setuptools_ok() -> bool:
    if importlib.util.find_spec("setuptools") is None:
        return False
    from importlib.metadata import version

    return int(version("setuptools").split(".")[0]) >= 77


def _tracked_copy(dest: Path) -> None:
    """The files git tracks (what a clean clone has), copied to ``dest``."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listing.split("\0")):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


def _run(*args: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(not _setuptools_ok(), reason="needs setuptools >= 77 (the dev extra)")
def test_wheel_from_sdist_ships_configs_and_sample(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _tracked_copy(src)
    # sdist (MANIFEST.in decides what it holds), then a wheel built from the unpacked sdist
    code = "from setuptools import build_meta as b; print(b.build_sdist('../sdist'))"
    sdist = tmp_path / "sdist" / _run("-c", code, cwd=src).strip().splitlines()[-1]
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp_path / "unpacked", filter="data")
        else:  # pragma: no cover - Python without extraction filters
            tar.extractall(tmp_path / "unpacked")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    _run("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(unpacked), cwd=tmp_path)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("protein_performer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    conf = {n.split("_resources/conf/", 1)[1] for n in names if "_resources/conf/" in n}
    assert conf == {str(p.relative_to(REPO / "conf")) for p in (REPO / "conf").rglob("*.yaml")}
    assert "protein_performer/_resources/data/simulated_families.fasta.gz" in names
    assert "protein_performer/_resources/data/simulated_families.members.tsv" in names
    assert "protein_performer/_resources/data/pretrained/performer_relu_14.ckpt" in names
    assert "protein_performer/attention/kernels/csrc/favor_cpu.cpp" in names  # built on first use

    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=env,
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    info = json.loads(out.strip().splitlines()[-1])
    site = (tmp_path / "site").resolve()
    assert Path(info["package"]).resolve().is_relative_to(site)  # not the checkout
    assert Path(info["conf"]).resolve() == site / "protein_performer" / "_resources" / "conf"
    assert info["models"] == sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml"))
    # the demo experiment composes and its data path points into the installed package
    (sample,) = map(Path, info["files"])
    assert sample.is_file() and sample.resolve().is_relative_to(site)
    assert sample.read_bytes() == (REPO / "data" / "simulated_families.fasta.gz").read_bytes()
