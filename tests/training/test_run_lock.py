"""One writer per run directory: a resume while the run still trains is refused; a killed
run's lock is taken over."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from protein_performer.errors import DataError
from protein_performer.training import run_lock as rl
from protein_performer.training.run import train
from protein_performer.utils.atomic import owner_tag
from tests.training.helpers import tiny_config


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_live_holder_is_refused_and_a_dead_ones_lock_taken_over(tmp_path):
    lock = tmp_path / rl.LOCK_NAME
    host = owner_tag().rpartition("~")[0]
    lock.write_text(f"{host}~{os.getppid()}\n")  # a live process of this machine
    busy = r"a run is training in it now \(.*~\d+\)"
    with pytest.raises(DataError, match=busy), rl.run_lock(tmp_path):
        pass
    assert lock.read_text() == f"{host}~{os.getppid()}\n"  # left as it was
    lock.write_text(f"{host}~{_dead_pid()}\n")
    with rl.run_lock(tmp_path):
        tag, *rest = lock.read_text().splitlines()
        assert tag == owner_tag()
        if rl._start_ticks(os.getpid()) is not None:
            boot = rl._boot_id() or "-"
            assert rest == [f"start {rl._start_ticks(os.getpid())} {boot}"]
    assert not lock.exists()  # released
    lock.write_text("other-node~123\n")  # another machine: judged by its heartbeat
    with pytest.raises(DataError), rl.run_lock(tmp_path):
        pass
    old = time.time() - rl.STALE_S - 5
    os.utime(lock, (old, old))
    with rl.run_lock(tmp_path):
        pass
    with rl.run_lock(tmp_path, enabled=False):  # a DDP rank other than 0
        assert not lock.exists()


def test_a_resume_while_the_run_trains_is_refused(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, max_steps=2, val_check_interval=2)
    run = tmp_path / "run"
    train(cfg, run)
    assert not (run / rl.LOCK_NAME).exists()  # a finished run holds no lock
    before = {p.name: p.stat().st_mtime_ns for p in run.rglob("*")}
    host = owner_tag().rpartition("~")[0]
    (run / rl.LOCK_NAME).write_text(f"{host}~{os.getppid()}\n")  # the run, still training
    cfg.ckpt_path = str(run / "checkpoints" / "last.ckpt")
    cfg.trainer.max_steps = 4
    with pytest.raises(DataError, match="a run is training in it now"):
        train(cfg, run)
    (run / rl.LOCK_NAME).unlink()
    assert {p.name: p.stat().st_mtime_ns for p in run.rglob("*")} == before


def test_a_stop_handler_someone_else_set_stays_theirs():
    """submitit's SIGUSR2 or Lightning's Slurm requeue on SIGUSR1: not taken over."""
    import signal

    from protein_performer.training.graceful_stop import GracefulInterrupt
    from protein_performer.utils.interrupts import sigterm_raises

    def theirs(signum, frame):
        pass

    before = signal.signal(signal.SIGUSR2, theirs)
    try:
        with sigterm_raises():
            assert signal.getsignal(signal.SIGUSR2) is theirs
        stop = GracefulInterrupt()
        stop.install()
        assert signal.getsignal(signal.SIGUSR2) is theirs
        stop.restore()
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
        with sigterm_raises():  # the CLI's, then the run's: both ours
            stop.install()
            assert signal.getsignal(signal.SIGUSR2) == stop._handle
            stop.restore()
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_a_process_started_ignoring_ctrl_c_keeps_ignoring_it():
    """A script's `cmd &` (no job control) starts it with SIGINT ignored: training
    must not start obeying it (while loading it was ignored)."""
    import signal

    from protein_performer.training.graceful_stop import GracefulInterrupt

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        stop = GracefulInterrupt()
        stop.install()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == stop._handle  # the rest as before
        stop.restore()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_attempt_without_a_checkpoint_is_set_aside_whatever_it_left(tiny_fasta, tmp_path):
    from protein_performer.training.run_dir import check_run_dir, set_aside_attempt

    run = tmp_path / "run"
    train(tiny_config(tiny_fasta, max_steps=2, val_check_interval=2), run)
    for ckpt in (run / "checkpoints").glob("*.ckpt"):
        ckpt.unlink()
    (run / "checkpoints" / ".last.ckpt.host~1.x.tmp").write_text("")  # killed mid-write
    (run / "tensorboard").mkdir()
    (run / "hparams.yaml").write_text("mine: 1\n")  # this project writes none: a user's
    assert set_aside_attempt(run) == []  # it ended (summary.json): not redone unasked
    (run / "summary.json").unlink()  # as a killed attempt leaves it
    kept = set_aside_attempt(run)
    assert "config.1.yaml" in kept and "tensorboard.1" in kept and "metrics.1.csv" in kept
    assert (run / "hparams.1.yaml").read_text() == "mine: 1\n"  # kept, as the message says
    assert check_run_dir(run) == run  # a new start is accepted there now
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "config.yaml").write_text("model: x\n")
    assert set_aside_attempt(tmp_path / "user") == []  # not a run's: nothing touched


def test_every_rank_resolves_ckpt_path_last_alike(tmp_path, capsys):
    from protein_performer.cli.compose import compose_job
    from protein_performer.cli.resume import resolve_last

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_text("x")
    job = compose_job("train", [f"hydra.run.dir={run}", "ckpt_path=last"])
    assert resolve_last(job, str(run), main=False) == str(run / "checkpoints" / "last.ckpt")
    assert capsys.readouterr().err == ""  # said by rank 0 only
    (run / "checkpoints" / "last.ckpt").unlink()
    assert resolve_last(job, str(run), main=False) is None


def test_a_run_whose_lock_was_taken_over_stops_without_writing(tiny_fasta, tmp_path, monkeypatch):
    """Paused past the lock's staleness (a stopped job), a requeue took it over: this run
    must not write another step or checkpoint over that one's."""
    import pytorch_lightning as pl

    run = tmp_path / "run"

    class TakeOver(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 2:
                (run / rl.LOCK_NAME).write_text("other-node~77\n")  # the requeue's lock

    from protein_performer.training.callbacks import LockGuard

    monkeypatch.setattr(LockGuard, "every_steps", 1)
    cfg = tiny_config(tiny_fasta, max_steps=40, val_check_interval=1000)
    cfg.trainer.checkpoint_every_minutes = 1e-6  # last.ckpt after every step, while it may
    with pytest.raises(DataError, match=r"another process \(other-node~77\) took this run's"):
        train(cfg, run, callbacks=[TakeOver()])
    assert (run / rl.LOCK_NAME).read_text() == "other-node~77\n"  # theirs, left alone
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] <= 3  # nothing written after the takeover at step 2


def test_a_lock_from_before_its_pids_process_started_is_stale(tmp_path):
    lock = tmp_path / rl.LOCK_NAME
    host = owner_tag().rpartition("~")[0]
    lock.write_text(f"{host}~1\n")  # pid 1 is alive on every machine (reused after a reboot)
    started = rl._started_at(1)
    if started is None:
        pytest.skip("no /proc here")
    before = started - 100  # touched last before pid 1 started: another boot's lock
    os.utime(lock, (before, before))
    with rl.run_lock(tmp_path) as held:
        assert held.lost() is None


def test_a_live_holder_stays_live_whatever_the_wall_clock_did(tmp_path):
    """Its start ticks since boot decide, not the wall clock: a VM paused and resumed (or an
    NTP step) put a live run's start after its lock's last touch, and a second process took
    the lock over and stopped it."""
    lock = tmp_path / rl.LOCK_NAME
    host = owner_tag().rpartition("~")[0]
    parent = os.getppid()
    ticks = rl._start_ticks(parent)
    if ticks is None:
        pytest.skip("no /proc here")
    lock.write_text(f"{host}~{parent}\nstart {ticks}\n")
    early = rl._started_at(parent) - 100  # the clock moved: "touched before it started"
    os.utime(lock, (early, early))
    with pytest.raises(DataError, match="a run is training in it now"), rl.run_lock(tmp_path):
        pass
    lock.write_text(f"{host}~{parent}\nstart {ticks + 1}\n")  # that pid is another process now
    with rl.run_lock(tmp_path) as held:
        assert held.lost() is None
    if rl._boot_id() is not None:  # the same ticks in another boot: another process too
        lock.write_text(f"{host}~{parent}\nstart {ticks} another-boot\n")
        with rl.run_lock(tmp_path):
            pass
        lock.write_text(f"{host}~{parent}\nstart {ticks} {rl._boot_id()}\n")  # this boot
        with pytest.raises(DataError, match="training in it now"), rl.run_lock(tmp_path):
            pass
        lock.unlink()


def test_a_finished_runs_requeue_prints_its_summary_as_json(tiny_fasta, tmp_path, capsys):
    import json

    from protein_performer.cli.main import main
    from tests.training.helpers import tiny_overrides

    argv = ["train", *tiny_overrides(tiny_fasta, tmp_path / "run"), "ckpt_path=last", "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(argv) == 0  # the requeue: nothing left to train
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["complete"] is True and again["steps"] == first["steps"] == 4


def test_an_unreadable_lock_is_no_takeover(tmp_path, monkeypatch):
    """A passing read error (NFS) must not stop a healthy run as if its lock were taken."""
    real = Path.read_text

    def flaky(self, *args, **kwargs):
        if self.name == rl.LOCK_NAME:
            raise OSError(5, "Input/output error")
        return real(self, *args, **kwargs)

    with rl.run_lock(tmp_path) as held:
        monkeypatch.setattr(Path, "read_text", flaky)
        assert held.lost(every_s=0.0) is None  # a failed read: still ours
        monkeypatch.setattr(Path, "read_text", real)
        assert held.lost(every_s=0.0) is None


def test_a_requeue_waits_for_another_machines_lock_to_go_stale(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rl, "STALE_S", 1.0)
    lock = tmp_path / rl.LOCK_NAME
    lock.write_text("other-node~5\n")  # a killed run's, just touched
    start = time.monotonic()
    rl.wait_for_other_machine(tmp_path)
    assert 0.9 < time.monotonic() - start < 10
    assert "locked by other-node~5 on another machine" in capsys.readouterr().err
    with rl.run_lock(tmp_path):  # stale now: taken over
        pass


def test_init_from_default_is_the_shipped_checkpoint(tiny_fasta):
    from protein_performer.errors import ConfigError
    from protein_performer.model import ModelConfig
    from protein_performer.model.checkpoints import read_checkpoint, resolve_checkpoint
    from protein_performer.training.preflight import check_train_inputs

    if not resolve_checkpoint("default").is_file():
        pytest.skip("no shipped checkpoint here")
    cfg = tiny_config(tiny_fasta)
    cfg.init_from = "default"
    # found and read, as checkpoint=default is by the analysis commands: its architecture is
    # checked before any data is read (this tiny model is not the shipped one's)
    with pytest.raises(ConfigError, match="init_from checkpoint default has another archi"):
        check_train_inputs(cfg)
    shipped = read_checkpoint("default", mmap=True)["protein_performer"]["model"]
    cfg.model = ModelConfig.from_dict(dict(shipped))
    check_train_inputs(cfg)


def test_a_users_folder_is_no_set_aside_attempt_and_its_lock_not_ours(tmp_path):
    from protein_performer.training.run_dir import check_run_dir

    other = tmp_path / "a"
    other.mkdir()
    (other / ".lock").write_text("another tool's\n")  # not our lock's name
    with pytest.raises(DataError, match="not empty"):
        check_run_dir(other)
    assert (other / ".lock").read_text() == "another tool's\n"
    mine = tmp_path / "b"
    (mine / "checkpoints").mkdir(parents=True)
    (mine / "checkpoints" / "notes.txt").write_text("mine")  # a user's file, not a temporary
    with pytest.raises(DataError):
        check_run_dir(mine)
    assert (mine / "checkpoints" / "notes.txt").read_text() == "mine"
    # a folder without a run's config.yaml is no run, whatever its names: not offered
    # ckpt_path=last (which would refuse it in turn)
    for name in ("metrics.csv", "hparams.yaml"):
        user = tmp_path / f"user_{name}"
        user.mkdir()
        (user / name).write_text("mine\n")
        with pytest.raises(DataError, match="not empty") as refused:
            check_run_dir(user)
        assert "ckpt_path=last" not in str(refused.value)


def test_a_rank_other_than_zero_resolves_ckpt_path_last_too(tmp_path, monkeypatch):
    """srun/torchrun start every rank with the same command line: none may keep 'last'."""
    import protein_performer.training.run as run_module
    from protein_performer.cli.commands.train import run_train_job
    from protein_performer.cli.compose import CliArgs, compose_job

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_text("x")
    seen = []

    class Reached(Exception):
        pass

    def fake_train(cfg, *args, **kwargs):
        seen.append(cfg.ckpt_path)
        raise Reached

    monkeypatch.setattr(run_module, "is_rank_zero", lambda: False)
    monkeypatch.setattr(run_module, "train", fake_train)
    monkeypatch.setattr("protein_performer.cli.commands.train.run_finished", lambda *a, **k: False)
    job = compose_job("train", [f"hydra.run.dir={run}", "ckpt_path=last"])
    with pytest.raises(Reached):
        run_train_job(job, str(run), 0, CliArgs(overrides=[]))
    assert seen == [str(run / "checkpoints" / "last.ckpt")]


def test_a_config_kept_on_resuming_is_put_back_or_forgotten(tmp_path, caplog):
    # a resume replaces config.yaml (the old one kept as config.1.yaml): put back when it
    # stops before training, forgotten (kept as it is) once a step trained with it
    from protein_performer.training.run_dir import (
        forget_versioned,
        restore_versioned,
        write_versioned,
    )

    path = tmp_path / "config.yaml"
    path.write_text("seed: 0\n")
    write_versioned(path, "seed: 7\n")
    assert (
        path.read_text() == "seed: 7\n" and (tmp_path / "config.1.yaml").read_text() == "seed: 0\n"
    )
    with caplog.at_level("WARNING"):
        restore_versioned(tmp_path)
    assert path.read_text() == "seed: 0\n" and not (tmp_path / "config.1.yaml").exists()
    assert "config.yaml put back (the resume stopped before training)" in caplog.text
    write_versioned(path, "seed: 7\n")
    forget_versioned(tmp_path)
    restore_versioned(tmp_path)  # nothing left to put back
    assert (
        path.read_text() == "seed: 7\n" and (tmp_path / "config.1.yaml").read_text() == "seed: 0\n"
    )
    # a resume changing only the checkpoint path keeps no copy
    write_versioned(path, "seed: 7\nckpt_path: last.ckpt\n")
    assert not (tmp_path / "config.2.yaml").exists()
