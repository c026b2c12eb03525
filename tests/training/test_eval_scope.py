"""Which files evaluate takes for the training run's own: by any path that leads to them, or
moved (the same file names), never other files."""

from __future__ import annotations

import os

from protein_performer.evaluation.scope import same_files, training_files


def test_the_runs_files_are_known_by_any_path_or_by_name(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    a, b = run / "a.fasta", run / "b.fasta"
    for f in (a, b):
        f.write_text(">x\nMKV\n")
    stored = [str(a), str(b)]
    link = tmp_path / "link.fasta"
    os.symlink(a, link)
    assert same_files([str(b), str(a)], stored)  # any order
    assert same_files([str(link), str(b)], stored)  # a link to one of them
    assert same_files(["/elsewhere/a.fasta", "/elsewhere/b.fasta"], stored)  # moved
    assert not same_files([str(a)], stored)  # part of them
    assert not same_files([str(a), str(tmp_path / "c.fasta")], stored)
    assert not same_files([str(a)], None) and not same_files([str(a)], [])
    given = [str(link), "/elsewhere/b.fasta", str(tmp_path / "c.fasta")]
    assert training_files(given, stored) == given[:2]
    assert training_files(given, None) == []
