"""A run directory: claimed and locked before training, checked on resume (the same run, nothing of another's), its config versioned when a resume changes settings, attempts set aside (never removed), and removed again when nothing trained."""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
from pathlib import Path
from typing import Any

from protein_performer.errors import DataError
from protein_performer.model.checkpoints import META_KEY, read_checkpoint
from protein_performer.training.run_lock import LOCK_NAME, check_unlocked
from protein_performer.utils.atomic import check_writable_file, make_output_dir, write_text_atomic
from protein_performer.utils.outputs import check_output_dir, entries

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"


# ---- small helpers --------------------------------------------------------------------------
def config_to_yaml(cfg: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


RUN_DIR_ENTRIES = re.compile(
    r"(config(\.\d+)?\.yaml|overrides(\.\d+)?\.yaml|hparams(\.\d+)?\.yaml|metrics(\.\d+)?\.csv"
    rf"|summary\.json|{CHECKPOINT_DIR}|tensorboard(\.\d+)?|{re.escape(LOCK_NAME)})"
)


#: What an attempt that saved no checkpoint leaves once set aside for a new start.
SET_ASIDE = re.compile(
    rf"(config|overrides|hparams)\.\d+\.yaml|metrics\.\d+\.csv|tensorboard\.\d+"
    rf"|{re.escape(LOCK_NAME)}|{CHECKPOINT_DIR}"
)


def _only_temporaries(folder: Path) -> bool:
    """Whether ``folder`` is missing or holds nothing but hidden temporaries (an interrupted
    checkpoint write's)."""
    return not folder.is_dir() or all(p.name.startswith(".") for p in folder.iterdir())


def _set_aside_only(p: Path) -> bool:
    """Whether ``p`` holds nothing but attempts set aside by :func:`set_aside_attempt` (at
    least one: a folder of other things is a user's) and no checkpoint."""
    names = entries(p)
    return (
        any(re.fullmatch(r"config\.\d+\.yaml", n) for n in names)
        and all(SET_ASIDE.fullmatch(n) for n in names)
        and _only_temporaries(p / CHECKPOINT_DIR)
    )


#: An attempt's files and folders, set aside as ``NAME.N.EXT`` (nothing is removed: this
#: project never writes ``hparams.yaml``, so one there is a user's or an older version's).
_ATTEMPT_FILES = (
    ("config", ".yaml"),
    ("overrides", ".yaml"),
    ("hparams", ".yaml"),
    ("metrics", ".csv"),
    ("tensorboard", ""),
)


def saved_checkpoints(run_dir: Path) -> list[Path]:
    """The checkpoints a run saved in ``run_dir`` (not an interrupted write's hidden
    temporary)."""
    folder = run_dir / CHECKPOINT_DIR
    return (
        [p for p in folder.glob("*.ckpt") if not p.name.startswith(".")] if folder.is_dir() else []
    )


def attempt_without_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run's files and no checkpoint (an attempt killed before its
    first, or diverged): what :func:`set_aside_attempt` may set aside."""
    if not run_dir.is_dir() or not _is_run_config(run_dir / "config.yaml"):
        return False
    if (run_dir / "summary.json").exists():
        return False  # a run that ended (its checkpoints removed since): not to redo unasked
    names = entries(run_dir)
    return all(RUN_DIR_ENTRIES.fullmatch(n) for n in names) and _only_temporaries(
        run_dir / CHECKPOINT_DIR
    )


def set_aside_attempt(run_dir: Path) -> list[str]:
    """Rename an :func:`attempt_without_checkpoint`'s files to ``NAME.N.EXT`` (N the first
    number free for all of them) so that the run can start again in ``run_dir``; returns the
    new names ([] and nothing touched for any other directory, or one a live run holds)."""
    if not attempt_without_checkpoint(run_dir):
        return []
    check_unlocked(run_dir)
    n = 1
    while any((run_dir / f"{stem}.{n}{ext}").exists() for stem, ext in _ATTEMPT_FILES):
        n += 1
    kept = []
    for stem, ext in _ATTEMPT_FILES:
        path = run_dir / f"{stem}{ext}"
        if path.exists():
            path.rename(run_dir / f"{stem}.{n}{ext}")
            kept.append(f"{stem}.{n}{ext}")
    return kept


def _resuming_in(p: Path, ckpt_path: str | None) -> bool:
    return ckpt_path is not None and Path(ckpt_path).resolve().parent == (
        p.resolve() / CHECKPOINT_DIR
    )


def _run_id(path: Path) -> str | None:
    """The run that wrote the checkpoint at ``path`` (None: unreadable, or from before run
    ids were recorded)."""
    try:
        meta = read_checkpoint(path, mmap=True).get(META_KEY) or {}
    except DataError:
        return None
    run_id = (meta.get("data") or {}).get("run_id")
    return run_id if isinstance(run_id, str) else None


def _check_same_run(run_dir: Path, ckpt_path: str) -> None:
    """Refuse to continue, in ``run_dir``, a checkpoint that another run wrote (one copied
    into its checkpoints/): the resume would replace this run's metrics after that step and
    its checkpoints with the other run's continuation."""
    last = run_dir / CHECKPOINT_DIR / "last.ckpt"
    if not last.is_file() or last.resolve() == Path(ckpt_path).resolve():
        return
    mine, theirs = _run_id(last), _run_id(Path(ckpt_path))
    if mine and theirs and mine != theirs:
        raise DataError(
            f"ckpt_path: {Path(ckpt_path).name} was written by another run than this "
            f"directory's ({last} is of another): resuming it here would replace this run's "
            "metrics and checkpoints with that run's continuation; resume it in its own "
            "directory, or start a new run from its weights with init_from=PATH",
            path=run_dir,
        )


def _is_run_config(path: Path) -> bool:
    """A ``config.yaml`` that a training run wrote (its top-level sections), not a user's."""
    try:
        text = path.read_text(encoding="utf-8")[: 1 << 20]
    except (OSError, UnicodeDecodeError):
        return False
    return all(re.search(rf"^{k}:", text, re.M) for k in ("model", "data", "trainer", "objective"))


def check_run_dir(
    run_dir: str | os.PathLike, ckpt_path: str | None = None, key: str = "run directory"
) -> Path:
    """Refuse, before any work, a run directory whose files a run would replace.

    A new run needs a directory that does not exist yet or is empty. A directory holding a run
    is only continued by resuming from one of its own checkpoints
    (``ckpt_path=RUN/checkpoints/last.ckpt``); anything else (a user's files, another run) is
    never written into.
    """
    p = Path(run_dir)
    if p.is_symlink() and p.is_dir():
        p = p.resolve()  # writing into the directory a link points to replaces nothing
    p = check_output_dir(p, key, is_ours=lambda _: True, overwrite=True, what=key)
    if p.is_dir():
        check_unlocked(p)  # a run training there now: nothing of it is touched
    if _resuming_in(p, ckpt_path):
        _check_same_run(p, ckpt_path)  # type: ignore[arg-type]
        # before the steps it would lose: their checkpoint could not be saved
        check_writable_file(p / CHECKPOINT_DIR / "last.ckpt", "resuming the run")
        return p
    if not p.is_dir() or not any(p.iterdir()):
        return p
    if _set_aside_only(p):
        return p  # earlier attempts that saved no checkpoint, set aside (ckpt_path=last)
    names = sorted(entries(p))
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    # every run writes config.yaml first: a folder without one (a metrics.csv, a
    # checkpoints/ of the user's own) is not a run, whatever its names
    ours = _is_run_config(p / "config.yaml")
    if not ours or any(not RUN_DIR_ENTRIES.fullmatch(n) for n in names):
        raise DataError(
            f"{key}: not empty ({shown}); a new run needs a new or empty directory "
            "(choose another one)",
            path=p,
        )
    last = p / CHECKPOINT_DIR / "last.ckpt"
    if last.is_file():
        raise DataError(
            f"{key}: already holds a run ({shown}); continue it with ckpt_path={last}, or "
            "choose a new one",
            path=p,
        )
    if set(names) <= RUN_CONFIG_FILES:
        raise DataError(
            f"{key}: holds a run that has not trained yet ({shown}: another run starting now, "
            "or one stopped while loading); choose a new one, or start it again there with "
            "ckpt_path=last (its files are kept as NAME.1.EXT)",
            path=p,
        )
    others = saved_checkpoints(p)
    if others:  # last.ckpt removed, best.ckpt kept
        raise DataError(
            f"{key}: holds a run without checkpoints/last.ckpt ({shown}); continue it from "
            f"another of its checkpoints with ckpt_path={others[0]}, or choose a new one",
            path=p,
        )
    if (p / "summary.json").exists():
        raise DataError(
            f"{key}: holds a run that ended (summary.json) and whose checkpoints are gone "
            f"({shown}); choose a new one (its metrics and summary are kept there)",
            path=p,
        )
    raise DataError(
        f"{key}: holds a run that saved no checkpoint to resume from ({shown}); choose a new "
        "one, or start it again there with ckpt_path=last (its files are kept as NAME.1.EXT)",
        path=p,
    )


def claim_run_dir(
    run_dir: str | os.PathLike,
    ckpt_path: str | None,
    config_text: str,
    *,
    key: str = "run directory",
    find_free: bool = False,
) -> Path:
    """Check ``run_dir`` (see :func:`check_run_dir`) and claim it by writing ``config.yaml``.

    A new run creates ``config.yaml`` exclusively, so two runs started at once into one
    directory cannot both have it: the second gets an error, or with ``find_free`` the next
    free ``RUN_1``, ``RUN_2``, ... (for default, timestamped directories). A resume writes
    nothing here: :func:`train` writes its config once it holds the run's lock (a changed one
    kept as ``config.N.yaml``, put back if no step trains with it).
    """
    base = Path(run_dir)
    for n in range(1000 if find_free else 1):
        candidate = base if n == 0 else base.with_name(f"{base.name}_{n}")
        try:
            p = check_run_dir(candidate, ckpt_path, key)
        except DataError:
            if find_free and ckpt_path is None:
                continue
            raise
        p = make_output_dir(p.resolve(), key)
        if _resuming_in(p, ckpt_path):
            return p  # its config is written by train() once it holds the run's lock
        try:
            fd = os.open(p / "config.yaml", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            if find_free:
                continue
            raise DataError(
                f"{key}: another run started in this directory at the same time", path=p
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(config_text)
        return p
    raise DataError(f"{key}: no free directory next to it (tried {base}_1 to _999)", path=base)


#: Files a resume's claim kept as ``NAME.N.EXT`` (path -> where the old one went): put back
#: when the resume stops before training (:func:`restore_versioned`), so a run's history
#: holds no config that never trained a step.
_versioned: dict[Path, Path] = {}


def restore_versioned(run_dir: Path) -> None:
    """Put back the files :func:`write_versioned` replaced in ``run_dir`` (said)."""
    for path, old in list(_versioned.items()):
        if path.parent == run_dir:
            del _versioned[path]
            if old.is_file():
                os.replace(old, path)
                log.warning("%s put back (the resume stopped before training)", path.name)


def forget_versioned(run_dir: Path) -> None:
    for path in [p for p in _versioned if p.parent == run_dir]:
        del _versioned[path]


def write_versioned(path: Path, text: str) -> None:
    """Write ``path``; when it exists with other content (ignoring ``ckpt_path`` and
    ``hydra.run.dir``, which a resume changes) keep the old one as ``NAME.N.EXT``."""

    def meaningful(t: str) -> list[str]:
        return [
            ln
            for ln in t.splitlines()
            if not re.match(r"^(- )?(ckpt_path|hydra\.run\.dir)[:=]", ln)
        ]

    if path.is_file() and meaningful(path.read_text(encoding="utf-8")) != meaningful(text):
        n = 1
        while path.with_name(f"{path.stem}.{n}{path.suffix}").exists():
            n += 1
        old = path.with_name(f"{path.stem}.{n}{path.suffix}")
        changes = _changed_keys(path.read_text(encoding="utf-8"), text)
        os.replace(path, old)
        _versioned[path] = old
        log.warning(
            "%s changed on resuming%s; the previous one is %s",
            path.name,
            f" ({changes})" if changes else "",
            old.name,
        )
    write_text_atomic(path, text)


def _changed_keys(before: str, after: str, shown: int = 4) -> str:
    """``seed: 0 -> 7; data.files: [...] -> [...]`` for two YAML configs' differing leaves
    (``ckpt_path`` aside), or "" when either is no mapping."""
    from omegaconf import OmegaConf

    def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
        if not isinstance(node, dict):
            return {prefix: node}
        out: dict[str, Any] = {}
        for k, v in node.items():
            out |= leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
        return out

    try:  # (hydra's own YAML reader: no other dependency)
        a, b = (OmegaConf.to_container(OmegaConf.create(t)) for t in (before, after))
    except Exception:  # not a mapping, not YAML: no detail, the files say it
        return ""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return ""
    la, lb = leaves(a), leaves(b)
    keys = [k for k in {**la, **lb} if k != "ckpt_path" and la.get(k) != lb.get(k)]

    def short(v: Any) -> str:
        text = str(v)
        return text if len(text) <= 40 else text[:37] + "..."

    parts = [f"{k}: {short(la.get(k))} -> {short(lb.get(k))}" for k in keys[:shown]]
    return "; ".join(parts) + (f"; {len(keys) - shown} more" if len(keys) > shown else "")


# what a run writes before it trains (its lock too: removed with them when nothing trained)
RUN_CONFIG_FILES = frozenset({"config.yaml", "overrides.yaml", LOCK_NAME})


def remove_unused_run_dir(path: Path, *, keep_dir: bool = False) -> None:
    """A run that failed before training (bad data, settings, out of memory, Ctrl-C while
    loading) leaves no directory behind that holds only its config files: it would look like
    a run. Only the files a run writes go; the directory itself goes only when it is then
    empty and ``keep_dir`` is false (a directory the user made before the run stays)."""
    names = {p.name for p in path.iterdir()} if path.is_dir() else set()
    ckpts = path / CHECKPOINT_DIR
    if not path.is_dir() or not names <= RUN_CONFIG_FILES | {CHECKPOINT_DIR}:
        return
    if ckpts.is_dir() and any(ckpts.iterdir()):
        return
    for name in names & RUN_CONFIG_FILES:
        (path / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        if ckpts.is_dir():
            ckpts.rmdir()
        if not keep_dir:
            path.rmdir()


def run_dir_existed(run_dir: str | os.PathLike) -> set[Path]:
    """The directories :func:`claim_run_dir` might pick for ``run_dir`` that exist already
    (``run_dir`` and its ``_N`` siblings): on failure those are kept, emptied of the run's
    files, and only the ones the run created are removed."""
    base = Path(run_dir).resolve()
    if not base.parent.is_dir():
        return set()
    return {p for p in base.parent.glob(glob.escape(base.name) + "*") if p.is_dir()}
