"""SIGTERM handled like Ctrl-C: an exception, so that every command's cleanup runs (temporary
directories removed, child processes stopped) instead of the process dying mid-write.

Kept free of heavy imports: the CLI installs it for every command.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP, SIGUSR1/2) turned into an exception; the exit code is 128 + the
    signal's number (143 for SIGTERM) instead of Ctrl-C's 130."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = int(signum)


def raise_terminated(signum: int, frame: Any) -> None:
    """The signal handler that turns a terminating signal into :class:`Terminated`."""
    raise Terminated(signum)


#: Signals that end a command like SIGTERM (their default action kills it mid-write). Except
#: SIGTERM, each is taken over only where nothing else handles it (:func:`takes_over`).
TERMINATING = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)


def takes_over(sig: int) -> bool:
    """Whether a stop handler may replace ``sig``'s: always for SIGTERM; for the others only
    while the default (killing) action is set, so an ignored one (``nohup``'s SIGHUP) stays
    ignored and one a library or the user handles (submitit's SIGUSR2) stays theirs."""
    return sig == signal.SIGTERM or signal.getsignal(sig) is signal.SIG_DFL


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While active, SIGTERM (and SIGHUP, SIGUSR1/2 where nothing else handles them) raises
    :class:`Terminated` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in TERMINATING:
        if takes_over(sig):
            previous[sig] = signal.signal(sig, raise_terminated)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def exit_code(exc: KeyboardInterrupt) -> int:
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def stopped_line(exc: KeyboardInterrupt) -> str:
    """What a command interrupted by Ctrl-C or SIGTERM says last (every output is written to
    a temporary name and renamed when whole; a download's kept ``.part`` has its own name)."""
    word = "terminated" if isinstance(exc, Terminated) else "interrupted"
    return f"{word} (nothing is left half-written under an output's name)"


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Stop signals (Ctrl-C and the :data:`TERMINATING` ones) wait until the block ends, then
    act as they would have (their handler runs, or their default action): for steps that
    must happen together (two renames that make one output). Main thread only (elsewhere
    the block runs as it is); an ignored signal stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, *TERMINATING):
        handler = signal.getsignal(sig)
        if handler is signal.SIG_IGN or handler is None:
            continue
        previous[sig] = signal.signal(sig, lambda signum, frame: received.append(signum))
    try:
        yield
    except BaseException:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        raise  # the block's own error says more than a stop asked for meanwhile
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    if received:  # the first one acts now
        signum = received[0]
        handler = previous[signum]
        if callable(handler):
            handler(signum, None)
        else:  # SIG_DFL: its default action, now
            os.kill(os.getpid(), signum)
