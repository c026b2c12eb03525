"""The Python blocks of the README and of the guide (docs/guide/*.md) run as written, from the
checkout (where their paths point)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def python_blocks(md: Path) -> list[str]:
    return PYTHON_BLOCK.findall(md.read_text(encoding="utf-8"))


BLOCKS = python_blocks(ROOT / "README.md")
GUIDE_BLOCKS = [
    (md.relative_to(ROOT).as_posix(), index, block)
    for md in sorted((ROOT / "docs" / "guide").glob("*.md"))
    for index, block in enumerate(python_blocks(md))
]


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), {})


def test_the_guide_has_python_blocks():
    pages = {page for page, _, _ in GUIDE_BLOCKS}
    assert {"docs/guide/python-api.md", "docs/guide/attention-core.md"} <= pages


@pytest.mark.slow
@pytest.mark.parametrize(
    ("page", "index", "block"),
    GUIDE_BLOCKS,
    ids=[f"{page.removeprefix('docs/guide/')}-{index}" for page, index, _ in GUIDE_BLOCKS],
)
def test_guide_python_block_runs(page, index, block, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(block, f"{page} python block {index}", "exec"), {})
