"""Deterministic train/val/test assignment by hashing a record key (UniRef cluster id, accession).

The split of a record depends only on ``(seed, key)``: not on file order, other records or the
machine, so the same protein is in the same split in every run and in every shard.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable

SPLITS: tuple[str, str, str] = ("train", "val", "test")


def parse_fractions(fractions: Iterable[float] | str) -> tuple[float, float, float]:
    """Validate ``(train, val, test)`` fractions (or ``"0.9,0.05,0.05"``): ≥ 0, summing to 1."""
    if isinstance(fractions, str):
        try:
            values = [float(x) for x in fractions.split(",")]
        except ValueError:
            raise ValueError(f"split fractions {fractions!r} are not numbers") from None
    else:
        values = [float(x) for x in fractions]
    if len(values) != 3:
        raise ValueError(f"split fractions need 3 values (train,val,test), got {len(values)}")
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ValueError(f"split fractions must be finite and >= 0, got {values}")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must sum to 1, got {values} (sum {sum(values):g})")
    return values[0], values[1], values[2]


def hash_unit(key: str, seed: int) -> float:
    """Map ``(seed, key)`` to a uniform number in ``[0, 1)`` (blake2b, platform independent)."""
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class SplitAssigner:
    """Callable ``key -> "train" | "val" | "test"`` for fixed fractions and seed."""

    def __init__(self, fractions: Iterable[float] | str = (0.9, 0.05, 0.05), seed: int = 0):
        self.fractions = parse_fractions(fractions)
        self.seed = int(seed)
        t, v, _ = self.fractions
        self._cuts = (t, t + v)

    def __call__(self, key: str) -> str:
        u = hash_unit(key, self.seed)
        if u < self._cuts[0]:
            return "train"
        if u < self._cuts[1]:
            return "val"
        return "test"
