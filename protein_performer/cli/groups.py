"""The Hydra configuration's commands and groups: where conf/ is, which options each group has, and the schemas registered with Hydra."""

from __future__ import annotations

from pathlib import Path

from protein_performer.config.schema import ANALYSIS_COMMANDS, EvalConfig, TrainConfig
from protein_performer.errors import ConfigError
from protein_performer.utils.resources import project_path, project_root, resources_dir

COMMANDS: dict[str, type] = {"train": TrainConfig, "evaluate": EvalConfig, **ANALYSIS_COMMANDS}


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


def setup_hydra() -> None:
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
