"""Moved to :mod:`protein_performer.model.metrics` (training, evaluation and the benchmarks
share them); this old import path keeps working for one release."""

from protein_performer.model.metrics import (  # noqa: F401
    MLM_INPUT_KINDS,
    TokenStats,
    add_next_token_counts,
    alignment_nll,
    batch_sums,
    causal_unigram_sums,
    lm_token_stats,
    mlm_input_kind_stats,
    perplexity,
    unigram_log_probs,
)
