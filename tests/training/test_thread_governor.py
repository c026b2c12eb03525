"""Threads follow the machine during a run: fewer when other work takes CPUs after the start,
more when it leaves; a choice the user made (trainer.threads, OMP_NUM_THREADS) is kept."""

from __future__ import annotations

import pytest

from protein_performer.config.schema import TrainConfig
from protein_performer.training.run import _governor
from protein_performer.training.thread_governor import ThreadGovernor
from protein_performer.utils.devices import OtherWork, threads_for


class Feed:
    """/proc readers fed by the test: the machine's busy and total ticks, this run's ticks."""

    def __init__(self) -> None:
        self.busy = self.total = self.own = 0

    def tick(self, seconds: float, machine_busy_cpus: float, own_cpus: float, ncpu: int = 2):
        self.total += int(100 * seconds * ncpu)
        self.busy += int(100 * seconds * machine_busy_cpus)
        self.own += int(100 * seconds * own_cpus)


def test_other_work_is_the_machines_busy_time_less_this_runs():
    feed = Feed()
    meter = OtherWork(lambda: (feed.busy, feed.total), lambda: feed.own, ncpu=2)
    assert meter.cpus() is None  # the first call starts the count
    feed.tick(10, machine_busy_cpus=2.0, own_cpus=2.0)  # the run alone, both cores busy
    assert meter.cpus() == pytest.approx(0.0)
    feed.tick(10, machine_busy_cpus=2.0, own_cpus=1.2)  # another job took a core's worth
    assert meter.cpus() == pytest.approx(0.8)
    feed.tick(10, machine_busy_cpus=0.5, own_cpus=0.9)  # never below zero
    assert meter.cpus() == 0.0
    assert meter.cpus() is None  # no time passed

    def unreadable():
        raise OSError("no /proc")

    assert OtherWork(unreadable, lambda: 0).cpus() is None


def test_threads_leave_the_busy_cpus_to_other_work():
    assert [threads_for(2, x) for x in (0.0, 0.4, 0.6, 1.0, 2.0, 5.0)] == [2, 2, 1, 1, 1, 1]
    assert threads_for(8, 2.6) == 5 and threads_for(1, 3.0) == 1


def _governor_with(feed: Feed, threads: int = 2):
    now = [0.0]
    set_to: list[int] = []
    said: list[str] = []
    gov = ThreadGovernor(
        threads, 2, interval_s=30.0,
        meter=OtherWork(lambda: (feed.busy, feed.total), lambda: feed.own, ncpu=2),
        clock=lambda: now[0], set_threads=set_to.append, say=said.append,
    )  # fmt: skip
    gov.on_train_start(None, None)

    def run(seconds: float, machine: float, own: float, step: int) -> None:
        feed.tick(seconds, machine, own)
        now[0] += seconds
        gov.check(step)

    return gov, run, set_to, said


def test_a_run_lowers_its_threads_when_the_machine_gets_busy_and_raises_them_after():
    feed = Feed()
    gov, run, set_to, said = _governor_with(feed)
    run(10, 2.0, 2.0, 10)  # not due yet: nothing read
    run(20, 2.0, 2.0, 30)  # due; idle machine but this run: 2 threads stay
    assert set_to == []
    run(30, 2.0, 1.1, 60)  # another job started: asked once, not yet changed
    assert set_to == [] and gov.threads == 2
    run(30, 2.0, 1.0, 90)  # the second check agrees: 1 thread
    assert set_to == [1] and gov.threads == 1
    assert said == [
        "threads: 2 -> 1 at step 90 (the machine got busy: other work uses 1.0 of 2 CPUs)"
    ]
    run(30, 1.0, 1.0, 120)  # the job ended: asked once
    run(30, 1.0, 1.0, 150)
    assert set_to == [1, 2] and gov.threads == 2
    assert [c[:3] for c in gov.changes] == [(90, 2, 1), (150, 1, 2)]
    assert "free again" in said[-1]


def test_a_short_burst_of_other_work_changes_nothing():
    feed = Feed()
    gov, run, set_to, _ = _governor_with(feed)
    run(30, 2.0, 2.0, 30)
    run(30, 2.0, 1.0, 60)  # a compile for one check
    run(30, 2.0, 2.0, 90)  # gone: the pending change is dropped
    run(30, 2.0, 1.0, 120)  # once again: still only asked once
    assert set_to == [] and gov.threads == 2


def test_the_governor_runs_only_where_the_start_chose_the_threads():
    cfg = TrainConfig()
    assert len(_governor(cfg, (2, None))) == 1
    assert len(_governor(cfg, (1, "of 2 CPUs: the machine is busy, 1.0 CPUs in use"))) == 1
    assert _governor(cfg, None) == []  # not on the CPU
    assert _governor(cfg, (4, "OMP_NUM_THREADS")) == []
    cfg.trainer.threads = 2
    assert _governor(cfg, (2, None)) == []
    cfg.trainer.threads, cfg.trainer.devices = None, 2  # DDP on CPU: the ranks share the CPUs
    assert _governor(cfg, (2, None)) == []


def test_this_runs_ticks_include_its_children(tmp_path):
    import os
    import subprocess
    import sys

    from protein_performer.utils.devices import _process_tree_jiffies

    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.process_time()\n"
         "while time.process_time() - t < 0.3: pass\ninput()"],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        import time

        deadline = time.monotonic() + 30
        theirs = 0
        while time.monotonic() < deadline:
            theirs = _process_tree_jiffies(child.pid)
            if theirs >= 0.25 * os.sysconf("SC_CLK_TCK"):  # 0.3 s of CPU, less rounding
                break
            time.sleep(0.1)
        assert theirs >= 0.25 * os.sysconf("SC_CLK_TCK")
        with open(f"/proc/{os.getpid()}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        alone = int(fields[11]) + int(fields[12])  # this process's own utime + stime
        assert _process_tree_jiffies() - alone >= theirs  # ours counts the child's
    finally:
        child.communicate(b"\n", timeout=30)
