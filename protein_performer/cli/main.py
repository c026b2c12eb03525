"""``protein-performer <command> [options] [key=value ...]``: a thin layer over the library.

Errors the user can fix are printed as one line (``error: ...``) with exit status 2; add
``--debug`` anywhere on the command line to see the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from protein_performer.cli.commands import (
    cluster,
    download,
    preprocess,
    search,
    simulate,
    stats,
)
from protein_performer.errors import ProteinPerformerError
from protein_performer.utils.interrupts import exit_code, sigterm_raises, stopped_line
from protein_performer.version import __version__

EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command that a pipe closed on


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

    data = sub.add_parser(
        "data",
        help="FASTA statistics, preprocessing, clustering, homolog search, simulation, download",
    )
    dsub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)

    for command in (stats, preprocess, cluster, search, simulate, download):
        command.add_parser(dsub)
    for subparser in dsub.choices.values():  # its own usage for an unknown option
        subparser.set_defaults(parser=subparser)
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
            args, unknown = parser.parse_known_args(argv)
            if unknown:  # argparse blames the top parser: name the subcommand's options
                args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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


def os_error_line(e: OSError) -> str:
    """``PATH: reason`` of an operating-system error (``PATH -> PATH2`` for a rename)."""
    reason = e.strerror or str(e) or type(e).__name__
    if e.filename is None:
        return reason
    where = str(e.filename) if e.filename2 is None else f"{e.filename} -> {e.filename2}"
    return f"{where}: {reason}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
