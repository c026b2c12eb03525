"""Checks of one setting's value, worded alike in every room: one-line
:class:`~protein_performer.errors.ConfigError` messages naming the key."""

from __future__ import annotations

import numbers
from collections.abc import Iterable

from protein_performer.errors import ConfigError


def check_choice(key: str, value: object, choices: Iterable[str]) -> str:
    """``value`` when it is one of ``choices``, else ``KEY='VALUE' is not valid; choose one
    of: A, B``."""
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(choices)}")
    return str(value)


def check_counts(key: str, value: object, words: Iterable[str] = ()) -> tuple[int, ...] | None:
    """``value`` as a tuple of whole numbers >= 1: one number, or a non-empty list of distinct
    ones (Hydra's ``[1,64]``); None for None or one of ``words`` (the caller resolves those).
    Anything else: ``KEY must be ...`` naming the value."""
    words = tuple(words)
    if value is None or (isinstance(value, str) and value in words):
        return None
    many = not isinstance(value, (str, bytes)) and isinstance(value, Iterable)
    items = list(value) if many else [value]  # type: ignore[arg-type]
    whole = all(
        not isinstance(v, bool) and isinstance(v, numbers.Integral) and v >= 1 for v in items
    )
    if not items or not whole or len({int(v) for v in items}) < len(items):
        said = ", ".join([*words, "null"]) if words else "null"
        raise ConfigError(
            f"{key} must be {said}, a whole number >= 1 or a list of distinct ones, such as 16 "
            f"or [1,64] (got {value!r})"
        )
    return tuple(int(v) for v in items)


def check_fraction(key: str, value: object, *, allow_none: bool = False) -> float | None:
    """``value`` as a float when it is a number from 0 to 1 (None passes with ``allow_none``),
    else ``KEY must be a number from 0 to 1``."""
    if value is None and allow_none:
        return None
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not number or not 0 <= value <= 1:  # type: ignore[operator]
        said = " or null" if allow_none else ""
        raise ConfigError(f"{key} must be a number from 0 to 1{said} (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def check_int(key: str, value: object, minimum: int, *, optional: bool = False) -> int | None:
    """``value`` as an int when it is a whole number >= ``minimum`` (None passes when
    ``optional``), else ``KEY must be an integer >= MINIMUM``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        said = " or null" if optional else ""
        raise ConfigError(f"{key} must be an integer >= {minimum}{said} (got {value!r})")
    return int(value)
