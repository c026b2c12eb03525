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
HINT = "data search --iterations 3 (profile rounds) may find more distant ones"


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
    assert f"; only 2 homologs: {HINT}" in _notes(_hits(tmp_path / "a", 2))
    assert "; only 1 homolog: " in _notes(_hits(tmp_path / "b", 1, rounds=1))
    assert "only 4 homologs" in _notes(_hits(tmp_path / "c", 4, rounds=1))
    assert HINT not in _notes(_hits(tmp_path / "d", FEW_HOMOLOGS, rounds=1))  # enough to read
    assert HINT not in _notes(_hits(tmp_path / "e", 2, rounds=2))  # already in rounds
    assert HINT in _notes(
        _hits(tmp_path / "f", 2, rounds=None, fmt="other")
    )  # hits of another tool


def test_the_hint_comes_last_and_not_when_the_user_capped_the_homologs(tmp_path):
    path = _hits(tmp_path / "a", 2, rounds=1)
    with open(path, "a") as fh:
        fh.write(f">copy query=wt\n{WT}\n")  # the wild type itself: left out, and said in brackets
    text = _notes(path)
    assert text.endswith(f"(1 identical to the wild type left out); only 2 homologs: {HINT}")
    ctx = read_scan_context(_hits(tmp_path / "b", 8, rounds=1), ALPHABET, WT, None, 3)
    assert len(ctx.used) == 3 and ctx.beyond_max == 5
    assert HINT not in context_notes(ctx, {}, causal=True)


def test_an_alignment_with_few_rows_gets_no_search_hint(tmp_path):
    path = tmp_path / "msa.a3m"
    path.write_text(f"#60\t1\n>wt\n{WT}\n>h0\n{_variant(0)}\n>h1\n{_variant(1)}\n")
    ctx = read_scan_context(path, ALPHABET, WT, None)
    assert ctx.msa is not None and len(ctx.used) == 2
    assert HINT not in context_notes(ctx, {}, causal=True)


def test_search_rounds_reads_the_manifest_beside_hits_fasta(tmp_path):
    assert search_rounds(_hits(tmp_path / "a", 1, rounds=3)) == 3
    folder = tmp_path / "b"
    path = _hits(folder, 1)
    assert search_rounds(path) is None  # no manifest
    for manifest, rounds in [
        ({"format": FORMAT, "params": {"sensitivity": 5.7}}, 1),  # written before the option
        ({"format": "other", "params": {"iterations": 3}}, None),
        ({"format": FORMAT, "params": None}, None),
        ({"format": FORMAT, "params": {"iterations": "x"}}, None),
        ([FORMAT], None),
    ]:
        (folder / "manifest.json").write_text(json.dumps(manifest))
        assert search_rounds(path) == rounds, manifest
    (folder / "manifest.json").write_text("{not json")
    assert search_rounds(path) is None
    (tmp_path / "a" / "mine.fasta").write_text(">x\nMKV\n")
    assert search_rounds(tmp_path / "a" / "mine.fasta") is None  # not the search's own file
    assert search_rounds(str(tmp_path / "a" / "hits.fasta")) == 3  # a str as well as a Path
