"""data search: homologs of query proteins found with MMseqs2 in the user's own FASTA files."""

from __future__ import annotations

import argparse

from protein_performer.cli.commands.printing import COMPRESSIONS, print_json
from protein_performer.data.fasta import check_distinct_inputs
from protein_performer.errors import ConfigError, DataError

SEARCH_OPTIONS = {
    "max_evalue": "--max-evalue",
    "min_identity": "--min-identity",
    "max_identity": "--max-identity",
    "min_coverage": "--min-coverage",
    "sensitivity": "--sensitivity",
    "iterations": "--iterations",
    "invalid=skip": "--invalid skip",
    "invalid=replace": "--invalid replace",
    "strip_gaps": "--strip-gaps",
}


def _cmd_search(args: argparse.Namespace) -> int:
    from protein_performer.data.search import search

    if len(args.paths) < 3:
        raise ConfigError(
            "search needs a QUERY, at least one DB and an OUTDIR "
            "(usage: protein-performer data search QUERY DB [DB ...] OUTDIR)"
        )
    query, *dbs, outdir = args.paths
    check_distinct_inputs({"QUERY": [query], "DB": dbs})
    try:
        manifest = search(
            query,
            dbs,
            outdir,
            min_identity=args.min_identity,
            max_identity=args.max_identity,
            min_coverage=args.min_coverage,
            max_evalue=args.max_evalue,
            margin=args.margin,
            max_hits=args.max_hits,
            threads=args.threads,
            sensitivity=args.sensitivity,
            iterations=args.iterations,
            invalid=args.invalid,
            strip_gaps=args.strip_gaps,
            overwrite=args.overwrite,
            quiet=args.json,
        )
    except DataError as e:  # the library's keyword names, said as this command's flags
        raise e.with_options(SEARCH_OPTIONS) from None
    if args.json:
        print_json(manifest, None)
    return 0


def add_parser(dsub: argparse._SubParsersAction) -> None:
    """``data search``'s options."""
    p = dsub.add_parser(
        "search",
        usage="protein-performer data search [options] QUERY DB [DB ...] OUTDIR",
        help="find homologs of query proteins in FASTA files with MMseqs2",
        description="Search the proteins of QUERY against the DB FASTA file(s) with MMseqs2 "
        "(easy-search) and write OUTDIR/hits.fasta (each hit's aligned region, plus --margin "
        "residues each side, its header naming the query, identity and e-value), "
        "OUTDIR/hits.tsv (the hit table) and OUTDIR/manifest.json. The query itself is left "
        "out. Use hits.fasta as context= of score and aa-similarity.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="QUERY DB... OUTDIR",
        help=f"query FASTA, database FASTA file(s) ({COMPRESSIONS}), then the output directory",
    )
    p.add_argument("--min-identity", type=float, default=0.3, help="(default: %(default)s)")
    p.add_argument(
        "--max-identity",
        type=float,
        default=1.0,
        help="drop closer hits, e.g. 0.9 for no near-copies (default: %(default)s)",
    )
    p.add_argument(
        "--min-coverage", type=float, default=0.5, help="of the query (default: %(default)s)"
    )
    p.add_argument("--max-evalue", type=float, default=1e-3, help="(default: %(default)s)")
    p.add_argument(
        "--margin",
        type=int,
        default=0,
        help="residues kept each side of the aligned region (default: %(default)s)",
    )
    p.add_argument("--max-hits", type=int, default=100, help="per query (default: %(default)s)")
    p.add_argument("--threads", type=int, help="MMseqs2 threads (default: all cores)")
    p.add_argument(
        "--sensitivity",
        type=float,
        default=5.7,
        help="MMseqs2 -s: 1 fast .. 7.5 sensitive (default: %(default)s)",
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=1,
        help="MMseqs2 --num-iterations: rounds of profile search, 3 for distant families as "
        "ColabFold (default: %(default)s)",
    )
    p.add_argument(
        "--invalid",
        choices=("error", "skip", "replace"),
        default="error",
        help="a record with other letters or none: stop, skip it, or letters to X "
        "(default: %(default)s)",
    )
    p.add_argument("--strip-gaps", action="store_true", help="drop alignment gaps '-' and '.'")
    p.add_argument("--overwrite", action="store_true", help="replace an OUTDIR written by search")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=_cmd_search)
