"""The analysis commands from the CLI: the files they promise, one-line errors, nothing left
behind on failure."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from protein_performer.cli.main import main
from protein_performer.data.alphabet import default_alphabet
from protein_performer.model.checkpoints import save_model_checkpoint
from tests.analysis.planted import planted_model, random_proteins
from tests.analysis.test_extraction import tiny_model, write_fasta

ALPHABET = default_alphabet()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("analysis")
    save_model_checkpoint(d / "planted.ckpt", planted_model(), ALPHABET, "mlm")
    save_model_checkpoint(d / "relu.ckpt", tiny_model("performer_relu"), ALPHABET, "mlm")
    write_fasta(d / "proteins.fasta", random_proteins(60, 30, seed=0))
    (d / "empty.fasta").write_text("")
    (d / "one.fasta").write_text(">a\nMKTAYIAKQR\n")
    (d / "dup.fasta").write_text(">a one\nMKTAYIAK\n>b\nMKLV\n>a two\nMKTAW\n")
    return d


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_aa_similarity_writes_matrices_json_and_figure(files, tmp_path, capsys) -> None:
    out = tmp_path / "sim"
    code, text, _ = run(
        capsys,
        "aa-similarity",
        f"checkpoint={files / 'planted.ckpt'}",
        f"fasta={files / 'proteins.fasta'}",
        f"out={out}",
        "threshold=0.1",
        "min_arcs=10",
    )
    assert code == 0, text
    names = {p.name for p in out.iterdir()}
    assert names == {
        "similarity.json",
        "similarity.png",
        "similarity.pdf",
        "blosum62.csv",
        "attention.csv",
        "attention_null.csv",
        "flow.csv",
        "substitution.csv",
        "embedding.csv",
    }
    summary = json.loads((out / "similarity.json").read_text())
    assert summary["r_vs_blosum62"]["attention"] > 0.3
    assert summary["heads_kept"] == 8 and summary["proteins"] == 60
    rows = (out / "attention.csv").read_text().splitlines()
    assert len(rows) == 21 and rows[0].startswith(",A,V,L")
    assert "attention (Vig et al., θ=0.1): r = +" in text


@pytest.mark.slow
def test_aa_similarity_says_when_no_head_passes(files, tmp_path, capsys) -> None:
    out = tmp_path / "sim"
    code, text, _ = run(
        capsys,
        "aa-similarity",
        f"checkpoint={files / 'relu.ckpt'}",
        f"fasta={files / 'proteins.fasta'}",
        f"out={out}",
        "n_proteins=10",
        "threshold=0.3",
    )
    assert code == 0
    assert "r = n/a, 0 of 8 heads" in text and "nan" not in text.lower()
    assert not (out / "attention.csv").exists() and (out / "flow.csv").exists()
    summary = json.loads((out / "similarity.json").read_text())
    assert summary["r_vs_blosum62"]["attention"] is None and summary["proteins"] == 10


@pytest.mark.slow
def test_aa_similarity_names_proteins_without_standard_residues(files, tmp_path, capsys) -> None:
    only_x = tmp_path / "x.fasta"
    only_x.write_text(">onlyX\nXXXXXXXX\n")
    ckpt = f"checkpoint={files / 'relu.ckpt'}"
    code, _, err = run(capsys, "aa-similarity", ckpt, f"fasta={only_x}", f"out={tmp_path / 's'}")
    assert code == 2 and "no protein to analyse: the 1 drawn have no standard residue" in err
    assert not (tmp_path / "s").exists()  # no result about nothing
    mixed = tmp_path / "mixed.fasta"
    mixed.write_text((files / "one.fasta").read_text() + ">onlyX\nXXXXXXXX\n")
    code, text, _ = run(capsys, "aa-similarity", ckpt, f"fasta={mixed}", f"out={tmp_path / 'm'}")
    assert code == 0 and "1 of the 2 proteins drawn have no standard residue" in text
    summary = json.loads((tmp_path / "m" / "similarity.json").read_text())
    assert summary["proteins"] == 1 and summary["proteins_without_standard_residues"] == 1


@pytest.mark.slow
def test_plot_heads_of_a_long_protein_says_which_residues_it_shows(
    files, tmp_path, capsys, monkeypatch
) -> None:
    from protein_performer.cli.commands import plot_heads as commands

    titles = []
    real = commands.head_grid_figure
    monkeypatch.setattr(
        commands,
        "head_grid_figure",
        lambda *a, **kw: titles.append(kw["title"]) or real(*a, **kw),
    )
    long = tmp_path / "long.fasta"
    long.write_text(">long\n" + "MKTAYIAKQR" * 100 + "\n")
    out = tmp_path / "heads"
    code, text, _ = run(
        capsys, "plot-heads", f"checkpoint={files / 'relu.ckpt'}", f"fasta={long}",
        f"out={out}", "zoom=null",
    )  # fmt: skip
    assert code == 0, text  # cropped by default (truncate=auto), and said
    shown = json.loads((out / "heads.json").read_text())["length"]
    assert f"cropped: the figures show residues 1-{shown:,} of 1,000" in text
    assert titles and titles[0].startswith(f"long (residues 1-{shown:,} of 1,000)")


@pytest.mark.slow
def test_plot_heads_writes_grid_zoom_and_ranking(files, tmp_path, capsys) -> None:
    out = tmp_path / "heads"
    code, text, _ = run(
        capsys,
        "plot-heads",
        f"checkpoint={files / 'relu.ckpt'}",
        f"fasta={files / 'proteins.fasta'}",
        f"out={out}",
        "record=p3",
        "layers=1",
        "zoom=10",
    )
    assert code == 0, text
    names = {p.name for p in out.iterdir()}
    assert names == {
        f"{s}.{e}" for s in ("heads", "heads_zoom", "head_ranking") for e in ("png", "pdf")
    } | {"heads.json"}
    summary = json.loads((out / "heads.json").read_text())
    assert summary["record"] == "p3" and summary["layers"] == [1]
    assert len(summary["heads_stats"]) == 4
    for h in summary["heads_stats"]:
        assert 0 < h["entropy"] <= np.log(30) + 1e-6
    assert "record=ID plots another" not in text  # a record was named
    code, text, _ = run(
        capsys, "plot-heads", f"checkpoint={files / 'relu.ckpt'}",
        f"fasta={files / 'proteins.fasta'}", f"out={tmp_path / 'first'}", "layers=1", "heads=0",
        "zoom=null",
    )  # fmt: skip
    assert code == 0 and f"the first usable record of {files / 'proteins.fasta'}; record=ID" in text
    one = tmp_path / "one.fasta"
    one.write_text(">" + (files / "proteins.fasta").read_text().split(">")[1])  # its first
    code, text, _ = run(
        capsys, "plot-heads", f"checkpoint={files / 'relu.ckpt'}", f"fasta={one}",
        f"out={tmp_path / 'one'}", "layers=1", "heads=0", "zoom=null",
    )  # fmt: skip
    assert code == 0 and "plotted to" in text and "record=ID" not in text  # nothing else to pick


def test_extract_cli(files, tmp_path, capsys) -> None:
    out = tmp_path / "ex"
    code, text, _ = run(
        capsys,
        "extract",
        f"checkpoint={files / 'relu.ckpt'}",
        f"fasta={files / 'proteins.fasta'}",
        f"out={out}",
        "include=[attention,per_tok]",
        "heads=0-1",
        "--json",
    )
    assert code == 0
    result = json.loads(text)
    assert len(result["records"]) == 60 and result["attention_heads"] == [0, 1]
    assert result["attention_kind"] == "performer_relu"
    assert np.load(out / "p0.npz")["attention"].shape == (2, 2, 30, 30)
    # an aligned record: its gaps are refused, or removed with strip_gaps=true
    (tmp_path / "aln.fa").write_text(">a\nMK--VLA.W\n")
    base = [f"checkpoint={files / 'relu.ckpt'}", f"fasta={tmp_path / 'aln.fa'}"]
    code, _, err = run(capsys, "extract", *base, f"out={tmp_path / 'g'}")
    assert code == 2 and "strip_gaps removes them" in err
    code, _, err = run(capsys, "extract", *base, f"out={tmp_path / 'g'}", "strip_gaps=true")
    assert code == 0, err
    assert str(np.load(tmp_path / "g" / "a.npz")["sequence"]) == "MKVLAW"
    # a few records of a large file: by id, or the first N
    base = [f"checkpoint={files / 'relu.ckpt'}", f"fasta={files / 'proteins.fasta'}"]
    code, _, err = run(capsys, "extract", *base, f"out={tmp_path / 'one'}", "records=p7")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["manifest.json", "p7.npz"]
    code, _, err = run(capsys, "extract", *base, f"out={tmp_path / 'two'}", "records=[p9,p2]")
    assert code == 0, err
    assert {p.name for p in (tmp_path / "two").glob("*.npz")} == {"p2.npz", "p9.npz"}
    code, _, err = run(capsys, "extract", *base, f"out={tmp_path / 'first'}", "max_records=3")
    assert code == 0, err
    assert {p.name for p in (tmp_path / "first").glob("*.npz")} == {"p0.npz", "p1.npz", "p2.npz"}
    code, _, err = run(capsys, "extract", *base, f"out={tmp_path / 'x'}", "records=nope")
    assert code == 2 and "no record with id nope" in err and not (tmp_path / "x").exists()
    # UniProt ids: files named by accession, said so once
    (tmp_path / "u.fa").write_text(">sp|P00974|BPT1_BOVIN\nMKTAYIAKQR\n>p1\nMKVLAW\n")
    base = [f"checkpoint={files / 'relu.ckpt'}", f"fasta={tmp_path / 'u.fa'}"]
    code, text, err = run(capsys, "extract", *base, f"out={tmp_path / 'u'}")
    assert code == 0, err
    assert "1 file named other than its record id (first: P00974.npz for sp|P00974|" in text
    assert {p.name for p in (tmp_path / "u").glob("*.npz")} == {"P00974.npz", "p1.npz"}


@pytest.mark.parametrize(
    "command, args, message",
    [
        ("extract", ["checkpoint=MISSING"], "checkpoint: no such file"),
        ("plot-heads", ["fasta=EMPTY"], "empty file"),
        ("plot-heads", ["record=nope"], "no record with id nope"),
        ("plot-heads", ["fasta=DUP", "record=a"], "record id a names 2 records"),
        ("plot-heads", ["fasta=ONE", "join=true"], "join=true puts several proteins"),
        ("aa-similarity", ["split=test"], "split"),
        ("extract", ["include=[attention,contacts]"], "include must list"),
        ("plot-heads", ["layers=5"], "layers: 5 is outside 0-1"),
        ("extract", ["bogus=1"], "bogus"),
    ],
)
def test_bad_input_is_one_line_and_leaves_nothing(files, tmp_path, capsys, command, args, message):
    values = {
        "checkpoint": str(files / "relu.ckpt"),
        "fasta": str(files / "proteins.fasta"),
        "out": str(tmp_path / "deep" / "out"),
    }
    extra = []
    for a in args:
        key, value = a.split("=", 1)
        value = {
            "MISSING": str(tmp_path / "no.ckpt"),
            "EMPTY": str(files / "empty.fasta"),
            "DUP": str(files / "dup.fasta"),
            "ONE": str(files / "one.fasta"),
        }.get(value, value)
        if key in values:
            values[key] = value
        else:
            extra.append(f"{key}={value}")
    code, _, err = run(capsys, command, *(f"{k}={v}" for k, v in values.items()), *extra)
    assert code == 2
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "deep").exists()


def test_interrupt_leaves_nothing(files, tmp_path, capsys, monkeypatch) -> None:
    from protein_performer.cli.commands import aa_similarity as commands

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "similarity_figure", interrupted)
    out = tmp_path / "new" / "sim"
    code, _, err = run(
        capsys,
        "aa-similarity",
        f"checkpoint={files / 'relu.ckpt'}",
        f"fasta={files / 'proteins.fasta'}",
        f"out={out}",
        "n_proteins=5",
    )
    assert code == 130 and err.strip().startswith(
        "interrupted (nothing is left half-written under an output"
    )
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_helpful_lookups(files, tmp_path, capsys) -> None:
    (tmp_path / "u.fasta").write_text(">sp|P1|ONE_HUMAN x\nMKTAYIAKQR\n>sp|P2|TWO_HUMAN y\nMKTAY\n")
    base = [f"checkpoint={files / 'relu.ckpt'}", f"out={tmp_path / 'o'}"]
    code, _, err = run(capsys, "plot-heads", *base, f"fasta={tmp_path / 'u.fasta'}", "record=P3")
    assert code == 2 and "no record with id P3" in err
    code, _, err = run(capsys, "plot-heads", *base, f"fasta={tmp_path / 'u.fasta'}", "record=TWO")
    assert code == 2 and "did you mean sp|P2|TWO_HUMAN?" in err
    # an accession finds its UniProt record
    out = tmp_path / "p2"
    code, _, err = run(
        capsys, "plot-heads", *base[:1], f"out={out}", f"fasta={tmp_path / 'u.fasta'}", "record=P2"
    )
    assert code == 0, err
    assert json.loads((out / "heads.json").read_text())["record"] == "sp|P2|TWO_HUMAN"
    code, _, err = run(
        capsys, "plot-heads", *base, f"fasta={files / 'proteins.fasta'}", "layers=1-0"
    )
    assert code == 2 and "reversed range (write 0-1)" in err
    code, _, err = run(capsys, "plot-heads", *base, f"fasta={files / 'relu.ckpt'}")
    assert code == 2 and "checkpoint= and fasta= swapped?" in err
    code, _, err = run(
        capsys,
        "plot-heads",
        f"checkpoint={tmp_path / 'u.fasta'}",
        f"fasta={tmp_path / 'u.fasta'}",
        f"out={tmp_path / 'o'}",
    )
    assert code == 2 and "looks like FASTA: a sequence file given as the checkpoint?" in err
    assert not (tmp_path / "o").exists()


def test_default_checkpoint_is_the_shipped_one() -> None:
    from protein_performer.analysis import load_for_analysis
    from protein_performer.model.checkpoints import DEFAULT_CHECKPOINT, resolve_checkpoint

    assert resolve_checkpoint("default").as_posix().endswith(DEFAULT_CHECKPOINT)
    model, _, meta = load_for_analysis("default", "cpu")
    assert (model.config.attention, model.config.depth, model.config.heads) == (
        "performer_relu",
        4,
        4,
    )
    assert meta["data"]["split_by"] == "cluster" and len(meta["data"]["unigram_counts"]) == 31


@pytest.mark.slow
def test_plot_heads_join_puts_the_records_in_one_window(files, tmp_path, capsys) -> None:
    from protein_performer.analysis.alignment_heads import cross_protein_mass

    proteins = random_proteins(3, 20, seed=4)
    write_fasta(tmp_path / "family.fasta", proteins)
    out = tmp_path / "heads"
    code, text, _ = run(
        capsys,
        "plot-heads",
        f"checkpoint={files / 'relu.ckpt'}",
        f"fasta={tmp_path / 'family.fasta'}",
        f"out={out}",
        "join=true",
        "zoom=null",
    )
    assert code == 0, text
    summary = json.loads((out / "heads.json").read_text())
    assert summary["length"] == 3 * 20 + 2  # two <sep> between three proteins
    assert [(j["start"], j["stop"]) for j in summary["joined"]] == [(0, 20), (21, 41), (42, 62)]
    for h in summary["heads_stats"]:
        assert 0.0 <= h["cross_protein"] <= 1.0
    assert "joined 3 proteins; the last one's queries put" in text
    n = summary["length"]  # the window's positions (the maps leave out <cls> and <eos>)
    assert f"(the most of any head; uniform attention: {40 / n:.0%})" in text
    # the statistic: rows of the last segment, mass on the other segments
    att = np.zeros((1, 2, 7, 7))
    att[0, 0, 4:, 0] = 1.0  # head 0: the last protein looks at the first one
    att[0, 1, 4:, 5] = 1.0  # head 1: within itself
    att[0, :, :4, 4] = 1.0
    np.testing.assert_allclose(cross_protein_mass(att, [(0, 3), (4, 7)]), [[1.0, 0.0]])
    too_long = ["plot-heads", f"checkpoint={files / 'relu.ckpt'}", f"out={tmp_path / 'x'}"]
    code, _, err = run(
        capsys, *too_long, f"fasta={files / 'proteins.fasta'}", "join=true", "max_length=50"
    )
    assert code != 0 and "join: 60 proteins make 1861 tokens, more than 50" in err
    assert not (tmp_path / "x").exists()
    # truncate=true cuts the front: the last protein (the one analysed) stays whole
    code, text, _ = run(
        capsys, *too_long, f"fasta={tmp_path / 'family.fasta'}", "join=true", "max_length=50",
        "truncate=true", "zoom=null", "layers=1", "heads=0",
    )  # fmt: skip
    assert code == 0, text
    summary = json.loads((tmp_path / "x" / "heads.json").read_text())
    assert summary["length"] == 48 and summary["joined"][-1] == {
        "id": "p2",
        "start": 28,
        "stop": 48,
    }
    assert [(j["id"], j["start"], j["stop"]) for j in summary["joined"][:2]] == [
        ("p0", 0, 6),
        ("p1", 7, 27),
    ]  # p0 keeps its last 6 residues
    assert "truncate=true cut the first 14 positions of the window to fit 50 tokens\n" in text
    code, text, err = run(
        capsys, *too_long, f"fasta={tmp_path / 'family.fasta'}", "join=true", "max_length=30",
        "truncate=true", "zoom=null", "overwrite=true", "layers=1", "heads=0",
    )  # fmt: skip
    assert code == 0 and "to fit 30 tokens: 1 of 3 proteins left out entirely" in text, err


@pytest.mark.slow
def test_plot_heads_join_with_record_analyses_that_record(files, tmp_path, capsys) -> None:
    proteins = random_proteins(3, 20, seed=4)
    write_fasta(tmp_path / "family.fasta", proteins)
    base = ["plot-heads", f"checkpoint={files / 'relu.ckpt'}", f"fasta={tmp_path / 'family.fasta'}"]
    code, _, err = run(
        capsys, *base, f"out={tmp_path / 'h'}", "join=true", "record=p0", "heads=0", "zoom=null"
    )
    assert code == 0, err
    summary = json.loads((tmp_path / "h" / "heads.json").read_text())
    # p0 goes last (its queries are the ones analysed), the others keep the file's order
    assert [j["id"] for j in summary["joined"]] == ["p1", "p2", "p0"]
    assert summary["homologs"] == ["p1", "p2"] and summary["record"] == "p0+2"
    code, _, err = run(capsys, *base, f"out={tmp_path / 'x'}", "join=true", "record=p9")
    assert code == 2 and "no record with id p9" in err and not (tmp_path / "x").exists()


def test_extract_join_writes_one_window_with_its_segments(files, tmp_path, capsys) -> None:
    from protein_performer.analysis.extraction import attention_maps, representations
    from protein_performer.analysis.inputs import join_proteins
    from protein_performer.model.checkpoints import load_model

    proteins = random_proteins(3, 20, seed=4)
    write_fasta(tmp_path / "family.fasta", proteins)
    base = ["extract", f"checkpoint={files / 'relu.ckpt'}", f"fasta={tmp_path / 'family.fasta'}"]
    out = tmp_path / "x"
    code, text, err = run(
        capsys, *base, f"out={out}", "join=true", "include=[attention,mean,per_tok]", "heads=[1]"
    )
    assert code == 0, err
    assert "wrote one window of 3 proteins, 62 positions" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["join"] is True and len(manifest["records"]) == 1
    entry = manifest["records"][0]
    assert [(j["id"], j["start"], j["stop"]) for j in entry["joined"]] == [
        ("p0", 0, 20), ("p1", 21, 41), ("p2", 42, 62),
    ]  # fmt: skip
    z = np.load(out / entry["file"])
    np.testing.assert_array_equal(z["segments"], [[0, 20], [21, 41], [42, 62]])
    assert list(z["segment_ids"]) == ["p0", "p1", "p2"]
    assert z["tokens"][20] == ALPHABET.sep_idx and z["sequence"].item().count("|") == 2
    # the same window through the library: attention and per-protein means
    model, _ = load_model(files / "relu.ckpt")
    joined, segments, _ = join_proteins(proteins, ALPHABET, None, truncate=False)
    att = attention_maps(model, joined, ALPHABET, heads=[1])
    np.testing.assert_allclose(z["attention"], att, rtol=1e-5, atol=1e-6)
    ((_, per_tok),) = list(representations(model, [joined], ALPHABET, repr_layers=[-1]))
    np.testing.assert_allclose(z["per_tok"], per_tok, rtol=1e-5, atol=1e-6)
    assert z["mean"].shape == (1, 3, per_tok.shape[-1])
    for i, (a, b) in enumerate(segments):
        np.testing.assert_allclose(z["mean"][:, i], per_tok[:, a:b].mean(1), rtol=1e-5, atol=1e-6)
    # with <cls>/<eos> kept the segments move by one row
    code, _, err = run(capsys, *base, f"out={tmp_path / 'k'}", "join=true", "keep_specials=true")
    assert code == 0, err
    z = np.load(tmp_path / "k" / entry["file"])
    np.testing.assert_array_equal(z["segments"], [[1, 21], [22, 42], [43, 63]])
    kept = json.loads((tmp_path / "k" / "manifest.json").read_text())["records"][0]["joined"]
    assert [(j["start"], j["stop"]) for j in kept] == [(1, 21), (22, 42), (43, 63)]
    assert z["attention"].shape[-1] == 64
    # too long: an error, or the front cut with truncate=true
    code, _, err = run(capsys, *base, f"out={tmp_path / 'y'}", "join=true", "max_length=50")
    assert code == 2 and "join: 3 proteins make 64 tokens, more than 50" in err
    assert not (tmp_path / "y").exists()
    code, text, err = run(
        capsys, *base, f"out={tmp_path / 'y'}", "join=true", "max_length=30", "truncate=true"
    )
    assert code == 0, err
    assert (
        "truncate=true cut the first 34 positions of the window: 1 of 3 proteins left out" in text
    )
    code, _, err = run(
        capsys, "extract", f"checkpoint={files / 'relu.ckpt'}", f"fasta={files / 'one.fasta'}",
        f"out={tmp_path / 'z'}", "join=true",
    )  # fmt: skip
    assert code == 2 and "join=true puts several proteins in one window; found one" in err


@pytest.mark.slow
def test_plot_heads_join_measures_attention_on_the_aligned_residues(files, tmp_path, capsys):
    from protein_performer.analysis.alignment_heads import aligned_mass, alignment_pairs
    from protein_performer.analysis.extraction import attention_maps
    from protein_performer.analysis.inputs import Protein, join_proteins
    from protein_performer.model.checkpoints import load_model

    (homolog,) = random_proteins(1, 30, seed=7)  # the test model holds 64 tokens
    mutant = homolog.residues.copy()
    mutant[[5, 17, 25]] = ALPHABET.index("W")
    write_fasta(tmp_path / "pair.fasta", [homolog, Protein("m", "mutant", mutant)])
    out = tmp_path / "heads"
    code, text, err = run(
        capsys, "plot-heads", f"checkpoint={files / 'relu.ckpt'}",
        f"fasta={tmp_path / 'pair.fasta'}", f"out={out}", "join=true", "zoom=null",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads((out / "heads.json").read_text())
    assert summary["aligned_residues"] >= 27  # a copy with three substitutions
    assert "align to a homolog (BLOSUM62)" in text and (out / "alignment_head.png").is_file()
    # the same numbers from the library on the same window
    model, _ = load_model(files / "relu.ckpt")
    joined, segments, _ = join_proteins(
        [homolog, Protein("m", "", mutant)], ALPHABET, None, truncate=False
    )
    att = attention_maps(model, joined, ALPHABET)
    parts = [ALPHABET.decode(joined.residues[a:b]) for a, b in segments]
    mass, uniform = aligned_mass(att, *alignment_pairs(segments, parts))
    got = np.array([[h["aligned"] for h in summary["heads_stats"]]]).reshape(mass.shape)
    np.testing.assert_allclose(got, mass, rtol=1e-5)
    assert summary["aligned_uniform"] == pytest.approx(uniform)


@pytest.mark.slow
def test_plot_heads_homologs_aligns_the_last_record_to_the_named_ones(files, tmp_path, capsys):
    from protein_performer.analysis.alignment_heads import aligned_mass, alignment_pairs
    from protein_performer.analysis.extraction import attention_maps
    from protein_performer.analysis.inputs import Protein, join_proteins
    from protein_performer.model.checkpoints import load_model

    homolog, unrelated = random_proteins(2, 18, seed=9)  # the test model holds 64 tokens
    mutant = homolog.residues.copy()
    mutant[[3, 11]] = ALPHABET.index("W")
    records = [homolog, unrelated, Protein("m", "mutant", mutant)]
    write_fasta(tmp_path / "window.fasta", records)
    window = f"fasta={tmp_path / 'window.fasta'}"
    base = ["plot-heads", f"checkpoint={files / 'relu.ckpt'}"]
    runs = {}
    for name, extra in (("all", []), ("named", ["homologs=[p0]"])):
        out = tmp_path / name
        code, _, err = run(capsys, *base, window, f"out={out}", "join=true", "zoom=null", *extra)
        assert code == 0, err
        runs[name] = json.loads((out / "heads.json").read_text())
        assert (out / "alignment_head.png").is_file()
    assert runs["all"]["homologs"] == ["p0", "p1"] and runs["named"]["homologs"] == ["p0"]
    # the named run's numbers: the pairs of the mutant with p0 only (p1 left out, not shifted)
    model, _ = load_model(files / "relu.ckpt")
    joined, segments, _ = join_proteins(records, ALPHABET, None, truncate=False)
    att = attention_maps(model, joined, ALPHABET)
    picked = [segments[0], segments[2]]
    parts = [ALPHABET.decode(joined.residues[a:b]) for a, b in picked]
    queries, keys = alignment_pairs(picked, parts)
    assert len(queries) >= 16 and keys.max() < segments[0][1]
    mass, uniform = aligned_mass(att, queries, keys)
    got = np.array([h["aligned"] for h in runs["named"]["heads_stats"]]).reshape(mass.shape)
    np.testing.assert_allclose(got, mass, rtol=1e-5)
    assert runs["named"]["aligned_uniform"] == pytest.approx(uniform)
    assert runs["all"]["aligned_uniform"] > runs["named"]["aligned_uniform"]  # p1 added pairs
    # misuse: one line each, nothing written
    copy = Protein("p0", "", unrelated.residues)
    write_fasta(tmp_path / "twice.fasta", [homolog, copy, records[-1]])
    twice = f"fasta={tmp_path / 'twice.fasta'}"
    write_fasta(tmp_path / "last.fasta", [homolog, unrelated, Protein("p0", "", mutant)])
    last = f"fasta={tmp_path / 'last.fasta'}"
    for extra, message in (
        ([window, "homologs=[p0]"], "homologs= names records of a joined window: add join=true"),
        ([window, "join=true", "homologs=[p7]"], "homologs: p7 is not a record of the FASTA"),
        ([window, "join=true", "homologs=[m]"], "homologs: m is the last record"),
        ([window, "join=true", "homologs=[]"], "homologs=[] names no record"),
        ([window, "join=true", "homologs=[p0]", "max_length=30", "truncate=true"],
         "homologs: p0 was cut from the front of the window by truncate=true"),
        ([twice, "join=true", "homologs=[p0]"], "homologs: p0 names more than one record of"),
        ([last, "join=true", "homologs=[p0]"], "the last (aligned) one among them"),
    ):  # fmt: skip
        code, _, err = run(capsys, *base, f"out={tmp_path / 'bad'}", *extra)
        assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "bad").exists()


def test_homolog_columns_put_the_named_segments_side_by_side() -> None:
    from protein_performer.analysis.figures import homolog_columns

    columns, at = homolog_columns([(0, 3), (10, 12)], np.array([2, 10, 11, 0]))
    np.testing.assert_array_equal(columns, [0, 1, 2, 10, 11])
    np.testing.assert_array_equal(at, [2, 3, 4, 0])
    with pytest.raises(ValueError, match="outside"):
        homolog_columns([(0, 3), (10, 12)], np.array([5]))


def test_a_cluster_split_whose_table_moved_says_what_to_give(tmp_path):
    from protein_performer.analysis.inputs import split_filter
    from protein_performer.errors import DataError

    stored = {"split_by": "cluster", "clusters": str(tmp_path / "clusters14"),
              "split_fractions": [0.9, 0.05, 0.05], "split_seed": 0}  # fmt: skip
    with pytest.raises(DataError, match=r"clusters14: split=test: .* give clusters=DIR"):
        split_filter("test", stored)
    table = tmp_path / "moved"
    table.mkdir()
    (table / "members.tsv").write_text("cluster_id\tmember_id\nc0\tp0\n")
    assert callable(split_filter("test", stored, clusters=table))  # clusters= says where


@pytest.mark.slow
def test_aa_similarity_split_is_the_runs_own_after_max_records(files, tmp_path, capsys) -> None:
    """A run that read the first N records (data.max_records) split those: split=test is
    drawn from them, as evaluate does (it was drawn from every record of the files)."""
    data = {"split_by": "record", "split_fractions": [0.5, 0.0, 0.5], "split_seed": 0}
    for name, cap in (("all.ckpt", None), ("cap.ckpt", 20)):
        save_model_checkpoint(
            tmp_path / name, tiny_model("performer_relu"), ALPHABET, "mlm",
            {**data, "max_records": cap},
        )  # fmt: skip
    counts = {}
    for name in ("all.ckpt", "cap.ckpt"):
        out = tmp_path / f"sim_{name.removesuffix('.ckpt')}"
        code, text, _ = run(
            capsys, "aa-similarity", f"checkpoint={tmp_path / name}",
            f"fasta={files / 'proteins.fasta'}", f"out={out}", "split=test", "min_arcs=1",
        )  # fmt: skip
        assert code == 0, text
        counts[name] = json.loads((out / "similarity.json").read_text())["proteins"]
    assert 0 < counts["cap.ckpt"] <= 20 < counts["all.ckpt"]


@pytest.mark.slow
def test_aa_similarity_split_alone_reads_the_runs_own_files(
    files, tmp_path, capsys, caplog
) -> None:
    fasta = str(files / "proteins.fasta")
    data = {"split_by": "record", "split_fractions": [0.5, 0.0, 0.5], "split_seed": 0}
    data |= {"files": [fasta], "held_out_files": False}
    ckpt = tmp_path / "run.ckpt"
    save_model_checkpoint(ckpt, tiny_model("performer_relu"), ALPHABET, "mlm", data)
    results = []
    for given in ([f"fasta={fasta}"], []):
        out = tmp_path / f"sim{len(given)}"
        code, _, err = run(
            capsys, "aa-similarity", f"checkpoint={ckpt}", *given, f"out={out}",
            "split=test", "min_arcs=1",
        )  # fmt: skip
        assert code == 0, err
        results.append(json.loads((out / "similarity.json").read_text()))
    assert "the training run's FASTA file, as it read it" in caplog.text
    assert results[0]["proteins"] == results[1]["proteins"] > 0
    assert results[1]["fasta"] == [fasta]
    code, _, err = run(capsys, "aa-similarity", f"checkpoint={ckpt}", f"out={tmp_path / 'x'}")
    assert code != 0 and "fasta=... is required" in err


def test_join_with_truncate_needs_a_homolog_in_the_window():
    from protein_performer.analysis.inputs import join_proteins
    from protein_performer.errors import ConfigError

    a, b = random_proteins(2, 30, seed=3)
    joined, segments, _ = join_proteins([a, b], ALPHABET, 40, truncate=True)
    assert len(segments) == 2 and len(joined.residues) == 38  # part of a, then b
    with pytest.raises(ConfigError, match=r"only the last protein \(p1, 30 residues\) fits"):
        join_proteins([a, b], ALPHABET, 33, truncate=True)  # <sep> + b fill it


def test_plot_heads_join_of_one_record_is_one_line(files, tmp_path, capsys) -> None:
    code, _, err = run(
        capsys, "plot-heads", f"checkpoint={files / 'relu.ckpt'}", f"fasta={files / 'one.fasta'}",
        f"out={tmp_path / 'z'}", "join=true",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert f"{files / 'one.fasta'}: join=true puts several proteins in one window; found one" in err
    assert not (tmp_path / "z").exists()


def test_homologs_are_found_by_accession_or_entry_name_as_record_is() -> None:
    from protein_performer.analysis.alignment_heads import homolog_segments
    from protein_performer.analysis.inputs import Protein
    from protein_performer.errors import ConfigError

    ids = ["sp|P11111|A_HUMAN", "tr|Q22222|Q22222_ECOLI", "plain", "sp|P33333|C_HUMAN"]
    proteins = [Protein(i, "", np.zeros(3, dtype=np.uint8)) for i in ids]
    read = [p.id for p in proteins]
    assert homolog_segments(proteins, ["Q22222"], read, "f.fa") == [1]
    assert homolog_segments(proteins, ["A_HUMAN", "plain", ids[1]], read, "f.fa") == [0, 1, 2]
    with pytest.raises(ConfigError, match="homologs: P33333 is the last record"):
        homolog_segments(proteins, ["P33333"], read, "f.fa")
    with pytest.raises(ConfigError, match="homologs: P99999 is not a record of the FASTA"):
        homolog_segments(proteins, ["P99999"], read, "f.fa")
    twice = [proteins[0], Protein("sp|P11111|A_MOUSE", "", proteins[0].residues), proteins[3]]
    with pytest.raises(ConfigError, match="P11111 names more than one record"):
        homolog_segments(twice, ["P11111"], [p.id for p in twice], "f.fa")


def test_an_analysis_without_an_alphabet_says_so() -> None:
    from protein_performer.analysis.inputs import as_protein

    with pytest.raises(TypeError, match="alphabet must be an Alphabet"):
        as_protein("MKV", None)


@pytest.mark.slow
def test_aa_similarity_defaults_give_the_shipped_model_an_attention_view(tmp_path, capsys):
    """θ = 0.3 (and 0.1) left every head of the shipped model without 100 arcs ("n/a, 0 of 16
    heads"): threshold=auto finds a view and says which θ it took."""
    out = tmp_path / "sim"
    sample = Path(__file__).resolve().parents[2] / "data" / "simulated_families.fasta.gz"
    code, text, _ = run(
        capsys, "aa-similarity", "checkpoint=default", f"fasta={sample}", f"out={out}",
        "n_proteins=40", "max_residues=200",
    )  # fmt: skip
    assert code == 0, text
    summary = json.loads((out / "similarity.json").read_text())
    assert summary["threshold_auto"] and summary["threshold"] < 0.1
    assert summary["heads_kept"] >= 3 and summary["r_vs_blosum62"]["attention"] is not None
    assert f"θ={summary['threshold']} chosen by threshold=auto" in text


@pytest.mark.slow
def test_the_empty_attention_panel_says_what_to_try(files, tmp_path, capsys, monkeypatch) -> None:
    from protein_performer.cli.commands import aa_similarity as command

    notes = {}
    real = command.similarity_figure
    monkeypatch.setattr(
        command, "similarity_figure", lambda *a, **kw: notes.update(kw["notes"]) or real(*a, **kw)
    )
    ckpt, fasta = f"checkpoint={files / 'relu.ckpt'}", f"fasta={files / 'proteins.fasta'}"
    code, text, _ = run(capsys, "aa-similarity", ckpt, fasta, f"out={tmp_path / 's'}",
                        "n_proteins=10", "threshold=0.9")  # fmt: skip
    assert code == 0, text
    assert notes["attention"].endswith("(try threshold=0.45\nor min_arcs=25)")


def _homolog_files(tmp_path: Path) -> tuple[Path, Path]:
    """Two query proteins and, for each, three mutated copies named as data search names them."""
    rng = np.random.default_rng(0)
    letters = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    queries, hits = [], []
    for q in range(2):
        seq = rng.choice(letters, 24)
        queries.append(f">q{q} query protein\n{''.join(seq)}\n")
        for h in range(3):
            copy = seq.copy()
            spots = rng.choice(24, 4, replace=False)
            copy[spots] = rng.choice(letters, 4)
            hits.append(f">h{q}{h}/1-24 query=q{q} identity=0.83\n{''.join(copy)}\n")
    (tmp_path / "q.fasta").write_text("".join(queries))
    (tmp_path / "hits.fasta").write_text("".join(hits))
    return tmp_path / "q.fasta", tmp_path / "hits.fasta"


@pytest.mark.slow
def test_aa_similarity_with_homologs_writes_the_cross_homolog_view(files, tmp_path, capsys):
    query, hits = _homolog_files(tmp_path)
    out = tmp_path / "cross"
    args = [f"checkpoint={files / 'relu.ckpt'}", f"fasta={query}", f"context={hits}", f"out={out}"]
    code, text, err = run(capsys, "aa-similarity", *args)
    assert code == 0, err
    assert {p.name for p in out.iterdir()} == {
        "cross_homolog.json", "cross_homolog.png", "cross_homolog.pdf", "best_head.csv",
        "ceiling.csv",
    }  # fmt: skip
    view = json.loads((out / "cross_homolog.json").read_text())
    assert view["proteins"] == 2 and view["homologs"] == 2  # one fits the 64-token window
    assert view["masked_positions"] == 48  # every residue of both proteins, once
    assert len(view["heads"]) == 8 and view["best_head"] == view["heads"][0]["name"]
    assert view["ceiling"]["aligned_pairs"] > 0
    assert (view["checkpoint"], view["fasta"], view["context"]) == (
        str(files / "relu.ckpt"),
        str(query),
        str(hits),
    )  # what made it, as similarity.json says
    assert "ceiling (the same log-odds" in text and f"    {view['best_head']}" in text
    # per protein, not only the total: 3 homologs each in the file, 2 of the 6 fit the windows
    assert "\n  homologs read per protein: q0 3, q1 3 (2 of these 6 fit the windows)" in text
    code, _, err = run(capsys, "aa-similarity", *args)  # ours: replaced only when asked
    assert code == 2 and "overwrite=true" in err
    assert run(capsys, "aa-similarity", *args, "overwrite=true")[0] == 0


def test_aa_similarity_keeps_near_copies_of_an_alignments_protein_out(
    files, tmp_path, capsys, caplog
):
    rng = np.random.default_rng(1)
    letters = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    seq = rng.choice(letters, 20)
    rows = [f">q\n{''.join(seq)}\n"]
    for h, changed in enumerate((1, 8, 2, 10)):  # 19/20 over 0.9; 18/20 is not over it
        copy = seq.copy()
        spots = rng.choice(20, changed, replace=False)
        copy[spots] = [rng.choice(letters[letters != a]) for a in seq[spots]]
        rows.append(f">h{h}\n{''.join(copy)}\n")
    (tmp_path / "q.fasta").write_text(rows[0])
    rows[-1] = rows[-1][:-2] + "-\n"  # a gap: an alignment, not plain FASTA hits
    (tmp_path / "msa.a3m").write_text("".join(rows))
    base = [f"checkpoint={files / 'relu.ckpt'}", f"fasta={tmp_path / 'q.fasta'}"]
    base += [f"context={tmp_path / 'msa.a3m'}"]
    code, text, err = run(capsys, "aa-similarity", *base, f"out={tmp_path / 'a'}")
    assert code == 0, err
    assert "homologs read per protein: q 3" in text
    assert "1 of its 4 homologs more than 90% identical to q left out" in caplog.text
    caplog.clear()
    assert json.loads((tmp_path / "a" / "cross_homolog.json").read_text())["proteins"] == 1
    code, text, err = run(
        capsys, "aa-similarity", *base, "context_max_identity=null", f"out={tmp_path / 'b'}"
    )
    assert code == 0 and "homologs read per protein: q 4" in text and not caplog.text
    code, _, err = run(
        capsys, "aa-similarity", *base, "context_max_identity=2", f"out={tmp_path / 'c'}"
    )
    assert code == 2 and "context_max_identity must be a number from 0 to 1" in err


def test_aa_similarity_with_unrelated_homolog_names_says_so(files, tmp_path, capsys):
    query, hits = _homolog_files(tmp_path)
    hits.write_text(hits.read_text().replace("query=q", "query=other"))
    out = tmp_path / "cross"
    code, _, err = run(capsys, "aa-similarity", f"checkpoint={files / 'relu.ckpt'}",
                       f"fasta={query}", f"context={hits}", f"out={out}")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "error:" in err
    assert not out.exists()
    code, _, err = run(capsys, "aa-similarity", f"fasta={query}", f"context={hits}",
                       "split=test", f"out={out}")  # fmt: skip
    assert code == 2 and "context= takes fasta=" in err


def test_context_commands_read_checkpoint_auto_as_the_homolog_model(monkeypatch):
    from protein_performer.cli.commands.checkpoint_choice import (
        SCORE_CONTEXT_CHECKPOINTS,
        with_context_checkpoint,
    )
    from protein_performer.config.schema import ScoreConfig, SimilarityConfig
    from protein_performer.model import checkpoints

    monkeypatch.setattr(checkpoints, "shipped", lambda name: True)
    assert with_context_checkpoint(SimilarityConfig(context="h.fa")).checkpoint == "homologs-msa"
    assert with_context_checkpoint(ScoreConfig(context="h.fa")).checkpoint == "homologs-msa"
    # score reads the model that reads homologs at their columns; without it, homologs-msa
    scored = with_context_checkpoint(ScoreConfig(context="h.fa"), SCORE_CONTEXT_CHECKPOINTS)
    assert scored.checkpoint == "homologs-columns-deep"
    # what score's help says it reads with context= is what it reads
    said = dataclasses.fields(ScoreConfig)[0].metadata.get("help", "")
    assert f"with context=: {scored.checkpoint})" in said, said
    monkeypatch.setattr(checkpoints, "shipped", lambda name: name != "homologs-columns-deep")
    scored = with_context_checkpoint(ScoreConfig(context="h.fa"), SCORE_CONTEXT_CHECKPOINTS)
    assert scored.checkpoint == "homologs-columns"
    monkeypatch.setattr(checkpoints, "shipped", lambda name: not name.startswith("homologs-col"))
    scored = with_context_checkpoint(ScoreConfig(context="h.fa"), SCORE_CONTEXT_CHECKPOINTS)
    assert scored.checkpoint == "homologs-msa"
    monkeypatch.setattr(checkpoints, "shipped", lambda name: True)
    assert with_context_checkpoint(SimilarityConfig()).checkpoint == "default"  # no homologs
    mine = SimilarityConfig(context="h.fa", checkpoint="run/best.ckpt")
    assert with_context_checkpoint(mine).checkpoint == "run/best.ckpt"
    # a name given is read as given, the single-protein model's too
    for cfg in (SimilarityConfig(context="h.fa", checkpoint="default"),
                ScoreConfig(context="h.fa", checkpoint="default")):  # fmt: skip
        assert with_context_checkpoint(cfg, SCORE_CONTEXT_CHECKPOINTS).checkpoint == "default"
    assert ScoreConfig().checkpoint == SimilarityConfig().checkpoint == "auto"
    monkeypatch.setattr(checkpoints, "shipped", lambda name: False)  # no homolog model here
    assert with_context_checkpoint(ScoreConfig(context="h.fa")).checkpoint == "default"
    named = ScoreConfig(context="h.fa", checkpoint="homologs")  # the earlier one, by name
    assert with_context_checkpoint(named).checkpoint == "homologs"
    # only the earlier homolog model installed: it is read
    monkeypatch.setattr(checkpoints, "shipped", lambda name: name in ("default", "homologs"))
    assert with_context_checkpoint(ScoreConfig(context="h.fa")).checkpoint == "homologs"
    monkeypatch.setattr(checkpoints, "shipped", lambda name: False)  # not installed
    assert with_context_checkpoint(ScoreConfig(context="h.fa")).checkpoint == "default"


def test_a_context_command_on_the_homolog_model_says_so_in_one_printed_line(monkeypatch):
    from protein_performer.cli.commands.checkpoint_choice import (
        context_checkpoint_note,
        with_context_checkpoint,
    )
    from protein_performer.config.schema import ScoreConfig
    from protein_performer.model import checkpoints

    monkeypatch.setattr(checkpoints, "shipped", lambda name: True)
    note = context_checkpoint_note(with_context_checkpoint(ScoreConfig(context="h.fa")))
    assert note.count("\n") == 1 and note.startswith("\n  model: checkpoint=homologs-msa (")
    named = context_checkpoint_note(ScoreConfig(context="h.fa", checkpoint="homologs"))
    assert named.startswith("\n  model: checkpoint=homologs (the shipped homolog model,")
    assert context_checkpoint_note(with_context_checkpoint(ScoreConfig())) == ""
    mine = ScoreConfig(context="h.fa", checkpoint="run/best.ckpt")
    assert context_checkpoint_note(with_context_checkpoint(mine)) == ""


def test_extract_crops_a_long_record_by_default_and_says_so(files, tmp_path, capsys) -> None:
    long = tmp_path / "mixed.fasta"
    long.write_text(">short\nMKTAYIAKQR\n>long\n" + "MKTAYIAKQR" * 30 + "\n")
    out = tmp_path / "x"
    code, text, _ = run(capsys, "extract", f"checkpoint={files / 'relu.ckpt'}", f"fasta={long}",
                        f"out={out}")  # fmt: skip
    assert code == 0, text
    assert "cropped: 1 record longer than the window" in text
    assert sorted(p.name for p in out.glob("*.npz")) == ["long.npz", "short.npz"]
    code, _, err = run(capsys, "extract", f"checkpoint={files / 'relu.ckpt'}", f"fasta={long}",
                       f"out={tmp_path / 'y'}", "truncate=false")  # fmt: skip
    assert code == 2 and "300 residues exceed" in err and not (tmp_path / "y").exists()
    code, _, err = run(
        capsys, "extract", f"fasta={long}", f"out={tmp_path / 'z'}", "truncate=maybe"
    )
    assert code == 2 and "truncate must be auto, true or false" in err


def test_homolog_counts_show_the_first_proteins_and_how_many_more():
    from types import SimpleNamespace

    from protein_performer.cli.commands.aa_similarity import homolog_counts_text

    pairs = [(SimpleNamespace(id=f"p{i}"), [None] * i) for i in range(5)]
    assert homolog_counts_text(pairs) == "homologs read per protein: p0 0, p1 1, p2 2, p3 3, p4 4"
    assert homolog_counts_text(pairs, limit=2) == (
        "homologs read per protein: p0 0, p1 1, ... 3 more (--json: homologs_per_protein)"
    )


def _read_matrix_csv(path: Path) -> tuple[list[str], np.ndarray]:
    rows = [line.split(",") for line in path.read_text().splitlines()]
    order = rows[0][1:]
    assert [r[0] for r in rows[1:]] == order
    values = [[float(x) if x.strip() not in ("", "nan", "NaN") else np.nan for x in r[1:]]
              for r in rows[1:]]  # fmt: skip
    return order, np.array(values)


def test_aa_similarity_matrices_are_those_computed_by_hand(
    files, tmp_path, capsys, monkeypatch
) -> None:
    """The planted model's attention maps read directly, Vig et al.'s arcs counted by hand;
    its embeddings (one-hot plus a shared unit: cosine 1/2 between any two amino acids);
    BLOSUM62 from Biopython; each r as Pearson over the 190 pairs above the diagonal."""
    import torch
    from Bio.Align import substitution_matrices

    from protein_performer.cli.commands import aa_similarity as command

    def no_figure(*args, **kwargs) -> None:  # the figure is another test's (slow: matplotlib)
        for ext in ("png", "pdf"):
            args[3].with_suffix(f".{ext}").write_bytes(b"")

    monkeypatch.setattr(command, "similarity_figure", no_figure)
    proteins = random_proteins(12, 30, seed=1)
    write_fasta(tmp_path / "p.fasta", proteins)
    order = list("AVLIMFWYCGPSTNQHKRDE")
    model = planted_model().eval()
    arcs = np.zeros((8, 20))
    for p in proteins:
        tokens = torch.tensor([[ALPHABET.cls_idx, *p.residues.tolist(), ALPHABET.eos_idx]])
        with torch.no_grad():
            att = model(tokens, return_attentions=True)["attentions"][0][0, :, 1:-1, 1:-1]
        letters = ALPHABET.decode(p.residues)
        for h in range(8):
            for j in range(len(letters)):
                arcs[h, order.index(letters[j])] += int((att[h, :, j] >= 0.1).sum())
    # min_arcs at the third-largest head's arcs: three heads kept, one of them exactly at it
    min_arcs = int(np.sort(arcs.sum(1))[-3])
    out = tmp_path / "sim"
    code, text, _ = run(
        capsys, "aa-similarity", f"checkpoint={files / 'planted.ckpt'}",
        f"fasta={tmp_path / 'p.fasta'}", f"out={out}", "threshold=0.1", f"min_arcs={min_arcs}",
        "n_proteins=12",
    )  # fmt: skip
    assert code == 0, text
    written, blosum = _read_matrix_csv(out / "blosum62.csv")
    assert written == order
    bio = substitution_matrices.load("BLOSUM62")
    np.testing.assert_array_equal(blosum, [[bio[a][b] for b in order] for a in order])

    kept = arcs.sum(1) >= min_arcs
    assert kept.sum() == 3
    shares = arcs[kept] / arcs[kept].sum(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = np.corrcoef(shares.T)
    _, attention = _read_matrix_csv(out / "attention.csv")
    np.testing.assert_allclose(attention, expected, atol=1e-5, equal_nan=True)

    _, embedding = _read_matrix_csv(out / "embedding.csv")
    np.testing.assert_allclose(embedding, np.full((20, 20), 0.5) + 0.5 * np.eye(20), atol=1e-6)

    summary = json.loads((out / "similarity.json").read_text())
    iu = np.triu_indices(20, k=1)
    for name in ("attention", "attention_null", "flow", "substitution"):
        _, m = _read_matrix_csv(out / f"{name}.csv")
        x, y = m[iu], blosum[iu]
        ok = np.isfinite(x)
        r = np.corrcoef(x[ok], y[ok])[0, 1]
        assert summary["r_vs_blosum62"][name] == pytest.approx(r, abs=1e-6), name
    assert summary["r_vs_blosum62"]["embedding"] is None  # constant off the diagonal
