"""What ``score`` says of a scan's rows, from the notes' functions directly: refusals that
name the first lines, the rows left unscored, the window, the fitness values."""

from __future__ import annotations

import numpy as np
import pytest

from protein_performer.analysis.dms.scan import (
    check_scan,
    fitness_notes,
    read_scan,
    unscored_notes,
    variant_notes,
)
from protein_performer.errors import DataError

WT = "MKTAYIAKQRQISFVKSHFSRQ"


def _scan(mutants: list[str], fitness: list[str] | None = None, **kw):
    rows = [
        {"mutant": m, **({} if fitness is None else {"f": f})}
        for m, f in zip(mutants, fitness or mutants, strict=True)
    ]
    options = {"column": "mutant", "from_sequences": False, "offset": 1, "window": None,
               "methods": ["masked-marginal"]} | kw  # fmt: skip
    return read_scan(rows, list(range(2, len(rows) + 2)), WT, "sequence=", **options)


def test_a_refusal_names_three_lines_and_counts_the_rest():
    four = _scan(["foo", "bar", "baz", "qux"])
    with pytest.raises(DataError, match=r"line 4: .*; and 1 more"):
        check_scan(four, skip_mismatched=False, path="m.csv")
    three = _scan(["foo", "bar", "baz"])
    with pytest.raises(DataError) as err:
        check_scan(three, skip_mismatched=False, path="m.csv")
    assert "line 4:" in str(err.value) and "more" not in str(err.value)


def test_rows_left_unscored_are_counted_and_the_list_pointed_to_only_when_longer():
    summary = {"out": "scores.csv"}
    text = unscored_notes(_scan(["K2R", "K2*"]), summary, 0)
    assert "1 row left unscored: stops: 1" in text and "first stops: line 3" in text
    assert "every row left unscored" not in text and summary["unscored_total"] == 1
    text = unscored_notes(_scan(["K2R", "K2*", "T3*"]), {"out": "scores.csv"}, 0)
    assert "every row left unscored, with why: scores.json (unscored)" in text
    # rows naming another wild type: the offset that fits them is said
    shifted = [f"{aa}{i + 11}A" for i, aa in enumerate(WT) if aa != "A"]
    text = unscored_notes(_scan(shifted), {}, 0)
    assert "wild type differs" in text and "offset=11 would fit" in text
    assert "offset=" not in unscored_notes(_scan(["K2R", "K2*"]), {}, 0)


@pytest.mark.parametrize("window", [len(WT) + 2, len(WT) + 1])
def test_a_protein_longer_than_the_window_is_said_with_the_residues_each_site_saw(window):
    summary: dict = {}
    scan = _scan(["K2R"], window=window)
    text = variant_notes(scan, summary, has_unigram=True, window=window, mutation_col="mutant")
    if window == len(WT) + 2:  # <cls> + the protein + <eos>: it fits
        assert "longer than the model's window" not in text and "window_residues" not in summary
    else:
        assert f"a window of {len(WT) - 1:,} residues centred on it" in text
        assert summary["window_residues"] == len(WT) - 1


def _fitness(values: list[str]):
    scan = _scan(["K2R", "T3C", "Y5W", "A4G"][: len(values)], values)
    fitness = np.array([float(v) if v.strip() and v != "n/a" else np.nan for v in values])
    scores = {"pssm": np.arange(len(values), dtype=float)}
    summary: dict = {}
    return fitness_notes(scan, scores, fitness, "f", summary), summary


def test_fitness_notes_say_a_constant_column_only_when_it_is_one():
    text, summary = _fitness(["1", "2", "3"])
    assert "is the same" not in text and summary["pairs"] == 3
    assert summary["spearman"]["pssm"] == pytest.approx(1.0)
    text, _ = _fitness(["2", "2", "2"])
    assert "every f value is the same: no correlation is defined" in text
    text, summary = _fitness(["2", "", ""])  # one pair: nothing to say of its spread
    assert "is the same" not in text and summary["pairs"] == 1


def test_fitness_notes_show_a_value_that_is_not_a_number():
    text, summary = _fitness(["1", "n/a", "3"])
    assert "1 scored row without a numeric value, e.g. 'n/a'" in text
    assert summary["rows_without_numeric_fitness"] == 1
    text, _ = _fitness(["1", "", "3"])
    assert "1 scored row without a numeric value, all empty" in text


def _rank_correlation(x: list[float], y: list[float]) -> float:
    """Spearman without ties: Pearson's r of the ranks (numpy alone)."""
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return float(np.corrcoef(rx, ry)[0, 1])


def test_synonymous_rows_are_left_out_of_a_second_spearman():
    mutants = ["K2R", "K2K", "T3A", "A4G", "Y5F", "T3T", "I6V"]
    fitness = ["0.1", "0.9", "-1.2", "0.4", "-0.3", "0.8", "0.2"]
    scores = np.array([-0.5, 0.0, -2.0, 0.3, -1.0, 0.0, -0.1])  # the S2S rows: 0, as scored
    scan = _scan(mutants, fitness)
    summary: dict = {}
    values = np.array([float(f) for f in fitness])
    text = fitness_notes(scan, {"col": scores}, values, "f", summary)
    assert scan.synonymous == [1, 5]
    keep = [0, 2, 3, 4, 6]
    expected = _rank_correlation(scores[keep].tolist(), values[keep].tolist())
    assert summary["spearman_without_synonymous"]["col"] == pytest.approx(expected)
    assert summary["pairs_without_synonymous"] == 5 and summary["pairs"] == 7
    assert summary["spearman"]["col"] != pytest.approx(expected)  # the rows change it
    assert (
        f"\n  without the 2 synonymous rows (n=5), as published scans are compared: col {expected:+.3f}"
        in text
    )
    plain = fitness_notes(_scan(["K2R", "T3A", "A4G"], ["1", "2", "3"]), {"col": np.array([1.0, 2, 3])},
                          np.array([1.0, 2, 3]), "f", {})  # fmt: skip
    assert "synonymous" not in plain
