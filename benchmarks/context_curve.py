"""Homolog-context curves: how a run's use of homologs grows over training.

Scores every checkpoint of each run (``RUN/snap/*.ckpt``, copies of ``last.ckpt`` kept during
training, then ``RUN/checkpoints/last.ckpt``) exactly as
``evaluate split=test context=cluster context_min_members=3 context_max_proteins=300`` does:
the same held-out proteins (the checkpoint's own split), the same masks, each protein alone and
after its cluster's other members. The data and the proteins are read once for all checkpoints.

    python benchmarks/context_curve.py RUN [RUN ...] --fasta a.fasta b.fasta.gz ... \
        --json docs/results/homolog_pairs_curves.json --png docs/figures/homolog_pairs.png

Prints a table (step, perplexity with and without context, the ratio, and the ratio apart for
proteins with an identical sequence among their homologs) and writes a JSON and a PNG.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_output_args,
    check_outputs,
    environment,
    format_table,
    write_json,
)


def checkpoints(run: Path) -> list[Path]:
    found = [*sorted((run / "snap").glob("*.ckpt")), run / "checkpoints" / "last.ckpt"]
    return [p for p in found if p.is_file()]


def add_heldout_args(p: argparse.ArgumentParser) -> None:
    """The options that pick the held-out proteins (:func:`heldout_targets`)."""
    from protein_performer.data.context_windows import CONTEXT_ORDERS

    p.add_argument("--fasta", nargs="+", required=True, help="the FASTA files the runs used")
    p.add_argument("--min-members", type=int, default=3)
    p.add_argument("--max-proteins", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--context-order",
        choices=CONTEXT_ORDERS,
        default="id",
        help="evaluate's context_order (given: file order, as before 2026-12-04)",
    )


def heldout_targets(
    checkpoint: Path,
    meta: dict[str, Any],
    alphabet: Any,
    args: argparse.Namespace,
    cache: dict[tuple, list],
) -> list:
    """The proteins ``evaluate split=test context=cluster context_min_members=MIN
    context_max_proteins=MAX seed=SEED context_order=ORDER`` scores for a checkpoint (its
    metadata ``meta``; the values from ``args``, see :func:`add_heldout_args`): its own test
    split and clusters, read once per distinct split (``cache``), the checkpoint's path named
    in the error when it has no clusters."""
    fasta, min_members, max_proteins = args.fasta, args.min_members, args.max_proteins
    seed, order = args.seed, args.context_order
    from protein_performer.data.cluster import read_members
    from protein_performer.data.datamodule import ProteinDataModule
    from protein_performer.evaluation.context_perplexity import (
        cluster_targets,
        record_order,
        sample_targets,
    )

    data = meta["data"]
    if not data.get("clusters"):
        raise SystemExit(f"{checkpoint}: trained without data.clusters; no homologs to score with")
    key = (
        data["clusters"],
        data["split_by"],
        tuple(data["split_fractions"]),
        data["split_seed"],
        data["max_length"],
        min_members,
        max_proteins,
        seed,
        order,
    )
    if key not in cache:
        dm = ProteinDataModule(
            files=fasta,
            clusters=data["clusters"],
            split_by=data["split_by"],
            split_fractions=tuple(data["split_fractions"]),
            split_seed=data["split_seed"],
            mode="crop",
            max_length=data["max_length"],
            alphabet=alphabet,
        )
        dm.setup("test")
        source = dm.datasets["test"].source
        targets = cluster_targets(
            source,
            read_members(data["clusters"]),
            min_members=min_members,
            order=record_order(source, order),
        )
        targets = sample_targets(targets, max_proteins, seed)  # the sample evaluate draws
        cache[key] = targets
    return cache[key]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories")
    add_heldout_args(p)
    p.add_argument(
        "--offsets",
        nargs="+",
        type=int,
        default=None,
        help="steps to add to each run's steps (a stage started with init_from= after another)",
    )
    p.add_argument(
        "--labels", nargs="+", default=None, help="a name for each run (default: its folder)"
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=RESULTS / "context_curve.json")
    p.add_argument("--png", type=Path, default=RESULTS / "context_curve.png")
    add_output_args(p)
    args = p.parse_args(argv)
    check_outputs(p, [args.json, args.png], args.overwrite)
    offsets = args.offsets or [0] * len(args.runs)
    labels = args.labels or [run.name for run in args.runs]
    for flag, given in (("--offsets", offsets), ("--labels", labels)):
        if len(given) != len(args.runs):
            raise SystemExit(f"{flag}: {len(given)} values for {len(args.runs)} runs")

    import torch

    from protein_performer.data.alphabet import Alphabet
    from protein_performer.evaluation.context_perplexity import context_perplexity
    from protein_performer.model.checkpoints import load_model
    from protein_performer.model.metrics import unigram_log_probs

    torch.set_num_threads(args.threads)
    runs: list[dict[str, Any]] = []
    cache: dict[tuple, list] = {}
    for run, offset, label in zip(args.runs, offsets, labels, strict=True):
        paths = checkpoints(run)
        if not paths:
            raise SystemExit(f"{run}: no checkpoints (snap/*.ckpt or checkpoints/last.ckpt)")
        curve, seen = [], set()
        for path in paths:
            step = int(torch.load(path, map_location="cpu", weights_only=True)["global_step"])
            if step in seen:
                continue
            seen.add(step)
            model, meta = load_model(path)
            model.eval()
            alphabet = Alphabet.from_dict(meta["alphabet"])
            data = meta["data"]
            targets = heldout_targets(path, meta, alphabet, args, cache)
            out = context_perplexity(
                model,
                alphabet,
                targets,
                max_length=data["max_length"],
                mask_prob=data["mask_prob"],
                seed=args.seed,
                unigram_log_probs=unigram_log_probs(data["unigram_counts"], alphabet),
            )
            point = {
                "step": step + offset,
                "with": out["with_context"]["perplexity"],
                "alone": out["without_context"]["perplexity"],
                "ratio": out["ratio"],
                "identical_ratio": out["by_context"]["identical"]["ratio"],
                "other_ratio": out["by_context"]["no_identical"]["ratio"],
                "unigram": out["unigram_perplexity"],
                "proteins": out["proteins"],
                "positions": out["positions"],
                "identical_proteins": out["targets_with_identical_context"],
            }
            print(f"{label} step {step + offset}: ratio {point['ratio']:.3f}", file=sys.stderr)
            curve.append(point)
        curve.sort(key=lambda c: c["step"])
        runs.append(
            {"run": label, "dir": str(run), "attention": model.config.attention, "curve": curve}
        )
    rows = [
        [
            r["run"],
            c["step"],
            f"{c['with']:.2f}",
            f"{c['alone']:.2f}",
            f"{c['ratio']:.3f}",
            "—" if c["identical_ratio"] is None else f"{c['identical_ratio']:.3f}",
            "—" if c["other_ratio"] is None else f"{c['other_ratio']:.3f}",
        ]
        for r in runs
        for c in r["curve"]
    ]
    last = runs[0]["curve"][-1]
    print(
        f"{last['proteins']} proteins of held-out clusters, {last['positions']} <mask> positions, "
        f"{last['identical_proteins']} with an identical homolog; unigram {last['unigram']:.2f}"
    )
    headers = ["run", "step", "with", "alone", "ratio", "identical", "others"]
    print(format_table(headers, rows))
    settings = {k: [str(x) for x in v] if k == "runs" else v for k, v in vars(args).items()}
    settings |= {"json": str(args.json), "png": str(args.png)}
    write_json(args.json, {"env": environment(), "args": settings, "runs": runs})
    plot(runs, args.png)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for i, run in enumerate(runs):
        steps = [c["step"] for c in run["curve"]]
        name = f"{run['run']} ({run['attention']})"
        left.plot(steps, [c["with"] for c in run["curve"]], color=f"C{i}", marker="o", label=name)
        left.plot(steps, [c["alone"] for c in run["curve"]], color=f"C{i}", ls=":")
        right.plot(steps, [c["ratio"] for c in run["curve"]], color=f"C{i}", marker="o", label=name)
    left.axhline(runs[0]["curve"][-1]["unigram"], color="grey", lw=0.8, label="unigram")
    left.set_xlabel("training step")
    left.set_ylabel("<mask> perplexity")
    left.set_title("solid: after homologs · dotted: alone", fontsize=9)
    right.axhline(1.0, color="grey", lw=0.8)
    right.set_xlabel("training step")
    right.set_ylabel("with / without homologs")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
