"""One writer per run directory: a resume while the run still trains is refused; a killed
run's lock is taken over."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from protein_performer.atomic import owner_tag
from protein_performer.errors import DataError
from protein_performer.training import run_lock as rl
from protein_performer.training.run import train
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
        assert lock.read_text().strip() == owner_tag()
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
