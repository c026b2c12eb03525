from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest

from protein_performer.cli.main import main

FASTA = b">UniRef50_A one n=1 Tax=t TaxID=1 RepID=A\nMKVLA\n>UniRef50_B two n=1 Tax=t TaxID=1 RepID=B\nACDEW\n"


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_stats_json(tmp_path, capsys):
    p = tmp_path / "x.fa"
    p.write_bytes(gzip.compress(FASTA))
    code, out, _ = _run(capsys, "data", "stats", str(p), "--json", "--no-progress")
    assert code == 0
    s = json.loads(out)
    assert s["records"] == 2 and s["residues"] == 10 and s["header_kinds"] == {"uniref": 2}


def test_stats_text(tmp_path, capsys):
    p = tmp_path / "x.fa"
    p.write_bytes(FASTA)
    code, out, _ = _run(capsys, "data", "stats", str(p), "--no-progress")
    assert code == 0 and "records:    2" in out and "median 5" in out
    assert "identical sequences: 0\n" in out
    twice = tmp_path / "twice.fa"
    twice.write_text(">a strain 1\nMKVLA\n>b strain 2\nmkvla*\n")
    code, out, _ = _run(capsys, "data", "stats", str(twice), "--no-progress")
    line = next(x for x in out.splitlines() if x.startswith("identical sequences"))
    assert line.startswith("identical sequences: 1 record repeats an earlier record's sequence")
    assert "record 2 repeats record 1" in line and "data.split_by=cluster" in line


@pytest.mark.slow
def test_a_closed_pipe_on_stdout_is_no_traceback(tmp_path):
    """`protein-performer ... | head`: the reader gone before the result is printed."""
    p = tmp_path / "x.fa"
    p.write_bytes(FASTA)
    cmd = [
        sys.executable,
        "-m",
        "protein_performer.cli.main",
        "data",
        "stats",
        str(p),
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # long before the child (importing torch) writes anything
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (None, "no such file"),
        (b"", "empty file"),
        (b"MKV\n", "does not start with '>'"),
        (b">a\nM\xffK\n", "not UTF-8"),
        (b"# STOCKHOLM 1.0\na MK-V\n//\n", "write it as aligned FASTA (--strip-gaps reads it)"),
    ],
)
def test_bad_input_is_one_line_without_traceback(tmp_path, capsys, content, expect):
    p = tmp_path / "bad.fa"
    if content is not None:
        p.write_bytes(content)
    code, out, err = _run(capsys, "data", "stats", str(p), "--no-progress")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {p}") and expect in err
    assert "Traceback" not in err


def test_a_record_with_no_sequence_is_counted_by_stats_and_judged_by_the_invalid_policy(
    tmp_path, capsys
):
    p = tmp_path / "e.fa"
    p.write_bytes(b">a\n>b\nMKVL\n>c\nMK*\n>d\nMKVLAG\n>e\n*\n")
    code, out, _ = _run(capsys, "data", "stats", str(p), "--no-progress")
    assert (
        code == 0 and "records:    5" in out and "records without residues: 2 (no sequence" in out
    )
    assert "drop them with --invalid skip)" in out
    assert "identical sequences: 0" in out  # two empty records are not copies of each other
    # lengths 0, 4, 2, 6, 0: numpy's median 2, the nearest-rank p50 2
    assert "min 0  median 2  max 6" in out and "p50=2 " in out
    code, _, err = _run(capsys, "data", "preprocess", str(p), str(tmp_path / "o"), "--no-progress")
    assert code == 2 and err.count("\n") == 1
    assert "record 1 (a): header has no sequence (--invalid skip drops such records)" in err
    assert not (tmp_path / "o").exists()
    code, out, _ = _run(capsys, "data", "preprocess", str(p), str(tmp_path / "o"),
                        "--invalid", "skip", "--no-progress")  # fmt: skip
    assert code == 0 and "skipped (invalid or empty) 2," in out


def test_preprocess_cli_and_errors(tmp_path, capsys):
    p = tmp_path / "in.fa"
    p.write_bytes(FASTA + b">C\nMK-V\n")
    out_dir = tmp_path / "out"
    code, _, err = _run(capsys, "data", "preprocess", str(p), str(out_dir), "--no-progress")
    assert code == 2 and "record 3 (C): invalid residue '-' at position 3" in err
    assert not out_dir.exists()
    code, out, _ = _run(
        capsys,
        "data",
        "preprocess",
        str(p),
        str(out_dir),
        "--invalid",
        "skip",
        "--fractions",
        "1,0,0",
        "--no-progress",
    )
    assert code == 0 and "train" in out
    man = json.loads((out_dir / "manifest.json").read_text())
    assert man["counts"]["skipped_invalid"] == 1 and man["splits"]["train"]["records"] == 2
    code, _, err = _run(
        capsys,
        "data",
        "preprocess",
        str(p),
        str(tmp_path / "o2"),
        "--fractions",
        "0.5,0.6,0",
        "--no-progress",
    )
    assert code == 2 and "sum to 1" in err and err.count("\n") == 1


@pytest.mark.slow
def test_console_script_debug_shows_traceback(tmp_path):
    exe = shutil.which("protein-performer") or str(
        __import__("pathlib").Path(sys.executable).with_name("protein-performer")
    )
    missing = str(tmp_path / "missing.fa")
    r = subprocess.run([exe, "data", "stats", missing], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == f"error: {missing}: no such file"
    r = subprocess.run([exe, "--debug", "data", "stats", missing], capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" in r.stderr and "DataError" in r.stderr


def test_simulate_cli_is_deterministic(tmp_path, capsys):
    a, b = tmp_path / "a.fa", tmp_path / "b.fa"
    for p in (a, b):
        code, out, _ = _run(
            capsys,
            "data",
            "simulate",
            str(p),
            "--families",
            "3",
            "--min-members",
            "2",
            "--max-members",
            "3",
            "--seed",
            "7",
            "--no-progress",
        )
        assert code == 0 and "3 families" in out
    assert a.read_bytes() == b.read_bytes() and a.read_bytes().startswith(b">UniRef50_SIMF")
    code, _, err = _run(
        capsys,
        "data",
        "simulate",
        str(tmp_path / "c.fa"),
        "--min-members",
        "5",
        "--max-members",
        "2",
        "--no-progress",
    )
    assert code == 2 and err.count("\n") == 1


def test_simulate_members_table_is_checked_like_any_output(tmp_path, capsys):
    fasta, table = tmp_path / "f.fa", tmp_path / "f.tsv"
    args = ["data", "simulate", str(fasta), "--families", "2", "--min-members", "2",
            "--max-members", "2", "--no-progress", "--members", str(table)]  # fmt: skip
    code, _, _ = _run(capsys, *args)
    assert code == 0
    assert table.read_text().splitlines() == [
        "cluster_id\tmember_id",
        "SIMF00001\tUniRef50_SIMF00001M001",
        "SIMF00001\tUniRef50_SIMF00001M002",
        "SIMF00002\tUniRef50_SIMF00002M001",
        "SIMF00002\tUniRef50_SIMF00002M002",
    ]
    notes = tmp_path / "notes.tsv"
    notes.write_text("my own table\n")
    fasta.unlink()
    code, _, err = _run(capsys, *args[:-1], str(notes))
    assert code != 0 and "notes.tsv" in err
    assert notes.read_text() == "my own table\n" and not fasta.exists()
    code, _, err = _run(capsys, *args[:-1], str(fasta))
    assert code != 0 and "looks like a FASTA file, not the members table" in err
    plain = tmp_path / "plain"
    code, _, err = _run(capsys, "data", "simulate", str(plain), *args[3:-1], str(plain))
    assert code != 0 and "--members must name another file than OUT" in err
    assert not plain.exists()


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """The operating system refusing a write (here: no space left) is an error line like bad
    input, naming the file; the half-written shards are gone."""
    import errno

    from protein_performer.data import shards

    p = tmp_path / "x.fa"
    p.write_bytes(FASTA)

    def full(self, record_id, ids):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.dir / "tokens.bin"))

    monkeypatch.setattr(shards._SplitWriter, "add", full)
    out = tmp_path / "shards"
    code, _, err = _run(capsys, "data", "preprocess", str(p), str(out), "--no-progress")
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "tokens.bin: No space left on device" in err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["x.fa"]


def test_a_folder_without_write_permission_is_one_line(tmp_path, capsys, monkeypatch):
    """Named by the output the user gave, not by the hidden folder it is staged in."""
    from protein_performer.utils import outputs

    p = tmp_path / "x.fa"
    p.write_bytes(FASTA)

    def denied(prefix, dir):
        raise PermissionError(13, "Permission denied", f"{dir}/{prefix}abc")

    monkeypatch.setattr(outputs.tempfile, "mkdtemp", denied)
    code, _, err = _run(capsys, "data", "preprocess", str(p), str(tmp_path / "s" / "t"))
    assert code == 2 and err == f"error: {tmp_path}/s/t: cannot write here (Permission denied)\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["x.fa"]  # s/ made, then removed


def test_an_interrupted_download_says_how_to_resume(tmp_path, capsys, monkeypatch):
    from protein_performer.data import download as download_module

    out = tmp_path / "u.fasta.gz"

    def interrupted(url, path, **kwargs):
        (tmp_path / "u.fasta.gz.part").write_bytes(b"\x1f\x8b")
        raise KeyboardInterrupt

    monkeypatch.setattr(download_module, "download", interrupted)
    code, _, err = _run(capsys, "data", "download", "uniref50", str(out), "--no-progress")
    assert code == 130
    assert (
        err
        == f"{out}.part kept: the same command resumes it\ninterrupted (nothing is left half-written under an output's name)\n"
    )


@pytest.mark.parametrize(
    ("flags", "expect"),
    [
        (["--families", "0"], "error: simulate: --families must be in [1, 99999]\n"),
        (["--gamma-shape", "-1"], "error: simulate: --gamma-shape must be > 0 or 'none'\n"),
        (
            ["--min-members", "5", "--max-members", "3"],
            "error: simulate: need 1 <= --min-members <= --max-members\n",
        ),
    ],
)
def test_simulate_errors_name_the_flags(tmp_path, capsys, flags, expect):
    code, _, err = _run(capsys, "data", "simulate", str(tmp_path / "s.fa"), *flags)
    assert code == 2 and err == expect and not (tmp_path / "s.fa").exists()


def test_a_data_command_given_key_value_says_it_takes_plain_paths(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.fa").write_text(">a\nMKV\n")
    code = main(["data", "stats", "fasta=x.fa", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "fasta=x.fa: no such file (x.fa exists: the data commands take plain paths" in err


def test_ctrl_c_while_the_command_starts_is_one_line(monkeypatch, capsys):
    """The CLI's imports take seconds: a Ctrl-C during them ends in the interrupt line, not
    an import traceback (the console script imports the CLI inside the handling)."""
    import importlib.abc

    from protein_performer.entry import main as entry_main

    class Interrupting(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "protein_performer.cli.main":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "protein_performer.cli.main")
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    assert entry_main() == 130
    err = capsys.readouterr().err
    assert err == "interrupted (while starting)\n", err


def test_preprocess_warns_of_empty_splits_only_where_a_fraction_asked_for_records(tmp_path, capsys):
    from tests.training.helpers import write_fasta

    fasta = write_fasta(tmp_path / "p.fasta", n=40)
    code, _, err = _run(
        capsys, "data", "preprocess", str(fasta), str(tmp_path / "a"), "--no-progress",
        "--fractions", "0,0,1",
    )  # fmt: skip
    assert code == 0 and "too few records" not in err
    assert "note: no train split (its fraction is 0)" in err
    one = tmp_path / "one.fasta"
    one.write_text(">a\nMKVLA\n")
    code, _, err = _run(
        capsys, "data", "preprocess", str(one), str(tmp_path / "b"), "--no-progress"
    )
    assert code == 0 and "the val and test splits are empty" in err and "too few records" in err
    assert "no train split" not in err


def test_an_unknown_option_gets_the_subcommands_usage(tmp_path, capsys):
    p = tmp_path / "x.fa"
    p.write_bytes(FASTA)
    with pytest.raises(SystemExit) as exit_:
        main(["data", "stats", "--min-len", "3", str(p)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: protein-performer data stats")
    assert "unrecognized arguments: --min-len" in err
    with pytest.raises(SystemExit):
        main(["data", "download", "uniref50", str(tmp_path / "o"), "extra"])
    assert capsys.readouterr().err.startswith("usage: protein-performer data download")


def test_a_missing_file_is_worded_alike_by_every_command(tmp_path, capsys):
    missing = tmp_path / "nope.fa"
    assert main(["data", "stats", str(missing)]) == 2
    stats_err = capsys.readouterr().err
    assert main(["evaluate", "checkpoint=default", f"fasta={missing}"]) == 2
    eval_err = capsys.readouterr().err
    assert main(["evaluate", f"checkpoint={tmp_path / 'no.ckpt'}", f"fasta={missing}"]) == 2
    ckpt_err = capsys.readouterr().err
    for err in (stats_err, eval_err, ckpt_err):
        assert "no such file" in err and "not found" not in err, err


def test_only_a_ddp_child_runs_the_job_its_parent_left(monkeypatch):
    import json

    from protein_performer.cli.compose import DDP_JOB_ENV, ddp_child_job

    job = {"command": "train", "overrides": ["trainer.max_steps=2"]}
    monkeypatch.delenv(DDP_JOB_ENV, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert ddp_child_job() is None  # no job left: a plain run
    monkeypatch.setenv(DDP_JOB_ENV, json.dumps(job))
    assert ddp_child_job() == job  # a child (rank 1) runs it
    for parent in ("0", None):  # the parent (rank 0, or unset) composes its own
        if parent is None:
            monkeypatch.delenv("LOCAL_RANK")
        else:
            monkeypatch.setenv("LOCAL_RANK", parent)
        assert ddp_child_job() is None
