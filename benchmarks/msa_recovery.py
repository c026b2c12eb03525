r"""A user's own alignment read back: the wild type's residues hidden in its query row, the
model's windows against the weighted profile of every row.

The alignment (a3m, a2m, Stockholm, aligned FASTA) is read against the wild type as
``score context=`` reads it; then, ``--batches`` times, ``--sites`` of the wild type's residues
in the alignment's columns (evenly spaced, interleaved between batches) are hidden: unknown in
the query's row and in the sequence the model reads, so neither the profile (the query's row
counts in it) nor the windows see them. Perplexity of the true residue at the hidden sites over
the 20 amino acids: the weighted profile, the model for each ``--window-homologs`` (``score``'s
``context_window_homologs``; ``1+64`` averages windows of each) and the two mixed at each
``--retrieval`` weight, as ``context_retrieval`` mixes them. The homologs at most
``context_max_identity`` (0.9) identical stay in the windows; the profile keeps every row, as
``score`` builds it: near-copies in an alignment favour the windows, which can copy them.

    python benchmarks/msa_recovery.py --wild-type wt.fasta --context msa.a2m \
        --window-homologs auto 64 1 --json docs/results/msa_recovery_pilin.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
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
    machine_line,
    one_line_errors,
    true_nll,
    write_json,
)


def hidden_sites(msa: Any, sites: int, batches: int) -> list[list[int]]:
    """``batches`` lists of wild-type residues (0-based) in ``msa``'s columns: ``sites *
    batches`` of them evenly spaced (the first and last three columns left out), dealt in turn."""
    inside = np.sort(np.asarray(msa.positions))
    if len(inside) < 7:
        raise ValueError(f"the alignment has {len(inside)} columns: too few to hide sites in")
    picks = np.unique(np.linspace(3, len(inside) - 4, sites * batches).astype(int))
    chosen = inside[picks].tolist()
    return [sorted(chosen[b::batches]) for b in range(batches)]


def blind(msa: Any, wild_type: str, sites: list[int]) -> tuple[Any, str]:
    """``msa`` with the query's row unknown at ``sites`` (a gap: counted nowhere), and the wild
    type with ``X`` there."""
    from protein_performer.data.msa import GAP

    codes = np.array(msa.query_codes, copy=True)
    codes[np.isin(msa.positions, sites)] = GAP
    letters = np.array(list(wild_type))
    letters[sites] = "X"
    return dataclasses.replace(msa, query_codes=codes), "".join(letters)


def score_batch(
    model: Any, alphabet: Any, msa: Any, wild_type: str, sites: list[int], args: Any
) -> dict[str, list[float]]:
    """``{column: [−log p(true residue)]}`` at ``sites`` hidden in ``msa``."""
    from protein_performer.analysis.dms.homologs import context_log_probs, read_scan_context
    from protein_performer.analysis.dms.profile import COLUMNS

    msa_blind, sequence = blind(msa, wild_type, sites)
    context = read_scan_context(msa_blind, alphabet, sequence, None, seed=args.seed)
    truth = np.array([COLUMNS.index(wild_type[s]) for s in sites])
    aa = [alphabet.index(c) for c in COLUMNS]
    profile = np.log(context.pssm.frequencies[sites])

    def nll(logp: np.ndarray) -> list[float]:
        return true_nll(logp, truth)

    out = {"profile": nll(profile)}
    for cap in args.window_homologs:
        got = context_log_probs(
            model, alphabet, wild_type, sites, context, max_length=args.window,
            window_homologs=cap, seed=args.seed,
        )  # fmt: skip
        model_lp = np.stack([got[s][aa] for s in sites]).astype(np.float64)
        model_lp -= np.logaddexp.reduce(model_lp, axis=1, keepdims=True)
        out[f"model, {caps_label(cap)}"] = nll(model_lp)
        for w in args.retrieval:
            out[f"mixed {w:g}, {caps_label(cap)}"] = nll((1 - w) * model_lp + w * profile)
    return out


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default="homologs-columns-deep", help="a path or a name")
    p.add_argument("--wild-type", type=Path, required=True, help="FASTA, first record")
    p.add_argument("--context", type=Path, required=True, help="the alignment (aligned)")
    p.add_argument("--sites", type=int_at_least(1), default=12, help="hidden at once")
    p.add_argument("--batches", type=int_at_least(1), default=4, help="copies, each its sites")
    add_window_args(p, ["auto"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int_at_least(1), default=torch.get_num_threads())
    p.add_argument("--json", type=Path, default=RESULTS / "msa_recovery.json")
    add_output_args(p)
    args = p.parse_args(argv)
    check_outputs(p, [args.json], args.overwrite)
    torch.set_num_threads(args.threads)
    import protein_performer
    from protein_performer.analysis.inputs import read_proteins
    from protein_performer.data.msa import read_msa

    model, alphabet = protein_performer.load(args.checkpoint)
    wild_type = alphabet.decode(read_proteins(args.wild_type, alphabet)[0].residues)
    msa = read_msa(args.context, wild_type)
    if not msa.aligned:
        p.error(f"{args.context}: plain FASTA hits; give an alignment (its columns are hidden)")
    batches = hidden_sites(msa, args.sites, args.batches)
    print(machine_line("cpu", args.threads))
    print(
        f"{args.context.name}: {msa.notes.get('format', msa.format)}, {len(msa.sequences):,} "
        f"homologs, {len(msa.positions)} columns; {sum(map(len, batches))} sites hidden in "
        f"{len(batches)} copies"
    )
    nll: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    for k, sites in enumerate(batches):
        for key, values in score_batch(model, alphabet, msa, wild_type, sites, args).items():
            nll.setdefault(key, []).extend(values)
        print(f"  {k + 1}/{len(batches)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    perplexity = {k: float(np.exp(np.mean(v))) for k, v in nll.items()}
    rows = [["profile of every row", f"{perplexity['profile']:.2f}", *["-"] * len(args.retrieval)]]
    for label in map(caps_label, args.window_homologs):
        rows.append(
            [f"context_window_homologs={label}", f"{perplexity[f'model, {label}']:.2f}",
             *[f"{perplexity[f'mixed {w:g}, {label}']:.2f}" for w in args.retrieval]]
        )  # fmt: skip
    mixed = [f"mixed {w:g}" for w in args.retrieval]
    print(format_table(["column", "perplexity", *mixed], rows))
    write_json(
        args.json,
        {
            "command": " ".join(sys.argv),
            "environment": environment(),
            "checkpoint": args.checkpoint,
            "alignment": {k: v for k, v in msa.notes.items() if not isinstance(v, list)},
            "window_tokens": args.window,
            "sites": [s for b in batches for s in b],
            "perplexity": perplexity,
            "seconds": time.perf_counter() - t0,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
