"""Alignments as users have them: each format read by content, its columns mapped onto the wild
type by hand, what was left out counted, sequence weights against a brute-force count, homolog
orders (weighted draws, greedy diversity), and one-line errors."""

from __future__ import annotations

import codecs
import gzip
from pathlib import Path

import numpy as np
import pytest

from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS
from protein_performer.data.msa import (
    GAP,
    MIN_WEIGHT_SAMPLE,
    homolog_order,
    read_msa,
    sequence_weights,
    weight_sample_size,
)
from protein_performer.errors import DataError

WT = "MKTAYIAKQRQISFVKSHFSRQ"  # 22 residues; the alignments hold residues 3-12 (TAYIAKQRQI)
CODE = {aa: i for i, aa in enumerate(STANDARD_AMINO_ACIDS)}
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "dms" / "pilin_NEIME"


def codes(text: str) -> list[int]:
    return [CODE.get(c, GAP) for c in text]


A3M = """#10\t1
>query
TAYIAKQRQI
>h1 first homolog
TAYLAKQRQI
>h2 with an insertion
TAYIggAKQRQ-
>h3 gap only in the query's columns
----------
>h4 a copy of the wild type's stretch
TAYIAKQRQI
>h5 duplicate of h1
TAYLAKQRQI
>h6 fragment
----AKQ---
"""


def test_a3m_with_colabfold_header_line(tmp_path):
    path = tmp_path / "x.a3m"
    path.write_text(A3M)
    msa = read_msa(path, WT)
    assert msa.format == "a3m" and msa.query_id == "query"
    assert msa.ids == ["h1", "h2", "h6"]
    # insertions stay in the homolog's sequence, not in its columns
    assert msa.sequences[1] == "TAYIGGAKQRQ"
    np.testing.assert_array_equal(msa.matrix[1], codes("TAYIAKQRQ-"))
    np.testing.assert_array_equal(msa.positions, np.arange(2, 12))  # residues 3-12
    notes = msa.notes
    assert notes["header_lines_skipped"] == 1
    assert notes["gap_only_rows"] == 1
    assert notes["copies_of_wild_type_left_out"] == 1
    assert notes["duplicates_left_out"] == 1
    assert notes["insertions_dropped_from_columns"] == 2
    assert notes["fragments"] == 1 and notes["query_start"] == 3
    np.testing.assert_allclose(msa.coverage(), [1.0, 0.9, 0.3])
    # h1: 9 of 10 shared; h2: 9 of 9 residues; h6: 3 of 3
    np.testing.assert_allclose(msa.identity(), [0.9, 1.0, 1.0])


def test_a2m_with_start_end_and_lowercase_query_columns(tmp_path):
    # query residues 2-13 of the wild type; its lower-case residues (K at 2, Q at 13) are not
    # focus columns; '.' pads the others' insert states
    text = ">WT_HUMAN/2-13\nkTAYIAKQRQIs\n>h1/5-14\n.TAYLAKQRQI.\n>h2/1-9\n.TAYIA-QRQ-.\n"
    path = tmp_path / "x.a2m"
    path.write_text(text)
    msa = read_msa(path, WT)
    assert msa.format == "a2m"
    np.testing.assert_array_equal(msa.positions, np.arange(2, 12))
    np.testing.assert_array_equal(msa.matrix[1], codes("TAYIA-QRQ-"))
    assert msa.notes["query_start"] == 2 and msa.ids == ["h1/5-14", "h2/1-9"]


def test_a2m_start_end_picks_the_occurrence_it_names(tmp_path):
    wt = "ACDEFACDEFGH"
    path = tmp_path / "x.a2m"
    path.write_text(">q/6-10\nACDEF\n>h\nACD-W\n")
    msa = read_msa(path, wt)
    np.testing.assert_array_equal(msa.positions, np.arange(5, 10))  # the second ACDEF


def test_aligned_fasta_drops_the_query_gap_columns(tmp_path):
    path = tmp_path / "x.fasta"
    path.write_text(">q\nTAY-IAKQRQI\n>h1\nTAYWIAKQRQI\n>h2\nTA-WIAKQ--I\n")
    msa = read_msa(path, WT)
    assert msa.format == "aligned-fasta"
    np.testing.assert_array_equal(msa.matrix, [codes("TAYIAKQRQI"), codes("TA-IAKQ--I")])
    assert msa.sequences[0] == "TAYWIAKQRQI"


def test_stockholm_read_by_biopython(tmp_path):
    path = tmp_path / "x.sto"
    path.write_text(
        "# STOCKHOLM 1.0\n\nquery/3-12 TAYIAKQRQI\nh1        TAYLAKQ.RQI\nh2        TAYIAKQ.R-I\n//\n".replace(
            "query/3-12 TAYIAKQRQI", "query/3-12 TAYIAKQ.RQI"
        )
    )
    msa = read_msa(path, WT)
    assert msa.format == "stockholm"
    np.testing.assert_array_equal(msa.matrix, [codes("TAYLAKQRQI"), codes("TAYIAKQR-I")])


def test_gzip_and_plain_hits(tmp_path):
    path = tmp_path / "hits.fasta.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(
            ">h1\nMKTAYLAKQ\n>h2 the wild type\n" + WT + "\n>h3\nKTAYIAKQRQISF\n>h4\nMKTAYLAKQ\n"
        )
    msa = read_msa(path, WT)
    assert msa.format == "fasta" and not msa.aligned
    assert msa.ids == ["h1", "h3"]
    assert msa.notes["copies_of_wild_type_left_out"] == 1
    assert msa.notes["duplicates_left_out"] == 1


def test_query_found_later_when_the_first_record_is_a_homolog(tmp_path):
    path = tmp_path / "x.a3m"
    path.write_text(">h1\nTAYLAKQR-I\n>query\nTAYIAKQRQI\n")
    msa = read_msa(path, WT)
    assert msa.query_id == "query" and msa.ids == ["h1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            ">q/3-12\nTAYIAKQRQV\n>h\nTAYIAKQ-QI\n",
            "residue 12: V in the alignment, I in the wild type",
        ),
        (
            ">q\nTAYIAKQRQI\n>h\nTAYIAKQRQIAAA\n>h2\nTAYIAkQRQ\n",
            "13 match columns where the query has 10 (upper case and '-' are match columns: "
            "not one alignment)",
        ),
        (  # the last record short: a file cut off in writing or copying
            ">q\nTAYIAKQRQI\n>h\nTAYIAkQRQIA\n>h2\nTAYIAK",
            "6 match columns where the query has 10 (upper case and '-' are match columns: not "
            "one alignment; the last record is short: is the file cut off?)",
        ),
        (  # the last record long: not a cut
            ">q\nTAYIAKQRQI\n>h\nTAYIAkQRQIA\n>h2\nTAYIAKQRQIAA\n",
            "12 match columns where the query has 10 (upper case and '-' are match columns: "
            "not one alignment)",
        ),
        (  # short, but not the last record
            ">q\nTAYIAKQRQI\n>h\nTAYIAK\n>h2\nTAYIAkQRQIA\n",
            "6 match columns where the query has 10 (upper case and '-' are match columns: not "
            "one alignment)",
        ),
        ("hello\n>q\nTAY\n", "line 1 does not start with '>' or '#'"),
        ("#only a header\n", "empty file"),
    ],
)
def test_one_line_errors(tmp_path, text, expected):
    path = tmp_path / "bad.a3m"
    path.write_text(text)
    with pytest.raises(DataError) as e:
        read_msa(path, WT)
    assert expected in str(e.value) and "\n" not in str(e.value)
    assert str(path) in str(e.value)


def brute_weights(matrix: np.ndarray, theta: float) -> np.ndarray:
    out = []
    for a in matrix:
        residues = (a != GAP).sum()
        if not residues:
            out.append(0.0)
            continue
        n = sum(((a == b) & (a != GAP)).sum() >= theta * residues for b in matrix)
        out.append(1.0 / n)
    return np.array(out)


@pytest.mark.parametrize("theta", [0.5, 0.8, 0.9])
def test_sequence_weights_match_a_brute_force_count(theta):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 20, 40)
    rows = []
    for _ in range(30):  # families of near copies, so neighbour counts vary
        r = base.copy()
        flips = rng.random(40) < rng.choice([0.05, 0.15, 0.5])
        r[flips] = rng.integers(0, 21, flips.sum())
        rows.append(r)
    rows.append(np.full(40, GAP))
    matrix = np.array(rows, dtype=np.uint8)
    got = sequence_weights(matrix, theta, block=7)  # blocks that do not divide N
    np.testing.assert_allclose(got, brute_weights(matrix, theta))
    assert got[-1] == 0.0


def test_sequence_weights_boundary_is_inclusive():
    # b shares exactly 8 of a's 10 residues: a neighbour at 0.8
    a = np.array(codes("ACDEFGHIKL"), dtype=np.uint8)
    b = np.array(codes("ACDEFGHIWW"), dtype=np.uint8)
    w = sequence_weights(np.stack([a, b]), 0.8)
    np.testing.assert_allclose(w, [0.5, 0.5])
    w = sequence_weights(np.stack([a, b]), 0.81)
    np.testing.assert_allclose(w, [1.0, 1.0])


def test_weighted_order_follows_the_weights():
    weights = np.array([10.0, 1.0, 1.0, 0.0, 1.0])
    firsts = [homolog_order("weighted", weights=weights, sample=s)[0] for s in range(300)]
    share = np.mean(np.array(firsts) == 0)
    assert 0.65 < share < 0.85  # 10 / 13 ≈ 0.77
    order = homolog_order("weighted", weights=weights, sample=1)
    assert sorted(order.tolist()) == [0, 1, 2, 3, 4] and order[-1] == 3  # weight 0 comes last
    again = homolog_order("weighted", weights=weights, sample=1)
    np.testing.assert_array_equal(order, again)  # seeded
    assert len(homolog_order("weighted", weights=weights, limit=2)) == 2


def test_diverse_order_takes_the_farthest_next():
    m = np.array(
        [codes("AAAAAAAAAA"), codes("AAAAAAAAAC"), codes("CCCCCCCCCC"), codes("AAAAACCCCC")],
        dtype=np.uint8,
    )
    np.testing.assert_array_equal(homolog_order("diverse", matrix=m), [0, 2, 3, 1])
    np.testing.assert_array_equal(homolog_order("first", matrix=m, limit=3), [0, 1, 2])
    with pytest.raises(ValueError, match="sampling must be one of"):
        homolog_order("best", matrix=m)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/dms absent")
def test_pilin_a2m_as_proteingym_ships_it():
    wt = "".join((SHARED / "wt.fasta").read_text().split("\n", 1)[1].split())
    msa = read_msa(SHARED / "msa.a2m", wt)
    assert msa.format == "a2m" and msa.notes["records_read"] == 5553
    assert len(msa.positions) == msa.matrix.shape[1] and msa.positions.max() < len(wt)
    # every query column holds the wild type's residue
    query = np.array(codes(wt))[msa.positions]
    np.testing.assert_array_equal(msa.query_codes, query)


@pytest.mark.parametrize(
    "text",
    [
        # HMMER / Pfam: insertions in lower case, '.' in the insert columns
        "# STOCKHOLM 1.0\nq/3-12 TAYIAKQ..RQI\nh1     TAYLAKQ..RQI\nh2     TAYIAKQgkR-I\n//\n",
        # no case, a #=GC RF line marks the insert columns
        "# STOCKHOLM 1.0\nq/3-12 TAYIAKQ--RQI\nh1     TAYLAKQ--RQI\nh2     TAYIAKQGKR-I\n"
        "#=GC RF xxxxxxx..xxx\n//\n",
    ],
)
def test_stockholm_insert_columns_are_not_columns(tmp_path, text):
    path = tmp_path / "x.sto"
    path.write_text(text)
    msa = read_msa(path, WT)
    np.testing.assert_array_equal(msa.positions, np.arange(2, 12))
    np.testing.assert_array_equal(msa.matrix, [codes("TAYLAKQRQI"), codes("TAYIAKQR-I")])
    assert msa.sequences[1] == "TAYIAKQGKRI"  # the inserted residues stay in the homolog


def test_an_alignment_cut_to_its_focus_columns_maps_onto_the_wild_type(tmp_path):
    # the query is the wild type's residues 3-12 without 7-8 (AK): an export of match columns
    path = tmp_path / "x.fasta"
    path.write_text(">q\nTAYIQRQI\n>h1\nTAYLQRQI\n>h2\nTA-IQRQW\n")
    msa = read_msa(path, WT)
    np.testing.assert_array_equal(msa.positions, [2, 3, 4, 5, 8, 9, 10, 11])
    np.testing.assert_array_equal(msa.matrix[1], codes("TA-IQRQW"))
    # a residue that is not the wild type's (no W in it) is still an error
    path.write_text(">q\nTAYIQRQW\n>h1\nTAYLQRQ-\n")
    with pytest.raises(DataError, match=r"record 1 \(q\): the alignment's query q is not the wild"):
        read_msa(path, WT)


def test_hits_with_gaps_of_different_lengths_are_plain_hits(tmp_path):
    # a '-' in rows of unequal length (no lower case) is not an alignment: gaps dropped
    path = tmp_path / "hits.fasta"
    path.write_text(">h1\nTAY-LAKQ\n>h2\nKTAYIA-KQRQIS\n")
    msa = read_msa(path, WT)
    assert msa.format == "fasta" and not msa.aligned
    assert msa.sequences == ["TAYLAKQ", "KTAYIAKQRQIS"]


def test_diverse_windows_after_the_first_start_from_a_weighted_draw():
    rng = np.random.default_rng(0)
    m = rng.integers(0, 20, size=(12, 15)).astype(np.uint8)
    weights = np.linspace(1.0, 2.0, 12)
    assert homolog_order("diverse", matrix=m, weights=weights)[0] == 0
    for sample in (1, 2, 3, 4):
        start = homolog_order("weighted", weights=weights, seed=4, sample=sample, limit=1)[0]
        order = homolog_order("diverse", matrix=m, weights=weights, seed=4, sample=sample)
        assert order[0] == start and sorted(order.tolist()) == list(range(12))
    starts = {homolog_order("diverse", matrix=m, weights=weights, seed=4, sample=s)[0]
              for s in range(1, 9)}  # fmt: skip
    assert len(starts) > 1


def test_hhsuite_annotation_rows_are_not_homologs(tmp_path):
    # addss.pl writes predicted secondary structure and its confidence before the query: the
    # ss_pred row is upper case and as long as the query, ss_conf digits; neither is a sequence
    path = tmp_path / "x.a3m"
    path.write_text(
        ">ss_pred PSIPRED predicted secondary structure\nCCHHHHHEEC\n"
        ">ss_conf PSIPRED confidence values\n9877654321\n"
        + A3M.split("\n", 1)[1]
        + ">q_consensus\nTAYIAKQRQI\n"
    )
    msa = read_msa(path, WT)
    assert msa.query_id == "query" and msa.ids == ["h1", "h2", "h6"]
    assert msa.notes["annotation_rows_skipped"] == 3 and msa.notes["records_read"] == 7


def test_weight_sample_size_is_all_rows_within_the_limit_and_the_limit_beyond():
    assert weight_sample_size(100, 10, 100 * 100 * 10) == 100  # exactly at the limit: all
    assert weight_sample_size(100, 10, None) == 100
    assert weight_sample_size(10_000, 10, 10_000 * 3_000 * 10) == 3_000
    assert weight_sample_size(10_000, 10, 10_000 * 3_000 * 10 - 1) == 2_999
    assert weight_sample_size(10_000, 10, 1) == MIN_WEIGHT_SAMPLE  # never fewer than this
    assert weight_sample_size(100, 10, 1) == 100  # nor more than there are


def test_sampled_weights_of_unrelated_rows_stay_one():
    # no row has a neighbour but itself: a drawn row must not count itself as a neighbour
    rng = np.random.default_rng(0)
    matrix = rng.integers(0, 20, (3_000, 30)).astype(np.uint8)
    w = sequence_weights(matrix, max_cells=3_000 * 2_100 * 30)
    assert weight_sample_size(3_000, 30, 3_000 * 2_100 * 30) == 2_100
    np.testing.assert_allclose(w, 1.0)


def test_sampled_weights_scale_the_neighbours_found_to_the_whole_alignment():
    # three families of identical rows (1,500, 1,000 and 500) and 500 unrelated: exact weights
    # 1/1500, 1/1000, 1/500 and 1; a sample of 2,048 of the 3,500 rows estimates them
    rng = np.random.default_rng(1)
    sizes = (1_500, 1_000, 500)
    family = np.concatenate([np.repeat(rng.integers(0, 20, (1, 30)), s, 0) for s in sizes])
    matrix = np.concatenate([family, rng.integers(0, 20, (500, 30))]).astype(np.uint8)
    matrix[-1] = GAP  # a row of gaps only still weighs nothing
    cells = 3_500 * 2_048 * 30
    w = sequence_weights(matrix, max_cells=cells, seed=3)
    exact = sequence_weights(matrix, max_cells=None)
    start = 0
    for s in sizes:
        np.testing.assert_allclose(exact[start : start + s], 1 / s)
        np.testing.assert_allclose(w[start : start + s], 1 / s, rtol=0.15)
        start += s
    np.testing.assert_allclose(w[start:-1], 1.0)
    assert w[-1] == 0.0 and exact[-1] == 0.0
    assert abs(w.sum() - exact.sum()) < 0.02 * exact.sum()
    np.testing.assert_array_equal(w, sequence_weights(matrix, max_cells=cells, seed=3))
    assert not np.array_equal(w, sequence_weights(matrix, max_cells=cells, seed=4))


def test_sampled_weights_follow_the_estimate_when_one_row_is_not_drawn():
    # 2,049 rows, 2,048 drawn: a pair and a triple of identical rows (all drawn with this
    # seed) among unrelated rows; each counts itself once and the others scaled by N-1 / R-1
    # (float32 counts: rtol 1e-6; R instead of R-1 would be off by 3e-4)
    rng = np.random.default_rng(2)
    matrix = rng.integers(0, 20, (2_049, 30)).astype(np.uint8)
    matrix[1] = matrix[0]
    matrix[3] = matrix[4] = matrix[2]
    n, r = 2_049, 2_048
    w = sequence_weights(matrix, max_cells=n * r * 30, seed=0)
    drawn = np.sort(np.random.default_rng(0).choice(n, r, replace=False))
    assert {0, 1, 2, 3, 4} <= set(drawn.tolist())
    np.testing.assert_allclose(w[:2], 1 / (1 + 1 * (n - 1) / (r - 1)), rtol=1e-6)
    np.testing.assert_allclose(w[2:5], 1 / (1 + 2 * (n - 1) / (r - 1)), rtol=1e-6)
    np.testing.assert_allclose(w[5:], 1.0)


def test_a_closing_stop_is_not_a_column(tmp_path):
    # some tools end a sequence with "*": the same alignment as without it, whichever rows
    lines = A3M.splitlines()
    rows = [i for i, line in enumerate(lines) if line and not line.startswith((">", "#"))]
    starred = "\n".join(line + "*" if i in rows[1::2] else line for i, line in enumerate(lines))
    (tmp_path / "plain.a3m").write_text(A3M)
    (tmp_path / "starred.a3m").write_text(starred + "\n")
    plain, got = read_msa(tmp_path / "plain.a3m", WT), read_msa(tmp_path / "starred.a3m", WT)
    np.testing.assert_array_equal(got.matrix, plain.matrix)
    assert got.sequences == plain.sequences and got.notes == plain.notes


def test_a_stop_column_of_a_translated_alignment_stays_a_column(tmp_path):
    # every row ends at the stop column, in "*" or "-": aligned FASTA as written
    path = tmp_path / "t.fa"
    path.write_text(">q\nMKVLAAGIW*\n>h1\nMKVIAAGLW-\n>h2\nMRVLSAGIW*\n")
    msa = read_msa(path, "MKVLAAGIW")
    assert msa.format == "aligned-fasta" and msa.ids == ["h1", "h2"]
    np.testing.assert_array_equal(msa.matrix[0], codes("MKVIAAGLW"))
    # the same with an insertion (a2m): read, not refused
    path.write_text(">q\nMKVLAA.GIW*\n>h1\nMKVIAAgGLW-\n>h2\nMRVLSA.GIW*\n")
    msa = read_msa(path, "MKVLAAGIW")
    assert msa.format == "a2m" and msa.sequences[0] == "MKVIAAGGLW"


def test_identity_leaves_out_query_columns_without_a_standard_residue(tmp_path):
    # the wild type has an X at residue 6: that column counts for neither side; h1 shares
    # T A Y A K Q R Q (8) of the 9 other columns; h2 has one residue, the query's: 1 of 1
    wt = "MKTAYXAKQRQI"
    path = tmp_path / "x.fasta"
    path.write_text(">q\nTAYXAKQRQI\n>h1\nTAYWAKQRQL\n>h2\n---------I\n")
    msa = read_msa(path, wt)
    assert msa.ids == ["h1", "h2"]
    np.testing.assert_allclose(msa.identity(), [8 / 9, 1.0])
    np.testing.assert_allclose(msa.coverage(), [1.0, 0.1])


def test_plain_hits_have_no_identity_and_full_coverage(tmp_path):
    path = tmp_path / "hits.fasta"
    path.write_text(">h1\nMKTAYLAKQ\n>h2\nKTAYIAKQRQISF\n")
    msa = read_msa(path, WT)
    assert np.isnan(msa.identity()).all() and len(msa.identity()) == 2
    np.testing.assert_array_equal(msa.coverage(), [1.0, 1.0])


def test_coverage_without_columns_is_full():
    from protein_performer.data.msa import MSA

    msa = MSA("x", "a3m", "q", ["h1", "h2"], ["AC", "DE"], np.zeros((2, 0), np.uint8))
    np.testing.assert_array_equal(msa.coverage(), [1.0, 1.0])


@pytest.mark.parametrize("name", ["ss_dssp", "sa_dssp", "ss_pred", "ss_conf", "ss_cons", "sa_cons"])
def test_each_hhsuite_annotation_row_is_left_out(tmp_path, name):
    path = tmp_path / "x.a3m"
    path.write_text(f">{name} annotation\nCCHHHHHEEC\n>query\nTAYIAKQRQI\n>h1\nTAYLAKQR-I\n")
    msa = read_msa(path, WT)
    assert msa.query_id == "query" and msa.ids == ["h1"]
    assert msa.notes["annotation_rows_skipped"] == 1


def test_blank_lines_comment_lines_and_spaces_inside_records(tmp_path):
    # blank lines before the first record, a '#' line inside a record, and a sequence written
    # in blocks separated by spaces: the same alignment as written plainly
    path = tmp_path / "x.a3m"
    path.write_text("\n\n>query\nTAYIA\n# a comment\nKQRQI\n>h1\nTAYLA KQRQI\n>h2\nTAYIggAKQRQ-\n")
    msa = read_msa(path, WT)
    assert msa.ids == ["h1", "h2"] and msa.sequences == ["TAYLAKQRQI", "TAYIGGAKQRQ"]
    np.testing.assert_array_equal(msa.matrix, [codes("TAYLAKQRQI"), codes("TAYIAKQRQ-")])
    np.testing.assert_array_equal(msa.positions, np.arange(2, 12))


@pytest.mark.parametrize("mark", ["-", "~", "."])
def test_stockholm_rf_marks_insert_columns_with_any_gap_character(tmp_path, mark):
    rf = "xxxxxxx" + mark * 2 + "xxx"
    path = tmp_path / "x.sto"
    path.write_text(
        "# STOCKHOLM 1.0\nq/3-12 TAYIAKQ--RQI\nh1     TAYLAKQ--RQI\nh2     TAYIAKQGKR-I\n"
        f"#=GC RF {rf}\n//\n"
    )
    msa = read_msa(path, WT)
    np.testing.assert_array_equal(msa.positions, np.arange(2, 12))
    np.testing.assert_array_equal(msa.matrix, [codes("TAYLAKQRQI"), codes("TAYIAKQR-I")])


def test_stockholm_in_blocks_and_a_second_alignment_refused(tmp_path):
    # interleaved blocks join per name
    path = tmp_path / "x.sto"
    one = "# STOCKHOLM 1.0\nq/3-12 TAYIAK\nh1     TAYLAK\n\nq/3-12 QRQI\nh1     QR-I\n//\n"
    path.write_text(one)
    msa = read_msa(path, WT)
    assert msa.ids == ["h1"] and msa.sequences == ["TAYLAKQRI"]
    np.testing.assert_array_equal(msa.matrix, [codes("TAYLAKQR-I")])
    # a second alignment after '//' (a file of several families) is refused, not dropped
    path.write_text(one + "# STOCKHOLM 1.0\nq/3-12 TAYIAKQRQI\nh2     TAYWAKQRQI\n//\n")
    with pytest.raises(
        DataError, match=r"2 alignments in one Stockholm file \(the first ends at line 7\)"
    ):
        read_msa(path, WT)


def test_an_empty_stockholm_file(tmp_path):
    path = tmp_path / "x.sto"
    path.write_text("# STOCKHOLM 1.0\n#=GF ID x\n//\n")
    with pytest.raises(DataError, match=r"x\.sto: empty Stockholm alignment: no sequences"):
        read_msa(path, WT)


def test_dots_without_lower_case_are_gaps_of_an_alignment(tmp_path):
    # an a2m insert column no row has a residue in reads as before: no column of the query
    path = tmp_path / "x.a2m"
    path.write_text(">q\nTAY.IAKQRQI\n>h1\nTAY.LAKQRQI\n")
    msa = read_msa(path, WT)
    assert msa.format == "aligned-fasta" and msa.aligned
    np.testing.assert_array_equal(msa.matrix, [codes("TAYLAKQRQI")])
    # an aligned FASTA written with '.' gaps (no lower case): every column a match column
    path.write_text(">q\nTAYIAKQRQI\n>h1\nTA.LAK..QI\n>h2\n.AYWAKQRQ.\n")
    msa = read_msa(path, WT)
    assert msa.format == "aligned-fasta" and msa.ids == ["h1", "h2"]
    np.testing.assert_array_equal(msa.matrix, [codes("TA-LAK--QI"), codes("-AYWAKQRQ-")])


def test_rows_all_in_lower_case_are_an_aligned_fasta(tmp_path):
    # lower case marks insertions only beside upper case: rows all in lower case are residues
    path = tmp_path / "x.fasta"
    path.write_text(">q\ntayiakqrqi\n>h1\nta-lakqr-i\n")
    msa = read_msa(path, WT)
    assert msa.format == "aligned-fasta" and msa.sequences == ["TALAKQRI"]
    assert msa.notes["insertions_dropped_from_columns"] == 0  # lower case is no insertion here
    np.testing.assert_array_equal(msa.matrix, [codes("TA-LAKQR-I")])
    # beside one upper-case row, lower case is an insertion again
    path.write_text(">q\nTAYIAKQRQI\n>h1\nTAYLAKQRQIaa\n")
    msa = read_msa(path, WT)
    assert msa.format == "a3m" and msa.notes["insertions_dropped_from_columns"] == 2


def test_a_gap_only_record_is_not_taken_for_the_query(tmp_path):
    path = tmp_path / "x.a3m"
    path.write_text(">h1\nTAYLAKQR-I\n>h2\n----------\n>query\nTAYIAKQRQI\n")
    msa = read_msa(path, WT)
    assert msa.query_id == "query" and msa.notes["query_record"] == 3
    assert msa.ids == ["h1"] and msa.notes["gap_only_rows"] == 1


def test_a_query_running_past_the_wild_type_says_how_far_it_reaches(tmp_path):
    # residues 20-25 named, but the wild type ends at 22: 3 residues from there
    path = tmp_path / "x.a3m"
    path.write_text(">q/20-25\nSRQAAA\n>h\nSRQAA-\n")
    with pytest.raises(DataError, match="it has 6 residues, the wild type 3 from there"):
        read_msa(path, WT)


def test_nearly_a_stretch_allows_two_changes_or_two_percent():
    from protein_performer.data.msa import _nearly_a_stretch

    rng = np.random.default_rng(0)
    wt = "".join(rng.choice(list(STANDARD_AMINO_ACIDS), 300))

    def changed(start, length, k):
        q = list(wt[start : start + length])
        for i in range(k):  # change k residues, 3 apart
            q[3 * i] = "W" if q[3 * i] != "W" else "Y"
        return "".join(q)

    assert _nearly_a_stretch(changed(5, 10, 2), wt)  # at least 2, however short
    assert not _nearly_a_stretch(changed(5, 10, 3), wt)
    assert _nearly_a_stretch(changed(5, 150, 3), wt)  # 150 // 50 = 3
    assert not _nearly_a_stretch(changed(5, 150, 4), wt)
    assert _nearly_a_stretch(changed(0, 300, 6), wt)  # the whole wild type, 2 %
    assert not _nearly_a_stretch(wt + "A", wt)  # longer than the wild type


def test_focus_columns_map_onto_the_nearest_residues_not_across_the_ends(tmp_path):
    # the query is residues 1-5 and 11-15 of the wild type; its last R is also at 24, but the
    # alignment leaves out one block inside (6-10), not two, whatever the tail left over
    wt = "ACDEFGHIKLMNPQRYYYYYYYYR"
    path = tmp_path / "x.fasta"
    path.write_text(">q\nACDEFMNPQR\n>h1\nACDEWMNPQ-\n")
    msa = read_msa(path, wt)
    np.testing.assert_array_equal(msa.positions, [0, 1, 2, 3, 4, 10, 11, 12, 13, 14])


def test_without_a_wild_type_the_first_record_is_it(tmp_path):
    path = tmp_path / "x.a3m"
    path.write_text(">query\nTAYIAKQRQI\n>h1\nTAYLAKQRQI\n>h2\n--YLAKQR--\n")
    msa = read_msa(path, None)
    assert msa.query_id == "query" and msa.ids == ["h1", "h2"]
    np.testing.assert_array_equal(msa.positions, np.arange(10))
    assert msa.notes["query_start"] == 1 and msa.notes["wild_type_residues_covered"] == "1-10"


def test_notes_count_copies_insertions_fragments_and_name_unnamed_records(tmp_path):
    # h1: the whole wild type (insertions around the query's stretch): a copy, left out;
    # h2: 2 inserted residues (lower case; the '.' of the others are not residues);
    # an unnamed record is named by its place in the file; h3 has 5 of 10 columns (half: not
    # a fragment), h4 4 of 10 (a fragment)
    path = tmp_path / "x.a2m"
    path.write_text(
        ">query/3-12\n..TAYIAKQRQI..........\n>h1\nmkTAYIAKQRQIsfvkshfsrq\n"
        ">h2\n..TAYgkLAKQRQ-........\n>\n..TAYLAKQRQI..........\n"
        ">h3\n..TAYLA-----..........\n>h4\n..-----KQRQ-..........\n"
    )
    msa = read_msa(path, WT)
    assert msa.format == "a2m"
    assert msa.ids == ["h2", "record4", "h3", "h4"]
    notes = msa.notes
    assert notes["copies_of_wild_type_left_out"] == 1
    assert notes["insertions_dropped_from_columns"] == 2
    assert notes["fragments"] == 1
    assert notes["wild_type_residues_covered"] == "3-12" and notes["columns"] == 10
    np.testing.assert_allclose(msa.coverage(), [0.9, 1.0, 0.5, 0.4])


def test_a_later_query_gives_the_query_residues_identity_is_taken_against(tmp_path):
    path = tmp_path / "x.a3m"
    path.write_text(">h1\nTAYLAKQR-I\n>query\nTAYIAKQRQI\n>h2\nTAYIAKQRWL\n")
    msa = read_msa(path, WT)
    np.testing.assert_array_equal(msa.query_codes, codes("TAYIAKQRQI"))
    # h1: 8 of its 9 residues the query's; h2: 8 of 10
    np.testing.assert_allclose(msa.identity(), [8 / 9, 0.8])


def test_plain_hits_and_records_leave_out_records_without_residues(tmp_path):
    from protein_performer.data.msa import alignment_records

    path = tmp_path / "hits.fasta"
    path.write_text(">h0 no residues\n>h1\nMKTAYLAKQ\n>h2\n---\n>h3\nKTAYIAKQRQISF\n")
    msa = read_msa(path, WT)
    assert msa.ids == ["h1", "h3"] and msa.sequences == ["MKTAYLAKQ", "KTAYIAKQRQISF"]
    kind, records = alignment_records(path)
    assert kind == "fasta" and records == [("h1", "MKTAYLAKQ"), ("h3", "KTAYIAKQRQISF")]
    path = tmp_path / "x.a3m"
    path.write_text(">query\nTAYIAKQRQI\n>\n--YLakAKQR--\n>h2\n----------\n")
    kind, records = alignment_records(path)
    assert kind == "a3m" and records == [("query", "TAYIAKQRQI"), ("record2", "YLAKAKQR")]


def test_shared_gaps_are_not_shared_residues_and_the_default_identity_is_0_8():
    # a and b share 3 of their 5 residues; their 5 common gaps do not count
    a = codes("ACDEF-----")
    b = codes("ACDWW-----")
    np.testing.assert_allclose(sequence_weights(np.array([a, b], dtype=np.uint8)), [1.0, 1.0])
    # c shares 7 of a2's 10 residues (0.7), d 8 of 10 (0.8): only d is a neighbour by default
    a2 = codes("ACDEFGHIKL")
    c = codes("ACDEFGHWWW")
    d = codes("ACDEFGHIWW")
    np.testing.assert_allclose(sequence_weights(np.array([a2, c], dtype=np.uint8)), [1.0, 1.0])
    np.testing.assert_allclose(sequence_weights(np.array([a2, d], dtype=np.uint8)), [0.5, 0.5])


@pytest.mark.parametrize(("n", "block"), [(15, 7), (8, 7), (1, 7), (7, 7)])
def test_sequence_weights_count_every_row_whatever_the_block(n, block):
    # identical rows: each has n neighbours, itself included
    rng = np.random.default_rng(n)
    matrix = np.repeat(rng.integers(0, 20, (1, 12)), n, 0).astype(np.uint8)
    np.testing.assert_allclose(sequence_weights(matrix, block=block), np.full(n, 1 / n))


@pytest.mark.parametrize("mark", ["-", "~", "."])
def test_stockholm_rf_insert_column_holding_a_query_residue_is_not_a_column(tmp_path, mark):
    # RF marks column 4 (the query's I, residue 6) and columns 8-9 as insert columns
    rf = "xxx" + mark + "xxx" + mark * 2 + "xxx"
    path = tmp_path / "x.sto"
    path.write_text(
        "# STOCKHOLM 1.0\nq/3-12 TAYIAKQ--RQI\nh1     TAYLAKQ--RQI\nh2     TAYIAKQGKR-I\n"
        f"#=GC RF {rf}\n//\n"
    )
    msa = read_msa(path, WT)
    np.testing.assert_array_equal(msa.positions, [2, 3, 4, 6, 7, 8, 9, 10, 11])
    np.testing.assert_array_equal(msa.matrix, [codes("TAYAKQRQI"), codes("TAYAKQR-I")])
    assert msa.sequences == ["TAYLAKQRQI", "TAYIAKQGKRI"]


def test_aligned_fasta_written_in_blocks_with_spaces(tmp_path):
    path = tmp_path / "x.fasta"
    path.write_text(">q\nTAYIA KQRQI\n>h1\nTAY-AK QRQL\n")
    msa = read_msa(path, WT)
    assert msa.format == "aligned-fasta"
    np.testing.assert_array_equal(msa.matrix, [codes("TAY-AKQRQL")])


def test_weighted_order_negative_and_all_zero_weights():
    # a negative weight is no weight: drawn last, like a zero
    weights = np.array([1.0, -5.0, 1.0, 1.0])
    for sample in range(20):
        assert homolog_order("weighted", weights=weights, sample=sample)[-1] == 1
    # no weight anywhere: every homolog equally likely, not the file's order
    zeros = np.zeros(6)
    firsts = {int(homolog_order("weighted", weights=zeros, sample=s)[0]) for s in range(40)}
    assert len(firsts) >= 4
    for s in range(5):
        assert sorted(homolog_order("weighted", weights=zeros, sample=s)) == list(range(6))


def test_orders_stop_at_the_homologs_there_are_and_diverse_skips_chosen_copies():
    m = np.array([codes("AAAAAAAAAA")] * 3 + [codes("CCCCCCCCCC")], dtype=np.uint8)
    np.testing.assert_array_equal(homolog_order("first", matrix=m, limit=10), [0, 1, 2, 3])
    assert len(homolog_order("weighted", weights=np.ones(4), limit=10)) == 4
    # identical rows are at distance 0 from the first: taken after the distinct one, each once
    np.testing.assert_array_equal(homolog_order("diverse", matrix=m), [0, 3, 1, 2])
    np.testing.assert_array_equal(homolog_order("diverse", matrix=m, limit=10), [0, 3, 1, 2])
    same = np.array([codes("AAAAAAAAAA")] * 4, dtype=np.uint8)
    np.testing.assert_array_equal(homolog_order("diverse", matrix=same), [0, 1, 2, 3])


def test_weighted_order_is_an_efraimidis_spirakis_draw_and_diverse_starts_from_it():
    # reference: keys log(u) / w from the generator seeded [seed, sample], largest first
    rng = np.random.default_rng(5)
    m = rng.integers(0, 20, size=(9, 12)).astype(np.uint8)
    weights = rng.random(9) + 0.1
    starts = []
    for seed in range(4):
        for sample in (1, 2):
            u = np.random.default_rng([seed, sample]).random(9)
            expected = np.argsort(-(np.log(u) / weights), kind="stable")
            got = homolog_order("weighted", weights=weights, seed=seed, sample=sample)
            np.testing.assert_array_equal(got, expected)
            diverse = homolog_order("diverse", matrix=m, weights=weights, seed=seed, sample=sample)
            assert diverse[0] == expected[0]
            starts.append(int(expected[0]))
    assert any(s != 0 for s in starts[::2])  # sample 1 does not start from the first


@pytest.mark.parametrize("kind", ["xz", "bzip2", "bom"])
def test_xz_bzip2_and_a_byte_order_mark_are_read(tmp_path, kind):
    import bz2
    import lzma

    data = A3M.encode()
    path = tmp_path / "x.a3m"
    if kind == "xz":
        path.write_bytes(lzma.compress(data))
    elif kind == "bzip2":
        path.write_bytes(bz2.compress(data))
    else:  # saved by a Windows editor
        path.write_bytes(b"\xef\xbb\xbf" + data)
    msa = read_msa(path, WT)
    assert msa.ids == ["h1", "h2", "h6"] and msa.notes["header_lines_skipped"] == 1


def test_zstd_is_refused_in_one_line(tmp_path):
    path = tmp_path / "x.a3m.zst"
    path.write_bytes(b"(\xb5/\xfd" + b"\x00" * 20)
    with pytest.raises(DataError, match="zstd-compressed: decompress it first"):
        read_msa(path, WT)


def test_no_homolog_error_names_the_query_and_the_file(tmp_path):
    from protein_performer.data.msa import no_homolog_error

    path = tmp_path / "x.a3m"
    path.write_text(">query\nTAYIAKQRQI\n>h1\nTAYIAKQRQI\n>h2\n----------\n")
    msa = read_msa(path, WT)
    assert msa.ids == [] and msa.matrix.shape == (0, 10)
    message = str(no_homolog_error(msa))
    assert str(path) in message and "besides its query query " in message
    assert "\n" not in message


def test_nul_bytes_of_a_file_padded_after_a_crash_are_dropped(tmp_path):
    path = tmp_path / "x.fasta"
    path.write_bytes(b">q\nTAY-IAKQRQI\n>h1\nTAYWIAKQR-I\x00\x00\x00\n\x00\x00\n")
    msa = read_msa(path, WT)
    assert msa.format == "aligned-fasta" and msa.ids == ["h1"]
    np.testing.assert_array_equal(msa.matrix, [codes("TAYIAKQR-I")])


def test_records_without_a_name_are_named_by_number(tmp_path):
    hits = tmp_path / "p.fa"
    hits.write_text(">\nMKTAYLAKQ\n>h2\nKTAYIAKQRQISF\n")
    msa = read_msa(hits, WT)
    assert msa.ids == ["record1", "h2"] and msa.sequences == ["MKTAYLAKQ", "KTAYIAKQRQISF"]
    query = tmp_path / "q.a3m"
    query.write_text(">\nTAYIAKQRQI\n>h1\nTAYLaAKQRQI\n")
    msa = read_msa(query, WT)
    assert msa.query_id == "record1" and msa.ids == ["h1"]
    uneven = tmp_path / "u.a3m"
    uneven.write_text(">q\nTAYIAKQRQI\n>\nTAYLaAKQ\n")
    with pytest.raises(DataError, match=r"record 2 \(record2\): 7 match columns where the query"):
        read_msa(uneven, WT)


def test_a_query_without_residues_is_a_one_line_error_or_skipped_for_the_wild_type(tmp_path):
    gaps = tmp_path / "g.fa"
    gaps.write_text(">q\n----------\n>h1\nTAYLAKQRQ-\n")
    with pytest.raises(DataError, match=r"record 1 \(q\): the alignment's query .* no residues"):
        read_msa(gaps, WT)
    with pytest.raises(DataError, match="no residues"):
        read_msa(gaps, None)
    # a later record that is the wild type is the query, as when the first is another protein
    later = tmp_path / "l.fa"
    later.write_text(">q\n----------\n>wt\nTAYIAKQRQI\n>h1\nTAYLAKQRQ-\n")
    msa = read_msa(later, WT)
    assert msa.query_id == "wt" and msa.ids == ["h1"]


def test_a_stockholm_file_after_blank_lines_is_read(tmp_path):
    sto = tmp_path / "a.sto"
    sto.write_text("\n\n# STOCKHOLM 1.0\nq/3-12 TAYIAKQRQI\nh1     TAYLAKQRQI\n//\n")
    msa = read_msa(sto, WT)
    assert msa.format == "stockholm" and msa.ids == ["h1"]
    np.testing.assert_array_equal(msa.positions, np.arange(2, 12))


def test_diverse_order_with_no_room_is_empty_like_the_others():
    m = np.array([[0, 1, 2], [0, 1, 3], [4, 5, 6]], dtype=np.uint8)
    for sampling in ("first", "weighted", "diverse"):
        order = homolog_order(sampling, weights=np.ones(3), matrix=m, limit=0)
        assert order.tolist() == [], sampling
    assert homolog_order("diverse", weights=np.ones(3), matrix=m, limit=2).tolist() == [0, 2]


def test_a_colabfold_a3m_without_gaps_or_insertions_is_an_alignment(tmp_path):
    path = tmp_path / "close.a3m"  # close, full-length homologs: no '-', no lower case
    path.write_text("#10\t1\n>101\nTAYIAKQRQI\n>h1\nTAYLAKQRQI\n>h2\nSAYIAKQRQV\n")
    msa = read_msa(path, WT)
    assert msa.format == "a3m" and msa.ids == ["h1", "h2"]
    np.testing.assert_array_equal(msa.matrix[1], codes("SAYIAKQRQV"))
    np.testing.assert_array_equal(msa.positions, np.arange(2, 12))
    # the same rows without the header line are plain hits (nothing says they are aligned)
    path.write_text(">101\nTAYIAKQRQI\n>h1\nTAYLAKQRQI\n>h2\nSAYIAKQRQV\n")
    assert read_msa(path, WT).format == "fasta"
    # with the header, a row of another length is a broken alignment, named
    path.write_text("#10\t1\n>101\nTAYIAKQRQI\n>h1\nTAYLAKQRQI\n>h2\nSAYIAKQR\n")
    with pytest.raises(DataError, match=r"record 3 \(h2\): 8 match columns where the query has 10"):
        read_msa(path, WT)


def test_gapped_rows_mostly_of_one_length_are_an_alignment_with_a_broken_row(tmp_path):
    rows = [f">h{k}\nTAY-AKQR{'QI' if k % 2 else 'QV'}\n" for k in range(1, 10)]
    path = tmp_path / "x.fasta"
    broken = [*rows[:6], ">h7\nTAY-AKQ\n", *rows[7:]]  # 9 of 10 rows of one length
    path.write_text(">q\nTAYIAKQRQI\n" + "".join(broken))
    with pytest.raises(DataError, match=r"record 8 \(h7\): 7 match columns where the query has 10"):
        read_msa(path, WT)
    # hits aligned pairwise (gaps, lengths that differ row to row) stay plain hits
    pairwise = ">q\nTAYIAKQRQI\n>a\nTAY-AKQ\n>b\nTAYIAKQ-QIS\n>c\nAY-AKQRQ\n>d\nTAYIAKQRQI-\n"
    path.write_text(pairwise)
    assert read_msa(path, WT).format == "fasta"
    # the line: 4 of 5 rows of one length is an alignment, 3 of 5 is not
    three = ">q\nTAYIAKQRQI\n>a\nTAY-AKQRQI\n>b\nTAYIAKQ-QI\n>c\nAY-AKQRQ\n>d\nTAYIAKQRQI-\n"
    path.write_text(three)
    assert read_msa(path, WT).format == "fasta"
    path.write_text(three.replace(">d\nTAYIAKQRQI-", ">d\nTAYIAKQRQ-"))
    with pytest.raises(DataError, match=r"record 4 \(c\): 8 match columns where the query has 10"):
        read_msa(path, WT)


def test_a_wild_type_that_is_a_domain_of_the_alignments_query(tmp_path):
    # the alignment is of the whole protein (22 residues); the scan's wild type residues 5-16
    domain = WT[4:16]  # YIAKQRQISFVK
    path = tmp_path / "whole.a2m"
    path.write_text(
        f">q/1-22\n{WT}\n"
        ">h1\nMKTAYLAKQRQISFVRSHFSRQ\n"
        ">h2\nMKTA------------SHFSRQ\n"  # residues only outside the domain: no column of it
        ">h3\n----YIAKQRLISF--------\n"
    )
    msa = read_msa(path, domain)
    np.testing.assert_array_equal(msa.positions, np.arange(12))  # query residues 5-16
    assert msa.ids == ["h1", "h3"] and msa.notes["gap_only_rows"] == 1
    np.testing.assert_array_equal(msa.matrix[0], codes("YLAKQRQISFVR"))
    np.testing.assert_array_equal(msa.matrix[1], codes("YIAKQRLISF--"))
    assert msa.notes["query_residues_read"] == "5-16"
    assert msa.notes["wild_type_residues_covered"] == "1-12"
    assert msa.sequences[0] == "MKTAYLAKQRQISFVRSHFSRQ"  # the homolog whole, for its window
    # a query that holds the domain only in part is still not the wild type
    with pytest.raises(DataError, match="is not the wild type"):
        read_msa(path, WT[4:16] + "W")


def test_what_is_said_of_a_query_placed_otherwise_than_its_name_or_record_says(tmp_path):
    path = tmp_path / "x.a2m"
    path.write_text(">q/7-16\nTAYIAKQRQI\n>h1\nTAYLAKQ-QI\n")  # residues 3-12, not 7-16
    msa = read_msa(path, WT)
    assert msa.notes["query_range_in_name_ignored"] == "7-16"
    np.testing.assert_array_equal(msa.positions, np.arange(2, 12))
    path.write_text(">q/3-12\nTAYIAKQRQI\n>h1\nTAYLAKQ-QI\n")
    notes = read_msa(path, WT).notes
    assert "query_range_in_name_ignored" not in notes and "record_1_differs" not in notes
    # record 1 is not the wild type, record 3 is: where record 1 differs is said
    path.write_text(">first\nTAYLAKQRQW\n>h1\nSAYLAKQ-QI\n>q\nTAYIAKQRQI\n")
    msa = read_msa(path, WT)
    assert msa.notes["query_record"] == 3 and msa.notes["record_1"] == "first"
    assert msa.notes["record_1_differs"] == (
        "2 residues changed at its best place in the wild type: I6L, I12W"
    )
    assert "first" in msa.ids  # read as a homolog
    path.write_text(">first\nTAYLAKQRQI\n>h1\nSAYLAKQ-QI\n>q\nTAYIAKQRQI\n")
    assert read_msa(path, WT).notes["record_1_differs"] == (
        "1 residue changed at its best place in the wild type: I6L"
    )
    # a first record longer than the wild type, not holding it: its length is what differs
    longer = "TAYLAKQRQW" + "w" * 13  # 10 columns and 13 inserted: 23 residues against 22
    path.write_text(f">first\n{longer}\n>h1\nSAYLAKQ-QI\n>q\nTAYIAKQRQI\n")
    assert read_msa(path, WT).notes["record_1_differs"] == "it has 23 residues, the wild type 22"


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        # a row of the second block is short: named with the line it starts on
        (
            "q/3-12 TAYIA\nh1     TAYLA\n\nq/3-12 KQRQI\nh1     KQR\n",
            3,
            "record 'h1' has 8 columns",
        ),
        ("q/3-12 TAYIAKQRQI\nh1     TAYLAKQRQI\nh2     TAYLAKQRQIAA\n", 4, "record 'h2' has 12"),
        # a per-residue annotation of the wrong length (Biopython raises TypeError)
        (
            "q/3-12 TAYIAKQRQI\n#=GR q/3-12 SS ..\nh1     TAYLAKQRQI\n",
            3,
            "annotation '#=GR q/3-12 SS'",
        ),
        (
            "q/3-12 TAYIAKQRQI\n#=GC SS_cons ...\nh1     TAYLAKQRQI\n",
            3,
            "annotation '#=GC SS_cons'",
        ),
        # a name without its sequence
        ("q/3-12 TAYIAKQRQI\n\nh1     TAYLAKQRQI\nh2\n", 5, "'h2' is not a row"),
    ],
)
def test_a_broken_stockholm_file_names_the_line_and_record(tmp_path, body, line, what):
    sto = tmp_path / "bad.sto"
    sto.write_text("# STOCKHOLM 1.0\n" + body + "//\n")
    with pytest.raises(DataError) as e:
        read_msa(sto, WT)
    message = str(e.value)
    assert "\n" not in message and "bad.sto" in message
    assert f"line {line}: " in message and what in message


def test_a_broken_stockholm_file_otherwise_gives_biopythons_reason_on_one_line(
    tmp_path, monkeypatch
):
    import protein_performer.data.stockholm as stockholm_module

    monkeypatch.setattr(stockholm_module, "_stockholm_problem", lambda text: None)
    sto = tmp_path / "bad.sto"
    sto.write_text("# STOCKHOLM 1.0\nq/3-12 TAYIAKQRQI\nh1\n//\n")
    with pytest.raises(DataError, match=r"not a readable Stockholm file \(Could not split") as e:
        read_msa(sto, WT)
    assert "\n" not in str(e.value)


def test_a_query_row_of_another_width_is_the_row_named(tmp_path):
    # the homologs agree with each other: the query's row is the broken one
    path = tmp_path / "x.fasta"
    rows = ("TAYLAKQR-I", "--YLAKQRQI", "TAYWAKQRQ-", "TAY-AKQRQI", "TAYLAKQRQ-")
    path.write_text(">q\nTAYIAKQRQI--\n" + "".join(f">h{i}\n{r}\n" for i, r in enumerate(rows)))
    with pytest.raises(DataError, match=r"record 1 \(q\): 12 match columns where the other rows"):
        read_msa(path, WT)
    # the query and most rows agree: the homolog that does not is named, against the query
    path.write_text(
        ">q\nTAYIAKQRQI\n"
        + "".join(f">h{i}\n{r}\n" for i, r in enumerate(rows[:4]))
        + ">h9\nTAYLAKQRQI--\n"
    )
    with pytest.raises(
        DataError, match=r"record 6 \(h9\): 12 match columns where the query has 10"
    ):
        read_msa(path, WT)


def test_residues_covered_are_the_columns_and_a_range_is_checked_at_both_ends(tmp_path):
    # the query's last two residues are insertions: the columns end at residue 10, not 12
    path = tmp_path / "x.a2m"
    path.write_text(">q/3-12\nTAYIAKQRqi\n>h1\nTAYLAKQRaa\n>h2\n-AYLAKQR..\n")
    msa = read_msa(path, WT)
    assert msa.notes["wild_type_residues_covered"] == "3-10" and msa.notes["columns"] == 8
    path.write_text(">q/3-12\ntaYIAKQRQI\n>h1\naaYLAKQRQI\n>h2\n..YLAKQR-I\n")  # from residue 5
    assert read_msa(path, WT).notes["wild_type_residues_covered"] == "5-12"
    assert "query_range_in_name_ignored" not in msa.notes
    # a name whose END does not match the residues it holds is said, as one whose START is not
    for named, said in (("q/3-11", "3-11"), ("q/3-13", "3-13"), ("q/4-12", "4-12")):
        path.write_text(f">{named}\nTAYIAKQRQI\n>h1\nTAYLAKQR-I\n")
        msa = read_msa(path, WT)
        assert msa.notes["query_range_in_name_ignored"] == said
        assert msa.notes["query_start"] == 3


def test_a_utf16_file_reads_as_its_utf8_twin(tmp_path):
    text = ">q/3-12\nTAYIAKQRQI\n>h1\nTAYLAKQR-I\n>h2\n--YLAKQRQI\n"
    (tmp_path / "u8.a3m").write_text(text, encoding="utf-8")
    want = read_msa(tmp_path / "u8.a3m", WT)
    for codec in ("utf-16", "utf-16-be", "utf-16-le"):
        bom = {"utf-16-be": codecs.BOM_UTF16_BE, "utf-16-le": codecs.BOM_UTF16_LE}.get(codec, b"")
        path = tmp_path / f"{codec}.a3m"
        path.write_bytes(bom + text.encode(codec))
        msa = read_msa(path, WT)
        assert msa.ids == want.ids and msa.sequences == want.sequences
        np.testing.assert_array_equal(msa.matrix, want.matrix)


def test_offset_numbers_the_wild_type_as_the_scan_does(tmp_path):
    # a domain scanned as residues 101-122: the alignment names its query in that numbering
    path = tmp_path / "x.a2m"
    path.write_text(">q/103-112\nTAYIAKQRQI\n>h1\nTAYLAKQR-I\n>h2\n--YLAKQRQI\n")
    msa = read_msa(path, WT, offset=101)
    assert msa.notes["query_start"] == 103 and msa.notes["wild_type_residues_covered"] == "103-112"
    assert "query_range_in_name_ignored" not in msa.notes
    np.testing.assert_array_equal(msa.positions, np.arange(2, 12))  # 0-based, as always
    # numbered from 1 it is said not to match (and placed by its residues all the same)
    plain = read_msa(path, WT)
    assert plain.notes["query_range_in_name_ignored"] == "103-112"
    np.testing.assert_array_equal(plain.positions, msa.positions)
    # a query that is not the wild type: the residue named in the scan's numbering
    path.write_text(">q/103-112\nTWYIAKQRQI\n>h1\nTAYLAKQR-I\n")
    with pytest.raises(DataError, match="residue 104: W in the alignment, A in the wild type"):
        read_msa(path, WT, offset=101)
    # a later record the query: how record 1 differs, in the same numbering
    path.write_text(">h0\nTAYLAKQRWI\n>q\nTAYIAKQRQI\n>h1\nTAYLAKQR-I\n")
    notes = read_msa(path, WT, offset=101).notes
    assert notes["record_1_differs"].endswith("I106L, Q111W")


def test_letters_other_than_the_20_in_the_columns_are_counted(tmp_path):
    # X, B, J and '*' in a homolog's columns read as gaps, and are counted; in an insertion
    # (lower case) or in the query's gaps they are no column, and not counted
    path = tmp_path / "x.a3m"
    path.write_text(">q\nTAYIAKQRQI\n>h1\nTAXLAKBR-I\n>h2\n--YLJKQRQ*\n>h3\nTAYLAKxQRQI\n")
    msa = read_msa(path, WT)
    assert msa.notes["other_letters_read_as_gaps"] == 4
    np.testing.assert_array_equal(msa.matrix[0], codes("TA-LAK-R-I"))
    path.write_text(">q\nTAYIAKQRQI\n>h1\nTAYLAKQR-I\n>h2\nTAY~AKQR~I\n")  # '~': a gap
    assert read_msa(path, WT).notes["other_letters_read_as_gaps"] == 0


def test_a_search_folder_given_for_its_hits_names_the_file(tmp_path):
    folder = tmp_path / "hits"
    folder.mkdir()
    with pytest.raises(DataError, match=r"hits: is a directory, expected an alignment"):
        read_msa(folder, WT)  # any folder: the plain refusal
    (folder / "hits.fasta").write_text(f">h\n{WT}\n")
    with pytest.raises(DataError) as e:
        read_msa(folder, WT)
    assert str(e.value) == (
        f"{folder}: is a directory (a data search output? give its hits as context=: "
        f"{folder / 'hits.fasta'})"
    )
