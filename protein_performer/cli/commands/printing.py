"""What the data commands share: the compressions they read, and JSON printed or written
atomically."""

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
