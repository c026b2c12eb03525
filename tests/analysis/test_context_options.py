"""score_mutants(context=) from Python: the options that choose which homologs are read, and
the word said when the model scoring them was trained on single proteins."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from protein_performer.analysis import score_mutants
from protein_performer.analysis.dms.homologs import read_scan_context
from protein_performer.cli.main import main
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.checkpoints import load_model, save_model_checkpoint
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM

A = default_alphabet()
RNG = np.random.default_rng(11)
WT = "".join(RNG.choice(list(STANDARD_AMINO_ACIDS), 50))
MUTANTS = [f"{WT[i]}{i + 1}W" for i in range(0, 50, 7) if WT[i] != "W"]


def _homolog(k: int, keep: slice = slice(None)) -> str:
    rng = np.random.default_rng(k)
    out = list(WT)
    for i in rng.choice(50, 12, replace=False):
        out[i] = rng.choice([a for a in STANDARD_AMINO_ACIDS if a != WT[i]])
    return "".join(c if i in range(50)[keep] else "-" for i, c in enumerate(out))


def _alignment(tmp_path):
    rows = [_homolog(k) for k in range(4)] + [_homolog(9, slice(0, 15))]  # the last: a fragment
    path = tmp_path / "msa.a3m"
    path.write_text(f">q\n{WT}\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows)))
    return path


def _model() -> ProteinLM:
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=256)
    return ProteinLM(cfg, len(A), A.pad_idx).eval()


def test_context_options_choose_the_homologs_read_as_read_scan_context_does(tmp_path):
    path = _alignment(tmp_path)
    for options, read in (
        ({"context_max_homologs": 2}, {"max_homologs": 2}),
        ({"max_homologs": 2}, {"max_homologs": 2}),
        ({"context_min_coverage": 0.2}, {"min_coverage": 0.2}),  # the fragment kept
    ):
        got = score_mutants(_model(), A, WT, MUTANTS, context=path,
                            context_options={**options, "max_length": 256})  # fmt: skip
        ctx = read_scan_context(path, A, WT, None, **read)
        want = score_mutants(_model(), A, WT, MUTANTS, context=ctx,
                             context_options={"max_length": 256})  # fmt: skip
        for column in ("pssm", "masked_marginal_context"):
            np.testing.assert_allclose(got[column], want[column], rtol=1e-6, atol=1e-6)
    assert len(read_scan_context(path, A, WT, None, max_homologs=2).used) == 2
    every = read_scan_context(path, A, WT, None)
    assert (
        len(every.used) == 4
        and len(read_scan_context(path, A, WT, None, min_coverage=0.2).used) == 5
    )
    two = score_mutants(_model(), A, WT, MUTANTS, context=path,
                        context_options={"max_homologs": 2, "max_length": 256})  # fmt: skip
    all_ = score_mutants(_model(), A, WT, MUTANTS, context=path,
                         context_options={"max_length": 256})  # fmt: skip
    assert not np.allclose(two["pssm"], all_["pssm"])
    # an alignment already read: which homologs is settled, said in one line
    with pytest.raises(ConfigError, match="max_homologs choose the homologs read from a file"):
        score_mutants(_model(), A, WT, MUTANTS, context=every, context_options={"max_homologs": 2})


def test_a_model_trained_on_single_proteins_is_said_when_it_scores_homologs(tmp_path):
    path = _alignment(tmp_path)
    said = {}
    for name, data in (
        ("single", {"mode": "crop"}),
        ("pairs", {"mode": "crop", "packing": "pairs"}),
        ("family", {"mode": "concat", "packing": "family"}),
        ("by hand", None),
    ):
        save_model_checkpoint(tmp_path / "m.ckpt", _model(), A, "mlm", data)
        model = load_model(tmp_path / "m.ckpt")[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            score_mutants(model, A, WT, MUTANTS, context=path, context_options={"max_length": 256})
            score_mutants(model, A, WT, MUTANTS)  # no homologs: nothing to say
        said[name] = [str(w.message) for w in caught if w.category is UserWarning]
    assert len(said["single"]) == 1 and "trained on single proteins" in said["single"][0]
    assert "load('homologs-columns-deep')" in said["single"][0]
    assert said["pairs"] == said["family"] == said["by hand"] == []


def test_the_cli_notes_a_single_protein_model_reading_homologs(tmp_path, capsys):
    path = _alignment(tmp_path)
    (tmp_path / "wt.fa").write_text(f">wt\n{WT}\n")
    (tmp_path / "m.csv").write_text("mutant\n" + "\n".join(MUTANTS) + "\n")
    out = {}
    for name, data in (
        ("single", {"mode": "crop"}),
        ("pairs", {"mode": "crop", "packing": "pairs"}),
    ):
        save_model_checkpoint(tmp_path / f"{name}.ckpt", _model(), A, "mlm", data)
        code = main(["score", f"checkpoint={tmp_path / f'{name}.ckpt'}", f"fasta={tmp_path / 'wt.fa'}",
                     f"mutations={tmp_path / 'm.csv'}", "context_tokens=256", f"context={path}",
                     f"out={tmp_path / f'{name}.csv'}"])  # fmt: skip
        assert code == 0
        out[name] = capsys.readouterr().out
    assert "note: this model was trained on single proteins" in out["single"]
    assert "trained on single proteins" not in out["pairs"]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"context_max_homologs": -3}, "max_homologs must be an integer >= 1 or null"),
        ({"max_homologs": 0}, "max_homologs must be an integer >= 1 or null"),
        ({"max_homologs": 2.5}, "max_homologs must be an integer >= 1 or null"),
        ({"context_min_coverage": 1.5}, "min_coverage must be a number from 0 to 1 \\(got 1.5"),
        ({"min_coverage": "abc"}, "min_coverage must be a number from 0 to 1"),
        ({"context_retrieval": -1}, "retrieval must be a number from 0 to 1 \\(got -1"),
        ({"samples": 0}, "samples must be an integer >= 1 \\(got 0"),
        ({"context_sampling": "best"}, "sampling='best' is not valid; choose one of: weighted"),
        ({"max_identity": 2}, "max_identity must be a number from 0 to 1 or null"),
        ({"context_tokens": 100.5}, "max_length must be an integer >= 1 or null"),
    ],
)
def test_context_options_out_of_range_are_one_line_errors_from_python(tmp_path, options, said):
    # the CLI refuses these before reading anything; from Python the library says the same
    path = _alignment(tmp_path)
    with pytest.raises(ConfigError, match=said):
        score_mutants(_model(), A, WT, MUTANTS, context=path, context_options=options)


def test_context_that_is_not_a_file_or_an_alignment_is_said(tmp_path):
    with pytest.raises(TypeError, match=r"context must be a path to the homologs .* got list"):
        score_mutants(_model(), A, WT, MUTANTS, context=[WT, WT])


def test_a_context_read_for_another_wild_type_is_refused(tmp_path):
    path = _alignment(tmp_path)
    ctx = read_scan_context(path, A, WT, None)
    other = WT[:20] + ("A" if WT[20] != "A" else "C") + WT[21:]
    with pytest.raises(DataError, match=rf"another wild type \(residue 21: {WT[20]} there, "):
        score_mutants(_model(), A, other, MUTANTS, context=ctx, context_options={"max_length": 256})
    with pytest.raises(DataError, match="that one has 50 residues, this one 54"):
        score_mutants(_model(), A, WT + "AAAA", MUTANTS, context=ctx,
                      context_options={"max_length": 256})  # fmt: skip
    # numbered as the context was read: a scan whose first residue is 126
    ctx = read_scan_context(path, A, WT, None, offset=126)
    with pytest.raises(DataError, match=rf"another wild type \(residue 146: {WT[20]} there, "):
        score_mutants(_model(), A, other, MUTANTS, context=ctx, context_options={"max_length": 256})
    # the same wild type in lower case is the same wild type
    got = score_mutants(_model(), A, WT.lower(), MUTANTS, context=ctx,
                        context_options={"max_length": 256})  # fmt: skip
    assert np.isfinite(got["pssm"]).all()


def test_sequences_and_options_of_the_wrong_type_are_said():
    with pytest.raises(
        TypeError, match=r"a sequence must be a str of residues .* got ndarray of <U1"
    ):
        score_mutants(_model(), A, np.array(list(WT)), MUTANTS)
    with pytest.raises(TypeError, match=r"a sequence must be a str of residues .* got bytes"):
        score_mutants(_model(), A, WT.encode(), MUTANTS)
    with pytest.raises(TypeError, match=r"context_options must be a mapping .* got str"):
        score_mutants(_model(), A, WT, MUTANTS, context="x.a3m", context_options="samples=2")
    # residue ids are a sequence too
    ids = A.encode(WT)
    np.testing.assert_allclose(
        score_mutants(_model(), A, ids, MUTANTS)["masked-marginal"],
        score_mutants(_model(), A, WT, MUTANTS)["masked-marginal"],
        rtol=1e-6,
        atol=1e-7,
    )


def test_read_scan_context_reads_the_wild_type_as_a_fasta_record(tmp_path):
    # any case, line breaks: the same homologs and profile as the clean sequence
    path = _alignment(tmp_path)
    want = read_scan_context(path, A, WT, None)
    for given in (WT.lower(), WT[:25] + "\n" + WT[25:] + "\n"):
        got = read_scan_context(path, A, given, None)
        assert [h.id for h in got.used] == [h.id for h in want.used]
        np.testing.assert_allclose(got.pssm.scores, want.pssm.scores, rtol=1e-12)
