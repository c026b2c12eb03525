"""PSSM baseline: counts of a toy alignment and its log-odds by hand, homologs that do not
align above chance left out, the query-only fallback, and mutant scores as S[mt] - S[wt]."""

from __future__ import annotations

import math

import numpy as np
import pytest

from protein_performer.analysis.dms.profile import COLUMNS, build_pssm, column_counts, pssm_scores
from protein_performer.data.simulate import blosum62_model, simulate_records
from protein_performer.errors import DataError

Q = "MKVLAWHCDE"
I = {aa: i for i, aa in enumerate(COLUMNS)}  # noqa: E741


def test_counts_of_a_toy_alignment():
    homologs = ["MKILAWHCDE", "MRVLAWHCDE", "GGGGGLAWHCDE"]  # V3I, K2R, a local hit at 4-10
    counts, info = column_counts(Q, homologs, min_z=None)
    expected = np.zeros((len(Q), 20))
    for i, aa in enumerate(Q):
        expected[i, I[aa]] = 4 if i >= 3 else 3  # query + 2 (+1 where the third aligns)
    expected[1, I["K"]], expected[1, I["R"]] = 2, 1
    expected[2, I["V"]], expected[2, I["I"]] = 2, 1
    np.testing.assert_array_equal(counts, expected)
    assert [h["used"] for h in info] == [True, True, True]
    assert info[0]["identity"] == 0.9 and info[2]["coverage"] == 0.7
    without, _ = column_counts(Q, homologs, min_z=None, include_query=False)
    np.testing.assert_array_equal(without, expected - np.eye(20)[[I[a] for a in Q]])


def test_log_odds_by_hand():
    p = blosum62_model().q
    pssm = build_pssm(Q, ["MKILAWHCDE", "MRVLAWHCDE"], pseudocount_weight=0.0, min_z=None)
    # no pseudocounts: S = log2(f / p); position 2 holds K, K, R
    assert pssm.scores[1, I["K"]] == pytest.approx(math.log2((2 / 3) / p[I["K"]]))
    assert pssm.scores[1, I["R"]] == pytest.approx(math.log2((1 / 3) / p[I["R"]]))
    assert pssm.scores[1, I["A"]] == -math.inf
    assert pssm_scores(pssm, ["K2R"])[0] == pytest.approx(math.log2(0.5 * p[I["K"]] / p[I["R"]]))
    # β = 10: Q = (N f + β Σ_b f_b P(a|b)) / (N + β), by hand at position 3 (V, V, I)
    P = blosum62_model().transition  # P[b, a] = P(a|b)
    pssm = build_pssm(Q, ["MKILAWHCDE", "MRVLAWHCDE"], pseudocount_weight=10.0, min_z=None)
    for a in "VIL":
        g = (2 / 3) * P[I["V"], I[a]] + (1 / 3) * P[I["I"], I[a]]
        q = (3 * ({"V": 2 / 3, "I": 1 / 3}.get(a, 0.0)) + 10 * g) / 13
        assert pssm.frequencies[2, I[a]] == pytest.approx(q)
        assert pssm.scores[2, I[a]] == pytest.approx(math.log2(q / p[I[a]]))
    np.testing.assert_allclose(pssm.frequencies.sum(1), 1.0)


def _random(n: int, length: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    q = blosum62_model().q
    return ["".join(np.array(list(COLUMNS))[rng.choice(20, length, p=q)]) for _ in range(n)]


def test_unrelated_homologs_are_left_out_and_said_so():
    (query,) = _random(1, 120, 0)
    unrelated = _random(6, 120, 1)
    with pytest.raises(DataError) as e:
        build_pssm(query, unrelated)
    assert "\n" not in str(e.value) and "none of the 6 homologs aligns" in str(e.value)
    with pytest.raises(DataError, match="no homologs given"):
        build_pssm(query, [])
    # no z threshold: one-line all the same, for a homolog of which nothing aligns
    with pytest.raises(DataError, match=r"none of the 1 homologs aligns to the query at all"):
        build_pssm("MKVLAWHCDE", ["XXXX"], min_z=None)
    # the documented fallback: the query alone, with BLOSUM62 pseudocounts
    alone = build_pssm(query, unrelated, allow_query_only=True)
    assert alone.homologs_used == 0
    P, p = blosum62_model().transition, blosum62_model().q
    wt = I[query[5]]
    expected = (np.eye(20)[wt] + 10 * P[wt]) / 11
    np.testing.assert_allclose(alone.scores[5], np.log2(expected / p))


def test_family_members_are_used_and_random_ones_are_not():
    records = list(
        simulate_records(n_families=1, min_members=4, max_members=4, root_length_median=120,
                         substitution_rate=0.8, indel_rate=0.02, seed=2)
    )  # fmt: skip
    query, members = records[0][2], [r[2] for r in records[1:]]
    pssm = build_pssm(query, [*members, *_random(3, 120, 5)])
    assert [h["used"] for h in pssm.homologs] == [True] * 3 + [False] * 3
    assert all(h["z"] is None or h["z"] >= 5 for h in pssm.homologs[:3])
    # the query's own residue scores above the background at most positions
    own = pssm.scores[np.arange(len(query)), [I[a] for a in query]]
    assert (own > 0).mean() > 0.9


def test_mutant_scores():
    pssm = build_pssm(Q, ["MKILAWHCDE", "MRVLAWHCDE"], min_z=None)
    s = pssm.scores
    got = pssm_scores(pssm, ["K2R", "K2R:V3I", "WT", "K2K", "MKVLAWHCDEG"])
    assert got[0] == pytest.approx(s[1, I["R"]] - s[1, I["K"]])
    assert got[1] == pytest.approx(got[0] + s[2, I["I"]] - s[2, I["V"]])
    assert got[2] == 0 and got[3] == 0 and np.isnan(got[4])  # an insertion: no site
    assert got[0] > pssm_scores(pssm, ["K2W"])[0]  # R was seen there, W was not
    assert pssm_scores(pssm, ["K1R"], offset=0)[0] == pytest.approx(got[0])
    with pytest.raises(DataError, match="mutant 2 does not fit the wild type: K12R"):
        pssm_scores(pssm, ["K2R", "K12R"])
    with pytest.raises(ValueError, match="the sequence has K at 2"):
        pssm_scores(pssm, ["A2R"])


def _aligned(tmp_path, text: str, wild_type: str):
    from protein_performer.data.msa import read_msa

    path = tmp_path / "x.a3m"
    path.write_text(text)
    return read_msa(path, wild_type)


def test_alignment_profile_weighted_counts_by_hand(tmp_path):
    from protein_performer.analysis.dms.profile import alignment_profile

    # residues 2-6 of the wild type aligned; h1 and h2 are neighbours (4 of 5 shared, 0.8)
    wt = "MKVLAWH"
    msa = _aligned(tmp_path, ">q/2-6\nKVLAW\n>h1\nKILAW\n>h2\nKILAY\n>h3\nR-LGW\n", wt)
    pssm = alignment_profile(wt, msa, pseudocount_weight=0.0)
    # weights: query 1/2 (h1 shares 4/5 with it), h1 1/3 (query, h2), h2 1/2, h3 1
    np.testing.assert_allclose(pssm.weights, [1 / 3, 1 / 2, 1.0])
    assert pssm.params["neff"] == pytest.approx(1 / 2 + 1 / 3 + 1 / 2 + 1, abs=0.01)
    c = pssm.counts
    assert c[1, I["K"]] == pytest.approx(1 / 2 + 1 / 3 + 1 / 2) and c[1, I["R"]] == 1.0
    assert c[2, I["V"]] == pytest.approx(1 / 2) and c[2, I["I"]] == pytest.approx(5 / 6)
    assert c[2].sum() == pytest.approx(4 / 3)  # h3's gap is not counted
    # residues outside the alignment hold the query alone
    assert c[0, I["M"]] == 1.0 and c[0].sum() == 1.0 and c[6, I["H"]] == 1.0
    # no pseudocounts: S = log2(f / p)
    p = blosum62_model().q
    assert pssm.scores[2, I["I"]] == pytest.approx(math.log2((5 / 6) / (4 / 3) / p[I["I"]]))
    keep = np.array([True, True, False])
    assert alignment_profile(wt, msa, keep=keep).counts[1, I["R"]] == 0.0


def test_alignment_profile_scores_mutants_as_the_pssm_does(tmp_path):
    from protein_performer.analysis.dms.profile import alignment_profile

    wt = "MKVLAWH"
    msa = _aligned(tmp_path, ">q/2-6\nKVLAW\n>h1\nKILAW\n>h2\nRILAY\n>h3\n--LAW\n", wt)
    pssm = alignment_profile(wt, msa)
    got = pssm_scores(pssm, ["V3I", "K2R:W6Y", "M1A"])
    s = pssm.scores
    expected = [
        s[2, I["I"]] - s[2, I["V"]],
        s[1, I["R"]] - s[1, I["K"]] + s[5, I["Y"]] - s[5, I["W"]],
        s[0, I["A"]] - s[0, I["M"]],
    ]
    np.testing.assert_allclose(got, expected)
    assert got[0] > 0  # I is the commoner residue at 3 in the alignment


def test_identity_is_over_the_aligned_columns_not_the_query():
    # a local hit over 7 of the 10 query residues, all identical: 7/7, covering 7/10
    _, info = column_counts(Q, ["GGGGGLAWHCDE"], min_z=None)
    assert info[0]["identity"] == 1.0 and info[0]["coverage"] == 0.7
    # one substitution in the 7 aligned columns: 6/7
    _, info = column_counts(Q, ["GGGGGLAFHCDE"], min_z=None)
    assert info[0]["identity"] == round(6 / 7, 4) and info[0]["coverage"] == 0.7


def test_a_homolog_exactly_at_min_z_is_used():
    from protein_performer.analysis.pssm import alignment_z

    records = list(
        simulate_records(n_families=1, min_members=2, max_members=2, root_length_median=60,
                         substitution_rate=1.5, indel_rate=0.0, seed=4)
    )  # fmt: skip
    query, homolog = records[0][2], records[1][2]
    # column_counts draws homolog k's shuffles from default_rng([seed, k])
    _, z = alignment_z(query, homolog, 20, np.random.default_rng([0, 0]))
    assert np.isfinite(z)
    _, info = column_counts(query, [homolog], min_z=z)
    assert info[0]["used"] is True  # z >= min_z
    _, info = column_counts(query, [homolog], min_z=float(np.nextafter(z, np.inf)))
    assert info[0]["used"] is False


def test_weighted_column_counts_sum_the_weights_of_each_residue_per_column():
    from protein_performer.analysis.dms.profile import weighted_column_counts
    from protein_performer.data.msa import GAP

    rng = np.random.default_rng(5)
    rows = rng.integers(0, GAP + 1, (40, 9)).astype(np.uint8)  # gaps included
    weights = rng.random(40)
    expected = np.einsum("n,nla->la", weights, np.eye(GAP + 1)[rows][..., :20])
    np.testing.assert_allclose(weighted_column_counts(rows, weights), expected, atol=1e-12)


def test_an_alignment_too_deep_to_weigh_exactly_is_weighed_against_a_sample(tmp_path, monkeypatch):
    from protein_performer.analysis.dms import profile
    from protein_performer.analysis.dms.homologs import read_scan_context
    from protein_performer.analysis.dms.notes import context_notes
    from protein_performer.data.alphabet import default_alphabet

    rng = np.random.default_rng(2)
    aa = list("ACDEFGHIKLMNPQRSTVWY")
    wt = "".join(rng.choice(aa, 30))
    # aligned FASTA (a gap in every row): 2,699 rows unrelated to each other and a family of
    # 300 that differ from one another at two residues at most (duplicates would be left out)
    rows = ["-" + "".join(rng.choice(aa, 29)) for _ in range(2_699)]
    seed_row, family = list(rng.choice(aa, 29)), set()
    while len(family) < 300:
        row = seed_row.copy()
        for i in rng.choice(29, 2, replace=False):
            row[i] = rng.choice(aa)
        family.add("-" + "".join(row))
    rows += sorted(family)
    assert len(set(rows)) == 2_999
    (tmp_path / "deep.fa").write_text(
        f">q\n{wt}\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    )
    alphabet = default_alphabet()
    exact = read_scan_context(tmp_path / "deep.fa", alphabet, wt, None)
    assert "weights_estimated_from" not in exact.info["alignment"]
    np.testing.assert_allclose(exact.pssm.weights[-300:], 1 / 300)
    assert exact.pssm.params["neff"] == pytest.approx(2_701, abs=0.01)  # the query is one
    monkeypatch.setattr(profile, "EXACT_WEIGHT_CELLS", 3_000 * 2_500 * 30)
    ctx = read_scan_context(tmp_path / "deep.fa", alphabet, wt, None, seed=1)
    assert ctx.pssm.params["weight_sample"] == 2_500
    assert ctx.info["alignment"]["weights_estimated_from"] == 2_500
    np.testing.assert_allclose(ctx.pssm.weights[:-300], 1.0)  # each its only neighbour
    family = ctx.pssm.weights[-300:]
    assert not np.allclose(family, 1 / 300, rtol=1e-6)  # estimated, not counted
    np.testing.assert_allclose(family, 1 / 300, rtol=0.1)
    assert ctx.pssm.params["neff"] == pytest.approx(2_701, abs=0.2)
    other = read_scan_context(tmp_path / "deep.fa", alphabet, wt, None, seed=2)
    assert not np.array_equal(other.pssm.weights, ctx.pssm.weights)  # the seed draws
    text = context_notes(ctx, {}, causal=True)
    assert "counted among 2,500 rows drawn at random" in text
    assert "drawn at random" not in context_notes(exact, {}, causal=True)


def _z_by_hand(query: str, homolog: str, shuffles: int, rng: np.random.Generator):
    """PRSS's test, written out: the local BLOSUM62 score and its distance from the scores of
    ``shuffles`` shuffles of the homolog in (population) standard deviations; letters the
    matrix lacks read as X."""
    from protein_performer.data.pairwise_alignment import local_aligner

    aligner, known = local_aligner()
    q = "".join(c if c in known else "X" for c in query.upper())
    h = "".join(c if c in known else "X" for c in homolog.upper())
    score = aligner.score(h, q)
    null = []
    for _ in range(shuffles):
        null.append(aligner.score("".join(rng.permutation(np.array(list(h)))), q))
    mean = sum(null) / len(null)
    sd = math.sqrt(sum((x - mean) ** 2 for x in null) / len(null))
    return score, (score - mean) / sd


def _family(seed: int = 2, n: int = 4, rate: float = 0.8):
    records = list(
        simulate_records(n_families=1, min_members=n, max_members=n, root_length_median=120,
                         substitution_rate=rate, indel_rate=0.02, seed=seed)
    )  # fmt: skip
    return records[0][2], [r[2] for r in records[1:]]


def test_alignment_z_is_prss_against_every_shuffle_and_letters_outside_blosum_are_x():
    from protein_performer.analysis.dms.profile import alignment_z

    query, (member, *_) = _family()
    # U and O (not in BLOSUM62) inside the homolog: scored as X, not as another residue
    odd = member[:30] + "UUOU" + member[34:]
    for homolog in (member, odd):
        score, z = alignment_z(query, homolog, 7, np.random.default_rng(3))
        want_score, want_z = _z_by_hand(query, homolog, 7, np.random.default_rng(3))
        assert score == pytest.approx(want_score)
        assert z == pytest.approx(want_z, rel=1e-9)
    # every shuffle the same and scoring as the homolog: no distance above chance (z 0, not inf)
    assert alignment_z(Q, "WWW", 5, np.random.default_rng(0))[1] == 0.0


def test_each_homolog_is_tested_against_its_own_shuffles():
    query, members = _family()
    _, info = column_counts(query, members, seed=4)
    built = build_pssm(query, members, seed=4, shuffles=10).homologs  # the seed reaches them
    for k, homolog in enumerate(members):
        score, z = _z_by_hand(query, homolog, 20, np.random.default_rng([4, k]))
        assert info[k]["score"] == pytest.approx(score)
        assert info[k]["z"] == pytest.approx(round(z, 3), abs=1e-9)
        _, z = _z_by_hand(query, homolog, 10, np.random.default_rng([4, k]))
        assert built[k]["z"] == pytest.approx(round(z, 3), abs=1e-9)


def test_only_the_homologs_used_are_counted_weighed_and_kept():
    from protein_performer.data.pairwise_alignment import aligned_positions

    query, members = _family()
    (unrelated,) = _random(1, 120, 5)
    pssm = build_pssm(query, [members[0], unrelated, members[1]])
    assert [h["used"] for h in pssm.homologs] == [True, False, True]
    # counts by hand: the query and the residues of the two members aligned to it
    expected = np.eye(20)[[I[a] for a in query]]
    matrix = np.full((2, len(query)), 255)
    for k, member in enumerate(members[:2]):
        hit = aligned_positions(query, member)
        for i in np.nonzero(hit >= 0)[0]:
            expected[i, I[member[hit[i]]]] += 1
            matrix[k, i] = I[member[hit[i]]]
    np.testing.assert_array_equal(pssm.counts, expected)
    from protein_performer.data.msa import GAP

    np.testing.assert_array_equal(pssm.matrix, np.where(matrix == 255, GAP, matrix))
    assert pssm.weights.shape == (2,)


def test_build_pssm_weighs_near_copies_together_and_can_leave_the_query_out():
    # h1 and h2 the same (one neighbour each: 1/2), h3 shares 7 of 10 with them (alone: 1)
    homologs = ["MKILAWHCDE", "MKILAWHCDE", "MRVLGWHCDF"]
    pssm = build_pssm(Q, homologs, min_z=None)
    np.testing.assert_allclose(pssm.weights, [0.5, 0.5, 1.0])
    # without the query: only the homologs are counted; a column no homolog reaches is the
    # background (log-odds 0), not log 0
    out = build_pssm(Q, ["GGGGGLAWHCDE"], min_z=None, include_query=False)
    expected = np.zeros((len(Q), 20))
    for i in range(3, 10):
        expected[i, I[Q[i]]] = 1
    np.testing.assert_array_equal(out.counts, expected)
    p = blosum62_model().q
    np.testing.assert_allclose(out.frequencies[:3], np.tile(p, (3, 1)))
    np.testing.assert_allclose(out.scores[:3], 0.0, atol=1e-12)
    P = blosum62_model().transition
    np.testing.assert_allclose(out.frequencies[4], (np.eye(20)[I["A"]] + 10 * P[I["A"]]) / 11)


def test_build_pssm_refuses_fewer_than_two_shuffles():
    from protein_performer.errors import ConfigError

    with pytest.raises(ConfigError, match="shuffles must be >= 2"):
        build_pssm(Q, ["MKILAWHCDE"], shuffles=1)
    build_pssm(Q, ["MKILAWHCDE"], shuffles=1, min_z=None)  # no shuffles drawn: fine


def test_a_mutant_error_counts_the_others_that_do_not_fit():
    pssm = build_pssm(Q, ["MKILAWHCDE"], min_z=None)
    with pytest.raises(ValueError, match=r"mutant 2 does not fit .*\(and 2 more\)"):
        pssm_scores(pssm, ["K2R", "K12R", "A2R", "K13R"])
    with pytest.raises(ValueError) as e:
        pssm_scores(pssm, ["K2R", "K12R"])
    assert "more)" not in str(e.value)
    # numbered from 0: the problem names the position as given, and the range 0-9
    with pytest.raises(
        ValueError, match=r"mutant 1 does not fit .*E10R: position 10 is outside 0-9"
    ):
        pssm_scores(pssm, ["E10R"], offset=0)
    with pytest.raises(ValueError, match=r"K1R: the sequence has M at 1"):
        pssm_scores(pssm, ["K1R"], offset=1)


def test_alignment_profile_weights_at_another_identity_and_without_the_query(tmp_path):
    from protein_performer.analysis.dms.profile import alignment_profile
    from protein_performer.data.msa import GAP

    wt = "MKVLAWH"
    msa = _aligned(tmp_path, ">q/2-6\nKVLAW\n>h1\nKILAW\n>h2\nKILAY\n>h3\nR-LGW\n", wt)
    # at 0.6: q, h1 and h2 are each other's neighbours (q-h2 3/5, h2-q 3/5), h3 alone (2/4)
    pssm = alignment_profile(wt, msa, identity=0.6, pseudocount_weight=0.0)
    np.testing.assert_allclose(pssm.weights, [1 / 3, 1 / 3, 1.0])
    assert pssm.params["neff"] == pytest.approx(2.0, abs=0.01)
    assert pssm.counts[1, I["K"]] == pytest.approx(1.0) and pssm.counts[2, I["V"]] == pytest.approx(
        1 / 3
    )
    # without the query: h1, h2 neighbours (1/2 each), h3 alone; its residues outside the
    # alignment hold nothing (the background)
    alone = alignment_profile(wt, msa, include_query=False, pseudocount_weight=0.0)
    np.testing.assert_allclose(alone.weights, [0.5, 0.5, 1.0])
    assert alone.params["neff"] == pytest.approx(2.0, abs=0.01) and alone.params["sequences"] == 3
    expected = np.zeros((7, 20))
    for w, row in zip([0.5, 0.5, 1.0], ["KILAW", "KILAY", "R-LGW"], strict=True):
        for j, c in enumerate(row):
            if c != "-":
                expected[1 + j, I[c]] += w
    np.testing.assert_allclose(alone.counts, expected)
    np.testing.assert_allclose(alone.scores[[0, 6]], 0.0, atol=1e-12)
    rows = [[I[c] if c != "-" else GAP for c in r] for r in ["KILAW", "KILAY", "R-LGW"]]
    np.testing.assert_array_equal(alone.matrix, rows)
    # with the query: the matrix is the homologs' rows only
    np.testing.assert_array_equal(pssm.matrix, rows)


def test_a_homolog_with_nothing_aligned_is_not_used_even_without_the_z_test():
    # X scores below zero against every residue: no local alignment at all
    _, info = column_counts(Q, ["MKILAWHCDE", "XXXX"], min_z=None)
    assert [h["used"] for h in info] == [True, False]
    assert info[1]["coverage"] == 0.0 and info[1]["identity"] == 0.0
    pssm = build_pssm(Q, ["MKILAWHCDE", "XXXX"], min_z=None)
    assert pssm.homologs_used == 1 and pssm.weights.shape == (1,)


def test_pssm_scores_say_how_many_more_mutants_do_not_fit():
    pssm = build_pssm(Q, [], allow_query_only=True)
    with pytest.raises(
        DataError, match=r"mutant 1 does not fit the wild type: A2W: the sequence has K at 2$"
    ):
        pssm_scores(pssm, ["A2W", "K2A"])  # one wrong: nothing more said
    with pytest.raises(DataError, match=r"mutant 1 does not fit .* \(and 1 more\)$"):
        pssm_scores(pssm, ["A2W", "C3A", "K2A"])
    with pytest.raises(DataError, match=r"\(and 2 more\)$"):
        pssm_scores(pssm, ["A2W", "C3A", "D4A"])


def test_build_pssm_checks_shuffles_and_a_profile_with_nothing_to_count():
    from protein_performer.errors import ConfigError

    far = "".join(reversed(Q)) * 2
    build_pssm(Q, [far], shuffles=2, allow_query_only=True)  # two shuffles are enough
    with pytest.raises(ConfigError, match=r"shuffles must be >= 2 \(got 1\)"):
        build_pssm(Q, [far], shuffles=1)
    build_pssm(Q, [far], shuffles=1, min_z=None, allow_query_only=True)  # no shuffles needed
    with pytest.raises(DataError, match="no residue to count: no homolog aligns and include_"):
        build_pssm(Q, [far], include_query=False, allow_query_only=True)
    # with the query counted, the query-only fallback is a profile all the same
    assert build_pssm(Q, [far], include_query=True, allow_query_only=True).scores.shape[0] == 10
