"""Evaluation of a trained model: held-out perplexity and homolog-conditioned context scoring."""
