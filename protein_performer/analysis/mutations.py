"""Moved to :mod:`protein_performer.analysis.dms.marginals` (scoring) and
:mod:`protein_performer.analysis.dms.variants` (parsing); this name is kept for one release."""

from protein_performer.analysis.dms.marginals import *  # noqa: F403
from protein_performer.analysis.dms.variants import *  # noqa: F403
