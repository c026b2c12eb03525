"""Look inside a trained model: attention maps and representations (:mod:`.extraction`), amino-acid
similarity views against BLOSUM62 (:mod:`.similarity`), figures (:mod:`.figures`).

From Python::

    from protein_performer.analysis import load_for_analysis, read_proteins, attention_maps
    model, alphabet, meta = load_for_analysis("run/checkpoints/best.ckpt")
    (protein,) = read_proteins("BPT1_BOVIN.fasta", alphabet)
    maps = attention_maps(model, protein, alphabet)  # (layers, heads, L, L)
    scores = score_mutants(model, alphabet, "MKTAYIAKQR", ["K2A", "T3C:A4G"])  # ESM-1v rules
    # a causal checkpoint: sequence log-likelihoods and sampling
    ll = log_likelihood(causal_model, alphabet, "MKTAYIAKQR")
    samples = generate(causal_model, alphabet, n=10, prompt="M", seed=0)

Results come from the model in eval mode (no dropout), whatever mode it is in; its mode is
left as it was.

The CLI commands ``extract``, ``aa-similarity``, ``plot-heads``, ``score`` and ``generate``
are :func:`.commands.run_command` on their configs.
"""

from protein_performer.analysis.dms.marginals import (
    log_likelihood,
    log_likelihoods,
    pseudo_log_likelihood,
    score_mutants,
)
from protein_performer.analysis.extraction import (
    attention_maps,
    extract,
    load_for_analysis,
    representations,
)
from protein_performer.analysis.generation import generate
from protein_performer.analysis.inputs import Protein, read_proteins
from protein_performer.analysis.similarity import aa_similarity, blosum62, sample_proteins

__all__ = [
    "Protein",
    "aa_similarity",
    "attention_maps",
    "blosum62",
    "extract",
    "generate",
    "load_for_analysis",
    "log_likelihood",
    "log_likelihoods",
    "pseudo_log_likelihood",
    "read_proteins",
    "representations",
    "sample_proteins",
    "score_mutants",
]
