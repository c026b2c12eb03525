"""Checks of one setting's value, worded alike in every room: one-line
:class:`~protein_performer.errors.ConfigError` messages naming the key."""

from __future__ import annotations

from collections.abc import Iterable

from protein_performer.errors import ConfigError


def check_choice(key: str, value: object, choices: Iterable[str]) -> str:
    """``value`` when it is one of ``choices``, else ``KEY='VALUE' is not valid; choose one
    of: A, B``."""
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(choices)}")
    return str(value)
