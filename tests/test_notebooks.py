"""Every notebook in notebooks/ runs top to bottom (small settings: PP_NOTEBOOK_SMALL=1)."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, monkeypatch, tmp_path, tmp_path_factory) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        "commit notebooks with outputs stripped"
    )
    monkeypatch.setenv("PP_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # the notebooks' run folders (tempfile.mkdtemp) go where pytest cleans up, not to /tmp
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("notebook_runs")))
    # run from another folder: a notebook finds the project's files whatever the working
    # directory (a copy opened elsewhere, code pasted into a script) and writes nothing there
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert ".json not found" not in printed  # the saved benchmark the text describes
    assert "UserWarning" not in printed  # e.g. a plot's style given twice
    assert not list(tmp_path.iterdir())
