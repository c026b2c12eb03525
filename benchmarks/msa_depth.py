r"""<mask> perplexity of held-out proteins over the depth of an alignment-like context.

For proteins of the checkpoint's held-out clusters (its test split) with at least
``--min-hits`` search hits in its training split (a ``data search`` of the files against
themselves: hits at the identities the search kept), each protein is masked once and scored
alone and after its best ``h`` hits (each the hit's aligned region, best first as
``score context=`` fills a window; the model sees those that fit ``T`` tokens) for every ``h``
of ``--homologs`` and ``T`` of ``--windows``. Beside each ``h``: the perplexity of the profile
of the same ``h`` hits at the same positions (the local-alignment PSSM ``score context=``
builds from hits, aligned to the query with its masked residues unknown, the query itself not
counted) and the unigram (the checkpoint's training residue
frequencies; uniform over 20 when it stores none). A model that uses depth keeps falling along
``h`` and ``T``, as the profile does along ``h``. ``--sampling weighted`` (or ``diverse``) fills
each window as ``score context_sampling=`` does: the hits that fit drawn from the best ``h``
with the profile's sequence weights, placed best first; ``--samples N`` averages N windows'
log-probabilities per protein, as ``context_samples=`` does.

    python benchmarks/msa_depth.py --checkpoints homologs --fasta F1 F2 ... \
        --clusters clusters14 --hits hits14 --homologs 1 4 16 32 --windows 1024 4096 8192 \
        --json docs/results/msa_depth.json
    python benchmarks/msa_depth.py ... --homologs 32 --sampling weighted --samples 4
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from protein_performer.data.msa import SAMPLINGS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_output_args,
    check_outputs,
    environment,
    format_table,
    int_at_least,
    machine_line,
    one_line_errors,
    write_json,
)


def heldout_with_hits(args: argparse.Namespace, alphabet: Any) -> tuple[list, list[list]]:
    """``(targets, hits)``: up to ``--max-proteins`` test-split proteins of at most
    ``--max-residues`` with at least ``--min-hits`` hits in the training split (drawn with
    ``--seed``), and each one's hit regions (residue arrays, best first)."""
    from protein_performer.data.datamodule import ProteinDataModule
    from protein_performer.data.homolog_hits import read_hit_partners
    from protein_performer.evaluation.context_perplexity import Target

    dm = ProteinDataModule(
        files=args.fasta, clusters=str(args.clusters), split_by="cluster", alphabet=alphabet
    )
    dm.setup("fit")
    dm.setup("test")
    test, train = dm.datasets["test"].source, dm.datasets["train"].source
    n_test = len(test)
    hits = read_hit_partners(args.hits, [*test.ids, *train.ids])
    eligible = [
        i
        for i in range(n_test)
        if len(test[i]) <= args.max_residues
        and sum(int(t) >= n_test for t in hits.target[hits.offsets[i] : hits.offsets[i + 1]])
        >= args.min_hits
    ]
    rng = np.random.default_rng(args.seed)
    chosen = sorted(rng.choice(eligible, min(args.max_proteins, len(eligible)), replace=False))
    targets, regions = [], []
    for i in chosen:
        lo, hi = int(hits.offsets[i]), int(hits.offsets[i + 1])
        own = [
            np.asarray(train[int(hits.target[k]) - n_test][hits.start[k] : hits.end[k]])
            for k in range(lo, hi)
            if int(hits.target[k]) >= n_test  # into the training split only
        ]
        targets.append(Target(test.ids[i], np.asarray(test[i]), []))
        regions.append(own)
    print(
        f"{len(eligible):,} of {n_test:,} held-out proteins have >= {args.min_hits} hits in the "
        f"training split and <= {args.max_residues} residues; {len(targets)} drawn",
        file=sys.stderr,
    )
    return targets, regions


def profile_log_q(
    targets: list, regions: list[list], h: int, labels: list[np.ndarray], alphabet: Any
) -> tuple[np.ndarray, list]:
    """``(positions, 20)`` log-frequencies of the PSSM of each target's best ``h`` hits (query
    left out) at its ``<mask>`` positions (``labels``: the single windows' labels), columns in
    the alphabet's standard order, and each target's PSSM (its ``weights`` and ``matrix`` are
    what ``score context=`` draws homologs with). The hits are aligned to the query with its
    masked residues unknown (``X``): aligned to the whole query, a profile would place a hit's
    residue where it matches the hidden one (on held-out proteins at 16 hits, perplexity 5.0
    instead of 6.5)."""
    from protein_performer.analysis.dms.profile import COLUMNS, build_pssm

    order = [COLUMNS.index(alphabet.tokens[i]) for i in alphabet.standard_ids]
    out, pssms = [], []
    for t, own, y in zip(targets, regions, labels, strict=True):
        at = np.flatnonzero(y != -100) - 1  # <cls> at 0
        query = np.array(list(alphabet.decode(t.residues)))
        query[at] = "X"  # aligned to what the model sees: the masked residues unknown
        pssm = build_pssm(
            "".join(query),
            [alphabet.decode(r) for r in own[:h]],
            min_z=None,
            include_query=False,
            allow_query_only=True,
        )
        out.append(np.log(pssm.frequencies[at][:, order]))
        pssms.append(pssm)
    return np.concatenate(out), pssms


def drawn_hits(
    own: list[np.ndarray], pssm: Any, sampling: str, seed: int, sample: int, budget: int
) -> list[np.ndarray]:
    """The hits of ``own`` (best first) as ``score context=`` fills a window of ``budget``
    context tokens with ``sampling``: those the profile ``pssm`` of ``own`` used (its weights
    and matrix hold only them), drawn with its weights (or greedily diverse, or in order),
    those that fit placed best first."""
    from protein_performer.data.context_windows import in_rank_order
    from protein_performer.data.msa import homolog_order

    used = [r for r, h in zip(own, pssm.homologs, strict=True) if h["used"]]  # as the scorer
    order = homolog_order(
        sampling, weights=pssm.weights, matrix=pssm.matrix, seed=seed, sample=sample
    )
    return [used[i] for i in in_rank_order(order, [len(r) for r in used], budget)]


@torch.inference_mode()
def masked_log_probs(
    model: Any, windows: list[np.ndarray], labels: list[np.ndarray], pad_idx: int
) -> tuple[np.ndarray, np.ndarray]:
    """``((positions, V) log-probabilities, (positions,) true ids)`` at the labelled
    positions of ``windows``, in order (one window per forward: no padding)."""
    logp, true = [], []
    for x, y in zip(windows, labels, strict=True):
        ids = torch.as_tensor(x)[None]
        out = model(ids, ids == pad_idx)["logits"][0].float().log_softmax(-1)
        sel = torch.as_tensor(y) != -100
        logp.append(out[sel].numpy())
        true.append(np.asarray(y)[sel.numpy()])
    return np.concatenate(logp), np.concatenate(true)


def perplexities(
    logp: np.ndarray, true: np.ndarray, log_q: np.ndarray, standard: np.ndarray, weight: float
) -> tuple[float, float]:
    """The model's perplexity (over its whole vocabulary) and the retrieval mixture's:
    ``(1 - weight) log p + weight log q`` over the 20 residues, renormalised (Tranception)."""
    model = math.exp(float(-logp[np.arange(len(true)), true].mean()))
    lm = torch.as_tensor(logp[:, standard]).log_softmax(-1)
    mix = ((1 - weight) * lm + weight * torch.as_tensor(log_q)).log_softmax(-1)
    column = np.searchsorted(standard, true)  # standard ids are sorted
    return model, math.exp(float(-mix[np.arange(len(true)), column].mean()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoints", nargs="+", default=["homologs"], help="paths or names")
    p.add_argument("--fasta", nargs="+", required=True, help="the files the checkpoints used")
    p.add_argument("--clusters", type=Path, required=True, help="their clusters table")
    p.add_argument("--hits", type=Path, required=True, help="a data search of them")
    p.add_argument("--homologs", type=int_at_least(1), nargs="+", default=[1, 4, 16, 32])
    p.add_argument("--windows", type=int_at_least(64), nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--min-hits", type=int_at_least(1), default=16)
    p.add_argument("--max-proteins", type=int_at_least(1), default=60)
    p.add_argument("--max-residues", type=int_at_least(16), default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--retrieval", type=float, default=0.6, help="the profile's weight")
    p.add_argument(
        "--sampling",
        choices=SAMPLINGS,
        default="first",
        help="how the h hits fill a window (as score context_sampling=)",
    )
    p.add_argument(
        "--samples",
        type=int_at_least(1),
        default=1,
        help="windows per protein, their log-probabilities averaged (context_samples=)",
    )
    p.add_argument("--threads", type=int_at_least(1), default=torch.get_num_threads())
    p.add_argument("--json", type=Path, default=RESULTS / "msa_depth.json")
    add_output_args(p)
    args = p.parse_args(argv)
    check_outputs(p, [args.json], args.overwrite)
    if args.max_residues > min(args.windows) // 2 - 2:
        p.error(f"--max-residues must be <= {min(args.windows) // 2 - 2} (half the window)")
    torch.set_num_threads(args.threads)

    import protein_performer
    from protein_performer.data.context_windows import fit_members
    from protein_performer.evaluation.context_perplexity import (
        Target,
        scoring_windows,
    )
    from protein_performer.model.checkpoints import load_model
    from protein_performer.model.metrics import unigram_log_probs

    _, alphabet = protein_performer.load(args.checkpoints[0])
    targets, regions = heldout_with_hits(args, alphabet)
    # the <mask> positions every row scores (the same in every window: no target is cut)
    with_one = [Target(t.id, t.residues, own[:1]) for t, own in zip(targets, regions, strict=True)]
    _, labels, _, _, _ = scoring_windows(
        with_one,
        alphabet,
        max_length=max(args.windows),
        style="crop",
        mask_prob=0.15,
        seed=0,
        shuffle=False,
    )
    standard = np.asarray(sorted(alphabet.standard_ids))
    masked = np.concatenate([y[y != -100] for y in labels])
    if not np.isin(masked, standard).all():
        raise SystemExit("a masked residue is not one of the 20: the profile cannot score it")
    profiles = {h: profile_log_q(targets, regions, h, labels, alphabet) for h in args.homologs}
    log_q = {h: q for h, (q, _) in profiles.items()}
    samples = 1 if args.sampling == "first" else args.samples  # "first": the same every time
    rows: list[dict[str, Any]] = []
    for name in args.checkpoints:
        model, meta = load_model(name)  # a shipped name or a path
        counts = meta.get("data", {}).get("unigram_counts")
        uni = unigram_log_probs(counts, alphabet) if counts is not None else None
        alone = None
        for T in args.windows:
            for h in args.homologs:
                t0 = time.perf_counter()
                runs, held = [], []
                for sample in range(samples):
                    cases = [
                        Target(
                            t.id,
                            t.residues,
                            fit_members(
                                drawn_hits(own[:h], pssm, args.sampling, args.seed + j, sample,
                                           T - len(t.residues) - 2),
                                T - len(t.residues) - 2,
                            ),
                        )  # protein j's draws seeded by [seed + j, sample]
                        for j, (t, own, pssm) in enumerate(
                            zip(targets, regions, profiles[h][1], strict=True)
                        )
                    ]  # fmt: skip
                    single, single_y, ctx, ctx_y, info = scoring_windows(
                        cases,
                        alphabet,
                        max_length=T,
                        style="crop",
                        mask_prob=0.15,
                        seed=0,
                        shuffle=False,  # best first, as score context= fills a window
                    )
                    if alone is None:
                        alone = masked_log_probs(model, single, single_y, alphabet.pad_idx)
                    logp, true = masked_log_probs(model, ctx, ctx_y, alphabet.pad_idx)
                    runs.append(logp)
                    held.append(info["mean_context_proteins"])
                # the scorer's mean of log-probabilities, renormalised to be a distribution
                logp = torch.as_tensor(np.mean(runs, 0)).log_softmax(-1).numpy()
                ppl, mix = perplexities(logp, true, log_q[h], standard, args.retrieval)
                q_true = log_q[h][np.arange(len(true)), np.searchsorted(standard, true)]
                rows.append(
                    {
                        "checkpoint": str(name),
                        "window": T,
                        "homologs": h,
                        "in_window": round(float(np.mean(held)), 2),
                        "sampling": args.sampling,
                        "samples": samples,
                        "with": ppl,
                        "alone": perplexities(*alone, log_q[h], standard, 0.0)[0],
                        "profile": math.exp(float(-q_true.mean())),
                        "retrieval": mix,
                        "unigram": None
                        if uni is None
                        else math.exp(float(-uni[torch.as_tensor(true)].mean())),
                        "positions": len(true),
                        "seconds": round(time.perf_counter() - t0, 1),
                    }
                )
                print(f"{name} T={T} h={h}: {ppl:.3f}", file=sys.stderr)
    table = format_table(
        ["checkpoint", "window", "homologs", "in window", "with", "alone", "profile",
         "retrieval", "s"],
        [
            [r["checkpoint"], r["window"], r["homologs"], r["in_window"], f"{r['with']:.3f}",
             f"{r['alone']:.3f}", f"{r['profile']:.3f}", f"{r['retrieval']:.3f}", r["seconds"]]
            for r in rows
        ],
    )  # fmt: skip
    print(
        f"{len(targets)} held-out proteins, {rows[0]['positions']:,} <mask> positions; hits "
        f"{args.sampling}" + (f", {samples} windows averaged" if samples > 1 else "") + "; unigram "
        f"{rows[0]['unigram'] or float('nan'):.3f}; retrieval: (1 - {args.retrieval:g}) model "
        f"+ {args.retrieval:g} profile\n{machine_line('cpu', args.threads)}\n{table}"
    )
    config = {
        k: [str(x) for x in v] if isinstance(v, list) else str(v) for k, v in vars(args).items()
    }
    write_json(
        args.json,
        {
            "benchmark": "msa_depth",
            "config": config,
            "environment": environment(),
            "proteins": [t.id for t in targets],
            "hits_per_protein": [len(r) for r in regions],
            "rows": rows,
        },
    )
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(one_line_errors(main)())
