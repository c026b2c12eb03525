"""Moved to :mod:`protein_performer.analysis.dms.homologs`; this name is kept for one release."""

import sys

from protein_performer.analysis.dms import homologs

sys.modules[__name__] = homologs
