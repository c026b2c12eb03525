"""One file per command. The analysis commands take their plain config (``ExtractConfig``, …),
check their output folder and inputs before computing, write into a temporary folder renamed at
the end (a failure or Ctrl-C leaves nothing), and return a result with ``format()`` (text) and
``to_dict()`` (JSON). Imported on use: ``data stats`` loads no model code."""

from __future__ import annotations

import importlib
from typing import Any

#: analysis command -> (module under this package, function)
COMMANDS = {
    "generate": ("generate", "run_generate"),
    "extract": ("extract", "run_extract"),
    "aa-similarity": ("aa_similarity", "run_aa_similarity"),
    "plot-heads": ("plot_heads", "run_plot_heads"),
    "score": ("score", "run_score"),
}


def run_command(command: str, cfg: Any) -> Any:
    """Run an analysis command on its config (see :data:`COMMANDS`); returns its
    :class:`~protein_performer.cli.commands.common.CommandResult`."""
    module, function = COMMANDS[command]
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)(cfg)
