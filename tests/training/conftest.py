from __future__ import annotations

from pathlib import Path

import pytest

from tests.training.helpers import write_fasta


@pytest.fixture
def tiny_fasta(tmp_path: Path) -> Path:
    return write_fasta(tmp_path / "tiny.fasta")
