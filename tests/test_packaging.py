"""An installed wheel (no checkout around it) carries the Hydra configs and the sample data."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "protein_performer",
    "conf",
    "data",
)


def _setuptools_ok() -> bool:
    if importlib.util.find_spec("setuptools") is None:
        return False
    from importlib.metadata import version

    return int(version("setuptools").split(".")[0]) >= 77


PROBE = """
import json, protein_performer
from protein_performer.training.hydra_run import config_dir, group_options, project_path
print(json.dumps({"package": protein_performer.__file__, "conf": str(config_dir()),
                  "models": group_options("model"),
                  "sample": project_path("data/simulated_families.fasta.gz")}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not _setuptools_ok(), reason="needs setuptools >= 77 (the dev extra)")
def test_wheel_ships_configs_and_sample(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy: building in place would leave build/ in the checkout
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("protein_performer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    conf = {n.split("_resources/conf/", 1)[1] for n in names if "_resources/conf/" in n}
    assert conf == {str(p.relative_to(REPO / "conf")) for p in (REPO / "conf").rglob("*.yaml")}
    assert "protein_performer/_resources/data/simulated_families.fasta.gz" in names

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
    assert info["models"] == ["performer_relu", "performer_softmax", "transformer"]
    sample = Path(info["sample"])
    assert sample.is_file() and sample.resolve().is_relative_to(site)
    assert sample.read_bytes() == (REPO / "data" / "simulated_families.fasta.gz").read_bytes()
