"""The device-machine shell scripts of benchmarks/: syntax, and what _device_env.sh decides."""

from __future__ import annotations

import subprocess

import pytest

from tests.benchmark_scripts import BENCH

SCRIPTS = sorted(BENCH.glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)


def _source_env(cwd, py: str) -> subprocess.CompletedProcess:
    line = f'PY={py}; . "{BENCH / "_device_env.sh"}"; echo "data=$pp_data"'
    return subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True)


def test_device_env_without_packages_or_wheels_stops_with_the_fix(tmp_path) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    done = _source_env(work, "false")  # "python" that cannot import hydra
    assert done.returncode == 2
    assert "run benchmarks/gpu_prepare.sh here and carry .whl" in done.stderr


def test_device_env_reads_shared_data_where_it_exists_else_the_carried_copy(tmp_path) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    done = _source_env(work, "true")  # the packages import: nothing installed
    assert done.returncode == 0 and done.stdout.strip() == "data=.gpudata/data"
    (tmp_path / "shared" / "data").mkdir(parents=True)
    done = _source_env(work, "true")
    assert done.stdout.strip() == "data=../shared/data"


def test_gpu_prepare_never_replaces_a_whl_folder_of_other_files(tmp_path) -> None:
    (tmp_path / "benchmarks").mkdir()
    script = tmp_path / "benchmarks" / "gpu_prepare.sh"
    script.write_text((BENCH / "gpu_prepare.sh").read_text())
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl" / "notes.txt").write_text("mine")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 2 and ".whl holds files that are not wheels" in done.stderr
    assert (tmp_path / ".whl" / "notes.txt").read_text() == "mine"
