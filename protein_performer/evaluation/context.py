"""Moved to :mod:`protein_performer.evaluation.context_perplexity`; this name is kept for one release."""

import sys

from protein_performer.evaluation import context_perplexity

sys.modules[__name__] = context_perplexity
