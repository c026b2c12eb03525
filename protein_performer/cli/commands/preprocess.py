"""data preprocess: FASTA tokenized into per-split shards and a manifest."""

from __future__ import annotations

import argparse
import sys

from protein_performer.cli.commands.printing import COMPRESSIONS, print_json
from protein_performer.data.fasta import check_distinct_inputs
from protein_performer.errors import ConfigError, DataError, ProteinPerformerError

# option names in data error messages -> preprocess's flags
PREPROCESS_OPTIONS = {
    "invalid=skip": "--invalid skip",
    "invalid=replace": "--invalid replace",
    "allow_nucleotide=true": "--allow-nucleotide",
    "strip_gaps": "--strip-gaps",
}


def _cmd_preprocess(args: argparse.Namespace) -> int:
    from protein_performer.data.cluster import read_members
    from protein_performer.data.shards import preprocess

    if len(args.paths) < 2:
        raise ConfigError(
            "preprocess needs at least one INPUT and an OUTDIR "
            "(usage: protein-performer data preprocess INPUT [INPUT ...] OUTDIR)"
        )
    *inputs, outdir = args.paths
    check_distinct_inputs({"INPUT": inputs, "--val": args.val, "--test": args.test})
    try:
        manifest = preprocess(
            inputs,
            outdir,
            val_inputs=args.val or (),
            test_inputs=args.test or (),
            fractions=args.fractions,
            seed=args.seed,
            policy=args.invalid,
            overwrite=args.overwrite,
            progress=not args.no_progress,
            strip_gaps=args.strip_gaps,
            allow_nucleotide=args.allow_nucleotide,
            cluster_of=read_members(args.clusters) if args.clusters else None,
            clusters=args.clusters,
        )
    except DataError as e:
        raise e.with_options(PREPROCESS_OPTIONS) from None
    except ValueError as e:
        if isinstance(e, ProteinPerformerError):
            raise
        raise ConfigError(str(e)) from None
    if args.json:
        print_json(manifest, None)
        return 0
    c = manifest["counts"]
    print(
        f"wrote {outdir}  ({manifest['elapsed_s']:.1f} s, "
        f"{manifest['records_per_s'] or 0:,.0f} records/s, {manifest['mb_per_s']} MB/s)"
    )
    for split, s in manifest["splits"].items():
        print(f"  {split:5s} {s['records']:>10,} records {s['residues']:>14,} residues")
    fractions = dict(
        zip(("train", "val", "test"), manifest["split"].get("fractions") or [1] * 3, strict=True)
    )
    empty = [split for split, s in manifest["splits"].items() if not s["records"]]
    # a split asked to be empty (fraction 0: e.g. 0,0,1 for a held-out file) is not a problem
    short = [split for split in empty if fractions.get(split, 1) > 0]
    if short and manifest["split"]["method"] != "explicit":
        print(
            f"warning: the {' and '.join(short)} split{'s are' if len(short) > 1 else ' is'} "
            f"empty (fractions {manifest['split']['fractions']}, {c['records_kept']:,} records "
            "kept): too few records or clusters to split",
            file=sys.stderr,
        )
    if "train" in empty and fractions.get("train", 1) == 0:
        print(
            "note: no train split (its fraction is 0): these shards can be evaluated on, "
            "not trained on",
            file=sys.stderr,
        )
    leaks = manifest["held_out_in_train"] or {}
    for split in ("val", "test"):
        if leaks.get(split):
            shown = leaks["examples"][split]
            example = f" (e.g. {shown[0]})" if shown else ""
            hint = (
                "; --clusters keeps such copies on one side"
                if manifest["split"]["method"] == "hash"
                and not str(manifest["split"].get("key", "")).startswith("cluster")
                else ""
            )
            print(
                f"warning: {leaks[split]:,} of {manifest['splits'][split]['records']:,} {split} "
                f"records are identical to a training record{example}: "
                f"their metrics are not held out{hint}",
                file=sys.stderr,
            )
    print(
        f"  skipped (invalid or empty) {c['skipped_invalid'] + c.get('skipped_empty', 0):,}, "
        f"records with replacements "
        f"{c['records_replaced']:,}, duplicate ids {manifest['duplicate_ids']['count']:,}"
    )
    return 0


def add_parser(dsub: argparse._SubParsersAction) -> None:
    """``data preprocess``'s options."""
    p = dsub.add_parser(
        "preprocess",
        usage="protein-performer data preprocess [options] INPUT [INPUT ...] OUTDIR",
        help="tokenize FASTA into per-split shards + manifest",
        description="Tokenize INPUT FASTA file(s) into OUTDIR/{train,val,test} token shards "
        "and OUTDIR/manifest.json. Records are split by hashing the UniRef cluster id "
        "(else accession) unless --val/--test give explicit files.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="INPUT... OUTDIR",
        help=f"FASTA file(s) ({COMPRESSIONS}), then the output directory",
    )
    p.add_argument("--val", action="append", metavar="FASTA", help="explicit validation file")
    p.add_argument("--test", action="append", metavar="FASTA", help="explicit test file")
    p.add_argument(
        "--fractions",
        default="0.9,0.05,0.05",
        help="train,val,test (hash split; default: %(default)s)",
    )
    p.add_argument("--seed", type=int, default=0, help="split seed (default: %(default)s)")
    p.add_argument(
        "--clusters",
        metavar="DIR",
        help="`data cluster` output: split whole clusters (no homolog across splits)",
    )
    p.add_argument(
        "--invalid",
        choices=["error", "skip", "replace"],
        default="error",
        help="records with non-residue characters: fail, drop, or map them to X (default: error)",
    )
    p.add_argument(
        "--strip-gaps",
        action="store_true",
        help="remove alignment gaps (-, .) instead of treating them as invalid characters",
    )
    p.add_argument(
        "--allow-nucleotide",
        action="store_true",
        help="accept records that look like DNA/RNA (refused by default)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing OUTDIR written by preprocess (never anything else)",
    )
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_preprocess)
