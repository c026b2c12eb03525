"""Alignment heads on held-out homolog windows: does a head find the residue aligned to a masked
position in the homolog before the protein, or does it spread over the homolog?

For each checkpoint, the windows are exactly those ``evaluate split=test context=cluster
context_min_members=3 context_max_proteins=300`` scores (the same proteins, crops, homolog order
and masks). For every head, over the ``<mask>`` positions of the protein that align to a homolog
residue (a local BLOSUM62 alignment of the unmasked protein to each homolog, Biopython), it
reports the mean attention on the aligned residues (``aligned``), on the homologs as a whole
(``homologs``), and what uniform attention would put on the aligned residues (``uniform``).

    python benchmarks/alignment_heads.py RUN/checkpoints/last.ckpt ... --fasta a.fasta b.fa.gz ... \
        --json docs/results/alignment_heads.json

Prints, per checkpoint, the heads ranked by ``aligned`` and writes a JSON with every head.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_output_args,
    check_outputs,
    environment,
    format_table,
    write_json,
)
from context_curve import add_heldout_args, heldout_targets


def window_parts(tokens: np.ndarray, labels: np.ndarray, alphabet: Any) -> dict[str, Any]:
    """Split a scored ``<cls> h_1 <sep> … h_k <sep> protein <eos>`` window (``(L,)`` tokens and
    labels, ``-100`` where not scored) into residue coordinates (``<cls>``/``<eos>`` dropped,
    as :func:`~protein_performer.analysis.extraction.attention_maps` returns them)."""
    body, y = tokens[1:-1], labels[1:-1]
    seps = np.flatnonzero(body == alphabet.sep_idx)
    bounds = [-1, *seps.tolist(), len(body)]
    segments = [(a + 1, b) for a, b in itertools.pairwise(bounds)]
    original = np.where(y >= 0, y, body)  # <mask> tokens restored, for the alignment
    parts = [alphabet.decode(original[a:b]) for a, b in segments]
    start, stop = segments[-1]
    return {
        "segments": segments,
        "parts": parts,
        "masked": start + np.flatnonzero(y[start:stop] >= 0),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="+", type=Path)
    add_heldout_args(p)
    p.add_argument("--labels", nargs="+", default=None, help="a name for each checkpoint")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--top", type=int, default=4, help="heads to print per checkpoint")
    p.add_argument("--json", type=Path, default=RESULTS / "alignment_heads.json")
    add_output_args(p)
    args = p.parse_args(argv)
    check_outputs(p, [args.json], args.overwrite)
    labels = args.labels or [str(c) for c in args.checkpoints]
    if len(labels) != len(args.checkpoints):
        raise SystemExit(f"--labels: {len(labels)} values for {len(args.checkpoints)} checkpoints")

    import torch

    from protein_performer.analysis.alignment_heads import aligned_mass, alignment_pairs
    from protein_performer.analysis.extraction import attention_maps
    from protein_performer.analysis.inputs import Protein
    from protein_performer.data.alphabet import Alphabet
    from protein_performer.evaluation.context_perplexity import scoring_windows
    from protein_performer.model.checkpoints import load_model
    from protein_performer.utils.progress import progress as progress_bar

    torch.set_num_threads(args.threads)
    cache: dict[tuple, list] = {}
    results = []
    for path, label in zip(args.checkpoints, labels, strict=True):
        model, meta = load_model(path)
        alphabet = Alphabet.from_dict(meta["alphabet"])
        data = meta["data"]
        targets = heldout_targets(path, meta, alphabet, args, cache)
        _, _, windows, labels_, info = scoring_windows(
            targets,
            alphabet,
            max_length=data["max_length"],
            style="crop",
            mask_prob=data["mask_prob"],
            seed=args.seed,
        )
        shape = (model.config.depth, model.config.heads)
        sums = {k: np.zeros(shape) for k in ("aligned", "homologs")}
        uniform = 0.0
        queries_total = 0
        by_identity = {True: [np.zeros(shape), 0], False: [np.zeros(shape), 0]}
        bar = progress_bar(total=len(windows), desc=f"attention {label}", unit="protein")
        for tokens, y, identical in zip(windows, labels_, info["identical"], strict=True):
            bar.update(1)
            w = window_parts(tokens, y, alphabet)
            if len(w["segments"]) < 2:
                continue
            queries, keys = alignment_pairs(w["segments"], w["parts"])
            keep = np.isin(queries, w["masked"])
            queries, keys = queries[keep], keys[keep]
            if not len(queries):
                continue
            protein = Protein("window", "", tokens[1:-1].astype(np.uint8))
            att = attention_maps(model, protein, alphabet)
            mass, flat = aligned_mass(att, queries, keys)
            n = len(np.unique(queries))
            rows = att[..., np.unique(queries), :].astype(np.float64)
            homolog_stop = w["segments"][-2][1]
            share = rows[..., :homolog_stop].sum(-1) / np.clip(rows.sum(-1), 1e-30, None)
            sums["aligned"] += mass * n
            sums["homologs"] += share.sum(-1)
            uniform += flat * n
            queries_total += n
            by_identity[bool(identical)][0] += mass * n
            by_identity[bool(identical)][1] += n
        bar.close()
        if not queries_total:
            raise SystemExit(f"{path}: no masked position aligns to a homolog")
        aligned = sums["aligned"] / queries_total
        homologs = sums["homologs"] / queries_total
        heads = [
            {
                "layer": layer,
                "head": head,
                "aligned": float(aligned[layer, head]),
                "homologs": float(homologs[layer, head]),
                "aligned_identical": _mean(*by_identity[True], layer, head),
                "aligned_other": _mean(*by_identity[False], layer, head),
            }
            for layer in range(shape[0])
            for head in range(shape[1])
        ]
        heads.sort(key=lambda h: -h["aligned"])
        result = {
            "label": label,
            "checkpoint": str(path),
            "attention": model.config.attention,
            "proteins": len(windows),
            "queries": queries_total,
            "queries_identical": by_identity[True][1],
            "uniform": uniform / queries_total,
            "heads": heads,
        }
        results.append(result)
        print(
            f"{label} ({model.config.attention}): {queries_total:,} masked positions aligned to a "
            f"homolog in {len(windows)} held-out proteins; uniform attention would put "
            f"{result['uniform']:.2%} on the aligned residues"
        )
        rows_ = [
            [
                f"L{h['layer']}H{h['head']}",
                f"{h['aligned']:.2%}",
                f"{h['aligned'] / result['uniform']:.1f}x",
                f"{h['homologs']:.0%}",
                "—" if h["aligned_identical"] is None else f"{h['aligned_identical']:.2%}",
                "—" if h["aligned_other"] is None else f"{h['aligned_other']:.2%}",
            ]
            for h in heads[: args.top]
        ]
        headers = ["head", "aligned", "vs uniform", "homologs", "identical", "others"]
        print(format_table(headers, rows_))
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    settings["checkpoints"] = [str(c) for c in args.checkpoints]
    write_json(args.json, {"env": environment(), "args": settings, "results": results})
    print(f"wrote {args.json}")


def _mean(total: np.ndarray, n: int, layer: int, head: int) -> float | None:
    return float(total[layer, head] / n) if n else None


if __name__ == "__main__":
    main()
