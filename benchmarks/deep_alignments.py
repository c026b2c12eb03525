r"""Deep alignments of held-out proteins: the model column by homologs a window holds, beside
the weighted profile of the whole alignment.

For held-out proteins (the checkpoint's test split) with at least ``--min-hits`` search hits
into the training split, the first ``--max-hits`` hits are aligned to the protein with its
``--sites`` scored sites unknown (``X``: an alignment built with them known places a hit's
residue where it matches the hidden one) and written as an a3m, which is then read as
``score context=`` reads a user's alignment: its weighted profile (every row, EVmutation
weights) and the model's windows (:func:`~protein_performer.analysis.dms.homologs.
context_log_probs`, file order, ``context_window_homologs`` = each of ``--window-homologs``).
Perplexity of the true residue at the sites (the model's probabilities over the 20 amino
acids), and the two mixed as the ``context_retrieval`` column mixes them (0.6 profile).

    protein-performer data search test.fasta FILES hits_deep --min-identity 0.2 \
        --max-identity 0.9 --min-coverage 0.5 --max-hits 1000 --margin 0
    python benchmarks/deep_alignments.py --checkpoint homologs-columns --fasta FILES \
        --clusters clusters14 --queries test.fasta --hits hits_deep --min-hits 100 \
        --window-homologs 16 32 64 --json docs/results/deep_alignments.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_output_args,
    add_window_args,
    caps_label,
    check_outputs,
    environment,
    format_table,
    int_at_least,
    one_line_errors,
    true_nll,
    write_json,
)
from long_windows import read_queries, test_split


def blind_alignment(seq: str, hits: list[str], sites: list[int]) -> str:
    """An a3m of ``seq`` with ``sites`` unknown (``X``, the query's row) and each of ``hits``
    (sequences) at the query's columns as its local alignment to that row places it."""
    from protein_performer.analysis.dms.profile import COLUMNS, build_pssm
    from protein_performer.data.msa import GAP

    blind = np.array(list(seq))
    blind[sites] = "X"
    query = "".join(blind)
    pssm = build_pssm(query, hits, min_z=None, include_query=False, allow_query_only=True)
    letters = np.array([*COLUMNS, "-", *["X"] * (255 - GAP)])
    rows = "".join(f">h{k}\n{''.join(letters[r])}\n" for k, r in enumerate(pssm.matrix))
    # ColabFold's header line: read as an a3m even where no row has a gap
    return f"#{len(seq)}\t1\n>query\n{query}\n{rows}"


def score_protein(
    model: Any, alphabet: Any, seq: str, hits: list[str], args: Any
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """``{column: [−log p(true residue)]}`` at the protein's sites, and what was read."""
    from protein_performer.analysis.dms.homologs import context_log_probs, read_scan_context
    from protein_performer.analysis.dms.profile import COLUMNS

    n = len(seq)
    sites = sorted({int(s) for s in np.linspace(10, n - 11, args.sites)})
    truth = np.array([COLUMNS.index(seq[s]) for s in sites])
    blind = np.array(list(seq))
    blind[sites] = "X"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "msa.fasta"
        path.write_text(blind_alignment(seq, hits[: args.max_hits], sites))
        context = read_scan_context(path, alphabet, "".join(blind), None)
    aa = [alphabet.index(c) for c in COLUMNS]
    profile = np.log(context.pssm.frequencies[sites])

    def nll(logp: np.ndarray) -> list[float]:
        return true_nll(logp, truth)

    out = {"profile": nll(profile)}
    for cap in args.window_homologs:
        got = context_log_probs(
            model, alphabet, seq, sites, context, max_length=args.window, window_homologs=cap
        )
        model_lp = np.stack([got[s][aa] for s in sites]).astype(np.float64)
        label = caps_label(cap)
        out[f"model, {label}"] = nll(model_lp)
        for w in args.retrieval:  # the first: "with the profile"; others name their weight
            key = "with the profile" + ("" if w == args.retrieval[0] else f" {w:g}")
            out[f"{key}, {label}"] = nll((1 - w) * model_lp + w * profile)
        crops = context.info.get("context_crop")  # a list for windows of two kinds (8+64)
        crops = crops if isinstance(crops, list) else [crops]
        out[f"crop, {label}"] = [float(max(c or n for c in crops))]  # the widest
    info = {"residues": n, "homologs": len(context.used), "neff": context.pssm.params["neff"]}
    return out, info


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default="homologs-columns", help="a path or a shipped name")
    p.add_argument("--fasta", nargs="+", required=True, help="the files the checkpoint used")
    p.add_argument("--clusters", type=Path, required=True, help="their clusters table")
    p.add_argument("--queries", type=Path, required=True, help="held-out proteins (FASTA)")
    p.add_argument("--hits", type=Path, required=True, help="a data search of --queries")
    p.add_argument("--min-hits", type=int_at_least(1), default=100)
    p.add_argument("--max-hits", type=int_at_least(1), default=1000)
    p.add_argument("--proteins", type=int_at_least(1), default=40)
    p.add_argument("--sites", type=int_at_least(1), default=12)
    add_window_args(p, [16, 32, 64])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int_at_least(1), default=torch.get_num_threads())
    p.add_argument("--json", type=Path, default=RESULTS / "deep_alignments.json")
    add_output_args(p)
    args = p.parse_args(argv)
    check_outputs(p, [args.json], args.overwrite)
    torch.set_num_threads(args.threads)
    import protein_performer
    from protein_performer.data.alphabet import default_alphabet
    from protein_performer.errors import DataError

    alphabet = default_alphabet()
    queries, hits, chosen = read_queries(args, alphabet, test_split(args, alphabet))
    model, _ = protein_performer.load(args.checkpoint)
    nll: dict[str, list[float]] = {}
    proteins, skipped = [], []
    t0 = time.perf_counter()
    for q in chosen:
        records = [h.split("\n", 1)[1].replace("\n", "") for h in hits[q]]
        try:
            one, info = score_protein(model, alphabet, queries[q], records, args)
        except DataError as e:  # e.g. no hit covers half of it, as `score` would refuse
            skipped.append({"id": q, "why": e.problem})
            print(f"  skipped {q}: {skipped[-1]['why']}", flush=True)
            continue
        for k, v in one.items():
            nll.setdefault(k, []).extend(v)
        per = {k: float(np.exp(np.mean(v))) for k, v in one.items() if not k.startswith("crop")}
        proteins.append({"id": q, **info, "perplexity": per})
        print(
            f"  {len(proteins)}/{len(chosen)} {q}: {info['residues']} residues, "
            f"{info['homologs']} homologs ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    if not proteins:
        raise DataError(f"none of the {len(chosen)} proteins could be read (see above)")
    crops = {k: float(np.median(v)) for k, v in nll.items() if k.startswith("crop")}
    perplexity = {k: float(np.exp(np.mean(v))) for k, v in nll.items() if k not in crops}
    mixes = ["with the profile", *[f"with the profile {w:g}" for w in args.retrieval[1:]]]
    dash = ["-"] * len(mixes)
    rows = [["profile of all the homologs", "-", "-", f"{perplexity['profile']:.2f}", *dash]]
    for label in map(caps_label, args.window_homologs):
        rows.append(
            [f"context_window_homologs={label}", label, f"{crops[f'crop, {label}']:.0f}",
             f"{perplexity[f'model, {label}']:.2f}",
             *[f"{perplexity[f'{m}, {label}']:.2f}" for m in mixes]]
        )  # fmt: skip
    mixed = [f"with profile {w:g}" for w in args.retrieval]
    print(format_table(["column", "homologs", "median crop", "perplexity", *mixed], rows))
    homologs = [p["homologs"] for p in proteins]
    print(
        f"{len(proteins)} proteins, {len(nll['profile']):,} sites; homologs per protein median "
        f"{np.median(homologs):.0f} ({min(homologs)}-{max(homologs)}), Neff median "
        f"{np.median([p['neff'] for p in proteins]):.0f}"
        + (f"; {len(skipped)} skipped (no alignment score would read)" if skipped else "")
    )
    write_json(
        args.json,
        {
            "command": " ".join(sys.argv),
            "environment": environment(),
            "checkpoint": args.checkpoint,
            "window_tokens": args.window,
            "proteins": proteins,
            "skipped": skipped,
            "sites": len(nll["profile"]),
            "perplexity": perplexity,
            "median_crop": crops,
            "seconds": time.perf_counter() - t0,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
