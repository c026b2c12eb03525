"""Progress lines for redirected logs."""

from __future__ import annotations

import io

from protein_performer.utils.progress import LineProgress


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


def test_the_data_commands_progress_in_a_log_too():
    """preprocess, stats and FASTA reading used tqdm directly: silent in a log for minutes
    on large files. They use this progress now: a context manager with tqdm's postfix."""
    import io

    from protein_performer.utils.progress import LineProgress

    out = io.StringIO()
    with LineProgress(None, 10, "preprocess", "byte", every_s=0.0, stream=out) as bar:
        bar.update(3)
        bar.set_postfix(rec_per_s="1,000")
        bar.update(2)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("preprocess: 3/10 bytes, 0 s")
    assert lines[1].endswith("rec_per_s=1,000")
