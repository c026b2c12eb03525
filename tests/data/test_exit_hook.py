"""The exit hook ends the data workers (which ignore SIGTERM) and no other process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = """
import multiprocessing as mp, os, signal, sys, time
from protein_performer.data.datamodule import (
    WorkerTrackingDataLoader, register_exit_hook, leave_stop_signals_to_main,
)

def user_child(folder):
    def on_term(signum, frame):
        open(os.path.join(folder, "cleaned"), "w").close()
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    open(os.path.join(folder, "ready"), "w").close()
    while True:
        time.sleep(0.05)

if __name__ == "__main__":
    folder = sys.argv[1]
    child = mp.Process(target=user_child, args=(folder,), daemon=True)
    child.start()
    register_exit_hook()
    loader = WorkerTrackingDataLoader(
        list(range(8)), batch_size=2, num_workers=1, persistent_workers=True,
        worker_init_fn=leave_stop_signals_to_main,
    )
    batches = iter(loader)
    next(batches)
    print(loader._iterator._workers[0].pid, flush=True)
    while not os.path.exists(os.path.join(folder, "ready")):
        time.sleep(0.05)
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_exit_hook_kills_data_workers_and_leaves_other_children_to_multiprocessing(
    tmp_path: Path,
) -> None:
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,  # a worker left to multiprocessing's SIGTERM would hang the exit
    )
    assert proc.returncode == 0, proc.stderr
    # the user's child got SIGTERM (and cleaned up), not SIGKILL
    assert (tmp_path / "cleaned").exists()
    worker = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(worker):
        if time.monotonic() > deadline:
            pytest.fail(f"data worker {worker} still alive after its parent exited")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
