"""utils.checks: one setting's value checked, worded alike in every room."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import ListConfig

from protein_performer.errors import ConfigError
from protein_performer.utils.checks import check_counts


def test_check_counts_gives_a_tuple_of_whole_numbers_or_none_for_its_words():
    assert check_counts("k", 3) == (3,) and check_counts("k", np.int64(2)) == (2,)
    assert check_counts("k", [1, 64]) == (1, 64) and check_counts("k", (64, 1)) == (64, 1)
    assert check_counts("k", ListConfig([4, 8])) == (4, 8)
    assert check_counts("k", np.array([1, 64]), ("auto",)) == (1, 64)  # from Python: an array
    assert all(type(v) is int for v in check_counts("k", [np.int64(3), 5]))  # plain ints (JSON)
    assert check_counts("k", None) is None and check_counts("k", "auto", ("auto",)) is None
    for bad in (0, -2, 1.5, True, "auto", "3", [], [2, 2], [2, np.int64(2)], [1, 0], [1, None]):
        with pytest.raises(ConfigError, match=r"^k must be null, a whole number >= 1 or a list"):
            check_counts("k", bad)
    with pytest.raises(ConfigError, match=r"k must be auto, null, .*such as 16 or \[1,64\]"):
        check_counts("k", "all", ("auto",))


def test_check_int_takes_whole_numbers_from_the_minimum():
    from protein_performer.utils.checks import check_int

    assert check_int("k", 3, 3) == 3 and check_int("k", np.int64(7), 1) == 7
    assert check_int("k", None, 1, optional=True) is None
    for bad in (2, 3.0, True, "4", None):
        with pytest.raises(ConfigError, match=rf"^k must be an integer >= 3 \(got {bad!r}\)$"):
            check_int("k", bad, 3)
    with pytest.raises(ConfigError, match=r"^k must be an integer >= 1 or null \(got 0\)$"):
        check_int("k", 0, 1, optional=True)


def test_check_fraction_takes_numbers_from_0_to_1():
    from protein_performer.utils.checks import check_fraction

    assert check_fraction("f", 0) == 0.0 and check_fraction("f", 1) == 1.0
    assert check_fraction("f", np.float32(0.25)) == 0.25
    assert check_fraction("f", None, allow_none=True) is None
    for bad in (-0.01, 1.01, True, "0.5", None, float("nan")):
        with pytest.raises(ConfigError, match=r"^f must be a number from 0 to 1 \(got "):
            check_fraction("f", bad)
    with pytest.raises(ConfigError, match=r"^f must be a number from 0 to 1 or null \(got 2\)$"):
        check_fraction("f", 2, allow_none=True)
