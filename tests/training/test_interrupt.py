"""Ctrl-C / SIGTERM while training: the step finishes, last.ckpt and summary.json are written,
the run resumes in its own directory with one metrics.csv; time-based checkpoints."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from protein_performer.training.run import train
from tests.training.helpers import tiny_config, tiny_overrides, train_losses, write_fasta


class UncaughtSigint(Exception):
    """SIGINT reached the handler that was in place before the run: the run did not take it."""


@pytest.fixture(autouse=True)
def _sigint_contained():
    """The SIGINTs these tests send themselves go to the run's handler; one the run fails to
    take (SIGINT left out of its stop signals, say) fails its test, where pytest's own handler
    would have stopped the whole session with a KeyboardInterrupt."""

    def stray(signum, frame):
        raise UncaughtSigint("SIGINT reached the handler installed before the run")

    previous = signal.signal(signal.SIGINT, stray)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class SignalAt(pl.Callback):
    """Sends ``signum`` to this process (``times`` times) while step ``step`` runs."""

    def __init__(self, step: int, signum: int = signal.SIGINT, times: int = 1) -> None:
        self.step, self.signum, self.times = step, signum, times

    def on_train_batch_start(self, trainer, pl_module, batch, idx) -> None:
        if trainer.global_step == self.step - 1:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)


def _train_steps(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_stops_after_the_step_with_checkpoint_and_summary(tiny_fasta, tmp_path, signum):
    """SIGUSR1: the warning Slurm sends before a time limit or preemption (--signal=USR1@90)."""
    before = signal.getsignal(signum)
    cfg = tiny_config(tiny_fasta, max_steps=40, val_check_interval=2)
    run_dir = tmp_path / "run"
    result = train(cfg, run_dir, callbacks=[SignalAt(5, signum)])
    name = signal.Signals(signum).name
    assert result.interrupted and result.stopped_by == name and result.steps == 5
    assert "interrupted" in result.format() and "5 of 40 steps" in result.format()
    assert result.validation_cut_at is None and "cut short" not in result.format()
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert ckpt["global_step"] == 5  # the state after the step that was running
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["stopped_by"] == name
    assert summary["steps"] == 5 and summary["max_steps"] == 40
    assert summary["val_step"] == 4  # no validation was run for the interruption
    assert signal.getsignal(signum) == before  # handlers restored after the run

    # resuming continues in the same directory: one metrics.csv, every step once
    cfg.ckpt_path = str(run_dir / "checkpoints" / "last.ckpt")
    cfg.trainer.max_steps = 9
    resumed = train(cfg, run_dir)
    assert not resumed.interrupted and resumed.steps == 9 and resumed.resumed_from_step == 5
    assert _train_steps(run_dir) == list(range(9))
    assert sorted(p.name for p in run_dir.glob("metrics*.csv")) == ["metrics.csv"]


def test_a_second_signal_aborts_at_once(tiny_fasta, tmp_path):
    before = signal.getsignal(signal.SIGINT)
    cfg = tiny_config(tiny_fasta, max_steps=40)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", callbacks=[SignalAt(3, times=2)])
    assert signal.getsignal(signal.SIGINT) == before


def test_a_duplicate_stop_signal_does_not_throw_the_save_away(tiny_fasta, tmp_path):
    """srun forwards a scancel's SIGTERM, a scheduler follows its USR1 with TERM: the save goes
    on; only Ctrl-C again, or the same signal again a while later, aborts."""
    cfg = tiny_config(tiny_fasta, max_steps=40)
    try:
        result = train(cfg, tmp_path / "run", callbacks=[SignalAt(3, signal.SIGTERM, times=2)])
    except KeyboardInterrupt:  # (Terminated): reported as a failure, not as pytest's own stop
        pytest.fail("the duplicate SIGTERM aborted the save")
    assert result.interrupted and result.steps == 3
    assert torch.load(result.last_checkpoint, weights_only=True)["global_step"] == 3


class LastCkptStep(pl.Callback):
    """Records the global step stored in last.ckpt at each step (None: no file yet)."""

    def __init__(self, path: Path) -> None:
        self.path, self.seen = path, []

    def on_train_batch_start(self, trainer, pl_module, batch, idx) -> None:
        if self.path.is_file():
            ckpt = torch.load(self.path, weights_only=True, map_location="cpu")
            self.seen.append(ckpt["global_step"])
        else:
            self.seen.append(None)


@pytest.mark.parametrize("minutes", [1e-6, None])
def test_time_based_checkpoints_do_not_wait_for_validation(tiny_fasta, tmp_path, minutes):
    run_dir = tmp_path / "run"
    cfg = tiny_config(tiny_fasta, max_steps=5, val_check_interval=100)
    cfg.trainer.checkpoint_every_minutes = minutes
    probe = LastCkptStep(run_dir / "checkpoints" / "last.ckpt")
    train(cfg, run_dir, callbacks=[probe])
    if minutes:
        assert probe.seen == [None, 1, 2, 3, 4]  # saved after every step (interval elapsed)
    else:
        assert probe.seen == [None] * 5  # only at the end


def test_resuming_after_a_crash_drops_the_rows_of_redone_steps(tmp_path):
    fasta = write_fasta(tmp_path / "t.fasta", n=40)
    run_dir = tmp_path / "run"
    cfg3 = tiny_config(fasta, max_steps=3, val_check_interval=3)
    train(cfg3, run_dir)
    snap = run_dir / "checkpoints" / "snap.ckpt"  # the run's step-3 checkpoint, kept
    snap.write_bytes((run_dir / "checkpoints" / "last.ckpt").read_bytes())
    cfg = tiny_config(fasta, max_steps=6, val_check_interval=3)
    cfg.ckpt_path = str(run_dir / "checkpoints" / "last.ckpt")
    assert train(cfg, run_dir).steps == 6 and _train_steps(run_dir) == list(range(6))
    # the run "died" after step 3's checkpoint: steps 3..5 are redone from it
    cfg.ckpt_path = str(snap)
    train(cfg, run_dir)
    assert _train_steps(run_dir) == list(range(6))


def test_a_run_directory_with_a_run_is_only_continued_by_resuming(tiny_fasta, tmp_path):
    from protein_performer.errors import DataError

    run_dir = tmp_path / "run"
    train(tiny_config(tiny_fasta, max_steps=2), run_dir)
    before = (run_dir / "checkpoints" / "last.ckpt").read_bytes()
    with pytest.raises(DataError, match=r"already holds a run .*continue it with ckpt_path="):
        train(tiny_config(tiny_fasta, max_steps=2), run_dir)
    other = tmp_path / "other"
    train(tiny_config(tiny_fasta, max_steps=2), other)
    cfg = tiny_config(tiny_fasta, max_steps=3)
    cfg.ckpt_path = str(other / "checkpoints" / "last.ckpt")  # another run's checkpoint
    with pytest.raises(DataError, match="already holds a run"):
        train(cfg, run_dir)
    assert (run_dir / "checkpoints" / "last.ckpt").read_bytes() == before


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "protein_performer.cli.main", *args]


@pytest.mark.slow
def test_ctrl_c_on_the_command_line_saves_and_prints_how_to_resume(tmp_path):
    fasta = write_fasta(tmp_path / "t.fasta", n=60)
    run_dir = tmp_path / "run"
    argv = [o for o in tiny_overrides(fasta, run_dir) if not o.startswith("trainer.max_steps")]
    argv += ["trainer.max_steps=100000", "trainer.val_check_interval=100000"]
    argv += ["trainer.checkpoint_every_minutes=0.0001"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        _cli("train", *argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    last = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 120
    while not last.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "training interrupted" in out and "stopped by SIGINT" in out
    assert "Traceback" not in err and "resume with:" in err
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = summary["steps"]
    assert summary["interrupted"] and 0 < steps < 100000
    assert torch.load(last, weights_only=True)["global_step"] == steps
    # the printed command resumes in the same run directory (here with a near total)
    line = err.split("resume with:")[1].strip().splitlines()[0]
    cd, _, rest = line.partition(" && ")
    assert shlex.split(cd) == ["cd", os.getcwd()]  # relative paths work from anywhere
    command = shlex.split(rest)
    # run as `python -m protein_performer.cli.main`: the same interpreter, as a module
    assert command[:4] == [sys.executable, "-m", "protein_performer", "train"]
    command = [w for w in command[4:] if not w.startswith("trainer.max_steps")]
    command.append(f"trainer.max_steps={steps + 3}")
    r = subprocess.run(_cli("train", *command), capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"resuming in {run_dir}" in r.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == steps + 3 and summary["resumed_from_step"] == steps
    assert sorted(p.name for p in run_dir.iterdir() if p.suffix == ".csv") == ["metrics.csv"]


class SignalDuringValidation(pl.Callback):
    def __init__(self) -> None:
        self.sent = False
        self.val_batches = 0

    def on_validation_batch_start(self, trainer, pl_module, batch, idx, *args) -> None:
        self.val_batches += 1
        if not self.sent and not trainer.sanity_checking:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_during_validation_skips_the_rest_and_the_next_step(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, max_steps=40, val_check_interval=3)
    cfg.data.split_fractions = [0.5, 0.5, 0.0]  # several validation batches
    cfg.data.toks_per_batch = 128
    probe = SignalDuringValidation()
    result = train(cfg, tmp_path / "run", callbacks=[probe])
    assert result.interrupted and result.steps == 3  # no step after the interrupted validation
    assert result.val_step is None and result.best_checkpoint is None  # no partial metrics
    assert result.validation_cut_at == 3  # said: a resume does not redo it
    assert "the validation at step 3 was cut short" in result.format()
    ckpt = torch.load(result.last_checkpoint, weights_only=True, map_location="cpu")
    assert ckpt["global_step"] == 3
    # the training rows logged before the stop are on disk
    with open(tmp_path / "run" / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows if r.get("train/loss")][-1] == 2


class TermDuringSetup(pl.Callback):
    def setup(self, trainer, pl_module, stage) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_while_loading_cleans_up_like_ctrl_c(tiny_fasta, tmp_path):
    from protein_performer.training.graceful_stop import Terminated

    before = signal.getsignal(signal.SIGTERM)
    run_dir = tmp_path / "run"
    with pytest.raises(Terminated):
        train(tiny_config(tiny_fasta), run_dir, callbacks=[TermDuringSetup()])
    assert not run_dir.exists()  # nothing trained: no directory that looks like a run
    assert signal.getsignal(signal.SIGTERM) == before


def test_two_runs_cannot_share_a_directory(tiny_fasta, tmp_path):
    from protein_performer.errors import DataError
    from protein_performer.training.run_dir import claim_run_dir, config_to_yaml

    run_dir = tmp_path / "run"
    text = config_to_yaml(tiny_config(tiny_fasta))
    assert claim_run_dir(run_dir, None, text) == run_dir.resolve()
    with pytest.raises(
        DataError, match=r"has not trained yet \(config\.yaml: another run starting"
    ) as refused:
        claim_run_dir(run_dir, None, text)
    assert "ckpt_path=last" in str(refused.value)  # what starts a stopped one again
    assert (run_dir / "config.yaml").read_text() == text
    # default (timestamped) directories move on to the next free name instead
    assert claim_run_dir(run_dir, None, text, find_free=True).name == "run_1"
    # a user's config.yaml in a directory is never taken for a run's
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "config.yaml").write_text("mine")
    with pytest.raises(DataError, match="not empty"):
        train(tiny_config(tiny_fasta), mine)
    assert (mine / "config.yaml").read_text() == "mine"


def test_resuming_unchanged_keeps_one_config_and_ignores_extra_files(tiny_fasta, tmp_path):
    run_dir = tmp_path / "run"
    cfg = tiny_config(tiny_fasta, max_steps=3)
    train(cfg, run_dir, overrides=["model=performer_relu"], callbacks=[SignalAt(2)])
    (run_dir / "eval.json").write_text("{}")  # a user's result saved next to the run
    cfg.ckpt_path = str(run_dir / "checkpoints" / "last.ckpt")
    train(cfg, run_dir, overrides=["model=performer_relu", f"ckpt_path={cfg.ckpt_path}"])
    names = sorted(p.name for p in run_dir.iterdir())
    assert "config.1.yaml" not in names and "overrides.1.yaml" not in names
    assert (run_dir / "eval.json").read_text() == "{}"
    cfg.trainer.max_steps = 4  # a real change is kept, not lost
    train(cfg, run_dir)
    assert (run_dir / "config.1.yaml").is_file()


def test_evaluate_says_when_held_out_records_of_a_record_split_copy_training_ones(tmp_path, caplog):
    """Two strains' identical proteins under two ids: a split by record puts copies on both
    sides. Training says so for val; evaluate split=val|test says it too, and keeps it."""
    from protein_performer.config.schema import EvalConfig
    from protein_performer.evaluation.evaluate import evaluate

    fasta = write_fasta(tmp_path / "strains.fasta", n=40)
    text = fasta.read_text()
    fasta.write_text(text + text.replace(">sp|T", ">sp|S").replace("_TEST", "_STRAIN2"))
    cfg = tiny_config(fasta, max_steps=1)
    cfg.data.split_fractions = [0.6, 0.2, 0.2]
    result = train(cfg, tmp_path / "run")
    with caplog.at_level("WARNING"):
        test = evaluate(
            EvalConfig(checkpoint=result.last_checkpoint, split="test", toks_per_batch=640)
        )
    (caveat,) = test.to_dict()["split"]["caveats"]
    assert re.search(r"\d+ of \d+ test records are identical to a training sequence", caveat)
    assert caveat in test.scope and caveat in caplog.text and caveat in test.format()
    capped = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, split="test", max_records=2, toks_per_batch=640
        )
    )
    (caveat,) = capped.to_dict()["split"]["caveats"]  # counted among the records scored
    assert capped.sequences == 2 and re.match(r"[12] of 2 test records are identical", caveat)
    # the run's file moved (what "give fasta=" asks for when it is not where the run read it)
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / fasta.name).write_bytes(fasta.read_bytes())
    again = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint,
            fasta=str(moved / fasta.name),
            split="test",
            toks_per_batch=640,
        )
    )
    assert again.to_dict()["split"]["caveats"] == test.to_dict()["split"]["caveats"]
    # the same records in a file the run never read: its "test part" is no held-out part of
    # the run, so there is nothing to say about the run's training data
    other = tmp_path / "other.fasta"
    other.write_bytes(fasta.read_bytes())
    elsewhere = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, fasta=str(other), split="test", toks_per_batch=640
        )
    )
    assert elsewhere.to_dict()["split"]["caveats"] == []


def test_resuming_a_finished_run_is_refused_and_its_results_stay(tiny_fasta, tmp_path):
    from protein_performer.errors import ConfigError

    run_dir = tmp_path / "run"
    cfg = tiny_config(tiny_fasta, max_steps=2)
    train(cfg, run_dir)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert json.loads(before["summary.json"])["val_perplexity"] is not None
    cfg.ckpt_path = str(run_dir / "checkpoints" / "last.ckpt")
    with pytest.raises(ConfigError, match=r"already at step 2 of trainer\.max_steps=2; raise"):
        train(cfg, run_dir)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_a_refused_resume_leaves_the_run_directory_as_it_was(tiny_fasta, tmp_path):
    from protein_performer.errors import ConfigError

    run_dir = tmp_path / "run"
    cfg = tiny_config(tiny_fasta, max_steps=2)
    train(cfg, run_dir)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    cfg.ckpt_path = str(run_dir / "checkpoints" / "last.ckpt")
    cfg.model.dim *= 2  # another architecture: refused before anything is written
    with pytest.raises(ConfigError, match=r"ckpt_path: it is another model \(model\.dim"):
        train(cfg, run_dir)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    with pytest.raises(ConfigError, match="another model"):
        train(cfg, tmp_path / "elsewhere")  # into a new directory: none is left behind
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.slow
def test_a_resume_that_fails_before_training_puts_its_config_back(tiny_fasta, tmp_path, caplog):
    """A changed config is kept as config.N.yaml when the resume claims the directory; a
    resume that then fails on its data trained nothing with it: the run's history must not
    say it did (through train() and through the CLI, which claims first)."""
    from protein_performer.cli.hydra import run_hydra
    from protein_performer.errors import DataError

    run_dir = tmp_path / "run"
    overrides = tiny_overrides(tiny_fasta, run_dir)
    run_hydra("train", [*overrides, "trainer.max_steps=2"])
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    bad = tmp_path / "bad.fasta"
    bad.write_text(">a\nMKV1\n")
    last = str(run_dir / "checkpoints" / "last.ckpt")
    cfg = tiny_config(bad, max_steps=4)
    cfg.ckpt_path = last
    with pytest.raises(DataError, match="invalid residue"):
        train(cfg, run_dir)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    changed = [o for o in overrides if not o.startswith("data.files=")]
    with pytest.raises(DataError, match="invalid residue"):
        run_hydra(
            "train", [*changed, f"data.files=['{bad}']", "trainer.max_steps=4", f"ckpt_path={last}"]
        )
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before

    # nor one that fails in its first step (out of memory at the first batch, say)
    class FirstStepFails(pl.Callback):
        def on_train_batch_start(self, *args) -> None:
            raise RuntimeError("the first step fails")

    cfg = tiny_config(tiny_fasta, max_steps=4)
    cfg.ckpt_path = last
    with pytest.raises(RuntimeError, match="the first step fails"):
        train(cfg, run_dir, callbacks=[FirstStepFails()])
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    # nor one refused because the run is training now (its lock): nothing written at all
    from protein_performer.training import run_lock as rl
    from protein_performer.utils.atomic import owner_tag

    host = owner_tag().rpartition("~")[0]
    lock = run_dir / rl.LOCK_NAME
    lock.write_text(f"{host}~{os.getppid()}\n")
    from protein_performer.training import run_dir as run_module

    with pytest.MonkeyPatch.context() as mp:  # the run took its lock after the early check
        mp.setattr(run_module, "check_unlocked", lambda *_: None)
        with pytest.raises(DataError, match="a run is training in it now"):
            train(cfg, run_dir)
    lock.unlink()
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
    # a resume that trains keeps the changed config as before
    cfg = tiny_config(tiny_fasta, max_steps=3)
    cfg.ckpt_path, cfg.seed = last, 7
    with caplog.at_level("WARNING"):
        assert train(cfg, run_dir).steps == 3
    assert (run_dir / "config.1.yaml").read_bytes() == before["config.yaml"]
    # what changed is named (a seed or data change takes effect, unlike the optimizer's)
    said = "config.yaml changed on resuming (trainer.max_steps: 2 -> 3; seed: 0 -> 7)"
    assert said in caplog.text


def test_a_checkpoint_of_another_run_is_not_continued_in_this_ones_directory(tiny_fasta, tmp_path):
    """Run A's checkpoint copied into run B's checkpoints/ and resumed there replaced B's
    metrics after that step and B's checkpoints with A's continuation, silently."""
    import shutil

    from protein_performer.errors import DataError

    a = train(tiny_config(tiny_fasta, max_steps=2), tmp_path / "a")
    b = train(tiny_config(tiny_fasta, max_steps=2), tmp_path / "b")
    foreign = tmp_path / "b" / "checkpoints" / "from_a.ckpt"
    shutil.copy(a.last_checkpoint, foreign)
    before = {p.name: p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    cfg = tiny_config(tiny_fasta, max_steps=4)
    cfg.ckpt_path = str(foreign)
    with pytest.raises(DataError, match=r"from_a\.ckpt was written by another run than this"):
        train(cfg, tmp_path / "b")
    assert {p.name: p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()} == before
    from protein_performer.training.run_dir import _run_id

    own = _run_id(Path(b.last_checkpoint))
    assert own and own != _run_id(foreign)
    cfg.ckpt_path = b.best_checkpoint  # its own: goes on, and stays this run
    assert train(cfg, tmp_path / "b").steps == 4
    assert _run_id(Path(b.last_checkpoint)) == own  # a resume is the same run


def test_a_run_without_a_checkpoint_says_there_is_nothing_to_resume(tiny_fasta, tmp_path):
    from protein_performer.errors import DataError
    from protein_performer.training.run_dir import config_to_yaml

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(config_to_yaml(tiny_config(tiny_fasta)))
    (run_dir / "metrics.csv").write_text("step\n0\n")
    with pytest.raises(DataError, match="saved no checkpoint to resume from"):
        train(tiny_config(tiny_fasta), run_dir)


def test_a_typo_in_a_data_path_leaves_no_run_directory(tiny_fasta, tmp_path):
    from protein_performer.cli.hydra import run_hydra
    from protein_performer.errors import DataError

    run_dir = tmp_path / "myrun"
    overrides = [o for o in tiny_overrides(tiny_fasta, run_dir) if "data.files" not in o]
    with pytest.raises(DataError, match=r"typo\.fasta: data\.files: no such file"):
        run_hydra("train", [*overrides, f"data.files=['{tmp_path / 'typo.fasta'}']"])
    assert not run_dir.exists()
    for shards, problem in ((tmp_path / "none", "no such shard directory"),
                            (tiny_fasta, "a file, not a shard directory")):  # fmt: skip
        with pytest.raises(DataError, match=f"data\\.shards: {problem}"):
            run_hydra("train", [*overrides, f"data.shards={shards}"])
    assert not run_dir.exists()
    from protein_performer.errors import ConfigError

    for empty in ("data.files=", "data.files=['']"):  # not the working directory
        with pytest.raises(ConfigError, match=r"^data\.files: an empty path"):
            run_hydra("train", [*overrides, empty])
    assert not run_dir.exists()
    assert run_hydra("train", [*overrides, f"data.files=['{tiny_fasta}']"]) == 0


def test_evaluate_split_reuses_the_training_runs_split(tiny_fasta, tmp_path):
    from protein_performer.config.schema import EvalConfig
    from protein_performer.evaluation.evaluate import evaluate

    cfg = tiny_config(tiny_fasta, max_steps=2)
    cfg.data.split_fractions = [0.6, 0.4, 0.0]
    cfg.data.split_seed = 7
    result = train(cfg, tmp_path / "run")
    ev = dict(
        checkpoint=result.last_checkpoint, fasta=str(tiny_fasta), split="val", toks_per_batch=640
    )
    val = evaluate(EvalConfig(**ev))
    assert val.perplexity == pytest.approx(result.val_perplexity, rel=1e-5)
    # the baseline logged in training is evaluate's on the same <mask> positions
    assert result.val_unigram_perplexity_mask == pytest.approx(
        val.unigram["mask_perplexity"], rel=1e-5
    )
    assert val.to_dict()["split"] == {
        "part": "val",
        "by": "record",
        "fractions": [0.6, 0.4, 0.0],
        "seed": 7,
        "clusters": None,
        "caveats": [],
    }
    # another seed draws another split: said, and kept with the result
    other_seed = evaluate(EvalConfig(**ev, split_seed=0))
    (caveat,) = other_seed.to_dict()["split"]["caveats"]
    assert caveat.startswith("split=val split_seed=0: the training run split with 7;")
    # clusters= would draw a cluster split, whose held-out part the model trained on
    table = tmp_path / "members.tsv"
    table.write_text("cluster\tmember\n")
    from protein_performer.errors import ConfigError

    with pytest.raises(ConfigError, match="the training run split by record"):
        evaluate(
            EvalConfig(
                checkpoint=result.last_checkpoint,
                fasta=str(tiny_fasta),
                split="test",
                clusters=str(table),
            )
        )


@pytest.mark.parametrize("during_validation", [False, True])
def test_resuming_after_ctrl_c_mid_epoch_continues_exactly(tmp_path, during_validation, caplog):
    """The interrupt's last.ckpt is saved inside the epoch: saved after it (on_train_end) the
    stop counted as a finished epoch and the resumed run skipped the rest of it."""
    fasta = write_fasta(tmp_path / "t.fasta", n=120)
    cfg = tiny_config(fasta, max_steps=12, val_check_interval=3)
    full = train(cfg, tmp_path / "full")
    epochs = torch.load(full.last_checkpoint, weights_only=True, map_location="cpu")["epoch"]
    assert epochs >= 1  # the run below stops inside an epoch, not at its end
    signal_at = SignalDuringValidation() if during_validation else SignalAt(5)
    cut = train(cfg, tmp_path / "cut", callbacks=[signal_at])
    assert cut.interrupted
    state = torch.load(cut.last_checkpoint, weights_only=True, map_location="cpu")
    assert state["epoch"] == 0 and state["global_step"] in (3, 5)
    cfg.ckpt_path = cut.last_checkpoint
    with caplog.at_level("INFO"):
        resumed = train(cfg, tmp_path / "cut")
    assert resumed.steps == 12
    # Lightning's restoring lines say what the header says already
    assert "Restoring states" not in caplog.text and "Restored all states" not in caplog.text
    a, b = train_losses(tmp_path / "full"), train_losses(tmp_path / "cut")
    assert sorted(b) == sorted(a) == list(range(12))
    assert [b[s] for s in range(12)] == pytest.approx([a[s] for s in range(12)], rel=1e-5)


class CountSaves(pl.Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.steps.append(trainer.global_step)


def test_the_final_step_is_saved_once_after_its_validation(tiny_fasta, tmp_path):
    """max_steps stops the run too: last.ckpt is written after the final validation (best.ckpt
    and last.ckpt, once each), not also before it."""
    saves = CountSaves()
    result = train(
        tiny_config(tiny_fasta, max_steps=4, val_check_interval=2),
        tmp_path / "run",
        callbacks=[saves],
    )
    assert result.val_step == 4
    assert saves.steps.count(4) == 2  # best.ckpt (improved) and last.ckpt


def test_resuming_into_a_new_directory_says_nothing_of_lightnings_dirpath(
    tiny_fasta, tmp_path, recwarn
):
    cfg = tiny_config(tiny_fasta, max_steps=2)
    first = train(cfg, tmp_path / "run")
    cfg.ckpt_path, cfg.trainer.max_steps = first.last_checkpoint, 3
    recwarn.clear()
    assert train(cfg, tmp_path / "new").steps == 3
    assert not [w for w in recwarn if "dirpath has changed" in str(w.message)]


def test_a_run_without_validation_data_resumes_exactly_inside_an_epoch(tmp_path):
    """No validation follows the stop at max_steps: last.ckpt is written inside the epoch,
    and extending the run continues it exactly."""
    fasta = write_fasta(tmp_path / "t.fasta", n=120)
    cfg = tiny_config(fasta, max_steps=12, val_check_interval=3)
    cfg.data.split_fractions = [1.0, 0.0, 0.0]
    train(cfg, tmp_path / "full")
    cfg.trainer.max_steps = 5
    short = train(cfg, tmp_path / "cut")
    assert torch.load(short.last_checkpoint, weights_only=True, map_location="cpu")["epoch"] == 0
    cfg.ckpt_path, cfg.trainer.max_steps = short.last_checkpoint, 12
    train(cfg, tmp_path / "cut")
    a, b = train_losses(tmp_path / "full"), train_losses(tmp_path / "cut")
    assert sorted(b) == sorted(a) == list(range(12))
    assert [b[s] for s in range(12)] == pytest.approx([a[s] for s in range(12)], rel=1e-5)


def test_extending_a_run_whose_last_checkpoint_followed_a_validation_keeps_step_labels(
    tmp_path,
):
    """last.ckpt saved at a validation's end (a run stopped at max_steps with validation
    data): Lightning restores the loggers' step one short; the resumed rows are labelled as
    an uninterrupted run's, validation rows included."""

    fasta = write_fasta(tmp_path / "t.fasta", n=120)
    cfg = tiny_config(fasta, max_steps=8, val_check_interval=2)
    train(cfg, tmp_path / "full")
    cfg.trainer.max_steps = 3  # off the validation interval: a validation of its own
    short = train(cfg, tmp_path / "cut")
    cfg.ckpt_path, cfg.trainer.max_steps = short.last_checkpoint, 8
    train(cfg, tmp_path / "cut")
    a, b = train_losses(tmp_path / "full"), train_losses(tmp_path / "cut")
    assert sorted(b) == sorted(a) == list(range(8))
    assert [b[s] for s in range(8)] == pytest.approx([a[s] for s in range(8)], rel=1e-5)

    def val_steps(run: Path) -> list[int]:
        with open(run / "metrics.csv") as f:
            return [int(r["step"]) for r in csv.DictReader(f) if r.get("val/loss")]

    assert val_steps(tmp_path / "full") == [1, 3, 5, 7]
    assert val_steps(tmp_path / "cut") == [1, 2, 3, 5, 7]  # + the short run's final one


def test_a_resume_stopped_before_its_first_validation_reports_the_checkpoints(tmp_path):
    """The summary's validation is the last one there is (the checkpoint's, with its step),
    not n/a; the step line says how many steps this run trained."""
    fasta = write_fasta(tmp_path / "t.fasta", n=120)
    cfg = tiny_config(fasta, max_steps=4, val_check_interval=2)
    first = train(cfg, tmp_path / "run")
    assert first.val_step == 4 and first.val_perplexity is not None
    cfg.ckpt_path, cfg.trainer.max_steps = first.last_checkpoint, 12
    resumed = train(cfg, tmp_path / "run", callbacks=[SignalAt(5)])
    assert resumed.interrupted and resumed.steps == 5 and resumed.resumed_from_step == 4
    assert resumed.val_step == 4
    assert resumed.val_perplexity == pytest.approx(first.val_perplexity, rel=1e-6)
    assert resumed.val_accuracy == pytest.approx(first.val_accuracy, rel=1e-6)
    assert "5 of 12 steps (1 of them in this run)" in resumed.format()
    assert "val perplexity  n/a" not in resumed.format()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["val_step"] == 4 and summary["val_perplexity"] is not None


def test_an_interrupt_during_the_final_validation_offers_no_resume_that_would_be_refused(
    tiny_fasta, tmp_path, monkeypatch, capsys
):
    from protein_performer.cli import hydra as hydra_run
    from protein_performer.training import run

    ckpt = str(tmp_path / "run" / "checkpoints" / "last.ckpt")

    def interrupted_at_the_end(cfg, path, **_):
        return run.TrainResult(
            run_dir=str(path), attention="performer_relu", objective="mlm", steps=4,
            val_perplexity=None, val_accuracy=None, val_loss=None, best_val_perplexity=None,
            tokens_per_s=0.0, train_seconds=1.0, best_checkpoint=None, last_checkpoint=ckpt,
            max_steps=4, stopped_by="SIGINT",
        )  # fmt: skip

    monkeypatch.setattr(run, "train", interrupted_at_the_end)
    assert hydra_run.run_hydra("train", tiny_overrides(tiny_fasta, tmp_path / "run")) == 130
    err = capsys.readouterr().err
    assert "resume with" not in err
    assert f"interrupted after the last step (4), during its validation: {ckpt} holds" in err


class SignalDuringFinalValidation(pl.Callback):
    def on_validation_batch_start(self, trainer, pl_module, batch, idx, *args) -> None:
        if trainer.global_step == trainer.max_steps and idx == 0:
            os.kill(os.getpid(), signal.SIGINT)


def test_interrupted_in_the_final_validation_the_checkpoint_is_the_last_step(tiny_fasta, tmp_path):
    """What the message above says: last.ckpt holds the trained model (every step), and a
    resume from it would be refused (nothing left to train)."""
    from protein_performer.errors import ConfigError
    from protein_performer.training.preflight import check_train_inputs

    cfg = tiny_config(tiny_fasta, max_steps=4, val_check_interval=2)
    result = train(cfg, tmp_path / "run", callbacks=[SignalDuringFinalValidation()])
    assert result.interrupted and result.steps == result.max_steps == 4
    ckpt = torch.load(result.last_checkpoint, weights_only=True, map_location="cpu")
    assert ckpt["global_step"] == 4
    cfg.ckpt_path = result.last_checkpoint
    with pytest.raises(ConfigError, match=r"already at step 4 of trainer\.max_steps=4"):
        check_train_inputs(cfg)


def test_a_signal_to_another_rank_stops_this_one_and_names_the_signal():
    """Under DDP a signal may reach only rank 1 (a node's terminal, a scheduler): rank 0, which
    writes the summary, stops at the same step and reports the run as interrupted by it."""
    from types import SimpleNamespace

    from protein_performer.training.graceful_stop import GracefulInterrupt

    class OtherRankGotSigterm:
        root_device = torch.device("cpu")

        def reduce(self, tensor, reduce_op="mean"):
            assert reduce_op == "max"
            return torch.maximum(tensor, torch.tensor(int(signal.SIGTERM)))

    trainer = SimpleNamespace(
        world_size=2, strategy=OtherRankGotSigterm(), global_step=7, should_stop=False,
        limit_val_batches=1.0,
    )  # fmt: skip
    interrupt = GracefulInterrupt()
    interrupt.on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.should_stop and interrupt.stopped_at == 7
    assert interrupt.received is None and interrupt.stop_reason == "SIGTERM"
    alone = SimpleNamespace(world_size=1, global_step=3, should_stop=False, limit_val_batches=1)
    quiet = GracefulInterrupt()
    quiet.on_train_batch_end(alone, None, None, None, 0)
    assert not alone.should_stop and quiet.stop_reason is None


def test_a_resume_on_another_number_of_processes_goes_on_where_the_epoch_stopped(caplog):
    """The loader's position is per rank: 14 batches on each of 2 ranks are 28 global ones,
    not 14 (a resume on 1 process trained 14 batches again, on N skipped some unseen)."""
    from types import SimpleNamespace

    from protein_performer.training.resumable import ResumableLoader

    def resumed(world: int, state: dict) -> tuple[list[int], str]:
        trainer = SimpleNamespace(current_epoch=0, world_size=world, is_global_zero=True)
        loader = ResumableLoader(list(range(40)), trainer)  # this rank's batches, in order
        loader.load_state_dict(state)
        caplog.clear()
        with caplog.at_level("WARNING"):
            return list(loader), caplog.text

    left, said = resumed(1, {"epoch": 0, "batches": 14, "world_size": 2})
    assert left[0] == 28 and "each step now trains 1 batch instead of 2" in said
    assert "after its first 28 batches" in said and "trained again" not in said
    left, said = resumed(4, {"epoch": 0, "batches": 3, "world_size": 2})
    assert left[0] == 1 and "(2 trained again)" in said  # 6 global = 1 per rank + 2
    left, said = resumed(2, {"epoch": 0, "batches": 5})  # older checkpoints: same count
    assert left[0] == 5 and not said
    left, _ = resumed(1, {"epoch": 1, "batches": 5, "world_size": 2})  # a finished epoch
    assert left[0] == 0


def test_the_stop_is_said_once_by_rank_zero_and_data_workers_leave_it_to_the_trainer(
    monkeypatch, capsys
):
    from protein_performer.training.graceful_stop import GracefulInterrupt

    worker = GracefulInterrupt()
    worker._pid = -1  # a forked data-loader worker inherits the handler
    worker._handle(signal.SIGINT, None)
    worker._handle(signal.SIGINT, None)  # a second one aborts nothing there either
    assert worker.received is None and capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "1")
    rank1 = GracefulInterrupt()
    rank1._handle(signal.SIGINT, None)
    assert rank1.received == "SIGINT" and capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    rank0 = GracefulInterrupt()
    rank0._handle(signal.SIGINT, None)
    assert capsys.readouterr().err.count("SIGINT received: stopping after this step") == 1


def test_an_ignored_sighup_stays_ignored_and_others_end_commands_like_sigterm():
    """nohup ignores SIGHUP: the run must not take it over; elsewhere SIGHUP and SIGUSR1/2 end
    a command as SIGTERM does (cleanup, exit code 128 + the signal)."""
    from protein_performer.training.graceful_stop import GracefulInterrupt
    from protein_performer.utils.interrupts import Terminated, exit_code, sigterm_raises

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        stop = GracefulInterrupt()
        stop.install()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGUSR2) == stop._handle
        stop.restore()
        with sigterm_raises():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        with pytest.raises(Terminated) as caught, sigterm_raises():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(1)
        assert exit_code(caught.value) == 129
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, before)


@pytest.mark.slow
def test_ckpt_path_last_starts_a_run_or_resumes_it(tmp_path, capsys):
    """One command for a job's first start and every requeue (the runs that train in their
    own processes, as a scheduler starts them; the refusals in this one)."""
    fasta = write_fasta(tmp_path / "t.fasta", n=60)
    run_dir = tmp_path / "run"
    argv = [o for o in tiny_overrides(fasta, run_dir) if not o.startswith("trainer.max_steps")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.run(
        _cli("train", *argv, "ckpt_path=last", "trainer.max_steps=3"),
        capture_output=True,
        text=True,
        env=env,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    assert "ckpt_path=last: no " in first.stderr and "yet, starting the run" in first.stderr
    again = subprocess.run(
        _cli("train", *argv, "ckpt_path=last", "trainer.max_steps=5"),
        capture_output=True,
        text=True,
        env=env,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"ckpt_path=last: resuming from {run_dir / 'checkpoints' / 'last.ckpt'}" in again.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["resumed_from_step"] == 3
    from protein_performer.cli.main import main

    capsys.readouterr()
    # a requeue of the finished run: nothing to do, not an error
    assert main(["train", *argv, "ckpt_path=last", "trainer.max_steps=5"]) == 0
    assert "ckpt_path=last: the run is complete (5 of" in capsys.readouterr().err
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    unnamed = [o for o in argv if not o.startswith("hydra.run.dir")]
    assert main(["train", *unnamed, "ckpt_path=last"]) == 2
    assert "ckpt_path=last resumes the run in hydra.run.dir" in capsys.readouterr().err
    # a sweep: its default folder is new every time too
    assert main(["train", "-m", *unnamed, "ckpt_path=last", "seed=0,1"]) == 2
    err = capsys.readouterr().err
    assert "name that directory (the default one is new for every sweep)" in err


@pytest.mark.slow
def test_a_schedulers_sigterm_to_every_process_with_data_workers_saves(tmp_path):
    """Slurm signals every process of a job: data workers must leave the stop to the main
    process (a worker killed by SIGTERM crashed the run before it saved)."""
    fasta = write_fasta(tmp_path / "t.fasta", n=200)
    run_dir = tmp_path / "run"
    argv = [o for o in tiny_overrides(fasta, run_dir) if not o.startswith("trainer.max_steps")]
    argv += ["trainer.max_steps=100000", "trainer.val_check_interval=100000"]
    argv += ["data.num_workers=2", "trainer.checkpoint_every_minutes=1000"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        _cli("train", *argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, as a job's
    )
    metrics = run_dir / "metrics.csv"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if metrics.is_file() and len(_train_steps(run_dir)) >= 3:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)  # the main process and its data workers
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err and "resume with:" in err
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_the_resume_line_runs_the_program_as_it_was_run(tmp_path, monkeypatch):
    from protein_performer.cli.resume import program

    exe = tmp_path / "venv" / "bin" / "protein-performer"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(exe), "train"])
    monkeypatch.setenv("PATH", "/usr/bin")  # not on PATH: its path, as the job script gave it
    assert program() == [str(exe.resolve())]
    monkeypatch.setenv("PATH", str(exe.parent))
    assert program() == ["protein-performer"]
    monkeypatch.setattr(sys, "argv", ["/x/protein_performer/__main__.py"])
    assert program() == [sys.executable, "-m", "protein_performer"]


def test_ckpt_path_last_restarts_an_attempt_that_saved_no_checkpoint(tiny_fasta, tmp_path, capsys):
    """A job killed before its first checkpoint (or diverged) left config and metrics only: its
    requeue starts the run again, the attempt's files kept under other names."""
    from protein_performer.cli.main import main

    run = tmp_path / "run"
    argv = [*tiny_overrides(tiny_fasta, run), "ckpt_path=last"]
    assert main(["train", *argv]) == 0
    (run / "checkpoints" / "last.ckpt").unlink()
    for ckpt in (run / "checkpoints").glob("*"):
        ckpt.unlink()
    (run / "summary.json").unlink()  # as a SIGKILL before the first checkpoint leaves it
    metrics = (run / "metrics.csv").read_text()
    assert main(["train", *argv]) == 0
    err = capsys.readouterr().err
    assert "its files are kept as config.1.yaml, overrides.1.yaml, metrics.1.csv" in err
    assert (run / "metrics.1.csv").read_text() == metrics  # nothing lost
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "summary.json").is_file()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.yaml").write_text("my: notes\n")  # a user's folder
    mine = [*tiny_overrides(tiny_fasta, tmp_path / "mine"), "ckpt_path=last"]
    assert main(["train", *mine]) == 2
    assert (tmp_path / "mine" / "config.yaml").read_text() == "my: notes\n"


def test_a_moved_run_keeps_its_best_score_and_file(tiny_fasta, tmp_path):
    """Lightning restores the best score only in the same folder: a copied run's first
    validation after the resume replaced best.ckpt whatever its perplexity."""
    import shutil

    from protein_performer.training.callbacks import BestCheckpoint

    class Seen(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            best = next(c for c in trainer.callbacks if isinstance(c, BestCheckpoint))
            self.score, self.path = float(best.best_model_score), best.best_model_path

    cfg = tiny_config(tiny_fasta, max_steps=4, val_check_interval=2)
    first = train(cfg, tmp_path / "run")
    shutil.copytree(tmp_path / "run", tmp_path / "moved")
    shutil.rmtree(tmp_path / "run")  # moved, not copied: the stored folder is gone
    seen = Seen()
    cfg.ckpt_path, cfg.trainer.max_steps = str(tmp_path / "moved/checkpoints/last.ckpt"), 6
    train(cfg, tmp_path / "moved", callbacks=[seen])
    assert seen.score == pytest.approx(first.best_val_perplexity)
    assert seen.path == str(tmp_path / "moved" / "checkpoints" / "best.ckpt")
