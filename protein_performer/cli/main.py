"""``protein-performer <command> [options] [key=value ...]``: a thin layer over the library.

Errors the user can fix are printed as one line (``error: ...``) with exit status 2; add
``--debug`` anywhere on the command line to see the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from protein_performer import __version__
from protein_performer.data.fasta import check_distinct_inputs
from protein_performer.errors import ConfigError, DataError, ProteinPerformerError
from protein_performer.utils.atomic import write_text_atomic
from protein_performer.utils.interrupts import exit_code, sigterm_raises, stopped_line
from protein_performer.utils.outputs import check_output_file, json_with_keys

EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command that a pipe closed on
DOWNLOAD_URLS = {
    level: f"https://ftp.uniprot.org/pub/databases/uniprot/uniref/{level}/{level}.fasta.gz"
    for level in ("uniref50", "uniref90", "uniref100")
}


def _print_json(obj: Any, out: str | None) -> None:
    text = json.dumps(obj, indent=2, default=str)
    if out:
        write_text_atomic(out, text + "\n")
    else:
        print(text)


COMPRESSIONS = "plain, gzip, bzip2 or xz"
# option names in data error messages -> preprocess's flags
PREPROCESS_OPTIONS = {
    "invalid=skip": "--invalid skip",
    "invalid=replace": "--invalid replace",
    "allow_nucleotide=true": "--allow-nucleotide",
    "strip_gaps": "--strip-gaps",
}
STATS_JSON_KEYS = ("files", "records", "residues", "composition")


def _is_simulated_fasta(path: Path) -> bool:
    """Every record of ``path`` is a simulated one (a file simulate wrote, unchanged)."""
    from protein_performer.data.fasta import read_fasta
    from protein_performer.data.simulate import SIMULATED_ID_PREFIX

    try:
        return all(rec.id.startswith(SIMULATED_ID_PREFIX) for rec in read_fasta(path))
    except (DataError, OSError):
        return False


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
    stats = fasta_stats(args.inputs, progress=not args.no_progress)
    if args.json or args.output:
        _print_json(stats, args.output)
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
            f"length:     min {lens['min']:,}  median {lens['p50']:,}  max {lens['max']:,}  "
            f"mean {lens['mean']:,}"
        )
        print(f"            {pct}")
    total = max(stats["residues"], 1)
    comp = sorted(stats["composition"].items(), key=lambda kv: -kv[1])
    print("composition: " + " ".join(f"{a}:{100 * c / total:.1f}%" for a, c in comp))
    print(f"non-standard residues: {stats['nonstandard_residues'] or 'none'}")
    inv = stats["invalid_characters"]
    print(
        "invalid characters (records): "
        + (", ".join(f"{c!r}: {n}" for c, n in inv.items()) if inv else "none")
    )
    if stats["records_without_residues"]:
        print(
            f"records without residues: {stats['records_without_residues']:,} (only a stop "
            "'*': training and preprocess refuse them, or drop them with invalid=skip)"
        )
    nuc = stats["nucleotide_like_records"]
    if nuc:
        print(
            f"nucleotide-like records: {nuc:,} of {stats['records']:,} "
            "(>= 90% A/C/G/T/U/N: this looks like DNA/RNA, not protein)"
        )
    print(f"header kinds: {stats['header_kinds']}")
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
        _print_json(manifest, None)
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
        _print_json(manifest, None)
    return 0


_SIMULATE_FLAGS = {
    "families": ("n_families", int, "number of families"),
    "min_members": ("min_members", int, "fewest members per family"),
    "max_members": ("max_members", int, "most members per family"),
    "root_length_median": ("root_length_median", float, "median root sequence length"),
    "root_length_sigma": ("root_length_sigma", float, "log-normal sigma of root lengths"),
    "min_length": ("min_length", int, "shortest root / member length"),
    "max_length": ("max_length", int, "longest root length"),
    "substitution_rate": ("substitution_rate", float, "substitution events per site per unit"),
    "indel_rate": ("indel_rate", float, "indel events per site per unit"),
    "indel_mean_length": ("indel_mean_length", float, "mean indel length"),
    "gamma_shape": ("gamma_shape", str, "site-rate gamma shape, or 'none' for equal rates"),
    "seed": ("seed", int, "random seed"),
}


def _is_simulated_members_table(path: Path) -> bool:
    """``path`` is a members table that ``data simulate --members`` wrote, unchanged: its
    header, then only simulated families (``SIMF00001``) of simulated records. A user's table,
    or ``data cluster``'s, is never replaced."""
    import re

    from protein_performer.data.simulate import SIMULATED_ID_PREFIX

    row = re.compile(rf"SIMF\d{{5}}\t{re.escape(SIMULATED_ID_PREFIX)}\S*")
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.readline().rstrip("\r\n") != "cluster_id\tmember_id":
                return False
            return all(row.fullmatch(line.rstrip("\r\n")) for line in fh)
    except (OSError, UnicodeDecodeError):
        return False


def _simulate_defaults() -> dict[str, Any]:
    import inspect

    from protein_performer.data.simulate import simulate_fasta

    params = inspect.signature(simulate_fasta).parameters
    return {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}


def _simulate_flags_in(message: str) -> str:
    """The library's parameter names in ``message`` as the command's flags."""
    import re

    for flag, (kw, _, _) in _SIMULATE_FLAGS.items():
        message = re.sub(rf"(?<![\w-]){kw}\b", "--" + flag.replace("_", "-"), message)
    return message.replace(" or None", " or 'none'")


def _cmd_simulate(args: argparse.Namespace) -> int:
    from protein_performer.data.simulate import simulate_fasta

    kwargs = {}
    for flag, (kw, _, _) in _SIMULATE_FLAGS.items():
        value = getattr(args, flag)
        if value is None:
            continue  # library default
        if flag == "gamma_shape":
            try:
                value = None if value.lower() == "none" else float(value)
            except ValueError:
                raise ConfigError(
                    f"--gamma-shape must be a number or 'none', got {value!r}"
                ) from None
        kwargs[kw] = value
    args.output = check_output_file(
        args.output,
        "OUT",
        overwrite=args.overwrite,
        is_ours=_is_simulated_fasta,
        allow_input_name=True,
        what="simulated FASTA file",
    )
    if args.members is not None:
        args.members = check_output_file(
            args.members,
            "--members",
            overwrite=args.overwrite,
            is_ours=_is_simulated_members_table,
            what="members table",
        )
        if Path(args.members).resolve() == Path(args.output).resolve():
            raise ConfigError("--members must name another file than OUT")
        kwargs["members"] = args.members
    try:
        summary = simulate_fasta(args.output, progress=not args.no_progress, **kwargs)
    except ConfigError as e:
        raise ConfigError(_simulate_flags_in(str(e))) from None
    if args.json:
        _print_json(summary, None)
    else:
        print(
            f"wrote {summary['path']}: {summary['records']:,} records, "
            f"{summary['residues']:,} residues, {summary['families']} families"
        )
    return 0


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
        _print_json(summary, None)
    else:
        print("downloaded " + ", ".join(f"{k}={v}" for k, v in summary.items()))
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


def _cmd_hydra(command: str, argv: list[str]) -> int:
    from protein_performer.cli.hydra import run_hydra

    return run_hydra(command, argv)


HYDRA_COMMANDS = (
    "train",
    "evaluate",
    "extract",
    "aa-similarity",
    "plot-heads",
    "score",
    "generate",
)


# ---- parser -----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="protein-performer",
        description="Train Performer protein language models and analyse their attention.",
        epilog="Add --debug anywhere to show tracebacks. "
        "`protein-performer train --help` lists configuration options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    for name, help_ in (
        ("train", "train a model (Hydra overrides: model=performer_softmax trainer.max_steps=..)"),
        ("evaluate", "perplexity/accuracy of a checkpoint on a FASTA (checkpoint=.. fasta=..)"),
        ("extract", "attention maps / representations, one .npz per record (out=DIR)"),
        ("aa-similarity", "amino-acid similarity from a model vs BLOSUM62 (out=DIR)"),
        ("plot-heads", "layers × heads attention figures of one protein (out=DIR)"),
        ("score", "zero-shot mutation scores: masked marginals, causal log-likelihood (out=CSV)"),
        ("generate", "proteins sampled from a causal checkpoint (n=10 out=FASTA)"),
    ):
        p = sub.add_parser(name, help=help_, add_help=False)
        p.add_argument("overrides", nargs=argparse.REMAINDER)

    data = sub.add_parser("data", help="FASTA statistics, preprocessing, simulation, download")
    dsub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)

    p = dsub.add_parser("stats", help="records, lengths, composition and problems of FASTA files")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=f"FASTA file(s): {COMPRESSIONS}")
    p.add_argument("--json", action="store_true", help="print JSON instead of a summary")
    p.add_argument("-o", "--output", help="write JSON to this file")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing -o file (stats JSON only)"
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_stats)

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

    p = dsub.add_parser("simulate", help="evolve protein families along random trees (BLOSUM62)")
    p.add_argument("output", metavar="OUT", help="FASTA to write (.gz for gzip)")
    defaults = _simulate_defaults()
    for flag, (kw, typ, help_) in _SIMULATE_FLAGS.items():
        default = defaults[kw]
        p.add_argument(
            "--" + flag.replace("_", "-"), type=typ, help=f"{help_} (default: {default})"
        )
    p.add_argument(
        "--members",
        metavar="TSV",
        help="also write the families as a cluster members table (for data.packing=family, "
        "data.split_by=cluster)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing OUT written by simulate"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_simulate)

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        parser = build_parser()
        with sigterm_raises():  # SIGTERM cleans up like Ctrl-C (no half-written output)
            if argv and argv[0] in HYDRA_COMMANDS:
                return _cmd_hydra(argv[0], argv[1:])
            args = parser.parse_args(argv)
            return int(args.func(args) or 0)
    except ProteinPerformerError as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        if debug:
            raise
        print(stopped_line(e), file=sys.stderr)
        return exit_code(e)
    except BrokenPipeError:
        # the reader of stdout went away (`... | head`): nothing left to say, and no traceback
        # when Python flushes stdout at exit
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as e:
        # the machine said no (permission, full disk, read-only file system, ...): the
        # commands have already removed what they were writing; one line, as for bad input
        if debug:
            raise
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return EXIT_USAGE


def _repeat_line(example: dict[str, Any], several_files: bool) -> str:
    """``record 4 repeats record 2`` (with several files: of which file each is)."""
    if not several_files or "file" not in example:
        return f"record {example['record']} repeats record {example['first']}"
    return (
        f"record {example['record']} of {example['file']} repeats record "
        f"{example['first']} of {example['first_file']}"
    )


def os_error_line(e: OSError) -> str:
    """``PATH: reason`` of an operating-system error (``PATH -> PATH2`` for a rename)."""
    reason = e.strerror or str(e) or type(e).__name__
    if e.filename is None:
        return reason
    where = str(e.filename) if e.filename2 is None else f"{e.filename} -> {e.filename2}"
    return f"{where}: {reason}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
