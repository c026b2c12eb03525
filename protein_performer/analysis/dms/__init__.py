"""Deep mutational scans scored by a model: variants and their checks (:mod:`.variants`), the
model's marginals and the baselines (:mod:`.marginals`), the mutations table (:mod:`.table`), a
whole scan (:mod:`.scan`), homologs and alignments as context with their profile
(:mod:`.homologs`, :mod:`.profile`)."""
