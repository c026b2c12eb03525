"""utils.paths / utils.numbers / utils.devices: what two rooms share, worded once."""

from __future__ import annotations

import os

import pytest
import torch

import protein_performer
from protein_performer.errors import ConfigError, DataError
from protein_performer.utils.devices import inference_autocast
from protein_performer.utils.numbers import number_text, same_number
from protein_performer.utils.paths import require_file


def test_require_file_names_the_setting_and_the_problem(tmp_path):
    good = tmp_path / "a.fasta"
    good.write_text(">a\nMK\n")
    require_file(good, "data.files")  # a readable file passes
    with pytest.raises(DataError, match=r"data\.files: no such file") as e:
        require_file(tmp_path / "missing.fasta", "data.files")
    assert str(tmp_path / "missing.fasta") in str(e.value)
    with pytest.raises(DataError, match=r"fasta: is a directory, expected a file"):
        require_file(tmp_path, "fasta")
    with pytest.raises(DataError, match=r"is a directory, expected a CSV") as e:
        require_file(tmp_path, expected="a CSV")
    assert ": :" not in str(e.value)  # no key: no empty prefix
    with pytest.raises(ConfigError, match=r"^context: an empty path"):
        require_file(" ", "context")
    with pytest.raises(DataError, match=r"a\.fasta exists: the data commands take plain paths"):
        require_file(f"x={good}", None)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
def test_require_file_refuses_an_unreadable_file(tmp_path):
    locked = tmp_path / "locked.fasta"
    locked.write_text(">a\nMK\n")
    locked.chmod(0)
    try:
        with pytest.raises(DataError, match="fasta: permission denied"):
            require_file(locked, "fasta")
    finally:
        locked.chmod(0o600)


def test_number_text_and_same_number():
    assert number_text(None, ".3f") == "n/a" and number_text(2.5, ".3f") == "2.500"
    assert number_text(-3e7, ".1f") == "-3e+07"
    assert same_number(0.1, 1e-1) and same_number(3, 3.0) and same_number([0.9, 0.1], [0.9, 0.1])
    assert not same_number(0.1, 0.1000001) and not same_number([1, 2], [1, 2, 3])
    assert same_number("record", "record") and not same_number("a", "b")


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_inference_autocast_is_fp32_on_the_cpu_and_bf16_or_fp16_on_a_gpu(monkeypatch):
    with inference_autocast(torch.device("cpu")):
        assert not torch.is_autocast_enabled()
    for native, dtype in ((True, torch.bfloat16), (False, torch.float16)):
        monkeypatch.setattr("protein_performer.utils.devices.bf16_native", lambda n=native: n)
        cast = inference_autocast(torch.device("cuda"))
        assert cast.fast_dtype == dtype and cast.device == "cuda"


def test_train_and_evaluate_are_reachable_from_the_package():
    from protein_performer.evaluation.evaluate import evaluate
    from protein_performer.training import evaluate as old_place
    from protein_performer.training.run import train

    assert protein_performer.train is train and protein_performer.evaluate is evaluate
    assert old_place is evaluate  # the old import path, kept for one release
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        protein_performer.nothing  # noqa: B018
