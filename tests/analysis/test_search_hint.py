"""``score context=`` with few homologs from a one-round search suggests profile rounds
(``data search --iterations 3``); the rounds a search used are read from its manifest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from protein_performer.analysis.dms.homologs import read_scan_context
from protein_performer.analysis.dms.notes import FEW_HOMOLOGS, context_notes
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.data.search import FORMAT, search_rounds

ALPHABET = default_alphabet()
WT = "".join(np.random.default_rng(7).choice(list(STANDARD_AMINO_ACIDS), 60))
HINT = "profile rounds (data search --iterations 3)"


def _variant(seed: int) -> str:
    rng = np.random.default_rng(seed)
    out = list(WT)
    for i in rng.choice(len(WT), 12, replace=False):  # 80 % identical: aligns above chance
        out[i] = rng.choice([a for a in STANDARD_AMINO_ACIDS if a != WT[i]])
    return "".join(out)


def _hits(folder: Path, n: int, rounds: int | None = None, fmt: str = FORMAT) -> Path:
    folder.mkdir()
    path = folder / "hits.fasta"
    path.write_text("".join(f">h{k}/1-60 query=wt\n{_variant(k)}\n" for k in range(n)))
    if rounds is not None or fmt != FORMAT:
        params = {} if rounds is None else {"iterations": rounds}
        (folder / "manifest.json").write_text(json.dumps({"format": fmt, "params": params}))
    return path


def _notes(path: Path) -> str:
    return context_notes(read_scan_context(path, ALPHABET, WT, None), {}, causal=True)


def test_few_homologs_from_one_round_get_the_hint_and_profile_rounds_do_not(tmp_path):
    assert FEW_HOMOLOGS == 5
    assert f"; only 2 homologs: a search in {HINT}" in _notes(_hits(tmp_path / "a", 2))
    assert "; only 1 homolog: " in _notes(_hits(tmp_path / "b", 1, rounds=1))
    assert "only 4 homologs" in _notes(_hits(tmp_path / "c", 4, rounds=1))
    assert HINT not in _notes(_hits(tmp_path / "d", 5, rounds=1))  # enough to read
    assert HINT not in _notes(_hits(tmp_path / "e", 2, rounds=2))  # already in rounds
    assert HINT in _notes(_hits(tmp_path / "f", 2, rounds=None, fmt="other"))


def test_an_alignment_with_few_rows_gets_no_search_hint(tmp_path):
    path = tmp_path / "msa.a3m"
    path.write_text(f"#60\t1\n>wt\n{WT}\n>h0\n{_variant(0)}\n>h1\n{_variant(1)}\n")
    ctx = read_scan_context(path, ALPHABET, WT, None)
    assert ctx.msa is not None and len(ctx.used) == 2
    assert HINT not in context_notes(ctx, {}, causal=True)


def test_search_rounds_reads_the_manifest_beside_hits_fasta(tmp_path):
    assert search_rounds(_hits(tmp_path / "a", 1, rounds=3)) == 3
    assert search_rounds(_hits(tmp_path / "b", 1, rounds=None, fmt=FORMAT)) is None  # none
    (tmp_path / "b" / "manifest.json").write_text(json.dumps({"format": FORMAT}))
    assert search_rounds(tmp_path / "b" / "hits.fasta") == 1  # written before the option
    assert search_rounds(_hits(tmp_path / "c", 1, rounds=3, fmt="other")) is None
    (tmp_path / "c" / "manifest.json").write_text("{not json")
    assert search_rounds(tmp_path / "c" / "hits.fasta") is None
    (tmp_path / "a" / "mine.fasta").write_text(">x\nMKV\n")
    assert search_rounds(tmp_path / "a" / "mine.fasta") is None  # not the search's own file
