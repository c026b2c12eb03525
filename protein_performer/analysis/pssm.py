"""Moved to :mod:`protein_performer.analysis.dms.profile`; this name is kept for one release."""

import sys

from protein_performer.analysis.dms import profile

sys.modules[__name__] = profile
