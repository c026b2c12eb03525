"""generate: sequences sampled from a model (masked-LM iterative sampling or causal), written as FASTA."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np

from protein_performer.analysis.extraction import load_for_analysis
from protein_performer.analysis.inputs import max_tokens
from protein_performer.cli.commands.common import CommandResult, trained_packed
from protein_performer.config.schema import GenerateConfig
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS
from protein_performer.errors import DataError
from protein_performer.model.checkpoints import trained_length
from protein_performer.utils.outputs import absent, refuse_appeared

#: What marks a FASTA as generate's own (overwrite=true replaces no other file).
GENERATED_MARK = "protein-performer generate"


def several_records(fasta: list[str]) -> bool:
    """Whether the FASTA file(s) hold more than one record (reads at most two)."""
    from protein_performer.data.fasta import FastaReader

    if len(fasta) > 1:
        return True
    return sum(1 for _ in itertools.islice(FastaReader(fasta[0]), 2)) > 1


def _generated_fasta(path: Path) -> bool:
    """Whether ``path`` is a FASTA ``generate`` wrote: every header carries its mark (a record
    a user added makes it theirs too)."""
    import gzip

    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            headers = 0
            for line in fh:
                if line.startswith(">"):
                    if GENERATED_MARK not in line:
                        return False
                    headers += 1
                elif headers == 0 and line.strip():
                    return False  # text before the first header
    except (OSError, UnicodeDecodeError, EOFError):
        return False
    return headers > 0


def run_generate(cfg: GenerateConfig) -> CommandResult:
    import time

    from protein_performer.analysis.generation import generate, prompt_ids
    from protein_performer.data.fasta_writer import write_fasta
    from protein_performer.utils.outputs import check_output_file, make_parents, remove_empty

    if not re.search(r"\.(fasta|fa|faa|fas)(\.gz)?$", str(cfg.out), re.IGNORECASE):
        raise DataError("out: names the generated FASTA: end it in .fasta, .fa or .faa (.gz)")

    def check_out() -> Path:
        return check_output_file(
            cfg.out,
            "out",
            overwrite=cfg.overwrite,
            is_ours=_generated_fasta,
            allow_input_name=True,
            what="generated FASTA",
            overwrite_hint="overwrite=true",
        )

    out = check_out()
    was_absent = absent([out])
    model, alphabet, meta = load_for_analysis(cfg.checkpoint, cfg.device)
    limit = max_tokens(model, cfg.max_length, trained_length(meta))
    limit = limit or trained_length(meta) or model.config.max_len  # rotary: what it trained on
    t0 = time.perf_counter()
    samples = generate(
        model,
        alphabet,
        cfg.n,
        prompt=cfg.prompt,
        max_length=limit,
        temperature=cfg.temperature,
        top_k=cfg.top_k,
        top_p=cfg.top_p,
        seed=cfg.seed,
        batch_size=cfg.batch_size,
        min_length=cfg.min_length,
        progress=True,
        packed=(packed := trained_packed(meta)),
    )
    settings = f"seed={cfg.seed} temperature={cfg.temperature:g}"
    if cfg.top_k is not None:
        settings += f" top_k={cfg.top_k}"
    if cfg.top_p is not None:
        settings += f" top_p={cfg.top_p:g}"
    settings += f" max_length={limit}"
    used = alphabet.decode(prompt_ids(alphabet, cfg.prompt))  # as read: no final '*'
    if used:
        settings += f" prompt={used}"
    refuse_appeared(was_absent, "out", "generating")
    check_out()  # one that was there is still generate's own
    records = [
        (
            f"gen{i + 1}",
            f"{GENERATED_MARK} {settings} length={len(s.sequence)} "
            f"ended={(('sep' if packed else 'eos') if s.ended else 'max_length')} "
            f"log_prob={s.log_prob:.3f}",
            s.sequence,
        )
        for i, s in enumerate(samples)
    ]
    made = make_parents(out)  # as score and extract do (the check above made nothing)
    try:
        written = write_fasta(out, records, compress=str(out).lower().endswith(".gz"))
    except BaseException:
        remove_empty(made)
        raise
    lengths = [len(s.sequence) for s in samples]
    cut = sum(not s.ended for s in samples)
    summary = {
        "out": str(out),
        "checkpoint": str(cfg.checkpoint),
        "n": len(samples),
        "ended_by_eos": len(samples) - cut,  # by the end token (<sep> for packed training)
        "cut_at_max_length": cut,
        "mean_length": float(np.mean(lengths)),
        "settings": settings,
        "seconds": round(time.perf_counter() - t0, 2),
        "sha256": written.sha256,
    }
    text = (
        f"generated {len(samples):,} protein{'' if len(samples) == 1 else 's'} ({settings}), "
        f"lengths {min(lengths)}-"
        f"{max(lengths)} (mean {np.mean(lengths):.0f}) in {summary['seconds']:.1f} s -> {out}"
    )
    if cut:
        text += (
            f"\n  {cut:,} reached max_length without {'<sep>' if packed else '<eos>'}: cut there "
            "(ended=max_length in their headers)"
        )
    trained = trained_length(meta)
    if trained and limit > trained:
        text += (
            f"\n  max_length={limit} is past the {trained} tokens the model trained on: "
            "positions beyond them are untrained (and score's log-likelihood takes proteins "
            "of that window only)"
        )
    rare = sorted({c for c in used if c not in STANDARD_AMINO_ACIDS})
    if rare:
        text += (
            f"\n  the prompt holds {', '.join(rare)} (not one of the 20 amino acids): kept "
            "as given at the start of every protein; the drawn residues are the 20"
        )
        summary["prompt_nonstandard"] = rare
    return CommandResult(summary, text)
