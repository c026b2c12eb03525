"""evaluate(cfg): held-out masked-LM perplexity of a checkpoint beside the unigram baseline, per split, and homolog-conditioned context scoring; results as EvalResult and JSON."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from protein_performer.config.schema import EvalConfig
from protein_performer.config.validate import eval_fasta_paths, fasta_unset, validate_eval_config
from protein_performer.data.alphabet import EXTRA_RESIDUES, Alphabet
from protein_performer.data.cluster import check_run_clustering, read_members, table_digest
from protein_performer.data.config import DataConfig
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.errors import ConfigError, DataError
from protein_performer.evaluation.context_perplexity import (
    Fill,
    Target,
    cluster_fill,
    context_perplexity,
    record_order,
    sample_targets,
)
from protein_performer.evaluation.scope import (
    check_context_file,
    context_targets,
    cropping_summary,
    drop_copies,
    eval_packing,
    same_files,
    scope_note,
    training_copies,
    unigram_summary,
    warn_repeated_ids,
)
from protein_performer.model.checkpoints import choose_checkpoint, load_model, run_files
from protein_performer.model.metrics import (
    MLM_INPUT_KINDS,
    add_next_token_counts,
    batch_sums,
    causal_unigram_sums,
    perplexity,
    unigram_log_probs,
)
from protein_performer.utils.atomic import write_text_atomic
from protein_performer.utils.devices import inference_autocast, pick_device
from protein_performer.utils.numbers import number_text, same_number
from protein_performer.utils.outputs import check_output_file, json_safe, json_with_keys
from protein_performer.utils.paths import require_file
from protein_performer.utils.progress import progress as progress_bar

log = logging.getLogger(__name__)

# option names in data error messages -> the keys that set them for evaluate
EVAL_OPTIONS = {"strip_gaps": "strip_gaps=true"}

# ---- evaluate ---------------------------------------------------------------------------------
EVAL_JSON_KEYS = ("checkpoint", "fasta", "perplexity")


@dataclass
class EvalResult:
    checkpoint: str
    fasta: str
    attention: str
    objective: str
    sequences: int
    tokens: int
    predicted_tokens: int
    loss: float
    perplexity: float
    accuracy: float
    seconds: float
    seed: int
    # MLM only: the same metrics split by what the input showed at the predicted position
    # ("mask" / "random" / "unchanged", see metrics.mlm_input_kind_stats); None for causal.
    by_input: dict[str, dict[str, Any]] | None = None
    # what invalid=skip/replace did to the input (None: nothing)
    input_changes: str | None = None
    # the baseline on the same positions: residue frequencies of the training data (stored in
    # the checkpoint; older checkpoints: of the evaluated data), "from" says which
    unigram: dict[str, Any] | None = None
    # crop mode: proteins longer than max_length (crop=random scores one window of each;
    # crop=sliding cuts them into `windows` items); share of all residues inside the items
    crop: str | None = None
    cropped_records: int = 0
    residues_in_windows: float = 1.0
    windows: int | None = None
    # context=...: the paired with/without-context scores (training.context_eval)
    context: dict[str, Any] | None = None
    # split=: which part of which split was scored ({"part", "by", "fractions", "seed",
    # "clusters"}); None: every record
    split: dict[str, Any] | None = None
    # predicted positions whose true letter is X or another non-standard one (B, Z, U, O)
    nonstandard_targets: int = 0
    # concat mode: how the windows were packed, in words (None: crop mode)
    packing: str | None = None
    # no split= on a checkpoint that records its split: every record was scored, said
    scope: str | None = None
    # context=: the records of the files (or of the split's part); the plain metrics above
    # are of the `sequences` among them that the context part scores (evaluate without
    # context= scores them all). None: no context=, every record was scored
    all_records: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))

    def format(self) -> str:
        seqs = "sequence" if self.sequences == 1 else "sequences"
        files = self.fasta.split(", ")
        name = self.fasta if len(files) <= 2 else f"{files[0]} and {len(files) - 1} more files"
        text = (
            f"{name}: perplexity {number_text(self.perplexity, '.3f')}, accuracy {self.accuracy:.4f} "
            f"({self.predicted_tokens:,} predicted token{'' if self.predicted_tokens == 1 else 's'}"
            f" in {self.sequences:,} {seqs}; {self.attention}, {self.objective})"
        )
        if not math.isfinite(self.perplexity):
            text += (
                "\n  the perplexity is not finite: the model's outputs overflow or are NaN on "
                "these proteins (weights of a run that diverged?)"
            )
        if self.predicted_tokens < 100:
            # perplexity over a handful of positions says little: said next to it
            text += (
                f"\n  warning: {self.predicted_tokens} predicted "
                f"position{'' if self.predicted_tokens == 1 else 's'} only: these numbers "
                "are noisy (more or longer records, or another seed= to see how much)"
            )
        if self.all_records is not None and self.sequences < self.all_records:
            text += (
                f"\n  scored: only the {self.sequences:,} proteins the context part scores, of "
                f"{self.all_records:,} records (evaluate without context= scores them all)"
            )
        if self.input_changes:
            text += f"\n  input: {self.input_changes}"
        if self.nonstandard_targets:
            text += (
                f"\n  {self.nonstandard_targets:,} of the predicted positions hold X or another "
                "non-standard letter (B/Z/U/O); the model's and the unigram numbers include them"
            )
        if self.cropped_records and self.crop == "random":
            text += (
                f"\n  cropped: {self.cropped_records:,} of {self.sequences:,} proteins are longer "
                f"than max_length; {100 * self.residues_in_windows:.1f}% of all residues were in "
                "the scored windows (crop=sliding scores every residue)"
            )
        elif self.cropped_records:
            text += (
                f"\n  windows: {self.cropped_records:,} proteins longer than max_length were cut "
                f"into consecutive windows ({self.windows:,} items); every residue was in one"
            )
        if self.packing:
            text += f"\n  windows: {self.packing}"
        if self.scope:
            text += f"\n  note: {self.scope}"
        if self.unigram:
            u = self.unigram
            line = f"\n  unigram baseline ({u['from']} frequencies): perplexity {number_text(u['perplexity'], '.3f')}"
            mask = (self.by_input or {}).get("mask") or {}
            if u.get("mask_perplexity") and mask.get("perplexity"):
                ratio = mask["perplexity"] / u["mask_perplexity"]
                line += f"; on <mask> positions {number_text(u['mask_perplexity'], '.3f')} (model/unigram {number_text(ratio, '.3f')})"
            else:
                line += (
                    f" (model/unigram {number_text(self.perplexity / u['perplexity'], '.3f')} on every "
                    "scored position: none was <mask>)"
                    if self.by_input is not None and not mask.get("predicted_tokens")
                    else f" (model/unigram {number_text(self.perplexity / u['perplexity'], '.3f')})"
                )
            text += line
        if self.by_input:
            parts = [
                f"{kind} {number_text(m['perplexity'], '.3f')} / {number_text(m['accuracy'], '.4f')} "
                f"({m['predicted_tokens']:,})"
                for kind, m in self.by_input.items()
            ]
            text += "\n  by input at the predicted position (perplexity / accuracy): " + "; ".join(
                parts
            )
        if self.context:
            text += _context_text(self.context)
        return text


def _context_text(c: dict[str, Any]) -> str:
    """The context part of :meth:`EvalResult.format`: with / without context and its notes."""
    text = (
        f"\n  with context ({c['source']}): {c['proteins']:,} "
        f"protein{'' if c['proteins'] == 1 else 's'}, "
        f"{c['positions']:,} <mask> positions, {c['mean_context_proteins']:.1f} context "
        f"proteins ({c['mean_context_tokens']:.0f} tokens) on average: perplexity "
        f"{number_text(c['with_context']['perplexity'], '.3f')} with context vs "
        f"{number_text(c['without_context']['perplexity'], '.3f')} alone (ratio "
        f"{number_text(c['ratio'], '.3f')}); unigram {number_text(c['unigram_perplexity'], '.3f')}"
    )
    if c["positions"] < 100:
        text += f"\n    warning: {c['positions']} <mask> positions only: the ratio is noisy " + (
            "(more proteins, or context_max_proteins unset)"
            if c.get("max_proteins")
            else "(more proteins)"
        )
    if c.get("targets_cut"):
        text += (
            f"\n    {c['targets_cut']:,} of {c['proteins']:,} proteins are longer than "
            "half "
            f"of max_length={c['max_length']:,} (the other half is the context's room): a "
            f"seeded half-window of each was scored, "
            f"{100 * c['target_residues_in_windows']:.1f}% of their residues"
        )
    if c.get("context_proteins_cut"):
        text += (
            f"\n    {c['context_proteins_cut']:,} of {c['proteins']:,} windows hold a "
            f"context protein cut to the room left in max_length={c['max_length']:,}"
        )
    if "with_fill_only" in c:
        text += (
            f"\n    fill ({c['mean_fill_tokens']:.0f} tokens of other clusters' proteins "
            f"and separators on average) without the homologs: "
            f"{number_text(c['with_fill_only']['perplexity'], '.3f')} (with context / fill only "
            f"{number_text(c['ratio_vs_fill'], '.3f')})"
        )
        if c.get("short_fill_windows"):
            text += (
                f"\n    warning: {c['short_fill_windows']:,} windows could not be filled "
                f"to {c['max_length']:,} tokens (too few proteins of other clusters)"
            )
    for key, what in (
        ("identical", "with an identical sequence in context"),
        ("no_identical", "without one"),
    ):
        part = (c.get("by_context") or {}).get(key)
        if part and part["proteins"] and c["targets_with_identical_context"]:
            text += (
                f"\n    {what}: {part['proteins']:,} proteins, {part['positions']:,} "
                f"positions: {number_text(part['with_context']['perplexity'], '.3f')} vs "
                f"{number_text(part['without_context']['perplexity'], '.3f')} (ratio "
                f"{number_text(part['ratio'], '.3f')})"
            )
    return text


def _eval_split(cfg: EvalConfig, stored: dict[str, Any]) -> dict[str, Any]:
    """The split evaluate reproduces: the values given, else the checkpoint's training run's
    (so ``split=test`` scores that run's held-out proteins), else the defaults. ``caveats``:
    the warnings why its held-out part may hold proteins the model trained on (said as they
    are found; the result keeps them)."""
    caveats: list[str] = []
    # clusters= alone implies a cluster split, except when it is there for context=cluster
    implied = "cluster" if cfg.clusters and cfg.context != "cluster" else None
    if cfg.split and stored.get("split_by") == "explicit":
        raise ConfigError(
            f"split={cfg.split}: the training run's shards were split by files given per split "
            "(preprocess --val/--test), which no FASTA split reproduces; evaluate that file "
            "without split="
        )
    if cfg.split and implied and not cfg.split_by and stored.get("split_by") == "record":
        # another split than the run's: its "held-out" part would hold training proteins
        raise ConfigError(
            f"split={cfg.split} with clusters=: the training run split by record, so a cluster "
            "split's held-out part would hold proteins the model trained on; leave clusters= "
            "out for the run's own split, or add split_by=cluster to mean another one"
        )
    by = cfg.split_by or implied or stored.get("split_by") or "record"
    if cfg.split and stored.get("split_by") and by != stored["split_by"]:
        caveats.append(
            f"split={cfg.split} split_by={by}: the training run split by {stored['split_by']}; "
            "this held-out part may hold proteins the model trained on"
        )
        log.warning("%s", caveats[-1])
    clusters = cfg.clusters or (stored.get("clusters") if by == "cluster" else None)
    if cfg.split and cfg.context == "cluster" and by == "cluster" and stored.get("clusters"):
        # the split is the training run's; clusters= is the context's table
        table = stored["clusters"]
        if not cfg.clusters or Path(cfg.clusters).resolve() == Path(table).resolve():
            clusters = table
        elif Path(table).exists():
            log.warning(
                "split=%s uses the training run's clusters table %s; clusters=%s only picks "
                "the context",
                cfg.split,
                table,
                cfg.clusters,
            )
            clusters = table
        else:  # moved or made elsewhere: the table given is the only one there is
            caveats.append(
                f"split={cfg.split}: the training run's clusters table {table} is not here; the "
                f"split is drawn from clusters={cfg.clusters} (the run's own split only if it "
                "is the same clustering)"
            )
            log.warning("%s", caveats[-1])
    if cfg.split is None:
        given = [
            k
            for k in ("split_by", "clusters", "split_fractions", "split_seed")
            if getattr(cfg, k) is not None and not (k == "clusters" and cfg.context == "cluster")
        ]
        if given:
            log.warning(
                "%s only apply with split=train|val|test; every record is scored", ", ".join(given)
            )
        # every record is scored: no split, so no clusters table (the training run's may
        # have moved since)
        by, clusters = "record", None
    elif by == "cluster" and not clusters:
        raise ConfigError("split_by=cluster needs clusters=DIR (the output of `data cluster`)")
    elif by == "cluster" and not Path(clusters).exists():
        raise DataError(
            "clusters: no such file or directory (the training run's clusters table; give clusters=DIR)",
            path=clusters,
        )
    if cfg.split and by == "cluster" and stored.get("split_by") == "cluster":
        problem = check_run_clustering(clusters, table_digest(clusters), stored, cfg.split)
        if problem:
            caveats.append(problem)
    fractions = list(cfg.split_fractions or stored.get("split_fractions") or [0.9, 0.05, 0.05])
    seed = cfg.split_seed if cfg.split_seed is not None else (stored.get("split_seed") or 0)
    for key, value in (("split_seed", seed), ("split_fractions", fractions)):
        if cfg.split and stored.get(key) is not None and not same_number(value, stored[key]):
            caveats.append(
                f"split={cfg.split} {key}={value}: the training run split with {stored[key]}; "
                f"this {cfg.split} part is not the run's (it holds proteins the run "
                f"{'did not train on' if cfg.split == 'train' else 'trained on'})"
            )
            log.warning("%s", caveats[-1])
    return {
        "caveats": caveats,
        "by": by,
        "clusters": clusters if by == "cluster" else None,
        "fractions": fractions,
        "seed": seed,
    }


def _check_inputs(cfg: EvalConfig) -> tuple[EvalConfig, list[str], Path | None]:
    """The settings, the FASTA files (the run's own with ``split=`` alone), the context file
    and the output file, checked before any work: ``(cfg, fasta, output)``."""
    validate_eval_config(cfg)
    if fasta_unset(cfg.fasta):  # split= alone: the training run's own files
        cfg = dataclasses.replace(cfg, fasta=run_files(cfg.checkpoint, cfg.split))
    fasta = eval_fasta_paths(cfg)
    for path in fasta:
        require_file(path, "fasta")
    if cfg.context and cfg.context != "cluster":
        check_context_file(cfg.context)
    output = None
    if cfg.output:
        output = check_output_file(
            cfg.output,
            "output",
            overwrite=cfg.overwrite,
            is_ours=json_with_keys(EVAL_JSON_KEYS),
            what="evaluation JSON file",
            overwrite_hint="overwrite=true",
        )
    return cfg, fasta, output


def _window_settings(cfg: EvalConfig, model: Any, stored: dict[str, Any]) -> tuple[str, int, float]:
    """``(mode, max_length, mask_prob)``: the values given, else the training run's."""
    mode = cfg.mode or stored.get("mode", "crop")
    max_length = cfg.max_length or stored.get("max_length") or model.config.max_len
    mask_prob = cfg.mask_prob or stored.get("mask_prob", 0.15)
    if model.config.position == "learned" and max_length > model.config.max_len:
        raise ConfigError(
            f"max_length={max_length} exceeds the checkpoint's model.max_len="
            f"{model.config.max_len} (learned positions); use max_length<={model.config.max_len}"
        )
    return mode, max_length, mask_prob


def _split_data(
    cfg: EvalConfig,
    fasta: list[str],
    meta: dict[str, Any],
    alphabet: Alphabet,
    split_info: dict[str, Any],
    windows: tuple[str, int, float],
) -> tuple[ProteinDataModule, str, str | None]:
    """The data module holding the part to score, set up: ``(dm, split, packing words)``."""
    stored = meta.get("data") or {}
    mode, max_length, mask_prob = windows
    split = cfg.split or "test"
    files = {"files": fasta} if cfg.split else {"test_files": fasta}
    packing, packing_note, family_table = eval_packing(cfg, stored, mode)
    run_cap = stored.get("max_records") if cfg.split else None
    data = DataConfig(
        **files,
        split_fractions=list(split_info["fractions"]),
        split_seed=split_info["seed"],
        clusters=split_info["clusters"] or family_table,
        split_by=split_info["by"],
        packing=packing,
        family_spread=int(stored.get("family_spread") or 1) if packing == "family" else 1,
        mode=mode,
        max_length=max_length,
        toks_per_batch=cfg.toks_per_batch,
        mask_prob=mask_prob,
        seed=cfg.seed,
        invalid=cfg.invalid,
        strip_gaps=cfg.strip_gaps,
        allow_nucleotide=cfg.allow_nucleotide,
        # the run's own split: of the records it read (data.max_records caps before the split)
        max_records=min(x for x in (run_cap, cfg.max_records) if x)
        if split == "train" and (run_cap or cfg.max_records)
        else run_cap,
        val_max_records=cfg.max_records,
    )
    dm = ProteinDataModule(
        data,
        objective=meta["objective"],
        crop=cfg.crop,
        alphabet=alphabet,
        # the run's own split by record of its own files: copies of training records said
        find_copies=cfg.split in ("val", "test")
        and split_info["by"] == stored.get("split_by") == "record"
        and not split_info["caveats"]  # (another seed: most of it was trained on anyway)
        and same_files(fasta, stored.get("files")),
    )
    stage = {"train": "fit", "val": "validate", "test": "test"}[split]
    try:
        dm.setup(stage)
    except DataError as e:
        raise e.with_options(EVAL_OPTIONS) from None
    return dm, split, packing_note


def _split_records(
    cfg: EvalConfig, dm: ProteinDataModule, split: str, fasta: list[str]
) -> tuple[Any, str | None]:
    """The records of the part scored and what ``invalid=`` did to them; an empty part is an
    error that says why."""
    source = dm.datasets[split].source if split in dm.datasets else None
    warn_repeated_ids(source, cfg)
    counts = getattr(source, "encode_counts", None)
    changes = counts.changes() if counts is not None else None
    if source is None or len(dm.datasets[split]) == 0:
        if (
            counts is not None
            and counts.records_kept == 0
            and counts.skipped_invalid + counts.skipped_empty
        ):
            problem = f"no usable records ({changes})"
        elif cfg.split is None:
            problem = "no records to evaluate"
        else:
            problem = f"the {split} split is empty"
        raise DataError(problem, path=", ".join(fasta))
    return source, changes


def _context_inputs(
    cfg: EvalConfig,
    dm: ProteinDataModule,
    split: str,
    source: Any,
    meta: dict[str, Any],
    alphabet: Alphabet,
) -> tuple[list[Target] | None, Fill | None, Any, str | None]:
    """``context=``: the proteins to score with their context proteins (a seeded sample of
    ``context_max_proteins``; from a file, copies of the protein left out), the fill of
    ``context_fill=true``, the split's whole records they come from, and what a context file
    held; ``(None, None, None, None)`` without."""
    if not cfg.context:
        return None, None, None, None
    if meta["objective"] == "causal":
        raise ConfigError("context= scores masked-LM checkpoints; this one is causal")
    stored = meta.get("data") or {}
    # whole proteins (crop=sliding cut the dataset's copy into windows)
    whole = dm._load_source(split) if split in dm.windows else source
    order = record_order(whole, cfg.context_order)
    targets, note = context_targets(cfg, whole, stored, alphabet, order)
    targets = sample_targets(targets, cfg.context_max_proteins, cfg.seed)
    if note is not None:  # a file: a copy of the protein is not its homolog
        copies = drop_copies(targets)
        if copies:
            note += f"; {copies:,} copies of an evaluated protein left out of its context"
        if not any(t.context for t in targets):
            raise DataError(
                "the context file holds only copies of the evaluated proteins: no homolog to "
                "score them with",
                path=cfg.context,
            )
    fill = None
    if cfg.context_fill:
        fill = cluster_fill(
            whole, read_members(cfg.clusters or stored.get("clusters")), order=order
        )
    return targets, fill, whole, note


def _score_split(
    model: Any,
    loader: Any,
    alphabet: Alphabet,
    device: torch.device,
    causal: bool,
    uni_logp: torch.Tensor,
) -> dict[str, Any]:
    """One pass over ``loader``: the model's ``(nll, count, correct)`` sums in total and per MLM
    input kind, the unigram baseline's on the same positions (MLM), the targets' histogram
    (causal), the tokens read and the predicted positions holding a non-standard letter."""
    # (nll sum, count, correct) in total and per MLM input kind, summed on the device
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    kinds = (
        None if causal else torch.zeros(len(MLM_INPUT_KINDS), 3, dtype=torch.float64, device=device)
    )
    tokens = torch.zeros((), dtype=torch.int64, device=device)
    # targets that are X (unknown) or another non-standard letter: counted, and said
    extra = torch.tensor(
        [alphabet.index(c) for c in EXTRA_RESIDUES if c in alphabet.tokens], device=device
    )
    extra_targets = torch.zeros((), dtype=torch.int64, device=device)
    # the same sums for the unigram baseline on the same positions (causal: from the targets'
    # histogram at the end, as <eos>/<sep> are targets there and have no residue count)
    uni_sums = torch.zeros_like(sums)
    uni_kinds = None if kinds is None else torch.zeros_like(kinds)
    target_hist = torch.zeros(len(alphabet), dtype=torch.float64, device=device)
    autocast = inference_autocast(device)
    for batch in progress_bar(loader, desc="evaluating", unit="batch"):
        batch = {k: v.to(device) for k, v in batch.items()}
        with autocast:
            logits = model(batch["input_ids"], batch["padding_mask"])["logits"]
        total, per_kind = batch_sums(
            logits, batch["labels"], batch["input_ids"], causal, alphabet.mask_idx
        )
        sums += total
        if kinds is not None:
            kinds += per_kind
        if causal:
            add_next_token_counts(target_hist, batch["labels"])
        else:
            uni = uni_logp.expand(*batch["labels"].shape, -1)
            total, per_kind = batch_sums(
                uni, batch["labels"], batch["input_ids"], causal, alphabet.mask_idx
            )
            uni_sums += total
            if uni_kinds is not None:
                uni_kinds += per_kind
        tokens += (~batch["padding_mask"]).sum()
        scored = batch["labels"][:, 1:] if causal else batch["labels"]
        extra_targets += torch.isin(scored, extra).sum()
    return {
        "sums": sums,
        "kinds": kinds,
        "tokens": int(tokens),
        "nonstandard": int(extra_targets),
        "uni_sums": uni_sums,
        "uni_kinds": uni_kinds,
        "target_hist": target_hist,
    }


def _score_context(
    cfg: EvalConfig,
    model: Any,
    alphabet: Alphabet,
    targets: list[Target],
    fill: Fill | None,
    windows: tuple[str, int, float],
    device: torch.device,
    uni_logp: torch.Tensor,
) -> dict[str, Any]:
    """The context part: ``targets`` scored with and without their context proteins."""
    mode, max_length, mask_prob = windows
    with inference_autocast(device):  # the same precision as the plain pass
        context = context_perplexity(
            model,
            alphabet,
            targets,
            max_length=max_length,
            style="concat" if mode == "concat" else "crop",
            mask_prob=mask_prob,
            seed=cfg.seed,
            toks_per_batch=cfg.toks_per_batch,
            device=device,
            unigram_log_probs=uni_logp,
            progress=True,
            fill=fill,
            fill_place=cfg.context_fill_place,
        )
    context["max_length"] = max_length
    context["max_proteins"] = cfg.context_max_proteins
    context["source"] = (
        f"each protein's cluster, >= {cfg.context_min_members} members"
        + (
            f", among other clusters' proteins to {max_length} tokens"
            + (", right before the protein" if cfg.context_fill_place == "adjacent" else "")
            if fill
            else ""
        )
        if cfg.context == "cluster"
        else cfg.context
    )
    return context


def _by_input(kinds: torch.Tensor | None) -> dict[str, dict[str, Any]] | None:
    """The MLM metrics per input kind at the predicted position (None for causal)."""
    if kinds is None:
        return None
    return {  # None, not NaN, for a kind without positions: the JSON stays valid
        kind: {
            "predicted_tokens": int(n),
            "loss": s / n if n else None,
            "perplexity": perplexity(s, n) if n else None,
            "accuracy": c / n if n else None,
        }
        for kind, (s, n, c) in zip(MLM_INPUT_KINDS, kinds.tolist(), strict=True)
    }


def _split_words(cfg: EvalConfig, split_info: dict[str, Any]) -> dict[str, Any] | None:
    """The result's ``split``: which part of which split was scored (None: every record)."""
    if not cfg.split:
        return None
    return {
        "part": cfg.split,
        "by": split_info["by"],
        "fractions": list(split_info["fractions"]),
        "seed": split_info["seed"],
        "clusters": split_info["clusters"],
        "caveats": split_info["caveats"],
    }


def _write_result(result: EvalResult, output: Path | None, cfg: EvalConfig) -> None:
    if cfg.output:
        try:
            write_text_atomic(output, json.dumps(result.to_dict(), indent=2) + "\n")
        except OSError as e:
            raise DataError(f"output: not written ({e.strerror or e})", path=cfg.output) from None


@torch.inference_mode()
def evaluate(cfg: EvalConfig) -> EvalResult:
    """Perplexity and accuracy of a checkpoint on FASTA file(s): every record, or one part of
    their hash split (``cfg.split``). With ``cfg.context`` only the proteins the context part
    scores are scored, alone and with their context (``all_records``: of how many).

    MLM masks and crops are drawn from ``cfg.seed`` (deterministic). Writes the result as JSON
    to ``cfg.output`` when set.
    """
    # checks
    chosen = choose_checkpoint(cfg.checkpoint, bool(cfg.context))  # auto: the shipped model
    cfg = dataclasses.replace(cfg, checkpoint=chosen)
    cfg, fasta, output = _check_inputs(cfg)
    model, meta = load_model(cfg.checkpoint, attention=cfg.attention, nb_features=cfg.nb_features)
    alphabet = Alphabet.from_dict(meta["alphabet"])
    stored = meta.get("data") or {}
    windows = _window_settings(cfg, model, stored)
    mode, max_length, _ = windows
    # data
    split_info = _eval_split(cfg, stored)
    dm, split, packing_note = _split_data(cfg, fasta, meta, alphabet, split_info, windows)
    source, changes = _split_records(cfg, dm, split, fasta)
    # the unigram baseline's frequencies: the training data's, else the evaluated part's
    counts_from = "training data" if stored.get("unigram_counts") else "evaluated data"
    unigram_counts = stored.get("unigram_counts") or np.bincount(
        np.asarray(dm.datasets[split].source.tokens), minlength=len(alphabet)
    )
    targets, fill, whole, note = _context_inputs(cfg, dm, split, source, meta, alphabet)
    all_records = None
    if targets is not None:  # context=: the plain pass scores the context part's proteins only
        all_records = len(whole)
        dm.keep_records(split, [t.record for t in targets], whole)
    caveats = split_info["caveats"]
    copies = training_copies(dm, split)
    if copies:
        caveats.append(copies)
    loader = {
        "train": dm.train_dataloader,
        "val": dm.val_dataloader,
        "test": dm.test_dataloader,
    }[split]()
    # model
    device = pick_device(cfg.device)
    model.to(device)
    causal = meta["objective"] == "causal"
    uni_logp = unigram_log_probs(unigram_counts, alphabet).to(device)
    # score the split
    start = time.perf_counter()
    scores = _score_split(model, loader, alphabet, device, causal, uni_logp)
    nll, count, correct = scores["sums"].tolist()
    uni_sums = scores["uni_sums"]
    if causal:
        uni_sums, counts_from = causal_unigram_sums(
            scores["target_hist"].cpu(), unigram_counts, alphabet, counts_from
        )
    unigram = unigram_summary(uni_sums, scores["uni_kinds"], counts_from)
    # the context part
    context = None
    if targets is not None:
        context = _score_context(cfg, model, alphabet, targets, fill, windows, device, uni_logp)
        if note is not None:
            context["source"] = note
    # the result
    cropping = cropping_summary(dm, split, mode, max_length)
    if count == 0:
        raise DataError("nothing to predict (no residues)", path=cfg.fasta)
    run_cap = stored.get("max_records") if cfg.split else None
    result = EvalResult(
        checkpoint=str(cfg.checkpoint),
        fasta=", ".join(fasta),
        attention=model.config.kind_label,
        objective=meta["objective"],
        sequences=cropping["records"],
        tokens=scores["tokens"],
        predicted_tokens=int(count),
        loss=nll / count,
        perplexity=perplexity(nll, count),
        accuracy=correct / count,
        seconds=time.perf_counter() - start,
        seed=cfg.seed,
        by_input=_by_input(scores["kinds"]),
        input_changes=changes,
        unigram=unigram,
        nonstandard_targets=scores["nonstandard"],
        crop=cfg.crop if mode == "crop" else None,
        cropped_records=cropping["cropped"],
        residues_in_windows=cropping["share"],
        windows=cropping["windows"],
        packing=packing_note,
        scope="; ".join(
            n for n in (scope_note(cfg, stored, fasta, run_cap, meta["objective"]), *caveats) if n
        )
        or None,
        context=context,
        split=_split_words(cfg, split_info),
        all_records=all_records,
    )
    _write_result(result, output, cfg)
    return result
