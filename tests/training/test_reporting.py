"""What runs say: evaluate reports cropping (and crop=sliding scores every residue), a run
stopped by max_time says so, and a redirected log is quiet (no banners, tables or redraws)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from protein_performer.config.schema import EvalConfig
from protein_performer.evaluation.evaluate import evaluate
from protein_performer.training.run import train
from tests.training.helpers import tiny_config, tiny_overrides, write_fasta


def test_evaluate_reports_cropping_and_sliding_windows_cover_every_residue(tmp_path):
    fasta = write_fasta(tmp_path / "t.fasta", n=40)
    ckpt = train(tiny_config(fasta, max_steps=2), tmp_path / "run").last_checkpoint
    long = write_fasta(tmp_path / "long.fasta", n=6, seed=3, min_len=150, max_len=200)
    lengths = [len(line.strip()) for line in long.read_text().splitlines()[1::2]]
    base = {"checkpoint": ckpt, "fasta": str(long), "mask_prob": 0.5}
    cropped = evaluate(EvalConfig(**base))
    assert cropped.crop == "random" and cropped.cropped_records == 6 and cropped.sequences == 6
    assert cropped.residues_in_windows == pytest.approx(6 * 62 / sum(lengths))
    assert "cropped: 6 of 6 proteins are longer than max_length" in cropped.format()
    sliding = evaluate(EvalConfig(**base, crop="sliding"))
    assert sliding.sequences == 6 and sliding.residues_in_windows == 1.0
    assert sliding.windows == sum(-(-n // 62) for n in lengths)  # fewest windows of <= 62
    assert sliding.tokens == sum(lengths) + 2 * sliding.windows  # every residue, once
    assert "windows: 6 proteins" in sliding.format()
    short = evaluate(EvalConfig(checkpoint=ckpt, fasta=str(fasta)))
    assert short.cropped_records == 0 and "cropped" not in short.format()


@pytest.mark.slow
def test_a_run_stopped_by_max_time_says_so(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, max_steps=100000, max_time="00:00:00:02")
    result = train(cfg, tmp_path / "run")
    assert 0 < result.steps < 100000 and result.stopped_by == "max_time"
    assert f"{result.steps:,} of 100,000 steps" in result.format()
    assert "(stopped by max_time)" in result.format() and not result.interrupted
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stopped_by"] == "max_time" and summary["interrupted"] is False
    # the next job of a chain, resuming with the same budget, gets it afresh
    cfg.ckpt_path = result.last_checkpoint
    again = train(cfg, tmp_path / "run")
    # (a spent budget would stop it at its first check: a step at most; a loaded machine
    # trains few steps in 2 s)
    assert again.stopped_by == "max_time" and again.steps > result.steps + 1


@pytest.mark.slow
def test_a_redirected_log_is_quiet(tmp_path):
    fasta = write_fasta(tmp_path / "t.fasta", n=40)
    argv = [o for o in tiny_overrides(fasta, tmp_path / "run") if "progress_bar" not in o]
    r = subprocess.run(
        [sys.executable, "-m", "protein_performer.cli.main", "train", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "default"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    log = r.stdout + r.stderr
    for noise in ("GPU available", "TPU available", "| Name", "Epoch 0:", "\r", "Deprecat"):
        assert noise not in log, noise
    assert "0.02 M parameters" in r.stderr and "activations ≈" in r.stderr  # the run header
    assert "step 4/4 (100%)" in r.stderr  # one progress line, not redraws
    # the last line comes before the final validation: its val_ppl says which step it is from
    last = next(line for line in r.stderr.splitlines() if line.startswith("step 4/4"))
    assert re.search(r"val_ppl \d+\.\d+ \(step 2\)", last), last
    assert r.stdout.startswith("training finished: performer_relu (mlm), 4 of 4 steps")


def test_evaluate_reports_the_unigram_baseline_of_the_training_data(tmp_path):
    import numpy as np
    import torch

    from protein_performer.data.alphabet import default_alphabet
    from protein_performer.model.checkpoints import META_KEY

    fasta = write_fasta(tmp_path / "t.fasta", n=40)
    cfg = tiny_config(fasta, max_steps=2)
    result = train(cfg, tmp_path / "run")
    ckpt = torch.load(result.last_checkpoint, weights_only=True)
    counts = ckpt[META_KEY]["data"]["unigram_counts"]
    alphabet = default_alphabet()
    # the counts are those of the training split's residues
    from protein_performer.training.builders import build_datamodule

    dm = build_datamodule(cfg)
    dm.setup("fit")
    expected = np.bincount(np.asarray(dm.datasets["train"].source.tokens), minlength=len(alphabet))
    assert counts == expected.tolist()
    out = evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta)))
    assert out.unigram["from"] == "training data"
    assert out.unigram["perplexity"] > 1 and out.unigram["mask_perplexity"] > 1
    assert "unigram baseline (training data frequencies)" in out.format()
    # equal counts: the baseline is uniform over the residue letters, whatever the positions
    ckpt[META_KEY]["data"]["unigram_counts"] = [7] * len(alphabet)
    uniform = tmp_path / "uniform.ckpt"
    torch.save(ckpt, uniform)
    flat = evaluate(EvalConfig(checkpoint=str(uniform), fasta=str(fasta)))
    n_residues = sum(1 for t in alphabet.tokens if len(t) == 1)
    assert flat.unigram["perplexity"] == pytest.approx(n_residues, rel=1e-6)
    assert flat.unigram["mask_perplexity"] == pytest.approx(n_residues, rel=1e-6)
    # a checkpoint without counts (older runs) falls back to the evaluated data, and says so
    del ckpt[META_KEY]["data"]["unigram_counts"]
    torch.save(ckpt, tmp_path / "old.ckpt")
    old = evaluate(EvalConfig(checkpoint=str(tmp_path / "old.ckpt"), fasta=str(fasta)))
    assert old.unigram["from"] == "evaluated data"


def test_data_errors_come_before_anything_is_printed(tmp_path, capsys):
    from protein_performer.cli.hydra import run_hydra
    from protein_performer.errors import DataError

    fasta = write_fasta(tmp_path / "t.fasta", n=10)
    bad = tmp_path / "bad.fasta"
    bad.write_text(">a\nMKV1\n")
    overrides = [o for o in tiny_overrides(fasta, tmp_path / "run") if "data.files" not in o]
    with pytest.raises(DataError, match="invalid residue '1'"):
        run_hydra("train", [*overrides, f"data.files=['{bad}']"])
    out, err = capsys.readouterr()
    assert out == "" and err == ""  # no header, no banner before the error


def test_evaluate_counts_predicted_positions_that_hold_x(tmp_path):
    fasta = write_fasta(tmp_path / "t.fasta", n=40)
    ckpt = train(tiny_config(fasta, max_steps=2), tmp_path / "run").last_checkpoint
    with_x = tmp_path / "x.fasta"
    with_x.write_text(">a\n" + "MKVLX" * 40 + "\n>b\n" + "XXAKL" * 30 + "\n")
    ev = evaluate(EvalConfig(checkpoint=ckpt, fasta=str(with_x), seed=0))
    assert 0 < ev.nonstandard_targets < ev.predicted_tokens
    assert f"{ev.nonstandard_targets:,} of the predicted positions hold X" in ev.format()
    plain = evaluate(EvalConfig(checkpoint=ckpt, fasta=str(fasta), seed=0))
    assert plain.nonstandard_targets == 0 and "hold X" not in plain.format()


def test_throughput_is_timed_from_the_first_batch_in_hand(monkeypatch):
    """The data workers' start and a resume's fast-forward through the epoch are not
    training (a resume reported 2,167 tokens/s where the run trained at 19,758)."""
    from protein_performer.training import callbacks

    now = [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])

    class Module:
        last_batch_tokens = 500

        def log(self, *args, **kwargs) -> None:
            pass

    t = callbacks.TokenThroughput()
    t.on_train_start(None, Module())
    now[0] = 100.0  # workers started, the epoch fast-forwarded: the first batch in hand
    t.on_train_batch_start(None, Module(), None, 0)
    now[0] = 101.0  # one step
    t.on_train_batch_end(None, Module(), None, None, 0)
    assert t.tokens_per_s == 500.0


def test_a_busy_machine_gets_fewer_threads_and_is_told(monkeypatch):
    from protein_performer.utils import devices

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(devices, "usable_cpus", lambda: 4)
    monkeypatch.setattr(devices, "busy_cpus", lambda: 2.6)
    count, why = devices.choose_threads()
    assert count == 1 and why == "of 4 CPUs: the machine is busy, 2.6 CPUs in use"
    monkeypatch.setattr(devices, "busy_cpus", lambda: 0.3)
    assert devices.choose_threads() == (4, None)  # idle: every CPU
    monkeypatch.setattr(devices, "busy_cpus", lambda: 9.0)
    assert devices.choose_threads()[0] == 1  # never none
    monkeypatch.setattr(devices, "busy_cpus", lambda: None)  # nothing to read: every CPU
    assert devices.choose_threads() == (4, None)
    assert devices.choose_threads(3) == (3, None)  # trainer.threads wins
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert devices.choose_threads() == (2, "OMP_NUM_THREADS")


def test_the_header_names_the_threads_and_the_time_budget(tiny_fasta, tmp_path, capsys):
    import torch

    before = torch.get_num_threads()
    try:
        cfg = tiny_config(tiny_fasta, max_steps=2, max_time="00:00:08:00")
        cfg.trainer.threads = 1
        train(cfg, tmp_path / "run")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    err = capsys.readouterr().err
    assert "training: 2 steps or 8 min 00 s (trainer.max_time), whichever comes first" in err
    assert "\nthreads: 1\n" in err


def test_the_eta_starts_after_the_first_step_and_respects_max_time():
    from protein_performer.training.progress_bar import StepProgressBar

    bar = StepProgressBar(max_seconds=600)
    bar._t0, bar._step0 = 0.0, 0
    bar._t1, bar._step1 = 300.0, 1  # a first step of 5 min (a kernel build, first batches)
    assert bar.rate_and_eta(300.0, 1, 500) == (0.0, "")  # no rate from one step
    rate, eta = bar.rate_and_eta(310.0, 11, 500)  # then 1 step/s
    assert rate == pytest.approx(1.0) and eta == ", ETA 4 min 50 s (max_time; 489 steps left)"
    bar.max_seconds = None
    assert bar.rate_and_eta(310.0, 11, 500)[1] == ", ETA 8 min 09 s"  # not "7 h"


def test_busy_cpus_reads_the_machines_idle_share(monkeypatch, tmp_path):
    import builtins

    from protein_performer.utils import devices

    samples = iter(["cpu  100 0 100 800 0 0 0 0 0 0\n", "cpu  250 0 250 900 0 0 0 0 0 0\n"])
    real_open = builtins.open
    monkeypatch.setattr(
        builtins,
        "open",
        lambda path, *a, **k: (
            (tmp_path / "stat").open("w").write(next(samples)) and real_open(tmp_path / "stat")
            if path == "/proc/stat"
            else real_open(path, *a, **k)
        ),
    )
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 2)
    # 300 of 400 ticks busy over the interval: 0.75 of 2 CPUs
    assert devices.busy_cpus(0.0) == pytest.approx(1.5)


def _demo_result(**changes):
    from protein_performer.training.report import TrainResult

    fields = dict(
        run_dir="outputs/run", attention="performer_relu", objective="mlm", steps=500,
        val_perplexity=15.626, val_accuracy=0.08, val_loss=2.749, best_val_perplexity=15.626,
        tokens_per_s=5000.0, train_seconds=184.0, best_checkpoint="b.ckpt",
        last_checkpoint="l.ckpt", val_perplexity_mask=18.501, val_unigram_perplexity_mask=18.484,
        max_steps=500, val_step=500,
    )  # fmt: skip
    return TrainResult(**{**fields, **changes})


def test_the_summary_puts_mask_perplexity_and_its_baseline_before_the_all_positions_number():
    """The demo printed `val perplexity 15.626` above `<mask> only 18.501 (...; unigram
    18.484)`: at a glance, the model beat the baseline."""
    lines = _demo_result().format().splitlines()
    assert lines[1] == (
        "  <mask> perplexity 18.501  vs unigram 18.484, ratio 1.001 (residue frequencies)"
    )
    assert lines[2].startswith("  all positions     15.626  (best 15.626): <mask>, random and")
    assert not any(line.lstrip().startswith("val perplexity") for line in lines)
    # no unigram counts: the <mask> line alone; a causal model keeps its one perplexity line
    assert _demo_result(val_unigram_perplexity_mask=None).format().splitlines()[1] == (
        "  <mask> perplexity 18.501"
    )
    causal = _demo_result(
        objective="clm", val_perplexity_mask=None, val_unigram_perplexity_mask=None,
        val_unigram_perplexity=17.0,
    ).format().splitlines()  # fmt: skip
    assert causal[1] == "  val perplexity  15.626  (best 15.626); next-token, unigram 17.000"


def test_busy_cpus_counts_iowait_as_idle_and_guests_once(monkeypatch, tmp_path):
    """/proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice.
    A CPU waiting on I/O runs nothing (idle to other work); guest time is already in user."""
    import builtins

    from protein_performer.utils import devices

    # over the interval: user 150 (100 of it guest), system 50, idle 100, iowait 200, irq 20,
    # softirq 30, steal 50: 600 ticks, 300 of them idle or waiting: half of 4 CPUs busy
    samples = iter([
        "cpu  1000 10 500 8000 300 40 60 5 400 0\n",
        "cpu  1150 10 550 8100 500 60 90 55 500 0\n",
    ])  # fmt: skip
    real_open = builtins.open

    def fake_open(path, *a, **k):
        if path == "/proc/stat":
            (tmp_path / "stat").write_text(next(samples))
            return real_open(tmp_path / "stat")
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 4)
    assert devices.busy_cpus(0.0) == pytest.approx(2.0)


def test_the_data_line_says_a_validation_cut_to_its_first_batches(tmp_path):
    from protein_performer.training.builders import build_datamodule
    from protein_performer.training.report import run_data_line

    fasta = write_fasta(tmp_path / "t.fasta", n=40)
    cfg = tiny_config(fasta, max_steps=2)
    dm = build_datamodule(cfg)
    dm.setup("fit")
    assert "limit_val_batches" not in run_data_line(dm, cfg)
    cfg.trainer.limit_val_batches = 2
    line = run_data_line(dm, cfg)
    assert line.endswith(
        "\n  val: each validation reads its first 2 batches (trainer.limit_val_batches)"
    )
