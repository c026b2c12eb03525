r"""Does a lookup survive unrelated proteins in the window? Copy retrieval vs fill length.

For each checkpoint, each of ``--proteins`` proteins (the first ``--crop`` residues, 15% masked,
BERT-style) is scored in windows ``fill <sep> copy <sep> protein`` where ``copy`` is the
protein itself, unmasked, and ``fill`` is ``N`` tokens of other proteins of the FASTA drawn at
random (the same draws for every checkpoint), for each ``N`` of ``--fill``. Reported per N:
``<mask>``-position perplexity (``alone``: the protein with nothing before it, the baseline),
and the share of attention that the masked positions give the copy's aligned position in
``--layer`` (the head that gives it most, mean over positions). A softmax lookup with a fixed
score margin keeps a share that falls as ~1/N; Scalable-Softmax (``model.scalable_softmax``)
is meant to hold it.

    python benchmarks/dilution.py RUN/checkpoints/last.ckpt [...] --fill 0 250 1000 3000 7000 \
        --fasta ../shared/data/uniprot_UP000000625_ecoli_k12.fasta --json PATH

The homolog-free copy isolates retrieval from alignment; ``evaluate context=cluster
context_fill=true`` is the real-homolog measurement.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_output_args,
    check_outputs,
    environment,
    format_table,
    machine_line,
    non_negative_int,
    one_line_errors,
    positive_int,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "simulated_families.fasta.gz"


def read_proteins(path: Path, alphabet: Any, limit: int, min_length: int) -> list[np.ndarray]:
    """Up to ``limit`` records of ``path`` with at least ``min_length`` residues, as token ids
    (residues outside the 20 standard amino acids dropped)."""
    from protein_performer.data.fasta import read_fasta

    standard = set("ACDEFGHIKLMNPQRSTVWY")
    out = []
    for record in read_fasta(path):
        seq = "".join(c for c in str(record.sequence).upper() if c in standard)
        if len(seq) >= min_length:
            out.append(np.asarray(alphabet.encode(seq), dtype=np.int64))
        if len(out) >= limit:
            break
    return out


def windows(
    proteins: list[np.ndarray], n_targets: int, crop: int, fill: int, alphabet: Any, seed: int
) -> list[dict[str, Any]]:
    """The masked targets and their ``fill <sep> copy <sep> target`` windows (``crop`` style)."""
    from protein_performer.data.context_windows import context_window, single_window
    from protein_performer.data.masking import mask_tokens

    rng = np.random.default_rng(seed)
    order = rng.permutation(len(proteins))
    targets, pool = order[:n_targets], order[n_targets:]
    out = []
    for k, t in enumerate(targets):
        res = proteins[t][:crop]
        x, y = mask_tokens(single_window(res, alphabet), alphabet, np.random.default_rng([seed, k]))
        y = np.where(x == alphabet.mask_idx, y, -100)
        body = x[1:-1]
        draw = np.random.default_rng([seed, k, 1])  # the same fill for every checkpoint
        others, total = [], 0
        while total < fill:
            other = proteins[pool[int(draw.integers(len(pool)))]][: fill - total - 1]
            if len(other) == 0:
                break
            others.append(other)
            total += len(other) + 1
        length = len(res) + 2 + total + len(res) + 1
        tokens, start, _ = context_window(body, [*others, res], alphabet, length)
        labels = np.full(len(tokens), -100)
        labels[start : start + len(res)] = y[1:-1]
        copy_start = start - 1 - len(res)
        out.append(
            dict(single=x, single_y=y, tokens=tokens, labels=labels, copy=copy_start, start=start)
        )
    return out


@torch.inference_mode()
def score(model: Any, rows: list[dict[str, Any]], layer: int) -> dict[str, float]:
    nll, alone, share = [], [], []
    depth = model.config.depth
    for row in rows:
        for key, ys, out in (("single", "single_y", alone), ("tokens", "labels", nll)):
            ids = torch.as_tensor(row[key])[None]
            logp = torch.log_softmax(model(ids)["logits"].float(), -1)[0]
            y = row[ys]
            sel = np.flatnonzero(y != -100)
            out.append(-logp[sel, y[sel]].numpy())
        ids = torch.as_tensor(row["tokens"])[None]
        sel = np.flatnonzero(row["labels"] != -100)
        aligned = row["copy"] + (sel - row["start"])
        for _, _, w in model.iter_attention(ids, layers=[layer % depth], chunk_size=len(ids[0])):
            share.append(w[0][:, sel, aligned].max(0).values.numpy())
    return {
        "positions": int(sum(len(a) for a in nll)),
        "perplexity": float(np.exp(np.concatenate(nll).mean())),
        "alone": float(np.exp(np.concatenate(alone).mean())),
        "aligned_share": float(np.concatenate(share).mean()),
    }


def run_name(ckpt: Path) -> str:
    """What the table calls a checkpoint: its run directory for ``RUN/checkpoints/x.ckpt``,
    else its file name (``default`` for the shipped one)."""
    if ckpt.parent.name == "checkpoints" and ckpt.parent.parent.name:
        return ckpt.parent.parent.name
    return ckpt.name


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("checkpoints", nargs="+", type=Path)
    p.add_argument("--fasta", type=Path, default=SAMPLE)
    p.add_argument("--fill", type=non_negative_int, nargs="+", default=[0, 250, 1000, 3000, 7000])
    p.add_argument("--proteins", type=positive_int, default=24)
    p.add_argument("--crop", type=positive_int, default=200)
    p.add_argument("--layer", type=int, default=-1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--json", type=Path, default=RESULTS / "dilution.json")
    p.add_argument("--quick", action="store_true", help="2 proteins, fill 0 and 100 (seconds)")
    add_output_args(p)
    args = p.parse_args(argv)
    check_outputs(p, [args.json], args.overwrite)
    if args.quick:
        args.proteins, args.fill, args.crop = 2, [0, 100], 60
    torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    from protein_performer.model.checkpoints import load_model

    results, table = [], []
    proteins = None
    for ckpt in args.checkpoints:
        model, meta = load_model(ckpt)
        from protein_performer.data.alphabet import Alphabet

        alphabet = Alphabet.from_dict(meta["alphabet"])
        if proteins is None:
            proteins = read_proteins(args.fasta, alphabet, 5000, min(120, args.crop))
            if len(proteins) <= args.proteins:
                p.error(f"{args.fasta}: {len(proteins)} usable proteins, need > {args.proteins}")
        m = meta["model"]
        for fill in args.fill:
            rows = windows(proteins, args.proteins, args.crop, fill, alphabet, args.seed)
            r = score(model, rows, args.layer) | {"checkpoint": str(ckpt), "fill_tokens": fill}
            r["model"] = {
                k: m.get(k)
                for k in (
                    "attention",
                    "exact_layers",
                    "nope_layers",
                    "scalable_softmax",
                    "qkv_conv",
                )
            }
            results.append(r)
            table.append(
                [
                    run_name(ckpt),
                    fill,
                    r["positions"],
                    r["alone"],
                    r["perplexity"],
                    r["aligned_share"],
                ]
            )
            print(
                f"  {run_name(ckpt)} fill={fill}: alone {r['alone']:.3f}, with copy "
                f"{r['perplexity']:.3f}, share {r['aligned_share']:.3f}",
                file=sys.stderr,
                flush=True,
            )
    print(format_table(["run", "fill", "positions", "alone", "with copy", "share"], table))
    write_json(
        args.json,
        {
            "environment": environment(),
            "args": {k: str(v) for k, v in vars(args).items()},
            "results": results,
        },
    )
    print(f"written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
