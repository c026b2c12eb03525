"""The Hydra commands run: ``protein-performer train|evaluate|score|generate|extract|
aa-similarity|plot-heads [key=value ...]`` (:data:`~protein_performer.cli.groups.COMMANDS`).

:func:`run_hydra` composes every job before any work (:mod:`.compose`: Hydra's compose API
over ``conf/`` and the schemas of :mod:`protein_performer.config.schema`, the overrides read by
:mod:`.overrides`, a sweep ``-m a=x,y`` expanded into the cartesian product of its jobs), then
prints ``--help`` (:mod:`.help`) or ``--cfg``, or runs the command: ``evaluate`` and the
analysis commands once (:mod:`.commands`), ``train`` once per job, a sweep's jobs one after
another in ``<hydra.sweep.dir>/<job number>`` (those of a distributed sweep each in a fresh
process, through :func:`main`), ``ckpt_path=last`` resolved by :mod:`.resume`. Every configuration
problem is a one-line :class:`~protein_performer.errors.ConfigError` naming the key and, where
there is a fixed set, the valid choices.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from protein_performer.cli.commands.evaluate import run_evaluate_job
from protein_performer.cli.commands.train import run_train_job
from protein_performer.cli.compose import (
    CliArgs,
    ComposedJob,
    compose_job,
    ddp_child_job,
    parse_args,
)
from protein_performer.cli.groups import COMMANDS, setup_hydra
from protein_performer.cli.help import help_text
from protein_performer.cli.overrides import (
    expand_overrides,
    hydra_value,
)
from protein_performer.cli.resume import (
    LAST,
    names_hydra_run_dir,
    names_run_dir,
    program,
    resume_run_dir,
)
from protein_performer.config.schema import ANALYSIS_COMMANDS
from protein_performer.errors import ConfigError, ProteinPerformerError
from protein_performer.utils.interrupts import TERMINATING


def run_hydra(command: str, argv: list[str]) -> int:
    """Run ``command`` (``train``, ``evaluate`` or an analysis command) with Hydra-style
    ``argv``; returns the exit code (0, or an interrupted run's).

    Configuration problems raise :class:`ConfigError`; bad data raises ``DataError``. Results
    (the train summary, the evaluate metrics, the analysis command's result) are printed on
    stdout, as JSON with ``--json``.
    """
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r}; choose one of: {', '.join(COMMANDS)}")
    args = parse_args(argv, command)
    setup_hydra()
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
        return run_evaluate_job(jobs[0], args)
    if command in ANALYSIS_COMMANDS:
        return _run_analysis(command, jobs[0], args)
    child = ddp_child_job()
    sweep_dir = jobs[0].sweep_dir
    last_in_sweep = args.multirun and any(j.config.ckpt_path == LAST for j in jobs)
    if last_in_sweep and child is None and not names_hydra_run_dir(jobs[0], "hydra.sweep.dir"):
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
        default_dir = child is None and not args.multirun and not names_run_dir(job)
        try:
            code = run_train_job(job, run_dir, i, args, find_free=default_dir)
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
        words.append(f"hydra.run.dir={hydra_value(str(Path(sweep_dir) / str(j)))}")
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
