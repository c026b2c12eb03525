"""One line per ``train`` key: what it does, for ``protein-performer train --help``.

Kept next to the schema (:mod:`protein_performer.config.schema`, :class:`ModelConfig`); a test checks
that every key of :class:`~protein_performer.config.schema.TrainConfig` has its line and no line is
left for a key that is gone.
"""

from __future__ import annotations

import re

TRAIN_KEY_HELP: dict[str, str] = {
    # model
    "model.attention": "performer_relu | performer_softmax (FAVOR+) | transformer (exact) | "
    "taylor | hedgehog",
    "model.dim": "model width (embedding size)",
    "model.depth": "number of layers",
    "model.heads": "attention heads per layer (head size = dim / heads)",
    "model.ffn_dim": "hidden size of each layer's feed-forward block",
    "model.dropout": "dropout rate",
    "model.max_len": "longest row the model reads (learned positions: their table size)",
    "model.position": "learned | rotary position encoding",
    "model.nb_features": "random features per head (FAVOR+), learned ones (hedgehog)",
    "model.orthogonal": "FAVOR+: block-orthogonal random projections (false: iid)",
    "model.redraw_interval": "FAVOR+: training steps between feature redraws (0: never)",
    "model.feature_seed": "FAVOR+: seed of the random features (with the layer and redraw)",
    "model.local_heads": "hybrid: this many heads per layer are exact within local_window",
    "model.local_window": "hybrid: positions the local heads see",
    "model.exact_layers": "layers with exact global attention, e.g. [-1] (negative: from the end)",
    "model.qkv_conv": "depthwise convolution of q/k/v over this many positions (0: off)",
    "model.nope_layers": "rotary: layers whose queries and keys are not rotated",
    "model.scalable_softmax": "exact heads scale scores by log(n)/log(this) (0: off)",
    "model.context_positions": "window | columns: a homolog residue at its place, or at the "
    "protein column it aligns to (rotary)",
    "model.checkpointing": "recompute activations in the backward (less memory, ~1 more forward)",
    "model.save_features": "FAVOR+: keep features for the backward (faster, more memory)",
    # data
    "data.files": "FASTA files (.gz too); hash-split into train/val/test unless val_files is set",
    "data.val_files": "FASTA of the validation set (then files is the training set only)",
    "data.test_files": "FASTA of the test set",
    "data.shards": "folder written by `data preprocess` (instead of files)",
    "data.split_fractions": "train/val/test fractions of the hash split",
    "data.split_seed": "seed of the hash split",
    "data.clusters": "`data cluster` output: for split_by=cluster, sample=cluster*, packing=family",
    "data.split_by": "record | cluster (whole clusters held out: no homolog of a test protein)",
    "data.sample": "record (each protein once an epoch) | cluster | cluster_sqrt",
    "data.mode": "crop (one protein per row) | concat (windows of concatenated proteins)",
    "data.packing": "concat: stream | family | copy; crop: pairs (a protein after a homolog)",
    "data.min_members": "family/pairs: train only on clusters with at least this many members",
    "data.family_spread": "family: interleave this many families (homologs this far apart)",
    "data.pair_copy": "pairs: probability that the partner is the protein itself",
    "data.pair_mask": "pairs: all (mask the whole row) | protein (the partner stays whole)",
    "data.pair_alone": "pairs: probability of a row with the protein alone",
    "data.pair_fill": "pairs: fill rows to max_length with other clusters' proteins",
    "data.pair_partners": "pairs: up to this many homologs before a protein (count drawn per row)",
    "data.pair_homologs": "pairs: a `data search` output of the files against themselves: "
    "partners are each protein's hits (alignment-like rows)",
    "data.pair_columns": "pairs: each homolog cut to the protein's columns, read at them "
    "(model.context_positions=columns)",
    "data.pair_column_crop": "pair_columns: partners (every crop leaves room for "
    "pair_partners homologs) or drawn (for the homologs the row draws, as score crops)",
    "data.max_length": "tokens per row (longer proteins are cropped)",
    "data.toks_per_batch": "tokens per batch (rows x longest row)",
    "data.batch_size": "fixed rows per batch instead of toks_per_batch",
    "data.mask_prob": "share of residues selected for the masked-LM loss",
    "data.seed": "seed of crops, order, batches and masks",
    "data.num_workers": "data-loader worker processes (capped at the CPU count)",
    "data.invalid": "records with invalid residues: error | skip | replace (by X)",
    "data.strip_gaps": "remove alignment gaps (-, .) instead of treating them as invalid",
    "data.allow_nucleotide": "read records that look like DNA/RNA (an error otherwise)",
    "data.max_records": "read at most this many records (before the split)",
    "data.val_max_records": "at most this many validation/test records",
    # optim
    "optim.name": "adamw (decoupled weight decay) | adam",
    "optim.lr": "peak learning rate",
    "optim.betas": "Adam betas",
    "optim.eps": "Adam epsilon",
    "optim.weight_decay": "weight decay",
    "optim.schedule": "constant | cosine (decay to min_lr_ratio x lr by max_steps)",
    "optim.warmup_steps": "linear warm-up steps",
    "optim.min_lr_ratio": "cosine: final learning rate as a share of lr",
    # trainer
    "trainer.accelerator": "cpu | gpu | cuda | mps | auto",
    "trainer.devices": "devices (processes) per machine; auto or -1: all",
    "trainer.num_nodes": "machines (each started by a launcher: torchrun, SLURM)",
    "trainer.strategy": "auto | ddp | fsdp | single_device",
    "trainer.precision": "auto (bf16-mixed on GPUs with bf16, else 16-mixed; 32-true on CPU) | 32-true | ...",
    "trainer.max_steps": "training steps (optimizer updates)",
    "trainer.threads": "CPU threads (null: the CPUs other work leaves free when the run starts)",
    "trainer.max_time": "stop after this long: 30m, 1h30m, HH:MM:SS, DD:HH:MM:SS",
    "trainer.checkpoint_every_minutes": "also save last.ckpt this often (null/0: at validations)",
    "trainer.val_check_interval": "validate every this many steps",
    "trainer.limit_val_batches": "at most this many validation batches (null: all)",
    "trainer.log_every_n_steps": "write metrics.csv every this many steps",
    "trainer.gradient_clip_val": "clip the gradient norm to this (0: off)",
    "trainer.accumulate_grad_batches": "batches per optimizer step",
    "trainer.enable_progress_bar": "a bar on a terminal, a line every 30 s in a log",
    "trainer.model_summary": "print Lightning's layer table at the start",
    "trainer.tensorboard": "also log to TensorBoard (needs the tensorboard extra)",
    "trainer.deterministic": "deterministic kernels (slower; same numbers run to run)",
    # analysis, align
    "analysis.similarity_every_n_steps": "log aa similarity vs BLOSUM62 this often (null: off)",
    "analysis.similarity_proteins": "validation proteins sampled (seeded) for it",
    "analysis.similarity_threshold": "attention weight counted as an arc",
    "analysis.similarity_min_arcs": "heads with fewer arcs are left out",
    "align.weight": "pairs: > 0 adds attention supervision toward aligned partner residues",
    "align.layer": "the supervised head's layer (negative: from the end)",
    "align.head": "the supervised head (negative: from the end)",
    # top level
    "objective": "mlm (masked LM, bidirectional) | causal (next token)",
    "seed": "model initialisation and dropout",
    "init_from": "start from another checkpoint's weights (e.g. transformer -> performer)",
    "ckpt_path": "resume a run exactly from its checkpoints/last.ckpt (last: the one in hydra.run.dir if any, else start)",
}

_LEAF = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w]*):(?P<value>.*)$")


def annotate_yaml(text: str, helps: dict[str, str], width: int = 36) -> str:
    """``text`` (OmegaConf's block YAML: two-space indents, lists as ``- item`` lines) with
    ``# meaning`` after every key found in ``helps`` (dotted keys)."""
    path: list[str] = []
    out = []
    for line in text.splitlines():
        m = _LEAF.match(line)
        if m is None:
            out.append(line)
            continue
        depth = len(m["indent"]) // 2
        path = [*path[:depth], m["key"]]
        meaning = helps.get(".".join(path))
        if meaning:
            line = f"{line:<{width}} # {meaning}" if len(line) < width else f"{line}  # {meaning}"
        out.append(line)
    return "\n".join(out)


__all__ = ["TRAIN_KEY_HELP", "annotate_yaml"]
