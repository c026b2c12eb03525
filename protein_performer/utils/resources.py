"""Where the project's own files are: the checkout, or an installed wheel's ``_resources``."""

from __future__ import annotations

import os
from pathlib import Path

#: The presets' real proteomes: ``../shared/data`` beside a checkout (not shipped).
SHARED_DATA = "shared/data"
#: ``protein_performer/`` itself (this file is ``protein_performer/utils/resources.py``).
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def project_root() -> Path:
    """The directory holding ``protein_performer/`` (and ``conf/``, ``data/`` in a checkout)."""
    return PACKAGE_DIR.parent


def resources_dir() -> Path:
    """Where an installed wheel keeps its copy of ``conf/`` and the sample data (setup.py)."""
    return PACKAGE_DIR / "_resources"


def project_path(relative: str) -> str:
    """Resolver ``${pp_root:data/x.fasta.gz}``: a path relative to the project root (in an
    installed wheel, to its resources), so the embedded sample is found whatever the current
    directory."""
    path = resources_dir() / str(relative)
    if not path.exists():
        path = project_root() / str(relative)
    return os.path.normpath(path)


def missing_path_hint(path: str | os.PathLike) -> str:
    """A hint for an input ``path`` that does not exist: the shipped file of that name (the
    embedded sample, from another directory or in an installed wheel), or the presets' real
    proteomes, which live beside a checkout only; "" when neither applies."""
    text = os.fspath(path)
    if os.path.islink(text):
        return " (a symbolic link that leads nowhere: to a missing file, or in a loop)"
    if not os.path.isabs(text):
        shipped = Path(project_path(text))
        inside = any(shipped.is_relative_to(root) for root in (resources_dir(), project_root()))
        if shipped.exists() and inside:
            return f" (the shipped {shipped.name} is at {shipped})"
    beside = os.path.normpath(project_root().parent / SHARED_DATA)
    if os.path.normpath(os.path.abspath(text)).startswith(beside + os.sep):
        return (
            f" (this preset reads the proteomes of ../{SHARED_DATA} beside a checkout of "
            "protein-performer; give your own with data.files=[a.fasta,b.fasta])"
        )
    return ""
