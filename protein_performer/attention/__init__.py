"""Attention kinds behind one interface (:class:`AttentionKind`): FAVOR+ random features, exact
softmax, local windows, Taylor and Hedgehog linear attention, registered by name
(:data:`ATTENTION_CLASSES`, :func:`build_attention`).

Everything here is plain torch and knows nothing about proteins.
"""

from .base import AttentionKind, AttentionOptions
from .exact import ExactAttention, exact_attention
from .favor import FavorAttention, redraw_all
from .hedgehog import HedgehogAttention
from .local import LocalAttention
from .registry import ATTENTION_CLASSES, attention_class, attention_slots, build_attention
from .taylor import TaylorAttention

__all__ = [
    "ATTENTION_CLASSES",
    "AttentionKind",
    "AttentionOptions",
    "ExactAttention",
    "FavorAttention",
    "HedgehogAttention",
    "LocalAttention",
    "TaylorAttention",
    "attention_class",
    "attention_slots",
    "build_attention",
    "exact_attention",
    "redraw_all",
]
