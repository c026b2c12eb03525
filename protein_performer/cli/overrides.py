"""key=value overrides as the CLI reads them: aliases, unknown keys with suggestions, group choices, list values, ~ in paths, and Hydra's validation errors as one line naming the key."""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import os
import re
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any

from protein_performer.cli.groups import COMMANDS, config_groups, group_options
from protein_performer.errors import ConfigError


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


#: what a required key's error adds for a command that has no shipped default for it
REQUIRED_WHY = {
    ("generate", "checkpoint"): (
        " (no causal checkpoint is shipped: train one with objective=causal, e.g. "
        "protein-performer train experiment=demo objective=causal)"
    ),
}


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
            why = REQUIRED_WHY.get((command, key), "")
            return ConfigError(f"{key}=... is required for {command}{why}")
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
def check_extra_keys(node: Any, root: type, schema: type, prefix: str = "") -> None:
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
            check_extra_keys(child, root, hints[key], f"{full}.")


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
            out.append(f"{o.get_key_element()}=[{hydra_value(literal, quote=number)}]")
        elif item is None and leaf in PATH_KEYS and o.value_type == ValueType.ELEMENT:
            raw = o.value()
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                out.append(
                    f"{o.get_key_element()}={hydra_value(text.split('=', 1)[1], quote=True)}"
                )
            else:
                out.append(text)
        elif item is int and isinstance(value, int) and not isinstance(value, bool):
            out.append(f"{o.get_key_element()}=[{value}]")
        else:
            out.append(text)
    return out


def hydra_value(text: str, *, quote: bool = False) -> str:
    """``text`` as a Hydra override value: quoted when it holds characters the override
    grammar would parse (spaces, quotes, brackets, commas ...), or always (``quote``: a string
    that must stay one, e.g. a file named ``1.10``)."""
    if not quote and re.fullmatch(r"[\w/.:+@-][\w/.:+@~-]*", text):
        return text
    if "'" not in text:
        return f"'{text}'"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
