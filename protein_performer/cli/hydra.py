"""Hydra glue for ``protein-performer train|evaluate [overrides...]``.

Configs are composed with Hydra's compose API from ``conf/`` (next to the package) against
the dataclass schemas of :mod:`protein_performer.config.schema`. Multirun sweeps (``-m a=x,y``) are
expanded here with Hydra's override parser (a cartesian product, like Hydra's basic sweeper)
and run one after another, each in ``<hydra.sweep.dir>/<job number>``. Every configuration
problem becomes a one-line :class:`~protein_performer.errors.ConfigError` naming the key and,
where there is a fixed set, the valid choices.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import sys
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protein_performer.config.schema import ANALYSIS_COMMANDS, EvalConfig, TrainConfig
from protein_performer.config.validate import (
    validate_analysis_config,
    validate_eval_config,
    validate_train_config,
)
from protein_performer.errors import ConfigError, ProteinPerformerError
from protein_performer.utils.interrupts import TERMINATING
from protein_performer.utils.resources import project_path, project_root, resources_dir

COMMANDS: dict[str, type] = {"train": TrainConfig, "evaluate": EvalConfig, **ANALYSIS_COMMANDS}
# A DDP child process started by Lightning re-runs the same command line; this variable tells
# it which sweep job and run directory its parent is on.
DDP_JOB_ENV = "PROTEIN_PERFORMER_DDP_JOB"


def register_configs() -> None:
    """Register the schemas in Hydra's ConfigStore (``train_schema``, ``evaluate_schema``)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="evaluate_schema", node=EvalConfig)
    for name, node in ANALYSIS_COMMANDS.items():
        cs.store(name=f"{name}_schema", node=node)


# ---- locations ----------------------------------------------------------------------------
def config_dir() -> Path:
    # an installed wheel's own copy first: its project_root() is site-packages
    candidates = (resources_dir() / "conf", project_root() / "conf")
    for candidate in candidates:
        if (candidate / "train.yaml").is_file():
            return candidate
    raise ConfigError(
        "Hydra config directory not found (looked for "
        + " and ".join(f"{c}/train.yaml" for c in candidates)
        + "); reinstall protein-performer"
    )


def worker_count(most: str | int) -> int:
    """Resolver ``${pp_workers:4}``: at most ``most`` data-loading workers, and no more than
    the CPUs this process may use (more only contend, and torch warns about them)."""
    from protein_performer.utils.devices import usable_cpus

    return max(0, min(int(most), usable_cpus()))


def group_options(group: str) -> list[str]:
    """Option names of a config group (``model`` -> ``["performer_relu", ...]``)."""
    d = config_dir() / group
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def config_groups() -> list[str]:
    return sorted(p.name for p in config_dir().iterdir() if p.is_dir() and any(p.glob("*.yaml")))


_SETUP_DONE = False


def _setup() -> None:
    global _SETUP_DONE
    if _SETUP_DONE:
        return
    from hydra.core.utils import setup_globals
    from omegaconf import OmegaConf

    setup_globals()  # ${now:...} and friends
    OmegaConf.register_new_resolver("pp_root", project_path, replace=True)
    OmegaConf.register_new_resolver("pp_workers", worker_count, replace=True)
    register_configs()
    _SETUP_DONE = True


# ---- argument parsing ---------------------------------------------------------------------
@dataclass
class CliArgs:
    overrides: list[str] = field(default_factory=list)
    multirun: bool = False
    json: bool = False
    help: bool = False
    cfg: str | None = None


def parse_args(argv: Sequence[str], command: str = "train") -> CliArgs:
    args = CliArgs()
    it = iter(argv)
    for a in it:
        if a in ("-m", "--multirun"):
            args.multirun = True
        elif a == "--json":
            args.json = True
        elif a in ("-h", "--help"):
            args.help = True
        elif a in ("-c", "--cfg") or a.startswith("--cfg="):
            value = a.split("=", 1)[1] if "=" in a else next(it, None)
            if value not in ("job", "all"):
                raise ConfigError(f"--cfg takes 'job' or 'all' (got {value!r})")
            args.cfg = value
        elif a.startswith("-"):
            options = ("-m/--multirun, " if command == "train" else "") + "--json, --cfg job|all"
            hint = "configuration is given as key=value overrides"
            if a.startswith("--") and "=" in a:
                hint += f", e.g. {a[2:]}"
            raise ConfigError(f"unknown option {a!r}; options: {options}, --help ({hint})")
        elif "=" not in a and not a.startswith("~"):
            example = "model=transformer" if command == "train" else "checkpoint=PATH fasta=PATH"
            raise ConfigError(
                f"expected KEY=VALUE, got {a!r} (settings are key=value overrides, e.g. {example})"
            )
        else:
            args.overrides.append(quote_home(a))
    return args


# ---- error translation --------------------------------------------------------------------
def _schema_at(root: type, dotted: str) -> type | None:
    """The dataclass type at ``dotted`` (``"trainer"`` -> TrainerConfig), None if not one."""
    t: Any = root
    for part in [p for p in dotted.split(".") if p]:
        if not dataclasses.is_dataclass(t):
            return None
        hints = typing.get_type_hints(t)
        if part not in hints:
            return None
        t = hints[part]
    return t if dataclasses.is_dataclass(t) else None


#: other tools' names for this project's keys, tried in order (the first the command has wins)
KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "ckpt": ("ckpt_path", "checkpoint"),
    "model_path": ("checkpoint",),
    "model_location": ("checkpoint",),
    "resume_from_checkpoint": ("ckpt_path",),
    "fasta_file": ("fasta", "data.files"),
    "output_dir": ("out", "output"),
    "batch_size": ("data.batch_size", "toks_per_batch"),
    "epochs": ("trainer.max_steps",),
    "max_epochs": ("trainer.max_steps",),
}


def _unknown_key_message(root: type, full_key: str) -> str:
    parent, _, leaf = full_key.rpartition(".")
    schema = _schema_at(root, parent)
    if schema is None:
        return f"unknown config key '{full_key}'"
    valid = [f.name for f in dataclasses.fields(schema)]
    where = f"'{parent}'" if parent else "the top level"
    prefix = f"{parent}." if parent else ""
    hints = [prefix + h for h in difflib.get_close_matches(leaf, valid, n=1)]
    if not hints:  # the key of another group (lr= for optim.lr, max_steps= for trainer...)
        same = [k for k in _all_keys(root) if k.rpartition(".")[2] == leaf]
        hints = sorted(same, key=lambda k: k.count("."))[:1]  # the top-level one first
    if not hints:  # what other tools call it (ESM's and Lightning's spellings)
        keys = set(_all_keys(root))
        hints = [k for k in KEY_ALIASES.get(full_key, ()) if k in keys][:1]
    suggestion = f" (did you mean '{hints[0]}'?)" if hints else ""
    return f"unknown config key '{full_key}'{suggestion}; valid keys in {where}: {', '.join(valid)}"


def _all_keys(schema: type, prefix: str = "") -> Iterator[str]:
    """Every dotted key of a config dataclass, nested groups included."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        t = hints.get(f.name)
        if dataclasses.is_dataclass(t):
            yield from _all_keys(t, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return " ".join(lines[:2]) if lines else ""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


_KIND_WORDS = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}


def _plain_validation_message(msg: str, key: str | None) -> str:
    """OmegaConf's wording of a type error in the user's terms."""
    if "is not a ListConfig" in msg:
        return f"expected a list, e.g. {key}=[a,b]"
    if "is not Optional" in msg:
        return "cannot be null"
    m = re.match(r"Cannot convert '(?:list|ListConfig)' to string: '(.*)'", msg)
    if m:
        return f"takes one value, not a list (got {m[1]})"
    m = re.match(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)", msg)
    if m:
        value, kind = m[1], _KIND_WORDS.get(m[3], m[3].lower())
        if m[3] == "Integer" and m[2] == "float":
            try:
                whole = float(value)
            except ValueError:
                whole = None
            if whole is not None and whole.is_integer():
                return f"must be {kind}; got {value}: write {int(whole)}"
        return f"must be {kind}; got {value!r}"
    m = re.match(r"Value '(.*)' is not a valid bool", msg)
    if m:
        return f"must be true or false; got {m[1]!r}"
    return msg


def to_config_error(exc: BaseException, command: str) -> ConfigError:
    """Translate a Hydra / OmegaConf composition error into a one-line ConfigError."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import (
        ConfigAttributeError,
        ConfigKeyError,
        MissingMandatoryValue,
        ValidationError,
    )

    root = COMMANDS[command]
    for e in _chain(exc):
        if isinstance(e, ConfigError):
            return e
        if isinstance(e, OverrideParseException):
            lines = [ln.strip() for ln in str(e.message).splitlines()]
            if lines and lines[0].startswith("Error parsing override") and len(lines) > 1:
                # the grammar read it; evaluating it failed (int(abc), range(1,x) ...)
                return ConfigError(f"cannot read {e.override!r}: {lines[1]}")
            return ConfigError(
                f"cannot read {e.override!r}: quote a value holding spaces, commas, brackets, "
                "quotes or a leading ~ (key='a b'), write a list as key=[a,b] and one item as "
                "key.0=x"
            )
        if isinstance(e, MissingConfigException):
            missing = e.missing_cfg_file or ""
            group, _, option = missing.rpartition("/")
            if group and e.options is not None:
                return ConfigError(
                    f"unknown {group} '{option}'; valid choices for {group}: "
                    f"{', '.join(sorted(e.options)) or '(none)'}"
                )
            return ConfigError(_one_line(str(e)))
        if isinstance(e, MissingMandatoryValue):
            key = getattr(e, "full_key", "") or "value"
            return ConfigError(f"{key}=... is required for {command}")
        if isinstance(e, (ConfigKeyError, ConfigAttributeError)):
            key = getattr(e, "full_key", None)
            if key:
                return ConfigError(_unknown_key_message(root, str(key)))
        if isinstance(e, ValidationError):
            key = getattr(e, "full_key", None)
            msg = _plain_validation_message(
                (str(getattr(e, "msg", None) or e).strip().splitlines() or [""])[0], key
            )
            return ConfigError(f"{key}: {msg}" if key else msg)
    return ConfigError(_one_line(str(exc)) or type(exc).__name__)


# ---- composition --------------------------------------------------------------------------
def _check_extra_keys(node: Any, root: type, schema: type, prefix: str = "") -> None:
    """Keys added with ``+key=value`` that the schema does not have are errors too."""
    from omegaconf import DictConfig

    names = {f.name for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    for key in node:
        full = f"{prefix}{key}"
        if key not in names:
            raise ConfigError(_unknown_key_message(root, full))
        child = node._get_node(key)
        if isinstance(child, DictConfig) and dataclasses.is_dataclass(hints[key]):
            _check_extra_keys(child, root, hints[key], f"{full}.")


def _check_group_overrides(overrides: Sequence[Any]) -> None:
    """Fail early, with the list of choices, on ``model=foo`` style overrides."""
    groups = set(config_groups())
    for o in overrides:
        key = o.key_or_group
        if key not in groups or o.is_delete():
            continue
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.value()]
        options = group_options(key)
        for v in values:
            if v is None:
                continue
            if str(v) not in options:
                raise ConfigError(
                    f"unknown {key} '{v}'; valid choices for {key}: {', '.join(options)}"
                )


def expand_overrides(
    overrides: Sequence[str], multirun: bool, command: str = "train"
) -> list[list[str]]:
    """One override list per job: the cartesian product of every sweep (``k=a,b``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides([quote_home(o) for o in overrides])
    except HydraException as e:
        raise to_config_error(e, "train") from None
    _check_group_overrides(parsed)
    sweeps = [o for o in parsed if o.is_sweep_override()]
    if sweeps and not multirun:
        o = sweeps[0]
        run_all = (
            "add -m/--multirun to run every value"
            if command == "train"
            else f"{command} runs one setting at a time (sweeps are for train -m)"
        )
        raise ConfigError(f"'{o.input_line}' is a sweep; {run_all} (or quote a list as key=[a,b])")
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] for o in sweeps]
    return [fixed + list(combo) for combo in itertools.product(*choices)] if choices else [fixed]


def _list_item_type(schema: type, key: str) -> type | None:
    """The item type of ``key`` (dotted) when the schema types it a list of str or int."""
    node: Any = schema
    for part in key.split("."):
        if not dataclasses.is_dataclass(node):
            return None
        hint = typing.get_type_hints(node).get(part)
        if hint is None:
            return None
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
        node = args[0] if optional and len(args) == 1 else hint
    if typing.get_origin(node) is not list:
        return None
    (item,) = typing.get_args(node) or (None,)
    return item if item in (str, int) else None


#: config keys that name files or folders: a leading ``~`` is the user's home, as in a shell
PATH_KEYS = frozenset(
    [
        "files",
        "val_files",
        "test_files",
        "shards",
        "clusters",
        "init_from",
        "ckpt_path",
        "checkpoint",
        "fasta",
        "output",
        "out",
        "mutations",
        "context",
        "homologs",
    ]
)


def quote_home(text: str) -> str:
    """``key=~/x`` as ``key='~/x'``: Hydra's grammar reads an unquoted ``~`` as an error, and
    the shell does not expand it after ``=``."""
    match = re.fullmatch(r"([+]?[\w.]+)=(~[^\s'\",\[\]]*)", text)
    if match:
        return f"{match[1]}='{match[2]}'"
    match = re.fullmatch(r"([+]?[\w.]+)=\[([^'\"\[\]]*~[^'\"\[\]]*)\]", text)
    if match:  # key=[~/a,b]: the items that start with ~
        items = [i.strip() for i in match[2].split(",")]
        quoted = [f"'{i}'" if i.startswith("~") else i for i in items]
        return f"{match[1]}=[{','.join(quoted)}]"
    return text


def expand_home(node: Any) -> bool:
    """Expand a leading ``~`` in every path key (:data:`PATH_KEYS`) of a composed config;
    True when one was."""
    changed = False
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            changed |= expand_home(value)
        elif f.name in PATH_KEYS:
            if isinstance(value, str):
                new: Any = os.path.expanduser(value)
            elif isinstance(value, list):
                new = [os.path.expanduser(v) if isinstance(v, str) else v for v in value]
            else:
                continue
            if new != value:
                setattr(node, f.name, new)
                changed = True
    return changed


def scalars_as_lists(command: str, overrides: Sequence[str]) -> list[str]:
    """``data.files=x.fa`` as ``data.files=[x.fa]``: one value given for a key that takes a
    list of paths or integers is that list of one (as ESM's and most CLIs' repeatable options
    are); anything else is passed on unchanged for Hydra to judge."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out = []
    for text in overrides:
        try:
            (o,) = parser.parse_overrides([text])
        except HydraException:
            out.append(text)
            continue
        item = None
        if not o.is_delete() and o.value_type == ValueType.ELEMENT:
            item = _list_item_type(COMMANDS[command], o.key_or_group)
        value = o.value() if item is not None else None
        leaf = o.key_or_group.rpartition(".")[2]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if isinstance(value, str) and re.fullmatch(r"\$\{[\w.]+\}", value):
            out.append(text)  # another key's value (maybe a list): OmegaConf resolves it
        elif item is str and (isinstance(value, str) or number):
            # a number is the text as typed, quoted: 1.10 names a file here, not 1.1
            literal = value if isinstance(value, str) else text.split("=", 1)[1]
            out.append(f"{o.get_key_element()}=[{_hydra_value(literal, quote=number)}]")
        elif item is None and leaf in PATH_KEYS and o.value_type == ValueType.ELEMENT:
            raw = o.value()
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                out.append(
                    f"{o.get_key_element()}={_hydra_value(text.split('=', 1)[1], quote=True)}"
                )
            else:
                out.append(text)
        elif item is int and isinstance(value, int) and not isinstance(value, bool):
            out.append(f"{o.get_key_element()}=[{value}]")
        else:
            out.append(text)
    return out


@dataclass
class ComposedJob:
    overrides: list[str]
    config: Any  # TrainConfig | EvalConfig
    yaml: str
    run_dir: str
    sweep_dir: str


def compose_job(command: str, overrides: Sequence[str]) -> ComposedJob:
    """Compose, type-check and validate one job's config."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    _setup()
    overrides = scalars_as_lists(command, [quote_home(o) for o in overrides])
    try:
        with initialize_config_dir(
            config_dir=str(config_dir()), version_base="1.3", job_name=command
        ):
            cfg = compose(config_name=command, overrides=list(overrides), return_hydra_config=True)
        run_dir = os.path.expanduser(str(cfg.hydra.run.dir))
        sweep_dir = os.path.expanduser(str(cfg.hydra.sweep.dir))
        with open_dict(cfg):
            del cfg["hydra"]
        _check_extra_keys(cfg, COMMANDS[command], COMMANDS[command])
        obj = OmegaConf.to_object(cfg)
        if expand_home(obj):  # --cfg job shows the paths the run will use
            text = OmegaConf.to_yaml(OmegaConf.structured(obj))
        else:
            text = OmegaConf.to_yaml(cfg, resolve=True)
    except ConfigError:
        raise
    except Exception as e:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if isinstance(e, (HydraException, OmegaConfBaseException)):
            raise to_config_error(e, command) from None
        raise
    if command == "train":
        validate_train_config(obj)
    elif command == "evaluate":
        validate_eval_config(obj)
    else:
        validate_analysis_config(obj)
    return ComposedJob(list(overrides), obj, text, run_dir, sweep_dir)


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
    "checkpoint": "a checkpoint written by train (default: the shipped one)",
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
    "context": "also score with homologs before each protein: cluster or a FASTA of them",
    "context_min_members": "context=cluster: smallest cluster (members) scored",
    "context_max_proteins": "context: score a seeded sample of this many proteins (unset: all)",
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


# ---- entry point --------------------------------------------------------------------------
def _ddp_child_job() -> dict[str, Any] | None:
    """The job a Lightning-launched DDP child process must run (set by its parent)."""
    raw = os.environ.get(DDP_JOB_ENV)
    if raw and os.environ.get("LOCAL_RANK", "0") != "0":
        return json.loads(raw)
    return None


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def run_hydra(command: str, argv: list[str]) -> int:
    """Run ``train`` or ``evaluate`` with Hydra-style ``argv``; returns the exit code (0).

    Configuration problems raise :class:`ConfigError`; bad data raises ``DataError``. Results
    (the train summary, the evaluate metrics) are printed on stdout, as JSON with ``--json``.
    """
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r}; choose one of: {', '.join(COMMANDS)}")
    args = parse_args(argv, command)
    _setup()
    if args.help:
        print(help_text(command))
        return 0
    if args.multirun and command != "train":
        raise ConfigError("-m/--multirun is only supported by train")
    job_lists = expand_overrides(args.overrides, args.multirun, command)
    jobs = [compose_job(command, ov) for ov in job_lists]  # fail before any work starts
    if args.cfg:
        if args.json:  # one JSON object per job, a line each (as --json results are)
            from omegaconf import OmegaConf

            for job in jobs:
                data = OmegaConf.to_container(OmegaConf.create(job.yaml))
                if args.cfg == "all":
                    data["hydra"] = {"run": {"dir": job.run_dir}, "sweep": {"dir": job.sweep_dir}}
                print(json.dumps(data))
            return 0
        for job in jobs:
            if len(jobs) > 1:
                print(f"# overrides: {' '.join(job.overrides)}")
            print(job.yaml, end="")
            if args.cfg == "all":
                print(f"hydra:\n  run:\n    dir: {job.run_dir}\n  sweep:\n    dir: {job.sweep_dir}")
        return 0
    if command == "evaluate":
        return _run_evaluate(jobs[0], args)
    if command in ANALYSIS_COMMANDS:
        return _run_analysis(command, jobs[0], args)
    child = _ddp_child_job()
    sweep_dir = jobs[0].sweep_dir
    last_in_sweep = args.multirun and any(j.config.ckpt_path == LAST for j in jobs)
    if last_in_sweep and child is None and not _names_hydra_run_dir(jobs[0], "hydra.sweep.dir"):
        raise ConfigError(
            "ckpt_path=last in a sweep resumes its jobs in hydra.sweep.dir: name that "
            "directory (the default one is new for every sweep), e.g. "
            "hydra.sweep.dir=sweeps/$SLURM_JOB_ID"
        )
    if args.multirun and child is None and any(_is_distributed(j.config) for j in jobs):
        return _run_jobs_in_subprocesses(jobs, sweep_dir, args)
    for i, job in enumerate(jobs):
        if child is not None and i != child["index"]:
            continue
        if child is not None:
            run_dir = child["run_dir"]
            job.config.ckpt_path = child.get("ckpt_path")  # as rank 0 resolved ckpt_path=last
        elif args.multirun:
            run_dir = str(Path(sweep_dir) / str(i))
        else:
            run_dir = resume_run_dir(job) or job.run_dir
            if run_dir != job.run_dir and not args.json:
                print(f"resuming in {run_dir}", file=sys.stderr, flush=True)
        if args.multirun and not args.json:
            print(f"[{i + 1}/{len(jobs)}] {' '.join(job.overrides)} -> {run_dir}", flush=True)
        # a default (timestamped) directory taken by a run started in the same second: the
        # next free one; a directory the user named is theirs to choose
        default_dir = child is None and not args.multirun and not _names_run_dir(job)
        try:
            code = _run_train(job, run_dir, i, args, find_free=default_dir)
        except Exception:
            if args.multirun and child is None:  # which job, before the error's own line
                print(
                    f"[{i + 1}/{len(jobs)}] {' '.join(job.overrides)}: failed "
                    f"({i} finished before it)",
                    file=sys.stderr,
                    flush=True,
                )
                _say_not_run(jobs, i, sweep_dir)
            raise
        if code != 0:
            if args.multirun and child is None:
                _say_not_run(jobs, i, sweep_dir)
            return code  # an interrupted sweep stops here
    return 0


def _say_not_run(jobs: list[ComposedJob], stopped: int, sweep_dir: str) -> None:
    """After job ``stopped`` of a sweep was interrupted (or failed): the jobs that did not
    run, each as the command that runs it into the directory the sweep would have used."""
    rest = range(stopped + 1, len(jobs))
    if not rest:
        return
    lines = [f"the sweep stopped at job {stopped + 1} of {len(jobs)}; not run:"]
    for j in rest:
        words = [*program(), "train", *jobs[j].overrides]
        words.append(f"hydra.run.dir={_hydra_value(str(Path(sweep_dir) / str(j)))}")
        lines.append(
            f"  cd {shlex.quote(os.getcwd())} && " + " ".join(shlex.quote(w) for w in words)
        )
    print("\n".join(lines), file=sys.stderr, flush=True)


def _is_distributed(cfg: Any) -> bool:
    t = cfg.trainer
    return (
        t.strategy not in ("auto", "single_device") or t.num_nodes > 1 or t.devices not in (1, "1")
    )


def _run_jobs_in_subprocesses(jobs: list[ComposedJob], sweep_dir: str, args: CliArgs) -> int:
    """A distributed sweep: every job in a fresh process (a process group cannot be set up
    twice in one process), one after another."""
    import subprocess

    for i, job in enumerate(jobs):
        run_dir = str(Path(sweep_dir) / str(i))
        if not args.json:
            print(f"[{i + 1}/{len(jobs)}] {' '.join(job.overrides)} -> {run_dir}", flush=True)
        cmd = [sys.executable, "-m", __name__, "train", *job.overrides, f"hydra.run.dir={run_dir}"]
        if args.json:
            cmd.append("--json")
        code = subprocess.run(cmd, check=False).returncode
        if code == 130 or code - 128 in TERMINATING:  # a job interrupted
            _say_not_run(jobs, i, sweep_dir)
            return code
        if code != 0:
            raise ProteinPerformerError(
                f"multirun job {i} ({' '.join(job.overrides)}) failed with exit code {code}"
            )
    return 0


def resume_run_dir(job: ComposedJob) -> str | None:
    """The run directory a resumed job continues in: the one its ``ckpt_path`` belongs to
    (``RUN/checkpoints/last.ckpt`` -> ``RUN``), unless the overrides name a new
    ``hydra.run.dir``. None when not resuming or the checkpoint is not in a run directory."""
    ckpt = getattr(job.config, "ckpt_path", None)
    if not ckpt or _names_hydra_run_dir(job):
        return None
    from protein_performer.training.run_dir import CHECKPOINT_DIR

    folder = Path(ckpt).resolve().parent
    if folder.name == CHECKPOINT_DIR and (folder.parent / "config.yaml").is_file():
        return str(folder.parent)
    return None


#: ``ckpt_path=last``: resume the run directory's last checkpoint, or start when it has none.
LAST = "last"


def resolve_last(
    job: ComposedJob, run_dir: str, quiet: bool = False, main: bool = True
) -> str | None:
    """``ckpt_path=last`` for the run in ``run_dir``: its ``checkpoints/last.ckpt`` when there
    is one, else None (a new run): one command for a job's first start and every requeue. The
    run directory must be named (the default one is new for every run). Every process of a
    multi-process job resolves it alike; only the ``main`` one (rank 0) says so, waits for
    another machine's lock to go stale (a requeue shortly after a kill) and sets aside an
    earlier attempt that saved no checkpoint."""
    from protein_performer.training.run_dir import CHECKPOINT_DIR, set_aside_attempt
    from protein_performer.training.run_lock import wait_for_other_machine

    if not _in_sweep(run_dir, job) and not _names_hydra_run_dir(job):  # (sweeps: run_hydra)
        raise ConfigError(
            "ckpt_path=last resumes the run in hydra.run.dir: name that directory (the default "
            "one is new for every run), e.g. hydra.run.dir=runs/$SLURM_JOB_ID"
        )
    wait_for_other_machine(Path(run_dir), quiet=quiet or not main)  # every rank alike
    last = Path(run_dir) / CHECKPOINT_DIR / "last.ckpt"
    if last.is_file():
        if main and not quiet:
            print(f"ckpt_path=last: resuming from {last}", file=sys.stderr, flush=True)
        return str(last)
    kept = set_aside_attempt(Path(run_dir)) if main else []
    fresh = kept or not Path(run_dir).exists() or not any(Path(run_dir).iterdir())
    if main and not quiet and fresh:  # (anything else: the run-directory check says what)
        print(f"ckpt_path=last: no {last} yet, starting the run", file=sys.stderr, flush=True)
        if kept:
            print(
                "  an earlier attempt there saved no checkpoint (killed or diverged before its "
                f"first); its files are kept as {', '.join(kept)}",
                file=sys.stderr,
                flush=True,
            )
    return None


def _finished(last: str, job: ComposedJob, quiet: bool = False) -> bool:
    """Whether ``ckpt_path=last`` found a run that has trained all its steps (said)."""
    from protein_performer.model.checkpoints import read_checkpoint

    step = int(read_checkpoint(last, mmap=True).get("global_step", 0))
    max_steps = job.config.trainer.max_steps
    if step < max_steps:
        return False
    if not quiet:
        where = (
            f"complete ({step:,} of trainer.max_steps={max_steps:,} steps in {last})"
            if step == max_steps
            else f"at step {step:,} ({last}), past trainer.max_steps={max_steps:,}"
        )
        print(
            f"ckpt_path=last: the run is {where}; nothing left to train (raise "
            "trainer.max_steps to go on)",
            file=sys.stderr,
            flush=True,
        )
    return True


def _in_sweep(run_dir: str, job: ComposedJob) -> bool:
    return Path(run_dir).parent.resolve() == Path(job.sweep_dir).resolve()


def _names_hydra_run_dir(job: ComposedJob, key: str = "hydra.run.dir") -> bool:
    """Whether the command line sets ``hydra.run.dir`` (or ``key``)."""
    return any(o.split("=", 1)[0].lstrip("+~") == key for o in job.overrides)


def _names_run_dir(job: ComposedJob) -> bool:
    return _names_hydra_run_dir(job) or (resume_run_dir(job) is not None)


def _hydra_value(text: str, *, quote: bool = False) -> str:
    """``text`` as a Hydra override value: quoted when it holds characters the override
    grammar would parse (spaces, quotes, brackets, commas ...), or always (``quote``: a string
    that must stay one, e.g. a file named ``1.10``)."""
    if not quote and re.fullmatch(r"[\w/.:+@-][\w/.:+@~-]*", text):
        return text
    if "'" not in text:
        return f"'{text}'"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def program() -> list[str]:
    """How to run this program again as it was run: ``protein-performer`` when that name
    finds this executable, its path when it was run by path (a job script calling
    ``/path/venv/bin/protein-performer``), else ``python -m protein_performer``."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if Path(argv0).name == "protein-performer":
        found = shutil.which("protein-performer")
        if found and Path(found).resolve() == Path(argv0).resolve():
            return ["protein-performer"]
        if Path(argv0).exists():
            return [str(Path(argv0).resolve())]
    return [sys.executable, "-m", "protein_performer"]


def resume_command(job: ComposedJob, last_checkpoint: str) -> str:
    """The command that continues an interrupted job from its ``last.ckpt``."""
    keep = [
        o
        for o in job.overrides
        if o.split("=", 1)[0].lstrip("+~") not in ("ckpt_path", "hydra.run.dir")
    ]
    words = [*program(), "train", *keep, f"ckpt_path={_hydra_value(last_checkpoint)}"]
    # relative paths in the overrides are relative to where this run was started
    return f"cd {shlex.quote(os.getcwd())} && " + " ".join(shlex.quote(w) for w in words)


def _run_train(
    job: ComposedJob, run_dir: str, index: int, args: CliArgs, *, find_free: bool = False
) -> int:
    """Run one training job; returns its exit code (130 for Ctrl-C, 128 + the signal's number
    for another stop signal)."""
    from protein_performer.training.preflight import check_train_inputs
    from protein_performer.training.run import is_rank_zero, train
    from protein_performer.training.run_dir import (
        claim_run_dir,
        config_to_yaml,
        remove_unused_run_dir,
        run_dir_existed,
    )

    claimed = is_rank_zero() and _ddp_child_job() is None
    if job.config.ckpt_path == LAST:  # every rank alike (srun/torchrun start each one)
        job.config.ckpt_path = resolve_last(job, run_dir, quiet=args.json, main=claimed)
        last = job.config.ckpt_path
        if last and _finished(last, job, quiet=args.json or not claimed):
            if args.json and claimed:  # what the run's own --json said, if it is there
                summary = Path(run_dir) / "summary.json"
                try:
                    data = json.loads(summary.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    data = {}
                # where the run is now (a moved run's summary names its old folder)
                best = Path(last).with_name("best.ckpt")
                data |= {
                    "run_dir": str(Path(run_dir).resolve()),
                    "last_checkpoint": last,
                    "best_checkpoint": str(best) if best.is_file() else None,
                    "complete": True,
                }
                print(json.dumps(data))
            return 0  # a requeue of a run that is done: nothing to do, not an error
    existed = run_dir_existed(run_dir)
    if claimed:
        check_train_inputs(job.config)  # a typo in a path must not leave a claimed directory
        path = claim_run_dir(
            run_dir,
            job.config.ckpt_path,
            config_to_yaml(job.config),
            key="run directory (hydra.run.dir)",
            find_free=find_free,
        )
    else:
        path = Path(run_dir)
    marker = json.dumps(
        {"index": index, "run_dir": str(path.resolve()), "ckpt_path": job.config.ckpt_path}
    )
    out = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    try:
        with _env(DDP_JOB_ENV, marker), out:
            result = train(job.config, path, overrides=job.overrides, run_dir_claimed=claimed)
    except BaseException:
        if claimed and job.config.ckpt_path is None:
            # claimed a moment ago; nothing trained (a directory the user made stays)
            remove_unused_run_dir(path, keep_dir=path in existed)
        raise
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return 0  # DDP child: rank 0 reports
    if args.json:
        print(json.dumps(result.to_dict()), flush=True)
    else:
        print(result.format(), flush=True)
    if not result.interrupted:
        return 0
    if result.last_checkpoint and result.max_steps and result.steps >= result.max_steps:
        # a resume would be refused (nothing left to train): say what is missing instead
        print(
            f"interrupted after the last step ({result.steps:,}), during its validation: "
            f"{result.last_checkpoint} holds the trained model; `protein-performer evaluate "
            f"checkpoint={result.last_checkpoint} fasta=... split=val` scores it",
            file=sys.stderr,
            flush=True,
        )
    elif result.last_checkpoint:
        print(
            f"interrupted at step {result.steps:,}; resume with:\n  "
            + resume_command(job, result.last_checkpoint),
            file=sys.stderr,
            flush=True,
        )
    return 128 + int(getattr(signal, result.stopped_by))


def _run_evaluate(job: ComposedJob, args: CliArgs) -> int:
    from protein_performer.evaluation.evaluate import evaluate

    out = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with out:
        result = evaluate(job.config)
    if args.json:
        print(json.dumps(result.to_dict()), flush=True)
    else:
        print(result.format(), flush=True)
        if job.config.output:
            print(f"written to {job.config.output}")
    return 0


def _run_analysis(command: str, job: ComposedJob, args: CliArgs) -> int:
    from protein_performer.cli.commands import run_command

    out = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with out:
        result = run_command(command, job.config)
    if args.json:
        print(json.dumps(result.to_dict()), flush=True)
    else:
        print(result.format(), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m protein_performer.cli.hydra train|evaluate [overrides]`` (used for
    the jobs of a distributed sweep); errors are printed as one line, exit code 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m protein_performer.cli.hydra train|evaluate [KEY=VALUE ...]")
        return 2
    from protein_performer.utils.interrupts import sigterm_raises

    try:
        with sigterm_raises():
            return run_hydra(argv[0], argv[1:])
    except ProteinPerformerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        from protein_performer.utils.interrupts import exit_code, stopped_line

        print(stopped_line(e), file=sys.stderr)
        return exit_code(e)


if __name__ == "__main__":
    sys.exit(main())
