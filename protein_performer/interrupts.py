"""SIGTERM handled like Ctrl-C: an exception, so that every command's cleanup runs (temporary
directories removed, child processes stopped) instead of the process dying mid-write.

Kept free of heavy imports: the CLI installs it for every command.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM turned into an exception (exit code 143 instead of Ctrl-C's 130)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While active, SIGTERM raises :class:`Terminated` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def exit_code(exc: KeyboardInterrupt) -> int:
    return 143 if isinstance(exc, Terminated) else 130


def stopped_line(exc: KeyboardInterrupt) -> str:
    """What a command interrupted by Ctrl-C or SIGTERM says last (every output is written to
    a temporary name and renamed when whole; a download's kept ``.part`` has its own name)."""
    word = "terminated" if isinstance(exc, Terminated) else "interrupted"
    return f"{word} (nothing is left half-written under an output's name)"
