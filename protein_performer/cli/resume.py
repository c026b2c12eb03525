"""ckpt_path=last and resuming: which checkpoint a run resumes from, whether it is finished, and the command line that resumes it."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from protein_performer.cli.compose import ComposedJob
from protein_performer.cli.overrides import hydra_value
from protein_performer.errors import ConfigError


def resume_run_dir(job: ComposedJob) -> str | None:
    """The run directory a resumed job continues in: the one its ``ckpt_path`` belongs to
    (``RUN/checkpoints/last.ckpt`` -> ``RUN``), unless the overrides name a new
    ``hydra.run.dir``. None when not resuming or the checkpoint is not in a run directory."""
    ckpt = getattr(job.config, "ckpt_path", None)
    if not ckpt or names_hydra_run_dir(job):
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

    if not _in_sweep(run_dir, job) and not names_hydra_run_dir(job):  # (sweeps: run_hydra)
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


def run_finished(last: str, job: ComposedJob, quiet: bool = False) -> bool:
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


def names_hydra_run_dir(job: ComposedJob, key: str = "hydra.run.dir") -> bool:
    """Whether the command line sets ``hydra.run.dir`` (or ``key``)."""
    return any(o.split("=", 1)[0].lstrip("+~") == key for o in job.overrides)


def names_run_dir(job: ComposedJob) -> bool:
    return names_hydra_run_dir(job) or (resume_run_dir(job) is not None)


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
    words = [*program(), "train", *keep, f"ckpt_path={hydra_value(last_checkpoint)}"]
    # relative paths in the overrides are relative to where this run was started
    return f"cd {shlex.quote(os.getcwd())} && " + " ".join(shlex.quote(w) for w in words)
