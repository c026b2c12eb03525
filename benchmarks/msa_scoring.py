r"""Mutation scores from a user's alignment: window, homolog choice and samples, against a DMS.

For one wild type, a deep mutational scan of its single substitutions and its homologs (an
alignment: a3m, a2m, Stockholm, aligned FASTA; or a search's FASTA hits), the Spearman
correlation with measured fitness of ``score context=``'s columns for each setting of
``--settings TOKENS,SAMPLING,SAMPLES`` (the window in tokens, how homologs fill it, windows
averaged per site), beside the baselines a homolog-using score has to beat: the weighted
profile of the same alignment (``pssm``), BLOSUM62 and the model alone. Each setting's
seconds are measured in the same run.

    python benchmarks/msa_scoring.py --wild-type wt.fasta --mutations dms.csv --fitness score \
        --context msa.a2m --settings 1024,first,1 4096,first,1 1024,weighted,4 --json PATH
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_output_args,
    caps_label,
    check_outputs,
    environment,
    format_table,
    fraction,
    machine_line,
    one_line_errors,
    positive_int,
    window_caps,
    write_json,
)
from homolog_scoring import read_scan

from protein_performer.analysis.dms.homologs import (
    DEFAULT_MAX_IDENTITY,
    DEFAULT_RETRIEVAL,
    DEFAULT_WINDOW_HOMOLOGS,
)


def setting(text: str) -> tuple[int, str, int, int | list[int] | str | None]:
    """``TOKENS,SAMPLING,SAMPLES[,CAP]`` as a tuple (argparse type): CAP homologs at most in a
    window (``score context_window_homologs=``; default ``auto``: the model's own, ``all``: as
    many as fit, ``8+64``: windows of each, averaged)."""
    try:
        tokens, sampling, samples, *rest = text.split(",")
        cap = rest[0].strip() if rest else str(DEFAULT_WINDOW_HOMOLOGS)
        if len(rest) > 1:
            raise ValueError
        out = (int(tokens), sampling.strip(), int(samples), window_caps(cap))
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give TOKENS,SAMPLING,SAMPLES[,CAP], e.g. 1024,first,1 or 8192,first,1,all"
            " (CAP: auto, all, N or 8+64)"
        ) from None
    if out[0] < 16 or out[2] < 1 or out[1] not in ("first", "weighted", "diverse"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: tokens >= 16, sampling first / weighted / diverse, samples >= 1"
        )
    return out


def _listed(value: Any) -> list[Any]:
    """What a row holds for each kind of window: a list already (``8+64``), or one value."""
    return value if isinstance(value, list) else [value]


def identity_limit(text: str) -> float | None:
    """``--max-identity``: a fraction from 0 to 1, or ``none`` (argparse type)."""
    if text.strip().lower() == "none":
        return None
    try:
        return fraction(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a fraction from 0 to 1, or none"
        ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="homologs", help="a path, default or homologs")
    parser.add_argument("--wild-type", type=Path, required=True, help="FASTA, first record")
    parser.add_argument("--mutations", type=Path, required=True, help="CSV of the scan")
    parser.add_argument("--mutation-col", default="mutant")
    parser.add_argument("--fitness", required=True, help="the CSV's fitness column")
    parser.add_argument("--offset", type=int, default=1, help="number of the first residue")
    parser.add_argument("--context", type=Path, required=True, help="alignment or FASTA hits")
    parser.add_argument("--max-homologs", type=positive_int, default=None)
    parser.add_argument("--settings", type=setting, nargs="+", default=[(1024, "first", 1)])
    parser.add_argument(
        "--retrieval", type=fraction, default=DEFAULT_RETRIEVAL, help="the profile's weight"
    )
    parser.add_argument(
        "--max-identity",
        type=identity_limit,
        default=DEFAULT_MAX_IDENTITY,
        help="homologs more identical to the wild type stay out of the windows (none: all in)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=positive_int, default=torch.get_num_threads())
    parser.add_argument("--json", type=Path, default=RESULTS / "msa_scoring.json")
    add_output_args(parser)
    args = parser.parse_args(argv)
    check_outputs(parser, [args.json], args.overwrite)
    torch.set_num_threads(args.threads)

    import protein_performer
    from protein_performer.analysis.dms.homologs import (
        CONTEXT_COLUMN,
        PSSM_COLUMN,
        RETRIEVAL_COLUMN,
        context_columns,
        read_scan_context,
    )
    from protein_performer.analysis.dms.marginals import blosum62_scores, score_mutants, spearman
    from protein_performer.analysis.inputs import read_proteins

    model, alphabet = protein_performer.load(args.checkpoint)
    record = read_proteins(args.wild_type, alphabet)[0]
    wild = alphabet.decode(record.residues)
    mutants, fitness = read_scan(args.mutations, args.mutation_col, args.fitness, args.offset, wild)
    variants = [[m] for m in mutants]
    start = time.perf_counter()
    context = read_scan_context(
        args.context, alphabet, wild, record.id, args.max_homologs, seed=args.seed
    )
    read_seconds = time.perf_counter() - start
    rows: list[dict[str, Any]] = []
    profile_rho = None
    for tokens, sampling, samples, cap in args.settings:
        t0 = time.perf_counter()
        columns = context_columns(
            model, alphabet, wild, variants, context, max_length=tokens, sampling=sampling,
            samples=samples, window_homologs=cap, seed=args.seed, retrieval=args.retrieval,
            max_identity=args.max_identity,
        )  # fmt: skip
        rows.append(
            {
                "tokens": tokens,
                "sampling": sampling,
                "samples": samples,
                "window_homologs": context.info["context_window_homologs"],
                "window_homologs_asked": cap,
                "crop": context.info.get("context_crop"),
                "mean_homologs_in_window": context.info["mean_homologs_in_window"],
                "over_max_identity": context.info["homologs_over_max_identity"],
                "model": spearman(columns[CONTEXT_COLUMN], fitness),
                "retrieval": spearman(
                    columns.get(RETRIEVAL_COLUMN, columns[CONTEXT_COLUMN]), fitness
                ),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        profile_rho = spearman(columns[PSSM_COLUMN], fitness)
    alone = score_mutants(model, alphabet, wild, variants, methods="masked-marginal")
    baselines = {
        "profile of the same homologs": profile_rho,
        "BLOSUM62": spearman(blosum62_scores(variants), fitness),
        "model alone": spearman(alone["masked-marginal"], fitness),
    }

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    table = format_table(
        ["window", "homologs", "samples", "cap", "in window", "model", "retrieval", "s"],
        [
            [
                r["tokens"],
                r["sampling"],
                r["samples"],
                caps_label(r["window_homologs"]),
                caps_label([f"{m:.1f}" for m in _listed(r["mean_homologs_in_window"])]),
                fmt(r["model"]),
                fmt(r["retrieval"]),
                r["seconds"],
            ]
            for r in rows
        ],
    )
    notes = context.info.get("alignment", {})
    print(
        f"{args.mutations.name}: {len(mutants):,} single substitutions; context {args.context.name}"
        f" ({notes.get('format', 'fasta hits')}, {len(context.used):,} homologs used"
        + (f", Neff {notes['neff']:,.1f}" if "neff" in notes else "")
        + f"; read in {read_seconds:.1f} s)\n{machine_line('cpu', args.threads)}\n{table}\n"
        + "; ".join(f"{k} {fmt(v)}" for k, v in baselines.items())
    )
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    write_json(
        args.json,
        {
            "benchmark": "msa_scoring",
            "config": config,
            "environment": environment(),
            "mutants": len(mutants),
            "homologs_used": len(context.used),
            "alignment": notes,
            "read_seconds": round(read_seconds, 1),
            "rows": rows,
            "baselines": baselines,
        },
    )
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(one_line_errors(main)())
