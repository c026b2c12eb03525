"""Look inside a trained model: attention maps and representations (:mod:`.extraction`),
amino-acid similarity views against BLOSUM62 (:mod:`.similarity`; across homologs:
:mod:`.cross_homolog`), the layer × head view and the attention on aligned residues
(:mod:`.head_view`, :mod:`.alignment_heads`), figures (:mod:`.figures`), sampling from a causal
model (:mod:`.generation`), and deep mutational scans scored by the model (:mod:`.dms`:
variants, marginals and baselines, the mutations table, homologs as context with their profile,
whole scans). ``score_mutants(..., context=HOMOLOGS)`` scores with the wild type's homologs in
the window and adds their profile (PSSM) as a baseline.

From Python::

    from protein_performer.analysis import load_for_analysis, read_proteins, attention_maps
    model, alphabet, meta = load_for_analysis("run/checkpoints/best.ckpt")
    (protein,) = read_proteins("BPT1_BOVIN.fasta", alphabet)
    maps = attention_maps(model, protein, alphabet)  # (layers, heads, L, L)
    scores = score_mutants(model, alphabet, "MKTAYIAKQR", ["K2A", "T3C:A4G"])  # ESM-1v rules
    # the wild type's homologs (a search's hits.fasta, an a3m, ...) before it in the window;
    # adds the columns masked_marginal_context, context_retrieval and pssm
    scores = score_mutants(model, alphabet, "MKTAYIAKQR", ["K2A"], context="hits.fasta")
    # a causal checkpoint: sequence log-likelihoods and sampling
    ll = log_likelihood(causal_model, alphabet, "MKTAYIAKQR")
    samples = generate(causal_model, alphabet, n=10, prompt="M", seed=0)

Results come from the model in eval mode (no dropout), whatever mode it is in; its mode is
left as it was.

The CLI commands ``extract``, ``aa-similarity``, ``plot-heads``, ``score`` and ``generate``
are :func:`protein_performer.cli.commands.run_command` on their configs.
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
