"""Moved to :mod:`protein_performer.analysis.alignment_heads`; this name is kept for one release."""

import sys

from protein_performer.analysis import alignment_heads

sys.modules[__name__] = alignment_heads
