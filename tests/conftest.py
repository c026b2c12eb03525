"""Shared fixtures: paths to the real proteomes in ../shared/data (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO / ".." / "shared" / "data"
ECOLI = SHARED_DATA / "uniprot_UP000000625_ecoli_k12.fasta"
YEAST = SHARED_DATA / "uniprot_UP000002311_yeast_s288c.fasta.gz"
BPTI = SHARED_DATA / "extras" / "BPT1_BOVIN_P00974.fasta"
SAMPLE = REPO / "data" / "simulated_families.fasta.gz"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


@pytest.fixture
def ecoli_fasta() -> Path:
    return _need(ECOLI)


@pytest.fixture
def yeast_fasta() -> Path:
    return _need(YEAST)


@pytest.fixture
def bpti_fasta() -> Path:
    return _need(BPTI)


@pytest.fixture
def sample_fasta() -> Path:
    return _need(SAMPLE)


@pytest.fixture
def kwarg_spy(monkeypatch):
    """``spy(owner, name, key)``: wrap ``owner.name`` so each call's keyword ``key`` is
    appended to the returned list (the call itself goes on as before)."""

    def spy(owner: object, name: str, key: str) -> list:
        seen: list = []
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            seen.append(kwargs[key])
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)
        return seen

    return spy


@pytest.fixture(autouse=True)
def _short_cpu_sample(monkeypatch):
    """Every training start samples /proc/stat for 0.5 s to choose its threads (about 140
    runs in this suite); tests sample 0.05 s. A test of busy_cpus passes its own interval."""
    from protein_performer.utils import devices

    real = devices.busy_cpus
    monkeypatch.setattr(devices, "busy_cpus", lambda seconds=0.05: real(seconds))
    # and no thread change in the middle of a test's run (tests/training/test_thread_governor.py
    # drives the re-check with its own clock)
    from protein_performer.training import thread_governor

    monkeypatch.setattr(thread_governor, "CHECK_EVERY_S", float("inf"))
