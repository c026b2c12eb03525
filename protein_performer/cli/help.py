"""--help of the Hydra commands: the configuration groups, every key with its value and what it does."""

from __future__ import annotations

import dataclasses

from protein_performer.cli.compose import compose_job
from protein_performer.cli.groups import COMMANDS, config_groups, group_options
from protein_performer.errors import ConfigError


# ---- help ---------------------------------------------------------------------------------
def help_text(command: str) -> str:
    if command == "train":
        intro = [
            "usage: protein-performer train [KEY=VALUE ...] [-m] [--json] [--cfg job|all]",
            "",
            "Train a protein language model (Lightning) from Hydra overrides, e.g.",
            "  protein-performer train experiment=demo",
            "  protein-performer train model=transformer trainer.max_steps=500 optim.lr=5e-4",
            "  protein-performer train -m model=performer_relu,performer_softmax,transformer",
            "  protein-performer train experiment=demo ckpt_path=RUN/checkpoints/last.ckpt",
            "Outputs go to hydra.run.dir (default outputs/DATE/TIME; multirun: multirun/DATE/TIME/N):",
            "config.yaml, metrics.csv, checkpoints/{best,last}.ckpt, summary.json.",
        ]
    elif command == "evaluate":
        intro = [
            "usage: protein-performer evaluate checkpoint=PATH fasta=PATH [KEY=VALUE ...] [--json]",
            "",
            "Perplexity and accuracy of a checkpoint on every record of a FASTA file",
            "(deterministic masking from seed=...; output=PATH also writes the JSON to a file).",
        ]
    else:
        intro = [
            f"usage: protein-performer {command} "
            + {
                "score": "checkpoint=PATH sequence=SEQ|fasta=PATH mutations=CSV out=CSV",
                "generate": "checkpoint=PATH out=FASTA",
            }.get(command, "checkpoint=PATH fasta=PATH out=DIR")
            + " [KEY=VALUE ...] [--json]",
            "",
            *(COMMANDS[command].__doc__ or "").replace("``", "").strip().splitlines()[:1],
        ]
    lines = [*intro, "", "options:"]
    if command == "train":
        lines.append("  -m, --multirun   run every combination of comma-separated values (a sweep)")
    lines += [
        "  --json           print the result as JSON on stdout (progress goes to stderr)",
        "  --cfg job|all    print the composed configuration (all: with hydra run dirs; with "
        "--json as JSON), exit",
        "  -h, --help       this help",
    ]
    if command == "train":
        lines += ["", "config groups (GROUP=OPTION):"]
        for g in config_groups():
            lines.append(f"  {g + ':':<12}{', '.join(group_options(g))}")
    else:
        lines += ["", "keys (KEY=VALUE, default in brackets):"]
        lines += [f"  {line}" for line in _command_keys(command)]
    try:
        text = compose_job(command, []).yaml
    except ConfigError:
        text = ""
    if text and command == "train":
        from protein_performer.config.help import TRAIN_KEY_HELP, annotate_yaml

        text = annotate_yaml(text, TRAIN_KEY_HELP)
    if text:
        lines += ["", "default configuration (any key can be overridden, e.g. optim.lr=3e-4):"]
        lines += ["  " + ln for ln in text.rstrip().splitlines()]
    return "\n".join(lines)


_EVALUATE_KEYS = {
    "checkpoint": "a checkpoint written by train, or a shipped name (auto: default; with "
    "context=: homologs-msa)",
    "fasta": "FASTA file, or a list [a.fa,b.fa.gz] (required; unset with split=: the training run's own files)",
    "split": "score one part (train, val or test) of the hash split; unset: every record",
    "split_fractions": "train/val/test fractions of that split (unset: the training run's)",
    "split_seed": "seed of that split (unset: the training run's)",
    "clusters": "`data cluster` output for split_by=cluster (unset: the training run's)",
    "split_by": "record or cluster: how that split was made (unset: the training run's)",
    "max_length": "tokens per sequence (unset: the checkpoint's training value)",
    "mode": "crop or concat (unset: the checkpoint's training value)",
    "mask_prob": "MLM masking rate (unset: the checkpoint's training value)",
    "toks_per_batch": "tokens per batch",
    "crop": "proteins longer than max_length: random (one window) or sliding (every residue)",
    "seed": "masking and cropping seed (same seed, same numbers)",
    "invalid": "invalid residues: error, skip (drop the record) or replace (by X)",
    "strip_gaps": "remove alignment gaps (-, .) before reading sequences",
    "allow_nucleotide": "read records that look like DNA/RNA (an error otherwise)",
    "max_records": "read at most this many records",
    "device": "auto, cpu, cuda or cuda:N",
    "output": "also write the JSON result to this file",
    "overwrite": "replace an existing output file (a result JSON of evaluate only)",
    "attention": "run the weights with another attention kind (e.g. transformer)",
    "nb_features": "random features for a Performer attention",
    "context": "score with homologs before each protein, beside the same proteins alone "
    "(only those): cluster, a FASTA of them or an alignment (a3m, a2m, Stockholm)",
    "context_min_members": "context=cluster: smallest cluster (members) scored",
    "context_max_proteins": "context: score a seeded sample of this many proteins (unset: all)",
    "context_max_identity": "context=ALIGNMENT: homologs more identical to its query are left out (null: none)",
    "context_order": "context: id (targets, homologs and fill drawn by record id: the same "
    "whatever the order of fasta=) or given (file order, as evaluations before 2026-12-04)",
    "context_fill": "context=cluster: fill each window to max_length with other clusters' "
    "proteins, the homologs among them (and score the fill alone too)",
    "context_fill_place": "context_fill=true: random (homologs anywhere among the fill) or "
    "adjacent (right before the target)",
}


def _command_keys(command: str) -> list[str]:
    """``key:  help [default]`` for every key of an evaluate or analysis command."""
    out = []
    fields = dataclasses.fields(COMMANDS[command])
    width = max(len(f.name) for f in fields) + 3  # "name:" and two spaces at least
    for f in fields:
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        shown = "" if default in ("???", None) else f" [{default}]"
        text = f.metadata.get("help") or _EVALUATE_KEYS.get(f.name, "")
        out.append(f"{f.name + ':':<{width}}{text}{shown}")
    return out
