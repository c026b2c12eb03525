"""What the ``data`` subcommands share for their output and help: :func:`print_json` (a
manifest or summary as indented JSON on stdout, or written atomically to a file, as
``data stats --output`` does) and :data:`COMPRESSIONS`, the FASTA compressions
:class:`~protein_performer.data.fasta.FastaReader` reads, as their ``--help`` names them."""

from __future__ import annotations

import json
from typing import Any

from protein_performer.utils.atomic import write_text_atomic


def print_json(obj: Any, out: str | None) -> None:
    """``obj`` as indented JSON: into ``out`` (atomically) or on stdout."""
    text = json.dumps(obj, indent=2, default=str)
    if out:
        write_text_atomic(out, text + "\n")
    else:
        print(text)


COMPRESSIONS = "plain, gzip, bzip2 or xz"
