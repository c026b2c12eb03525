"""Exception types shared by every room; the CLI prints them as one line."""

from __future__ import annotations


class ProteinPerformerError(Exception):
    """Base class for user-facing errors (bad input, bad config). Message is one line."""


class DataError(ProteinPerformerError, ValueError):
    """Malformed or unreadable input data (FASTA, shards, manifests)."""

    def __init__(
        self,
        problem: str,
        *,
        path: object | None = None,
        record: int | None = None,
        record_id: str | None = None,
    ) -> None:
        self.problem = problem
        self.path = None if path is None else str(path)
        self.record = record
        self.record_id = record_id
        super().__init__(self._format())

    def with_options(self, names: dict[str, str]) -> DataError:
        """The same error with option names of the message (``invalid=``) renamed to the
        keys of the command at hand (``data.invalid=``, ``--invalid ``)."""
        import re

        problem = self.problem
        for old, new in names.items():
            problem = re.sub(rf"(?<![\w.-]){re.escape(old)}", new, problem)
        err = type(self).__new__(type(self))
        DataError.__init__(
            err, problem, path=self.path, record=self.record, record_id=self.record_id
        )
        return err

    def _format(self) -> str:
        parts = []
        if self.path is not None:
            parts.append(self.path)
        if self.record is not None:
            rec = f"record {self.record}"
            if self.record_id:
                rec += f" ({_printable(self.record_id)})"
            parts.append(rec)
        elif self.record_id:
            parts.append(_printable(self.record_id))
        parts.append(self.problem)
        return ": ".join(parts)


def _printable(text: str) -> str:
    """``text`` with control characters escaped (a header's NUL or terminal escape would
    reach the terminal raw), cut at 100 characters."""
    if text.isprintable():
        return text if len(text) <= 100 else text[:97] + "..."
    escaped = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return escaped if len(escaped) <= 100 else escaped[:97] + "..."


class ConfigError(ProteinPerformerError, ValueError):
    """Invalid configuration (unknown key, wrong type, out-of-range value)."""


class TrainingDiverged(ProteinPerformerError):
    """The training loss became non-finite: the run stops before that step's update."""
