"""DNA/RNA given as protein is refused (with an override), alignment gaps can be stripped, and
each command names its own key for these options."""

from __future__ import annotations

import json

import numpy as np
import pytest

from protein_performer.cli.hydra import run_hydra
from protein_performer.cli.main import main
from protein_performer.config.schema import EvalConfig
from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.fasta import NucleotideError
from protein_performer.data.sources import load_fasta_source
from protein_performer.data.stats import fasta_stats
from protein_performer.errors import DataError
from protein_performer.evaluation.evaluate import evaluate
from protein_performer.training.run import train
from tests.training.helpers import tiny_config, tiny_overrides, write_fasta

rng = np.random.default_rng(0)
DNA = "".join(rng.choice(list("ACGT"), size=120))
RNA_LIKE = "".join(rng.choice(list("ACGUN"), size=60))
PROTEIN = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVV"


def _write(path, records):
    path.write_text("".join(f">{i}\n{s}\n" for i, s in records))
    return path


def test_nucleotide_records_are_refused_unless_allowed(tmp_path):
    path = _write(tmp_path / "mixed.fa", [("p1", PROTEIN), ("n1", DNA)])
    with pytest.raises(NucleotideError, match=r"record 2 \(n1\): looks like DNA/RNA.*100%"):
        load_fasta_source(path)
    src = load_fasta_source(path, allow_nucleotide=True)
    assert len(src) == 2
    rna = _write(tmp_path / "rna.fa", [("r", RNA_LIKE)])
    with pytest.raises(NucleotideError):
        load_fasta_source(rna)
    # short records cannot be told apart; a G/A-rich protein is still a protein
    short = _write(
        tmp_path / "short.fa", [("s", "GATTACA"), ("g", "GAGAGAGSGAGAGAGSKLMPWYGAGAGAGSGAGA")]
    )
    assert len(load_fasta_source(short)) == 2


def test_stats_reports_nucleotide_like_records(tmp_path, capsys):
    path = _write(tmp_path / "mixed.fa", [("p1", PROTEIN), ("n1", DNA), ("n2", RNA_LIKE)])
    assert fasta_stats(path)["nucleotide_like_records"] == 2
    assert main(["data", "stats", str(path), "--no-progress"]) == 0
    assert "nucleotide-like records: 2 of 3" in capsys.readouterr().out


def test_alignment_gaps_can_be_stripped(tmp_path):
    path = _write(tmp_path / "aln.fa", [("a", "MKV--LLA..W"), ("b", "MKVAALLAGGW")])
    with pytest.raises(DataError, match=r"invalid residue '-' at position 4 \(an alignment gap"):
        load_fasta_source(path)
    src = load_fasta_source(path, strip_gaps=True)
    assert default_alphabet().decode(src[0]) == "MKVLLAW"
    replaced = load_fasta_source(path, policy="replace")
    assert default_alphabet().decode(replaced[0]) == "MKVXXLLAXXW"  # the default mapping


def test_each_command_names_its_own_keys(tmp_path, capsys):
    aln = _write(tmp_path / "aln.fa", [("a", "MKV--LLAW" * 5)])
    dna = _write(tmp_path / "dna.fa", [("n", DNA)])
    code = main(["data", "preprocess", str(aln), str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--strip-gaps removes them" in err and "--invalid skip" in err
    code = main(["data", "preprocess", str(dna), str(tmp_path / "out"), "--no-progress"])
    assert code == 2 and "--allow-nucleotide reads it anyway" in capsys.readouterr().err
    assert (
        main(
            [
                "data",
                "preprocess",
                str(aln),
                str(tmp_path / "o"),
                "--strip-gaps",
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["strip_gaps"] is True and manifest["splits"]["train"]["residues"] > 0

    fasta = write_fasta(tmp_path / "tiny.fasta")
    overrides = [o for o in tiny_overrides(fasta, tmp_path / "run") if "data.files" not in o]
    with pytest.raises(DataError, match=r"data\.strip_gaps=true removes them.*data\.invalid=skip"):
        run_hydra("train", [*overrides, f"data.files=['{aln}']"])
    with pytest.raises(DataError, match=r"data\.allow_nucleotide=true reads it anyway"):
        run_hydra("train", [*overrides, f"data.files=['{dna}']"])
    assert not (tmp_path / "run").exists()

    ckpt = train(tiny_config(fasta, max_steps=2), tmp_path / "r").last_checkpoint
    with pytest.raises(DataError, match=r"strip_gaps=true removes them\); invalid=skip"):
        evaluate(EvalConfig(checkpoint=ckpt, fasta=str(aln)))
    with pytest.raises(DataError, match=r"; allow_nucleotide=true reads it anyway$"):
        evaluate(EvalConfig(checkpoint=ckpt, fasta=str(dna)))
    ok = evaluate(EvalConfig(checkpoint=ckpt, fasta=str(aln), strip_gaps=True))
    assert ok.sequences == 1
