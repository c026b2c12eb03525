"""score's rows it cannot score (stops, other letters, sites past the protein's ends) are left
out and reported, each with why; a true input error is still one; alignment gaps are said to
be gaps."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from protein_performer.analysis import mutations as mut
from protein_performer.cli.main import main
from protein_performer.data.alphabet import default_alphabet
from protein_performer.model.checkpoints import save_model_checkpoint
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM
from tests.analysis.test_mutations import write_csv

ALPHABET = default_alphabet()
WT = "MKTAYIAKQRQISFVKSHFSRQ"


@pytest.fixture
def model_ckpt(tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(
        attention="performer_relu", dim=16, depth=1, heads=2, ffn_dim=16, max_len=32, nb_features=8
    )
    model = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx)
    save_model_checkpoint(tmp_path / "m.ckpt", model, ALPHABET, "mlm")
    return tmp_path / "m.ckpt"


def score(ckpt, tmp_path, *extra, csv_name="m.csv", out="s.csv", wild_type=f"sequence={WT}"):
    return main(
        [
            "score",
            f"checkpoint={ckpt}",
            wild_type,
            f"mutations={tmp_path / csv_name}",
            f"out={tmp_path / out}",
            *extra,
        ]
    )


def read_scores(path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as fh:
        return {r["mutant"]: r for r in csv.DictReader(fh)}


def test_a_stop_mutant_is_left_out_and_reported_not_the_whole_run(model_ckpt, tmp_path, capsys):
    rows = [
        ("Y5*", "0.1"),  # a stop
        ("K2R", "0.9"),
        ("T3C", "0.3"),
        ("K8*", "0.2"),  # another stop
        ("K2X", "0.5"),  # an unknown residue
        ("K99A", "0.4"),  # past the protein's end
        ("A4G", "0.7"),
    ]
    write_csv(tmp_path / "m.csv", rows)
    code = score(model_ckpt, tmp_path, "fitness_col=fitness")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "scored 3 of 7 mutants" in out
    assert (
        "4 rows left unscored: stops: 2, non-standard letters: 1, "
        "position outside the sequence: 1" in out
    )
    assert "first stops: line 2: 'Y5*' is a stop (nonsense) mutant" in out
    assert "first non-standard letters: line 6: K2X: 'X' is not one of the 20 amino acids" in out
    assert "first position outside the sequence: line 7: K99A: position 99 is outside 1-22" in out
    assert "every row left unscored, with why: s.json (unscored)" in out  # 2 stops, 1 shown
    got = read_scores(tmp_path / "s.csv")
    assert [m for m, r in got.items() if r["masked_marginal"] == ""] == [
        "Y5*",
        "K8*",
        "K2X",
        "K99A",
    ]
    expected = mut.score_mutants(
        _load(model_ckpt), ALPHABET, WT, ["K2R", "T3C", "A4G"], methods="masked-marginal"
    )["masked-marginal"]
    scored = [float(got[m]["masked_marginal"]) for m in ("K2R", "T3C", "A4G")]
    np.testing.assert_allclose(scored, expected, rtol=1e-4, atol=1e-5)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["scored"] == 3 and summary["unscored_total"] == 4
    assert [(u["line"], u["kind"]) for u in summary["unscored"]] == [
        (2, "stops"),
        (5, "stops"),
        (6, "non-standard letters"),
        (7, "position outside the sequence"),
    ]
    assert summary["pairs"] == 3  # Spearman over the scored rows only


def _load(ckpt) -> ProteinLM:
    from protein_performer.analysis.extraction import load_for_analysis

    model, _, _ = load_for_analysis(ckpt, "cpu")
    return model


def test_true_input_errors_still_stop_the_run(model_ckpt, tmp_path, capsys):
    """A wild type that differs (a wrong numbering?) or a notation not read is refused unless
    skip_mismatched; rows that are only unscorable are not counted in that refusal."""
    write_csv(tmp_path / "m.csv", [("Y5*", "1"), ("A2G", "2"), ("K2R", "3")])
    assert score(model_ckpt, tmp_path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 of 3 mutants do not fit the wild type" in err
    assert "line 3: A2G: the sequence has K at 2" in err and "Y5*" not in err
    assert score(model_ckpt, tmp_path, "skip_mismatched=true") == 0
    out = capsys.readouterr().out
    assert "2 rows left unscored: stops: 1, wild type differs: 1" in out
    write_csv(tmp_path / "m.csv", [("K2R", "1")])
    assert score(model_ckpt, tmp_path, "mutation_col=variant", out="t.csv") == 2
    assert "no column 'variant'" in capsys.readouterr().err


def test_nothing_scorable_is_an_error_that_says_why(model_ckpt, tmp_path, capsys):
    write_csv(tmp_path / "m.csv", [("Y5*", "1"), ("K2B", "2")])
    assert score(model_ckpt, tmp_path) == 2
    err = capsys.readouterr().err
    assert "none of the 2 mutants can be scored against the wild type" in err
    assert "line 2: 'Y5*' is a stop" in err and not (tmp_path / "s.csv").exists()


def test_a_stop_inside_a_whole_sequence_is_a_stop(model_ckpt, tmp_path, capsys):
    stop = WT[:4] + "*" + WT[5:]
    rows = [("a", stop, "1"), ("b", "MR" + WT[2:], "2"), ("c", "MKC" + WT[3:], "3")]
    write_csv(tmp_path / "v.csv", rows, header=("mutant", "mutated_sequence", "fitness"))
    code = score(model_ckpt, tmp_path, "sequence_col=mutated_sequence", csv_name="v.csv")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "1 row left unscored: stops: 1" in out
    assert "mutated_sequence: '*' at position 5 is a stop (nonsense) variant" in out
    got = read_scores(tmp_path / "s.csv")
    assert got["a"]["masked_marginal"] == "" and got["b"]["masked_marginal"] != ""


def test_alignment_gaps_are_said_to_be_gaps(model_ckpt, tmp_path, capsys):
    """As train's error points to strip_gaps, score's says what a gap is and what to give
    (score has no strip_gaps: mutant positions count the wild type's residues)."""
    write_csv(tmp_path / "m.csv", [("K2R", "1")])
    gapped = f"{WT[:5]}-{WT[5:]}"
    assert score(model_ckpt, tmp_path, wild_type=f"sequence={gapped}") == 2
    err = capsys.readouterr().err
    assert "sequence=: '-' at position 6 is not a residue letter (an alignment gap: give" in err
    assert err.count("\n") == 1
    (tmp_path / "wt.fa").write_text(f">wt\n{WT[:3]}.{WT[3:]}\n")
    assert score(model_ckpt, tmp_path, wild_type=f"fasta={tmp_path / 'wt.fa'}") == 2
    err = capsys.readouterr().err
    assert "invalid residue '.' at position 4 (an alignment gap: give the wild type" in err
    # variants given as aligned sequences: in sequence_col, or in the mutant column
    deletion = WT[:5] + "-" + WT[6:]
    write_csv(tmp_path / "v.csv", [(deletion, "1"), ("MR" + WT[2:], "2")], header=("seq", "f"))
    assert score(model_ckpt, tmp_path, "sequence_col=seq", csv_name="v.csv") == 2
    err = capsys.readouterr().err
    assert "seq: cannot read sequence: '-' at position 6 is not a residue letter (an " in err
    assert "alignment gap: give the sequence unaligned" in err
    write_csv(tmp_path / "w.csv", [(deletion, "1"), ("K2R", "2")])
    assert score(model_ckpt, tmp_path, csv_name="w.csv") == 2
    err = capsys.readouterr().err
    assert "line 2: cannot read sequence: '-' at position 6" in err
    assert "a deletion as the sequence without its residues" in err
