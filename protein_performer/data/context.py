"""Moved to :mod:`protein_performer.data.context_windows`; this name is kept for one release."""

import sys

from protein_performer.data import context_windows

sys.modules[__name__] = context_windows
