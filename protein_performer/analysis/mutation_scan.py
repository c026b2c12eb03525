"""Moved to :mod:`protein_performer.analysis.dms.scan`; this name is kept for one release."""

import sys

from protein_performer.analysis.dms import scan

sys.modules[__name__] = scan
