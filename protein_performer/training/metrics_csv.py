"""``metrics.csv`` that survives a resume: one file per run directory, appended to.

Lightning's CSVLogger deletes an existing ``metrics.csv`` when a logger starts. A resumed run
keeps it instead: rows logged before the checkpoint's step stay, rows of steps after it (work
lost when a run died after its last checkpoint, about to be redone) are dropped, and new rows are
appended under the union of the columns.
"""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path

from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from protein_performer.utils.atomic import write_text_atomic

log = logging.getLogger(__name__)


def _step(row: dict[str, str]) -> float:
    try:
        return float(row.get("step") or "nan")
    except ValueError:
        return float("nan")


class _ResumingWriter(ExperimentWriter):
    def __init__(self, log_dir: str, resume_step: int | None) -> None:
        self._resume_step = resume_step
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if self._resume_step is None or not path.is_file():
            return  # a new run writes a new file (the run directory was checked to hold none)
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            keys = list(reader.fieldnames or [])
            rows = list(reader)
        keep = [r for r in rows if not _step(r) >= self._resume_step]
        if len(keep) != len(rows):
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
            writer.writeheader()
            writer.writerows(keep)
            write_text_atomic(path, buf.getvalue())
            log.warning(
                "%s: dropped %d rows logged after step %d (redone by this resumed run)",
                path,
                len(rows) - len(keep),
                self._resume_step,
            )
        self.metrics_keys = keys


class RunCSVLogger(CSVLogger):
    """CSVLogger writing ``RUN/metrics.csv``; ``resume_step`` (the checkpoint's global step)
    makes it continue an existing file instead of replacing it."""

    def __init__(self, run_dir: str | Path, resume_step: int | None = None) -> None:
        super().__init__(save_dir=str(run_dir), name="", version="")
        self._resume_step = resume_step

    @property
    def experiment(self) -> ExperimentWriter:  # type: ignore[override]
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ResumingWriter(self.log_dir, self._resume_step)
        return self._experiment
