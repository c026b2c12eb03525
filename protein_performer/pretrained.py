"""Models from Python, as ESM's ``esm.pretrained.load_model_and_alphabet``:
``model, alphabet = protein_performer.load("default")``."""

from __future__ import annotations

import os
from pathlib import Path

from protein_performer.data.alphabet import Alphabet
from protein_performer.errors import ConfigError
from protein_performer.model.checkpoints import SHIPPED_CHECKPOINTS, load_model
from protein_performer.model.performer import ProteinLM

#: The checkpoints shipped with the package, by name -> path in the project (data/pretrained/).
SHIPPED = SHIPPED_CHECKPOINTS


def load(checkpoint: str | os.PathLike[str] = "default") -> tuple[ProteinLM, Alphabet]:
    """The model of a checkpoint, in eval mode on the CPU, and its alphabet.

    ``checkpoint``: the name of a shipped one (``"default"``: data/pretrained/README.md) or
    the path of a checkpoint written by protein-performer (``train``'s ``best.ckpt``, say),
    read as the CLI reads ``checkpoint=``: ``torch.load(weights_only=True)``, nothing but
    tensors and plain data. A bare word that is neither is a :class:`ConfigError` naming the
    shipped ones; a missing or unreadable file a :class:`DataError` naming the file.
    """
    text = os.fspath(checkpoint)
    path: str | Path = text
    # a file of that name is the user's (as checkpoint=default); else a bare word is a name
    if not Path(text).exists() and not Path(text).suffix and "/" not in text and os.sep not in text:
        if text not in SHIPPED:
            raise ConfigError(
                f"no shipped checkpoint named {text!r}: the names are {', '.join(SHIPPED)} "
                "(or give the path of a checkpoint file)"
            )
        path = text  # load_model finds a shipped one by its name
    model, meta = load_model(path)
    return model, Alphabet.from_dict(meta["alphabet"])
