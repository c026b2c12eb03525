"""Mutation scoring: exact scores from a model whose logits are a fixed table, notation,
wild-type checks, windows, the CLI."""

from __future__ import annotations

import csv
import gzip
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from protein_performer.analysis import mutations as mut
from protein_performer.analysis.dms import marginals
from protein_performer.analysis.dms.scan import fitness_notes
from protein_performer.analysis.dms.table import as_in_table
from protein_performer.cli.main import main
from protein_performer.data.alphabet import default_alphabet
from protein_performer.errors import DataError
from protein_performer.model.checkpoints import save_model_checkpoint
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM

ALPHABET = default_alphabet()
WT = "MKTAYIAKQRQISFVKSHFSRQ"


class TableModel(nn.Module):
    """Logits that depend only on the token at the position (masked or not) and its
    position in the window: ``table[token] + pos_bias[pos]`` over the vocabulary."""

    def __init__(self, max_len: int = 64) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.table = torch.randn(len(ALPHABET), len(ALPHABET), generator=g)
        self.pos = torch.randn(max_len, len(ALPHABET), generator=g)
        self.calls: list[torch.Tensor] = []
        self.config = ModelConfig(attention="transformer", dim=8, depth=1, heads=1, max_len=max_len)
        self.anchor = nn.Parameter(torch.zeros(1))
        self.rotary = None  # learned positions: max_len is the window

    def forward(self, ids: torch.Tensor) -> dict:
        self.calls.append(ids.clone())
        n = ids.shape[1]
        return {"logits": self.table[ids] + self.pos[:n][None]}

    def logp(self, token: int, pos: int) -> torch.Tensor:
        return torch.log_softmax(self.table[token] + self.pos[pos], -1)


def test_parse_mutant_notation() -> None:
    assert mut.parse_mutant("H24C") == [mut.Substitution(23, "H", "C")]
    assert mut.parse_mutant("h24c:P25A", offset=24) == [
        mut.Substitution(0, "H", "C"),
        mut.Substitution(1, "P", "A"),
    ]
    for bad in ("", "H24", "24C", "H24C:", "HH24C", "H24C:H24A"):
        with pytest.raises(DataError):  # the package's error for bad input (a ValueError)
            mut.parse_mutant(bad)
    for stop in ("K2*", "H24C:K2*"):
        with pytest.raises(DataError, match=r"is a stop \(nonsense\) mutant"):
            mut.parse_mutant(stop)


def test_wild_type_checks() -> None:
    parsed = [mut.parse_mutant(m) for m in ("M1A", "K1A", "Q22A", "Q23A", "M1X", "K2R:T3C")]
    problems = mut.check_mutants(parsed, WT)
    assert problems == [
        (1, "K1A: the sequence has M at 1"),
        (3, "Q23A: position 23 is outside 1-22"),
        (4, "M1X: 'X' is not one of the 20 amino acids"),
    ]
    assert mut.check_mutants([mut.parse_mutant("M11A", offset=11)], WT, offset=11) == []
    # a non-standard wild type (X, U, B...) has no BLOSUM62 or unigram baseline: refused up front
    for wt in "XUB":
        assert mut.check_mutants([mut.parse_mutant(f"{wt}2A")], "M" + wt + "K") == [
            (0, f"{wt}2A: wild type '{wt}' is not one of the 20 amino acids")
        ]


def test_masked_marginal_equals_the_table_and_batches_positions() -> None:
    model = TableModel()
    mutants = [mut.parse_mutant(m) for m in ("K2R", "K2A", "T3C", "K2R:T3C")]
    scores = mut.score_mutants(model, ALPHABET, WT, mutants, methods=["masked-marginal"])
    masked = model.logp(ALPHABET.mask_idx, 2)  # site 1 (K2) at token 2
    masked3 = model.logp(ALPHABET.mask_idx, 3)
    ix = ALPHABET.index
    k2r = masked[ix("R")] - masked[ix("K")]
    expected = [k2r, masked[ix("A")] - masked[ix("K")], masked3[ix("C")] - masked3[ix("T")]]
    expected.append(expected[0] + expected[2])  # multi-mutants sum over sites
    np.testing.assert_allclose(scores["masked-marginal"], torch.stack(expected).numpy(), rtol=1e-5)
    rows = sum(c.shape[0] for c in model.calls)
    assert rows == 2  # one masked sequence per distinct position, not per mutant


def test_wt_marginal_uses_the_unmasked_sequence() -> None:
    model = TableModel()
    ix = ALPHABET.index
    scores = mut.score_mutants(
        model, ALPHABET, WT, [mut.parse_mutant("Y5W")], methods=["wt-marginal"]
    )
    lp = model.logp(ix("Y"), 5)
    assert scores["wt-marginal"][0] == pytest.approx(float(lp[ix("W")] - lp[ix("Y")]), rel=1e-5)
    assert sum(c.shape[0] for c in model.calls) == 1


def test_pseudo_ll_is_the_difference_of_pseudo_likelihoods() -> None:
    model = TableModel()
    ix = ALPHABET.index
    scores = mut.score_mutants(
        model, ALPHABET, WT, [mut.parse_mutant("Y5W")], methods=["pseudo-ll"]
    )

    def pll(seq: str) -> float:
        return sum(float(model.logp(ALPHABET.mask_idx, i + 1)[ix(a)]) for i, a in enumerate(seq))

    assert scores["pseudo-ll"][0] == pytest.approx(pll(WT[:4] + "W" + WT[5:]) - pll(WT), abs=1e-4)


def test_long_proteins_use_a_window_centred_on_the_site() -> None:
    model = TableModel(max_len=12)  # 10 residues per window
    seq = "ACDEFGHIKLMNPQRSTVWY" * 2
    scored = []
    for site in (0, 4, 20, 39):
        model.calls.clear()
        m = [mut.Substitution(site, seq[site], "A" if seq[site] != "A" else "C")]
        mut.score_mutants(model, ALPHABET, seq, [m], max_tokens=12)
        (call,) = model.calls
        window = ALPHABET.decode(call[0])
        masked_at = int((call[0] == ALPHABET.mask_idx).nonzero()) - 1
        start = min(max(site - 5, 0), 30)
        assert call.shape[1] == 12
        assert window == (
            seq[start : start + 10][:masked_at] + seq[start + masked_at + 1 : start + 10]
        )
        assert masked_at == site - start
        scored.append(masked_at)
    assert scored == [0, 4, 5, 9]  # clamped at the ends, centred inside


def test_spearman_with_ties_and_missing() -> None:
    x = [1, 2, 2, 3, np.nan, 5]
    y = [10, 20, 20, 30, 1, 50]
    assert mut.spearman(x, y) == pytest.approx(1.0)
    assert mut.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert mut.spearman([1, 1, 1], [1, 2, 3]) is None

    def ranks(v: np.ndarray) -> np.ndarray:  # average ranks, by counting
        return (v[:, None] > v[None, :]).sum(1) + ((v[:, None] == v[None, :]).sum(1) - 1) / 2

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 50).astype(float), rng.normal(size=50)
    assert mut.spearman(a, b) == pytest.approx(np.corrcoef(ranks(a), ranks(b))[0, 1])


def test_baselines() -> None:
    parsed = [mut.parse_mutant(m) for m in ("D1E", "D1W", "D1E:K2R")]
    np.testing.assert_array_equal(mut.blosum62_scores(parsed), [2, -4, 4])
    counts = np.zeros(len(ALPHABET))
    counts[ALPHABET.index("E")] = 99
    u = mut.unigram_scores(parsed, counts, ALPHABET)
    assert u[0] == pytest.approx(np.log(100.0)) and u[1] == pytest.approx(0.0)


# ---- CLI -------------------------------------------------------------------------------
@pytest.fixture
def ckpt(tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(
        attention="performer_relu", dim=16, depth=1, heads=2, ffn_dim=16, max_len=32, nb_features=8
    )
    model = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx)
    counts = np.arange(len(ALPHABET), dtype=float)
    save_model_checkpoint(
        tmp_path / "m.ckpt", model, ALPHABET, "mlm", {"unigram_counts": counts.tolist()}
    )
    return tmp_path / "m.ckpt"


def write_csv(path, rows, header=("mutant", "fitness")) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def test_score_cli_writes_columns_spearman_and_plot(ckpt, tmp_path, capsys) -> None:
    rng = np.random.default_rng(0)
    rows = [
        (f"{WT[i]}{i + 11}{aa}", f"{rng.normal():.3f}")
        for i in range(len(WT))
        for aa in "ACDE"
        if aa != WT[i]
    ]
    write_csv(tmp_path / "m.csv", rows)
    code = main(
        [
            "score",
            f"checkpoint={ckpt}",
            f"sequence={WT}",
            f"mutations={tmp_path / 'm.csv'}",
            f"out={tmp_path / 's.csv'}",
            "offset=11",
            "fitness_col=fitness",
            "method=[masked-marginal,wt-marginal]",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert len(got) == len(rows)
    assert set(got[0]) == {
        "mutant",
        "fitness",
        "masked_marginal",
        "wt_marginal",
        "blosum62",
        "unigram_log_ratio",
    }
    summary = json.loads((tmp_path / "s.json").read_text())
    assert set(summary["spearman"]) == {
        "masked_marginal",
        "wt_marginal",
        "blosum62",
        "unigram_log_ratio",
    }
    assert (tmp_path / "s.png").stat().st_size > 0
    assert "Spearman with fitness" in out


@pytest.mark.parametrize(
    "rows, extra, message",
    [
        (
            [("M1A", "1")],
            ["mutation_col=variant"],
            "no column 'variant' (columns: mutant, fitness)",
        ),
        ([("M1A", "1"), ("1A", "2")], [], "line 3: cannot read mutation '1A'"),
        ([("K1A", "1"), ("M1A", "2")], [], "1 of 2 mutants do not fit the wild type"),
        ([], [], "no mutations"),
        ([("M1A", "1")], ["fitness_col=score"], "no column 'score'"),
    ],
)
def test_score_bad_input_is_one_line(ckpt, tmp_path, capsys, rows, extra, message) -> None:
    write_csv(tmp_path / "m.csv", rows)
    code = main(
        [
            "score",
            f"checkpoint={ckpt}",
            f"sequence={WT}",
            f"mutations={tmp_path / 'm.csv'}",
            f"out={tmp_path / 'o' / 's.csv'}",
            *extra,
        ]
    )
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "o" / "s.csv").exists()


@pytest.mark.parametrize(
    "header", ["mutant,fitness,fitness", "mutant,mutant,fitness", "mutant,fitness, fitness"]
)
def test_score_refuses_a_header_that_repeats_a_column(ckpt, tmp_path, capsys, header) -> None:
    """A row would keep only the last of two same-named fields: another column's values
    (or the mutant itself) silently replaced."""
    (tmp_path / "m.csv").write_text(f"{header}\nM1A,1,2\nM1C,3,4\n")
    code = _score(ckpt, tmp_path)
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "is repeated in the header" in err, err
    assert not (tmp_path / "s.csv").exists()


def test_score_reads_a_header_with_blank_trailing_columns(ckpt, tmp_path, capsys) -> None:
    """A spreadsheet's empty columns (``mutant,fitness,,``) name nothing: not a repeat."""
    (tmp_path / "m.csv").write_text("mutant,fitness,,\nM1A,1,,\nM1C,3,,\n")
    assert _score(ckpt, tmp_path) == 0, capsys.readouterr().err


def test_score_errors_name_the_csv_line_past_blank_lines(ckpt, tmp_path, capsys) -> None:
    (tmp_path / "m.csv").write_text("mutant,fitness\nM1A,1\n\n\n1A,2\n")
    code = _score(ckpt, tmp_path)
    _, err = capsys.readouterr()
    assert code == 2 and "line 5: cannot read mutation '1A'" in err, err


def test_score_skip_mismatched_leaves_rows_blank(ckpt, tmp_path, capsys) -> None:
    write_csv(tmp_path / "m.csv", [("K1A", "1"), ("M1A", "2")])
    code = _score(ckpt, tmp_path, "skip_mismatched=true")
    assert code == 0
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert got[0]["masked_marginal"] == "" and got[1]["masked_marginal"] != ""
    code = _score(ckpt, tmp_path, out="m.csv")
    assert code == 2 and "mutations CSV itself" in capsys.readouterr().err


def _score(ckpt, tmp_path, *extra, csv_name="m.csv", out="s.csv"):
    return main(
        [
            "score",
            f"checkpoint={ckpt}",
            f"sequence={WT}",
            f"mutations={tmp_path / csv_name}",
            f"out={tmp_path / out}",
            *extra,
        ]
    )


def test_score_never_replaces_a_file_it_did_not_write(ckpt, tmp_path, capsys) -> None:
    write_csv(tmp_path / "m.csv", [("M1A", "1"), ("K2R", "2"), ("T3C", "0.5")])
    (tmp_path / "payroll.csv").write_text("name,salary\nbob,10\n")
    assert _score(ckpt, tmp_path, "overwrite=true", out="payroll.csv") == 2
    assert "never replaced" in capsys.readouterr().err
    assert (tmp_path / "payroll.csv").read_text() == "name,salary\nbob,10\n"
    (tmp_path / "s.png").write_text("my plot")
    assert _score(ckpt, tmp_path, "fitness_col=fitness", "overwrite=true") == 2
    assert "score also writes its scatter plot s.png" in capsys.readouterr().err
    (tmp_path / "s.png").unlink()
    capsys.readouterr()
    assert _score(ckpt, tmp_path, "fitness_col=fitness") == 0
    assert (tmp_path / "s.png").exists()
    assert f"plot: {tmp_path / 's.png'}" in capsys.readouterr().out
    # again without fitness: the old plot (ours) would describe another run; it goes
    assert _score(ckpt, tmp_path, "overwrite=true") == 0
    assert not (tmp_path / "s.png").exists() and "plot:" not in capsys.readouterr().out
    assert "spearman" not in json.loads((tmp_path / "s.json").read_text())


def test_score_reads_tabs_wild_type_rows_and_hints_the_offset(ckpt, tmp_path, capsys) -> None:
    (tmp_path / "m.tsv").write_text("mutant\tfitness\n_wt\t0\nK2R\t1\nT3C:Y5W\t2\n")
    assert _score(ckpt, tmp_path, csv_name="m.tsv") == 0
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh, delimiter="\t"))
    assert float(got[0]["masked_marginal"]) == 0.0 and got[2]["blosum62"] == "1"  # T>C -1, Y>W +2
    write_csv(tmp_path / "m.csv", [("K11R", "1"), ("T12C", "2"), ("Y14W", "3")])
    assert _score(ckpt, tmp_path, "out=x.csv") == 2
    err = capsys.readouterr().err
    assert "none of the 3 mutants fit" in err and "offset=10 would fit 3 of 3 sites" in err
    write_csv(tmp_path / "m.csv", [("K2*", "1"), ("K2R", "2")])
    assert _score(ckpt, tmp_path, "skip_mismatched=true", out="y.csv") == 0
    out = capsys.readouterr().out
    assert "1 row left unscored: stops: 1" in out
    assert "first stops: line 2: 'K2*' is a stop (nonsense) mutant" in out


@pytest.mark.slow
def test_score_says_why_rows_are_left_out_and_reads_spreadsheet_files(ckpt, tmp_path, capsys):
    """What a DMS file holds besides substitutions is counted by reason; a numbering that fits
    few rows is refused even with skip_mismatched (it scored the few that fit by chance, each
    at the wrong residue); synonymous rows score 0 in every column (BLOSUM62 gave its
    diagonal); a European export (`;`, decimal commas) and blank spreadsheet rows are read."""
    write_csv(
        tmp_path / "m.csv",
        [("K2*", "1"), ("K2R", "2"), ("T3del", "1"), ("T3C", "0.5"), ("A2G", "1"), ("K2K", "3")],
    )
    assert _score(ckpt, tmp_path, "skip_mismatched=true", "fitness_col=fitness") == 0
    out = capsys.readouterr().out
    assert (
        "3 rows left unscored: stops: 1, unreadable (other notations): 1, wild type differs: 1"
        in out
    )
    assert "1 synonymous row (first: line 7, K2K) scored 0 in every column" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["unscored_by_reason"]["stops"] == 1 and summary["unscored_total"] == 3
    assert summary["wild_type_sequence"] == WT and summary["synonymous"] == 1
    with open(tmp_path / "s.csv", newline="") as fh:
        got = {r["mutant"]: r for r in csv.DictReader(fh)}
    assert got["K2K"]["blosum62"] == "0" and float(got["K2K"]["masked_marginal"]) == 0.0
    # most rows naming another residue: a wrong offset, refused with the one that fits
    rows = [(f"{aa}{i + 11}A", "1") for i, aa in enumerate(WT[:-1]) if aa != "A"]
    write_csv(tmp_path / "m.csv", [*rows, ("K2R", "1")])
    assert _score(ckpt, tmp_path, "skip_mismatched=true", "overwrite=true") == 2
    err = capsys.readouterr().err
    assert "a wrong offset= or record=, not rows to skip; offset=11 would fit" in err
    # a scan of a longer protein scored on one domain: rows past its end are a crop, not a
    # wrong numbering (every row inside it matches)
    rows = [(f"{aa}{i + 1}A", "1") for i, aa in enumerate(WT) if aa != "A"]
    write_csv(tmp_path / "m.csv", rows + [(f"K{n}A", "1") for n in range(23, 60)])
    assert _score(ckpt, tmp_path, "skip_mismatched=true", "overwrite=true") == 0
    assert "position outside the sequence: 37" in capsys.readouterr().out
    # a European spreadsheet: semicolons, decimal commas, a space after the separator in the
    # header, blank rows of empty fields
    (tmp_path / "eu.csv").write_text("mutant; fitness\nK2R;0,5\nT3C;1,25\nY5W;-2\n;\n;\n")
    args = ("fitness_col=fitness", "overwrite=true")
    assert _score(ckpt, tmp_path, *args, csv_name="eu.csv") == 0
    out = capsys.readouterr().out
    assert "Spearman with fitness (n=3;" in out and "without a numeric value" not in out
    assert "2 rows of empty fields left out" in out and "unigram baseline: not available" not in out
    # the scores it adds are written as its own numbers are: with a decimal comma
    table = (tmp_path / "s.csv").read_text().splitlines()
    assert table[0].startswith("mutant;") and table[1].startswith("K2R;0,5;")
    scores = [v for line in table[1:] for v in line.split(";")[2:] if v]
    assert scores and all("." not in v for v in scores) and any("," in v for v in scores)
    blosum = [line.split(";")[table[0].split(";").index("blosum62")] for line in table[1:]]
    assert blosum == ["2", "-1", "2"]  # R/K, C/T, W/Y: whole numbers as before
    masked = table[0].split(";").index("masked_marginal")
    assert float(table[1].split(";")[masked].replace(",", ".")) != 0
    # a semicolon file whose measured values have points keeps them, whatever other columns hold
    (tmp_path / "pt.csv").write_text(
        "mutant;sites;fitness\nK2R;2,3;0.5\nT3C;3,4;1.25\nY5W;5,6;-2\n"
    )
    assert _score(ckpt, tmp_path, *args, csv_name="pt.csv") == 0
    capsys.readouterr()
    written = [line.split(";")[3:] for line in (tmp_path / "s.csv").read_text().splitlines()[1:]]
    assert all("," not in v for row in written for v in row) and any(
        "." in v for row in written for v in row
    )
    # a checkpoint without training residue counts: the missing baseline is said
    model = ProteinLM(
        ModelConfig(attention="performer_relu", dim=16, depth=1, heads=2, ffn_dim=16, max_len=32),
        len(ALPHABET),
        ALPHABET.pad_idx,
    )
    save_model_checkpoint(tmp_path / "bare.ckpt", model, ALPHABET, "mlm")
    assert _score(tmp_path / "bare.ckpt", tmp_path, *args, csv_name="eu.csv") == 0
    assert "unigram baseline: not available" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["baselines_missing"] == [
        "unigram_log_ratio"
    ]


def test_score_refuses_ragged_rows_and_side_output_names(ckpt, tmp_path, capsys) -> None:
    (tmp_path / "m.csv").write_text("mutant,fitness\nK2R,1\nT3C,2,\n")
    assert _score(ckpt, tmp_path) == 2
    assert "1 rows do not have the header's 2 fields (lines 3)" in capsys.readouterr().err
    write_csv(tmp_path / "m.csv", [("K2R", "1")])
    assert _score(ckpt, tmp_path, out="s.json") == 2
    assert ".json is the name of a side output" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("mutant", "problem"),
    [
        ("M0A", "M0A: position 0 is outside 1-22"),
        ("K2A:Q23A", "Q23A: position 23 is outside 1-22"),
        ("A2G", "A2G: the sequence has K at 2"),
    ],
)
def test_the_api_refuses_mutants_that_do_not_fit(mutant, problem) -> None:
    """Position 0 once read the <cls> slot and one past the end <eos>: a score for nothing."""
    model = TableModel()
    with pytest.raises(DataError, match=f"^mutant 2 does not fit the wild type: {problem}$"):
        mut.score_mutants(model, ALPHABET, WT, ["K2R", mutant])
    assert model.calls == []


def test_the_api_takes_mutant_strings_and_the_models_window() -> None:
    model = TableModel(max_len=12)
    seq = "ACDEFGHIKLMNPQRSTVWY" * 2
    by_text = mut.score_mutants(model, ALPHABET, seq, ["D23A", "C2A:D23A"])["masked-marginal"]
    assert {c.shape[1] for c in model.calls} == {12}  # windows of the model's max_len
    parsed = [mut.parse_mutant(m) for m in ("D23A", "C2A:D23A")]
    by_sites = mut.score_mutants(model, ALPHABET, seq, parsed, max_tokens=12)["masked-marginal"]
    np.testing.assert_array_equal(by_text, by_sites)


def _causal_model() -> ProteinLM:
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=64)
    return ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx, causal=True).double()


def test_causal_log_likelihood_is_the_sum_of_next_token_log_probs() -> None:
    model = _causal_model().eval()
    seqs = ["MKTAYIAKQR", "MKV", "ACDEFGHIKLMNPQ"]
    got = mut.log_likelihoods(model, ALPHABET, seqs, toks_per_batch=20)  # several batches
    for seq, ll in zip(seqs, got, strict=True):
        ids = [ALPHABET.cls_idx, *ALPHABET.encode(seq).tolist(), ALPHABET.eos_idx]
        logp = torch.log_softmax(model(torch.tensor([ids]))["logits"][0], -1)
        expected = sum(logp[t, ids[t + 1]].item() for t in range(len(ids) - 1))
        assert ll == pytest.approx(expected, abs=1e-10)
    assert mut.log_likelihood(model, ALPHABET, "MKV") == pytest.approx(got[1], abs=1e-12)
    # a model trained on packed windows: each protein between <sep> tokens
    packed = mut.log_likelihoods(model, ALPHABET, seqs, packed=True)
    for seq, ll in zip(seqs, packed, strict=True):
        ids = [ALPHABET.sep_idx, *ALPHABET.encode(seq).tolist(), ALPHABET.sep_idx]
        logp = torch.log_softmax(model(torch.tensor([ids]))["logits"][0], -1)
        assert ll == pytest.approx(sum(logp[t, ids[t + 1]].item() for t in range(len(ids) - 1)))
    scores = mut.score_mutants(model, ALPHABET, "MKV", ["K2A"], packed=True)
    assert scores["log-likelihood"][0] == pytest.approx(
        mut.log_likelihood(model, ALPHABET, "MAV", packed=True) - packed[1]
    )
    padded = mut.log_likelihoods(model, ALPHABET, seqs, toks_per_batch=1000)  # one padded batch
    np.testing.assert_allclose(padded, got, rtol=0, atol=1e-10)
    assert mut.log_likelihoods(model, ALPHABET, []).shape == (0,)


def test_causal_models_score_by_log_likelihood_and_masked_lms_by_their_methods() -> None:
    from protein_performer.errors import ConfigError

    model = _causal_model()
    mutants = ["K2A", "T3C:A4G", "M1M"]
    scores = mut.score_mutants(model, ALPHABET, WT, mutants)  # the causal default
    assert list(scores) == ["log-likelihood"]
    wt = mut.log_likelihood(model, ALPHABET, WT)
    for m, score in zip(mutants, scores["log-likelihood"], strict=True):
        seq = list(WT)
        for site in mut.parse_mutant(m):
            seq[site.index] = site.mt
        assert score == pytest.approx(mut.log_likelihood(model, ALPHABET, "".join(seq)) - wt)
    assert scores["log-likelihood"][2] == 0.0  # synonymous
    for method in ("masked-marginal", "pseudo-ll"):
        with pytest.raises(ConfigError, match=r"causal \(next-token\): score it with method=log"):
            mut.score_mutants(model, ALPHABET, WT, mutants, methods=method)
    with pytest.raises(ConfigError, match=r"pseudo_log_likelihood needs a masked-LM model"):
        mut.pseudo_log_likelihood(model, ALPHABET, WT)
    model.causal = False  # the same weights as a masked LM
    assert mut.score_mutants(model, ALPHABET, WT, mutants)["masked-marginal"].shape == (3,)
    assert np.isfinite(mut.pseudo_log_likelihood(model, ALPHABET, WT))
    with pytest.raises(ConfigError, match="method=log-likelihood scores with a causal"):
        mut.score_mutants(model, ALPHABET, WT, mutants, methods="ll")
    with pytest.raises(ConfigError, match="log_likelihood needs a causal"):
        mut.log_likelihood(model, ALPHABET, WT)


def test_score_picks_log_likelihood_for_a_causal_checkpoint(tmp_path, capsys):
    save_model_checkpoint(tmp_path / "causal.ckpt", _causal_model().float(), ALPHABET, "causal")
    write_csv(tmp_path / "m.csv", [("K2A", "1"), ("T3C", "2"), ("A4G", "0.5")])
    assert _score(tmp_path / "causal.ckpt", tmp_path) == 0
    header, *rows = (tmp_path / "s.csv").read_text().splitlines()
    assert header.split(",")[:3] == ["mutant", "fitness", "log_likelihood"]
    wt = mut.log_likelihood(_causal_model(), ALPHABET, WT)
    k2a = mut.log_likelihood(_causal_model(), ALPHABET, "MA" + WT[2:]) - wt
    assert float(rows[0].split(",")[2]) == pytest.approx(k2a, rel=1e-4, abs=1e-5)
    assert "(log-likelihood)" in capsys.readouterr().out
    assert _score(tmp_path / "causal.ckpt", tmp_path, "overwrite=true") == 0  # its own CSV
    # a masked-LM method is refused before the mutations file is read (it has a stop here)
    write_csv(tmp_path / "m.csv", [("K2A", "1"), ("S4*", "2")])
    code = _score(tmp_path / "causal.ckpt", tmp_path, "method=masked-marginal", out="t.csv")
    err = capsys.readouterr().err
    assert code == 2 and "score it with method=log-likelihood" in err and "S4*" not in err


def test_score_says_a_csv_is_expected_for_a_directory(ckpt, tmp_path, capsys) -> None:
    (tmp_path / "m.csv").mkdir()
    code = _score(ckpt, tmp_path)
    _, err = capsys.readouterr()
    assert code == 2 and "m.csv: is a directory, expected a CSV of mutations" in err, err


def test_score_refuses_a_directory_out_and_a_fitness_column_without_numbers(
    ckpt, tmp_path, capsys
) -> None:
    write_csv(tmp_path / "m.csv", [("K2R", "n/a"), ("K2A", "")])
    args = [f"checkpoint={ckpt}", f"sequence={WT}", f"mutations={tmp_path / 'm.csv'}"]
    assert main(["score", *args, f"out={tmp_path}/new/"]) == 2
    assert (
        "out: names a directory (trailing '/'); expected a CSV file name" in capsys.readouterr().err
    )
    assert _score(ckpt, tmp_path, "fitness_col=fitness") == 2
    assert "column 'fitness' holds no numbers (e.g. 'n/a')" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.ckpt", "m.csv"]


def test_score_wild_type_inputs_read_like_fasta_records(ckpt, tmp_path, capsys) -> None:
    write_csv(tmp_path / "m.csv", [("K2R", "1.0"), ("K2A", "0.5")])
    args = [f"checkpoint={ckpt}", f"mutations={tmp_path / 'm.csv'}"]
    # a terminal stop is dropped from sequence= as from a FASTA record
    assert main(["score", *args, f"sequence={WT}*", f"out={tmp_path / 'a.csv'}"]) == 0
    capsys.readouterr()
    summary = json.loads((tmp_path / "a.json").read_text())
    assert summary["length"] == len(WT) and summary["attention_kind"] == "performer_relu"
    # score has no strip_gaps= or invalid=: the error does not suggest them, but says what a
    # gap is and what to give instead
    (tmp_path / "wt.fa").write_text(f">wt\n{WT[:5]}-{WT[5:]}\n")
    assert main(["score", *args, f"fasta={tmp_path / 'wt.fa'}", f"out={tmp_path / 'b.csv'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: {tmp_path / 'wt.fa'}: record 1 (wt): invalid residue '-' at position 6 (an "
        "alignment gap: give the wild type unaligned"
    )
    assert err.count("\n") == 1 and "strip_gaps" not in err and "invalid=" not in err


def test_score_says_when_rows_repeat_a_mutant(ckpt, tmp_path, capsys) -> None:
    write_csv(tmp_path / "m.csv", [("K2R", "1"), ("K2A", "2"), ("k2r", "3"), ("T3C:K2A", "4"),
                                   ("K2A:T3C", "5")])  # fmt: skip
    assert _score(ckpt, tmp_path, "fitness_col=fitness") == 0
    out = capsys.readouterr().out
    assert "2 rows repeat an earlier mutant (first: line 4 repeats line 2): scored again" in out
    assert "Spearman with fitness (n=5; few pairs: ±0.50 by chance)" in out
    assert json.loads((tmp_path / "s.json").read_text())["repeated_mutants"] == 2
    with open(tmp_path / "s.csv", newline="") as fh:
        scores = [r["masked_marginal"] for r in csv.DictReader(fh)]
    assert scores[0] == scores[2] and scores[3] == scores[4]


def test_a_pasted_sequence_is_checked_as_it_is_scored() -> None:
    """Line breaks and lower case are read away before scoring: the wild-type check reads the
    same residues (it once read the raw string, so a mutant naming the wrong residue passed)."""
    model = TableModel()
    pasted = f"{WT[:10].lower()}\n{WT[10:]} *"  # residue 12 is I
    with pytest.raises(ValueError, match="Q12A: the sequence has I at 12"):
        mut.score_mutants(model, ALPHABET, pasted, ["Q12A"])
    np.testing.assert_array_equal(
        mut.score_mutants(model, ALPHABET, pasted, ["I12A"])["masked-marginal"],
        mut.score_mutants(model, ALPHABET, WT, ["I12A"])["masked-marginal"],
    )
    # one mutant as a string, one method as a string, positions numbered from offset
    one = mut.score_mutants(model, ALPHABET, WT, "I112A", methods="wt-marginal", offset=101)
    assert list(one) == ["wt-marginal"] and one["wt-marginal"].shape == (1,)
    with pytest.raises(ValueError, match="I12A: position 12 is outside 101-122"):
        mut.score_mutants(model, ALPHABET, WT, ["I12A"], offset=101)


def test_scores_are_from_eval_mode_and_the_models_mode_is_kept() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=32, depth=2, heads=4, ffn_dim=64, dropout=0.5)
    model = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx)
    assert model.training
    first = mut.score_mutants(model, ALPHABET, WT, ["K2A", "Y5W"], methods=mut.MLM_METHODS)
    assert model.training  # left as it was
    second = mut.score_mutants(model, ALPHABET, WT, ["K2A", "Y5W"], methods=mut.MLM_METHODS)
    for method in mut.MLM_METHODS:
        np.testing.assert_array_equal(first[method], second[method])  # no dropout
    model.causal = True  # the causal method too
    ll = [mut.score_mutants(model, ALPHABET, WT, ["K2A"])["log-likelihood"] for _ in range(2)]
    assert model.training and ll[0] == ll[1]
    model.causal = False
    pll = mut.pseudo_log_likelihood(model, ALPHABET, WT)
    assert model.training and pll == mut.pseudo_log_likelihood(model.eval(), ALPHABET, WT)


@pytest.mark.slow
def test_score_files_of_other_encodings_and_esm_names(ckpt, tmp_path, capsys) -> None:
    write_csv(tmp_path / "m.csv", [("K2R", "1")])
    data = (tmp_path / "m.csv").read_bytes()
    (tmp_path / "u16.csv").write_bytes(data.decode().encode("utf-16"))
    (tmp_path / "lat.csv").write_bytes(data + b"T3C,2\xb5\n")
    (tmp_path / "gz.csv").write_bytes(gzip.compress(data))
    for name, message in (
        ("u16.csv", "UTF-16 text"),
        ("lat.csv", r"not UTF-8 text \(byte 0xb5 on line 3\)"),
        ("gz.csv", "gzip-compressed"),
    ):
        assert _score(ckpt, tmp_path, csv_name=name) == 2
        assert re.search(message, capsys.readouterr().err), name
    fasta = tmp_path / "wt.fasta"
    fasta.write_text(f">wt\n{WT}\n")
    code = main(["score", f"checkpoint={ckpt}", f"sequence={fasta}",
                 f"mutations={tmp_path / 'm.csv'}", f"out={tmp_path / 'x.csv'}"])  # fmt: skip
    assert code == 2 and "names a file: give it as fasta=" in capsys.readouterr().err
    # a long sequence is a sequence (a file-name check once failed on names over 255 bytes)
    long_wt = "MKVLAAGICW" * 40
    code = main(["score", f"checkpoint={ckpt}", f"sequence={long_wt}",
                 f"mutations={tmp_path / 'm.csv'}", f"out={tmp_path / 'long.csv'}",
                 "skip_mismatched=true"])  # fmt: skip
    assert code == 0 and "scored 1 of 1 mutants" in capsys.readouterr().out
    # thousands separators either way in a ';' file
    (tmp_path / "eu.csv").write_text("mutant;fitness\nK2R;1.234,5\nT3C;1,234.5\nY5W;0,5\n")
    assert _score(ckpt, tmp_path, "fitness_col=fitness", csv_name="eu.csv", out="eu_o.csv") == 0
    assert "(n=3;" in capsys.readouterr().out
    # ESM's method names are ours under another spelling
    assert _score(ckpt, tmp_path, "method=[masked-marginals,wt_marginal]") == 0
    assert "(masked-marginal, wt-marginal)" in capsys.readouterr().out


def test_score_never_replaces_a_file_that_appeared_while_scoring(ckpt, tmp_path, monkeypatch):
    write_csv(tmp_path / "m.csv", [("K2A", "1"), ("T3C", "2")])
    real = mut.score_mutants

    def slow(*args, **kwargs):
        scores = real(*args, **kwargs)
        (tmp_path / "s.json").write_text("{}")  # someone else's file, meanwhile
        return scores

    monkeypatch.setattr(marginals, "score_mutants", slow)
    assert _score(ckpt, tmp_path) == 2
    assert (tmp_path / "s.json").read_text() == "{}" and not (tmp_path / "s.csv").exists()
    # the scatter plot too, when fitness_col= asks for one
    (tmp_path / "s.json").unlink()

    def plotted(*args, **kwargs):
        scores = real(*args, **kwargs)
        (tmp_path / "s.png").write_text("my plot")
        return scores

    monkeypatch.setattr(marginals, "score_mutants", plotted)
    assert _score(ckpt, tmp_path, "fitness_col=fitness") == 2
    assert (tmp_path / "s.png").read_text() == "my plot" and not (tmp_path / "s.csv").exists()


# ---- whole sequences and indels (ProteinGym's mutated_sequence / indel files) ------------
def test_whole_sequences_are_substitutions_or_indels() -> None:
    same = WT[:4] + "W" + WT[5:]
    assert mut.parse_variant(same, WT) == [mut.Substitution(4, "Y", "W")]
    assert mut.parse_variant(same.lower() + "*", WT) == [mut.Substitution(4, "Y", "W")]
    assert mut.parse_variant(WT, WT) == []  # the wild type itself
    assert mut.parse_variant(WT[:5] + WT[6:], WT) == mut.Indel(WT[:5] + WT[6:])  # deletion
    assert mut.parse_variant("Y5W", WT) == [mut.Substitution(4, "Y", "W")]
    assert mut.parse_variant("WT", WT) == mut.parse_variant("wildtype", WT) == []
    with pytest.raises(DataError, match="cannot read mutation 'deletion'"):
        mut.parse_variant("deletion", WT)
    with pytest.raises(DataError, match=r"'-' at position 3 is not a residue letter"):
        mut.variant_from_sequence("MK-AYIAKQRQISFVKSHFSRQ", WT)
    # Z is a letter (Glu or Gln): read, then said to be none of the 20
    z = mut.variant_from_sequence(WT[:-1] + "Z", WT)
    assert z == [mut.Substitution(len(WT) - 1, WT[-1], "Z")]
    assert mut.check_mutants([z], WT)[0][1].endswith("not one of the 20 amino acids")
    assert mut.check_mutants([mut.Indel("MKXA" + WT)], WT) == [
        (0, "indel: 'X' at 3 is not one of the 20 amino acids")
    ]


def test_indels_are_scored_by_their_whole_sequence() -> None:
    causal = _causal_model()
    deletion, insertion, sub = WT[:5] + WT[6:], WT[:3] + "GG" + WT[3:], WT[:1] + "A" + WT[2:]
    scores = mut.score_mutants(causal, ALPHABET, WT, [deletion, insertion, sub, "K2A"])
    wt = mut.log_likelihood(causal, ALPHABET, WT)
    expected = [mut.log_likelihood(causal, ALPHABET, s) - wt for s in (deletion, insertion, sub)]
    np.testing.assert_allclose(scores["log-likelihood"][:3], expected, rtol=0, atol=1e-10)
    assert scores["log-likelihood"][3] == scores["log-likelihood"][2]  # K2A by notation

    table = TableModel()
    got = mut.score_mutants(table, ALPHABET, WT, [mut.Indel(deletion)], methods="pseudo-ll")
    wt_pll = mut.pseudo_log_likelihood(table, ALPHABET, WT)
    assert got["pseudo-ll"][0] == pytest.approx(
        mut.pseudo_log_likelihood(table, ALPHABET, deletion) - wt_pll, abs=1e-9
    )
    with pytest.raises(
        ValueError, match=r"mutant 2 is an indel \(21 residues, the wild type has 22\)"
    ):
        mut.score_mutants(table, ALPHABET, WT, ["K2A", deletion])  # masked-marginal
    both = mut.score_mutants(
        table, ALPHABET, WT, ["K2A", deletion], methods=["masked-marginal", "pseudo-ll"]
    )
    assert np.isnan(both["masked-marginal"][1]) and not np.isnan(both["masked-marginal"][0])
    assert both["pseudo-ll"][1] == pytest.approx(got["pseudo-ll"][0], abs=1e-9)
    with pytest.raises(ValueError, match=r"mutant 1 does not fit .* an indel of 66 residues"):
        mut.score_mutants(table, ALPHABET, WT, [WT * 3], methods="pseudo-ll")  # 66 > 62
    other = "ACDEFGHIKLMNPQRSTVWYAC"  # another protein of the same length: not 20 substitutions
    with pytest.raises(ValueError, match="a whole sequence unlike the wild type"):
        mut.score_mutants(table, ALPHABET, WT, [other])


def test_indel_baselines() -> None:
    counts = np.zeros(len(ALPHABET))
    counts[ALPHABET.index("G")] = 99
    variants = [mut.Indel("MKGG"), mut.parse_mutant("M1G")]
    assert np.isnan(mut.blosum62_scores(variants)[0])
    u = mut.unigram_scores(variants, counts, ALPHABET, wild_type="MK")
    logf = np.log(np.array([100.0, 1.0]) / 119.0)  # G, any other
    assert u[0] == pytest.approx(2 * logf[0])  # two G added
    assert u[1] == pytest.approx(logf[0] - logf[1])
    with pytest.raises(ValueError, match="needs wild_type"):
        mut.unigram_scores(variants, counts, ALPHABET)


def test_score_reads_proteingym_indel_files(tmp_path, capsys) -> None:
    save_model_checkpoint(tmp_path / "causal.ckpt", _causal_model().float(), ALPHABET, "causal")
    deletion, insertion = WT[:5] + WT[6:], WT[:3] + "GG" + WT[3:]
    rows = [(deletion, "0.1"), (insertion, "0.5"), ("K2A", "0.9"), (WT[:1] + "R" + WT[2:], "1")]
    write_csv(tmp_path / "m.csv", rows, header=("mutant", "DMS_score"))
    assert _score(tmp_path / "causal.ckpt", tmp_path, "fitness_col=DMS_score") == 0
    out = capsys.readouterr().out
    assert "2 indels (whole sequences of another length" in out
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    model = _causal_model()
    wt = mut.log_likelihood(model, ALPHABET, WT)
    for row, seq in zip(got, (deletion, insertion, "MA" + WT[2:], "MR" + WT[2:]), strict=True):
        expected = mut.log_likelihood(model, ALPHABET, seq) - wt
        assert float(row["log_likelihood"]) == pytest.approx(expected, rel=1e-4, abs=1e-4)
    assert [r["blosum62"] for r in got][:2] == ["", ""] and got[2]["blosum62"] == "-1"
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["indels"] == 2 and summary["scored"] == 4
    # the same variants as whole sequences in another column, ProteinGym v1's mutated_sequence
    rows = [("x", s, f) for s, f in ((deletion, "0.1"), ("MA" + WT[2:], "0.9"))]
    write_csv(tmp_path / "v.csv", rows, header=("mutant", "mutated_sequence", "DMS_score"))
    assert _score(tmp_path / "causal.ckpt", tmp_path, csv_name="v.csv", out="t.csv") == 2
    assert "cannot read mutation 'x'" in capsys.readouterr().err
    code = _score(
        tmp_path / "causal.ckpt",
        tmp_path,
        "sequence_col=mutated_sequence",
        csv_name="v.csv",
        out="t.csv",
    )
    assert code == 0
    with open(tmp_path / "t.csv", newline="") as fh:
        again = list(csv.DictReader(fh))
    assert [r["log_likelihood"] for r in again] == [
        got[0]["log_likelihood"],
        got[2]["log_likelihood"],
    ]
    write_csv(tmp_path / "w.csv", [(deletion, "1")], header=("mutated_sequence", "DMS_score"))
    assert _score(tmp_path / "causal.ckpt", tmp_path, csv_name="w.csv", out="u.csv") == 2
    assert "or sequence_col=mutated_sequence" in capsys.readouterr().err


def test_score_leaves_indels_to_the_whole_sequence_methods(ckpt, tmp_path, capsys) -> None:
    deletion = WT[:5] + WT[6:]
    write_csv(tmp_path / "m.csv", [(deletion, "0.1"), ("K2A", "0.9"), ("T3C", "0.3")])
    # masked-marginal, the masked LM's default, cannot score an indel: left unscored, said why
    assert _score(ckpt, tmp_path) == 0
    out = capsys.readouterr().out
    assert "1 row left unscored: indels: 1" in out
    assert "first indels: line 2: an indel (21 residues" in out and "method=pseudo-ll" in out
    assert _score(ckpt, tmp_path, "skip_mismatched=true", "overwrite=true") == 0
    assert "1 row left unscored: indels: 1" in capsys.readouterr().out
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert got[0]["masked_marginal"] == "" and got[1]["masked_marginal"] != ""
    assert _score(ckpt, tmp_path, "method=pseudo-ll", "overwrite=true") == 0
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert all(r["pseudo_ll"] != "" for r in got)
    pll = [r["pseudo_ll"] for r in got]
    # beside a site method the indel is still scored by the whole-sequence one
    assert _score(ckpt, tmp_path, "method=[masked-marginal,pseudo-ll]", "overwrite=true") == 0
    out = capsys.readouterr().out
    assert "scored 3 of 3" in out and "masked_marginal, blosum62 blank for them" in out
    assert "a deletion loses terms" in out  # whole-sequence sums: rank indels among indels
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert [r["pseudo_ll"] for r in got] == pll
    assert got[0]["masked_marginal"] == "" and got[1]["masked_marginal"] != ""
    # with fitness: the site column correlates over the substitutions only, and says so
    code = _score(
        ckpt, tmp_path, "method=[masked-marginal,pseudo-ll]", "fitness_col=fitness",
        "overwrite=true",
    )  # fmt: skip
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert code == 0 and summary["pairs"] == 3
    assert summary["pairs_by_column"]["masked_marginal"] == 2
    assert summary["pairs_by_column"]["pseudo_ll"] == 3
    assert "masked_marginal" in out and "(n=2)" in out


def test_whole_sequences_of_another_protein_are_not_scored_as_its_variants(tmp_path, capsys):
    assert mut.unlike_wild_type(mut.Indel(WT[:5] + WT[7:]), WT) is None  # a deletion
    other = "ACDEFGHIKLMNPQRSTVWYAC"  # 22 residues like WT, another protein
    assert "unlike the wild type (22 substitutions; 0 of its 22" in mut.unlike_wild_type(
        mut.variant_from_sequence(other, WT), WT
    )
    assert mut.unlike_wild_type(mut.Indel(other + "G"), WT) is not None
    save_model_checkpoint(tmp_path / "causal.ckpt", _causal_model().float(), ALPHABET, "causal")
    rows = [(other, "1"), (other[:-1], "2"), ("K2A", "3")]
    write_csv(tmp_path / "m.csv", rows, header=("mutant", "DMS_score"))
    code = _score(tmp_path / "causal.ckpt", tmp_path, "skip_mismatched=true")
    err = capsys.readouterr().err
    assert code == 2 and "a wrong offset= or record=" in err  # most rows: a wrong protein
    long = WT + "G" * 50  # 72 residues > the window's 62
    rows = [(long, "1"), (WT[:5] + WT[6:], "2"), ("K2A", "3")]
    write_csv(tmp_path / "m.csv", rows, header=("mutant", "DMS_score"))
    assert _score(tmp_path / "causal.ckpt", tmp_path) == 0  # an indel it cannot score: left out
    out = capsys.readouterr().out
    assert "line 2: an indel of 72 residues, longer than the model's window (62" in out
    assert _score(tmp_path / "causal.ckpt", tmp_path, "skip_mismatched=true", "overwrite=true") == 0
    assert "longer than the model's window: 1" in capsys.readouterr().out
    with open(tmp_path / "s.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert got[0]["log_likelihood"] == "" and got[1]["log_likelihood"] != ""


def test_a_list_where_score_takes_one_file_is_said_plainly(tmp_path, capsys):
    code = main(["score", "fasta=[a.fa,b.fa]", "mutations=m.csv", f"out={tmp_path / 's.csv'}"])
    err = capsys.readouterr().err
    assert code == 2 and err == "error: fasta: takes one value, not a list (got ['a.fa', 'b.fa'])\n"


def test_overwrite_keeps_a_scores_csv_a_user_added_to(ckpt, tmp_path, capsys):
    write_csv(tmp_path / "m.csv", [("M1A", "1"), ("K2R", "2")])
    assert _score(ckpt, tmp_path) == 0
    out = tmp_path / "s.csv"
    lines = out.read_text().splitlines()
    out.write_text("\n".join([lines[0] + ",my_notes", *(x + ",checked" for x in lines[1:])]) + "\n")
    mine = out.read_text()
    assert _score(ckpt, tmp_path, "overwrite=true") == 2
    assert "never replaced" in capsys.readouterr().err and out.read_text() == mine


def test_score_says_when_fitness_is_constant_and_the_wild_type_is_not_standard(
    ckpt, tmp_path, capsys
):
    write_csv(tmp_path / "m.csv", [("M1A", "1"), ("K2R", "1"), ("T3C", "1")])
    assert _score(ckpt, tmp_path, "fitness_col=fitness") == 0
    assert "every fitness value is the same: no correlation is defined" in capsys.readouterr().out
    code = main(
        [
            "score",
            f"checkpoint={ckpt}",
            "sequence=MKTXAYIAKQ",
            f"mutations={tmp_path / 'm.csv'}",
            f"out={tmp_path / 't.csv'}",
        ]
    )
    assert code == 0
    assert "the wild type holds X (not one of the 20 amino acids)" in capsys.readouterr().out


def test_score_frames_a_packed_causal_model_s_sequences_by_sep(tmp_path, kwarg_spy) -> None:
    seen = kwarg_spy(marginals, "score_mutants", "packed")
    write_csv(tmp_path / "m.csv", [("K2A", "1"), ("T3C", "2")])
    for mode in ("concat", "crop"):
        ckpt = tmp_path / f"{mode}.ckpt"
        save_model_checkpoint(
            ckpt, _causal_model().float(), ALPHABET, "causal", data={"mode": mode}
        )
        assert _score(ckpt, tmp_path, out=f"{mode}.csv") == 0
    assert seen == [True, False]


def test_old_import_paths_are_the_moved_modules():
    """The scan modules moved into analysis/dms/; their old names stay for one release."""
    from protein_performer.analysis import homolog_scoring, mutation_scan, mutation_table, pssm
    from protein_performer.analysis.dms import homologs, marginals, profile, scan, table, variants

    assert (mutation_scan, mutation_table, homolog_scoring, pssm) == (
        scan,
        table,
        homologs,
        profile,
    )
    assert mut.score_mutants is marginals.score_mutants
    assert mut.parse_mutant is variants.parse_mutant and mut.Indel is variants.Indel


def test_a_failure_while_writing_the_summary_leaves_the_old_one_whole(
    ckpt, tmp_path, monkeypatch, capsys
) -> None:
    """The scores CSV and summary JSON are written beside and renamed into place: a write that
    fails half way (disk full) never leaves half a file under their names, and a rename that
    fails leaves the summary of the run before, byte for byte."""
    import builtins
    import errno
    import io
    import os

    write_csv(tmp_path / "m.csv", [("M1A", "1.0"), ("K2E", "0.5"), ("T3W", "-1")])
    args = ["score", f"checkpoint={ckpt}", f"sequence={WT}", f"mutations={tmp_path / 'm.csv'}"]
    args += [f"out={tmp_path / 's.csv'}", "method=masked-marginal", "overwrite=true"]
    # the outputs of an earlier run (score replaces its own files only)
    (tmp_path / "s.csv").write_text("mutant,fitness,masked_marginal,blosum62\nM1A,1.0,0.1,-1\n")
    summary = tmp_path / "s.json"
    old = json.dumps({"methods": ["old"], "scored": 0, "mutations": "old.csv"}) + "\n"
    summary.write_text(old)
    old_csv = (tmp_path / "s.csv").read_text()
    os.link(summary, tmp_path / "reader.json")  # a reader's handle on the old files
    os.link(tmp_path / "s.csv", tmp_path / "reader.csv")
    outputs = {str(summary), str(tmp_path / "s.csv")}

    def is_output(path) -> bool:
        try:
            return os.path.abspath(os.fspath(path)) in outputs
        except TypeError:  # a file descriptor
            return False

    def is_summary(path) -> bool:
        return is_output(path) and os.fspath(path).endswith(".json")

    class HalfWrites:
        """A file that takes half of what is written, then reports the disk full."""

        def __init__(self, fh) -> None:
            self.fh = fh

        def write(self, data):
            self.fh.write(data[: len(data) // 2])
            self.fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    real_open, real_os_open, real_replace = builtins.open, os.open, os.replace

    def full_disk_open(file, mode="r", *a, **k):
        fh = real_open(file, mode, *a, **k)
        return HalfWrites(fh) if is_output(file) and set(mode) & set("wax+") else fh

    def full_disk_os_open(path, flags, *a, **k):
        if is_output(path) and flags & (os.O_WRONLY | os.O_RDWR):
            real_os_open(path, flags, *a, **k)  # truncated, as a real open for writing would
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_os_open(path, flags, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(builtins, "open", full_disk_open)
        m.setattr(io, "open", full_disk_open)
        m.setattr(os, "open", full_disk_os_open)
        code = main(args)
    capsys.readouterr()
    assert (tmp_path / "reader.json").read_text() == old  # never written in place
    assert (tmp_path / "reader.csv").read_text() == old_csv
    assert code == 0  # the outputs were never opened under their names
    assert json.loads(summary.read_text())["methods"] == ["masked-marginal"]  # whole
    with open(tmp_path / "s.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 3

    summary.unlink()
    summary.write_text(old)

    def failing_replace(src, dst, *a, **k):
        if is_summary(dst):
            raise OSError(errno.EIO, "Input/output error")
        return real_replace(src, dst, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", failing_replace)
        code = main(args)
    capsys.readouterr()
    assert code != 0 and summary.read_text() == old  # the old summary, untouched
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".s.json")] == []


def _spearman_no_ties(x, y) -> float:
    """1 - 6 Σd² / (n (n² - 1)): Spearman's rho where neither side has ties."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    n = len(x)
    return 1 - 6 * float(((rx - ry) ** 2).sum()) / (n * (n * n - 1))


def test_score_cli_values_are_the_models_probabilities_computed_by_hand(
    ckpt, tmp_path, capsys, monkeypatch
):
    """Every column of score's CSV against what the checkpoint's model gives when asked
    directly (a forward pass per masked site, log-softmax by hand), BLOSUM62 from Biopython,
    the unigram log-ratio from the stored counts (add-one), Spearman from rank differences."""
    from Bio.Align import substitution_matrices

    from protein_performer.analysis import figures
    from protein_performer.model.checkpoints import load_model

    monkeypatch.setattr(figures, "score_scatter_figure", lambda *a, **k: [])  # tested elsewhere
    offset = 11
    rng = np.random.default_rng(5)
    singles = [(i, aa) for i in (0, 3, 7, 12, 21) for aa in "ACDW" if aa != WT[i]]
    mutants = [f"{WT[i]}{i + offset}{aa}" for i, aa in singles]
    doubles = [f"{WT[1]}{1 + offset}A:{WT[5]}{5 + offset}W"]
    fitness = rng.normal(size=len(mutants) + 1)
    write_csv(
        tmp_path / "m.csv",
        [(m, f"{f:.6f}") for m, f in zip(mutants + doubles, fitness, strict=True)],
    )
    code = main(
        [
            "score", f"checkpoint={ckpt}", f"sequence={WT}", f"mutations={tmp_path / 'm.csv'}",
            f"out={tmp_path / 's.csv'}", f"offset={offset}", "fitness_col=fitness",
            "method=[masked-marginal,wt-marginal]",
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    with open(tmp_path / "s.csv", newline="") as fh:
        got = {r["mutant"]: r for r in csv.DictReader(fh)}

    model, _ = load_model(ckpt)
    model.eval()
    wt_ids = [ALPHABET.cls_idx, *ALPHABET.encode(WT).tolist(), ALPHABET.eos_idx]

    def logp(ids: list[int], pos: int) -> np.ndarray:
        with torch.no_grad():
            logits = model(torch.tensor([ids]))["logits"][0, pos].double()
        return torch.log_softmax(logits, -1).numpy()

    with torch.no_grad():
        unmasked = torch.log_softmax(model(torch.tensor([wt_ids]))["logits"][0].double(), -1)

    def masked(ids: list[int], pos: int) -> list[int]:
        return [ALPHABET.mask_idx if k == pos else t for k, t in enumerate(ids)]

    blosum = substitution_matrices.load("BLOSUM62")
    counts = np.arange(len(ALPHABET), dtype=float)  # what the ckpt fixture stored
    total = sum(counts[ALPHABET.index(a)] + 1 for a in "ACDEFGHIKLMNPQRSTVWY")
    site_logp: dict[int, np.ndarray] = {}
    for (i, aa), m in zip(singles, mutants, strict=True):
        wt, mt, pos = ALPHABET.index(WT[i]), ALPHABET.index(aa), i + 1
        row = got[m]
        lp = site_logp.setdefault(pos, logp(masked(wt_ids, pos), pos))
        assert float(row["masked_marginal"]) == pytest.approx(lp[mt] - lp[wt], abs=2e-4)
        lp = unmasked[pos].numpy()
        assert float(row["wt_marginal"]) == pytest.approx(lp[mt] - lp[wt], abs=2e-4)
        assert float(row["blosum62"]) == blosum[WT[i]][aa]
        f_mt, f_wt = (counts[ALPHABET.index(a)] + 1 for a in (aa, WT[i]))
        unigram = np.log(f_mt / total) - np.log(f_wt / total)
        assert float(row["unigram_log_ratio"]) == pytest.approx(unigram, abs=2e-4)
    # a double mutant: the sum of its two sites, each masked on its own
    a = logp(masked(wt_ids, 2), 2)
    b = logp(masked(wt_ids, 6), 6)
    expected = a[ALPHABET.index("A")] - a[wt_ids[2]] + b[ALPHABET.index("W")] - b[wt_ids[6]]
    assert float(got[doubles[0]]["masked_marginal"]) == pytest.approx(expected, abs=2e-4)
    assert float(got[doubles[0]]["blosum62"]) == blosum[WT[1]]["A"] + blosum[WT[5]]["W"]
    summary = json.loads((tmp_path / "s.json").read_text())
    column = [float(got[m]["masked_marginal"]) for m in mutants + doubles]
    assert summary["spearman"]["masked_marginal"] == pytest.approx(
        _spearman_no_ties(fitness, column), abs=1e-6
    )


def test_an_indel_just_longer_than_the_window_is_named_before_scoring() -> None:
    """max_len 64: a window of 62 residues. An indel of 62 is scored; one of 63 is refused as
    the mutant that does not fit (not a scoring error after the wild type's passes)."""
    table = TableModel()
    longest = (WT * 3)[:62]
    got = mut.score_mutants(table, ALPHABET, WT, [mut.Indel(longest)], methods="pseudo-ll")
    expected = mut.pseudo_log_likelihood(table, ALPHABET, longest) - mut.pseudo_log_likelihood(
        table, ALPHABET, WT
    )
    assert got["pseudo-ll"][0] == pytest.approx(expected, abs=1e-9)
    table.calls.clear()
    with pytest.raises(ValueError, match=r"mutant 1 does not fit .* an indel of 63 residues"):
        mut.score_mutants(table, ALPHABET, WT, [mut.Indel((WT * 3)[:63])], methods="pseudo-ll")
    assert table.calls == []  # refused before any pass


def test_the_first_mutant_that_does_not_fit_is_named_whatever_its_problem() -> None:
    """Mutant 1 has the wrong wild-type letter, mutant 2 is an indel too long: the error
    names mutant 1 (the problems are reported in the file's order) and counts the other."""
    table = TableModel()
    too_long = mut.Indel((WT * 3)[:63])
    with pytest.raises(
        ValueError, match=r"^mutant 1 does not fit the wild type: .*\(and 1 more\)$"
    ):
        mut.score_mutants(table, ALPHABET, WT, ["A2C", too_long], methods="pseudo-ll")
    with pytest.raises(
        ValueError, match=r"^mutant 2 does not fit the wild type: .*\(and 1 more\)$"
    ):
        mut.score_mutants(table, ALPHABET, WT, ["K2C", too_long, "A2C"], methods="pseudo-ll")


def test_the_spearman_said_is_the_one_read_from_the_table() -> None:
    """Scores 1e-16 apart are written alike (6 significant digits), so they tie in what is
    said too; a fitness left blank is counted (one row: "1 scored row")."""
    noise = np.array([0.5, 0.5 + 4e-16, 0.25, 1.0, 0.75, 2.0, 0.125])
    fitness = np.array([2.0, 1.0, 0.0, 3.0, 5.0, 4.0, np.nan])
    assert as_in_table(noise)[0] == as_in_table(noise)[1] and np.isnan(as_in_table([np.nan])[0])
    assert as_in_table([0.1234564, -12345678.0]).tolist() == [0.123456, -12345700.0]
    scan = SimpleNamespace(good=list(range(7)), rows=[{"f": "1"}] * 6 + [{"f": ""}], synonymous=[])
    summary: dict = {}
    text = fitness_notes(scan, {"pssm": noise}, fitness, "f", summary)
    written = [float(f"{x:.6g}") for x in noise[:6]]
    assert written[0] == written[1]
    assert summary["spearman"]["pssm"] == pytest.approx(mut.spearman(written, fitness[:6]))
    assert summary["spearman"]["pssm"] != pytest.approx(mut.spearman(noise, fitness))
    assert "1 scored row without a numeric value" in text and "n=6" in text
