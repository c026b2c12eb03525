"""What the analysis commands share: the result they return, the checked output folder, and the model and inputs a figure command loads."""

from __future__ import annotations

import csv
import dataclasses
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from protein_performer.analysis.extraction import load_for_analysis
from protein_performer.analysis.inputs import parse_indices
from protein_performer.analysis.similarity import AA_ORDER
from protein_performer.config.validate import eval_fasta_paths, fasta_unset
from protein_performer.utils.outputs import check_output_dir, staged_dir


@dataclass
class CommandResult:
    summary: dict[str, Any]
    text: str

    def to_dict(self) -> dict[str, Any]:
        return self.summary

    def format(self) -> str:
        return self.text


def check_out_dir(cfg: Any, is_ours: Any, what: str) -> Path:
    """``cfg.out`` checked as a command's output folder: absent, or one it wrote (``is_ours``)
    with ``overwrite=true``."""
    return check_output_dir(
        cfg.out,
        "out",
        overwrite=cfg.overwrite,
        is_ours=is_ours,
        what=what,
        overwrite_hint="overwrite=true",
    )


def prepare_figure_command(cfg: Any, is_ours: Any, what: str) -> tuple:
    """Inputs, checked output directory, model and layer/head selections of a figure command:
    ``(fasta, outdir, model, alphabet, metadata, layers, heads)``. ``split=`` without
    ``fasta=`` reads the training run's own files (as evaluate does)."""
    if getattr(cfg, "split", None) and fasta_unset(cfg.fasta):
        from protein_performer.model.checkpoints import run_files

        cfg = dataclasses.replace(cfg, fasta=run_files(cfg.checkpoint, cfg.split))
    fasta = eval_fasta_paths(cfg)
    outdir = check_out_dir(cfg, is_ours, what)
    model, alphabet, meta = load_for_analysis(
        cfg.checkpoint, cfg.device, cfg.attention, cfg.nb_features
    )
    layers = parse_indices(cfg.layers, model.config.depth, "layers")
    heads = parse_indices(cfg.heads, model.config.heads, "heads")
    return fasta, outdir, model, alphabet, meta, layers, heads


def trained_packed(meta: dict[str, Any]) -> bool:
    """Whether the checkpoint's run trained on packed windows (``data.mode=concat``: proteins
    between ``<sep>`` tokens, no ``<cls>``/``<eos>``)."""
    return (meta.get("data") or {}).get("mode") == "concat"


def staged_output(cfg: Any, outdir: Path, is_ours: Any, what: str) -> Any:
    """A temporary folder beside ``outdir``, renamed over it when the block ends without error
    (checked again just before, as :func:`check_out_dir`)."""
    return staged_dir(outdir, lambda: check_out_dir(cfg, is_ours, what))


def matrix_csv(m: np.ndarray) -> str:
    """A ``(20, 20)`` matrix as CSV, amino acids in :data:`AA_ORDER` as header and first column."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["", *AA_ORDER])
    for aa, row in zip(AA_ORDER, m, strict=True):
        w.writerow([aa, *(f"{x:.6g}" for x in row)])
    return buf.getvalue()
