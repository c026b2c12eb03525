r"""Mutation scores with homologs: how many, in one window or as an ensemble, against a DMS.

For one wild type and a deep mutational scan of its single substitutions, the Spearman
correlation with measured fitness of

* the model alone (``score``'s ``masked_marginal``),
* the model with the first k homologs before the protein in one window
  (``score context= context_max_homologs=k``'s ``masked_marginal_context``), for each k of
  ``--homologs``,
* an ensemble: the mean of that score over ``--ensemble`` windows, each with a seeded random
  subset of ``--subset`` homologs, for each seed of ``--seeds``,
* the baselines every homolog-using method has to beat: the PSSM of the same homologs
  (``score``'s ``pssm`` column) and BLOSUM62.

    python benchmarks/homolog_scoring.py --checkpoint homologs --wild-type pab1_rrm.fasta \
        --mutations PABP_YEAST_Fields2013-singles.csv --offset 126 --fitness log \
        --homologs-fasta hits/hits.fasta --json PATH

The homologs are read as ``score context=`` reads them (``query=`` picks the wild type's, a
copy of it left out; search writes the best hit first), and only those the PSSM aligns above
chance are placed in windows, as ``score`` does.
"""

from __future__ import annotations

import argparse
import csv
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
    check_outputs,
    environment,
    format_table,
    machine_line,
    one_line_errors,
    positive_int,
    write_json,
)


def read_scan(path: Path, column: str, fitness: str, offset: int, wild: str) -> tuple[list, list]:
    """The single substitutions of ``path`` that fit ``wild`` and their fitness values."""
    from protein_performer.analysis.dms.variants import parse_mutant

    mutants, values = [], []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            try:
                (site,) = parse_mutant(row[column], offset)
                value = float(row[fitness])
            except (ValueError, KeyError):
                continue  # multi-site, stops, blanks: this measures single substitutions
            if 0 <= site.index < len(wild) and wild[site.index] == site.wt and site.mt != site.wt:
                mutants.append(site)
                values.append(value)
    if not mutants:
        raise SystemExit(f"homolog_scoring: no single substitution of {path} fits the wild type")
    return mutants, values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="homologs", help="a path, default or homologs")
    parser.add_argument("--wild-type", type=Path, required=True, help="FASTA, first record")
    parser.add_argument("--mutations", type=Path, required=True, help="CSV of the scan")
    parser.add_argument("--mutation-col", default="mutant")
    parser.add_argument("--fitness", required=True, help="the CSV's fitness column")
    parser.add_argument("--offset", type=int, default=1, help="number of the first residue")
    parser.add_argument("--homologs-fasta", type=Path, required=True)
    parser.add_argument("--homologs", type=positive_int, nargs="+", default=[1, 3, 8, 16])
    parser.add_argument("--ensemble", type=positive_int, default=8, help="windows averaged")
    parser.add_argument("--subset", type=positive_int, nargs="+", default=[4, 8])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-length", type=positive_int, default=1024, help="window tokens")
    parser.add_argument("--threads", type=positive_int, default=torch.get_num_threads())
    parser.add_argument("--json", type=Path, default=RESULTS / "homolog_scoring.json")
    add_output_args(parser)
    args = parser.parse_args(argv)
    check_outputs(parser, [args.json], args.overwrite)
    torch.set_num_threads(args.threads)

    import protein_performer
    from protein_performer.analysis.dms.homologs import context_marginals, read_scan_context
    from protein_performer.analysis.dms.marginals import blosum62_scores, score_mutants, spearman
    from protein_performer.analysis.dms.profile import build_pssm, pssm_scores
    from protein_performer.analysis.inputs import read_proteins

    start = time.perf_counter()
    model, alphabet = protein_performer.load(args.checkpoint)
    record = read_proteins(args.wild_type, alphabet)[0]
    wild = alphabet.decode(record.residues)
    mutants, fitness = read_scan(args.mutations, args.mutation_col, args.fitness, args.offset, wild)
    context = read_scan_context(args.homologs_fasta, alphabet, wild, record.id)
    homologs = [h.residues for h in context.used]
    ids, sites = alphabet.encode(wild), sorted({m.index for m in mutants})
    variants = [[m] for m in mutants]

    def model_score(chosen: list[np.ndarray]) -> np.ndarray:
        logp, _ = context_marginals(model, alphabet, ids, chosen, sites, max_length=args.max_length)
        return np.array([logp[m.index][alphabet.index(m.mt)] - logp[m.index][alphabet.index(m.wt)]
                         for m in mutants])  # fmt: skip

    rows: list[dict[str, Any]] = []

    def add(name: str, homologs_used: int, rho: float | None, **extra: Any) -> None:
        rows.append({"score": name, "homologs": homologs_used, "spearman": rho, **extra})

    alone = score_mutants(model, alphabet, wild, variants, methods="masked-marginal")
    add("model alone (masked_marginal)", 0, spearman(alone["masked-marginal"], fitness))
    for k in sorted({min(k, len(homologs)) for k in args.homologs}):
        # as score context= context_max_homologs=k: the first k, then those the PSSM aligns
        first = read_scan_context(args.homologs_fasta, alphabet, wild, record.id, k).used
        chosen = [h.residues for h in first]
        add(f"one window, first {k}", len(chosen), spearman(model_score(chosen), fitness))
    for size in args.subset:
        if size >= len(homologs):
            continue
        per_seed = []
        for seed in args.seeds:
            rng = np.random.default_rng(seed)
            draws = [rng.permutation(len(homologs))[:size] for _ in range(args.ensemble)]
            mean = np.mean([model_score([homologs[i] for i in d]) for d in draws], axis=0)
            per_seed.append(spearman(mean, fitness))
        known = [r for r in per_seed if r is not None]
        add(f"ensemble of {args.ensemble} windows of {size} drawn (of {len(homologs)})", size,
            float(np.mean(known)) if known else None, spearman_per_seed=per_seed)  # fmt: skip
    pssm = build_pssm(wild, [alphabet.decode(h) for h in homologs])
    add("PSSM of the same homologs", len(homologs), spearman(pssm_scores(pssm, variants), fitness))
    add("BLOSUM62", 0, spearman(blosum62_scores(variants), fitness))
    seconds = time.perf_counter() - start
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    result = {"benchmark": "homolog_scoring", "config": config, "environment": environment(),
              "mutants": len(mutants), "homologs": len(homologs), "seconds": seconds, "rows": rows}  # fmt: skip
    write_json(args.json, result)  # before printing: nothing measured is lost

    def rho(value: float | None) -> str:
        return "n/a" if value is None else f"{value:+.3f}"

    table = []
    for r in rows:
        seeds = r.get("spearman_per_seed")
        text = rho(r["spearman"]) + (f" (seeds {', '.join(map(rho, seeds))})" if seeds else "")
        table.append([r["score"], r["homologs"], text])
    print(
        f"{len(mutants):,} single substitutions of {record.id} ({len(wild)} residues), "
        f"{len(homologs)} homologs from {args.homologs_fasta}; checkpoint {args.checkpoint}"
    )
    print(machine_line(threads=args.threads))
    print(format_table(["score", "homologs", f"Spearman with {args.fitness}"], table))
    print(f"\nwrote {args.json} ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(one_line_errors(main)())
