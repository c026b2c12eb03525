"""End-to-end: ``run_hydra("train"/"evaluate", ...)`` and the library ``train``/``evaluate``."""

from __future__ import annotations

import csv
import json
import math
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from protein_performer.cli.compose import compose_job
from protein_performer.cli.hydra import run_hydra
from protein_performer.cli.overrides import expand_overrides
from protein_performer.config.schema import EvalConfig
from protein_performer.data.alphabet import default_alphabet
from protein_performer.errors import ConfigError, DataError
from protein_performer.evaluation.evaluate import evaluate
from protein_performer.training.run import train
from tests.training.helpers import tiny_config, tiny_overrides, train_losses, write_fasta


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_train_command_runs_end_to_end(tiny_fasta, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert run_hydra("train", tiny_overrides(tiny_fasta, run_dir)) == 0
    out, err = capsys.readouterr()
    assert "all positions" in out and "tokens/s" in out
    assert re.search(r"<mask> perplexity [\d.]+  vs unigram [\d.]+, ratio [\d.]+", out), out
    data = next(line for line in err.splitlines() if line.startswith("data: "))
    found = re.fullmatch(
        r"data: train (\d+) proteins \([\d,]+ residues\), val (\d+) .*; "
        r"split by record \(0\.8, 0\.2, 0\)",
        data,
    )
    assert found and int(found[1]) + int(found[2]) == 80  # write_fasta's records, all read
    # (tiny_overrides: 4 steps, validation every 2) the final validation is said too
    assert "training: 4 steps, validation every 2 and at the end, last.ckpt" in err
    best = run_dir / "checkpoints" / "best.ckpt"
    last = run_dir / "checkpoints" / "last.ckpt"
    assert f"best checkpoint {best}" in out
    assert best.is_file() and last.is_file()
    assert (run_dir / "config.yaml").read_text().count("attention: performer_relu") == 1
    assert (run_dir / "overrides.yaml").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 4
    assert 0.0 <= summary["val_accuracy"] <= 1.0
    assert summary["tokens_per_s"] > 0
    rows = _rows(run_dir / "metrics.csv")
    val_steps = [int(r["step"]) for r in rows if r.get("val/perplexity")]
    assert val_steps == [1, 3]  # after steps 2 and 4 (Lightning logs 0-based steps)
    # it learns: clearly better than uniform predictions over the vocabulary (perplexity =
    # vocabulary size, 31) and better at the second validation than at the first
    val_ppl = [float(r["val/perplexity"]) for r in rows if r.get("val/perplexity")]
    assert val_ppl[-1] == pytest.approx(summary["val_perplexity"])
    assert 1.0 < summary["val_perplexity"] < 0.9 * len(default_alphabet())
    assert val_ppl[1] < val_ppl[0]
    assert len(train_losses(run_dir)) == 4
    # the checkpoint is safe to load and evaluate reproduces the logged val perplexity style
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert ckpt["protein_performer"]["model"]["attention"] == "performer_relu"
    assert ckpt["global_step"] == 4


def test_train_json_and_evaluate_json(tiny_fasta, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert run_hydra("train", [*tiny_overrides(tiny_fasta, run_dir), "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert len(out) == 1  # progress and Lightning output went to stderr
    ckpt = summary["last_checkpoint"]
    heldout = write_fasta(tmp_path / "heldout.fasta", n=30, seed=5)
    args = [f"checkpoint={ckpt}", f"fasta={heldout}", "--json"]
    assert run_hydra("evaluate", args) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["sequences"] == 30
    assert first["perplexity"] == pytest.approx(2.718281828 ** first["loss"])
    # the same numbers split by what the input showed (BERT 80/10/10)
    parts = first["by_input"]
    assert list(parts) == ["mask", "random", "unchanged"]
    assert sum(p["predicted_tokens"] for p in parts.values()) == first["predicted_tokens"]
    mean_loss = sum(p["loss"] * p["predicted_tokens"] for p in parts.values())
    assert mean_loss / first["predicted_tokens"] == pytest.approx(first["loss"])
    assert 0.7 < parts["mask"]["predicted_tokens"] / first["predicted_tokens"] < 0.9
    # deterministic masking: the same numbers again; another seed gives other masks
    out_file = tmp_path / "eval.json"
    assert run_hydra("evaluate", [*args[:2], f"output={out_file}"]) == 0
    assert json.loads(out_file.read_text())["perplexity"] == first["perplexity"]
    assert "perplexity" in capsys.readouterr().out
    other = evaluate(EvalConfig(checkpoint=ckpt, fasta=str(heldout), seed=1))
    assert other.predicted_tokens != first["predicted_tokens"] or other.loss != first["loss"]
    # the same weights run with exact attention: a valid, different model
    exact = evaluate(EvalConfig(checkpoint=ckpt, fasta=str(heldout), attention="transformer"))
    assert exact.attention == "transformer" and exact.predicted_tokens == first["predicted_tokens"]
    assert exact.loss != pytest.approx(first["loss"], rel=1e-6)
    # evaluating the training run's val split reproduces its final validation exactly
    val = evaluate(
        EvalConfig(
            checkpoint=ckpt,
            fasta=[str(tiny_fasta)],
            split="val",
            split_fractions=[0.8, 0.2, 0.0],
            toks_per_batch=640,
        )
    )
    assert val.perplexity == pytest.approx(summary["val_perplexity"], rel=1e-5)
    assert val.accuracy == pytest.approx(summary["val_accuracy"], rel=1e-5)
    mask_ppl = val.by_input["mask"]["perplexity"]
    assert mask_ppl == pytest.approx(summary["val_perplexity_mask"], rel=1e-5)


def test_causal_run_has_no_mask_breakdown(tiny_fasta, tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = [*tiny_overrides(tiny_fasta, run_dir), "objective=causal", "trainer.max_steps=2"]
    assert run_hydra("train", [*argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["val_perplexity"] is not None and summary["val_perplexity_mask"] is None
    # the training summary's baseline is evaluate's on the run's val split: the same targets
    val = evaluate(
        EvalConfig(
            checkpoint=summary["last_checkpoint"],
            fasta=[str(tiny_fasta)],
            split="val",
            split_fractions=[0.8, 0.2, 0.0],
            toks_per_batch=640,
        )
    )
    assert val.perplexity == pytest.approx(summary["val_perplexity"], rel=1e-5)
    uni = summary["val_unigram_perplexity"]
    assert uni == pytest.approx(val.unigram["perplexity"], rel=1e-6)  # logged as float32
    heldout = write_fasta(tmp_path / "heldout.fasta", n=10, seed=6)
    result = evaluate(EvalConfig(checkpoint=summary["last_checkpoint"], fasta=str(heldout)))
    assert result.objective == "causal" and result.by_input is None
    again = evaluate(
        EvalConfig(checkpoint=summary["last_checkpoint"], fasta=str(heldout), mask_prob=0.3)
    )
    assert again.perplexity == result.perplexity  # nothing is masked: said, not applied
    assert "mask_prob has no effect on a causal checkpoint" in again.format()
    assert "by input" not in result.format()
    # the baseline predicts <eos> too (at its rate among the targets): finite, and near the
    # model's after two steps, not infinite as with residue frequencies alone
    u = result.unigram
    assert math.isfinite(u["perplexity"]) and "<eos>" in u["from"]
    assert 0.5 < result.perplexity / u["perplexity"] < 2.0


def test_causal_unigram_sums_equal_a_direct_sum():
    from protein_performer.model.metrics import causal_unigram_sums, unigram_log_probs

    alphabet = default_alphabet()
    rng = np.random.default_rng(0)
    counts = np.zeros(len(alphabet))
    counts[[alphabet.index(a) for a in "ACDEFGHIKLMNPQRSTVWY"]] = rng.integers(1, 50, 20)
    targets = [alphabet.index(a) for a in "MKTAAYIAK"] + [alphabet.eos_idx] * 3
    hist = torch.bincount(torch.tensor(targets), minlength=len(alphabet))
    (nll, n, correct), where = causal_unigram_sums(hist, counts, alphabet, "training data")
    residue_logp = unigram_log_probs(counts, alphabet).double()
    expected = sum(
        -math.log(3 / 12) if t == alphabet.eos_idx else -(residue_logp[t].item() + math.log(9 / 12))
        for t in targets
    )
    assert n == 12 and nll.item() == pytest.approx(expected, rel=1e-12)
    assert correct == 3  # <eos> (3/12) is likelier than any one residue here
    assert where == "training data residue and target <eos>/<sep>"


def test_multirun_sweeps_the_three_attentions(tiny_fasta, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    overrides = [o for o in tiny_overrides(tiny_fasta, tmp_path / "x") if "model=" not in o[:6]]
    overrides = [o for o in overrides if not o.startswith("hydra.run.dir")]
    argv = [
        "-m",
        "model=performer_relu,performer_softmax,transformer",
        *overrides,
        "trainer.max_steps=2",
        f"hydra.sweep.dir={sweep}",
    ]
    assert run_hydra("train", argv) == 0
    kinds = [
        json.loads((sweep / str(i) / "summary.json").read_text())["attention"] for i in range(3)
    ]
    assert kinds == ["performer_relu", "performer_softmax", "transformer"]
    assert capsys.readouterr().out.count("training finished") == 3


def test_an_interrupted_sweep_says_which_jobs_did_not_run(tmp_path, capsys, monkeypatch):
    import protein_performer.cli.hydra as hr

    ran = []

    def fake_run_train(job, run_dir, index, args, find_free=False):
        ran.append(index)
        return 130 if index == 1 else 0

    monkeypatch.setattr(hr, "run_train_job", fake_run_train)
    sweep = tmp_path / "my sweep"
    argv = ["-m", "optim.lr=1e-3,2e-3,3e-3,4e-3", f"hydra.sweep.dir={sweep}"]
    assert run_hydra("train", argv) == 130
    assert ran == [0, 1]
    err = capsys.readouterr().err
    assert "the sweep stopped at job 2 of 4; not run:" in err
    lines = [ln for ln in err.splitlines() if " train " in ln and "&&" in ln]
    assert len(lines) == 2 and "optim.lr=0.003" in lines[0] and "optim.lr=0.004" in lines[1]
    # each line runs as printed: its overrides compose the job the sweep would have run
    for line, lr, index in zip(lines, (3e-3, 4e-3), (2, 3), strict=True):
        words = shlex.split(line.split("&&", 1)[1])
        assert words[: len(hr.program())] == hr.program()  # as this program was run
        words = words[len(hr.program()) + 1 :]
        job = compose_job("train", expand_overrides(words, multirun=False)[0])
        assert job.config.optim.lr == lr and job.run_dir == f"{sweep}/{index}"


def test_a_failing_sweep_job_is_named_before_its_error(tmp_path, capsys, monkeypatch):
    import protein_performer.cli.hydra as hr

    def fake_run_train(job, run_dir, index, args, find_free=False):
        if index == 1:
            raise DataError("x.fa: record 3: invalid residue")
        return 0

    monkeypatch.setattr(hr, "run_train_job", fake_run_train)
    argv = ["-m", "seed=0,1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    with pytest.raises(DataError, match="invalid residue"):
        run_hydra("train", argv)
    err = capsys.readouterr().err
    assert re.search(r"\[2/3\] .*seed=1: failed \(1 finished before it\)", err)
    assert "the sweep stopped at job 2 of 3; not run:" in err and "seed=2" in err


def test_missing_data_file_is_a_clear_error(tmp_path):
    cfg = tiny_config(tmp_path / "nope.fasta")
    with pytest.raises(DataError, match=r"nope\.fasta: data\.files: no such file"):
        train(cfg, tmp_path / "run")


def test_files_next_to_shards_are_said_to_be_unread(tmp_path, caplog):
    from protein_performer.data.shards import preprocess

    fasta = write_fasta(tmp_path / "t.fasta", n=40)
    preprocess(fasta, tmp_path / "shards", fractions=[0.8, 0.2, 0.0], progress=False)
    cfg = tiny_config(fasta, max_steps=1, val_check_interval=1)
    cfg.data.shards = str(tmp_path / "shards")
    with caplog.at_level("WARNING"):
        train(cfg, tmp_path / "run")
    assert "data.shards is given: data.files is not read" in caplog.text


def test_resume_continues_exactly(tmp_path):
    """Losses after resuming from step N equal the uninterrupted run: dropout, FAVOR+ redraws,
    the data position inside an epoch and the epoch boundaries all continue exactly."""
    fasta = write_fasta(tmp_path / "t.fasta", n=40)
    cfg = tiny_config(fasta, max_steps=7, val_check_interval=7)
    cfg.model.redraw_interval = 2
    cfg.model.dropout = 0.1
    snap = ModelCheckpoint(
        dirpath=tmp_path / "snap",
        filename="s{step}",
        every_n_train_steps=1,
        save_top_k=-1,
        auto_insert_metric_name=False,
    )
    full = train(cfg, tmp_path / "full", callbacks=[snap])
    assert full.steps == 7
    a = train_losses(tmp_path / "full")
    epochs = [
        torch.load(tmp_path / "snap" / f"s{n}.ckpt", weights_only=True)["epoch"] for n in (2, 3, 6)
    ]
    assert epochs[0] == 0 and epochs[2] >= 1  # the runs below cross epoch boundaries
    for n in (2, 3):  # step 2 is inside the first epoch, step 3 ends it
        cfg.ckpt_path = str(tmp_path / "snap" / f"s{n}.ckpt")
        resumed = train(cfg, tmp_path / f"resumed{n}")
        assert resumed.steps == 7
        b = train_losses(tmp_path / f"resumed{n}")
        assert sorted(b) == list(range(n, 7))
        for step in b:
            assert b[step] == pytest.approx(a[step], rel=1e-6, abs=1e-7), (n, step)
        assert resumed.val_perplexity == pytest.approx(full.val_perplexity, rel=1e-6)


@pytest.mark.skipif(torch.cuda.is_available(), reason="FSDP is valid where there is a GPU")
def test_trainer_settings_lightning_rejects_are_one_line_errors(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta)
    cfg.trainer.devices = [0, 1]  # indices are for GPUs: Lightning refuses them on the CPU
    with pytest.raises(ConfigError, match=r"^trainer settings rejected by Lightning: .*devices"):
        train(cfg, tmp_path / "run")
    cfg.trainer.devices, cfg.trainer.strategy = 1, "fsdp"  # said before any work, in our words
    with pytest.raises(ConfigError, match=r"^trainer.strategy=fsdp runs on CUDA GPUs only"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_bad_output_locations_are_one_line_errors_before_any_work(tiny_fasta, tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cfg = tiny_config(tiny_fasta)
    with pytest.raises(
        DataError, match=r"a_file: run directory: an existing file .* is in the way"
    ):
        train(cfg, a_file)
    assert a_file.read_text() == "x"
    result = train(tiny_config(tiny_fasta, max_steps=2), tmp_path / "run")
    ckpt = result.last_checkpoint
    for output, problem in [
        (tmp_path, "output: an existing directory holding .* is in the way; expected a file name"),
        (a_file / "x.json", "output: .*a_file is a file, not a directory"),
    ]:
        with pytest.raises(DataError, match=problem) as err:
            evaluate(EvalConfig(checkpoint=ckpt, fasta=str(tiny_fasta), output=str(output)))
        assert "\n" not in str(err.value)
    with pytest.raises(DataError, match=r"fasta: is a directory, expected a file"):
        evaluate(EvalConfig(checkpoint=ckpt, fasta=str(tmp_path)))


def test_outputs_are_readable_like_plain_files(tiny_fasta, tmp_path):
    """Atomic writes go through mkstemp (mode 0600); the results get the umask's mode."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        result = train(tiny_config(tiny_fasta, max_steps=2), tmp_path / "run")
        out = tmp_path / "eval.json"
        evaluate(
            EvalConfig(checkpoint=result.last_checkpoint, fasta=str(tiny_fasta), output=str(out))
        )
    finally:
        os.umask(old)
    for path in (tmp_path / "run" / "config.yaml", tmp_path / "run" / "summary.json", out):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_evaluate_reports_skipped_records_and_checks_its_settings(tiny_fasta, tmp_path, caplog):
    result = train(tiny_config(tiny_fasta, max_steps=2), tmp_path / "run")
    ckpt = result.last_checkpoint
    mixed = tmp_path / "mixed.fasta"
    mixed.write_text(">a\nACDEFGHIKLMNPQ12\n>b\nACDEFGHIKLMNPQRST\n")
    out = evaluate(EvalConfig(checkpoint=ckpt, fasta=str(mixed), invalid="skip"))
    assert out.sequences == 1 and out.input_changes.startswith("1 of 2 records skipped")
    assert "input: 1 of 2 records skipped" in out.format()
    assert " in 1 sequence; " in out.format()  # one: singular
    # a handful of positions: said to be noisy, next to the numbers
    assert out.predicted_tokens < 100
    assert f"warning: {out.predicted_tokens} predicted positions only" in out.format()
    full = evaluate(EvalConfig(checkpoint=ckpt, fasta=str(tiny_fasta)))
    assert full.predicted_tokens >= 100 and "warning" not in full.format()
    assert "invalid=skip: 1 of 2 records skipped" in caplog.text
    bad = tmp_path / "bad.fasta"
    bad.write_text(">a\nAC1\n>b\nAC2\n")
    with pytest.raises(DataError, match=r"bad\.fasta: no usable records \(2 of 2 records skipped"):
        evaluate(EvalConfig(checkpoint=ckpt, fasta=str(bad), invalid="skip"))
    one = tmp_path / "one.fasta"  # one protein: the hash split puts it in train
    one.write_text(">a\nACDEFGHIKLMNPQRST\n")
    with pytest.raises(DataError, match=r"one\.fasta: the test split is empty$"):
        evaluate(EvalConfig(checkpoint=ckpt, fasta=str(one), split="test"))
    bad.write_text(">a\nAC1\n>b\n")  # one of each kind skipped: still none usable
    with pytest.raises(DataError, match=r"bad\.fasta: no usable records \("):
        evaluate(EvalConfig(checkpoint=ckpt, fasta=str(bad), invalid="skip"))
    with pytest.raises(ConfigError, match=r"^max_records must be a positive number"):
        evaluate(EvalConfig(checkpoint=ckpt, fasta=str(mixed), max_records=0))
    with pytest.raises(
        ConfigError, match=r"max_length=128 exceeds the checkpoint's model\.max_len=64"
    ):
        evaluate(EvalConfig(checkpoint=ckpt, fasta=str(tiny_fasta), max_length=128))


def test_a_run_that_fails_on_its_data_leaves_no_run_directory(tiny_fasta, tmp_path):
    bad = tmp_path / "bad.fasta"
    bad.write_text(">a\nAC1\n")
    run_dir = tmp_path / "run"
    overrides = [o for o in tiny_overrides(tiny_fasta, run_dir) if not o.startswith("data.files")]
    with pytest.raises(DataError, match="invalid residue '1'"):
        run_hydra("train", [*overrides, f"data.files=['{bad}']"])
    assert not run_dir.exists()
    run_dir.mkdir()  # a directory the user made is left alone
    (run_dir / "notes.txt").write_text("mine")
    with pytest.raises(DataError):
        run_hydra("train", [*overrides, f"data.files=['{bad}']"])
    assert (run_dir / "notes.txt").exists()
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]
    empty = tmp_path / "mine"  # an empty directory the user made stays too, emptied again
    empty.mkdir()
    overrides = [o for o in tiny_overrides(tiny_fasta, empty) if not o.startswith("data.files")]
    with pytest.raises(DataError):
        run_hydra("train", [*overrides, f"data.files=['{bad}']"])
    assert empty.is_dir() and not any(empty.iterdir())
    cfg = tiny_config(tiny_fasta)
    cfg.data.files = [str(bad)]
    with pytest.raises(DataError):
        train(cfg, empty)  # the library path as well
    assert empty.is_dir() and not any(empty.iterdir())
    with pytest.raises(DataError):
        train(cfg, tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_a_data_file_listed_twice_is_refused(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta)
    cfg.data.files = [str(tiny_fasta), str(tiny_fasta)]
    with pytest.raises(
        ConfigError, match=r"data\.files: .*tiny\.fasta is already listed in data\.files"
    ):
        train(cfg, tmp_path / "run")
    cfg = tiny_config(tiny_fasta)
    cfg.data.val_files = [str(tiny_fasta)]
    with pytest.raises(ConfigError, match=r"data\.val_files: .* already listed in data\.files"):
        train(cfg, tmp_path / "run")


def test_a_hybrid_is_named_as_one_by_train_and_evaluate(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, max_steps=1)
    cfg.model.exact_layers = [-1]
    result = train(cfg, tmp_path / "run")
    assert result.attention == "performer_relu+exact[-1]"
    ev = evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(tiny_fasta)))
    assert ev.attention == "performer_relu+exact[-1]" and "performer_relu+exact[-1]" in ev.format()


def test_a_gpu_run_without_a_gpu_stops_before_reading_data(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = tiny_config(tmp_path / "not_read.fasta")  # missing: the accelerator is checked first
    cfg.trainer.accelerator = "gpu"
    with pytest.raises(ConfigError, match=r"trainer\.accelerator=gpu but no CUDA GPU is available"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_resume_and_init_from_together_are_refused(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta)
    cfg.ckpt_path, cfg.init_from = "a.ckpt", "b.ckpt"
    with pytest.raises(ConfigError, match="init_from= and ckpt_path= both set"):
        train(cfg, tmp_path / "run")


def test_a_cli_resume_records_the_optimizer_settings_it_keeps(tiny_fasta, tmp_path, caplog):
    import yaml

    run_dir = tmp_path / "run"
    argv = [*tiny_overrides(tiny_fasta, run_dir), "trainer.max_steps=2"]
    assert run_hydra("train", argv) == 0
    lr = yaml.safe_load((run_dir / "config.yaml").read_text())["optim"]["lr"]
    resume = [f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", "trainer.max_steps=3"]
    with caplog.at_level("WARNING"):
        assert run_hydra("train", [*argv, *resume, "optim.lr=0.5"]) == 0
    assert caplog.text.count("the resumed run keeps the checkpoint's optimizer") == 1
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["optim"]["lr"] == lr


@pytest.mark.slow
def test_optimizer_settings_changed_on_resume_are_said_to_be_kept(tiny_fasta, tmp_path, caplog):
    cfg = tiny_config(tiny_fasta, max_steps=2)
    first = train(cfg, tmp_path / "run")
    cfg.ckpt_path, cfg.trainer.max_steps = first.last_checkpoint, 3
    lr = cfg.optim.lr
    cfg.optim.lr = 0.5
    with caplog.at_level("WARNING"):
        train(cfg, tmp_path / "run")
    assert (
        f"optim.lr=0.5: the resumed run keeps the checkpoint's optimizer (lr={lr})" in caplog.text
    )
    import yaml

    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert written["optim"]["lr"] == lr  # what trained, not what was asked
    caplog.clear()
    cfg.optim.lr, cfg.ckpt_path, cfg.trainer.max_steps = (
        lr,
        str(tmp_path / "run/checkpoints/last.ckpt"),
        4,
    )
    with caplog.at_level("WARNING"):
        train(cfg, tmp_path / "run")
    assert "keeps the checkpoint's optimizer" not in caplog.text


def test_a_resume_into_an_unwritable_checkpoints_folder_is_refused_before_training(
    tmp_path, monkeypatch
):
    """Otherwise the resumed steps are trained and lost when their checkpoint is saved."""
    import protein_performer.utils.atomic as atomic
    from protein_performer.errors import DataError
    from protein_performer.training.run_dir import check_run_dir

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    real = atomic.make_temp_file

    def refuse(path):
        if path.parent.name == "checkpoints":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(atomic, "make_temp_file", refuse)
    last = str(run / "checkpoints" / "last.ckpt")
    with pytest.raises(DataError, match="resuming the run: cannot write here"):
        check_run_dir(run, ckpt_path=last)
    monkeypatch.setattr(atomic, "make_temp_file", real)
    assert check_run_dir(run, ckpt_path=last) == run
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.ckpt"]


def test_train_gives_the_callers_rngs_environment_and_logging_back(tiny_fasta, tmp_path):
    """A library user's own experiment goes on as it was (Lightning's seed_everything reseeds
    the global RNGs and sets PL_* variables for data workers)."""
    import logging
    import os
    import random

    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    os.environ.pop("PL_GLOBAL_SEED", None)
    os.environ["PL_SEED_WORKERS"] = "mine"
    logger = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    filters = list(logger.filters)
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    cfg = tiny_config(tiny_fasta, max_steps=2)
    cfg.seed = 123
    train(cfg, tmp_path / "run")
    assert (random.random(), np.random.rand()) == expected[:2]
    assert torch.equal(torch.rand(1), expected[2])
    assert "PL_GLOBAL_SEED" not in os.environ and os.environ["PL_SEED_WORKERS"] == "mine"
    os.environ.pop("PL_SEED_WORKERS")
    assert logger.filters == filters


def test_train_takes_a_dict_and_refuses_what_is_no_config(tiny_fasta, tmp_path):
    from protein_performer.config.schema import DataConfig, TrainConfig

    cfg = tiny_config(tiny_fasta, max_steps=1)
    as_dict = {k: getattr(cfg, k) for k in ("model", "data", "optim", "trainer")}
    assert train(as_dict, tmp_path / "run").steps == 1
    with pytest.raises(TypeError, match="cfg must be a TrainConfig, got list"):
        train([cfg], tmp_path / "other")
    with pytest.raises(ConfigError, match=r"data\.files must be a FASTA path or a list"):
        TrainConfig(data={"files": 5})
    with pytest.raises(ConfigError, match=r"data\.val_files must be a FASTA path or a list"):
        DataConfig(val_files=[str(tiny_fasta), 3])
    assert DataConfig(files=(p for p in [str(tiny_fasta)])).files == [str(tiny_fasta)]
    cfg.seed = np.int64(3)  # a sweep over np.arange(...): saved as a plain int
    assert train(cfg, tmp_path / "seeded").steps == 1
    assert "seed: 3" in (tmp_path / "seeded" / "config.yaml").read_text()


def test_evaluate_runs_the_model_without_gradients(tmp_path, monkeypatch) -> None:
    """(A helper put between the decorator and evaluate once took its inference mode: every
    evaluation built the autograd graph of every batch.)"""
    from protein_performer.evaluation import evaluate as run_module

    fasta = write_fasta(tmp_path / "t.fasta", n=30)
    result = train(tiny_config(fasta, max_steps=1), tmp_path / "run")
    seen = []
    loader = run_module.load_model

    def load_model(*args, **kwargs):
        model, meta = loader(*args, **kwargs)
        model.register_forward_hook(lambda *_: seen.append(torch.is_grad_enabled()))
        return model, meta

    monkeypatch.setattr(run_module, "load_model", load_model)
    evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), toks_per_batch=640))
    assert seen and not any(seen)


def test_evaluate_split_alone_reads_the_training_runs_own_files(tmp_path) -> None:
    fasta = write_fasta(tmp_path / "t.fasta", n=60)
    cfg = tiny_config(fasta, max_steps=2)
    run = train(cfg, tmp_path / "run")
    alone = evaluate(EvalConfig(checkpoint=run.last_checkpoint, split="val", toks_per_batch=640))
    given = evaluate(
        EvalConfig(
            checkpoint=run.last_checkpoint, fasta=str(fasta), split="val", toks_per_batch=640
        )
    )
    assert alone.perplexity == pytest.approx(given.perplexity, rel=1e-9)
    assert (alone.sequences, alone.predicted_tokens) == (given.sequences, given.predicted_tokens)
    with pytest.raises(ConfigError, match=r"fasta=\.\.\. is required"):
        evaluate(EvalConfig(checkpoint=run.last_checkpoint))
    fasta.rename(tmp_path / "moved.fasta")
    with pytest.raises(DataError, match="the training run's file is not here"):
        evaluate(EvalConfig(checkpoint=run.last_checkpoint, split="val"))
    held = write_fasta(tmp_path / "h.fasta", n=20, seed=1)
    cfg = tiny_config(tmp_path / "moved.fasta", max_steps=1)
    cfg.data.val_files = [str(held)]
    other = train(cfg, tmp_path / "run2")
    with pytest.raises(ConfigError, match="records no files it split"):
        evaluate(EvalConfig(checkpoint=other.last_checkpoint, split="val"))


def test_a_favor_model_trains_in_bf16_true_with_its_projection_in_float32(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, "performer_softmax", max_steps=2, precision="bf16-true")
    result = train(cfg, tmp_path / "run")
    assert result.steps == 2 and result.val_perplexity is not None
    state = torch.load(result.last_checkpoint, weights_only=True)["state_dict"]
    dtypes = {k.rsplit(".", 1)[-1]: v.dtype for k, v in state.items()}
    assert dtypes["projection"] == torch.float32 and dtypes["weight"] == torch.bfloat16


def test_evaluate_perplexity_of_a_model_with_known_predictions(tmp_path, capsys):
    """A model whose every prediction is softmax(b) (its head's last LayerNorm zeroed: the
    logits are the head's bias b), b = 2 at K and W, 0 elsewhere, on proteins of K and W only:
    every target has probability e²/(2e² + 29) over the 31 tokens, whatever was masked, so the
    perplexity is (2e² + 29)/e² exactly, overall and for each kind of input (BERT 80/10/10)."""
    from protein_performer.model.checkpoints import save_model_checkpoint
    from protein_performer.model.config import ModelConfig
    from protein_performer.model.performer import ProteinLM

    alphabet = default_alphabet()
    torch.manual_seed(0)
    cfg = ModelConfig(attention="performer_relu", dim=16, depth=1, heads=2, ffn_dim=16,
                      max_len=64, nb_features=8)  # fmt: skip
    model = ProteinLM(cfg, len(alphabet), alphabet.pad_idx)
    with torch.no_grad():
        model.head.norm.weight.zero_()
        model.head.norm.bias.zero_()
        model.head.bias.zero_()
        model.head.bias[[alphabet.index("K"), alphabet.index("W")]] = 2.0
    save_model_checkpoint(tmp_path / "m.ckpt", model, alphabet, "mlm")
    rng = np.random.default_rng(0)
    (tmp_path / "kw.fasta").write_text(
        "".join(f">p{i}\n{''.join(rng.choice(list('KW'), 40))}\n" for i in range(30))
    )
    args = [f"checkpoint={tmp_path / 'm.ckpt'}", f"fasta={tmp_path / 'kw.fasta'}", "--json"]
    assert run_hydra("evaluate", args) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    e2 = math.exp(2.0)
    assert len(alphabet) == 31
    assert result["perplexity"] == pytest.approx((2 * e2 + 29) / e2, rel=1e-5)
    assert result["loss"] == pytest.approx(math.log((2 * e2 + 29) / e2), rel=1e-5)
    assert result["sequences"] == 30 and 0.1 * 1200 < result["predicted_tokens"] < 0.2 * 1200
    for part in result["by_input"].values():
        assert part["perplexity"] == pytest.approx((2 * e2 + 29) / e2, rel=1e-5)
    # ties go to the first of K and W: correct exactly at the targets that are K (about half)
    assert 0.3 < result["accuracy"] < 0.7
