"""data cluster: proteins clustered with MMseqs2 into UniRef-style clusters."""

from __future__ import annotations

import argparse

from protein_performer.cli.commands.preprocess import PREPROCESS_OPTIONS
from protein_performer.cli.commands.printing import COMPRESSIONS, print_json
from protein_performer.data.fasta import check_distinct_inputs
from protein_performer.errors import ConfigError, DataError


def _cmd_cluster(args: argparse.Namespace) -> int:
    from protein_performer.data.cluster import cluster_fasta

    if len(args.paths) < 2:
        raise ConfigError(
            "cluster needs at least one INPUT and an OUTDIR "
            "(usage: protein-performer data cluster INPUT [INPUT ...] OUTDIR)"
        )
    *inputs, outdir = args.paths
    check_distinct_inputs({"INPUT": inputs})
    try:
        manifest = cluster_fasta(
            inputs,
            outdir,
            min_seq_id=args.min_seq_id,
            coverage=args.coverage,
            cov_mode=args.cov_mode,
            method=args.method,
            threads=args.threads,
            tmp_dir=args.tmp_dir,
            memory=args.memory,
            policy=args.invalid,
            strip_gaps=args.strip_gaps,
            allow_nucleotide=args.allow_nucleotide,
            overwrite=args.overwrite,
            quiet=args.json,
            keep_order=args.keep_order,
        )
    except DataError as e:
        raise e.with_options(PREPROCESS_OPTIONS) from None
    if args.json:
        print_json(manifest, None)
    return 0


def add_parser(dsub: argparse._SubParsersAction) -> None:
    """``data cluster``'s options."""
    p = dsub.add_parser(
        "cluster",
        usage="protein-performer data cluster [options] INPUT [INPUT ...] OUTDIR",
        help="cluster proteins with MMseqs2 into UniRef-style clusters",
        description="Cluster the records of INPUT FASTA file(s) with MMseqs2 and write "
        "OUTDIR/representatives.fasta (UniRef headers), OUTDIR/members.tsv (cluster_id, "
        "member_id) and OUTDIR/manifest.json. Files are read in name order (the clusters do "
        "not depend on the order they are listed in; --keep-order: as listed). Train with "
        "data.clusters=OUTDIR "
        "data.split_by=cluster to hold out whole clusters.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="INPUT... OUTDIR",
        help=f"FASTA file(s) ({COMPRESSIONS}), then the output directory",
    )
    p.add_argument(
        "--min-seq-id", type=float, default=0.5, help="sequence identity (default: %(default)s)"
    )
    p.add_argument(
        "--coverage", type=float, default=0.8, help="alignment coverage (default: %(default)s)"
    )
    p.add_argument(
        "--cov-mode",
        type=int,
        default=0,
        help="MMseqs2 coverage mode: 0 both, 1 target, 2 query (default: %(default)s)",
    )
    p.add_argument(
        "--method",
        choices=["linclust", "cluster"],
        default="linclust",
        help="easy-linclust (fast, linear) or easy-cluster (sensitive) (default: %(default)s)",
    )
    p.add_argument("--threads", type=int, help="MMseqs2 threads (default: all cores)")
    p.add_argument("--tmp-dir", help="MMseqs2 temporary directory (default: next to OUTDIR)")
    p.add_argument("--memory", help="MMseqs2 --split-memory-limit, e.g. 8G (default: all)")
    p.add_argument(
        "--invalid",
        choices=["error", "skip", "replace"],
        default="error",
        help="records with non-residue characters: fail, drop, or map them to X (default: error)",
    )
    p.add_argument("--strip-gaps", action="store_true", help="remove alignment gaps (-, .)")
    p.add_argument(
        "--allow-nucleotide", action="store_true", help="accept records that look like DNA/RNA"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an OUTDIR written by cluster")
    p.add_argument(
        "--keep-order",
        action="store_true",
        help="read the INPUT files in the order given, not by name (MMseqs2's clusters depend "
        "on record order; this rebuilds cluster directories made before files were sorted)",
    )
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=_cmd_cluster)
