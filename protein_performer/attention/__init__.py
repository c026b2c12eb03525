"""FAVOR attention core: random-feature (Performer) attention and the exact baseline.

Public API: :class:`FavorAttention`, :func:`exact_attention`, :func:`redraw_all`.
Everything here is plain torch and knows nothing about proteins.
"""

from .exact import exact_attention
from .favor import FavorAttention, redraw_all

__all__ = ["FavorAttention", "exact_attention", "redraw_all"]
