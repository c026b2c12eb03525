"""Cross-homolog attention view: a head planted on the aligned residue gives the alignment
ceiling exactly, a head on random homolog residues stays at the shuffled null, masking covers
every residue once, and the BLOSUM log-odds construction matches a hand computation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from protein_performer.analysis.cross_homolog import (
    _log_odds,
    attention_view,
    cross_homolog_view,
    homolog_windows,
    mask_passes,
    model_attention,
    write_view,
)
from protein_performer.analysis.homolog_pairs import read_homolog_pairs
from protein_performer.analysis.similarity import AA_ORDER
from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.simulate import simulate_records
from protein_performer.errors import ConfigError, DataError
from tests.analysis.planted import planted_model

ALPHABET = default_alphabet()
MAX_LENGTH = 256


def idx(aa: str) -> int:
    return AA_ORDER.index(aa)


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, list[str]]]:
    """60 simulated pairs (BLOSUM62 evolution, no indels): member 1 after member 2."""
    records = list(
        simulate_records(
            n_families=60, min_members=2, max_members=2, root_length_median=80,
            root_length_sigma=0.2, substitution_rate=0.6, indel_rate=0.0, seed=3,
        )
    )  # fmt: skip
    return [(records[i][2], [records[i + 1][2]]) for i in range(0, len(records), 2)]


class Planted:
    """Three heads over :func:`homolog_windows`' windows: 0 attends to the aligned residue(s)
    (split evenly; to ``<cls>`` where none), 1 to one random homolog residue, 2 to ``<cls>``.
    Records the rows each window was asked for."""

    def __init__(self, windows, seed: int = 0) -> None:
        self.windows = windows
        self.rng = np.random.default_rng(seed)
        self.calls: dict[int, list[np.ndarray]] = {}

    def _window(self, tokens: np.ndarray, rows: np.ndarray) -> int:
        for i, w in enumerate(self.windows):
            if len(w.tokens) == len(tokens) and np.array_equal(
                np.delete(w.tokens, rows), np.delete(tokens, rows)
            ):
                assert (tokens[rows] == ALPHABET.mask_idx).all()
                return i
        raise AssertionError("tokens of no window")

    def __call__(self, tokens: np.ndarray, rows: np.ndarray) -> np.ndarray:
        i = self._window(tokens, rows)
        self.calls.setdefault(i, []).append(rows.copy())
        w = self.windows[i]
        out = np.zeros((3, len(rows), len(tokens)))
        keys = np.concatenate([np.arange(a, b) for a, b in w.segments])
        for r, row in enumerate(rows):
            aligned = w.keys[w.queries == row]
            if len(aligned):
                out[0, r, aligned] = 1.0 / len(aligned)
            else:
                out[0, r, 0] = 1.0
            out[1, r, self.rng.choice(keys)] = 1.0
            out[2, r, 0] = 1.0
        return out


@pytest.fixture(scope="module")
def planted_view(pairs):
    windows, _ = homolog_windows(pairs, ALPHABET, max_length=MAX_LENGTH, seed=5)
    planted = Planted(windows)
    result = attention_view(
        planted, ["aligned", "random", "cls"], ALPHABET, pairs, max_length=MAX_LENGTH, seed=5
    )
    return result, planted, windows


def _head(result, name):
    return next(h for h in result["heads"] if h["name"] == name)


def test_a_head_on_the_aligned_residue_is_the_alignment_ceiling(planted_view):
    result, _, _ = planted_view
    m = result["matrices"]
    names = m["head_names"]
    ceiling = result["ceiling"]["counts"]
    assert ceiling.sum() > 3000
    # one homolog, weight 1 on its aligned residue: both counts are the aligned pairs
    np.testing.assert_array_equal(m["arcs_counts"][names.index("aligned")], ceiling)
    np.testing.assert_allclose(m["mass_counts"][names.index("aligned")], ceiling)
    aligned = _head(result, "aligned")
    assert result["ceiling"]["r"] > 0.4  # the families evolved under BLOSUM62
    assert aligned["r_arcs"] == pytest.approx(result["ceiling"]["r"], abs=1e-9)
    assert aligned["r_mass"] == pytest.approx(result["ceiling"]["r"], abs=1e-9)
    assert aligned["r_arcs_vs_ceiling"] == pytest.approx(1.0)
    # ranked first, with all of its attention on the aligned residue
    assert result["heads"][0]["name"] == "aligned" == result["best_head"]
    assert aligned["aligned_attention"] == pytest.approx(1.0)
    assert _head(result, "cls")["aligned_attention"] == 0.0
    assert _head(result, "cls")["r_mass"] is None  # no attention into the homologs
    assert _head(result, "random")["aligned_attention"] < 0.1
    assert result["uniform_aligned_attention"] == pytest.approx(1 / 200, rel=0.5)
    # the null loses the link to the masked residue
    assert aligned["r_null_arcs"] < aligned["r_arcs"] - 0.3


def test_a_head_on_random_homolog_residues_is_at_the_null(planted_view):
    result, _, _ = planted_view
    random = _head(result, "random")
    for key in ("arcs", "mass"):
        assert abs(random[f"r_{key}"]) < 0.25
        assert abs(random[f"r_{key}"] - random[f"r_null_{key}"]) < 0.3
    assert random["arcs"] == result["masked_positions"]  # one arc of weight 1 per masked row


def test_masked_passes_cover_every_residue_exactly_once(planted_view, pairs):
    result, planted, windows = planted_view
    assert sorted(planted.calls) == list(range(len(windows))) == list(range(len(pairs)))
    for i, w in enumerate(windows):
        rows = np.concatenate(planted.calls[i])
        np.testing.assert_array_equal(np.sort(rows), np.arange(w.start, w.start + w.length))
        assert len(planted.calls[i]) == round(1 / 0.15)
        sizes = [len(r) for r in planted.calls[i]]
        assert max(sizes) - min(sizes) <= 1
    assert result["masked_positions"] == sum(w.length for w in windows)


def test_mask_passes_partition_and_seed():
    parts = mask_passes(100, 0.15, np.random.default_rng(1))
    assert len(parts) == 7 and sorted(np.concatenate(parts).tolist()) == list(range(100))
    again = mask_passes(100, 0.15, np.random.default_rng(1))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    assert len(mask_passes(3, 0.15, np.random.default_rng(1))) == 3  # at most n passes
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ConfigError, match=r"mask_prob must be in \(0, 1\]"):
            mask_passes(10, bad, np.random.default_rng(1))


def test_log_odds_by_hand():
    c = np.zeros((20, 20))
    a, v = idx("A"), idx("V")
    c[a, a], c[a, v], c[v, a], c[v, v] = 4, 2, 0, 2
    # unordered pair frequencies: AA 4/8, AV 2/8, VV 2/8; p_A = .5 + .25/2, p_V = .25 + .25/2
    q_aa, q_av, q_vv = 0.5, 0.25, 0.25
    p_a, p_v = 0.625, 0.375
    s = _log_odds(c)
    assert s[a, a] == pytest.approx(math.log2(q_aa / p_a**2))
    assert s[a, v] == s[v, a] == pytest.approx(math.log2(q_av / (2 * p_a * p_v)))
    assert s[v, v] == pytest.approx(math.log2(q_vv / p_v**2))
    assert np.isnan(s).sum() == 400 - 4
    assert np.isnan(_log_odds(np.zeros((20, 20)))).all()


def test_the_window_is_the_context_layout(pairs):
    windows, skipped = homolog_windows(pairs[:3], ALPHABET, max_length=MAX_LENGTH)
    assert skipped == 0
    for w, (protein, (homolog,)) in zip(windows, pairs[:3], strict=True):
        assert w.tokens[0] == ALPHABET.cls_idx and w.tokens[-1] == ALPHABET.eos_idx
        (a, b), = w.segments  # fmt: skip
        assert ALPHABET.decode(w.tokens[a:b]) == homolog and w.tokens[b] == ALPHABET.sep_idx
        assert ALPHABET.decode(w.tokens[w.start : w.start + w.length]) == protein
    # a protein longer than half the window is cropped, its homolog cut to the room left
    long = ("M" + "ACDEFGHIKL" * 20, ["M" + "ACDEFGHIKL" * 20])
    (w,), _ = homolog_windows([long], ALPHABET, max_length=100)
    assert w.length == 48 and len(w.tokens) <= 100
    # the crop starts anywhere, the first and the last place too (a seeded draw)
    just_over = ("M" + "ACDEFGHIKL" * 4 + "ACDEFGHI", ["M" + "ACDEFGHIKL" * 4])  # 49 residues
    firsts = set()
    for seed in range(16):
        (w,), _ = homolog_windows([just_over], ALPHABET, max_length=100, seed=seed)
        cropped = ALPHABET.decode(w.tokens[w.start : w.start + w.length])
        firsts.add(just_over[0].index(cropped))
    assert firsts == {0, 1}
    with pytest.raises(DataError, match="no room for a homolog"):
        attention_view(Planted([]), ["a"], ALPHABET, [long], max_length=20)


def test_model_attention_is_the_models_attention_rows():
    model = planted_model()
    ids = [ALPHABET.index(c) for c in "MKVLDE|MKILDQ".replace("|", "")]
    tokens = np.array([ALPHABET.cls_idx, *ids[:6], ALPHABET.sep_idx, *ids[6:], ALPHABET.eos_idx])
    rows = np.array([8, 10, 12])
    got = model_attention(model, [0], list(range(8)), chunk_size=2)(tokens, rows)
    with torch.no_grad():
        full = model(torch.from_numpy(tokens)[None], return_attentions=True)["attentions"][0]
    np.testing.assert_allclose(got, full[0][:, rows].numpy(), atol=1e-6)
    heads = model_attention(model, [0], [2, 5])(tokens, rows)
    np.testing.assert_allclose(heads, full[0][[2, 5]][:, rows].numpy(), atol=1e-6)


@pytest.mark.slow
def test_view_of_a_model_writes_json_and_figure(pairs, tmp_path):
    model = planted_model()
    result = cross_homolog_view(model, ALPHABET, pairs[:6], max_length=128, threshold=0.1)
    assert len(result["heads"]) == 8 and result["proteins"] == 6
    assert result["matrices"]["arcs_counts"].shape == (8, 20, 20)
    out = tmp_path / "view.json"
    paths = write_view(result, out, title="planted")
    assert [p.name for p in paths] == ["view.json", "view.png", "view.pdf"]
    data = json.loads(out.read_text())
    assert data["format"].startswith("protein-performer-cross-homolog")
    assert data["best_head"] == result["heads"][0]["name"]
    assert len(data["matrices"]["blosum62"]) == 20
    with pytest.raises(DataError, match="exists"):
        write_view(result, out)
    write_view(result, out, overwrite=True, figure=False)
    (tmp_path / "other.json").write_text('{"mine": 1}')
    with pytest.raises(DataError, match="not"):
        write_view(result, tmp_path / "other.json", overwrite=True, figure=False)
    assert json.loads((tmp_path / "other.json").read_text()) == {"mine": 1}


def test_read_homolog_pairs_groups_by_query(tmp_path, caplog):
    q = tmp_path / "q.fasta"
    q.write_text(">sp|P1|A_HUMAN\nMKVLAAGICW\n>q2\nMKWLLAGICW\n>q3\nMKV\n")
    hits = tmp_path / "hits.fasta"
    hits.write_text(
        ">h1/1-10 query=P1 identity=0.9\nMKVLAAGICA\n>h2/1-9 query=q2 identity=0.8\nMKWLLAGIC\n"
        ">h3/1-9 query=sp|P1|A_HUMAN identity=0.7\nMKVLAAGIC\n"
    )
    pairs = read_homolog_pairs(q, hits, ALPHABET)
    assert [(p.id, [h.id for h in hs]) for p, hs in pairs] == [
        ("sp|P1|A_HUMAN", ["h1/1-10", "h3/1-9"]),
        ("q2", ["h2/1-9"]),
    ]
    assert [len(hs) for _, hs in read_homolog_pairs(q, hits, ALPHABET, max_homologs=1)] == [1, 1]
    plain = tmp_path / "plain.fasta"
    plain.write_text(">x\nMKVLAAGICA\n>y\nMKV\n")
    # y is a copy of q3: not a homolog of it (score and evaluate leave copies out too)
    with caplog.at_level("WARNING"):
        by_query = read_homolog_pairs(q, plain, ALPHABET)
    assert [[h.id for h in hs] for _, hs in by_query] == [["x", "y"], ["x", "y"], ["x"]]
    assert "plain.fasta: 1 record identical to the protein of" in caplog.text
    named = tmp_path / "named.fasta"
    named.write_text(">h query=q2\nMKWLLAGICW\n>g query=q2\nMKWLLAGICA\n")
    assert [[h.id for h in hs] for _, hs in read_homolog_pairs(q, named, ALPHABET)] == [["g"]]
    mixed = tmp_path / "mixed.fasta"
    mixed.write_text(">x query=q2\nMKVLAAGICA\n>y\nMKV\n")
    with pytest.raises(DataError, match=r"mixed.fasta: y: no query=ID"):
        read_homolog_pairs(q, mixed, ALPHABET)
    none = tmp_path / "none.fasta"
    none.write_text(">x query=zz\nMKVLAAGICA\n")
    with pytest.raises(DataError, match="no homolog names a query"):
        read_homolog_pairs(q, none, ALPHABET)


def test_read_homolog_pairs_from_an_alignment_pairs_it_with_its_protein(tmp_path):
    q = tmp_path / "q.fasta"
    q.write_text(">other\nWWWWWWWWWW\n>sp|P1|A_HUMAN\nMKVLAAGICWRR\n")
    a3m = tmp_path / "msa.a3m"
    # ColabFold's header line; the query is residues 1-10; h2 a copy of it, h4 a duplicate
    a3m.write_text(
        "#10\t1\n>101\nMKVLAAGICW\n>h1\nMKVLgAAGICA\n>h2\nMKVLAAGICW\n>h3\n--VLAAGIC-\n"
        ">h4\nMKVLgAAGICA\n"
    )
    ((protein, homologs),) = read_homolog_pairs(q, a3m, ALPHABET)
    assert protein.id == "sp|P1|A_HUMAN"
    assert [h.id for h in homologs] == ["h1", "h3"]
    assert ALPHABET.decode(homologs[0].residues) == "MKVLGAAGICA"  # insertion kept, upper case
    assert len(read_homolog_pairs(q, a3m, ALPHABET, max_homologs=1)[0][1]) == 1
    stranger = tmp_path / "stranger.a2m"
    stranger.write_text(">X/1-5\nPPPPP\n>h\nPP-PP\n")
    with pytest.raises(
        DataError, match=r"query X/1-5 \(its first record\) is none of the proteins"
    ):
        read_homolog_pairs(q, stranger, ALPHABET)
    # one protein: the alignment is read against it as score reads it (a query cut to its
    # focus columns placed on it; one that differs named where)
    one = tmp_path / "one.fasta"
    one.write_text(">sp|P1|A_HUMAN\nMKVLAAGICWRR\n")
    focus = tmp_path / "focus.fasta"
    focus.write_text(">q\nMKVAAGIC-W\n>h1\nMKIAAGICAW\n>h2\nMRVAAGVC-W\n")  # L and RR not columns
    ((protein, homologs),) = read_homolog_pairs(one, focus, ALPHABET)
    assert protein.id == "sp|P1|A_HUMAN" and [h.id for h in homologs] == ["h1", "h2"]
    changed = tmp_path / "changed.a3m"
    changed.write_text(">q\nMKVLAPGICW\n>h1\nMKVLgAAGICA\n")
    with pytest.raises(DataError, match="residue 6: P in the alignment, A in the wild type"):
        read_homolog_pairs(one, changed, ALPHABET)


def test_alignment_homologs_over_max_identity_are_left_out_unless_all_are(tmp_path, caplog):
    q = tmp_path / "q.fasta"
    q.write_text(">wt\nMKVLAAGICW\n")
    a3m = tmp_path / "msa.a3m"
    # identities to the query over shared columns, by hand: near 9/10, far 6/10,
    # edge 9/9 over its 9 residues (one gap), mid 8/10
    a3m.write_text(
        ">wt\nMKVLAAGICW\n>near\nMKVLAAGICA\n>far\nMRILAPGVCW\n>edge\n-KVLAAGICW\n"
        ">mid\nMKVLSAGIYW\n"
    )
    ids = lambda pairs: [h.id for h in pairs[0][1]]  # noqa: E731
    assert ids(read_homolog_pairs(q, a3m, ALPHABET)) == ["near", "far", "edge", "mid"]
    with caplog.at_level("WARNING"):
        kept = read_homolog_pairs(q, a3m, ALPHABET, max_identity=0.85)
    assert ids(kept) == ["far", "mid"]
    assert "2 of its 4 homologs more than 85% identical to wt left out" in caplog.text
    assert ids(read_homolog_pairs(q, a3m, ALPHABET, max_identity=0.9)) == ["near", "far", "mid"]
    # the cap counts what is kept: the first homolog under the limit, not the first of the file
    assert ids(read_homolog_pairs(q, a3m, ALPHABET, max_identity=0.85, max_homologs=1)) == ["far"]
    # none under it: the near-copies rather than no homolog
    assert ids(read_homolog_pairs(q, a3m, ALPHABET, max_identity=0.1)) == [
        "near",
        "far",
        "edge",
        "mid",
    ]


# ---- small hand-checked windows: two homologs, exact counts ---------------------------------
P = "MKVLAWHEDC"


def test_two_homologs_each_take_their_segment_and_a_sep_after_it():
    h1, h2 = "MKILAWHEDC", "MRVLAWHQDCGG"
    (w,), skipped = homolog_windows([(P, [h1, h2])], ALPHABET, max_length=64)
    assert skipped == 0
    # <cls> h1 <sep> h2 <sep> P <eos>: by hand
    assert w.segments == [(1, 11), (12, 24)] and (w.start, w.length) == (25, 10)
    assert len(w.tokens) == 36
    for (a, b), h in zip(w.segments, (h1, h2), strict=True):
        assert ALPHABET.decode(w.tokens[a:b]) == h and w.tokens[b] == ALPHABET.sep_idx
    # no indels: each aligned key sits at its query's offset in its homolog
    assert len(w.queries) == 20  # every residue aligns in both homologs
    for q, k in zip(w.queries, w.keys, strict=True):
        (a, _), = [s for s in w.segments if s[0] <= k < s[1]]  # fmt: skip
        assert k - a == q - w.start


def test_uniform_attention_matches_the_uniform_baseline_with_two_homologs():
    """Every residue aligns to one residue in each of two homologs: uniform attention over the
    L-token window puts 2/L on its aligned residues, and so does the baseline."""
    (w,), _ = homolog_windows([(P, [P, P])], ALPHABET, max_length=64)
    n_tokens = len(w.tokens)
    assert n_tokens == 1 + 2 * 11 + 10 + 1

    def uniform(tokens, rows):
        return np.full((1, len(rows), len(tokens)), 1.0 / len(tokens))

    result = attention_view(uniform, ["u"], ALPHABET, [(P, [P, P])], max_length=64, mask_prob=0.5)
    assert result["aligned_positions"] == 10 and result["masked_positions"] == 10
    assert result["uniform_aligned_attention"] == pytest.approx(2 / n_tokens)
    assert result["heads"][0]["aligned_attention"] == pytest.approx(2 / n_tokens)


def test_arcs_at_the_threshold_count_and_non_amino_acids_are_dropped():
    """Each masked row puts exactly the threshold (0.5) on the homolog's W, 0.25 on its X and
    0.25 on <cls>: one arc and 0.5 of mass per standard masked residue, into W only; the X
    residue of the protein is no masked amino acid."""
    protein, homolog = "MKVLXAWHED", "MKVLXAWHEDG"
    (w,), _ = homolog_windows([(protein, [homolog])], ALPHABET, max_length=64)
    (a, _), = w.segments  # fmt: skip
    at_w, at_x = a + homolog.index("W"), a + homolog.index("X")

    def planted(tokens, rows):
        out = np.zeros((1, len(rows), len(tokens)))
        out[0, :, at_w], out[0, :, at_x], out[0, :, 0] = 0.5, 0.25, 0.25
        return out

    result = attention_view(planted, ["h"], ALPHABET, [(protein, [homolog])], max_length=64,
                            threshold=0.5, mask_prob=0.3)  # fmt: skip
    expected = np.zeros((20, 20))
    for c in protein.replace("X", ""):
        expected[idx(c), idx("W")] += 1
    m = result["matrices"]
    np.testing.assert_array_equal(m["arcs_counts"][0], expected)
    np.testing.assert_allclose(m["mass_counts"][0], 0.5 * expected)
    assert result["masked_positions"] == 9 and result["heads"][0]["arcs"] == 9
    # the null shuffles which residue a row is, not how much it sends where
    assert m["null_arcs_counts"][0].sum() == 9 and m["null_arcs_counts"][0][:, idx("W")].sum() == 9
    # just under the threshold: no arc, the same mass
    below = attention_view(lambda t, r: planted(t, r) * (1 - 1e-9), ["h"], ALPHABET,
                           [(protein, [homolog])], max_length=64, threshold=0.5, mask_prob=0.3)  # fmt: skip
    assert below["matrices"]["arcs_counts"][0].sum() == 0
    np.testing.assert_allclose(below["matrices"]["mass_counts"][0], 0.5 * expected, rtol=1e-8)


def test_an_accession_two_queries_share_goes_to_the_first_of_them(tmp_path):
    """``query=P1`` names both sp|P1|A_HUMAN and tr|P1|B_MOUSE: the first query in the file
    takes it (not the last); a full id still picks its own query."""
    q = tmp_path / "q.fasta"
    q.write_text(">sp|P1|A_HUMAN\nMKVLAAGICW\n>other\nMKWLLAGICW\n>tr|P1|B_MOUSE\nMKVLAAGICA\n")
    hits = tmp_path / "hits.fasta"
    hits.write_text(
        ">h1 query=P1\nMKVLAAGICA\n>h2 query=tr|P1|B_MOUSE\nMKVLAAGIC\n>h3 query=other\nMKWL\n"
        ">h4 query=P1\nMKVLAAGIC\n"
    )
    pairs = read_homolog_pairs(q, hits, ALPHABET)
    assert [(p.id, [h.id for h in hs]) for p, hs in pairs] == [
        ("sp|P1|A_HUMAN", ["h1", "h4"]),
        ("other", ["h3"]),
        ("tr|P1|B_MOUSE", ["h2"]),
    ]


def test_a_cropped_proteins_homolog_is_cut_at_the_same_relative_place():
    """As ``evaluate context=``: a protein longer than half the window is a seeded crop; its
    homolog (here itself), cut to the room left, keeps the part at the same relative place."""
    rng = np.random.default_rng(9)
    full = "".join(rng.choice(list(AA_ORDER), 100))
    windows, skipped = homolog_windows([(full, [full])] * 12, ALPHABET, max_length=60, seed=4)
    assert skipped == 0
    crops, cuts = [], []
    for w in windows:
        crop = ALPHABET.decode(w.tokens[w.start : w.start + w.length])
        (a, b), = w.segments  # fmt: skip
        homolog = ALPHABET.decode(w.tokens[a:b])
        # 60 tokens: a crop of 28 residues (60 // 2 - 2); the homolog gets 29 (60 - 28 - 2 - 1)
        assert len(crop) == 28 and len(homolog) == 29
        crops.append(full.index(crop) / (100 - 28))
        cuts.append(full.index(homolog) / (100 - 29))
    assert max(crops) - min(crops) > 0.5  # crops near both ends
    np.testing.assert_allclose(cuts, crops, atol=0.02)


def test_the_ceiling_counts_only_aligned_pairs_of_two_amino_acids():
    """The protein's A at 5 aligns to the homolog's X: no pair; the other nine residues align
    to their own letter: the ceiling is those nine on the diagonal, nothing else."""
    protein, homolog = "MKVLAAWHED", "MKVLXAWHEDG"

    def uniform(tokens, rows):
        return np.full((1, len(rows), len(tokens)), 1.0 / len(tokens))

    result = attention_view(uniform, ["u"], ALPHABET, [(protein, [homolog])], max_length=64)
    expected = np.zeros((20, 20))
    for aa in "MKVLAWHED":
        expected[idx(aa), idx(aa)] += 1
    np.testing.assert_array_equal(result["ceiling"]["counts"], expected)
    assert result["ceiling"]["aligned_pairs"] == 9


def test_each_heads_r_against_the_ceiling_is_its_own_matrix(pairs):
    """Uniform attention (1/L, under the 0.3 threshold) draws no arcs but spreads mass: its
    arcs are compared with nothing (None), its mass log-odds with the ceiling's."""
    from protein_performer.analysis.similarity import offdiag_pearson

    def uniform(tokens, rows):
        return np.full((1, len(rows), len(tokens)), 1.0 / len(tokens))

    result = attention_view(uniform, ["u"], ALPHABET, pairs[:8], max_length=MAX_LENGTH)
    (head,) = result["heads"]
    assert head["arcs"] == 0 and head["r_arcs"] is None and head["r_arcs_vs_ceiling"] is None
    mass = result["matrices"]["mass_log_odds"][0]
    expected = offdiag_pearson(mass, result["ceiling"]["log_odds"])
    assert expected is not None
    assert head["r_mass_vs_ceiling"] == pytest.approx(expected, abs=1e-6)


def test_a_protein_of_exactly_half_the_window_is_kept_whole():
    """64 tokens: half is 30 residues; a protein of 30 is not cropped (and counts its homologs:
    two here, one window)."""
    protein = "MKVLAWHEDC" * 3
    (w,), skipped = homolog_windows([(protein, [protein[:12], protein[5:17]])], ALPHABET,
                                    max_length=64)  # fmt: skip
    assert skipped == 0 and w.length == 30
    assert ALPHABET.decode(w.tokens[w.start : w.start + w.length]) == protein

    def uniform(tokens, rows):
        return np.full((1, len(rows), len(tokens)), 1.0 / len(tokens))

    result = attention_view(uniform, ["u"], ALPHABET, [(protein, [protein[:12], protein[5:17]])],
                            max_length=64)  # fmt: skip
    assert result["proteins"] == 1 and result["homologs"] == 2
    assert result["masked_positions"] == 30


def test_query_of_reads_the_query_field_alone():
    from protein_performer.analysis.homolog_pairs import query_of

    assert query_of("h1/1-10 query=P1 identity=0.9") == "P1"
    assert query_of("query=P1") == "P1"
    assert query_of("h1/1-10 parent_query=Q9 query=P1") == "P1"  # another field's name ends so
    assert query_of("h1/1-10 subquery=Q9") is None
    assert query_of("h1/1-10 identity=0.9") is None


def test_a_query_whose_only_hits_are_copies_of_it_is_left_out(tmp_path):
    q = tmp_path / "q.fasta"
    q.write_text(">P1\nMKVLAAGICW\n>q2\nMKWLLAGICW\n")
    hits = tmp_path / "hits.fasta"
    hits.write_text(">c query=q2\nMKWLLAGICW\n>x query=P1\nMKVLAAGICA\n")  # c: q2 itself
    pairs = read_homolog_pairs(q, hits, ALPHABET)
    assert [(p.id, [h.id for h in hs]) for p, hs in pairs] == [("P1", ["x"])]


def test_an_alignment_goes_with_the_protein_its_first_record_is(tmp_path):
    """A homolog row that happens to be a stretch of another protein does not pick it: the
    alignment's query (its first record) does."""
    q = tmp_path / "q.fasta"
    q.write_text(">A\nPPPPPMKVLAAGICWPPPP\n>B\nMKVLSAGICW\n")
    a3m = tmp_path / "msa.a3m"
    a3m.write_text(">B\nMKVLSAGICW\n>h1\nMKVLAAGICW\n>h2\nMRVLS-GVCW\n")
    ((protein, homologs),) = read_homolog_pairs(q, a3m, ALPHABET)
    assert protein.id == "B" and [h.id for h in homologs] == ["h1", "h2"]


def test_proteins_without_room_for_a_homolog_are_counted():
    """20 tokens: an 8-residue protein leaves 10; a 5-residue homolog fits, a 12-residue one
    (at least 13 tokens with its <sep>) does not: that pair is left out and counted."""
    pairs = [("MKVLAWHE", ["MKVLA"]), ("MKVLAWHE", ["MKVLAWHEDCGG"])]
    windows, skipped = homolog_windows(pairs, ALPHABET, max_length=20)
    assert len(windows) == 1 and skipped == 1

    def uniform(tokens, rows):
        return np.full((1, len(rows), len(tokens)), 1.0 / len(tokens))

    result = attention_view(uniform, ["u"], ALPHABET, pairs, max_length=20)
    assert result["proteins"] == 1 and result["proteins_without_room"] == 1
