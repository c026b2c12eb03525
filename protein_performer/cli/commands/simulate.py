"""data simulate: protein families evolved along random trees (BLOSUM62)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from protein_performer.cli.commands.printing import print_json
from protein_performer.errors import ConfigError, DataError
from protein_performer.utils.outputs import check_output_file


def _is_simulated_fasta(path: Path) -> bool:
    """Every record of ``path`` is a simulated one (a file simulate wrote, unchanged)."""
    from protein_performer.data.fasta import read_fasta
    from protein_performer.data.simulate import SIMULATED_ID_PREFIX

    try:
        return all(rec.id.startswith(SIMULATED_ID_PREFIX) for rec in read_fasta(path))
    except (DataError, OSError):
        return False


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
        print_json(summary, None)
    else:
        print(
            f"wrote {summary['path']}: {summary['records']:,} records, "
            f"{summary['residues']:,} residues, {summary['families']} families"
        )
    return 0


def add_parser(dsub: argparse._SubParsersAction) -> None:
    """``data simulate``'s options."""
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
