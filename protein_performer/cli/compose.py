"""A command line composed into jobs: arguments parsed, overrides expanded and checked, Hydra's compose run once per sweep job, and the DDP child's job marker."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from protein_performer.cli.groups import COMMANDS, config_dir, setup_hydra
from protein_performer.cli.overrides import (
    check_extra_keys,
    expand_home,
    quote_home,
    scalars_as_lists,
    to_config_error,
)
from protein_performer.config.validate import (
    validate_analysis_config,
    validate_eval_config,
    validate_train_config,
)
from protein_performer.errors import ConfigError
from protein_performer.utils.checks import check_choice

# A DDP child process started by Lightning re-runs the same command line; this variable tells
# it which sweep job and run directory its parent is on.
DDP_JOB_ENV = "PROTEIN_PERFORMER_DDP_JOB"


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

    setup_hydra()
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
        check_extra_keys(cfg, COMMANDS[command], COMMANDS[command])
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
        check_analysis_rules(obj)
    return ComposedJob(list(overrides), obj, text, run_dir, sweep_dir)


def check_analysis_rules(cfg: Any) -> None:
    """The analysis room's own rules for its commands' settings, checked with the rest of the
    config before any work: score's method names, generate's sampling settings."""
    from protein_performer.config.schema import GenerateConfig, ScoreConfig

    if isinstance(cfg, ScoreConfig) and cfg.method is not None:
        from protein_performer.analysis.dms.marginals import METHODS, method_name

        methods = [cfg.method] if isinstance(cfg.method, str) else list(cfg.method)
        if not methods:
            raise ConfigError(f"method: give at least one of {', '.join(METHODS)}")
        for m in methods:
            check_choice("method", method_name(m), METHODS)
    if isinstance(cfg, GenerateConfig):
        from protein_performer.analysis.generation import check_sampling

        check_sampling(
            cfg.temperature,
            cfg.top_k,
            cfg.top_p,
            cfg.n,
            # unset: checked against the model's once it is loaded
            max(3, cfg.min_length + 2) if cfg.max_length is None else cfg.max_length,
            cfg.batch_size,
            cfg.min_length,
        )


# ---- entry point --------------------------------------------------------------------------
def ddp_child_job() -> dict[str, Any] | None:
    """The job a Lightning-launched DDP child process must run (set by its parent)."""
    raw = os.environ.get(DDP_JOB_ENV)
    if raw and os.environ.get("LOCAL_RANK", "0") != "0":
        return json.loads(raw)
    return None


@contextlib.contextmanager
def with_env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
