"""Build hook: the wheel carries ``conf/``, the embedded sample (``data/*.fasta.gz``) and the
shipped checkpoint (``data/pretrained/``).

A checkout (and an editable install) reads them from the project root; an installed wheel has
no project root, so they are copied into ``protein_performer/_resources/`` at build time and
:mod:`protein_performer.cli.hydra` falls back to that copy. All metadata lives in
``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
RESOURCES = [
    ("conf", "**/*.yaml"),
    ("data", "*.fasta.gz"),
    ("data", "*.members.tsv"),
    ("data", "pretrained/*.ckpt"),
    ("data", "pretrained/*.md"),
]


class BuildPyWithResources(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the checkout's own conf/ and data/ are used
        dest = Path(self.build_lib) / "protein_performer" / "_resources"
        shutil.rmtree(dest, ignore_errors=True)  # a rebuild must not keep removed configs
        for folder, pattern in RESOURCES:
            for src in sorted((ROOT / folder).glob(pattern)):
                target = dest / src.relative_to(ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)


setup(cmdclass={"build_py": BuildPyWithResources})
