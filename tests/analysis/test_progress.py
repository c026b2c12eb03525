"""Progress lines for redirected logs."""

from __future__ import annotations

import io

from protein_performer.analysis.progress import LineProgress


def test_line_progress_prints_plain_lines() -> None:
    out = io.StringIO()
    items = list(LineProgress(range(3), None, "extract", "protein", every_s=0.0, stream=out))
    assert items == [0, 1, 2]
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("extract: 1/3 proteins, ") and "\r" not in out.getvalue()
    assert lines[-1].startswith("extract: 3/3 proteins")
    assert len(lines) == 3  # the last update's line is not repeated by close
    quiet = io.StringIO()
    bar = LineProgress(None, 10, "scoring", "site", every_s=3600.0, stream=quiet)
    bar.update(4)
    bar.close()
    assert quiet.getvalue() == ""  # nothing within the interval


def test_line_progress_plural_of_batch() -> None:
    out = io.StringIO()
    list(LineProgress(range(2), None, "evaluating", "batch", every_s=0.0, stream=out))
    assert out.getvalue().splitlines()[-1].startswith("evaluating: 2/2 batches, ")
