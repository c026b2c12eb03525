"""No command replaces what a user owns: output paths are checked before any work
(``protein_performer.utils.outputs``), for every command that writes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from protein_performer.cli.hydra import run_hydra
from protein_performer.cli.main import main
from protein_performer.config.schema import EvalConfig
from protein_performer.errors import DataError
from protein_performer.evaluation.evaluate import evaluate
from protein_performer.training.run import train
from protein_performer.utils.outputs import check_output_dir, check_output_file, input_like_name
from tests.training.helpers import tiny_config, tiny_overrides, write_fasta


@pytest.fixture
def tiny_fasta(tmp_path: Path) -> Path:
    return write_fasta(tmp_path / "tiny.fasta")


FASTA = b">sp|P1|A_HUMAN a\nMKVLAAGICW\n>sp|P2|B_HUMAN b\nACDEWMKKLV\n"


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--no-progress"] if argv[0] == "data" else list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("x.fasta", "a FASTA file"),
        ("x.FA.GZ", "a FASTA file"),
        ("x.faa.bz2", "a FASTA file"),
        ("uniref50.fasta.xz", "a FASTA file"),
        ("model.ckpt", "a checkpoint"),
        ("x.tar.gz", "a compressed file"),
        ("shards", None),
        ("run.v2", None),
    ],
)
def test_input_like_names(name, kind):
    assert input_like_name(name) == kind


def test_preprocess_never_replaces_a_fasta_given_as_outdir(tmp_path, capsys):
    src, other = tmp_path / "in.fasta", tmp_path / "other.fasta"
    src.write_bytes(FASTA)
    other.write_bytes(FASTA + b">sp|P3|C_HUMAN c\nMMMM\n")
    kept = other.read_bytes()
    for extra in ([], ["--overwrite"]):
        code, _, err = _cli(capsys, "data", "preprocess", str(src), str(other), *extra)
        _one_line_error(code, err, str(other), "looks like a FASTA file", "wrong order")
        assert other.read_bytes() == kept
    # the arguments swapped: the input is named as OUTDIR, refused before anything is read
    code, _, err = _cli(capsys, "data", "preprocess", str(tmp_path / "shards"), str(src))
    _one_line_error(code, err, f"error: {src}: OUTDIR", "looks like a FASTA file")
    assert src.read_bytes() == FASTA and not (tmp_path / "shards").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.fasta", "other.fasta"]


def test_preprocess_overwrite_replaces_only_its_own_shard_directory(tmp_path, capsys):
    src = tmp_path / "in.fasta"
    src.write_bytes(FASTA)
    plain = tmp_path / "notes"  # an existing file without a FASTA name
    plain.write_text("mine")
    code, _, err = _cli(capsys, "data", "preprocess", str(src), str(plain), "--overwrite")
    _one_line_error(code, err, "an existing file (4 bytes) is in the way")
    assert plain.read_text() == "mine"
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.txt").write_text("mine")
    code, _, err = _cli(capsys, "data", "preprocess", str(src), str(home), "--overwrite")
    _one_line_error(code, err, "thesis.txt", "never replaced")
    assert (home / "thesis.txt").read_text() == "mine"
    # an empty directory is used; a shard directory is replaced only with --overwrite
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _cli(capsys, "data", "preprocess", str(src), str(empty))[0] == 0
    assert (empty / "manifest.json").is_file()
    code, _, err = _cli(capsys, "data", "preprocess", str(src), str(empty))
    _one_line_error(code, err, "shard directory exists (use --overwrite to replace it)")
    assert _cli(capsys, "data", "preprocess", str(src), str(empty), "--overwrite")[0] == 0
    # a shard directory a user added a file to is theirs now
    (empty / "README.txt").write_text("my notes")
    code, _, err = _cli(capsys, "data", "preprocess", str(src), str(empty), "--overwrite")
    _one_line_error(code, err, "README.txt", "never replaced")
    assert (empty / "README.txt").read_text() == "my notes"
    # a link to a shard directory is not replaced (the link would be lost, not the target)
    shards = tmp_path / "shards"
    assert _cli(capsys, "data", "preprocess", str(src), str(shards))[0] == 0
    link = tmp_path / "link"
    link.symlink_to(shards)
    code, _, err = _cli(capsys, "data", "preprocess", str(src), str(link), "--overwrite")
    _one_line_error(code, err, "symbolic link")
    assert link.is_symlink() and (shards / "manifest.json").is_file()


def test_file_outputs_of_data_commands(tmp_path, capsys):
    src = tmp_path / "in.fasta"
    src.write_bytes(FASTA)
    # stats -o: never onto a FASTA; an existing file needs --overwrite and must be stats JSON
    code, _, err = _cli(capsys, "data", "stats", str(src), "-o", str(tmp_path / "x.fa.gz"))
    _one_line_error(code, err, "looks like a FASTA file")
    mine = tmp_path / "mine.json"
    mine.write_text('{"my": "data"}')
    for extra in ([], ["--overwrite"]):
        code, _, err = _cli(capsys, "data", "stats", str(src), "-o", str(mine), *extra)
        _one_line_error(code, err, str(mine))
        # never a hint to --overwrite, which would be refused too
        assert "never replaced (choose another name)" in err and "use --overwrite" not in err
        assert mine.read_text() == '{"my": "data"}'
    stats = tmp_path / "stats.json"
    code, out, err = _cli(capsys, "data", "stats", str(src), "-o", str(stats))
    assert code == 0 and out == "" and err.startswith(f"wrote {stats}: ")  # said, on stderr
    code, _, err = _cli(capsys, "data", "stats", str(src), "-o", str(stats))
    _one_line_error(code, err, "file exists (use --overwrite to replace it)")
    assert _cli(capsys, "data", "stats", str(src), "-o", str(stats), "--overwrite")[0] == 0
    # simulate: --overwrite replaces a simulated file, never a user's FASTA
    sim = ["--families", "2", "--min-members", "2", "--max-members", "2"]
    code, _, err = _cli(capsys, "data", "simulate", str(src), *sim, "--overwrite")
    _one_line_error(code, err, "not a simulated FASTA file of protein-performer")
    assert src.read_bytes() == FASTA
    out = tmp_path / "sim.fa.gz"
    assert _cli(capsys, "data", "simulate", str(out), *sim)[0] == 0
    code, _, err = _cli(capsys, "data", "simulate", str(out), *sim)
    _one_line_error(code, err, "file exists")
    assert _cli(capsys, "data", "simulate", str(out), *sim, "--seed", "3", "--overwrite")[0] == 0
    assert gzip.decompress(out.read_bytes()).startswith(b">UniRef50_SIMF")
    # --members: a table simulate wrote is replaced with --overwrite, a user's never (same header)
    table = tmp_path / "fam.tsv"
    assert (
        _cli(capsys, "data", "simulate", str(out), *sim, "--members", str(table), "--overwrite")[0]
        == 0
    )
    assert table.read_text().splitlines()[1].startswith("SIMF00001\tUniRef50_SIMF")
    assert (
        _cli(capsys, "data", "simulate", str(out), *sim, "--members", str(table), "--overwrite")[0]
        == 0
    )
    curated = tmp_path / "curated.tsv"
    curated.write_text("cluster_id\tmember_id\nmyfam\tprotA\n")
    code, _, err = _cli(
        capsys, "data", "simulate", str(out), *sim, "--members", str(curated), "--overwrite"
    )
    _one_line_error(code, err, "not a members table of protein-performer")
    assert curated.read_text() == "cluster_id\tmember_id\nmyfam\tprotA\n"
    # download: checked before any connection (this URL would fail otherwise)
    url = "http://127.0.0.1:9/uniref50.fasta.gz"
    code, _, err = _cli(capsys, "data", "download", "uniref50", str(src), "--url", url)
    _one_line_error(code, err, "file exists (choose another name)")
    # a downloaded FASTA cannot be told from a user's copy: no --overwrite for download
    with pytest.raises(SystemExit) as exit_info:  # argparse: unrecognized argument
        main(["data", "download", "uniref50", str(src), "--url", url, "--overwrite"])
    assert exit_info.value.code == 2 and src.read_bytes() == FASTA
    capsys.readouterr()
    code, _, err = _cli(capsys, "data", "download", "uniref50", str(tmp_path), "--url", url)
    _one_line_error(code, err, "is in the way")


@pytest.mark.slow
def test_evaluate_output_is_checked_before_work(tiny_fasta, tmp_path, capsys):
    ckpt = train(tiny_config(tiny_fasta, max_steps=2), tmp_path / "run").last_checkpoint
    cfg = {"checkpoint": ckpt, "fasta": str(tiny_fasta)}
    with pytest.raises(DataError, match="looks like a FASTA file"):
        evaluate(EvalConfig(**cfg, output=str(tmp_path / "result.fasta")))
    mine = tmp_path / "notes.json"
    mine.write_text("[1, 2]")
    for overwrite in (False, True):
        with pytest.raises(DataError, match=r"notes\.json: output"):
            evaluate(EvalConfig(**cfg, output=str(mine), overwrite=overwrite))
    assert mine.read_text() == "[1, 2]"
    out = tmp_path / "eval.json"
    evaluate(EvalConfig(**cfg, output=str(out)))
    with pytest.raises(DataError, match=r"file exists \(use overwrite=true to replace it\)"):
        evaluate(EvalConfig(**cfg, output=str(out)))
    evaluate(EvalConfig(**cfg, output=str(out), overwrite=True, seed=1))
    assert json.loads(out.read_text())["seed"] == 1
    # a FASTA listed twice would count its proteins twice: refused, by evaluate and extract
    same = [str(tiny_fasta), str(tiny_fasta.parent / "." / tiny_fasta.name)]
    capsys.readouterr()
    code, _, err = _cli(capsys, "evaluate", f"checkpoint={ckpt}", f"fasta=[{','.join(same)}]")
    _one_line_error(code, err, "fasta: ", "is already listed")
    code, _, err = _cli(
        capsys,
        "extract",
        f"checkpoint={ckpt}",
        f"fasta=[{','.join(same)}]",
        f"out={tmp_path / 'emb'}",
    )
    _one_line_error(code, err, "fasta: ", "is already listed")
    assert not (tmp_path / "emb").exists()


def test_train_never_writes_into_a_users_directory_or_file(tiny_fasta, tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("my own config")
    (home / "data.csv").write_text("1,2")
    with pytest.raises(DataError, match=r"not empty \(config.yaml, data.csv\); a new run needs"):
        run_hydra("train", tiny_overrides(tiny_fasta, home))
    assert (home / "config.yaml").read_text() == "my own config"
    assert sorted(p.name for p in home.iterdir()) == ["config.yaml", "data.csv"]
    with pytest.raises(DataError, match="looks like a FASTA file"):
        run_hydra("train", tiny_overrides(tiny_fasta, tmp_path / "run.fasta"))
    assert not (tmp_path / "run.fasta").exists()


def test_check_output_dir_and_file_directly(tmp_path):
    assert check_output_dir(tmp_path / "new", "k") == tmp_path / "new"
    assert not (tmp_path / "new").exists()  # a check creates nothing
    f = tmp_path / "f.txt"
    f.write_text("x")
    with pytest.raises(DataError, match="is in the way"):
        check_output_dir(f, "k", overwrite=True, is_ours=lambda _: True)
    with pytest.raises(DataError, match="is in the way; expected a file name"):
        check_output_file(tmp_path, "k", overwrite=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="an existing empty directory is in the way; expected a"):
        check_output_file(tmp_path / "empty", "k")
    (tmp_path / "empty").rmdir()
    assert check_output_file(f, "k", overwrite=True) == f and f.read_text() == "x"
    assert not any(p.name.endswith(".tmp") for p in Path(tmp_path).iterdir())


def test_more_misuse_from_a_user_pass(tmp_path, capsys):
    src = tmp_path / "in.fasta"
    src.write_bytes(FASTA)
    # user files inside a shard directory's split folders make it the user's
    shards = tmp_path / "shards"
    assert _cli(capsys, "data", "preprocess", str(src), str(shards))[0] == 0
    (shards / "train" / "mine.txt").write_text("mine")
    code, _, err = _cli(capsys, "data", "preprocess", str(src), str(shards), "--overwrite")
    _one_line_error(code, err, "never replaced")
    assert (shards / "train" / "mine.txt").read_text() == "mine"
    # an output under a file: one line, no traceback
    notes = tmp_path / "notes.txt"
    notes.write_text("n")
    code, _, err = _cli(capsys, "data", "preprocess", str(src), str(notes / "sub"))
    _one_line_error(code, err, "is a file, not a directory")
    # refused commands create no folders
    code, _, err = _cli(
        capsys, "data", "stats", str(tmp_path / "missing.fa"), "-o", str(tmp_path / "a/b/s.json")
    )
    assert code == 2 and not (tmp_path / "a").exists()
    code, _, err = _cli(capsys, "data", "simulate", str(tmp_path / "c/x.fa"), "--families", "-1")
    assert code == 2 and not (tmp_path / "c").exists()
    # a trailing slash names a directory, not a file
    code, _, err = _cli(capsys, "data", "simulate", str(tmp_path / "sim") + "/")
    _one_line_error(code, err, "trailing '/'")
    assert not (tmp_path / "sim").exists()
    # simulate --overwrite: a simulated file a user appended their own record to is theirs
    sim = tmp_path / "sim.fa"
    flags = ["--families", "2", "--min-members", "2", "--max-members", "2"]
    assert _cli(capsys, "data", "simulate", str(sim), *flags)[0] == 0
    with open(sim, "ab") as fh:
        fh.write(FASTA)
    before = sim.read_bytes()
    code, _, err = _cli(capsys, "data", "simulate", str(sim), *flags, "--overwrite")
    _one_line_error(code, err, "not a simulated FASTA file")
    assert sim.read_bytes() == before
    # the same input twice counts its proteins twice (or leaks them into validation)
    code, _, err = _cli(capsys, "data", "preprocess", str(src), str(src), str(tmp_path / "o"))
    _one_line_error(code, err, "INPUT: ", "is already listed")
    code, _, err = _cli(
        capsys, "data", "preprocess", str(src), str(tmp_path / "o"), "--val", str(src)
    )
    _one_line_error(code, err, "--val: ", "already listed in INPUT")
    code, _, err = _cli(capsys, "data", "stats", str(src), str(tmp_path / "." / "in.fasta"))
    _one_line_error(code, err, "is already listed")


def test_a_path_through_a_new_folder_and_back_is_checked_where_it_lands(
    tiny_fasta, tmp_path, capsys
):
    """``new/../x`` is ``x`` once ``new`` exists: checking it as written (``new`` missing, so
    "nothing there") let score, evaluate, data stats and simulate replace a user's file, the
    command's own input included, and train use a user's non-empty folder."""
    mine = tmp_path / "mine.csv"
    mine.write_text("user,data\n")
    with pytest.raises(DataError, match=r"mine\.csv: k: an existing file"):
        check_output_file(
            tmp_path / "new" / ".." / "mine.csv", "k", overwrite=True, is_ours=lambda _: False
        )
    with pytest.raises(DataError, match=r"mine\.csv: k: file exists"):
        check_output_file(tmp_path / "new" / ".." / "mine.csv", "k")
    assert check_output_file(tmp_path / "a" / ".." / "b.csv", "k") == tmp_path / "b.csv"
    assert not (tmp_path / "new").exists() and not (tmp_path / "a").exists()

    # data stats: its input (a FASTA named without an extension), given again as -o
    seqs = tmp_path / "seqs"
    seqs.write_bytes(tiny_fasta.read_bytes())
    code, _, err = _cli(
        capsys, "data", "stats", str(seqs), "-o", str(tmp_path / "q" / ".." / "seqs")
    )
    _one_line_error(code, err, "never replaced")
    assert seqs.read_bytes() == tiny_fasta.read_bytes()
    # simulate --members onto a user's table
    code, _, err = _cli(
        capsys,
        "data",
        "simulate",
        str(tmp_path / "s.fa"),
        "--families",
        "2",
        "--members",
        str(tmp_path / "q" / ".." / "mine.csv"),
    )
    _one_line_error(code, err, "never replaced")
    assert mine.read_text() == "user,data\n"
    assert not (tmp_path / "q").exists() and not (tmp_path / "s.fa").exists()

    ckpt = train(tiny_config(tiny_fasta, max_steps=2), tmp_path / "run").last_checkpoint
    notes = tmp_path / "notes.json"
    notes.write_text("[1, 2]")
    with pytest.raises(DataError, match=r"notes\.json: output"):
        evaluate(
            EvalConfig(
                checkpoint=ckpt,
                fasta=str(tiny_fasta),
                output=str(tmp_path / "q" / ".." / "notes.json"),
                overwrite=True,
            )
        )
    assert notes.read_text() == "[1, 2]"
    capsys.readouterr()
    # score: its own mutations CSV as out
    muts = tmp_path / "m.csv"
    muts.write_text("mutant\nM1A\n")
    code, _, err = _cli(
        capsys,
        "score",
        f"checkpoint={ckpt}",
        "sequence=MKVLA",
        f"mutations={muts}",
        f"out={tmp_path / 'q' / '..' / 'm.csv'}",
        "overwrite=true",
    )
    _one_line_error(code, err, "is the mutations CSV itself")
    assert muts.read_text() == "mutant\nM1A\n"

    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("precious")
    with pytest.raises(DataError, match=r"not empty \(notes.txt\)"):
        run_hydra("train", tiny_overrides(tiny_fasta, tmp_path / "q" / ".." / "home"))
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]
    assert not (tmp_path / "q").exists()


def test_a_refused_output_directory_names_the_files_that_are_not_its_own(tmp_path):
    import json

    from protein_performer.utils.outputs import dir_with_manifest

    ours = dir_with_manifest("m.json", "fmt-1", ["a.png", "b.png"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "m.json").write_text(json.dumps({"format": "fmt-1"}))
    for name in ("a.png", "b.png", "notes.txt"):
        (out / name).write_text("x")
    with pytest.raises(DataError, match=r"holds 1 entry this command did not write \(notes.txt\)"):
        check_output_dir(out, "out", overwrite=True, is_ours=ours, what="figure directory")
    (out / "notes.txt").unlink()
    assert check_output_dir(out, "out", overwrite=True, is_ours=ours) == out


def test_an_output_named_like_an_input_is_said_once(tmp_path):
    from protein_performer.utils.outputs import check_output_dir

    with pytest.raises(DataError) as e:
        check_output_dir(tmp_path / "small.fa", "run directory (hydra.run.dir)",
                         what="run directory (hydra.run.dir)")  # fmt: skip
    assert str(e.value).count("run directory") == 1 and "looks like a FASTA file (" in str(e.value)
    with pytest.raises(DataError, match="looks like a FASTA file, not the output directory"):
        check_output_dir(tmp_path / "small.fa", "OUTDIR")


def test_what_is_in_the_way_is_described_with_its_first_four_entries(tmp_path):
    from protein_performer.utils.outputs import describe_existing

    folder = tmp_path / "d"
    folder.mkdir()
    assert describe_existing(folder) == "an existing empty directory"
    (folder / "a.txt").write_text("x")
    assert describe_existing(folder) == "an existing directory holding 1 entry (a.txt)"
    for name in "bcd":
        (folder / f"{name}.txt").write_text("x")
    assert describe_existing(folder).endswith("holding 4 entries (a.txt, b.txt, c.txt, d.txt)")
    (folder / "e.txt").write_text("x")
    assert describe_existing(folder).endswith("holding 5 entries (a.txt, b.txt, c.txt, d.txt, ...)")
    assert describe_existing(folder / "a.txt") == "an existing file (1 byte)"
    (folder / "b.txt").write_text("x" * 1234)
    assert describe_existing(folder / "b.txt") == "an existing file (1,234 bytes)"


def test_a_staged_folder_lands_with_the_users_umask(tmp_path):
    import os
    import stat

    from protein_performer.utils.atomic import current_umask
    from protein_performer.utils.outputs import staged_dir

    for mask in (0o022, 0o000):  # the usual one, and one that leaves every bit
        old = os.umask(mask)
        try:
            out = tmp_path / f"out{mask}"
            with staged_dir(out, lambda: None) as work:
                (work / "f.txt").write_text("x")
            assert current_umask() == mask
        finally:
            os.umask(old)
        assert (out / "f.txt").read_text() == "x"
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~mask
