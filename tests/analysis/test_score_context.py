"""score context=HOMOLOGS: a PSSM baseline from the homologs and the model's masked marginals
with them before the protein in one window, beside the single-sequence score; a file of no
use is a one-line error."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from protein_performer.analysis.dms.homologs import (
    _context_jobs,
    context_marginals,
    read_scan_context,
)
from protein_performer.analysis.dms.notes import context_notes
from protein_performer.analysis.dms.profile import COLUMNS, build_pssm, pssm_scores
from protein_performer.cli.main import main
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.checkpoints import save_model_checkpoint
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM

ALPHABET = default_alphabet()
RNG = np.random.default_rng(7)
WT = "".join(RNG.choice(list(STANDARD_AMINO_ACIDS), 60))


def _variant(seq: str, rng: np.random.Generator, share: float) -> str:
    out = list(seq)
    for i in rng.choice(len(seq), int(share * len(seq)), replace=False):
        out[i] = rng.choice([a for a in STANDARD_AMINO_ACIDS if a != seq[i]])
    return "".join(out)


HOMOLOGS = [_variant(WT, np.random.default_rng(k), 0.15) for k in range(4)]
UNRELATED = ["".join(np.random.default_rng(100 + k).choice(list(STANDARD_AMINO_ACIDS), 60))
             for k in range(3)]  # fmt: skip


def _model(causal: bool = False) -> ProteinLM:
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=256)
    return ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx, causal=causal).eval()


@pytest.fixture
def ckpt(tmp_path):
    save_model_checkpoint(tmp_path / "m.ckpt", _model(), ALPHABET, "mlm")
    return tmp_path / "m.ckpt"


def _fasta(path, records) -> None:
    path.write_text("".join(f">{name}\n{seq}\n" for name, seq in records))


def _rows(tmp_path) -> list[str]:
    rng = np.random.default_rng(1)
    mutants = [f"{WT[i]}{i + 1}{aa}" for i in range(0, 60, 3) for aa in "AGW" if aa != WT[i]]
    with open(tmp_path / "m.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("mutant", "fitness"))
        w.writerows((m, f"{rng.normal():.3f}") for m in mutants)
    return mutants


def _score(ckpt, tmp_path, *extra, out="s.csv"):
    return main(
        [
            "score",
            f"checkpoint={ckpt}",
            f"fasta={tmp_path / 'wt.fa'}",
            f"mutations={tmp_path / 'm.csv'}",
            f"out={tmp_path / out}",
            *extra,
        ]
    )


def test_context_marginals_read_the_masked_site_after_the_homologs() -> None:
    model = _model()
    ids = ALPHABET.encode(WT)
    homologs = [ALPHABET.encode(h) for h in HOMOLOGS[:2]]
    got, info = context_marginals(model, ALPHABET, ids, homologs, [5, 30], max_length=256)
    assert info["mean_homologs_in_window"] == 2 and info["sites"] == 2
    sep, target = [ALPHABET.sep_idx], ids.astype(np.int64).copy()
    target[30] = ALPHABET.mask_idx
    tokens = [ALPHABET.cls_idx, *homologs[0], *sep, *homologs[1], *sep, *target, ALPHABET.eos_idx]
    with torch.no_grad():
        logits = model(torch.tensor([tokens], dtype=torch.long))["logits"][0]
    expected = torch.log_softmax(logits.float(), -1)[len(tokens) - 1 - 60 + 30].numpy()
    np.testing.assert_allclose(got[30], expected, rtol=1e-5, atol=1e-6)
    alone, _ = context_marginals(model, ALPHABET, ids, [], [30], max_length=256)
    assert not np.allclose(alone[30], got[30], atol=1e-4)  # the homologs change what it reads


def test_a_protein_longer_than_half_the_window_is_scored_on_a_window_centred_on_the_site():
    ids = ALPHABET.encode(WT + WT[:40])  # 100 residues, a window of 64 tokens
    homolog = ALPHABET.encode(HOMOLOGS[0] * 2)
    (job,), held = _context_jobs(ids, [homolog], [50], ALPHABET, 64, "crop")
    _, tokens, pos = job
    width = 64 // 2 - 2  # half the window for the protein: 30 residues from 35
    assert len(tokens) <= 64 and held == [1] and tokens[pos] == ALPHABET.mask_idx
    np.testing.assert_array_equal(tokens[-1 - width : -1][: 50 - 35], ids[35:50])
    assert tokens[-1 - width - 1] == ALPHABET.sep_idx and tokens[0] == ALPHABET.cls_idx


def test_score_with_context_adds_the_pssm_and_the_homolog_conditioned_score(
    ckpt, tmp_path, capsys
) -> None:
    mutants = _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("sp|P99999|WT_TEST", WT)])
    hits = [(f"h{k}/1-60 query=sp|P99999|WT_TEST", h) for k, h in enumerate(HOMOLOGS)]
    hits += [("x/1-60 query=OTHER", UNRELATED[0]), ("u/1-60 query=P99999", UNRELATED[1])]
    _fasta(tmp_path / "hits.fasta", hits)
    code = _score(ckpt, tmp_path, f"context={tmp_path / 'hits.fasta'}", "fitness_col=fitness")
    out, err = capsys.readouterr()
    assert code == 0, err
    seconds = json.loads((tmp_path / "s.json").read_text())["context"]["read_seconds"]
    assert 0 <= seconds < 60 and f"(bits); read in {seconds:.1f} s" in out
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert list(got[0])[2:] == [
        "masked_marginal",
        "masked_marginal_context",
        "context_retrieval",
        "pssm",
        "blosum62",
    ]
    pssm = build_pssm(WT, [*HOMOLOGS, UNRELATED[1]])
    assert [h["used"] for h in pssm.homologs] == [True] * 4 + [False]
    np.testing.assert_allclose(
        [float(r["pssm"]) for r in got], pssm_scores(pssm, mutants), rtol=1e-5, atol=1e-5
    )
    logp, _ = context_marginals(
        _model(),
        ALPHABET,
        ALPHABET.encode(WT),
        [ALPHABET.encode(h) for h in HOMOLOGS],
        [int(m[1:-1]) - 1 for m in mutants],
        max_length=256,
    )
    expected = [
        logp[int(m[1:-1]) - 1][ALPHABET.index(m[-1])] - logp[int(m[1:-1]) - 1][ALPHABET.index(m[0])]
        for m in mutants
    ]
    np.testing.assert_allclose(
        [float(r["masked_marginal_context"]) for r in got], expected, rtol=1e-4, atol=1e-4
    )
    # Tranception's retrieval: 0.4 x the model's + 0.6 x log Q(mt) - log Q(wt), Q the
    # PSSM's frequencies
    q = {aa: i for i, aa in enumerate(COLUMNS)}
    profile = [
        math.log(pssm.frequencies[int(m[1:-1]) - 1, q[m[-1]]])
        - math.log(pssm.frequencies[int(m[1:-1]) - 1, q[m[0]]])
        for m in mutants
    ]
    np.testing.assert_allclose(
        [float(r["context_retrieval"]) for r in got],
        0.4 * np.array(expected) + 0.6 * np.array(profile),
        rtol=1e-4,
        atol=1e-4,
    )
    summary = json.loads((tmp_path / "s.json").read_text())
    assert set(summary["spearman"]) == {
        "masked_marginal",
        "masked_marginal_context",
        "context_retrieval",
        "pssm",
        "blosum62",
    }
    assert summary["context"]["homologs"] == 5 and summary["context"]["homologs_used"] == 4
    assert summary["context"]["other_queries_left_out"] == 1
    # 3 of the 4 fit 256 tokens beside the 60 residues (a 4th would leave 11 residues)
    assert (
        "context: 4 of the 5 homologs in" in out and "mean of 3 homologs before the protein" in out
    )
    spearman = out[out.index("Spearman with fitness") :]
    assert all(c in spearman for c in ("masked_marginal ", "masked_marginal_context ", "pssm "))
    # a second run replaces what score wrote
    assert _score(ckpt, tmp_path, f"context={tmp_path / 'hits.fasta'}", "overwrite=true") == 0


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([], "empty"),
        ([(f"u{k}", u) for k, u in enumerate(UNRELATED)], "not homologs of it"),
        ([("h/1-60 query=OTHER", HOMOLOGS[0])], "no homolog names the wild type wt"),
        ([("same", WT)], "are the wild type itself"),
        ([("a query=wt", HOMOLOGS[0]), ("b", HOMOLOGS[1])], "b: no query=ID in its header"),
        # an alignment of the query and a copy of it: nothing to lower or raise would help
        ([("q", WT[:9] + "-" + WT[9:]), ("c", WT[:9] + "-" + WT[9:])], "no homolog besides"),
    ],
)
def test_a_homolog_file_of_no_use_is_a_one_line_error(ckpt, tmp_path, capsys, records, message):
    _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    _fasta(tmp_path / "h.fa", records)
    code = _score(ckpt, tmp_path, f"context={tmp_path / 'h.fa'}")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "s.csv").exists()


def test_context_with_a_sequence_and_several_queries_asks_for_the_record(ckpt, tmp_path, capsys):
    _rows(tmp_path)
    _fasta(tmp_path / "h.fa", [("a query=q1", HOMOLOGS[0]), ("b query=q2", HOMOLOGS[1])])
    args = [f"checkpoint={ckpt}", f"sequence={WT}", f"mutations={tmp_path / 'm.csv'}"]
    code = main(["score", *args, f"out={tmp_path / 's.csv'}", f"context={tmp_path / 'h.fa'}"])
    err = capsys.readouterr().err
    assert code == 2 and "the homologs name 2 queries (q1, q2)" in err and "record=" in err
    _fasta(tmp_path / "h.fa", [("a query=q1", HOMOLOGS[0]), ("b query=q1", HOMOLOGS[1])])
    code = main(["score", *args, f"out={tmp_path / 's.csv'}", f"context={tmp_path / 'h.fa'}"])
    assert code == 0, capsys.readouterr().err


def test_a_causal_checkpoint_gets_the_pssm_and_says_why_no_model_column(tmp_path, capsys):
    save_model_checkpoint(tmp_path / "c.ckpt", _model(causal=True), ALPHABET, "causal")
    _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    _fasta(tmp_path / "h.fa", [(f"h{k}", h) for k, h in enumerate(HOMOLOGS)])
    code = _score(tmp_path / "c.ckpt", tmp_path, f"context={tmp_path / 'h.fa'}")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "this checkpoint is causal, so the profile is the only homolog column" in out
    with open(tmp_path / "s.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert "pssm" in header and "masked_marginal_context" not in header


def test_context_max_homologs_takes_the_first_in_the_file(ckpt, tmp_path, capsys) -> None:
    mutants = _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    _fasta(tmp_path / "h.fa", [(f"h{k}", h) for k, h in enumerate([*HOMOLOGS, UNRELATED[0]])])
    code = _score(ckpt, tmp_path, f"context={tmp_path / 'h.fa'}", "context_max_homologs=2")
    out, err = capsys.readouterr()
    assert code == 0, err
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    np.testing.assert_allclose(
        [float(r["pssm"]) for r in got],
        pssm_scores(build_pssm(WT, HOMOLOGS[:2]), mutants),
        rtol=1e-5,
        atol=1e-5,
    )
    logp, _ = context_marginals(
        _model(), ALPHABET, ALPHABET.encode(WT), [ALPHABET.encode(h) for h in HOMOLOGS[:2]],
        [int(m[1:-1]) - 1 for m in mutants], max_length=256,
    )  # fmt: skip
    expected = [
        logp[int(m[1:-1]) - 1][ALPHABET.index(m[-1])] - logp[int(m[1:-1]) - 1][ALPHABET.index(m[0])]
        for m in mutants
    ]
    np.testing.assert_allclose(
        [float(r["masked_marginal_context"]) for r in got], expected, rtol=1e-4, atol=1e-4
    )
    context = json.loads((tmp_path / "s.json").read_text())["context"]
    assert context["homologs"] == 2 and context["beyond_context_max_homologs_left_out"] == 3
    assert context["identical_to_wild_type_left_out"] == 0 and "identical" not in out
    assert "3 more left out by context_max_homologs (the first 2 in the file" in out
    code = _score(ckpt, tmp_path, f"context={tmp_path / 'h.fa'}", "context_max_homologs=0")
    err = capsys.readouterr().err
    assert code == 2 and "context_max_homologs must be an integer >= 1 or null (got 0)" in err
    code = _score(ckpt, tmp_path, f"context={tmp_path / 'h.fa'}", "context_tokens=0")
    err = capsys.readouterr().err
    assert code == 2 and "context_tokens must be an integer >= 1 or null (got 0)" in err


def _a3m_rows(rng: np.random.Generator, n: int) -> list[str]:
    """Homologs of residues 6-55 of WT as a3m rows: substitutions, a gap, an insertion."""
    rows = []
    for k in range(n):
        seq = list(_variant(WT[5:55], rng, 0.1 + 0.3 * (k % 3) / 2))
        seq[k % 50] = "-"
        if k % 4 == 0:
            seq.insert(20, "gk")  # two inserted residues, lower case
        rows.append("".join(seq))
    return rows


def _profile_by_hand(rows: list[str]) -> np.ndarray:
    """``(60, 20)`` log2-odds: 1 / neighbours (>= 80 % of a row's own residues shared)
    weights, BLOSUM62 pseudocounts with beta = 10, the query alone outside residues 6-55."""
    from protein_performer.data.simulate import blosum62_model

    q = {aa: i for i, aa in enumerate(COLUMNS)}
    cols = ["".join(c for c in r if not c.islower()) for r in [WT[5:55], *rows]]
    weights = []
    for a in cols:
        own = [i for i, c in enumerate(a) if c != "-"]
        n = sum(sum(a[i] == b[i] for i in own) >= 0.8 * len(own) for b in cols)
        weights.append(1 / n)
    counts = np.zeros((60, 20))
    for i, aa in enumerate(WT):
        if not 5 <= i < 55:
            counts[i, q[aa]] = 1
    for w, a in zip(weights, cols, strict=True):
        for j, c in enumerate(a):
            if c != "-":
                counts[5 + j, q[c]] += w
    model = blosum62_model()
    n = counts.sum(1, keepdims=True)
    f = counts / n
    g = f @ model.transition
    return np.log2(((n * f + 10 * g) / (n + 10)) / model.q[None, :])


def test_score_reads_a_colabfold_a3m_and_scores_with_its_weighted_profile(ckpt, tmp_path, capsys):
    mutants = _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("sp|P99999|WT_TEST", WT)])
    rows = _a3m_rows(np.random.default_rng(3), 12)
    text = (
        "#50\t1\n>101\n"
        + WT[5:55]
        + "\n"
        + "".join(f">UniRef_{k}\n{r}\n" for k, r in enumerate(rows))
    )
    (tmp_path / "msa.a3m").write_text(text)
    code = _score(ckpt, tmp_path, f"context={tmp_path / 'msa.a3m'}", "fitness_col=fitness")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "a3m alignment" in out and "12 homologs used" in out and "residues 6-55" in out
    seconds = json.loads((tmp_path / "s.json").read_text())["context"]["read_seconds"]
    assert 0 <= seconds < 60 and f"(bits); read in {seconds:.1f} s" in out
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    s = _profile_by_hand(rows)
    q = {aa: i for i, aa in enumerate(COLUMNS)}
    expected = [s[int(m[1:-1]) - 1, q[m[-1]]] - s[int(m[1:-1]) - 1, q[m[0]]] for m in mutants]
    np.testing.assert_allclose([float(r["pssm"]) for r in got], expected, rtol=1e-5, atol=1e-5)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["context"]["alignment"]["format"] == "a3m"
    assert summary["context"]["homologs_used"] == 12
    # the window holds the homologs, the first in the file first (49-51 residues each: 3
    # whole in the 194 tokens left beside the 60 residues, the 4th cut to what remains)
    assert summary["context"]["mean_homologs_in_window"] == 4.0


def test_score_refuses_an_alignment_of_another_protein_in_one_line(ckpt, tmp_path, capsys):
    _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("sp|P99999|WT_TEST", WT)])
    other = UNRELATED[0][:50]
    (tmp_path / "msa.a2m").write_text(f">OTHER/1-50\n{other}\n>h\n{other[:-1]}-\n")
    code = _score(ckpt, tmp_path, f"context={tmp_path / 'msa.a2m'}")
    err = capsys.readouterr().err
    assert code != 0 and "is not the wild type" in err and "msa.a2m" in err
    assert not (tmp_path / "s.csv").exists()


def test_score_mutants_with_context_from_python_equals_the_cli(ckpt, tmp_path):
    from protein_performer.analysis import score_mutants

    mutants = _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    rows = _a3m_rows(np.random.default_rng(3), 6)
    (tmp_path / "msa.a3m").write_text(
        ">q\n" + WT[5:55] + "\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    )
    got = score_mutants(
        _model(), ALPHABET, WT, mutants, context=tmp_path / "msa.a3m",
        context_options={"max_length": 256},
    )  # fmt: skip
    assert set(got) == {"masked-marginal", "masked_marginal_context", "context_retrieval", "pssm"}
    assert _score(ckpt, tmp_path, f"context={tmp_path / 'msa.a3m'}", "context_tokens=256") == 0
    with open(tmp_path / "s.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    for column in ("masked_marginal_context", "context_retrieval", "pssm"):
        np.testing.assert_allclose(
            [float(r[column]) for r in table], got[column], rtol=1e-4, atol=1e-4
        )
    s = _profile_by_hand(rows)
    q = {aa: i for i, aa in enumerate(COLUMNS)}
    expected = [s[int(m[1:-1]) - 1, q[m[-1]]] - s[int(m[1:-1]) - 1, q[m[0]]] for m in mutants]
    np.testing.assert_allclose(got["pssm"], expected, rtol=1e-6, atol=1e-6)
    # the CLI's option names are taken too; a name of neither kind is refused
    named = score_mutants(
        _model(), ALPHABET, WT, mutants, context=tmp_path / "msa.a3m",
        context_options={"context_tokens": 256, "context_retrieval": 0.0},
    )  # fmt: skip
    np.testing.assert_allclose(
        named["masked_marginal_context"], got["masked_marginal_context"], rtol=1e-5, atol=1e-6
    )
    assert "context_retrieval" not in named  # retrieval 0: no such column
    for bad, match in (
        ({"tokens": 256}, "unknown option 'tokens'"),
        ({"max_length": 256, "context_tokens": 512}, "max_length given twice"),
    ):
        with pytest.raises(ConfigError, match=match):
            score_mutants(_model(), ALPHABET, WT, mutants, context=tmp_path / "msa.a3m",
                          context_options=bad)  # fmt: skip


def test_score_context_on_the_shipped_homolog_model_prints_which_model_scored(tmp_path, capsys):
    from protein_performer.model.checkpoints import shipped

    if not shipped("homologs-columns-deep"):
        pytest.skip("the shipped homolog checkpoint is not installed")
    _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    _fasta(tmp_path / "h.fa", [(f"h{i}", h) for i, h in enumerate(HOMOLOGS)])
    args = [f"fasta={tmp_path / 'wt.fa'}", f"mutations={tmp_path / 'm.csv'}"]
    code = main(["score", *args, f"out={tmp_path / 's.csv'}", f"context={tmp_path / 'h.fa'}"])
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "\n  model: checkpoint=homologs-columns-deep (the shipped homolog model that reads "
        "homologs at their columns, trained with up to 64 a row, read with context=" in out
    )
    code = main(["score", *args, f"out={tmp_path / 't.csv'}"])
    assert code == 0 and "model: checkpoint=homologs" not in capsys.readouterr().out


def test_the_cut_homolog_covers_the_region_of_the_scored_window():
    """100 residues in windows of 64 tokens: 30 residues of the protein, 31 of a 100-residue
    homolog (and a <sep>). The homolog is cut where the protein's window sits, as a share of
    the positions it can start at (0..70 for the protein, 0..69 for the homolog)."""
    rng = np.random.default_rng(3)
    ids = ALPHABET.encode("".join(rng.choice(list(STANDARD_AMINO_ACIDS), 100)))
    homolog = ALPHABET.encode("".join(rng.choice(list(STANDARD_AMINO_ACIDS), 100)))
    sites = [0, 57, 80, 99]
    jobs, held = _context_jobs(ids, [homolog], sites, ALPHABET, 64, "crop")
    assert held == [1] * 4
    # site -> window start (centred, clipped) -> the homolog's first kept residue, by hand
    first = {0: 0, 57: round(42 / 70 * 69), 80: round(65 / 70 * 69), 99: 69}
    for site, tokens, pos in jobs:
        assert tokens[0] == ALPHABET.cls_idx and tokens[32] == ALPHABET.sep_idx
        np.testing.assert_array_equal(tokens[1:32], homolog[first[site] : first[site] + 31])
        assert tokens[pos] == ALPHABET.mask_idx and len(tokens) == 64


def test_the_counts_of_homologs_left_out_are_each_their_own(tmp_path):
    """Six records: three homologs of the wild type, the wild type itself, and two of another
    query (one of them the wild type's sequence too); context_max_homologs=2."""
    from protein_performer.analysis.homolog_scoring import read_scan_context

    _fasta(
        tmp_path / "h.fa",
        [
            ("a query=wt", HOMOLOGS[0]),
            ("b query=wt", WT),
            ("c query=OTHER", WT),
            ("d query=OTHER", HOMOLOGS[3]),
            ("e query=wt", HOMOLOGS[1]),
            ("f query=wt", HOMOLOGS[2]),
        ],
    )
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, "wt", max_homologs=2)
    assert [h.id for h in ctx.homologs] == ["a", "e"]
    assert ctx.read == 6 and ctx.other_queries == 2
    assert ctx.identical == 1  # b only: c is another query's
    assert ctx.beyond_max == 1  # f only: b was left out as identical
    summary: dict = {}
    text = context_notes(ctx, summary, causal=True)
    assert summary["context"]["identical_to_wild_type_left_out"] == 1
    assert summary["context"]["beyond_context_max_homologs_left_out"] == 1
    assert "(1 identical to the wild type left out)" in text and "; 1 more left out by" in text


def test_the_model_window_holds_only_the_homologs_the_pssm_used(tmp_path):
    from protein_performer.analysis.homolog_scoring import context_columns, read_scan_context
    from protein_performer.analysis.mutations import parse_variant

    _fasta(tmp_path / "h.fa", [("a", HOMOLOGS[0]), ("u", UNRELATED[0]), ("b", HOMOLOGS[1])])
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, None)
    assert [i["used"] for i in ctx.pssm.homologs] == [True, False, True]
    model, seen = _model(), []
    # the windows as the embedding reads them (whichever route the model is called by)
    model.embed.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    variants = [parse_variant(f"{WT[i]}{i + 1}A", WT, 1) for i in (3, 30)]
    cols = context_columns(model, ALPHABET, WT, variants, ctx, max_length=256)
    assert np.isfinite(cols["masked_marginal_context"]).all()
    assert ctx.info["mean_homologs_in_window"] == 2
    rows = [row for batch in seen for row in batch.tolist()]
    assert len(rows) == 2
    sep = ALPHABET.sep_idx
    for row in rows:
        row = [t for t in row if t != ALPHABET.pad_idx]
        # <cls> a <sep> b <sep> WT(masked) <eos>: the unrelated record left out
        assert row[1 : 1 + 60] == ALPHABET.encode(HOMOLOGS[0]).tolist() and row[61] == sep
        assert row[62 : 62 + 60] == ALPHABET.encode(HOMOLOGS[1]).tolist() and row[122] == sep
        assert len(row) == 1 + 2 * 61 + 60 + 1


def test_score_says_when_the_query_is_not_record_1_and_when_samples_would_repeat(
    ckpt, tmp_path, capsys
):
    _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    rows = _a3m_rows(np.random.default_rng(3), 3)
    # a homolog first, then the query (residues 6-55)
    (tmp_path / "msa.a3m").write_text(f">h0\n{rows[0]}\n>q\n{WT[5:55]}\n>h1\n{rows[1]}\n")
    code = _score(ckpt, tmp_path, f"context={tmp_path / 'msa.a3m'}", "context_samples=3")
    out = capsys.readouterr().out
    assert code == 0
    assert "query q (record 2: record 1, h0, is not the wild type: " in out
    assert "; it is read as a homolog)" in out
    assert "context_samples=3 with context_sampling=first" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["context"]["context_samples"] == 1
    assert summary["context"]["homologs_used"] == 2
    # a window with no room for a homolog is refused, not scored as if it held some
    code = _score(
        ckpt, tmp_path, f"context={tmp_path / 'msa.a3m'}", "context_tokens=20", out="t.csv"
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "20 tokens leaves no room for a homolog beside the protein's 8 residues" in err
    assert "(at least 33)" in err and not (tmp_path / "t.csv").exists()
    # the least it names holds one homolog (cut to 16 residues), one token fewer none
    for tokens, code in ((32, 2), (33, 0)):
        got = _score(
            ckpt, tmp_path, f"context={tmp_path / 'msa.a3m'}", f"context_tokens={tokens}",
            out=f"u{tokens}.csv",
        )  # fmt: skip
        assert got == code, capsys.readouterr().err
    summary = json.loads((tmp_path / "u33.json").read_text())
    assert summary["context"]["mean_homologs_in_window"] == 1.0


def test_sampled_homologs_sit_in_the_window_best_first(tmp_path):
    """A weighted draw picks which homologs go in; they are placed in file order (a search's
    best first, as the homolog models are trained), and each window stays within its tokens."""
    from protein_performer.analysis.homolog_scoring import context_columns, read_scan_context
    from protein_performer.analysis.mutations import parse_variant
    from protein_performer.data.msa import homolog_order

    _fasta(tmp_path / "h.fa", [(f"h{k}", h) for k, h in enumerate(HOMOLOGS)])
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, None)
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=512)
    model, seen = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx).eval(), []
    model.embed.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    variants = [parse_variant(f"{WT[3]}4A", WT, 1)]
    sep, encoded = ALPHABET.sep_idx, [ALPHABET.encode(h).tolist() for h in HOMOLOGS]
    for sample in range(3):
        seen.clear()
        # 261 tokens: <cls> 3 x (60 + <sep>) WT <eos> and 16 to spare, one short of a cut 4th
        context_columns(model, ALPHABET, WT, variants, ctx, max_length=261, sampling="weighted",
                        samples=sample + 1, seed=5)  # fmt: skip
        row = [t for t in seen[-1][0].tolist() if t != ALPHABET.pad_idx]
        assert len(row) == 245
        body, parts = row[1:-1], []
        while sep in body:
            parts.append(body[: body.index(sep)])
            body = body[body.index(sep) + 1 :]
        held = [encoded.index(p) for p in parts]
        drawn = homolog_order("weighted", weights=ctx.pssm.weights, seed=5, sample=sample)
        assert held == sorted(drawn[:3])  # 3 of 61 tokens fit beside the 60-residue protein
    assert len({tuple(sorted(homolog_order("weighted", weights=ctx.pssm.weights, seed=5,
                                            sample=s)[:3])) for s in range(3)}) > 1  # fmt: skip


def test_a_draw_among_homologs_of_many_lengths_is_placed_by_rank(tmp_path):
    """Fourteen homologs of 34 to 60 residues, more than a window holds: each window takes
    those of the weighted draw that fit (the last one cut), in file order."""
    from protein_performer.analysis.homolog_scoring import context_columns, read_scan_context
    from protein_performer.analysis.mutations import parse_variant
    from protein_performer.data.context_windows import fit_members
    from protein_performer.data.msa import homolog_order

    homologs = [_variant(WT, np.random.default_rng(20 + k), 0.1)[: 60 - 2 * k] for k in range(14)]
    _fasta(tmp_path / "h.fa", [(f"h{k}", h) for k, h in enumerate(homologs)])
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, None)
    assert len(ctx.used) == 14
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=512)
    model, seen = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx).eval(), []
    model.embed.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    variants = [parse_variant(f"{WT[3]}4A", WT, 1)]
    lengths, cuts = [len(h) for h in homologs], 0
    for sample in range(4):
        seen.clear()
        context_columns(model, ALPHABET, WT, variants, ctx, max_length=300, sampling="weighted",
                        samples=sample + 1, seed=1, max_identity=None)  # fmt: skip
        row = [t for t in seen[-1][0].tolist() if t != ALPHABET.pad_idx]
        assert len(row) <= 300
        body = ALPHABET.decode(np.array(row[1:-1]), keep_specials=True).split("<sep>")[:-1]
        held = [next(k for k, h in enumerate(homologs) if h.startswith(p)) for p in body]
        drawn = homolog_order("weighted", weights=ctx.pssm.weights, seed=1, sample=sample)
        kept = fit_members([np.zeros(lengths[i]) for i in drawn], 300 - 60 - 2)
        whole = [int(i) for i, k in zip(drawn, kept, strict=False) if len(k) == lengths[i]]
        cut = [int(drawn[len(kept) - 1])] if len(whole) < len(kept) else []
        assert len(kept) >= 4 and held == sorted(whole) + cut  # the same ones; a cut one last
        cuts += bool(cut)
    assert cuts  # some window cut its last homolog


def test_score_caps_the_homologs_of_a_window_as_asked(ckpt, tmp_path, capsys):
    _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    _fasta(tmp_path / "h.fa", [(f"h{k}", h) for k, h in enumerate(HOMOLOGS[:3])])
    context = f"context={tmp_path / 'h.fa'}"
    assert _score(ckpt, tmp_path, context, "context_window_homologs=1", "context_tokens=256") == 0
    out = capsys.readouterr().out
    assert (
        "with a mean of 1 homolog before the protein in windows of" in out
        and "(first homologs, at most 1 a window)" in out
    )
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["context"]["context_window_homologs"] == 1
    code = _score(ckpt, tmp_path, context, "context_window_homologs=null", "context_tokens=256",
                  out="t.csv")  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "a mean of 3 homologs before" in out and "at most" not in out
    assert _score(ckpt, tmp_path, context, "context_window_homologs=0", out="u.csv") != 0
    assert "context_window_homologs" in capsys.readouterr().err


def test_score_draws_the_rows_a_deep_alignment_is_weighed_against_with_its_seed(
    ckpt, tmp_path, capsys, monkeypatch
):
    from protein_performer.analysis.dms import profile
    from protein_performer.analysis.dms.homologs import read_scan_context

    _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    rng = np.random.default_rng(4)
    # 2,999 rows: near copies of a few parents (families whose estimated weights vary)
    parents = [_variant(WT, rng, 0.5) for _ in range(10)]
    rows = {"-" + _variant(p, rng, 0.05)[1:] for p in parents for _ in range(400)}
    rows = sorted(rows)[:2_999]
    (tmp_path / "deep.fa").write_text(
        f">wt\n{WT}\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    )
    monkeypatch.setattr(profile, "EXACT_WEIGHT_CELLS", 3_000 * 2_500 * 60)
    neff = {}
    for seed in (1, 2):
        out = f"s{seed}.csv"
        code = _score(ckpt, tmp_path, f"context={tmp_path / 'deep.fa'}", f"seed={seed}", out=out)
        assert code == 0, capsys.readouterr().err
        notes = json.loads((tmp_path / f"s{seed}.json").read_text())["context"]["alignment"]
        assert notes["weights_estimated_from"] == 2_500
        neff[seed] = notes["neff"]
    assert "counted among 2,500 rows drawn at random" in capsys.readouterr().out
    by_hand = read_scan_context(tmp_path / "deep.fa", ALPHABET, WT, "wt", seed=2)
    assert neff[2] == by_hand.info["alignment"]["neff"] and neff[1] != neff[2]
    # from Python: the seed of context_options draws the same rows
    from protein_performer.analysis import score_mutants

    with open(tmp_path / "s2.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    got = score_mutants(_model(), ALPHABET, WT, [r["mutant"] for r in table],
                        context=tmp_path / "deep.fa",
                        context_options={"seed": 2, "max_length": 256})  # fmt: skip
    np.testing.assert_allclose(got["pssm"], [float(r["pssm"]) for r in table], atol=1e-4)


def test_score_keeps_near_copies_of_the_wild_type_out_of_the_model_windows(ckpt, tmp_path, capsys):
    from protein_performer.analysis.dms.marginals import score_mutants

    _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    near = [_variant(WT, np.random.default_rng(50 + k), 0.04) for k in range(2)]  # 0.97
    _fasta(tmp_path / "h.fa", [(f"n{k}", s) for k, s in enumerate(near)] +
           [(f"h{k}", s) for k, s in enumerate(HOMOLOGS)])  # fmt: skip
    code = _score(ckpt, tmp_path, f"context={tmp_path / 'h.fa'}")
    out = capsys.readouterr().out
    assert code == 0 and "; 2 over 90% identical to the wild type kept out)" in out
    summary = json.loads((tmp_path / "s.json").read_text())["context"]
    assert summary["homologs_over_max_identity"] == 2 and summary["context_max_identity"] == 0.9
    assert summary["homologs_used"] == 6  # the profile's
    code = _score(
        ckpt, tmp_path, f"context={tmp_path / 'h.fa'}", "context_max_identity=null", out="t.csv"
    )
    assert code == 0 and "identical to the wild type kept out" not in capsys.readouterr().out
    with open(tmp_path / "s.csv", newline="") as a, open(tmp_path / "t.csv", newline="") as b:
        kept, every = list(csv.DictReader(a)), list(csv.DictReader(b))
    assert [r["pssm"] for r in kept] == [r["pssm"] for r in every]
    assert [r["masked_marginal_context"] for r in kept] != [
        r["masked_marginal_context"] for r in every
    ]
    # from Python, under the CLI's name or the library's: the CLI's column
    mutants = [r["mutant"] for r in every]
    for options in ({"context_max_identity": None}, {"max_identity": None}):
        got = score_mutants(_model(), ALPHABET, WT, mutants, context=tmp_path / "h.fa",
                            context_options={**options, "max_length": 256})  # fmt: skip
        np.testing.assert_allclose(
            got["masked_marginal_context"],
            [float(r["masked_marginal_context"]) for r in every],
            rtol=1e-4,
            atol=1e-4,
        )
    assert _score(ckpt, tmp_path, f"context={tmp_path / 'h.fa'}", "context_max_identity=1.5",
                  out="u.csv") == 2  # fmt: skip
    assert "context_max_identity must be a number from 0 to 1" in capsys.readouterr().err


def test_plain_hits_are_capped_at_unaligned_max_homologs_by_default(tmp_path):
    from protein_performer.analysis.dms.homologs import UNALIGNED_MAX_HOMOLOGS, read_scan_context

    assert UNALIGNED_MAX_HOMOLOGS == 16
    hits = [_variant(WT, np.random.default_rng(200 + k), 0.15) for k in range(17)]
    _fasta(tmp_path / "h.fa", [(f"h{k}", h) for k, h in enumerate(hits)])
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, None)
    assert [h.id for h in ctx.homologs] == [f"h{k}" for k in range(16)]
    assert ctx.read == 17 and ctx.beyond_max == 1 and len(ctx.pssm.homologs) == 16


def _small_alignment(tmp_path, extra: str = "") -> str:
    """Residues 1-20 of WT: h1 and h2 share 18-19 residues with each other and the query
    (the three weigh 1/3 each), h3 stands alone (weight 1), then a duplicate of h3 and a copy
    of the wild type: Neff 2.0 from 3 homologs used."""
    h3 = _variant(WT[:20], np.random.default_rng(9), 0.5)[:-1] + "-"
    text = (
        f">q\n{WT[:20]}\n>h1\n{WT[:19]}-\n>h2\n-{WT[1:20]}\n>h3\n{h3}\n>h3copy\n{h3}\n"
        f">wtcopy\n{WT[:20]}\n{extra}"
    )
    (tmp_path / "x.a3m").write_text(text)
    return str(tmp_path / "x.a3m")


def test_the_printed_alignment_notes_count_what_each_is(tmp_path):
    from protein_performer.analysis.dms.homologs import read_scan_context

    path = _small_alignment(tmp_path)
    ctx = read_scan_context(path, ALPHABET, WT, None)
    np.testing.assert_allclose(ctx.pssm.weights, [1 / 3, 1 / 3, 1.0], rtol=1e-6)
    summary: dict = {}
    text = context_notes(ctx, summary, causal=True)
    assert "alignment" in text and ": 6 records, query q = wild-type residues 1-20" in text
    assert "3 homologs used, Neff 2.0 with the query (weights" in text
    assert "; left out: 1 copy of the wild type, 1 duplicate; profile column pssm" in text
    assert summary["context"]["records_read"] == 6 and summary["context"]["homologs_used"] == 3
    assert "identical to the wild type left out" not in text  # said once, as a copy
    ctx = read_scan_context(path, ALPHABET, WT, None, max_homologs=2)
    text = context_notes(ctx, {}, causal=True)
    assert "2 homologs used, Neff 1.0 with the query (weights" in text
    assert "1 duplicate, 1 beyond context_max_homologs; profile" in text
    (tmp_path / "y.a3m").write_text(f">q\n{WT[:20]}\n>h1\n{WT[:19]}-\n")
    text = context_notes(read_scan_context(tmp_path / "y.a3m", ALPHABET, WT, None), {}, True)
    assert "; left out: none; profile column" in text


def test_the_printed_notes_say_the_retrieval_weights_and_the_windows_averaged(tmp_path):
    from protein_performer.analysis.dms.homologs import context_columns, read_scan_context
    from protein_performer.analysis.dms.variants import parse_variant

    _fasta(tmp_path / "h.fa", [(f"h{k}", h) for k, h in enumerate(HOMOLOGS[:3])])
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, None)
    variants = [parse_variant(f"{WT[3]}4A", WT, 1)]
    cols = context_columns(_model(), ALPHABET, WT, variants, ctx, max_length=256, retrieval=0.25)
    text = context_notes(ctx, {}, causal=False)
    assert "; context_retrieval: 0.75 x the model's + 0.25 x the profile's log-ratio" in text
    assert "windows per site averaged" not in text  # one window
    assert "context: 3 of the 3 homologs in" in text
    f = ctx.pssm.frequencies[3]
    profile = math.log(f[COLUMNS.index("A")]) - math.log(f[COLUMNS.index(WT[3])])
    np.testing.assert_allclose(
        cols["context_retrieval"], 0.75 * cols["masked_marginal_context"] + 0.25 * profile
    )
    context_columns(_model(), ALPHABET, WT, variants, ctx, max_length=256, sampling="weighted",
                    samples=2)  # fmt: skip
    assert ", 2 windows per site averaged" in context_notes(ctx, {}, causal=False)


def test_context_columns_refuse_no_samples_and_no_window_homologs(tmp_path):
    from protein_performer.analysis.dms.homologs import context_columns, read_scan_context
    from protein_performer.analysis.dms.variants import parse_variant

    _fasta(tmp_path / "h.fa", [(f"h{k}", h) for k, h in enumerate(HOMOLOGS[:2])])
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, None)
    variants = [parse_variant(f"{WT[3]}4A", WT, 1)]
    with pytest.raises(ConfigError, match=r"samples must be an integer >= 1 \(got 0\)"):
        context_columns(_model(), ALPHABET, WT, variants, ctx, max_length=256, samples=0)
    for bad in (0, 2.5, True, "all"):
        with pytest.raises(ConfigError, match=r"must be auto, null, a whole number >= 1 or a"):
            context_columns(
                _model(), ALPHABET, WT, variants, ctx, max_length=256, window_homologs=bad
            )


def test_context_marginals_count_each_site_once():
    ids = ALPHABET.encode(WT)
    got, info = context_marginals(_model(), ALPHABET, ids, [ALPHABET.encode(HOMOLOGS[0])],
                                  [5, 30, 5], max_length=256)  # fmt: skip
    assert info["sites"] == 2 and sorted(got) == [5, 30]


def test_near_copies_are_found_among_the_homologs_the_pssm_used(tmp_path):
    """An unrelated record (not used by the PSSM) before a near copy: the identity of each used
    homolog is its own, so the near copy stays out of the window and the homolog goes in."""
    from protein_performer.analysis.dms.homologs import context_columns, read_scan_context
    from protein_performer.analysis.dms.variants import parse_variant

    near = _variant(WT, np.random.default_rng(50), 0.04)
    _fasta(tmp_path / "h.fa", [("u", UNRELATED[0]), ("n", near), ("h", HOMOLOGS[0])])
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, None)
    assert [i["used"] for i in ctx.pssm.homologs] == [False, True, True]
    model, seen = _model(), []
    model.embed.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    context_columns(model, ALPHABET, WT, [parse_variant(f"{WT[3]}4A", WT, 1)], ctx,
                    max_length=256)  # fmt: skip
    row = [t for t in seen[-1][0].tolist() if t != ALPHABET.pad_idx]
    assert row[1:61] == ALPHABET.encode(HOMOLOGS[0]).tolist() and row[61] == ALPHABET.sep_idx
    assert len(row) == 1 + 61 + 60 + 1 and ctx.info["homologs_over_max_identity"] == 1


def test_the_profile_half_of_retrieval_is_in_nats_and_nan_for_an_indel():
    from protein_performer.analysis.dms.homologs import profile_log_ratios
    from protein_performer.analysis.dms.variants import parse_variant

    pssm = build_pssm(WT, HOMOLOGS[:2], min_z=None)
    f = pssm.frequencies
    variants = [parse_variant(m, WT, 1) for m in (f"{WT[3]}4A", WT[:10] + WT[11:])]
    got = profile_log_ratios(pssm, variants)
    want = math.log(f[3, COLUMNS.index("A")] / f[3, COLUMNS.index(WT[3])])
    assert got[0] == pytest.approx(want, rel=1e-9) and np.isnan(got[1])


def test_weighted_windows_draw_with_the_weights_of_the_homologs_left(tmp_path, monkeypatch):
    """Aligned rows: a near copy of the wild type (its neighbour: 1/2), a pair of twins (1/2
    each) and one on its own (1): the near copy stays out of the windows, and the draw gets
    the weights of the three left, not the first three."""
    from protein_performer.analysis.dms import homologs as module
    from protein_performer.analysis.dms.homologs import context_columns, read_scan_context
    from protein_performer.analysis.dms.variants import parse_variant

    near = _variant(WT, np.random.default_rng(50), 0.04)
    twin = _variant(WT, np.random.default_rng(60), 0.3)
    other = twin[:30] + ("A" if twin[30] != "A" else "G") + twin[31:]
    alone = _variant(WT, np.random.default_rng(61), 0.3)
    rows = [near, twin, other, alone]
    (tmp_path / "x.fa").write_text(
        f">q\n{WT}\n" + "".join(f">h{k}\n-{r[1:]}\n" for k, r in enumerate(rows))
    )
    ctx = read_scan_context(tmp_path / "x.fa", ALPHABET, WT, None)
    np.testing.assert_allclose(ctx.pssm.weights, [0.5, 0.5, 0.5, 1.0], rtol=1e-6)
    got, draw = [], module.homolog_order
    monkeypatch.setattr(
        module, "homolog_order", lambda *a, **k: got.append(k["weights"]) or draw(*a, **k)
    )
    context_columns(_model(), ALPHABET, WT, [parse_variant(f"{WT[3]}4A", WT, 1)], ctx,
                    max_length=512, sampling="weighted", window_homologs=2)  # fmt: skip
    np.testing.assert_allclose(got[0], [0.5, 0.5, 1.0], rtol=1e-6)
    assert ctx.info["homologs_over_max_identity"] == 1


def test_the_output_says_what_the_alignment_covers_and_how_its_query_was_placed(tmp_path):
    from protein_performer.analysis.dms import variants as var
    from protein_performer.analysis.dms.homologs import context_columns, read_scan_context

    domain = WT[10:50]  # the scan's wild type: residues 11-50 of the aligned protein
    rows = [h[:20] + "-" * 40 for h in HOMOLOGS[:2]] + [h[:45] + "-" * 15 for h in HOMOLOGS[2:]]
    path = tmp_path / "whole.a2m"
    path.write_text(f">other\n{HOMOLOGS[0][:-1]}-\n>q/1-60\n{WT}\n" + "".join(
        f">h{k}\n{r}\n" for k, r in enumerate(rows)))  # fmt: skip
    ctx = read_scan_context(path, ALPHABET, domain, None)
    # record 2 holds the domain: its residues 11-50; the alignment's rows reach residue 45
    assert ctx.msa.notes["query_residues_read"] == "11-50" and len(ctx.msa.positions) == 40
    variants = [
        [var.Substitution(s, domain[s], "W" if domain[s] != "W" else "A")] for s in (1, 20, 38)
    ]
    context_columns(_model(), ALPHABET, domain, variants, ctx, max_length=256)
    assert ctx.info["mutants_outside_columns"] == 0  # the query covers the whole domain
    text = context_notes(ctx, {}, causal=False)
    assert "query q/1-60 (record 2: record 1, other, is not the wild type:" in text
    assert ", its residues 11-50 = wild-type residues 1-40 (40 columns)" in text
    assert f"Neff {ctx.pssm.params['neff']:,.1f} with the query (weights" in text
    assert "outside its columns" not in text
    # an alignment of part of the wild type: mutants beyond its columns are counted and said
    part = tmp_path / "part.a2m"
    part.write_text(f">q/1-30\n{WT[:30]}\n" + "".join(f">h{k}\n{h[:29]}-\n" for k, h in
                                                       enumerate(HOMOLOGS)))  # fmt: skip
    ctx = read_scan_context(part, ALPHABET, WT, None)
    variants = [[var.Substitution(s, WT[s], "W" if WT[s] != "W" else "A")] for s in (0, 29, 30, 59)]
    variants.append([var.Substitution(5, WT[5], "A" if WT[5] != "A" else "C"),
                     var.Substitution(40, WT[40], "A" if WT[40] != "A" else "C")])  # fmt: skip
    context_columns(_model(), ALPHABET, WT, variants, ctx, max_length=256)
    assert ctx.info["mutants_outside_columns"] == 3  # 31, 60 and the double mutant
    assert "; 3 mutants at residues outside its columns (there the profile holds the wild " in (
        context_notes(ctx, {}, causal=False)
    )


def _small_a3m(tmp_path, n: int = 4):
    rows = _a3m_rows(np.random.default_rng(5), n)
    path = tmp_path / "small.a3m"
    path.write_text(">q\n" + WT[5:55] + "\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows)))
    return path


def test_score_mutants_hands_packed_to_the_context_windows(tmp_path):
    """A packed model's context windows are framed its way (one end token): score_mutants'
    ``packed=`` reaches them, its columns those of context_columns called with it."""
    from protein_performer.analysis import score_mutants
    from protein_performer.analysis.dms.homologs import context_columns, read_scan_context
    from protein_performer.analysis.dms.variants import parse_variant

    a3m = _small_a3m(tmp_path)
    mutants = [f"{WT[i]}{i + 1}{'A' if WT[i] != 'A' else 'C'}" for i in (1, 29, 40)]
    variants = [parse_variant(m, WT) for m in mutants]
    column = "masked_marginal_context"
    by_hand = {}
    for packed in (True, False):
        ctx = read_scan_context(a3m, ALPHABET, WT, None)
        by_hand[packed] = context_columns(
            _model(), ALPHABET, WT, variants, ctx, max_length=128, packed=packed
        )[column]
    assert not np.allclose(by_hand[True], by_hand[False], atol=1e-5)
    for packed in (True, False):
        got = score_mutants(_model(), ALPHABET, WT, mutants, packed=packed, context=a3m,
                            context_options={"max_length": 128})  # fmt: skip
        np.testing.assert_allclose(got[column], by_hand[packed], rtol=1e-5, atol=1e-6)


def test_score_mutants_with_context_refuses_an_indel(tmp_path):
    from protein_performer.analysis import score_mutants
    from protein_performer.errors import DataError

    deletion = WT[:5] + WT[6:]
    model = _model()
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(DataError, match="mutant 2: context= scores substitutions; an indel has no"):
        score_mutants(model, ALPHABET, WT, [f"{WT[3]}4A", deletion], methods="pseudo-ll",
                      context=_small_a3m(tmp_path))  # fmt: skip
    assert calls == []  # refused before any pass of the model


def test_score_mutants_with_context_defaults_to_the_models_own_window(tmp_path):
    """Learned positions (max_len 256): the windows are the model's 256 tokens unless told
    otherwise, as the CLI's (1,024 would not run: twelve homologs of ~50 fill more)."""
    from protein_performer.analysis import score_mutants

    rows = _a3m_rows(np.random.default_rng(3), 12)
    (tmp_path / "msa.a3m").write_text(
        ">q\n" + WT[5:55] + "\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    )
    mutants = [f"{WT[i]}{i + 1}{'A' if WT[i] != 'A' else 'C'}" for i in (9, 30)]
    default = score_mutants(_model(), ALPHABET, WT, mutants, context=tmp_path / "msa.a3m")
    told = score_mutants(_model(), ALPHABET, WT, mutants, context=tmp_path / "msa.a3m",
                         context_options={"max_length": 256})  # fmt: skip
    for column in ("masked_marginal_context", "context_retrieval", "pssm"):
        np.testing.assert_allclose(default[column], told[column], rtol=1e-5, atol=1e-6)


def test_score_mutants_reads_a_loaded_checkpoint_in_the_window_the_cli_would(tmp_path):
    import protein_performer
    from protein_performer.analysis import score_mutants
    from protein_performer.analysis.dms.homologs import read_scan_context

    model, alphabet = protein_performer.load("homologs-msa")
    assert model.trained_length == 4096 and model.rotary is not None  # the card's window
    rows = "".join(f">h{k}\n{h}\n" for k, h in enumerate(HOMOLOGS))
    (tmp_path / "h.a3m").write_text(f"#60\t1\n>q\n{WT}\n{rows}")
    ctx = read_scan_context(tmp_path / "h.a3m", alphabet, WT, None)
    score_mutants(model, alphabet, WT, [f"{WT[4]}5W"], context=ctx)
    assert ctx.info["context_window_tokens"] == 4096
    model.trained_length = None  # a model built by hand: the library's default
    score_mutants(model, alphabet, WT, [f"{WT[4]}5W"], context=ctx)
    assert ctx.info["context_window_tokens"] == 1024


def test_score_mutants_takes_an_alignment_read_by_read_msa(tmp_path):
    from protein_performer.analysis import score_mutants
    from protein_performer.data.msa import read_msa
    from protein_performer.errors import DataError

    mutants = _rows(tmp_path)
    rows = _a3m_rows(np.random.default_rng(3), 6)
    path = tmp_path / "msa.a3m"
    path.write_text(">q\n" + WT[5:55] + "\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows)))
    options = {"max_length": 256}
    # a letter other than the 20 in the query (a gap in its codes) matches any wild type
    selenium = tmp_path / "u.fa"
    selenium.write_text(">q\nACDEFUGHIKLMNPQ\n>h1\nACDEFAGHIKLMN-Q\n>h2\nACDQFAGHIKLMNPW\n")
    with_u = read_scan_context(
        read_msa(selenium, "ACDEFUGHIKLMNPQ"), ALPHABET, "ACDEFUGHIKLMNPQ", None
    )
    assert with_u.msa.aligned and len(with_u.homologs) == 2
    by_path = score_mutants(_model(), ALPHABET, WT, mutants, context=path, context_options=options)
    msa = read_msa(path, WT)
    by_msa = score_mutants(_model(), ALPHABET, WT, mutants, context=msa, context_options=options)
    for column in ("masked_marginal_context", "context_retrieval", "pssm"):
        np.testing.assert_allclose(by_msa[column], by_path[column], rtol=1e-6, atol=1e-6)
    # read against another wild type: its columns would be read at the wrong residues
    other = list(WT)
    for i in (20, 40):
        other[i] = "A" if WT[i] != "A" else "C"
    other = "".join(other)
    with pytest.raises(
        DataError, match=r"another wild type: its column 16 is wild-type residue 21"
    ):
        score_mutants(_model(), ALPHABET, other, mutants, context=msa, context_options=options)
    # plain hits (no columns) are read again from their file
    hits = tmp_path / "hits.fa"
    _fasta(hits, [(f"h{k}", h) for k, h in enumerate(HOMOLOGS)])
    plain = read_msa(hits, WT)
    assert not plain.aligned
    np.testing.assert_allclose(
        score_mutants(_model(), ALPHABET, WT, mutants, context=plain, context_options=options)[
            "pssm"
        ],
        score_mutants(_model(), ALPHABET, WT, mutants, context=hits, context_options=options)[
            "pssm"
        ],
    )


def test_an_alignment_named_in_the_scans_numbering(ckpt, tmp_path, capsys):
    # the scan numbers the wild type from 101; its alignment's query is named so (106-155)
    mutants = [f"{WT[i]}{i + 101}W" for i in range(5, 55, 5) if WT[i] != "W"]
    (tmp_path / "m.csv").write_text("mutant\n" + "\n".join(mutants) + "\n")
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    rows = _a3m_rows(np.random.default_rng(3), 6)
    body = "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    (tmp_path / "msa.a3m").write_text(f">q/106-155\n{WT[5:55]}\n{body}")
    assert _score(ckpt, tmp_path, f"context={tmp_path / 'msa.a3m'}", "offset=101") == 0
    out = capsys.readouterr().out
    assert "query q/106-155 = wild-type residues 106-155 (50 columns" in out
    said = json.loads((tmp_path / "s.json").read_text())["context"]["alignment"]
    assert said["query_start"] == 106 and "query_range_in_name_ignored" not in said
    # from Python too: a query that is not the wild type names the residue in that numbering
    from protein_performer.analysis import score_mutants

    bad = WT[5:9] + ("A" if WT[9] != "A" else "C") + WT[10:55]
    (tmp_path / "bad.a3m").write_text(f">q/106-155\n{bad}\n{body}")
    with pytest.raises(DataError, match=f"residue 110: {bad[4]} in the alignment, {WT[9]} in"):
        score_mutants(_model(), ALPHABET, WT, mutants, offset=101, context=tmp_path / "bad.a3m")


def test_other_letters_in_the_columns_and_an_empty_hit_are_said(ckpt, tmp_path, capsys):
    _rows(tmp_path)
    _fasta(tmp_path / "wt.fa", [("wt", WT)])
    rows = _a3m_rows(np.random.default_rng(3), 6)
    rows[1] = "X" + rows[1][1:]
    rows[2] = rows[2][:10] + "B" + rows[2][11:]
    body = "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    (tmp_path / "msa.a3m").write_text(f">q\n{WT[5:55]}\n{body}")
    assert _score(ckpt, tmp_path, f"context={tmp_path / 'msa.a3m'}") == 0
    out = capsys.readouterr().out
    assert "(50 columns; 2 letters other than the 20 amino acids in them read as gaps)" in out
    # a hit without a sequence: one line, without advice of an option score does not have
    _fasta(tmp_path / "h.fa", [("h0", HOMOLOGS[0]), ("h1", "")])
    assert _score(ckpt, tmp_path, f"context={tmp_path / 'h.fa'}", out="t.csv") != 0
    err = capsys.readouterr().err
    assert "record 2 (h1): header has no sequence (context=: the homologs)" in err
    assert "invalid=" not in err
