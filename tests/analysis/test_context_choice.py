"""Which homologs a scan's context holds, at the edges: the coverage and max-homolog limits of
an alignment, the record each homolog's sequence and weight come from, the window's room when
a drawn homolog only just fits, a short protein beside long homologs, and averaged windows."""

from __future__ import annotations

import numpy as np
import torch

from protein_performer.analysis.dms.homologs import (
    context_columns,
    context_marginals,
    read_scan_context,
)
from protein_performer.analysis.dms.variants import parse_variant
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.data.context_windows import in_rank_order
from protein_performer.data.msa import homolog_order
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM

ALPHABET = default_alphabet()
WT = "".join(np.random.default_rng(7).choice(list(STANDARD_AMINO_ACIDS), 60))


def _variant(seq: str, seed: int, share: float = 0.15) -> str:
    rng = np.random.default_rng(seed)
    out = list(seq)
    for i in rng.choice(len(seq), int(share * len(seq)), replace=False):
        out[i] = rng.choice([a for a in STANDARD_AMINO_ACIDS if a != seq[i]])
    return "".join(out)


def _model() -> tuple[ProteinLM, list[torch.Tensor]]:
    """A small exact model and the token rows its embedding reads."""
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=512)
    model, seen = ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx).eval(), []
    model.embed.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    return model, seen


def _members(row: list[int]) -> list[list[int]]:
    """The context members of a ``<cls> c1 <sep> … <sep> target <eos>`` row (padding dropped)."""
    body = [t for t in row if t != ALPHABET.pad_idx][1:-1]
    parts = []
    while ALPHABET.sep_idx in body:
        cut = body.index(ALPHABET.sep_idx)
        parts.append(body[:cut])
        body = body[cut + 1 :]
    return parts


def test_an_alignment_keeps_a_homolog_at_exactly_the_coverage_limit(tmp_path):
    # 10 columns: h1 covers 5 (0.5, kept at the default 0.5), h2 covers 4 (a fragment)
    (tmp_path / "x.a3m").write_text(
        f">q/1-10\n{WT[:10]}\n>h1\n{WT[:5]}-----\n>h2\n{WT[:3]}Y------\n>h3\n{_variant(WT[:10], 1, 0.2)}\n"
    )
    ctx = read_scan_context(tmp_path / "x.a3m", ALPHABET, WT, None)
    assert [h.id for h in ctx.used] == ["h1", "h3"]
    notes = ctx.info["alignment"]
    assert notes["fragments_left_out"] == 1 and notes["fragments"] == 1


def test_an_alignment_takes_exactly_context_max_homologs_and_counts_the_rest(tmp_path):
    # a gap in every row makes it an alignment (rows of one length with no gap are plain hits)
    rows = "".join(f">h{k}\n{_variant(WT[:30], k, 0.2)[:-1]}-\n" for k in range(5))
    (tmp_path / "x.a3m").write_text(f">q\n{WT[:30]}\n{rows}")
    ctx = read_scan_context(tmp_path / "x.a3m", ALPHABET, WT, None, max_homologs=3)
    assert [h.id for h in ctx.used] == ["h0", "h1", "h2"] and ctx.beyond_max == 2
    assert len(ctx.pssm.weights) == 3


def test_each_homolog_keeps_its_own_sequence_and_weight_after_fragments_are_left_out(tmp_path):
    """A fragment before the homologs shifts their rows: each used homolog must still carry its
    own residues, identity and weight (h2 and h3 are the same sequence but for an insertion,
    so they share a weight of 1/2; h4 stands alone)."""
    h2, h4 = _variant(WT[:20], 2, 0.3), _variant(WT[:20], 4, 0.5)
    h3 = h2[:10] + "ac" + h2[10:]
    (tmp_path / "x.a3m").write_text(
        f">q\n{WT[:20]}\n>h1 fragment\n{WT[:4]}{'-' * 16}\n>h2\n{h2}\n>h3\n{h3}\n>h4\n{h4}\n"
    )
    ctx = read_scan_context(tmp_path / "x.a3m", ALPHABET, WT, None)
    assert [h.id for h in ctx.used] == ["h2", "h3", "h4"]
    seqs = [ALPHABET.decode(h.residues) for h in ctx.used]
    assert seqs == [h2, h3.upper(), h4]
    info = ctx.pssm.homologs
    assert [i["weight"] for i in info] == [0.5, 0.5, 1.0]
    identity = [sum(a == b for a, b in zip(s, WT[:20], strict=True)) / 20 for s in (h2, h4)]
    assert [i["identity"] for i in info] == [round(identity[0], 4)] * 2 + [round(identity[1], 4)]


def test_a_short_protein_beside_long_homologs_gets_every_homolog_that_fits(tmp_path):
    """A 20-residue protein, six 60-residue homologs (20 aligned columns and 40 inserted
    residues each), 290 tokens: four fit whole and a fifth is cut to 23 residues; the draw's
    limit must leave room for the cut one."""
    wt = WT[:20]
    rows = [_variant(wt, k, 0.3) + _variant(WT, k)[20:].lower() for k in range(6)]
    (tmp_path / "x.a3m").write_text(
        f">q\n{wt}\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    )
    ctx = read_scan_context(tmp_path / "x.a3m", ALPHABET, wt, None)
    assert [len(h.residues) for h in ctx.used] == [60] * 6
    model, seen = _model()
    context_columns(model, ALPHABET, wt, [parse_variant(f"{wt[3]}4A", wt, 1)], ctx,
                    max_length=290)  # fmt: skip
    held = _members(seen[-1][0].tolist())
    assert [len(p) for p in held] == [60, 60, 60, 60, 23]
    assert held == [
        ALPHABET.encode(r.upper()).tolist()[: len(p)] for r, p in zip(rows, held, strict=False)
    ]


def test_a_drawn_homolog_that_fits_only_without_the_end_tokens_is_the_cut_one(tmp_path):
    """Eight 60-residue homologs, a 60-residue protein, 244 tokens: 182 left for homologs, so
    two fit whole (122) and the third is cut to 59. Counting the window's two end tokens as
    room would let the third fit whole and sort it by rank: the cut one must stay the third
    drawn, after the two whole ones in file order."""
    homologs = [_variant(WT, 10 + k) for k in range(8)]
    (tmp_path / "h.fa").write_text("".join(f">h{k}\n{h}\n" for k, h in enumerate(homologs)))
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, None)
    assert len(ctx.used) == 8
    model, seen = _model()
    encoded = [ALPHABET.encode(h).tolist() for h in homologs]
    out_of_rank = 0
    for sample in range(6):
        seen.clear()
        context_columns(model, ALPHABET, WT, [parse_variant(f"{WT[3]}4A", WT, 1)], ctx,
                        max_length=244, sampling="weighted", samples=sample + 1, seed=3)  # fmt: skip
        held = _members(seen[-1][0].tolist())
        drawn = homolog_order("weighted", weights=ctx.pssm.weights, seed=3, sample=sample)
        assert [len(p) for p in held] == [60, 60, 59]
        assert [encoded.index(p) for p in held[:2]] == sorted(drawn[:2].tolist())
        assert held[2] == encoded[drawn[2]][:59]
        out_of_rank += int(drawn[2] < max(drawn[:2]))
    assert out_of_rank  # some draw's third is not its largest rank: the order is tested


def test_several_windows_average_their_log_probabilities(tmp_path):
    """``samples=2`` is the mean of the two weighted windows' log-probabilities, each window
    built as the scorer builds it (the draw, placed by rank)."""
    homologs = [_variant(WT, 30 + k) for k in range(6)]
    (tmp_path / "h.fa").write_text("".join(f">h{k}\n{h}\n" for k, h in enumerate(homologs)))
    ctx = read_scan_context(tmp_path / "h.fa", ALPHABET, WT, None)
    model, _ = _model()
    variants = [parse_variant(m, WT, 1) for m in (f"{WT[3]}4A", f"{WT[40]}41W")]
    got = context_columns(model, ALPHABET, WT, variants, ctx, max_length=300,
                          sampling="weighted", samples=2, seed=9, retrieval=0)  # fmt: skip
    ids, lengths = ALPHABET.encode(WT), [len(h.residues) for h in ctx.used]
    runs = []
    for sample in range(2):
        order = homolog_order("weighted", weights=ctx.pssm.weights, seed=9, sample=sample,
                              limit=len(lengths))  # fmt: skip
        order = in_rank_order(order, lengths, 300 - 60 - 2)
        logp, _ = context_marginals(model, ALPHABET, ids, [ctx.used[i].residues for i in order],
                                    [3, 40], max_length=300)  # fmt: skip
        runs.append(logp)
    assert not np.allclose(runs[0][3], runs[1][3], atol=1e-4)  # two different windows
    expected = []
    for v in variants:
        (s,) = v
        mean = (runs[0][s.index] + runs[1][s.index]) / 2
        expected.append(mean[ALPHABET.index(s.mt)] - mean[ALPHABET.index(s.wt)])
    np.testing.assert_allclose(got["masked_marginal_context"], expected, rtol=1e-6, atol=1e-7)


def test_the_printed_context_counts_hhsuite_annotation_rows(tmp_path):
    from protein_performer.analysis.dms.notes import context_notes

    rows = "".join(f">h{k}\n{_variant(WT[:30], k, 0.2)[:-1]}-\n" for k in range(3))
    (tmp_path / "x.a3m").write_text(
        f">ss_pred\n{'C' * 30}\n>ss_conf\n{'9' * 30}\n>q\n{WT[:30]}\n{rows}"
    )
    ctx = read_scan_context(tmp_path / "x.a3m", ALPHABET, WT, None)
    assert len(ctx.used) == 3
    text = context_notes(ctx, {}, causal=True)
    assert "4 records" in text and "2 HH-suite annotation rows (ss_pred, ...)" in text


def test_a_window_holds_at_most_window_homologs(tmp_path):
    """Twenty 20-residue homologs of a 20-residue protein all fit a 512-token window: the
    default takes the first 16, ``window_homologs=3`` the first 3, None all 20."""
    from protein_performer.analysis.dms.homologs import DEFAULT_WINDOW_HOMOLOGS
    from protein_performer.analysis.dms.marginals import context_keywords
    from protein_performer.config.schema import ScoreConfig

    assert ScoreConfig().context_window_homologs == DEFAULT_WINDOW_HOMOLOGS == "auto"
    assert context_keywords({"context_window_homologs": 3}) == {"window_homologs": 3}
    wt = WT[:20]
    rows = [_variant(wt, 50 + k, 0.3)[:-1] + "-" for k in range(20)]
    (tmp_path / "x.a3m").write_text(
        f">q\n{wt}\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))
    )
    ctx = read_scan_context(tmp_path / "x.a3m", ALPHABET, wt, None)
    assert len(ctx.used) == 20
    model, seen = _model()
    variants = [parse_variant(f"{wt[3]}4A", wt, 1)]
    for cap, held in ((None, 20), (3, 3), ("default", 16)):
        seen.clear()
        options = {} if cap == "default" else {"window_homologs": cap}
        context_columns(model, ALPHABET, wt, variants, ctx, max_length=512, **options)
        parts = _members(seen[-1][0].tolist())
        assert [ALPHABET.decode(np.array(p)) for p in parts] == [r[:-1] for r in rows[:held]]
        assert ctx.info["mean_homologs_in_window"] == held
        assert ctx.info["context_window_homologs"] == (16 if cap == "default" else cap)


def _aligned(tmp_path, rows: list[str]):
    (tmp_path / "x.fa").write_text(
        f">q\n{WT}\n" + "".join(f">h{k}\n-{r[1:]}\n" for k, r in enumerate(rows))
    )
    return read_scan_context(tmp_path / "x.fa", ALPHABET, WT, None)


def test_near_copies_of_the_wild_type_stay_out_of_the_windows_not_the_profile(tmp_path):
    # h0, h2: 2 of 59 residues changed (0.97 identical); h1, h3: 0.85; h4: just under 0.9
    rows = [_variant(WT, 1, 0.03), _variant(WT, 2), _variant(WT, 3, 0.03), _variant(WT, 4),
            _variant(WT, 5, 0.1)]  # fmt: skip
    ctx = _aligned(tmp_path, rows)
    identity = [h["identity"] for h in ctx.pssm.homologs]
    assert identity[0] > 0.95 and identity[2] > 0.95 and max(identity[1], identity[3]) < 0.9
    assert 0.89 < identity[4] < 0.9
    model, seen = _model()
    variants = [parse_variant(f"{WT[5]}6A", WT, 1)]
    cols = context_columns(model, ALPHABET, WT, variants, ctx, max_length=512)
    members = _members(seen[-1][0].tolist())
    assert members == [list(ALPHABET.encode(rows[k][1:])) for k in (1, 3, 4)]  # file order
    assert ctx.info["homologs_over_max_identity"] == 2
    assert ctx.info["context_max_identity"] == 0.9
    # the profile still weighs all five (and the query)
    assert ctx.pssm.params["sequences"] == 6 and len(ctx.pssm.weights) == 5
    everyone = context_columns(model, ALPHABET, WT, variants, ctx, max_length=512,
                               max_identity=None)  # fmt: skip
    assert len(_members(seen[-1][0].tolist())) == 5
    assert ctx.info["homologs_over_max_identity"] == 0
    assert cols["pssm"][0] == everyone["pssm"][0]
    assert cols["masked_marginal_context"][0] != everyone["masked_marginal_context"][0]
    # the limit is inclusive: a homolog exactly at it is in
    for limit, held in ((identity[4], 3), (identity[4] - 1e-4, 2)):
        context_columns(model, ALPHABET, WT, variants, ctx, max_length=512, max_identity=limit)
        assert len(_members(seen[-1][0].tolist())) == held


def test_weighted_draws_among_the_homologs_left_keep_their_own_weights(tmp_path):
    rows = [_variant(WT, 1, 0.03), _variant(WT, 8), _variant(WT, 3, 0.03), _variant(WT, 9),
            _variant(WT, 10)]  # fmt: skip
    ctx = _aligned(tmp_path, rows)
    model, seen = _model()
    variants = [parse_variant(f"{WT[5]}6A", WT, 1)]
    context_columns(model, ALPHABET, WT, variants, ctx, max_length=512, sampling="weighted",
                    window_homologs=2, seed=3)  # fmt: skip
    left = [1, 3, 4]  # the drawn pair among h1, h3, h4, drawn with their weights, in file order
    drawn = homolog_order("weighted", weights=np.asarray(ctx.pssm.weights)[left], seed=3,
                          limit=2)  # fmt: skip
    expected = sorted(left[i] for i in drawn)
    assert _members(seen[-1][0].tolist()) == [list(ALPHABET.encode(rows[k][1:])) for k in expected]
    # diverse: greedy over the matrix rows of the homologs left
    context_columns(model, ALPHABET, WT, variants, ctx, max_length=512, sampling="diverse",
                    window_homologs=2)  # fmt: skip
    picked = homolog_order("diverse", matrix=np.asarray(ctx.pssm.matrix)[left], limit=2)
    expected = sorted(left[i] for i in picked)
    assert expected == [1, 4]  # greedy over all five rows would give h0's neighbour h1, then h3
    assert _members(seen[-1][0].tolist()) == [list(ALPHABET.encode(rows[k][1:])) for k in expected]


def test_when_every_homolog_is_a_near_copy_the_windows_take_them_and_say_so(tmp_path, capsys):
    from protein_performer.analysis.dms.notes import context_notes

    ctx = _aligned(tmp_path, [_variant(WT, 1, 0.03), _variant(WT, 2, 0.03)])
    model, seen = _model()
    variants = [parse_variant(f"{WT[5]}6A", WT, 1)]
    context_columns(model, ALPHABET, WT, variants, ctx, max_length=512)
    assert len(_members(seen[-1][0].tolist())) == 2
    text = context_notes(ctx, {}, causal=False)
    assert "all 2 over 90% identical to the wild type: used all the same" in text
    ctx = _aligned(tmp_path, [_variant(WT, 1, 0.03), _variant(WT, 2)])
    context_columns(model, ALPHABET, WT, variants, ctx, max_length=512)
    assert "; 1 over 90% identical to the wild type kept out" in context_notes(ctx, {}, False)


def test_a_window_whose_first_homolog_cannot_start_is_refused_even_if_a_short_one_could(
    tmp_path,
):
    import pytest

    from protein_performer.errors import ConfigError

    # h0: the whole protein (59 residues), h1: a 6-residue fragment (5 of 6 the wild type's)
    (tmp_path / "x.fa").write_text(
        f">q\n{WT}\n>h0\n-{_variant(WT, 1)[1:]}\n>h1\n{_variant(WT[:6], 2, 0.2)}{'-' * 54}\n"
    )
    ctx = read_scan_context(tmp_path / "x.fa", ALPHABET, WT, None, min_coverage=0.0)
    assert [len(h.residues) for h in ctx.used] == [59, 6]
    model, seen = _model()
    variants = [parse_variant(f"{WT[5]}6A", WT, 1)]
    # 30 tokens: 13 residues scored, 15 left, too few for h0 cut to 16 (+ <sep>)
    with pytest.raises(ConfigError, match=r"30 tokens leaves no room .* \(at least 33\)"):
        context_columns(model, ALPHABET, WT, variants, ctx, max_length=30)
    context_columns(model, ALPHABET, WT, variants, ctx, max_length=33)
    assert len(_members(seen[-1][0].tolist())[0]) == 16  # h0, cut to 16
