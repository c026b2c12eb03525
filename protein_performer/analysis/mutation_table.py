"""Moved to :mod:`protein_performer.analysis.dms.table`; this name is kept for one release."""

import sys

from protein_performer.analysis.dms import table

sys.modules[__name__] = table
