"""train: one composed training job run in its claimed run directory, its result printed, and how to resume it when stopped."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from protein_performer.cli.compose import DDP_JOB_ENV, CliArgs, ComposedJob, ddp_child_job, with_env
from protein_performer.cli.resume import LAST, resolve_last, resume_command, run_finished


def run_train_job(
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

    claimed = is_rank_zero() and ddp_child_job() is None
    if job.config.ckpt_path == LAST:  # every rank alike (srun/torchrun start each one)
        job.config.ckpt_path = resolve_last(job, run_dir, quiet=args.json, main=claimed)
        last = job.config.ckpt_path
        if last and run_finished(last, job, quiet=args.json or not claimed):
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
        with with_env(DDP_JOB_ENV, marker), out:
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
