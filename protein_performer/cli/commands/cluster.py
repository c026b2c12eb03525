"""data cluster: proteins clustered with MMseqs2 into UniRef-style clusters."""

from __future__ import annotations

import argparse
import sys

from protein_performer.cli.commands.preprocess import PREPROCESS_OPTIONS
from protein_performer.cli.commands.printing import COMPRESSIONS, print_json
from protein_performer.data.fasta import check_distinct_inputs
from protein_performer.errors import ConfigError, DataError


def preset_files(experiment: str) -> list[str]:
    """``data.files`` of the experiment preset ``experiment`` (conf/experiment/NAME.yaml), in
    its order, paths resolved as training resolves them."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from protein_performer.cli.groups import config_dir, group_options, setup_hydra

    if experiment not in group_options("experiment"):
        raise ConfigError(
            f"--experiment: no preset {experiment!r} (the presets: "
            f"{', '.join(group_options('experiment'))})"
        )
    setup_hydra()
    with initialize_config_dir(
        config_dir=str(config_dir()), version_base="1.3", job_name="cluster"
    ):
        cfg = compose(config_name="train", overrides=[f"experiment={experiment}"])
    files = cfg.data.files
    if not files:
        raise ConfigError(
            f"--experiment={experiment}: the preset lists no data.files (it trains on the "
            "files given on its command line: list them for data cluster)"
        )
    return [str(f) for f in OmegaConf.to_container(files, resolve=True)]


def _preset_inputs(args: argparse.Namespace) -> tuple[list[str], str]:
    """``--experiment NAME OUTDIR``: the preset's files and recipe (order, identity) set in
    ``args``; the command it amounts to printed first."""
    from protein_performer.data.cluster_recipes import preset_recipe, recipe_command

    if len(args.paths) != 1:
        raise ConfigError(
            "cluster --experiment NAME takes the OUTDIR only: the files are the preset's "
            "(usage: protein-performer data cluster --experiment NAME OUTDIR)"
        )
    if args.keep_order or args.min_seq_id is not None:
        raise ConfigError(
            "cluster --experiment NAME: the preset's recipe sets the file order and "
            "--min-seq-id (give the files instead to choose them)"
        )
    recipe = preset_recipe(args.experiment)
    inputs, outdir = preset_files(args.experiment), args.paths[0]
    args.keep_order, args.min_seq_id = recipe.keep_order, recipe.min_seq_id
    if not args.json:
        print(f"cluster: {recipe_command(inputs, recipe, outdir)}", file=sys.stderr)
    return inputs, outdir


def _check_shipped_table(experiment: str, outdir: str) -> None:
    """Say whether the table built for ``experiment`` is the one its shipped checkpoint split
    by (the same files, in the same order, give the same digest)."""
    from protein_performer.data.cluster import table_digest
    from protein_performer.data.cluster_recipes import preset_recipe
    from protein_performer.model.checkpoints import load_model, shipped

    name = preset_recipe(experiment).checkpoint
    if name is None or not shipped(name):
        return
    stored = load_model(name)[1].get("data", {}).get("clusters_digest")
    if stored and table_digest(outdir) == stored:
        print(f"cluster: {outdir} is the table checkpoint={name} split by", file=sys.stderr)
    elif stored:
        print(
            f"cluster: warning: {outdir} is not the table checkpoint={name} split by (other "
            "contents in the preset's files?): its split=test would hold proteins it trained on",
            file=sys.stderr,
        )


def _cmd_cluster(args: argparse.Namespace) -> int:
    from protein_performer.data.cluster import cluster_fasta

    if args.experiment:
        inputs, outdir = _preset_inputs(args)
    elif len(args.paths) < 2:
        raise ConfigError(
            "cluster needs at least one INPUT and an OUTDIR "
            "(usage: protein-performer data cluster INPUT [INPUT ...] OUTDIR, or "
            "data cluster --experiment NAME OUTDIR for a preset's table)"
        )
    else:
        *inputs, outdir = args.paths
    if args.min_seq_id is None:
        args.min_seq_id = 0.5
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
    if args.experiment:
        _check_shipped_table(args.experiment, outdir)
    if args.json:
        print_json(manifest, None)
    return 0


def add_parser(dsub: argparse._SubParsersAction) -> None:
    """``data cluster``'s options."""
    p = dsub.add_parser(
        "cluster",
        usage="protein-performer data cluster [options] INPUT [INPUT ...] OUTDIR\n"
        "       protein-performer data cluster --experiment NAME OUTDIR",
        help="cluster proteins with MMseqs2 into UniRef-style clusters",
        description="Cluster the records of INPUT FASTA file(s) with MMseqs2 and write "
        "OUTDIR/representatives.fasta (UniRef headers), OUTDIR/members.tsv (cluster_id, "
        "member_id) and OUTDIR/manifest.json. Files are read in name order (the clusters do "
        "not depend on the order they are listed in; --keep-order: as listed). "
        "--experiment NAME builds the table the preset NAME expects (and its shipped "
        "checkpoint split by) from the preset's own file list. Train with "
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
        "--experiment",
        metavar="NAME",
        help="build the table experiment=NAME expects, from its data.files in its recipe's "
        "order (then give only OUTDIR)",
    )
    p.add_argument("--min-seq-id", type=float, help="sequence identity (default: 0.5)")
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
