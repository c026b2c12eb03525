"""What every benchmark script shares: option checks, device check, one-line errors."""

from __future__ import annotations

import argparse

import pytest
import torch

from tests.benchmark_scripts import load_benchmark


@pytest.mark.parametrize(
    ("script", "argv"),
    [
        ("attention_scaling.py", ["--lengths", "0"]),
        ("attention_scaling.py", ["--lengths", "-5"]),
        ("model_scaling.py", ["--lengths", "256", "0"]),
        ("model_scaling.py", ["--steps", "0"]),
        ("kernel_ab.py", ["--rev", "HEAD", "--lengths", "0"]),
        ("device_check.py", ["--length", "0"]),
        ("dilution.py", ["x.ckpt", "--fill", "-1"]),
        ("dilution.py", ["x.ckpt", "--proteins", "0"]),
    ],
)
def test_lengths_and_counts_below_one_are_refused_before_any_work(script, argv, capsys):
    with pytest.raises(SystemExit) as info:
        load_benchmark(script).main(argv)
    assert info.value.code == 2
    assert "must be >= " in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize(
    ("script", "json"),
    [("attention_scaling.py", True), ("model_scaling.py", True), ("device_check.py", False)],
)
def test_cuda_without_a_gpu_stops_at_once_with_one_line(script, json, capsys, tmp_path):
    argv = ["--device", "cuda", "--quick"] if json else ["--device", "cuda"]
    argv += ["--json", str(tmp_path / "x.json")] if json else []
    with pytest.raises(SystemExit) as info:
        load_benchmark(script).main(argv)
    assert info.value.code == 2
    assert "no CUDA device is available here (use --device cpu)" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_check_device_names_a_bad_device():
    common = load_benchmark("_common.py")
    parser = argparse.ArgumentParser()
    with pytest.raises(SystemExit):
        common.check_device(parser, "tpu")
    common.check_device(parser, "cpu")  # fine


def test_a_file_that_is_not_a_checkpoint_is_one_line(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint\n")
    code = load_benchmark("dilution.py").main(
        [str(text), "--quick", "--json", str(tmp_path / "d.json")]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines()[-1] == f"error: {text}: not a PyTorch checkpoint (a text file)"
    assert "Traceback" not in err
    assert not (tmp_path / "d.json").exists()


def test_dilution_names_runs_by_their_directory_else_their_file(tmp_path):
    run_name = load_benchmark("dilution.py").run_name
    assert run_name(tmp_path / "run7" / "checkpoints" / "last.ckpt") == "run7"
    assert run_name(tmp_path / "data" / "pretrained" / "performer_relu_14.ckpt") == (
        "performer_relu_14.ckpt"
    )


def test_approximation_without_performer_pytorch_says_what_to_install(monkeypatch, capsys):
    module = load_benchmark("approximation.py")
    real = module.importlib.util.find_spec
    monkeypatch.setattr(
        module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "performer_pytorch" else real(name, *a),
    )
    assert module.main(["--quick"]) == 2
    assert "pip install -c constraints.txt -e '.[bench]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("script", "argv", "flag"),
    [
        ("attention_scaling.py", ["--quick"], "--png"),
        ("model_scaling.py", ["--quick"], "--png"),
        ("favor_floor.py", [], "--json"),
        ("kernel_ab.py", ["--rev", "HEAD"], "--json"),
        ("dilution.py", ["x.ckpt", "--quick"], "--json"),
    ],
)
def test_an_existing_output_is_replaced_only_with_overwrite(script, argv, flag, tmp_path, capsys):
    """Before any work: a user's file (or an earlier run's results) is never replaced unasked,
    and a path into a folder that does not exist is a typo, not a folder to make."""
    mine = tmp_path / ("mine.png" if flag == "--png" else "mine.json")
    mine.write_text("my own results")
    paths = ["--json", str(tmp_path / "b.json")] if flag == "--png" else []
    with pytest.raises(SystemExit) as info:
        load_benchmark(script).main([*argv, *paths, flag, str(mine)])
    assert info.value.code == 2
    assert "exists already; add --overwrite to replace it" in capsys.readouterr().err
    assert mine.read_text() == "my own results"
    with pytest.raises(SystemExit):
        load_benchmark(script).main([*argv, "--json", str(tmp_path / "typo" / "b.json")])
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "typo").exists()


def test_overwrite_lets_an_existing_output_be_replaced(tmp_path):
    common = load_benchmark("_common.py")
    parser = argparse.ArgumentParser()
    mine = tmp_path / "x.json"
    mine.write_text("{}")
    common.check_outputs(parser, [mine, None], overwrite=True)  # no refusal
    missing_default = common.RESULTS / "never_made_here" / "x.json"
    with pytest.raises(SystemExit):
        common.check_outputs(parser, [missing_default], overwrite=False)  # a subfolder of it
