"""The ``protein-performer`` console script.

The command-line module is imported inside the interrupt handling: its imports (torch,
Biopython, Lightning) take seconds, and a Ctrl-C during them would otherwise end in an import
traceback instead of the one line every later interrupt gets.
"""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from protein_performer.cli.main import main as cli_main
    except KeyboardInterrupt:
        # a process of a multi-process run may be the one starting: claim nothing about files
        print("interrupted (while starting)", file=sys.stderr)
        return 130
    return cli_main()
