"""The fused CPU kernel's set-up: `make venv`'s build command runs without runpy's warning, and
a build is never shared by two spellings of one environment (ninja rebuilt it "out of date")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from protein_performer.attention.kernels import fused_cpu

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = "/usr/bin/g++ (g++ 12.2)"


def test_the_build_name_follows_every_string_torchs_build_command_holds(monkeypatch, tmp_path):
    """build.ninja names the compiler as CXX spells it, the source and torch's directories as
    imported: the same files under another spelling must get their own build, not rebuild this
    one in place at each switch (what "recompiled ... (out of date)" after `make demo` was)."""
    monkeypatch.setenv("CXX", "c++")
    name = fused_cpu.build_name(fused_cpu.build_key(b"source", IDENTITY))
    monkeypatch.setenv("CXX", "/usr/bin/c++")  # the same compiler, resolved alike
    assert fused_cpu.build_name(fused_cpu.build_key(b"source", IDENTITY)) != name
    monkeypatch.setenv("CXX", "c++")
    link = tmp_path / "checkout"
    link.symlink_to(fused_cpu.SOURCE.parent)  # a symlinked checkout: resolves to the same file
    monkeypatch.setattr(fused_cpu, "SOURCE", link / fused_cpu.SOURCE.name)
    assert fused_cpu.build_key(b"source", IDENTITY)["source_path"] == str(
        (link / fused_cpu.SOURCE.name).resolve()
    )
    assert fused_cpu.build_name(fused_cpu.build_key(b"source", IDENTITY)) != name


def test_the_makefile_builds_the_kernel_without_a_runpy_warning():
    line = next(
        line.strip()
        for line in (ROOT / "Makefile").read_text().splitlines()
        if "--build" in line and "protein_performer.attention" in line
    )
    module = re.search(r"-m (\S+) --build", line)
    assert module, line
    env = {**os.environ, "PP_FUSED_KERNEL": "off"}  # the import, not a compile
    done = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", module[1], "--build"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "RuntimeWarning" not in done.stderr, done.stderr
    assert "PP_FUSED_KERNEL=off" in done.stdout
