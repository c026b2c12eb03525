"""benchmarks/device_check.py (the GPU run's correctness gate) passes and can fail."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_device_check_on_cpu_passes_and_fails_at_an_impossible_tolerance(capsys):
    check = _load()
    assert check.main(["--device", "cpu", "--length", "300", "--bf16-length", "512"]) == 0
    out = capsys.readouterr().out
    assert out.count("float32 on cpu vs float64 CPU") == 8 and out.strip().endswith("PASS")
    assert out.count("blocks=auto") == 4 and out.count("blocks=75 ") == 4
    # float32 cannot match float64 to 1e-12: the gate must say so
    assert (
        check.main(["--device", "cpu", "--length", "300", "--bf16-length", "512", "--tol", "1e-12"])
        == 1
    )
    assert capsys.readouterr().out.strip().endswith("FAIL")
