"""DataLoaders whose worker processes are remembered, and what those workers do with signals:
the exit hook ends these workers and no other process, and a worker leaves the stop signals a
scheduler sends to the main process (which stops the run cleanly and ends its workers)."""

from __future__ import annotations

import atexit
import os
import signal
import weakref

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

_data_workers: weakref.WeakSet = weakref.WeakSet()


class WorkerTrackingDataLoader(DataLoader):
    """A DataLoader whose worker processes are remembered, so that the exit hook ends these
    and no other process (:func:`_end_data_workers`)."""

    def _get_iterator(self) -> _BaseDataLoaderIter:
        iterator = super()._get_iterator()
        for worker in getattr(iterator, "_workers", ()):
            _data_workers.add(worker)
        return iterator


def _end_data_workers() -> None:
    """At exit, kill this module's data workers still alive (persistent ones outlive
    ``fit``). multiprocessing's own exit handler terminates daemonic children with SIGTERM
    and then joins them, and these workers ignore SIGTERM (:func:`leave_stop_signals_to_main`):
    it would wait forever. Other children (a library user's own) are left to multiprocessing,
    whose SIGTERM lets them clean up."""
    children = [p for p in list(_data_workers) if p.is_alive()]
    if children and hasattr(signal, "SIGCHLD"):
        # torch's SIGCHLD handler would report each killed worker as a failure
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for proc in children:
        proc.kill()


_exit_hook_registered = False


def register_exit_hook() -> None:
    global _exit_hook_registered
    if not _exit_hook_registered:
        # registered after multiprocessing's own handler, so it runs before it (LIFO)
        atexit.register(_end_data_workers)
        _exit_hook_registered = True


def leave_stop_signals_to_main(worker_id: int) -> None:
    """A data worker ignores the stop signals a scheduler sends every process of a job
    (SIGTERM, SIGHUP, SIGUSR1/2): the main process stops the run cleanly and ends its workers,
    while a worker they killed would crash the run before it saved (Ctrl-C's SIGINT the
    workers already leave to it)."""
    from protein_performer.utils.interrupts import TERMINATING

    for sig in TERMINATING:
        signal.signal(sig, signal.SIG_IGN)
    if os.environ.get("PL_SEED_WORKERS") == "1":  # what Lightning's own worker_init_fn does
        from lightning_fabric.utilities.seed import pl_worker_init_function

        pl_worker_init_function(worker_id)
