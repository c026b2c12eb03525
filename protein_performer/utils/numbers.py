"""Numbers as reports print them and as stored settings compare them."""

from __future__ import annotations

import math
from typing import Any


def number_text(x: float | None, fmt: str) -> str:
    """``x`` formatted with ``fmt``; ``n/a`` for None, and 4 significant digits for a huge
    fixed-point value (a diverged model's perplexity, not 300 digits)."""
    if x is None:
        return "n/a"
    if math.isfinite(x) and abs(x) >= 1e6 and fmt.endswith("f"):
        return format(x, ".4g")
    return format(x, fmt)


def same_number(a: Any, b: Any) -> bool:
    """``a`` and ``b`` equal as numbers (to 1e-9 relative; lists element by element), else
    as values: a setting given again as 0.1 or 1e-1, an int or a float, is the same."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_number(x, y) for x, y in zip(a, b, strict=True))
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except (TypeError, ValueError):
        return a == b
