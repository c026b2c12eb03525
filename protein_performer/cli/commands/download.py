"""data download: a UniRef FASTA streamed from UniProt to disk (resumable, verified)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from protein_performer.cli.commands.printing import print_json
from protein_performer.utils.outputs import check_output_file

DOWNLOAD_URLS = {
    level: f"https://ftp.uniprot.org/pub/databases/uniprot/uniref/{level}/{level}.fasta.gz"
    for level in ("uniref50", "uniref90", "uniref100")
}


def download_line(summary: dict) -> str:
    """The printed summary of a download: where, how much, from where, its digest."""
    counted = [
        f"{summary[k]:,} {k}"
        for k in ("records", "residues", "bytes")
        if summary.get(k) is not None
    ]
    how = (
        " (resumed)"
        if summary.get("resumed")
        else " (the first records; the source has more)"
        if summary.get("source_exhausted") is False
        else ""
    )
    return (
        f"downloaded {summary.get('path')}: {', '.join(counted)}{how} in "
        f"{summary.get('seconds', 0):.1f} s from {summary.get('url')}; sha256 {summary.get('sha256')}"
    )


def _cmd_download(args: argparse.Namespace) -> int:
    from protein_performer.data.download import download

    url = args.url or DOWNLOAD_URLS[args.dataset]
    # a downloaded FASTA cannot be told from a user's: an existing OUT is never replaced
    args.output = str(
        check_output_file(
            args.output, "OUT", allow_input_name=True, what="FASTA file", overwrite_hint=None
        )
    )
    try:
        summary = download(
            url,
            args.output,
            max_records=args.max_records,
            progress=not args.no_progress,
            timeout=args.timeout,
            resume=not args.no_resume,
            verify=not args.no_verify,
        )
    except KeyboardInterrupt:
        part = Path(args.output + ".part")
        if args.max_records is None and part.is_file():
            print(f"{part} kept: the same command resumes it", file=sys.stderr)
        raise
    if args.json:
        print_json(summary, None)
    else:
        print(download_line(summary))
    if summary.get("mode") != "full":
        return 0  # max_records: written gzip exactly when OUT ends in .gz
    from protein_performer.data.download import compression_of

    with open(args.output, "rb") as fh:
        kind = compression_of(fh.read(8))
    suffix = Path(args.output).suffix
    named = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}.get(suffix)
    if kind != named:
        # this project reads any of them by content; other tools go by the name
        state = f"{kind}-compressed" if kind else "not compressed"
        name = f"its name ends in {suffix}" if named else "its name says no compression"
        print(f"note: {args.output} is {state} but {name}", file=sys.stderr)
    return 0


def add_parser(dsub: argparse._SubParsersAction) -> None:
    """``data download``'s options."""
    p = dsub.add_parser("download", help="stream a UniRef FASTA from UniProt to disk")
    p.add_argument("dataset", choices=sorted(DOWNLOAD_URLS), help="which UniRef release")
    p.add_argument("output", metavar="OUT")
    p.add_argument("--url", help="override the download URL (mirror, local server)")
    p.add_argument("--max-records", type=int, help="stop after N records")
    p.add_argument("--timeout", type=float, default=60.0, help="network timeout (s)")
    p.add_argument("--no-resume", action="store_true", help="ignore an existing OUT.part")
    p.add_argument(
        "--no-verify", action="store_true", help="skip the final check (decompression, FASTA)"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_download)
