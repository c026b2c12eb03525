"""The attention kinds by name: a model's ``attention`` setting (and ``local`` for the local
heads of a hybrid block) -> the :class:`~.base.AttentionKind` that computes it."""

from __future__ import annotations

from .base import AttentionKind, AttentionOptions
from .exact import ExactAttention
from .favor import FavorAttention
from .hedgehog import HedgehogAttention
from .local import LocalAttention
from .taylor import TaylorAttention

#: name -> class; ``performer_*`` share FAVOR's class, the kernel is the name's suffix.
ATTENTION_CLASSES: dict[str, type[AttentionKind]] = {
    "performer_relu": FavorAttention,
    "performer_softmax": FavorAttention,
    "taylor": TaylorAttention,
    "hedgehog": HedgehogAttention,
    "transformer": ExactAttention,
    "local": LocalAttention,
}


def attention_class(name: str) -> type[AttentionKind]:
    """The class registered as ``name`` (ValueError naming the registered ones)."""
    try:
        return ATTENTION_CLASSES[name]
    except KeyError:
        raise ValueError(
            f"no attention kind {name!r}; registered: {', '.join(ATTENTION_CLASSES)}"
        ) from None


def build_attention(name: str, options: AttentionOptions) -> AttentionKind:
    """The kind ``name`` built with ``options`` (each kind reads the options it uses)."""
    return attention_class(name).from_options(name, options)


def attention_slots() -> tuple[str, ...]:
    """Every kind's :attr:`~.base.AttentionKind.slot`: the attributes a block that holds one
    of them reserves (so that, whatever it holds, ``block.favor`` or ``block.maps`` reads)."""
    return tuple(dict.fromkeys(cls.slot for cls in ATTENTION_CLASSES.values()))


__all__ = ["ATTENTION_CLASSES", "attention_class", "attention_slots", "build_attention"]
