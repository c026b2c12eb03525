"""benchmarks/README.md is a guide to the scripts (what each measures, the command, the current
answer with its JSON), not a results log: the dated runs live in the lab notebook."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "benchmarks" / "README.md"


def test_the_benchmarks_readme_is_short_and_names_every_script():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    scripts = sorted(
        p.name
        for p in (ROOT / "benchmarks").iterdir()
        if p.suffix in (".py", ".sh") and not p.name.startswith("_")
    )
    missing = [s for s in scripts if f"`{s}`" not in text and f"benchmarks/{s}" not in text]
    assert not missing, missing


def test_the_lab_notebook_is_in_date_order():
    text = (ROOT / "docs" / "lab-notebook.md").read_text(encoding="utf-8")
    dates = re.findall(r"^## (\d{4}-\d{2}-\d{2})", text, flags=re.M)
    assert len(dates) > 5 and dates == sorted(dates), dates
