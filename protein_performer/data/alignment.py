"""Moved to :mod:`protein_performer.data.pairwise_alignment`; this name is kept for one release."""

import sys

from protein_performer.data import pairwise_alignment

sys.modules[__name__] = pairwise_alignment
