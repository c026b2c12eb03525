"""The column crop of a long protein's windows: the width is the most that fits the homologs
beside it, each window holds the residues about its site and each homolog's residues in those
same columns (an alignment's columns placed on the wild type), best-ranked first; the batched
log-probabilities are the model's own at the masked position."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import ListConfig

from protein_performer.analysis.dms import homologs as H
from protein_performer.analysis.dms import variants as var
from protein_performer.analysis.dms.notes import context_notes
from protein_performer.analysis.dms.windows import (
    COLUMNS_WINDOW_HOMOLOGS,
    MIN_CROP_RESIDUES,
    WHOLE_WINDOW_HOMOLOGS,
    column_crop,
    column_jobs,
    crop_width,
    masked_log_probs,
    window_homologs_for,
    window_info,
)
from protein_performer.config.schema import ScoreConfig
from protein_performer.config.validate import validate_analysis_config
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.data.msa import GAP
from protein_performer.errors import ConfigError
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM
from tests.columns_reference import column_members, site_logits

A = default_alphabet()
AA = np.array(list(STANDARD_AMINO_ACIDS))


def _segments(tokens: np.ndarray) -> list[str]:
    """A window's parts between ``<cls>``/``<sep>``/``<eos>``, residues as letters."""
    names = ["|" if t in (A.cls_idx, A.sep_idx, A.eos_idx) else A.tokens[t] for t in tokens]
    return [p for p in "".join(names).split("|") if p]


def _codes(seq: str) -> np.ndarray:
    return np.array([GAP if c == "-" else STANDARD_AMINO_ACIDS.index(c) for c in seq], np.uint8)


def test_crop_width_is_the_most_that_fits_the_homologs_beside_it():
    assert crop_width(900, 4096, 16) == (4096 - 2 - 16) // 17 == 239
    assert crop_width(4097 * 2, 4097, 16, ends=2) == 239  # 4,079 / 17 rounds down
    assert crop_width(4097 * 2, 4097, 16, ends=1) == 240  # one end token less: 4,080 / 17
    for length, k, ends in ((4096, 16, 2), (8192, 16, 1), (3000, 7, 2), (2500, 16, 2)):
        w = crop_width(10**6, length, k, ends)
        assert w is not None
        assert k * (w + 1) + w + ends <= length < k * (w + 2) + w + 1 + ends
    assert crop_width(239, 4096, 16) is None and crop_width(240, 4096, 16) == 239
    assert crop_width(900, 4096, None) is None  # as many whole homologs as fit
    assert crop_width(900, 1024, 16) is None  # 59 residues: too short to crop
    w = 2 + 16 + 17 * MIN_CROP_RESIDUES  # the shortest window that crops
    assert crop_width(900, w, 16) == MIN_CROP_RESIDUES
    assert crop_width(900, w - 1, 16) is None


def test_column_jobs_hold_the_site_region_and_each_homologs_residues_in_it():
    wt = "MKTAYIAKQRQISFVKSHFS"  # 20 residues
    ids = A.encode(wt)
    h0 = "MKTAY-AKQRQISFVKSHFS"  # a gap in the region about site 7: 3 of 4 columns
    h1 = "MRTAWIAKERQLSFVKSHFA"
    h2 = "-KTAYIVKQRQISF-KSHF-"
    rows = [(0, _codes(h0)), (1, _codes(h1)), (2, _codes(h2))]
    jobs, held = column_jobs(ids, rows, [7, 7, 0, 19], A, 64, width=4, per_window=2)
    assert [j[0] for j in jobs] == [0, 7, 19] and held == [2, 2, 2]
    _, tokens, at = jobs[1]
    # site 7 (0-based): columns 5..8; h0 has 3 residues there (fewer than the 4 needed): h1, h2
    expect = ["<cls>", *"IAKE", "<sep>", *"IVKQ", "<sep>", *"IA", "<mask>", "Q", "<eos>"]
    assert [A.tokens[t] for t in tokens] == expect and tokens[at] == A.mask_idx
    # clamped at the ends: site 0 keeps columns 0..3, site 19 columns 16..19
    first, last = (_segments(j[1]) for j in (jobs[0], jobs[2]))
    assert first == ["MKTA", "MRTA", "<mask>KTA"] and last == ["SHFS", "SHFA", "SHF<mask>"]
    # drawn 2, 1, 0: the first two that qualify (2 and 1), placed by rank (best first)
    jobs, _ = column_jobs(ids, rows[::-1], [12], A, 64, width=4, per_window=2)
    assert _segments(jobs[0][1]) == ["QLSF", "QISF", "QI<mask>F"]


def _masked_jobs(seed: int, sites_and_lengths, max_len: int):
    """A small exact model and one masked window of random residues per ``(site, length)``."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        attention="transformer", dim=16, depth=2, heads=2, ffn_dim=16, max_len=max_len
    )
    model = ProteinLM(cfg, len(A), A.pad_idx).eval()
    rng = np.random.default_rng(seed)
    jobs = []
    for site, n in sites_and_lengths:
        tokens = np.array([A.cls_idx, *A.encode("".join(rng.choice(AA, n))), A.eos_idx])
        tokens[site + 1] = A.mask_idx
        jobs.append((site, tokens, site + 1))
    return model, jobs


def test_masked_log_probs_are_the_models_own_at_the_masked_position():
    # windows of three lengths, batched together
    model, jobs = _masked_jobs(0, ((3, 20), (5, 9), (8, 30)), max_len=64)
    out = masked_log_probs(model, A, jobs, toks_per_batch=64)
    for site, tokens, at in jobs:
        x = torch.as_tensor(tokens)[None]
        with torch.no_grad():
            ref = model(x, x == A.pad_idx)["logits"][0, at].double().log_softmax(-1)
        np.testing.assert_allclose(out[site], ref.numpy(), atol=1e-5)


def _long_case(tmp_path):
    rng = np.random.default_rng(3)
    wt = "".join(rng.choice(AA, 200))
    homolog = np.array(list(wt))
    changed = rng.choice(200, 60, replace=False)
    homolog[changed] = rng.choice(AA, 60)
    homolog[150:160] = "-"
    # the query's first residue is lower case: not a column, so column j is residue j + 1
    a2m = tmp_path / "msa.a2m"
    a2m.write_text(f">wt/1-200\n{wt[0].lower()}{wt[1:]}\n>h1\n{''.join(homolog[1:])}\n")
    return wt, "".join(homolog), a2m


def test_a_long_protein_is_scored_on_cropped_windows_with_the_alignments_columns(
    tmp_path, monkeypatch
):
    wt, homolog, a2m = _long_case(tmp_path)
    context = H.read_scan_context(a2m, A, wt, "wt")
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=512)
    model = ProteinLM(cfg, len(A), A.pad_idx).eval()
    seen = []
    real = H.masked_log_probs
    monkeypatch.setattr(
        H, "masked_log_probs", lambda m, a, jobs, **k: seen.extend(jobs) or real(m, a, jobs, **k)
    )
    variants = [[var.Substitution(s, wt[s], "A" if wt[s] != "A" else "C")] for s in (0, 100, 199)]
    cols = H.context_columns(model, A, wt, variants, context, max_length=300, window_homologs=1)
    width = (300 - 2 - 1) // 2
    assert context.info["context_crop"] == width == 148
    assert np.isfinite(cols[H.CONTEXT_COLUMN]).all()
    for site, tokens, at in seen:
        start = min(max(site - width // 2, 0), 200 - width)
        region = "".join(c for c in homolog[start : start + width] if c != "-")
        if start == 0:
            region = region[1:]  # residue 0 has no column: the homolog's is not read
        assert _segments(tokens)[0] == region, site
        assert len(tokens) == len(region) + width + 3 and tokens[at] == A.mask_idx
    assert sorted(s for s, _, _ in seen) == [0, 100, 199]
    # crop=False: the whole protein and the homolog whole, as before
    seen.clear()
    H.context_columns(
        model, A, wt, variants, context, max_length=300, window_homologs=1, crop=False
    )
    assert context.info["context_crop"] is None and len(seen) == 3
    # half the window for the protein (148), the rest for the homolog cut whole-protein style
    assert [(len(_segments(t)[0]), len(t)) for _, t, _ in seen] == [(149, 300)] * 3
    # a protein no longer than the crop: whole windows whatever the setting
    short = H.read_scan_context(a2m, A, wt, "wt")
    H.context_columns(model, A, wt, variants, short, max_length=512, window_homologs=1)
    assert short.info["context_crop"] is None


def test_context_crop_is_a_boolean_option():
    validate_analysis_config(
        ScoreConfig(fasta="x.fa", mutations="m.csv", out="o.csv", context_crop=False)
    )
    with pytest.raises(ConfigError, match="context_crop must be true or false"):
        validate_analysis_config(
            ScoreConfig(fasta="x.fa", mutations="m.csv", out="o.csv", context_crop="no")
        )


def test_score_crops_a_long_proteins_windows_unless_told_not_to(tmp_path, capsys):
    import json

    from protein_performer.cli.main import main
    from protein_performer.model.checkpoints import save_model_checkpoint

    wt, _, a2m = _long_case(tmp_path)
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=512)
    save_model_checkpoint(tmp_path / "m.ckpt", ProteinLM(cfg, len(A), A.pad_idx), A, "mlm")
    (tmp_path / "wt.fa").write_text(f">wt\n{wt}\n")
    (tmp_path / "m.csv").write_text("mutant,score\n" + f"{wt[99]}100A,1\n{wt[9]}10A,2\n")
    args = [
        "score", f"checkpoint={tmp_path / 'm.ckpt'}", f"fasta={tmp_path / 'wt.fa'}",
        f"mutations={tmp_path / 'm.csv'}", f"context={a2m}", "context_tokens=300",
        "context_window_homologs=1",
    ]  # fmt: skip
    assert main([*args, f"out={tmp_path / 'a.csv'}"]) == 0
    text = capsys.readouterr().out
    assert "each window 148 residues about its site, the homologs cut to those columns" in text
    assert json.loads((tmp_path / "a.json").read_text())["context"]["context_crop"] == 148
    assert main([*args, "context_crop=false", f"out={tmp_path / 'b.csv'}"]) == 0
    assert "residues about its site" not in capsys.readouterr().out
    assert json.loads((tmp_path / "b.json").read_text())["context"]["context_crop"] is None


def test_score_mutants_takes_the_crop_under_either_name():
    from protein_performer.analysis.dms.marginals import context_keywords

    assert context_keywords({"context_crop": False}) == {"crop": False}
    assert context_keywords({"crop": True}) == {"crop": True}
    with pytest.raises(ConfigError):
        context_keywords({"crop": True, "context_crop": False})


def _tiny(max_len: int = 4096) -> ProteinLM:
    torch.manual_seed(0)
    cfg = ModelConfig(
        attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=max_len
    )
    return ProteinLM(cfg, len(A), A.pad_idx).eval()


def _capture(monkeypatch) -> list[list]:
    calls: list[list] = []
    real = H.masked_log_probs

    def keep(m, a, jobs, **k):
        calls.append(list(jobs))
        return real(m, a, jobs, **k)

    monkeypatch.setattr(H, "masked_log_probs", keep)
    return calls


def _a3m(tmp_path, wt: str, rows: list[str], name: str = "msa.a3m"):
    path = tmp_path / name
    path.write_text(f">wt\n{wt}\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows)))
    return path


def _mutated(wt: str, rng, changed: int, span: tuple[int, int] | None = None) -> str:
    row = np.array(list(wt))
    spots = rng.choice(len(wt), changed, replace=False)
    row[spots] = rng.choice(AA, changed)
    if span is not None:  # residues outside span are gaps: an alignment of part of it
        row[: span[0]] = "-"
        row[span[1] :] = "-"
    return "".join(row)


def test_no_crop_when_every_homolog_fits_whole(tmp_path):
    rng = np.random.default_rng(5)
    wt = "".join(rng.choice(AA, 400))
    context = H.read_scan_context(
        _a3m(tmp_path, wt, [_mutated(wt, rng, 100) for _ in range(3)]), A, wt, "wt"
    )
    variants = [[var.Substitution(200, wt[200], "A" if wt[200] != "A" else "C")]]
    H.context_columns(_tiny(), A, wt, variants, context, max_length=4096)
    assert context.info["context_crop"] is None and context.info["mean_homologs_in_window"] == 3


def test_sites_no_homolog_covers_keep_the_whole_window(tmp_path, monkeypatch):
    rng = np.random.default_rng(6)
    wt = "".join(rng.choice(AA, 800))
    rows = [_mutated(wt, rng, 240, span=(0, 250)) for _ in range(20)]  # ~70 % identical
    context = H.read_scan_context(_a3m(tmp_path, wt, rows), A, wt, "wt", min_coverage=0.2)
    calls = _capture(monkeypatch)
    sites = [10, 200, 400, 700]
    variants = [[var.Substitution(s, wt[s], "A" if wt[s] != "A" else "C")] for s in sites]
    H.context_columns(_tiny(), A, wt, variants, context, max_length=4096)
    assert context.info["context_crop"] == 239 and context.info["sites_scored_whole"] == 2
    text = context_notes(context, {}, causal=False)
    assert "each window 239 residues about its site" in text
    assert "2 sites no homolog covers scored whole" in text
    (jobs,) = calls
    windows = {site: _segments(tokens) for site, tokens, _ in jobs}
    # before it: 16 cropped homologs; the whole window: 13 whole ones of 250 and a cut one
    assert [len(windows[s]) - 1 for s in sites] == [16, 16, 14, 14]
    # the uncovered sites: the whole protein (800 residues + the site written as <mask>)
    assert len(windows[400][-1]) == len(windows[700][-1]) == 800 + 5
    assert len(windows[10][-1]) == 239 + 5


def test_crop_draws_again_per_sample_and_keeps_near_copies_out(tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    wt = "".join(rng.choice(AA, 400))
    near = _mutated(wt, rng, 4)  # 99 % identical: over context_max_identity
    rows = [near] + [_mutated(wt, rng, 120)[:-1] + "-" for _ in range(40)]  # aligned: a gap
    context = H.read_scan_context(_a3m(tmp_path, wt, rows), A, wt, "wt")
    assert context.msa is not None and len(context.used) == 41
    calls = _capture(monkeypatch)
    variants = [[var.Substitution(s, wt[s], "A" if wt[s] != "A" else "C")] for s in (50, 300)]
    H.context_columns(_tiny(), A, wt, variants, context, max_length=4096,
                      sampling="weighted", samples=2)  # fmt: skip
    assert context.info["context_crop"] == 239 and context.info["homologs_over_max_identity"] == 1
    first, second = ({s: _segments(t)[:-1] for s, t, _ in jobs} for jobs in calls)
    assert first != second  # each sample its own draw
    start = 50 - 239 // 2 if 50 - 239 // 2 > 0 else 0
    copy = "".join(near[start : start + 239])
    for window in (*first.values(), *second.values()):
        assert len(window) == 16 and copy not in window


def test_a_packed_models_crop_leaves_one_end_token(tmp_path):
    rng = np.random.default_rng(8)
    wt = "".join(rng.choice(AA, 400))
    rows = [_mutated(wt, rng, 120) for _ in range(20)]
    context = H.read_scan_context(_a3m(tmp_path, wt, rows), A, wt, "wt")
    variants = [[var.Substitution(100, wt[100], "A" if wt[100] != "A" else "C")]]
    H.context_columns(_tiny(), A, wt, variants, context, max_length=4097, packed=True)
    assert context.info["context_crop"] == (4097 - 1 - 16) // 17 == 240
    H.context_columns(_tiny(), A, wt, variants, context, max_length=4097)
    assert context.info["context_crop"] == (4097 - 2 - 16) // 17 == 239


def test_window_info_says_what_the_windows_held():
    assert window_info([16, 16, 14, 14], 4096, 239) == {
        "context_window_tokens": 4096,
        "mean_homologs_in_window": 15.0,
        "sites": 4,
        "context_crop": 239,
    }
    assert window_info([], 1024, None)["mean_homologs_in_window"] == 0.0


def test_context_log_probs_are_the_windows_log_probabilities_behind_the_score_column(tmp_path):
    wt, _, a2m = _long_case(tmp_path)
    torch.manual_seed(0)
    cfg = ModelConfig(attention="transformer", dim=16, depth=1, heads=2, ffn_dim=16, max_len=512)
    model = ProteinLM(cfg, len(A), A.pad_idx).eval()
    sites = [0, 57, 100, 199]
    context = H.read_scan_context(a2m, A, wt, "wt")
    logp = H.context_log_probs(model, A, wt, sites, context, max_length=300, window_homologs=1)
    assert sorted(logp) == sites and context.info["context_crop"] == 148
    for s in sites:  # normalised over the vocabulary
        np.testing.assert_allclose(np.logaddexp.reduce(logp[s].astype(np.float64)), 0, atol=1e-5)
    # the score column is log p(mt) - log p(wt) of these, read another way
    variants = [[var.Substitution(s, wt[s], "W" if wt[s] != "W" else "C")] for s in sites]
    cols = H.context_columns(
        model, A, wt, variants, H.read_scan_context(a2m, A, wt, "wt"), max_length=300,
        window_homologs=1,
    )  # fmt: skip
    expect = [logp[v[0].index][A.index(v[0].mt)] - logp[v[0].index][A.index(v[0].wt)]
              for v in variants]  # fmt: skip
    np.testing.assert_allclose(cols[H.CONTEXT_COLUMN], expect, rtol=1e-5, atol=1e-6)
    # without the crop the same sites read other windows, so other log-probabilities
    whole = H.context_log_probs(
        model, A, wt, sites, context, max_length=300, window_homologs=1, crop=False
    )
    assert context.info["context_crop"] is None
    assert not np.allclose(whole[100], logp[100], atol=1e-4)
    with pytest.raises(ValueError, match="site 200 is outside the protein"):
        H.context_log_probs(model, A, wt, [3, 200], context, max_length=300)
    with pytest.raises(ValueError, match="site -1 is outside"):
        H.context_log_probs(model, A, wt, [-1], context, max_length=300)


def test_context_log_probs_average_the_samples_windows_and_their_homolog_counts(
    tmp_path, monkeypatch
):
    wt, _, a2m = _long_case(tmp_path)
    context = H.read_scan_context(a2m, A, wt, "wt")
    calls = []

    def one_sample(model, alphabet, ids, sites, *a, sample, **k):
        calls.append(sample)
        logp = {s: np.full(len(A), float(sample + s)) for s in sites}
        return logp, {"mean_homologs_in_window": [2.0, 4.0, 9.0][sample], "context_crop": None}

    monkeypatch.setattr(H, "_sample_log_probs", one_sample)
    out = H.context_log_probs(None, A, wt, [5, 7], context, max_length=300, sampling="weighted",
                              samples=3)  # fmt: skip
    assert calls == [0, 1, 2]
    np.testing.assert_allclose(out[5], np.full(len(A), 6.0))  # (5 + 6 + 7) / 3
    np.testing.assert_allclose(out[7], np.full(len(A), 8.0))
    assert context.info["mean_homologs_in_window"] == pytest.approx(5.0)
    assert context.info["context_samples"] == context.info["context_samples_asked"] == 3
    calls.clear()  # "first" draws the same homologs every time: one window
    H.context_log_probs(None, A, wt, [5], context, max_length=300, sampling="first", samples=3)
    assert calls == [0] and context.info["context_samples_asked"] == 3
    assert context.info["context_samples"] == 1


def test_an_odd_width_puts_the_site_in_the_middle_of_its_columns():
    """Of 5 columns, 2 before the site and 2 after (not 3 and 1); clamped at the ends."""
    ids = A.encode("MKTAYIAKQRQISFVKSHFS")
    rows = [(0, _codes("MRTAWIAKERQLSFVKSHFA"))]
    jobs, held = column_jobs(ids, rows, [7, 2, 18], A, 64, width=5, per_window=1)
    windows = {site: (_segments(tokens), tokens[at]) for site, tokens, at in jobs}
    assert held == [1, 1, 1] and all(m == A.mask_idx for _, m in windows.values())
    assert windows[7][0] == ["IAKER", "IA<mask>QR"]  # columns 5..9
    assert windows[2][0] == ["MRTAW", "MK<mask>AY"]  # columns 0..4
    assert windows[18][0] == ["KSHFA", "KSH<mask>S"]  # clamped: columns 15..19


def test_context_keywords_map_each_cli_name_to_its_own_keyword():
    from protein_performer.analysis.dms.marginals import context_keywords

    cli = {
        "context_tokens": ("max_length", 512),
        "context_sampling": ("sampling", "weighted"),
        "context_samples": ("samples", 3),
        "context_retrieval": ("retrieval", 0.5),
        "context_window_homologs": ("window_homologs", 8),
        "context_max_identity": ("max_identity", 0.9),
        "context_crop": ("crop", False),
    }
    assert context_keywords({k: v for k, (_, v) in cli.items()}) == dict(cli.values())
    for key, (name, value) in cli.items():
        assert context_keywords({key: value}) == {name: value}
        assert context_keywords({name: value}) == {name: value}  # its own name too
    assert context_keywords({"seed": 4}) == {"seed": 4}
    with pytest.raises(ConfigError, match="unknown option 'context_seed'"):
        context_keywords({"context_seed": 4})


def test_windows_are_padded_to_a_few_shapes_and_read_as_unpadded():
    from protein_performer.analysis.dms.windows import SHAPE_MULTIPLE

    lengths = (20, 61, 62, 63, 100, 140, 148)  # 148 + 2 = the model's 150
    model, jobs = _masked_jobs(1, enumerate(lengths), max_len=150)
    shapes = []
    real = model.logits_at
    model.logits_at = lambda x, pad, at: shapes.append(x.shape[1]) or real(x, pad, at)
    out = masked_log_probs(model, A, jobs, toks_per_batch=1)  # one window a batch
    # rounded up to the multiple, but never past the model's learned positions
    assert shapes == [64, 64, 64, 128, 128, 150, 150] and SHAPE_MULTIPLE == 64
    for site, tokens, at in jobs:
        x = torch.as_tensor(tokens)[None]
        with torch.no_grad():
            ref = real(x, x == A.pad_idx, torch.tensor([[at]]))[0, 0].double().log_softmax(-1)
        np.testing.assert_allclose(out[site], ref.numpy(), atol=1e-5)


def test_column_jobs_with_positions_put_each_homolog_residue_at_its_column():
    wt = "MKTAYIAKQRQISFVKSHFS"
    ids = A.encode(wt)
    rows = [(0, _codes("MRTAWIAKERQLSFVKSHFA")), (1, _codes("MKTAYIVKQRQISF-KSHF-"))]
    plain, _ = column_jobs(ids, rows, [7, 2], A, 64, width=20, per_window=2)
    jobs, held = column_jobs(ids, rows, [7, 2], A, 64, width=20, per_window=2, positions=True)
    assert held == [2, 2]
    for (site, tokens, at), (site2, tokens2, at2, _) in zip(plain, jobs, strict=True):
        assert (site, at) == (site2, at2) and tokens.tolist() == tokens2.tolist()
    _, tokens, at, place = jobs[1]  # site 7
    # h0 (rank 0) has all 20 columns; h1 none at columns 14 and 19
    h1 = [c for c in range(20) if c not in (14, 19)]
    assert place.tolist() == [-1, *range(20), 20, *h1, 20, *range(20), 20]
    assert place[at] == 7 and tokens[at] == A.mask_idx
    # a crop about site 10 (0-based residues 7-12) keeps their numbers
    _, tokens, at, place = column_jobs(
        ids, rows, [10], A, 64, width=6, per_window=2, positions=True
    )[0][0]
    assert place.tolist() == [6, *range(7, 13), 13, *range(7, 13), 13, *range(7, 13), 13]
    with pytest.raises(ConfigError, match="scores crop windows"):
        column_jobs(ids, rows, [7], A, 64, width=6, per_window=2, style="concat", positions=True)


def _columns_model() -> ProteinLM:
    torch.manual_seed(0)
    cfg = ModelConfig(
        attention="transformer", dim=16, depth=2, heads=2, ffn_dim=16, max_len=64,
        position="rotary", context_positions="columns",
    )  # fmt: skip
    return ProteinLM(cfg, len(A), A.pad_idx).eval()


def test_a_columns_model_reads_every_site_on_its_columns_at_their_positions(tmp_path, monkeypatch):
    rng = np.random.default_rng(8)
    wt = "".join(rng.choice(AA, 60))  # short: the crop is the whole protein
    rows = [_mutated(wt, rng, 15) for _ in range(3)]
    rows[1] = "-" * 10 + rows[1][10:]
    context = H.read_scan_context(_a3m(tmp_path, wt, rows), A, wt, "wt")
    model = _columns_model()
    sites = [0, 25, 59]
    logp = H.context_log_probs(model, A, wt, sites, context, max_length=400, window_homologs=3)
    assert context.info["context_crop"] == 60 and context.info["mean_homologs_in_window"] == 3
    # by hand: the homologs' residues at their columns, every token at its column's position
    members = column_members(A, rows)
    for s in sites:
        ref = site_logits(model, A, wt, members, s, 400).double().log_softmax(-1)
        np.testing.assert_allclose(logp[s], ref.numpy(), atol=1e-5)
    # a model that reads homologs at their places in the window: whole windows, no positions
    window_model = _columns_model()
    window_model.config.context_positions = "window"
    calls = _capture(monkeypatch)
    H.context_log_probs(window_model, A, wt, sites, context, max_length=400, window_homologs=3)
    assert context.info["context_crop"] is None and all(len(j) == 3 for j in calls[-1])
    H.context_log_probs(model, A, wt, sites, context, max_length=400, window_homologs=3)
    assert all(len(j) == 4 for j in calls[-1])
    with pytest.raises(ConfigError, match="reads homologs at the columns"):
        H.context_log_probs(
            model, A, wt, sites, context, max_length=400, window_homologs=3, packed=True
        )
    with pytest.raises(ConfigError, match=r"the column crop \(context_crop=true") as error:
        H.context_log_probs(model, A, wt, sites, context, max_length=400, crop=False)
    assert "not null" not in str(error.value) and "aligned" not in str(error.value)  # what failed


def test_commands_that_place_homologs_in_a_window_refuse_a_columns_model(tmp_path):
    from protein_performer.analysis.cross_homolog import cross_homolog_view
    from protein_performer.analysis.head_view import read_heads_window
    from protein_performer.evaluation.context_perplexity import context_perplexity

    model = _columns_model()
    with pytest.raises(ConfigError, match="the cross-homolog view places homologs"):
        cross_homolog_view(model, A, [("MKTAYIAKQR", ["MKTAYLAKQR"])], max_length=64)
    with pytest.raises(ConfigError, match="evaluate context= places homologs"):
        context_perplexity(model, A, [], max_length=64)
    fasta = tmp_path / "two.fasta"
    fasta.write_text(">a\nMKTAYIAKQR\n>b\nMKTAYLAKQR\n")
    with pytest.raises(ConfigError, match="plot-heads join=true places homologs"):
        read_heads_window(fasta, A, model, 64, join=True)
    assert read_heads_window(fasta, A, model, 64).protein.id == "a"  # one protein: its own
    model.config.context_positions = "window"  # the same weights read as a window model
    with pytest.raises(ValueError, match="at least one array"):  # past the check: no targets
        context_perplexity(model, A, [], max_length=64)


def test_column_crop_narrows_only_for_the_homologs_there_are():
    """The widest crop that leaves room for min(per_window, available) homologs cut to it."""
    assert column_crop(500, 4096, 64, 200) == (4096 - 2 - 64) // 65 == 62
    assert column_crop(500, 4096, 64, 16) == (4096 - 2 - 16) // 17 == 239  # 16 there are
    assert column_crop(500, 4096, 16, 200) == 239  # 16 asked for
    assert column_crop(500, 4096, 64, 64) == 62 and column_crop(500, 4096, 64, 60) == 66
    assert column_crop(500, 4096, 64, 0) == 500 and column_crop(100, 4096, 16, 16) == 100
    assert column_crop(500, 4097, 64, 200, ends=1) == (4097 - 1 - 64) // 65


def test_window_homologs_auto_is_the_models_own_and_bad_values_are_refused():
    assert (COLUMNS_WINDOW_HOMOLOGS, WHOLE_WINDOW_HOMOLOGS) == ((1, 64), (16,))
    assert window_homologs_for(True, "auto") == (1, 64)
    assert window_homologs_for(False, "auto") == (16,)
    # a deep alignment: one window of up to 64 alone (the first homolog's stops helping)
    assert window_homologs_for(True, "auto", 149) == (1, 64)
    assert (
        window_homologs_for(True, "auto", 150) == window_homologs_for(True, "auto", 5000) == (64,)
    )
    assert window_homologs_for(False, "auto", 5000) == (16,)
    assert window_homologs_for(True, [1, 64], 5000) == (1, 64)  # asked for: kept
    assert window_homologs_for(True, None) == (None,) and window_homologs_for(False, 5) == (5,)
    assert window_homologs_for(True, np.int64(3)) == (3,)
    assert window_homologs_for(True, [64, np.int64(8)]) == (64, 8)  # the order given
    assert window_homologs_for(True, ListConfig([8, 64])) == (8, 64)  # as Hydra gives a list
    for bad in (0, -1, 2.5, True, "all", "16", [], [8, 8], [8, 0], [8, None], [8, "auto"]):
        with pytest.raises(ConfigError, match="auto, null, a whole number >= 1 or a list"):
            window_homologs_for(True, bad)
    base = {"fasta": "x.fa", "mutations": "m.csv", "out": "o.csv"}
    for good in ("auto", None, 1, 64, [8, 64], ListConfig([16, 4])):
        validate_analysis_config(ScoreConfig(**base, context_window_homologs=good))
    for bad in (0, 2.5, True, "all", [], [64, 64], [3, -1]):
        with pytest.raises(ConfigError, match="context_window_homologs must be auto, null, a"):
            validate_analysis_config(ScoreConfig(**base, context_window_homologs=bad))


def test_a_columns_model_fills_its_crop_with_as_many_homologs_as_there_are(tmp_path, monkeypatch):
    """auto: a window after the first homolog and one after up to 64 for a columns model, each
    crop as wide as the homologs there are leave room for; 16 and whole windows for a model
    that places them whole. Two sizes over the homologs there are make one window."""
    rng = np.random.default_rng(11)
    wt = "".join(rng.choice(AA, 60))
    rows = [_mutated(wt, rng, 12) for _ in range(5)]
    context = H.read_scan_context(_a3m(tmp_path, wt, rows), A, wt, "wt")
    model = _columns_model()
    calls = _capture(monkeypatch)
    H.context_log_probs(model, A, wt, [30], context, max_length=200)
    # 1 homolog: (200 - 2 - 1) // 2 = 98, the whole protein; 5 (fewer than 64): (200 - 2 - 5)
    # // 6 = 32 residues about the site
    assert context.info["context_crop"] == [60, 32]
    assert context.info["context_window_homologs"] == [1, 64]
    assert context.info["mean_homologs_in_window"] == [1, 5] and len(calls) == 2
    (one,) = calls[0]
    # <cls>, the homolog's residues in the 60 columns (its local alignment may leave an end
    # out), <sep>, the protein, <eos>
    assert 1 + 50 + 1 + 60 + 1 < len(one[1]) <= 1 + 60 + 1 + 60 + 1
    H.context_log_probs(model, A, wt, [30], context, max_length=200, window_homologs=[8, 64])
    assert context.info["context_crop"] == 32 and context.info["context_window_homologs"] == 8
    assert context.info["mean_homologs_in_window"] == 5 and len(calls) == 3  # one window
    (job,) = calls[-1]
    assert len(job[1]) == 1 + 5 * (32 + 1) + 32 + 1  # <cls>, 5 x (crop + <sep>), crop, <eos>
    H.context_log_probs(model, A, wt, [30], context, max_length=200, window_homologs=2)
    assert context.info["context_crop"] == 60 and context.info["mean_homologs_in_window"] == 2
    with pytest.raises(ConfigError, match=r"context_window_homologs=auto or N, not null") as error:
        H.context_log_probs(model, A, wt, [30], context, max_length=200, window_homologs=None)
    assert "context_crop" not in str(error.value) and "homologs-deep place" in str(error.value)
    # as deep as DEEP_ALIGNMENT_HOMOLOGS (here 5 of them, not 150): auto is one window of 64
    from protein_performer.analysis.dms import windows

    monkeypatch.setattr(windows, "DEEP_ALIGNMENT_HOMOLOGS", 5)
    H.context_log_probs(model, A, wt, [30], context, max_length=200)
    assert context.info["context_window_homologs"] == 64 and context.info["context_crop"] == 32
    monkeypatch.setattr(windows, "DEEP_ALIGNMENT_HOMOLOGS", 6)
    H.context_log_probs(model, A, wt, [30], context, max_length=200)
    assert context.info["context_window_homologs"] == [1, 64]
    model.config.context_positions = "window"  # places them whole: auto is 16
    H.context_log_probs(model, A, wt, [30], context, max_length=200)
    assert context.info["context_window_homologs"] == 16 and context.info["context_crop"] is None


def test_windows_of_each_size_are_averaged_site_by_site(tmp_path, monkeypatch):
    """context_window_homologs=[8, 64]: each site read in a window of
    at most 8 homologs (a wider crop) and one of all 12 there are (a narrower one), its
    log-probabilities the mean of the two windows' own; what each held is said in order."""
    rng = np.random.default_rng(12)
    wt = "".join(rng.choice(AA, 60))
    rows = [_mutated(wt, rng, 12) for _ in range(12)]
    context = H.read_scan_context(_a3m(tmp_path, wt, rows), A, wt, "wt")
    model = _columns_model()
    sites = [20, 30, 40]
    one = {
        cap: H.context_log_probs(model, A, wt, sites, context, max_length=200, window_homologs=cap)
        for cap in (8, 12)
    }
    crops = {8: (200 - 2 - 8) // 9, 12: (200 - 2 - 12) // 13}
    assert crops == {8: 21, 12: 14}
    calls = _capture(monkeypatch)
    both = H.context_log_probs(
        model, A, wt, sites, context, max_length=200, window_homologs=[8, 64]
    )
    assert [len(jobs) for jobs in calls] == [3, 3]  # a window of each kind for each site
    assert [len(j[1]) for j in calls[0]] == [1 + 8 * 22 + 21 + 1] * 3  # <cls>, 8 x (21+<sep>), ...
    assert [len(j[1]) for j in calls[1]] == [1 + 12 * 15 + 14 + 1] * 3
    for site in sites:
        np.testing.assert_allclose(
            both[site], (one[8][site] + one[12][site]) / 2, rtol=1e-5, atol=1e-6
        )
        assert not np.allclose(one[8][site], one[12][site])  # two windows that differ
    info = context.info
    assert info["context_window_homologs"] == [8, 64] and info["context_crop"] == [21, 14]
    assert info["mean_homologs_in_window"] == [8, 12] and info["sites"] == 3
    summary: dict = {}
    text = context_notes(context, summary, causal=False)
    assert (
        "tokens holding 8 and 12 homologs (a mean each) before the protein" in text
        and "at most 8 and 64 a window" in text
    )
    assert "averaged over these windows" in text and "each window 21 and 14 residues" in text
    # a single kind of window after the pair: nothing of the pair's left in what is said
    H.context_log_probs(model, A, wt, sites, context, max_length=200, window_homologs=12)
    assert info["context_crop"] == 14 and info["context_window_homologs"] == 12
    assert "averaged over" not in context_notes(context, {}, causal=False)
    info.update(context_window_homologs=[1, 64], context_crop=[60, 60])  # the same crop twice
    assert "each window 60 residues" in context_notes(context, {}, causal=False)
    info.update(mean_homologs_in_window=[1.0, 37.25])  # whole counts whole, a mean to a tenth
    assert "holding 1 and 37.2 homologs (a mean each)" in context_notes(context, {}, causal=False)
    info["context_samples"] = 2  # drawn windows of each size: said per size
    assert ", 2 windows of each size per site averaged" in context_notes(context, {}, False)
    H.context_log_probs(model, A, wt, sites, context, max_length=200, window_homologs=[8, 64])
    model.config.context_positions = "window"  # whole windows: no crop, no site scored whole
    H.context_log_probs(model, A, wt, sites, context, max_length=200, window_homologs=2, crop=False)
    assert not any(isinstance(info.get(k), list) for k in ("context_crop", "sites_scored_whole"))
