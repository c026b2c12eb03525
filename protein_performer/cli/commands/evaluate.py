"""evaluate: a checkpoint's held-out perplexity beside the unigram baseline, printed or as JSON."""

from __future__ import annotations

import contextlib
import json
import sys

from protein_performer.cli.commands.checkpoint_choice import with_context_checkpoint
from protein_performer.cli.compose import CliArgs, ComposedJob


def run_evaluate_job(job: ComposedJob, args: CliArgs) -> int:
    from protein_performer.evaluation.evaluate import evaluate

    out = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with out:
        result = evaluate(with_context_checkpoint(job.config))
    if args.json:
        print(json.dumps(result.to_dict()), flush=True)
    else:
        print(result.format(), flush=True)
        if job.config.output:
            print(f"written to {job.config.output}")
    return 0
