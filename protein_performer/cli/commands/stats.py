"""data stats: records, lengths, composition and problems of FASTA files."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from protein_performer.cli.commands.preprocess import PREPROCESS_OPTIONS
from protein_performer.cli.commands.printing import COMPRESSIONS, print_json
from protein_performer.data.fasta import check_distinct_inputs
from protein_performer.errors import DataError
from protein_performer.utils.outputs import check_output_file, json_with_keys

STATS_JSON_KEYS = ("files", "records", "residues", "composition")


# ---- data commands ----------------------------------------------------------------------
def _cmd_stats(args: argparse.Namespace) -> int:
    from protein_performer.data.stats import fasta_stats

    if args.output:
        args.output = check_output_file(
            args.output,
            "-o/--output",
            overwrite=args.overwrite,
            is_ours=json_with_keys(STATS_JSON_KEYS),
            what="statistics JSON file",
        )
    check_distinct_inputs({"INPUT": args.inputs})
    try:
        stats = fasta_stats(args.inputs, progress=not args.no_progress)
    except DataError as e:  # stats reads any FASTA: the fixes are preprocess's flags
        raise e.with_options(PREPROCESS_OPTIONS) from None
    if args.json or args.output:
        print_json(stats, args.output)
        if args.output:
            print(
                f"wrote {args.output}: {stats['records']:,} records, {stats['residues']:,} "
                "residues",
                file=sys.stderr,
            )
        return 0
    lens = stats["lengths"]
    print(f"files:      {', '.join(f['path'] for f in stats['files'])}")
    print(f"records:    {stats['records']:,}")
    print(f"residues:   {stats['residues']:,}")
    if stats["records"]:
        pct = "  ".join(f"{k}={lens[k]:,}" for k in lens if k.startswith("p"))
        print(
            f"length:     min {lens['min']:,}  median {lens['median']:,}  max {lens['max']:,}  "
            f"mean {lens['mean']:,}"
        )
        print(f"            {pct} (nearest rank)")
    total = max(stats["residues"], 1)
    comp = sorted(stats["composition"].items(), key=lambda kv: -kv[1])
    print("composition: " + " ".join(f"{a}:{100 * c / total:.1f}%" for a, c in comp))
    extra = stats["nonstandard_residues"]
    print(
        "non-standard residues: "
        + (", ".join(f"{c} {n:,}" for c, n in extra.items()) if extra else "none")
    )
    inv = stats["invalid_characters"]
    print(
        "invalid characters (records): "
        + (", ".join(f"{c!r} in {n:,}" for c, n in inv.items()) if inv else "none")
    )
    for key, what in (
        ("records_with_lowercase", "lowercase letters (read as uppercase)"),
        ("records_with_stop", "a final stop '*' (dropped)"),
    ):
        if stats[key]:
            print(f"records with {what}: {stats[key]:,}")
    if stats["records_without_residues"]:
        print(
            f"records without residues: {stats['records_without_residues']:,} (no sequence, or "
            "only a stop '*': training and preprocess refuse them, or drop them with "
            "--invalid skip)"
        )
    nuc = stats["nucleotide_like_records"]
    if nuc:
        print(
            f"nucleotide-like records: {nuc:,} of {stats['records']:,} "
            "(>= 90% A/C/G/T/U/N: this looks like DNA/RNA, not protein)"
        )
    kinds = stats["header_kinds"]
    print("header kinds: " + ", ".join(f"{k} {n:,}" for k, n in kinds.items()))
    dup = stats["duplicate_ids"]
    print(
        f"duplicate ids: {dup['count']}"
        + (
            " (e.g. "
            + ", ".join(_repeat_line(e, len(stats["files"]) > 1) for e in dup["examples"][:3])
            + ")"
            if dup["count"]
            else ""
        )
    )
    same = stats["identical_sequences"]
    print(
        f"identical sequences: {same['count']:,}"
        + (
            (" record repeats" if same["count"] == 1 else " records repeat")
            + " an earlier record's sequence (e.g. "
            + _repeat_line(same["examples"][0], len(stats["files"]) > 1)
            + "; a split by record can put such copies on both sides: data.split_by=cluster)"
            if same["count"]
            else ""
        )
    )
    comments = sum(f.get("comment_lines", 0) for f in stats["files"])
    if comments:
        print(f"comment lines (';', not sequence): {comments:,} skipped")
    return 0


def _repeat_line(example: dict[str, Any], several_files: bool) -> str:
    """``record 4 repeats record 2`` (with several files: of which file each is)."""
    if not several_files or "file" not in example:
        return f"record {example['record']} repeats record {example['first']}"
    return (
        f"record {example['record']} of {example['file']} repeats record "
        f"{example['first']} of {example['first_file']}"
    )


def add_parser(dsub: argparse._SubParsersAction) -> None:
    """``data stats``'s options."""
    p = dsub.add_parser("stats", help="records, lengths, composition and problems of FASTA files")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=f"FASTA file(s): {COMPRESSIONS}")
    p.add_argument("--json", action="store_true", help="print JSON instead of a summary")
    p.add_argument("-o", "--output", help="write JSON to this file")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing -o file (stats JSON only)"
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_stats)
