"""Progress of long commands on stderr: a tqdm bar on a terminal; a redirected log gets a plain
line every ``every_s`` seconds (and one at the end) instead of carriage returns."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class LineProgress:
    """The part of tqdm's interface the commands use (iterate, ``update``, ``close``)."""

    def __init__(
        self,
        iterable: Iterable[Any] | None,
        total: int | None,
        desc: str,
        unit: str,
        every_s: float = 30.0,
        stream: Any = None,
    ) -> None:
        self.iterable, self.desc, self.unit, self.every_s = iterable, desc, unit, every_s
        self.total = total if total is not None else _len(iterable)
        self.stream = stream or sys.stderr
        self.n = self._shown = 0
        self._t0 = self._last = time.monotonic()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        assert self.iterable is not None
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._line(now)

    def set_postfix(self, **values: Any) -> None:
        """Shown after the count on the next line (as tqdm's postfix)."""
        self._postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def _line(self, now: float) -> None:
        self._shown = self.n
        of = f"/{self.total:,}" if self.total else ""
        postfix = f", {self._postfix}" if getattr(self, "_postfix", "") else ""
        print(
            f"{self.desc}: {self.n:,}{of} {_plural(self.unit)}, {now - self._t0:.0f} s{postfix}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        # the final count once, unless the last line already showed it
        if self.n and self.n != self._shown and time.monotonic() - self._t0 >= self.every_s:
            self._line(time.monotonic())


def _len(iterable: Any) -> int | None:
    try:
        return len(iterable)
    except TypeError:
        return None


def progress(
    iterable: Iterable[T] | None = None,
    *,
    total: int | None = None,
    desc: str,
    unit: str,
    enabled: bool = True,
    tty_unit: str | None = None,
    **bar: Any,
) -> Any:
    """A progress wrapper for ``iterable`` (or a manual one with ``total``; a context manager
    too). ``tty_unit`` (e.g. ``B`` for tqdm's scaled bytes) and ``bar`` (``unit_scale=True``,
    ``leave=True``...): tqdm's settings for the terminal."""
    from tqdm.auto import tqdm

    if not enabled:
        return tqdm(iterable, total=total, disable=True)
    if sys.stderr.isatty():
        options = {"desc": desc, "unit": tty_unit or unit, "leave": False, **bar}
        return tqdm(iterable, total=total, **options)
    return LineProgress(iterable, total, desc, unit)


def _plural(unit: str) -> str:
    """``batch`` -> ``batches``, ``protein`` -> ``proteins``."""
    return unit + ("es" if unit.endswith(("s", "x", "ch", "sh")) else "s")
