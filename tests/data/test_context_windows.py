"""Context windows: layout, budget, the cut member, both styles."""

from __future__ import annotations

import numpy as np
import pytest

from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.context_windows import (
    column_window,
    context_window,
    fit_members,
    in_rank_order,
    single_window,
)
from protein_performer.errors import ConfigError

A = default_alphabet()


def enc(s: str) -> np.ndarray:
    return A.encode(s).astype(np.int64)


def text(tokens: np.ndarray) -> str:
    return A.decode(tokens, keep_specials=True)


def test_context_comes_first_target_last_and_the_budget_holds():
    target = enc("MKVL")
    ctx = [enc("AAAAA"), enc("CCCCCCCCCC"), enc("DDD")]
    tokens, start, n = context_window(target, ctx, A, 40, min_context=2)
    assert text(tokens) == "<cls>AAAAA<sep>CCCCCCCCCC<sep>DDD<sep>MKVL<eos>"
    assert n == 3 and text(tokens[start : start + 4]) == "MKVL"
    # 16 tokens: room for 10 of context: AAAAA<sep> then CCC<sep> (cut to the budget)
    tokens, start, n = context_window(target, ctx, A, 16, min_context=2)
    assert text(tokens) == "<cls>AAAAA<sep>CCC<sep>MKVL<eos>" and len(tokens) == 16 and n == 2
    # a cut shorter than min_context is left out
    tokens, _, n = context_window(target, ctx, A, 16, min_context=4)
    assert text(tokens) == "<cls>AAAAA<sep>MKVL<eos>" and n == 1
    # no room at all: the target alone, the same as single_window
    tokens, start, n = context_window(target, ctx, A, 6)
    assert n == 0 and start == 1
    np.testing.assert_array_equal(tokens, single_window(target, A))
    with pytest.raises(ConfigError, match="does not fit"):
        context_window(target, ctx, A, 5)


def test_concat_style_has_no_cls_or_eos():
    tokens, start, n = context_window(enc("MK"), [enc("AAA")], A, 20, style="concat")
    assert text(tokens) == "AAA<sep>MK<sep>" and start == 4 and n == 1
    assert text(single_window(enc("MK"), A, "concat")) == "MK<sep>"
    with pytest.raises(ConfigError, match="style"):
        single_window(enc("MK"), A, "window")


def test_a_cut_member_covers_the_targets_region():
    target = enc("MKV")
    member = enc("AAAAACCCCCDDDDD")
    start = context_window(target, [member], A, 12, anchor=0.0, min_context=2)[0]
    end = context_window(target, [member], A, 12, anchor=1.0, min_context=2)[0]
    middle = context_window(target, [member], A, 12, anchor=0.5, min_context=2)[0]
    assert text(start) == "<cls>AAAAAC<sep>MKV<eos>"
    assert text(end) == "<cls>CDDDDD<sep>MKV<eos>"
    assert text(middle) == "<cls>ACCCCC<sep>MKV<eos>"
    # an iterable is read only as far as the window needs
    seen = []

    def members():
        for m in (enc("AAAA"), enc("CCCCCCCCCCCC"), enc("DDDD")):
            seen.append(m)
            yield m

    context_window(target, members(), A, 12, min_context=2)
    assert len(seen) == 2


def test_old_import_paths_are_the_renamed_modules():
    """data/context.py and data/alignment.py were renamed for what they hold; their old names
    stay for one release."""
    from protein_performer.data import alignment, context, context_windows, pairwise_alignment
    from protein_performer.data.alignment import _aligner, aligned_positions
    from protein_performer.data.context import context_window as old_context_window

    assert context is context_windows and alignment is pairwise_alignment
    assert old_context_window is context_window
    assert aligned_positions is pairwise_alignment.aligned_positions
    assert _aligner is pairwise_alignment.local_aligner


@pytest.mark.parametrize("budget", [0, 12, 30, 31, 47, 60, 200])
@pytest.mark.parametrize("order", [[4, 1, 5, 0, 3, 2], [1, 2, 0, 5, 3, 4], [3, 0, 2, 1, 4, 5]])
def test_drawn_homologs_that_fit_are_placed_by_rank(budget, order):
    lengths = [10, 20, 5, 15, 8, 30]

    def window(indices):  # (homolog, residues kept) as fit_members takes them
        kept = fit_members([np.zeros(lengths[i]) for i in indices], budget, min_context=4)
        return [(int(i), len(k)) for i, k in zip(indices, kept, strict=False)]

    placed = in_rank_order(order, lengths, budget, min_context=4)
    assert sorted(placed) == sorted(order)
    drawn, got = window(order), window(placed)
    # the same homologs go in, cut the same way (a cut one stays last)
    assert sorted(got) == sorted(drawn)
    whole = [i for i, n in got if n == lengths[i]]
    assert whole == sorted(whole)  # the whole ones by rank, best first
    assert [i for i, _ in got] == whole + [i for i, n in got if n < lengths[i]]
    assert list(placed[len(got) :]) == order[len(got) :]  # the rest as drawn


def test_a_draw_whose_cut_homolog_ranks_first_keeps_every_homolog():
    # in draw order: two short ones whole, then the long one cut; sorting all three by rank
    # would put the long one first, cut, and leave the short ones out
    placed = in_rank_order([1, 2, 0], [900, 10, 10], 500)
    assert list(placed) == [1, 2, 0]
    kept = fit_members([np.zeros(n) for n in np.array([900, 10, 10])[placed]], 500)
    assert [len(k) for k in kept] == [10, 10, 477]


def test_room_check_is_exact_for_whole_and_cut_members():
    target = enc("MKVL")
    # 4 tokens of room: DDD<sep> fits whole, however short next to min_context
    tokens, start, n = context_window(target, [enc("DDD")], A, 10)
    assert text(tokens) == "<cls>DDD<sep>MKVL<eos>" and start == 5 and n == 1
    # a cut of exactly min_context residues (5) and its <sep> in 6 tokens of room: kept
    long = enc("ACDEFGHIKLMNPQRSTVWY")
    tokens, _, n = context_window(target, [long], A, 12, min_context=5)
    assert text(tokens) == "<cls>ACDEF<sep>MKVL<eos>" and n == 1
    # 5 tokens of room: a cut of 4 would be shorter than min_context: left out
    tokens, _, n = context_window(target, [long], A, 11, min_context=5)
    assert text(tokens) == "<cls>MKVL<eos>" and n == 0
    kept = fit_members([long, enc("DDD")], 6, min_context=5)
    assert [text(k) for k in kept] == ["ACDEF"]


def test_anchor_outside_zero_to_one_is_clamped():
    member = enc("AAAAACCCCCDDDDD")
    left = fit_members([member], 7, anchor=-0.5, min_context=2)
    right = fit_members([member], 7, anchor=1.5, min_context=2)
    assert [text(k) for k in left] == ["AAAAAC"] and [text(k) for k in right] == ["CDDDDD"]


def test_reading_stops_at_the_member_that_is_cut():
    seen = []

    def members():
        for m in (enc("AAAA"), enc("CCCCCCCCCCCC"), enc("DDDD"), enc("EEEE")):
            seen.append(m)
            yield m

    tokens, _, n = context_window(enc("MKV"), members(), A, 16, min_context=2)
    assert text(tokens) == "<cls>AAAA<sep>CCCCC<sep>MKV<eos>" and n == 2
    assert len(seen) == 2  # the window is full once CCC… is cut: DDDD is never read


def test_column_window_gives_each_homolog_residue_its_column():
    target = np.arange(6, 12)  # 6 residues, the protein's residues 40-45
    h1 = (np.array([20, 21, 22]), np.array([0, 2, 5]))
    h2 = (np.array([23, 24, 25, 26]), np.array([1, 2, 3, 4]))
    tokens, positions, start, kept = column_window(target, [h1, h2], A, 64, first=40)
    want_tokens, want_start, want_kept = context_window(target, [h1[0], h2[0]], A, 64)
    assert tokens.tolist() == want_tokens.tolist() and (start, kept) == (want_start, want_kept)
    assert positions.tolist() == [39, 40, 42, 45, 46, 41, 42, 43, 44, 46,
                                  40, 41, 42, 43, 44, 45, 46]  # fmt: skip
    # a member cut to the budget keeps its first residues and their columns
    tokens, positions, start, kept = column_window(target, [h1, h2], A, 15, first=0, min_context=2)
    assert kept == 2 and tokens[5:7].tolist() == [23, 24] and tokens[7] == A.sep_idx
    assert positions[:9].tolist() == [-1, 0, 2, 5, 6, 1, 2, 6, 0]
    with pytest.raises(ValueError, match="3 residues but 2 columns"):
        column_window(target, [(h1[0], h1[1][:2])], A, 64)
