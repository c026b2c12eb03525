"""Homolog-conditioned evaluation: pairing of positions, targets from clusters, evaluate context=."""

from __future__ import annotations

import itertools
import json
import logging
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from protein_performer.config.schema import EvalConfig
from protein_performer.config.validate import validate_eval_config
from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError, DataError
from protein_performer.evaluation.context_perplexity import (
    Target,
    cluster_fill,
    cluster_targets,
    context_perplexity,
    fixed_targets,
    record_order,
    scoring_windows,
)
from protein_performer.evaluation.evaluate import evaluate
from protein_performer.training.run import train
from tests.benchmark_scripts import load_benchmark
from tests.training.helpers import tiny_config, write_fasta


def clusters_of_three(fasta: Path, path: Path, first: int | None = None) -> Path:
    """A members table at ``path`` putting the records of ``fasta`` in clusters of three, in
    file order (``first``: only that many records listed)."""
    ids = [line[1:].split()[0] for line in fasta.read_text().splitlines() if line[0] == ">"]
    rows = [f"c{i // 3}\t{rid}\n" for i, rid in enumerate(ids[:first])]
    path.write_text("cluster_id\tmember_id\n" + "".join(rows))
    return path


A = default_alphabet()
AA = "ACDEFGHIKLMNPQRSTVWY"


class CopyModel(nn.Module):
    """Test double: at each position of the target (after the first ``<sep>``) it predicts the
    token at the same offset in the first context protein (certain), elsewhere uniform. So it is
    perfect with an identical copy in context and uniform without context."""

    def forward(self, ids: torch.Tensor, pad: torch.Tensor | None = None) -> dict:
        b, n = ids.shape
        logits = torch.zeros(b, n, len(A))
        for r in range(b):
            seps = (ids[r] == A.sep_idx).nonzero().flatten().tolist()
            if not seps:
                continue
            tstart = seps[0] + 1
            for p in range(tstart, n):
                src = 1 + (p - tstart)
                if src < seps[0]:
                    logits[r, p, int(ids[r, src])] = 50.0
        return {"logits": logits}


class SearchModel(nn.Module):
    """Test double that retrieves by content: the target is the last segment (``<cls>`` /
    ``<sep>`` ... ``<eos>``); an earlier segment of the same length that agrees with it at
    80% of its positions or more (``<mask>`` agrees with anything; BERT's random replacements
    do not) is its copy, and the model predicts from it (certain) wherever it
    sits in the window; with no such segment it is uniform."""

    def forward(self, ids: torch.Tensor, pad: torch.Tensor | None = None) -> dict:
        b, n = ids.shape
        logits = torch.zeros(b, n, len(A))
        for r in range(b):
            row = ids[r].tolist()
            end = row.index(A.eos_idx)
            cuts = [0] + [i for i, t in enumerate(row[:end]) if t == A.sep_idx]
            target = row[cuts[-1] + 1 : end]
            for a, z in itertools.pairwise(cuts):
                seg = row[a + 1 : z]
                same = [t in (A.mask_idx, s) for t, s in zip(target, seg, strict=False)]
                if len(seg) == len(target) and sum(same) >= 0.8 * len(seg):
                    for k, s in enumerate(seg):
                        logits[r, cuts[-1] + 1 + k, s] = 50.0
                    break
        return {"logits": logits}


def segments(window: np.ndarray) -> list[str]:
    """The proteins of a ``<cls> a <sep> b <sep> … <eos>`` window, decoded."""
    body = window[1:-1].tolist()
    cuts = [-1] + [i for i, t in enumerate(body) if t == A.sep_idx] + [len(body)]
    return [A.decode(np.array(body[a + 1 : z])) for a, z in itertools.pairwise(cuts)]


def random_seq(rng: np.random.Generator, n: int) -> str:
    return "".join(rng.choice(list(AA), size=n))


def test_an_identical_context_copy_is_scored_on_the_same_positions():
    rng = np.random.default_rng(0)
    seqs = [random_seq(rng, int(rng.integers(30, 80))) for _ in range(12)]
    source = FlatSource.from_strings(seqs, ids=[f"p{i}" for i in range(12)])
    copies = cluster_targets(source, {f"p{i}": f"c{i}" for i in range(12)}, min_members=1)
    for t in copies:
        t.context = [t.residues.copy()]  # the protein itself as its context
    out = context_perplexity(CopyModel(), A, copies, max_length=256, seed=3)
    assert out["proteins"] == 12 and out["positions"] > 12
    assert out["with_context"]["perplexity"] == pytest.approx(1.0, abs=1e-6)
    assert out["with_context"]["accuracy"] == 1.0
    assert out["without_context"]["perplexity"] == pytest.approx(len(A), rel=1e-6)  # uniform
    assert out["ratio"] == pytest.approx(1 / len(A), rel=1e-6)
    assert out["targets_with_identical_context"] == 12 and out["mean_context_proteins"] == 1
    # masks are keyed by the seed: the same positions again, other positions with another seed
    again = context_perplexity(CopyModel(), A, copies, max_length=256, seed=3)
    assert again["positions"] == out["positions"]
    # an unrelated context does not help the copy model
    other = fixed_targets(source, [np.asarray(source[0])])
    unrelated = context_perplexity(CopyModel(), A, other[1:], max_length=256, seed=3)
    assert unrelated["with_context"]["perplexity"] > 5


def test_targets_with_an_identical_context_are_reported_apart():
    rng = np.random.default_rng(2)
    seqs = [random_seq(rng, int(rng.integers(30, 80))) for _ in range(10)]
    source = FlatSource.from_strings(seqs, ids=[f"p{i}" for i in range(10)])
    targets = cluster_targets(source, {f"p{i}": f"c{i}" for i in range(10)}, min_members=1)
    for i, t in enumerate(targets):  # 4 copies, 6 unrelated contexts
        t.context = [t.residues.copy() if i < 4 else np.asarray(source[(i + 1) % 10])]
    out = context_perplexity(CopyModel(), A, targets, max_length=256, seed=5)
    same, other = out["by_context"]["identical"], out["by_context"]["no_identical"]
    assert (same["proteins"], other["proteins"]) == (4, 6)
    assert same["positions"] + other["positions"] == out["positions"]
    alone = context_perplexity(CopyModel(), A, targets[:4], max_length=256, seed=5)
    assert alone["positions"] == same["positions"]  # the positions of those 4 targets
    assert same["with_context"]["perplexity"] == pytest.approx(1.0, abs=1e-6)
    assert other["with_context"]["perplexity"] > 5
    assert other["ratio"] > 0.2 > same["ratio"]
    # the whole is the position-weighted mix of the two parts (geometric mean of perplexities)
    mix = math.exp(
        (
            same["positions"] * math.log(same["with_context"]["perplexity"])
            + other["positions"] * math.log(other["with_context"]["perplexity"])
        )
        / out["positions"]
    )
    assert out["with_context"]["perplexity"] == pytest.approx(mix, rel=1e-5)


def test_long_targets_are_cropped_to_half_the_window_in_both_runs():
    rng = np.random.default_rng(1)
    source = FlatSource.from_strings([random_seq(rng, 300)], ids=["long"])
    (t,) = fixed_targets(source, [np.asarray(source[0])])
    out = context_perplexity(CopyModel(), A, [t], max_length=100, mask_prob=1.0, seed=0)
    # 48 residues of the target (100 // 2 - 2), 80% of them <mask>ed
    assert 30 <= out["positions"] <= 48
    assert out["mean_context_tokens"] == 50  # the rest of the window: 49 context + <sep>


def test_fill_places_the_homologs_among_other_clusters_proteins_up_to_the_window():
    rng = np.random.default_rng(4)
    seqs = [random_seq(rng, int(rng.integers(30, 60))) for _ in range(40)]
    ids = [f"p{i}" for i in range(40)]
    source = FlatSource.from_strings(seqs, ids=ids)
    table = {rid: f"c{i // 2}" for i, rid in enumerate(ids)}  # pairs
    targets = cluster_targets(source, table)
    for t in targets:
        t.context = [t.residues.copy()]  # its copy is its only homolog
    fill = cluster_fill(source, table)
    kw = {"max_length": 600, "style": "crop", "mask_prob": 0.15, "seed": 7, "fill": fill}
    _, single_y, ctx, ctx_y, info = scoring_windows(targets, A, **kw)
    fill_x, fill_y = info["fill_windows"], info["fill_labels"]
    starts = []
    for t, x, y, fx, fy, s in zip(targets, ctx, ctx_y, fill_x, fill_y, single_y, strict=True):
        assert 600 - 17 <= len(x) <= 600  # filled, the last fill protein cut to fit
        parts = segments(x)
        # the homolog once, nothing else of the target's cluster, and the same positions scored
        own = {seqs[i] for i, rid in enumerate(ids) if table[rid] == t.group}
        assert sum(seg in own for seg in parts[:-1]) == 1
        # ... not even cut: the last fill protein may be a prefix of a record
        assert sum(any(o.startswith(seg) for o in own) for seg in parts[:-1]) == 1
        assert segments(fx)[:-1] == [seg for seg in parts[:-1] if seg not in own]
        assert np.array_equal(y[y != -100], fy[fy != -100])
        assert (s != -100).sum() == (y != -100).sum()
        starts.append([seg in own for seg in parts].index(True))
    assert len(set(starts)) > 3  # the homolog's place varies
    assert info["short_fill_windows"] == 0 and info["fill_place"] == "random"
    again = scoring_windows(targets, A, **kw)[2]
    assert all(np.array_equal(a, b) for a, b in zip(again, ctx, strict=True))
    # adjacent: the same fill, the homolog always right before the target
    _, _, near, _, near_info = scoring_windows(targets, A, **kw, fill_place="adjacent")
    for t, x, fx, nx in zip(targets, ctx, fill_x, near, strict=True):
        assert len(nx) == len(x) and segments(nx)[-2] == A.decode(t.context[0])
        assert segments(nx)[:-2] == segments(fx)[:-1]
    assert all(np.array_equal(a, b) for a, b in zip(near_info["fill_windows"], fill_x, strict=True))
    with pytest.raises(ConfigError, match="fill_place must be one of random, adjacent"):
        scoring_windows(targets, A, **kw, fill_place="end")
    # a model that finds the copy by content finds it anywhere in the filled window
    out = context_perplexity(
        SearchModel(), A, targets, **{k: kw[k] for k in ("max_length", "seed")}, fill=fill
    )
    assert out["with_context"]["perplexity"] == pytest.approx(1.0, abs=1e-6)
    assert out["with_fill_only"]["perplexity"] == pytest.approx(len(A), rel=1e-6)
    assert out["ratio_vs_fill"] == pytest.approx(1 / len(A), rel=1e-6)
    assert out["mean_fill_tokens"] > 400 and out["mean_context_proteins"] == 1
    assert out["by_context"]["identical"]["with_fill_only"]["perplexity"] == pytest.approx(len(A))
    # a pool holding only the target's own cluster leaves the window unfilled, not looping
    lonely = FlatSource.from_strings(seqs[:2], ids=ids[:2])
    (first, _) = cluster_targets(lonely, table)
    _, _, (x,), _, lonely_info = scoring_windows(
        [first], A, **(kw | {"fill": cluster_fill(lonely, table)})
    )
    assert len(segments(x)) == 2  # its homolog, then itself
    assert lonely_info["short_fill_windows"] == 1


def test_cluster_targets_use_the_other_members_and_skip_small_clusters():
    source = FlatSource.from_strings(["AAAA", "CCCC", "DDDD", "EEEE", "FFFF"], ids=list("abcde"))
    table = {"a": "x", "b": "x", "c": "x", "d": "y"}  # e is in no cluster: its own
    targets = cluster_targets(source, table, min_members=2)
    assert [t.id for t in targets] == ["a", "b", "c"]
    assert [A.decode(c) for c in targets[1].context] == ["AAAA", "DDDD"]
    assert [t.id for t in cluster_targets(source, table, min_members=3)] == ["a", "b", "c"]
    assert cluster_targets(source, table, min_members=4) == []


def test_record_order_sorts_by_id_then_sequence():
    source = FlatSource.from_strings(["AA", "CC", "DD", "EE"], ids=["b", "a", "c", "a"])
    assert record_order(source, "id") == [1, 3, 0, 2]
    assert record_order(source, "given") == [0, 1, 2, 3]
    assert record_order(FlatSource.from_strings(["AA", "CC"]), "id") == [0, 1]  # no ids
    # a shared id: by sequence, so shuffled files give the same order of the same records
    records = [("x", "KKK"), ("x", "AAA"), ("a", "GGG"), ("x", "MMM")]
    orders = set()
    for perm in itertools.permutations(records):
        shuffled = FlatSource.from_strings([r[1] for r in perm], ids=[r[0] for r in perm])
        orders.add(tuple(A.decode(shuffled[i]) for i in record_order(shuffled, "id")))
    assert len(orders) == 1 and next(iter(orders))[0] == "GGG"  # id a, then the three x
    with pytest.raises(ConfigError, match="context_order must be one of id, given"):
        record_order(source, "random")


def test_cluster_targets_and_fill_follow_the_order_given():
    table = {"a": "x", "b": "x", "c": "x", "d": "y", "e": "y"}
    source = FlatSource.from_strings(["AAAA", "CCCC", "DDDD", "EEEE", "FFFF"], ids=list("ecbda"))
    order = record_order(source, "id")
    targets = cluster_targets(source, table, order=order)
    assert [t.id for t in targets] == list("abcde")
    # b's homologs in id order: a, c (in the file: c, then a)
    assert [A.decode(c) for c in targets[1].context] == ["FFFF", "CCCC"]
    fill = cluster_fill(source, table, order=order)
    assert [A.decode(r) for r in fill.records] == ["FFFF", "DDDD", "CCCC", "EEEE", "AAAA"]
    assert list(fill.groups) == ["x", "x", "x", "y", "y"]
    # None: the file's order, as before
    assert [t.id for t in cluster_targets(source, table)] == list("ecbda")


def test_the_context_sample_does_not_depend_on_the_order_of_the_files(tmp_path):
    fasta = write_fasta(tmp_path / "t.fasta", n=30, max_len=30)
    cfg = tiny_config(fasta, max_steps=2)
    cfg.model.position = "rotary"  # windows longer than training's: room for fill proteins
    result = train(cfg, tmp_path / "run")
    records = [">" + r for r in fasta.read_text().split(">")[1:]]
    first, second = tmp_path / "a.fasta", tmp_path / "b.fasta"
    first.write_text("".join(records[::2]))  # clusters span both files
    second.write_text("".join(records[1::2]))
    members = clusters_of_three(fasta, tmp_path / "members.tsv")

    def context(files, order):
        return evaluate(
            EvalConfig(
                checkpoint=result.last_checkpoint, fasta=[str(f) for f in files],
                context="cluster", clusters=str(members), context_max_proteins=7,
                context_fill=True, context_order=order, max_length=256,
            )
        ).context  # fmt: skip

    keys = ("positions", "with_context", "without_context", "with_fill_only", "by_context")
    ab, ba = context([first, second], "id"), context([second, first], "id")
    assert ab["proteins"] == 7 and ab["mean_fill_tokens"] > 100
    assert all(ab[k] == ba[k] for k in keys)
    given_ab, given_ba = context([first, second], "given"), context([second, first], "given")
    assert any(given_ab[k] != given_ba[k] for k in keys)


def test_evaluate_context_cluster_and_fasta(tmp_path, caplog):
    fasta = write_fasta(tmp_path / "t.fasta", n=30)
    result = train(tiny_config(fasta, max_steps=2), tmp_path / "run")
    members = clusters_of_three(fasta, tmp_path / "members.tsv")
    out = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, fasta=str(fasta), context="cluster",
            clusters=str(members),
        )
    )  # fmt: skip
    c = out.context
    # 64-token windows: the target takes up to 30 residues, one homolog (maybe cut) fits
    assert c["proteins"] == 30 and c["mean_context_proteins"] == 1
    assert c["positions"] > 0 and math.isfinite(c["with_context"]["perplexity"])
    assert "with context (each protein's cluster, >= 2 members): 30 proteins, " in out.format()
    from protein_performer.evaluation.evaluate import _context_text

    one = _context_text({**c, "proteins": 1})
    assert "members): 1 protein, " in one
    # few positions: the advice names context_max_proteins only where it was set
    assert c["max_proteins"] is None
    few = {**c, "positions": 40}
    assert "the ratio is noisy (more proteins)\n" in _context_text(few)
    assert "context_max_proteins unset" in _context_text({**few, "max_proteins": 5})
    filled = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, fasta=str(fasta), context="cluster",
            clusters=str(members), context_fill=True,
        )
    )  # fmt: skip
    f = filled.context
    assert f["positions"] == c["positions"] and f["max_length"] == 64
    assert f["ratio_vs_fill"] == pytest.approx(
        f["with_context"]["perplexity"] / f["with_fill_only"]["perplexity"]
    )
    assert f["without_context"] == c["without_context"]  # the same single-protein windows
    assert "without the homologs" in filled.format() and "warning" not in filled.format()
    filled.context["short_fill_windows"] = 3  # as a pool too small to fill would report
    assert "warning: 3 windows could not be filled to 64 tokens" in filled.format()
    filled.context["short_fill_windows"] = 0
    assert c["positions"] >= 100 and "positions only" not in out.format()
    out.context["positions"] = 12  # as a handful of proteins would give
    assert "warning: 12 <mask> positions only: the ratio is noisy" in out.format()
    near = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, fasta=str(fasta), context="cluster",
            clusters=str(members), context_fill=True, context_fill_place="adjacent",
        )
    )  # fmt: skip
    # the same fill windows, the homologs moved next to the target
    assert near.context["with_fill_only"] == f["with_fill_only"]
    assert near.context["fill_place"] == "adjacent" and "right before the protein" in near.format()
    homologs = write_fasta(tmp_path / "h.fasta", n=2, seed=5)
    out = evaluate(
        EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), context=str(homologs))
    )
    assert out.context["proteins"] == 30 and out.context["mean_context_proteins"] >= 1
    # two homologs of one query as an a3m (a header line, a gap, an insertion) and as FASTA:
    # the same context, the alignment's query left out as score leaves it out
    query = write_fasta(tmp_path / "q.fasta", n=1, seed=9, min_len=40).read_text().split()[-1]
    one = query[:5] + ("A" if query[5] != "A" else "C") + query[6:]
    two = query[:3] + "kw" + query[3:10] + "-" + query[11:]
    a3m = tmp_path / "h.a3m"
    a3m.write_text(f"#x\t1\n>q\n{query}\n>r1\n{one}\n>r2\n{two}\n")
    (tmp_path / "h2.fasta").write_text(f">r1\n{one}\n>r2\n{two.replace('-', '').upper()}\n")
    out = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, fasta=str(fasta), context=str(tmp_path / "h2.fasta")
        )
    )
    with caplog.at_level("WARNING"):
        aligned = evaluate(
            EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), context=str(a3m))
        )
    assert f"{a3m}: a3m alignment, 3 records, 2 homologs (its query left out)" in aligned.format()
    # the query is none of the 30 evaluated proteins: their context is another protein's
    assert "the alignment's query q is none of the 30 evaluated proteins" in caplog.text
    # the same windows and positions; perplexities with a tolerance (two runs may choose
    # other thread counts, so other orders of sums)
    assert aligned.context["positions"] == out.context["positions"]
    a, b = aligned.context["with_context"], out.context["with_context"]
    assert a["perplexity"] == pytest.approx(b["perplexity"], rel=1e-5)
    assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-3)
    sample = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, fasta=str(fasta), context=str(homologs),
            context_max_proteins=7,
        )
    )  # fmt: skip
    assert sample.context["proteins"] == 7
    # clusters= given for the context does not turn the run's record split into a cluster split
    plain = evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), split="train"))
    with_ctx = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, fasta=str(fasta), split="train", context="cluster",
            clusters=str(members), context_min_members=2,
        )
    )  # fmt: skip
    # (the plain pass scores the context part's proteins, among the same split's records)
    assert with_ctx.all_records == plain.sequences and with_ctx.split == plain.split
    with pytest.raises(ConfigError, match="context=cluster needs clusters"):
        evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), context="cluster"))
    with pytest.raises(DataError, match="context: no such file"):
        evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), context="no.fa"))
    with pytest.raises(DataError, match="no evaluated protein has 3 or more"):
        evaluate(
            EvalConfig(
                checkpoint=result.last_checkpoint, fasta=str(fasta), context="cluster",
                clusters=str(members), context_min_members=4,
            )
        )  # fmt: skip


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"context": ""}, "context must be 'cluster' or a FASTA path"),
        ({"context": "cluster", "context_min_members": 1}, "context_min_members must be"),
        ({"context": "cluster", "context_max_proteins": 0}, "context_max_proteins must be"),
        ({"context": "h.fasta", "context_fill": True}, "context_fill=true needs context=cluster"),
        ({"context": "cluster", "context_fill": "yes"}, "context_fill must be true or false"),
        (
            {"context": "cluster", "context_fill_place": "adjacent"},
            "context_fill_place needs context_fill=true",
        ),
        (
            {"context": "cluster", "context_fill": True, "context_fill_place": "end"},
            "context_fill_place='end' is not valid",
        ),
        ({"context": "cluster", "context_order": "random"}, "context_order='random' is not"),
        (
            {"context_max_proteins": 5, "context_order": "given"},
            r"^context_max_proteins, context_order set without context=cluster or context=FASTA$",
        ),
    ],
)
def test_context_settings_are_checked(kw, message):
    from protein_performer.config.validate import validate_eval_config

    with pytest.raises(ConfigError, match=message):
        validate_eval_config(EvalConfig(checkpoint="x.ckpt", fasta="x.fa", **kw))


def pairs_config(tmp_path: Path, max_steps: int, test_fraction: float):
    """A tiny pairs run's config: 30 proteins in clusters of three, split by cluster."""
    fasta = write_fasta(tmp_path / "t.fasta", n=30)
    members = clusters_of_three(fasta, tmp_path / "members.tsv")
    cfg = tiny_config(fasta, max_steps=max_steps)
    cfg.data.packing, cfg.data.pair_mask = "pairs", "protein"
    cfg.data.clusters, cfg.data.split_by = str(members), "cluster"
    cfg.data.split_fractions = [1.0 - test_fraction, 0.0, test_fraction]
    return cfg, fasta


@pytest.mark.slow
def test_a_pairs_run_trains_and_the_context_curve_scores_its_checkpoints(tmp_path, capsys):
    cfg, fasta = pairs_config(tmp_path, max_steps=2, test_fraction=0.4)
    result = train(cfg, tmp_path / "run")
    snap = tmp_path / "run" / "snap"
    snap.mkdir()
    shutil.copy(result.last_checkpoint, snap / "a.ckpt")  # the same step: scored once
    threads = torch.get_num_threads()  # the benchmarks set torch's threads: put them back
    try:
        _context_curve_and_heads(result, fasta, tmp_path, capsys)
    finally:
        torch.set_num_threads(threads)


def _context_curve_and_heads(result, fasta, tmp_path, capsys) -> None:
    out = tmp_path / "curve.json"
    load_benchmark("context_curve.py").main(
        [str(tmp_path / "run"), "--fasta", str(fasta), "--min-members", "2", "--max-proteins",
         "5", "--offsets", "10", "--labels", "tiny", "--json", str(out), "--png",
         str(tmp_path / "curve.png")]
    )  # fmt: skip
    (run,) = json.loads(out.read_text())["runs"]
    assert run["run"] == "tiny" and run["dir"] == str(tmp_path / "run")
    (point,) = run["curve"]
    assert point["step"] == 12 and point["proteins"] == 5
    # the same numbers as evaluate's context pass on the same proteins
    ev = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, fasta=str(fasta), split="test", context="cluster",
            context_min_members=2, context_max_proteins=5,
        )
    ).context  # fmt: skip
    assert point["positions"] == ev["positions"]
    assert point["ratio"] == pytest.approx(ev["ratio"], rel=1e-6)
    assert (tmp_path / "curve.png").stat().st_size > 0
    with pytest.raises(SystemExit) as stop:
        load_benchmark("context_curve.py").main(
            [str(tmp_path / "run"), "--fasta", str(fasta), "--labels", "a", "b"]
        )
    assert "--labels: 2 values for 1 runs" in str(stop.value) + capsys.readouterr().err
    # attention on the aligned residues of the same windows
    heads_json = tmp_path / "heads.json"
    load_benchmark("alignment_heads.py").main(
        [str(result.last_checkpoint), "--fasta", str(fasta), "--min-members", "2",
         "--max-proteins", "5", "--json", str(heads_json)]
    )  # fmt: skip
    (res,) = json.loads(heads_json.read_text())["results"]
    assert res["proteins"] == 5 and res["queries"] > 0 and 0 < res["uniform"] < 1
    assert len(res["heads"]) == 2 * 4
    for h in res["heads"]:  # the aligned residues are part of the homologs
        assert 0 <= h["aligned"] <= h["homologs"] + 1e-9 <= 1 + 1e-9
    assert [h["aligned"] for h in res["heads"]] == sorted(
        (h["aligned"] for h in res["heads"]), reverse=True
    )


def test_a_pairs_run_with_attention_supervision_logs_the_alignment_loss(tmp_path):
    import csv

    cfg, _ = pairs_config(tmp_path, max_steps=6, test_fraction=0.2)
    cfg.data.pair_copy = 1.0
    cfg.model.attention = "transformer"
    cfg.align.weight = 1.0
    train(cfg, tmp_path / "run")
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/align_loss")]
    assert len(rows) == 6
    for r in rows:  # -log of the attention on the aligned residue, and that attention
        loss, mass = float(r["train/align_loss"]), float(r["train/align_mass"])
        assert 0 < mass < 1 and 0 < loss < 10 and -math.log(mass) <= loss + 1e-6


def test_alignment_heads_splits_a_scored_window_into_its_proteins():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from alignment_heads import window_parts

    a = default_alphabet()
    enc = {c: a.index(c) for c in "ACDEFGHIKLMNPQRSTVWY"}
    tokens = [a.cls_idx, enc["A"], enc["C"], a.sep_idx, enc["D"], a.sep_idx]
    tokens += [enc["E"], a.mask_idx, enc["G"], a.eos_idx]
    labels = [-100] * len(tokens)
    labels[7] = enc["F"]
    w = window_parts(np.array(tokens), np.array(labels), a)
    assert w["segments"] == [(0, 2), (3, 4), (5, 8)]
    assert w["parts"] == ["AC", "D", "EFG"]  # the <mask> restored
    assert w["masked"].tolist() == [6]


def test_evaluate_without_a_split_needs_no_clusters_table(tmp_path):
    """A run split by cluster, its clusters table moved since: evaluate without split= scores
    every record (the table is the split's, not needed); split=test says what is missing."""
    cfg, fasta = pairs_config(tmp_path, max_steps=2, test_fraction=0.4)
    result = train(cfg, tmp_path / "run")
    (tmp_path / "members.tsv").rename(tmp_path / "moved.tsv")
    out = evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta)))
    assert out.sequences == 30
    with pytest.raises(DataError, match=r"members\.tsv: clusters: no such file"):
        evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), split="test"))
    # context=cluster falls back on the run's table, which the user never named: say so
    with pytest.raises(DataError, match=r"the training run's clusters table is not here; give"):
        evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), context="cluster"))
    # the table given for the context draws the split too when the run's is gone
    moved = str(tmp_path / "moved.tsv")
    ctx = dict(context="cluster", clusters=moved, context_min_members=2)
    test = evaluate(
        EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), split="test", **ctx)
    )
    assert 0 < test.all_records < 30 and test.context["proteins"] > 0
    (tmp_path / "moved.tsv").rename(tmp_path / "members.tsv")  # back in place: the same split
    same = evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), split="test"))
    assert same.sequences == test.all_records


def test_evaluate_context_without_a_split_does_not_speak_of_one(tmp_path, monkeypatch):
    import protein_performer.evaluation.evaluate as evaluate_module
    import protein_performer.evaluation.scope as scope

    cfg, fasta = pairs_config(tmp_path, max_steps=2, test_fraction=0.4)
    result = train(cfg, tmp_path / "run")
    warned = []
    for module in (evaluate_module, scope):
        monkeypatch.setattr(module.log, "warning", lambda msg, *a: warned.append(msg % a))
    other = tmp_path / "other.tsv"  # another table than the run's: only the context's
    shutil.copy(tmp_path / "members.tsv", other)
    ctx = dict(context="cluster", clusters=str(other), context_min_members=2)
    out = evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), **ctx))
    assert out.all_records == 30 and out.context["proteins"] > 0
    assert not [w for w in warned if "split=" in w], warned


def test_a_window_too_small_for_any_homolog_is_an_error_not_a_ratio_of_one(tmp_path):
    fasta = write_fasta(tmp_path / "t.fasta", n=30)
    result = train(tiny_config(fasta, max_steps=2), tmp_path / "run")
    members = clusters_of_three(fasta, tmp_path / "members.tsv")
    ctx = dict(checkpoint=result.last_checkpoint, fasta=str(fasta), context="cluster",
               clusters=str(members))  # fmt: skip
    with pytest.raises(ConfigError, match="max_length=16 leaves no room for a homolog"):
        evaluate(EvalConfig(**ctx, max_length=16))
    assert evaluate(EvalConfig(**ctx, max_length=64)).context["mean_context_proteins"] > 0


def test_a_clusters_table_that_misses_records_is_said(tmp_path, monkeypatch):
    import protein_performer.evaluation.evaluate as evaluate_module
    import protein_performer.evaluation.scope as scope

    fasta = write_fasta(tmp_path / "t.fasta", n=30)
    result = train(tiny_config(fasta, max_steps=2), tmp_path / "run")
    members = clusters_of_three(fasta, tmp_path / "members.tsv", first=12)  # 12 of the 30
    warned = []
    for module in (evaluate_module, scope):
        monkeypatch.setattr(module.log, "warning", lambda msg, *a: warned.append(msg % a))
    ctx = dict(checkpoint=result.last_checkpoint, fasta=str(fasta), context="cluster",
               clusters=str(members))  # fmt: skip
    out = evaluate(EvalConfig(**ctx))
    assert out.context["proteins"] == 12
    assert any("18 of 30 evaluated records are not in the clusters table" in w for w in warned)
    members.write_text("cluster_id\tmember_id\nc0\tother_a\nc0\tother_b\n")
    with pytest.raises(DataError, match="none of the 30 evaluated records is in the clusters"):
        evaluate(EvalConfig(**ctx))


def test_context_proteins_cut_to_the_window_are_counted() -> None:
    from protein_performer.evaluation.context_perplexity import Target

    enc = A.encode
    short, long_ = enc("MKVLAWYHHEACDEFG"), enc("ACDEFGHIKLMNPQRSTVWY" * 5)
    targets = [
        Target("a", enc("MKVLAWYHHE"), [short]),  # 16 residues: fits 40 tokens whole
        Target("b", enc("MKVLAWYHHE"), [long_]),  # 100 residues: cut to the room left
    ]
    kw = {"max_length": 40, "style": "crop", "mask_prob": 0.15, "seed": 0}
    _, _, ctx, _, info = scoring_windows(targets, A, **kw)
    assert info["context_proteins_cut"] == 1
    assert len(ctx[1]) == 40 and info["mean_context_proteins"] == 1.0
    assert info["targets_cut"] == 0 and info["target_residues_in_windows"] == 1.0
    # a target longer than half the window: a half-window of it is scored, counted
    targets.append(Target("c", enc("ACDEFGHIKLMNPQRSTVWY"), [short]))  # 20 > 40 // 2 - 2
    *_, info = scoring_windows(targets, A, **kw)
    assert info["targets_cut"] == 1 and info["target_residues_in_windows"] == (10 + 10 + 18) / 40


def test_a_clusters_table_with_a_split_by_record_is_said_once(tmp_path, caplog):
    from protein_performer.cli.hydra import run_hydra
    from tests.training.helpers import tiny_overrides

    fasta = write_fasta(tmp_path / "t.fasta", n=30)
    members = clusters_of_three(fasta, tmp_path / "members.tsv")
    argv = [*tiny_overrides(fasta, tmp_path / "run"), f"data.clusters={members}"]
    with caplog.at_level("WARNING"):
        assert run_hydra("train", argv) == 0
    assert caplog.text.count("data.clusters is given but data.split_by=record") == 1


def test_a_run_on_shards_is_evaluated_on_the_shards_split(tmp_path):
    """evaluate split=test of a model trained on shards scores the shards' test records (the
    run's data.split_* are not what made them): hashed by record or by cluster, and refused
    for shards split by files."""
    from protein_performer.data.cluster import read_members
    from protein_performer.data.shards import ShardSource, preprocess

    fasta = write_fasta(tmp_path / "t.fasta", n=60)
    members = clusters_of_three(fasta, tmp_path / "members.tsv")
    cases = {
        "hashed": dict(fractions=[0.6, 0.1, 0.3], seed=5),
        "clustered": dict(
            fractions=[0.6, 0.1, 0.3], seed=3, cluster_of=read_members(members), clusters=members
        ),
    }
    for name, kw in cases.items():
        shards = tmp_path / f"shards_{name}"
        preprocess(fasta, shards, progress=False, **kw)
        cfg = tiny_config(fasta, max_steps=1, val_check_interval=1)
        cfg.data.shards = str(shards)
        result = train(cfg, tmp_path / f"run_{name}")
        test_ids = set(ShardSource.open(shards, "test").ids)
        out = evaluate(
            EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), split="test")
        )
        assert out.sequences == len(test_ids), name
        assert out.split["by"] == ("cluster" if name == "clustered" else "record")
        assert out.split["seed"] == kw["seed"] and out.split["fractions"] == kw["fractions"]
    explicit = tmp_path / "shards_explicit"
    preprocess(
        fasta, explicit, test_inputs=[write_fasta(tmp_path / "x.fasta", n=5)], progress=False
    )
    cfg = tiny_config(fasta, max_steps=1, val_check_interval=1)
    cfg.data.shards = str(explicit)
    cfg.data.split_fractions = [1.0, 0.0, 0.0]
    result = train(cfg, tmp_path / "run_explicit")
    with pytest.raises(ConfigError, match="split by files given per split"):
        evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), split="test"))
    # without split= every record is scored (no split setting of the run is needed)
    assert evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta))).sequences == 60
    from protein_performer.analysis.inputs import split_filter
    from protein_performer.model.checkpoints import read_checkpoint

    stored = read_checkpoint(result.last_checkpoint)["protein_performer"]["data"]
    with pytest.raises(ConfigError, match="split by files given per split"):
        split_filter("test", stored)  # aa-similarity split= refuses it too


def test_a_clusters_table_made_again_is_not_the_runs_split(tmp_path, caplog):
    """A cluster split lives in its members table; the checkpoint keeps the table's digest, so
    a table clustered again into the same path (whose "test" part held training proteins, with
    no word) is refused by evaluate, aa-similarity's split and a resume."""
    from protein_performer.analysis.inputs import split_filter
    from protein_performer.model.checkpoints import read_checkpoint

    fasta = write_fasta(tmp_path / "t.fasta", n=30)
    table = clusters_of_three(fasta, tmp_path / "members.tsv")
    cfg = tiny_config(fasta, max_steps=2)
    cfg.data.clusters, cfg.data.split_by = str(table), "cluster"
    cfg.data.split_fractions = [0.6, 0.0, 0.4]
    result = train(cfg, tmp_path / "run")
    stored = read_checkpoint(result.last_checkpoint)["protein_performer"]["data"]
    assert len(stored["clusters_digest"]) == 64
    ev = dict(checkpoint=result.last_checkpoint, fasta=str(fasta), split="test", device="cpu")
    before = evaluate(EvalConfig(**ev))
    # the same clustering written differently (rows reordered) is the same split
    rows = table.read_text().splitlines()
    table.write_text("\n".join([rows[0], *reversed(rows[1:])]) + "\n")
    assert evaluate(EvalConfig(**ev)).sequences == before.sequences
    # clustered again into the same path (clusters of two): refused everywhere it matters
    ids = [r.split("\t")[1] for r in rows[1:]]
    table.write_text(
        "cluster_id\tmember_id\n" + "".join(f"d{i // 2}\t{m}\n" for i, m in enumerate(ids))
    )
    with pytest.raises(DataError, match=r"not the one the training run split by \(changed since"):
        evaluate(EvalConfig(**ev))
    with pytest.raises(DataError, match="not the one the training run split by"):
        split_filter("test", stored)
    resumed = tiny_config(fasta, max_steps=4)
    resumed.data.clusters, resumed.data.split_by = str(table), "cluster"
    resumed.data.split_fractions = [0.6, 0.0, 0.4]
    resumed.ckpt_path = result.last_checkpoint
    with pytest.raises(ConfigError, match="resuming would change the run's train/val/test split"):
        train(resumed, tmp_path / "run")
    # another table, given by its own path, is the user's choice: said, not refused
    other = tmp_path / "other.tsv"
    shutil.copy(table, other)
    clusters_of_three(fasta, table)  # the run's table back
    with caplog.at_level("WARNING"):
        other_split = evaluate(EvalConfig(**ev, clusters=str(other)))
    assert "not the one the training run split by (another clustering)" in caplog.text
    # and the result keeps it (a --json or output= reader sees no stderr)
    (caveat,) = other_split.to_dict()["split"]["caveats"]
    assert "another clustering" in caveat and "another clustering" in other_split.scope
    assert before.to_dict()["split"]["caveats"] == [] and before.scope is None


def test_a_resume_that_changes_the_split_is_refused(tmp_path):
    fasta = write_fasta(tmp_path / "t.fasta", n=40)
    cfg = tiny_config(fasta, max_steps=2)
    result = train(cfg, tmp_path / "run")
    for key, value in (("split_seed", 1), ("split_fractions", [0.7, 0.3, 0.0])):
        resumed = tiny_config(fasta, max_steps=4)
        setattr(resumed.data, key, value)
        resumed.ckpt_path = result.last_checkpoint
        with pytest.raises(ConfigError, match=f"data.{key}: "):
            train(resumed, tmp_path / "run")
    resumed = tiny_config(fasta, max_steps=4)
    resumed.ckpt_path = result.last_checkpoint
    assert train(resumed, tmp_path / "run").steps == 4  # the same split resumes


def test_evaluate_packs_windows_as_the_training_run_did(tmp_path):
    """A family-packed run's validation reads family windows; evaluate split=val reads the same
    (it read stream windows, a different measurement under the same name), and says which."""
    fasta = write_fasta(tmp_path / "t.fasta", n=60)
    table = clusters_of_three(fasta, tmp_path / "members.tsv")
    cfg = tiny_config(fasta, max_steps=2, val_check_interval=2)
    cfg.data.mode, cfg.data.packing, cfg.data.clusters = "concat", "family", str(table)
    result = train(cfg, tmp_path / "run")
    ev = dict(checkpoint=result.last_checkpoint, fasta=str(fasta), split="val", device="cpu")
    ev["split_fractions"], ev["toks_per_batch"] = [0.8, 0.2, 0.0], 640
    val = evaluate(EvalConfig(**ev))
    assert val.perplexity == pytest.approx(result.val_perplexity, rel=1e-5)
    assert (
        val.packing.startswith("concat, family packing")
        and "windows: concat, family" in val.format()
    )
    table.rename(tmp_path / "moved.tsv")
    stream = evaluate(EvalConfig(**ev))
    assert "the training run packed by family" in stream.packing
    assert stream.perplexity != pytest.approx(result.val_perplexity, rel=1e-5)
    # without split=, the run's own file is scored whole: said
    del ev["split"], ev["split_fractions"]
    whole = evaluate(EvalConfig(**ev))
    assert (
        whole.scope.startswith(f"{fasta}: the training run's data") and "note: " in whole.format()
    )
    link = tmp_path / "link.fasta"  # the same file by another path
    link.symlink_to(fasta)
    by_link = evaluate(EvalConfig(**{**ev, "fasta": str(link)}))
    assert by_link.scope.startswith(f"{link}: the training run's data")
    moved = tmp_path / "elsewhere" / "t.fasta"  # a copy of the file on another machine
    moved.parent.mkdir()
    moved.write_text(fasta.read_text())
    by_name = evaluate(EvalConfig(**{**ev, "fasta": str(moved)}))
    assert by_name.scope.startswith(f"{moved}: the training run's data")
    # another file, its ids in no clusters table: stream windows, and no note on training data
    other = write_fasta(tmp_path / "other.fasta", n=10, seed=5)
    other.write_text(other.read_text().replace("|T0", "|N0"))
    elsewhere = evaluate(EvalConfig(**{**ev, "fasta": str(other)}))
    assert elsewhere.scope is None and "stream packing" in elsewhere.packing
    # the run's family_spread is the run's: its validation number is reproduced with it
    cfg.data.family_spread = 3
    cfg.data.clusters = str(tmp_path / "moved.tsv")
    spread = train(cfg, tmp_path / "run_spread")
    ev_spread = {**ev, "checkpoint": spread.last_checkpoint, "split": "val"}
    ev_spread["split_fractions"] = [0.8, 0.2, 0.0]
    val = evaluate(EvalConfig(**ev_spread))
    assert val.perplexity == pytest.approx(spread.val_perplexity, rel=1e-5)
    assert "family_spread=3" in val.packing


def test_evaluate_split_is_the_runs_own_after_max_records(tmp_path):
    """data.max_records caps the records read before the split: evaluate split=val applies the
    run's cap too, so it scores the run's own validation proteins (it scored every val-split
    record of the file, 7 times as many here), and says so; split=train says it is not held out."""
    fasta = write_fasta(tmp_path / "t.fasta", n=200)
    cfg = tiny_config(fasta, max_steps=2, val_check_interval=2)
    cfg.data.max_records = 40
    result = train(cfg, tmp_path / "run")
    ev = dict(checkpoint=result.last_checkpoint, fasta=str(fasta), device="cpu")
    ev.update(split_fractions=[0.8, 0.2, 0.0], toks_per_batch=640)
    val = evaluate(EvalConfig(**ev, split="val"))
    assert val.perplexity == pytest.approx(result.val_perplexity, rel=1e-5)
    assert "only the first 40 records of the files were read" in val.format()
    trained = evaluate(EvalConfig(**ev, split="train"))
    assert trained.scope.startswith("split=train: proteins of the run's training split")


def test_evaluate_says_when_an_id_is_given_twice(tmp_path, caplog):
    fasta = write_fasta(tmp_path / "t.fasta", n=20)
    result = train(tiny_config(fasta, max_steps=1), tmp_path / "run")
    twice = tmp_path / "twice.fasta"
    twice.write_text(fasta.read_text() + ">sp|T00003|TINY3_TEST again\nMKVLAAGICWMKV\n")
    with caplog.at_level("WARNING"):
        evaluate(EvalConfig(checkpoint=result.last_checkpoint, fasta=str(twice), device="cpu"))
    assert (
        "1 of 21 evaluated records repeat an earlier record's id (e.g. sp|T00003|TINY3_TEST)"
        in caplog.text
    )


def test_evaluate_split_train_and_shards_keep_their_own_caps(tmp_path):
    """split=train: the smaller of the run's cap and max_records=; a shards run's
    data.max_records (applied to its train split, after the split) is not applied before the
    split by evaluate."""
    from protein_performer.data.shards import preprocess

    fasta = write_fasta(tmp_path / "t.fasta", n=120)
    cfg = tiny_config(fasta, max_steps=1)
    cfg.data.max_records = 60
    result = train(cfg, tmp_path / "run")
    ev = dict(checkpoint=result.last_checkpoint, fasta=str(fasta), device="cpu", split="train")
    ev["split_fractions"] = [0.8, 0.2, 0.0]
    assert evaluate(EvalConfig(**ev, max_records=5)).sequences == 5
    assert (
        evaluate(EvalConfig(**ev)).sequences
        == 60 - evaluate(EvalConfig(**{**ev, "split": "val"})).sequences
    )
    preprocess(fasta, tmp_path / "shards", fractions=[0.6, 0.0, 0.4], progress=False)
    shards = tiny_config(fasta, max_steps=1)
    shards.data.shards, shards.data.max_records = str(tmp_path / "shards"), 20
    run = train(shards, tmp_path / "run_shards")
    whole = evaluate(
        EvalConfig(checkpoint=run.last_checkpoint, fasta=str(fasta), device="cpu", split="test")
    )
    assert whole.scope is None and whole.sequences > 20


def test_a_checkpoint_without_the_digest_resumes_from_its_table_elsewhere(tmp_path, caplog):
    """Checkpoints from before the clusters digest keep only the table's path: the same table
    by another path (a moved or linked folder) resumes, said; a folder and its members.tsv are
    one table."""
    from protein_performer.model.checkpoints import read_checkpoint

    fasta = write_fasta(tmp_path / "t.fasta", n=30)
    folder = tmp_path / "clusters"
    folder.mkdir()
    clusters_of_three(fasta, folder / "members.tsv")
    cfg = tiny_config(fasta, max_steps=1)
    cfg.data.clusters, cfg.data.split_by = str(folder), "cluster"
    cfg.data.split_fractions = [0.6, 0.0, 0.4]
    result = train(cfg, tmp_path / "run")
    (tmp_path / "link").symlink_to(folder)
    for table in (folder / "members.tsv", tmp_path / "link"):
        ckpt = read_checkpoint(result.last_checkpoint)  # as an older checkpoint: no digest
        del ckpt["protein_performer"]["data"]["clusters_digest"]
        torch.save(ckpt, result.last_checkpoint)
        resumed = tiny_config(fasta, max_steps=2 if table.name == "members.tsv" else 3)
        resumed.data.clusters, resumed.data.split_by = str(table), "cluster"
        resumed.data.split_fractions = [0.6, 0.0, 0.4]
        resumed.ckpt_path = str(tmp_path / "run" / "checkpoints" / "last.ckpt")
        with caplog.at_level("WARNING"):
            assert train(resumed, tmp_path / "run").steps == resumed.trainer.max_steps
    assert "resuming with data.clusters=" not in caplog.text  # one table, by two paths


def test_shards_keep_the_digest_of_the_table_they_were_split_by(tmp_path):
    """Shards are split at preprocess time: their manifest keeps the table's digest, and the
    run records that one (it recorded the table found at that path when training started, so a
    table made again in between passed evaluate's check)."""
    from protein_performer.data.cluster import read_members
    from protein_performer.data.shards import preprocess

    fasta = write_fasta(tmp_path / "t.fasta", n=60)
    table = clusters_of_three(fasta, tmp_path / "members.tsv")
    preprocess(fasta, tmp_path / "shards", fractions=[0.6, 0.2, 0.2], cluster_of=read_members(table),
               clusters=table, progress=False)  # fmt: skip
    ids = [r.split("\t")[1] for r in table.read_text().splitlines()[1:]]
    table.write_text(
        "cluster_id\tmember_id\n" + "".join(f"e{i // 2}\t{m}\n" for i, m in enumerate(ids))
    )
    cfg = tiny_config(fasta, max_steps=1)
    cfg.data.shards = str(tmp_path / "shards")
    result = train(cfg, tmp_path / "run")
    ev = EvalConfig(checkpoint=result.last_checkpoint, fasta=str(fasta), split="test", device="cpu")
    with pytest.raises(DataError, match="not the one the training run split by"):
        evaluate(ev)


def test_a_non_finite_attention_supervision_loss_stops_the_run(tmp_path, monkeypatch):
    import protein_performer.training.lm_module as lm
    from protein_performer.errors import TrainingDiverged

    real = lm.alignment_nll

    def broken(*args, **kwargs):
        nll, mass = real(*args, **kwargs)
        return (None if nll is None else nll * float("nan")), mass

    monkeypatch.setattr(lm, "alignment_nll", broken)
    cfg, _ = pairs_config(tmp_path, max_steps=6, test_fraction=0.2)
    cfg.data.pair_copy = 1.0
    cfg.model.attention = "transformer"
    cfg.align.weight = 1.0
    with pytest.raises(TrainingDiverged, match="attention-supervision loss is not finite"):
        train(cfg, tmp_path / "run")


def test_context_clusters_do_not_change_the_run_s_family_packing(tmp_path) -> None:
    """With split= and context=cluster, clusters= picks the context only: the windows are
    packed by the training run's table, as the line about them says."""
    from protein_performer.config.schema import EvalConfig
    from protein_performer.evaluation.scope import eval_packing

    run_table, other = tmp_path / "run.tsv", tmp_path / "other.tsv"
    run_table.write_text("cluster\tmember\n")
    other.write_text("cluster\tmember\n")
    stored = {"packing": "family", "clusters": str(run_table)}
    cfg = EvalConfig(checkpoint="c.ckpt", fasta="x.fa", split="test", context="cluster",
                     clusters=str(other))  # fmt: skip
    packing, words, table = eval_packing(cfg, stored, "concat")
    assert packing == "family" and table == str(run_table) and str(run_table) in words
    cfg.context = None  # without context, clusters= is the table the split is drawn from
    assert eval_packing(cfg, stored, "concat")[2] == str(other)


def _target_part(window: np.ndarray) -> np.ndarray:
    """The target's tokens of a ``crop`` window: after its last ``<sep>`` (or ``<cls>``),
    before ``<eos>``."""
    cut = max([0] + [i for i, t in enumerate(window.tolist()) if t == A.sep_idx])
    return window[cut + 1 : -1]


def test_the_identical_flag_follows_the_homologs_placed_in_the_window() -> None:
    """Four homologs of 20 residues (the target's copy one of them, in a seeded order) and
    room for two: a target is "identical" exactly where its copy went into the window."""
    from protein_performer.evaluation.context_perplexity import Target

    rng = np.random.default_rng(8)
    targets = []
    for i in range(40):
        own = random_seq(rng, 20)
        others = [random_seq(rng, 20) for _ in range(3)]
        context = [A.encode(s) for s in [*others[: i % 4], own, *others[i % 4 :]]]
        targets.append(Target(f"t{i}", A.encode(own), context))
    # 72 tokens: <cls>, 20 of the target, <eos>, and 50 left: two homologs with their <sep>s
    # whole, too few (8) for a cut third
    _, _, ctx, _, info = scoring_windows(
        targets, A, max_length=72, style="crop", mask_prob=0.15, seed=3
    )
    placed = [segments(x)[:-1] for x in ctx]
    assert all(len(p) == 2 for p in placed) and info["mean_context_proteins"] == 2
    truth = [A.decode(t.residues) in p for t, p in zip(targets, placed, strict=True)]
    assert 5 < sum(truth) < 35  # both kinds of targets are there
    assert info["identical"].tolist() == truth
    assert info["targets_with_identical_context"] == sum(truth)


def test_a_cropped_targets_homolog_is_cut_around_the_same_region() -> None:
    """A target longer than half the window is scored on a seeded crop; its homolog (here its
    own full sequence), cut to the room left, keeps the part at the same relative place."""
    from protein_performer.evaluation.context_perplexity import Target

    rng = np.random.default_rng(9)
    full = random_seq(rng, 100)
    targets = [Target(f"t{i}", A.encode(full), [A.encode(full)]) for i in range(12)]
    # 60 tokens: a crop of 28 residues (60 // 2 - 2); the homolog gets 29 (60 - 28 - 2 - 1)
    single, _, ctx, _, _ = scoring_windows(
        targets, A, max_length=60, style="crop", mask_prob=0.15, seed=4
    )
    crops, cuts = [], []
    tokens = A.encode(full)
    for x, cx in zip(single, ctx, strict=True):
        # the crop's start: where its residues (those not masked) agree with the full sequence
        agree = [(x[1:-1] == tokens[s : s + 28]).sum() for s in range(100 - 28 + 1)]
        crops.append(int(np.argmax(agree)) / (100 - 28))
        (homolog,) = segments(cx)[:-1]
        assert len(homolog) == 29 and homolog in full
        cuts.append(full.index(homolog) / (100 - 29))
    assert max(crops) - min(crops) > 0.5  # crops near both ends
    np.testing.assert_allclose(cuts, crops, atol=0.02)


@pytest.mark.parametrize("fill", [False, True])
def test_the_context_window_scores_the_single_windows_masked_target(fill) -> None:
    """The same ``<mask>``/replaced tokens and the same labels in the window with context
    (and the fill-only one) as in the protein alone: the pairing of the two runs."""
    rng = np.random.default_rng(10)
    seqs = [random_seq(rng, int(rng.integers(20, 40))) for _ in range(16)]
    ids = [f"p{i}" for i in range(16)]
    source = FlatSource.from_strings(seqs, ids=ids)
    table = {rid: f"c{i // 2}" for i, rid in enumerate(ids)}
    targets = cluster_targets(source, table)
    kw = {"max_length": 200, "style": "crop", "mask_prob": 0.3, "seed": 6}
    if fill:
        kw["fill"] = cluster_fill(source, table)
    single, single_y, ctx, ctx_y, info = scoring_windows(targets, A, **kw)
    windows = [(ctx, ctx_y)]
    if fill:
        windows.append((info["fill_windows"], info["fill_labels"]))
    for i, (x, y) in enumerate(zip(single, single_y, strict=True)):
        assert (y != -100).any()
        for cx, cy in ((xs[i], ys[i]) for xs, ys in windows):
            assert len(segments(cx)) > 1  # context there
            np.testing.assert_array_equal(_target_part(cx), x[1:-1])
            np.testing.assert_array_equal(cy[len(cx) - len(x) + 1 : -1], y[1:-1])
            assert (cy[: len(cx) - len(x) + 1] == -100).all() and cy[-1] == -100


def test_evaluate_context_scores_only_the_proteins_of_the_context_part(tmp_path):
    """A user asking for the context comparison gets just that: the plain pass scores the
    proteins the context part scores (it scored every record of the split first, minutes on a
    real one), the same numbers as evaluating a file of those proteins, and says of how many."""
    fasta = write_fasta(tmp_path / "t.fasta", n=30)
    result = train(tiny_config(fasta, max_steps=2), tmp_path / "run")
    members = clusters_of_three(fasta, tmp_path / "members.tsv", first=12)  # 12 of the 30
    ev = dict(checkpoint=result.last_checkpoint, device="cpu")
    out = evaluate(EvalConfig(**ev, fasta=str(fasta), context="cluster", clusters=str(members)))
    assert out.context["proteins"] == out.sequences == 12 and out.all_records == 30
    assert "scored: only the 12 proteins the context part scores, of 30 records" in out.format()
    assert out.to_dict()["all_records"] == 30
    first = tmp_path / "first.fasta"  # the 12 clustered records, alone
    first.write_text("".join([">" + r for r in fasta.read_text().split(">")[1:]][:12]))
    alone = evaluate(EvalConfig(**ev, fasta=str(first)))
    assert alone.all_records is None and "scored:" not in alone.format()
    assert (out.predicted_tokens, out.perplexity) == (alone.predicted_tokens, alone.perplexity)
    assert out.unigram == alone.unigram
    sample = evaluate(
        EvalConfig(**ev, fasta=str(fasta), context="cluster", clusters=str(members),
                   context_max_proteins=5)
    )  # fmt: skip
    assert sample.sequences == sample.context["proteins"] == 5 and sample.all_records == 30


def _seq(n: int, seed: int) -> np.ndarray:
    return A.encode("".join(np.random.default_rng(seed).choice(list(AA), n)))


def test_context_proteins_cut_counts_the_windows_whose_last_member_was_cut():
    """Each target has a long member (never fits whole) and a short one (always fits): in any
    order the last member that goes in is the long one, cut, so every window counts once,
    whichever order the seeded permutation gives; with two short members none is cut."""
    from protein_performer.evaluation.context_perplexity import Target

    long_first = [
        Target(f"t{i}", _seq(20, i), [_seq(200, 100 + i), _seq(20, 200 + i)]) for i in range(12)
    ]
    short_first = [Target(t.id, t.residues, t.context[::-1]) for t in long_first]
    short_only = [
        Target(f"s{i}", _seq(20, i), [_seq(20, 300 + i), _seq(24, 400 + i)]) for i in range(12)
    ]
    for targets, cut in ((long_first, 12), (short_first, 12), (short_only, 0)):
        *_, ctx, _, info = scoring_windows(
            targets, A, max_length=96, style="crop", mask_prob=0.15, seed=0
        )
        assert info["context_proteins_cut"] == cut
        # the windows agree: a cut member fills the window to the last token
        assert sum(len(x) == 96 for x in ctx) == cut


def test_sampled_targets_keep_the_source_order():
    from protein_performer.evaluation.context_perplexity import Target, sample_targets

    targets = [Target(f"t{i:02d}", _seq(5, i), []) for i in range(40)]
    picked = sample_targets(targets, 10, seed=3)
    ids = [t.id for t in picked]
    assert len(ids) == 10 and len(set(ids)) == 10 and set(ids) <= {t.id for t in targets}
    assert ids == sorted(ids)  # in the order of the source, not the draw's
    assert [t.id for t in sample_targets(targets, 10, seed=3)] == ids  # seeded
    assert [t.id for t in sample_targets(targets, 10, seed=4)] != ids
    assert sample_targets(targets, 40, seed=3) == targets


def test_targets_longer_than_half_the_window_are_cut_to_half():
    """Windows of 96 tokens: a target gets at most 96 // 2 - 2 = 46 residues; of 20 + 46 + 60
    residues, 20 + 46 + 46 are scored."""
    from protein_performer.evaluation.context_perplexity import Target

    targets = [Target(f"t{n}", _seq(n, n), [_seq(30, 500 + n)]) for n in (20, 46, 60)]
    single, _, _, _, info = scoring_windows(
        targets, A, max_length=96, style="crop", mask_prob=0.15, seed=0
    )
    assert info["targets_cut"] == 1
    assert info["target_residues_in_windows"] == pytest.approx((20 + 46 + 46) / (20 + 46 + 60))
    assert [len(x) for x in single] == [22, 48, 48]
    assert info["mean_context_proteins"] == 1 and info["context_proteins_cut"] == 0
    assert info["mean_context_tokens"] == 31


def test_the_old_import_path_is_the_renamed_module():
    """evaluation/context.py was renamed for what it holds; its old name stays for one release."""
    from protein_performer.evaluation import context
    from protein_performer.evaluation import context_perplexity as module
    from protein_performer.evaluation.context import context_perplexity as old_function

    assert context is module and old_function is context_perplexity


def test_context_file_near_misses_say_what_was_meant(tmp_path, monkeypatch):
    from protein_performer.evaluation.scope import check_context_file

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="did you mean context=cluster"):
        check_context_file("clusters")
    (tmp_path / "c14").mkdir()
    (tmp_path / "c14" / "members.tsv").write_text("cluster_id\tmember_id\na\tb\n")
    with pytest.raises(ConfigError, match="is a clusters folder: context=cluster clusters=c14"):
        check_context_file("c14")
    with pytest.raises(DataError):
        check_context_file("missing.fasta")
    (tmp_path / "h.fasta").write_text(">h\nMKV\n")
    check_context_file("h.fasta")  # a FASTA file: accepted


def test_context_goes_in_the_order_given_without_shuffle() -> None:
    """``shuffle=False`` keeps each target's context in its order (search hits best first, as
    ``score context=`` fills a window); the default draws a seeded order of its own."""
    from protein_performer.evaluation.context_perplexity import Target

    rng = np.random.default_rng(3)
    targets = [
        Target(
            f"t{i}",
            A.encode(random_seq(rng, 30)),
            [A.encode(random_seq(rng, 20)) for _ in range(6)],
        )
        for i in range(4)
    ]
    kw = {"max_length": 400, "style": "crop", "mask_prob": 0.15, "seed": 2}
    given = scoring_windows(targets, A, shuffle=False, **kw)[2]
    drawn = scoring_windows(targets, A, **kw)[2]
    for t, x, y in zip(targets, given, drawn, strict=True):
        expected = [A.decode(c) for c in t.context]
        assert segments(x)[:-1] == expected
        assert sorted(segments(y)[:-1]) == sorted(expected)
    shuffled = [
        segments(y)[:-1] != [A.decode(c) for c in t.context]
        for t, y in zip(targets, drawn, strict=True)
    ]
    assert any(shuffled)


def test_a_context_file_leaves_out_copies_of_each_protein_and_reads_alignments_strictly(
    tmp_path,
):
    from protein_performer.evaluation.scope import context_file, drop_copies

    alphabet = default_alphabet()
    enc = alphabet.encode
    targets = [
        Target("a", enc("MKVLAW"), [enc("MKVLAW"), enc("MKILAW"), enc("MKVLAWH")]),
        Target("b", enc("MKILAW"), [enc("MKVLAW"), enc("MKILAW"), enc("MKVLAWH")]),
        Target("c", enc("PPPPPP"), [enc("MKVLAW"), enc("MKILAW")]),
    ]
    assert drop_copies(targets) == 2
    assert [[alphabet.decode(c) for c in t.context] for t in targets] == [
        ["MKILAW", "MKVLAWH"],
        ["MKVLAW", "MKVLAWH"],
        ["MKVLAW", "MKILAW"],
    ]
    # an alignment: its query, copies of it and duplicates are not context proteins
    path = tmp_path / "x.a2m"
    rows = ["MKVL.AW", "MKILgAW", "MKVL.AW", "MKIL.AW", "MRVL.AW", "MKIL.AW"]
    path.write_text(">q/1-6\n" + "".join(f">h{k}\n{r}\n" for k, r in enumerate(rows))[4:])
    proteins, note = context_file(EvalConfig(checkpoint="x", context=str(path)), alphabet)
    assert [alphabet.decode(p) for p in proteins] == ["MKILGAW", "MKILAW", "MRVLAW"]
    assert note == (
        f"{path}: a2m alignment, 6 records, 3 homologs (its query, 1 copy of it, "
        "1 duplicate left out)"
    )
    # rows with no residue in the query's columns: counted, one and several
    for gaps, said in ((1, "1 row without residues"), (2, "2 rows without residues")):
        path.write_text(">q\nMKVLAW\n>h1\nMKILAW\n" + "".join(
            f">g{k}\n------\n" for k in range(gaps)))  # fmt: skip
        _, note = context_file(EvalConfig(checkpoint="x", context=str(path)), alphabet)
        assert f"(its query, {said} in its columns left out)" in note
    path.write_text(">q\nMKV-LAW\n>h1\nMKV-LJW\n>h2\nMRV-LAW\n")  # J: not a residue
    with pytest.raises(DataError, match=r"x.a2m: h1: invalid residue 'J'"):
        context_file(EvalConfig(checkpoint="x", context=str(path)), alphabet)
    path.write_text(">q\nMKVLAW\n>h1\nMKVLaAW\n>h2\nMKVLA\n")  # h2: a match column short
    with pytest.raises(DataError, match=r"record 3 \(h2\)"):
        context_file(EvalConfig(checkpoint="x", context=str(path)), alphabet)
    path.write_text(">q\nMKV-LAW\n>h1\nMKV-LAW\n")  # the query and a copy of it only
    with pytest.raises(DataError, match="holds no homolog besides its query q") as e:
        context_file(EvalConfig(checkpoint="x", context=str(path)), alphabet)
    assert str(e.value).startswith(f"{path}: the alignment holds no homolog")  # names the file


def test_an_alignments_homologs_over_the_identity_limit_are_not_context(tmp_path, caplog):
    from protein_performer.evaluation.scope import context_file

    alphabet = default_alphabet()
    query = "MKVLAWTRGE"  # 10 columns: one change is 90 % identity, two 80 %
    rows = {"near": "MKVLAWTRGD", "far": "MKILAWTRND", "gappy": "MKVLAW----", "mid": "AKVLAWTRGD"}
    path = tmp_path / "x.a3m"
    path.write_text(f">q\n{query}\n" + "".join(f">{k}\n{v}\n" for k, v in rows.items()))

    def read(limit):
        cfg = EvalConfig(checkpoint="x", context=str(path), context_max_identity=limit)
        proteins, note = context_file(cfg, alphabet)
        return [alphabet.decode(p) for p in proteins], note

    # near 9/10 is kept at 0.9; gappy 6/6 = 1.0 over the columns it has
    got, note = read(0.9)
    assert got == ["MKVLAWTRGD", "MKILAWTRND", "AKVLAWTRGD"]
    assert "3 homologs (its query, 1 over 90% identical to it left out)" in note
    got, note = read(0.85)  # mid 8/10, far 7/10 stay
    assert got == ["MKILAWTRND", "AKVLAWTRGD"] and "2 over 85% identical" in note
    got, note = read(0.75)
    assert got == ["MKILAWTRND"] and "1 homologs (its query, 3 over 75% identical" in note
    got, note = read(None)
    assert len(got) == 4 and "identical" not in note
    with caplog.at_level(logging.WARNING):
        got, note = read(0.5)  # every one over: all kept, as score keeps them
    assert len(got) == 4 and "identical" not in note
    assert "every homolog is over 50% identical to its query: all kept" in caplog.text
    with pytest.raises(ConfigError, match="context_max_identity must be a number from 0 to 1"):
        validate_eval_config(
            EvalConfig(checkpoint="x", fasta="a.fa", context=str(path), context_max_identity=2)
        )
    with pytest.raises(ConfigError, match="context_max_identity set without context="):
        validate_eval_config(EvalConfig(checkpoint="x", fasta="a.fa", context_max_identity=0.5))


def test_evaluate_says_how_many_copies_it_left_out_of_a_context_file(tmp_path):
    fasta = write_fasta(tmp_path / "t.fasta", n=6)
    result = train(tiny_config(fasta, max_steps=2), tmp_path / "run")
    seqs = [line for line in fasta.read_text().splitlines() if not line.startswith(">")]
    assert len(set(seqs)) == 6
    (tmp_path / "h.fasta").write_text(f">a\n{seqs[0]}\n>b\n{seqs[1]}\n")
    out = evaluate(
        EvalConfig(
            checkpoint=result.last_checkpoint, fasta=str(fasta), context=str(tmp_path / "h.fasta")
        )
    )
    text = out.format()
    assert f"{tmp_path / 'h.fasta'}: 2 proteins; 2 copies of an evaluated protein left out" in text
    assert "with an identical sequence in context" not in text  # none is left to copy from
    # a file of the evaluated proteins only: nothing to score them with
    (tmp_path / "own.fasta").write_text(f">a\n{seqs[0]}\n")
    with pytest.raises(DataError, match="holds only copies of the evaluated proteins"):
        evaluate(
            EvalConfig(
                checkpoint=result.last_checkpoint, fasta=str(tmp_path / "own.fasta"),
                context=str(tmp_path / "own.fasta"),
            )
        )  # fmt: skip


def test_record_order_sorts_two_records_sharing_an_id_by_sequence():
    """The smallest shared id (two records) is sorted too: either file order, one walk."""
    for records in ([("x", "KKK"), ("x", "AAA")], [("x", "AAA"), ("x", "KKK")]):
        source = FlatSource.from_strings([r[1] for r in records], ids=[r[0] for r in records])
        assert [A.decode(source[i]) for i in record_order(source, "id")] == ["AAA", "KKK"]
    source = FlatSource.from_strings(["MM", "KK", "AA"], ids=["y", "x", "x"])
    assert record_order(source, "id") == [2, 1, 0]


def test_only_masked_positions_are_scored_in_both_windows() -> None:
    """mask_tokens selects positions and leaves some unmasked (the 10 % random, 10 % kept):
    those are not scored; every <mask> is, in the single and the context window alike."""
    enc = A.encode
    rng = np.random.default_rng(0)
    targets = [
        Target(
            f"t{k}",
            enc("".join(rng.choice(list(AA), 60))),
            [enc("".join(rng.choice(list(AA), 30)))],
        )
        for k in range(6)
    ]
    single, single_y, ctx, ctx_y, _ = scoring_windows(
        targets, A, max_length=200, style="crop", mask_prob=0.5, seed=0
    )
    for x, y, cx, cy in zip(single, single_y, ctx, ctx_y, strict=True):
        np.testing.assert_array_equal(y != -100, x == A.mask_idx)
        np.testing.assert_array_equal(cy != -100, cx == A.mask_idx)
        assert (y != -100).sum() == (cy != -100).sum() > 0


def test_a_long_target_is_cropped_anywhere_its_last_residue_included() -> None:
    """A target one residue longer than half the window has two half-windows: the seeded
    crop draws both (its last residue is scored in some windows), never anything else."""
    enc = A.encode
    max_length, ends = 40, 2
    half = max_length // 2 - ends  # 18
    seq = "ACDEFGHIKLMNPQRSTVW"  # 19 residues
    targets = [Target(f"t{k}", enc(seq), [enc("MKVLAWYHHEACDEFG")]) for k in range(40)]
    single, *_ = scoring_windows(
        targets, A, max_length=max_length, style="crop", mask_prob=0.15, seed=0
    )
    starts = []
    for x in single:
        assert len(x) == half + ends
        letters = [A.tokens[t] for t in x[1:-1]]  # a few masked or replaced: the most alike
        starts.append(
            max((0, 1), key=lambda s: sum(a == seq[s + i] for i, a in enumerate(letters)))
        )
    assert set(starts) == {0, 1}


def test_the_unigram_perplexity_is_over_the_scored_positions_twenty_letters_by_default() -> None:
    """Without frequencies each of the 20 amino acids is 1/20: perplexity 20 exactly; with
    ``unigram_log_probs`` it is exp(mean −log f) over the scored positions' true residues."""
    rng = np.random.default_rng(2)
    targets = [
        Target(f"t{k}", A.encode(random_seq(rng, 40)), [A.encode(random_seq(rng, 30))])
        for k in range(5)
    ]
    out = context_perplexity(CopyModel(), A, targets, max_length=128, seed=1)
    assert out["unigram_perplexity"] == pytest.approx(20.0, rel=1e-6)
    logf = torch.log_softmax(torch.as_tensor(rng.normal(size=len(A)), dtype=torch.float32), -1)
    out = context_perplexity(CopyModel(), A, targets, max_length=128, seed=1,
                             unigram_log_probs=logf)  # fmt: skip
    _, single_y, *_ = scoring_windows(targets, A, max_length=128, style="crop",
                                      mask_prob=0.15, seed=1)  # fmt: skip
    truth = np.concatenate([y[y != -100] for y in single_y])
    expected = math.exp(float(-logf.numpy()[truth].astype(np.float64).mean()))
    assert out["unigram_perplexity"] == pytest.approx(expected, rel=1e-5)
    assert out["positions"] == len(truth)


def test_fixed_targets_follow_the_order_given() -> None:
    source = FlatSource.from_strings(["KKKK", "AAAA", "MMMM"], ids=["c", "a", "b"])
    homologs = [A.encode("ACDE")]
    order = record_order(source, "id")
    targets = fixed_targets(source, homologs, order=order)
    assert [(t.id, A.decode(t.residues), t.record) for t in targets] == [
        ("a", "AAAA", 1),
        ("b", "MMMM", 2),
        ("c", "KKKK", 0),
    ]
    assert all(len(t.context) == 1 for t in targets)
    assert [t.id for t in fixed_targets(source, homologs)] == ["c", "a", "b"]  # None: the file's


def test_an_alignment_of_none_of_the_evaluated_proteins_is_said(tmp_path, caplog):
    from protein_performer.evaluation.scope import context_file

    alphabet = default_alphabet()

    def source(*seqs: str) -> FlatSource:
        ids = [alphabet.encode(s) for s in seqs]
        offsets = np.concatenate([[0], np.cumsum([len(i) for i in ids])])
        return FlatSource(np.concatenate(ids).astype(np.uint8), offsets, alphabet=alphabet)

    path = tmp_path / "x.a2m"
    # the query's lower-case residue is no column: the evaluated protein matches where it has some
    path.write_text(">q\nMKVL.AWk\n>h1\nMKILgAW.\n>h2\nMRVL.AW.\n")
    cfg = EvalConfig(checkpoint="x", context=str(path))
    for evaluated, said in (
        (source("PPPPPP", "MKVLAWK"), False),  # the query, whole
        (source("MKVLAWR"), False),  # its columns' residues, another residue after them
        (source("MKVLAW"), False),  # its columns alone
        (source("GSHMAAMKVLAWKLEH"), False),  # a protein it is a domain of
        (source("MKVLMKVLAWK"), False),  # found after a false start
        (source("MKVLAV", "PPPPPPPP"), True),  # one residue differs
        (source("MKVLA"), True),  # too short to hold its columns
    ):
        caplog.clear()
        with caplog.at_level("WARNING"):
            proteins, _ = context_file(cfg, alphabet, evaluated)
        assert len(proteins) == 2
        assert ("x.a2m: the alignment's query q is " in caplog.text) is said, evaluated
    assert "q is not the evaluated protein: its homologs are read before it" in caplog.text
    with caplog.at_level("WARNING"):
        context_file(cfg, alphabet, source("MKVLAV", "PPPPPPPP"))
        assert "q is none of the 2 evaluated proteins: its homologs are read before each" in (
            caplog.text
        )
        # the query's first residue an insertion (no column): the columns from its second on
        path.write_text(">q\nkMKVL.AW\n>h1\n.MKILgAW\n>h2\n.MRVL.AW\n")
        caplog.clear()
        context_file(cfg, alphabet, source("MKVLAW"))
        assert "x.a2m: the alignment's query" not in caplog.text
        # an X in the query's columns matches anything there
        path.write_text(">q\nMKXL.AW\n>h1\nMKILgAW\n>h2\nMRVL.AW\n")
        caplog.clear()
        context_file(cfg, alphabet, source("MKVLAW"))
        assert "x.a2m: the alignment's query" not in caplog.text
