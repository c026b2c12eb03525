"""Can the model retrieve from earlier in the window? A copy / homolog-context training probe.

Each training window is ``<cls> context <sep> target <eos>``
(``protein_performer.data.context_windows``) with only the target's residues masked (15%,
BERT-style). The context is the target itself
(``--context copy``: retrieval is exact copying), another member of its simulated family
(``--context family``: alignment through substitutions and indels) or nothing (``none``). A small
model (default 2 layers × 128, rotary positions, as in the issue's pilot) trains from scratch on
the embedded simulated sample; every ``--eval-every`` steps the perplexity on the target's masked
positions (BERT's selection: 80% ``<mask>``, 10% random, 10% unchanged) is measured on held-out
families, with the context and without it (``<cls> target <eos>``, the same masked positions),
next to the training unigram baseline. A model that retrieves shows
the with-context perplexity falling far below the without-context one (for a copy: toward 1).

    python benchmarks/retrieval.py --attention transformer performer_relu --steps 600
    python benchmarks/retrieval.py --quick        # smoke run (seconds)

``--align W`` adds attention supervision (as ``align.weight``): W × −log(the last head's
attention from each scored target residue to the context residue aligned to it). Every run
reports that head's mean attention on the aligned residue of the held-out windows (``aligned
attn``). ``--transfer KIND[@M] ...`` scores the trained weights under other attention kinds
(M features); ``--exact-layers`` and ``--local-heads`` make hybrids (kept by ``--transfer``).

Each attention kind trains in its own subprocess (same seed, same batches); a table, a JSON
with the curves and a PNG go to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_output_args,
    check_outputs,
    environment,
    format_table,
    machine_line,
    positive_int,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "simulated_families.fasta.gz"
FAMILY = re.compile(r"(?:UniRef\d+_)?SIMF(\d+)M")
PROBE = (-1, -1)  # the head --align supervises and every run measures: last layer, last head


def load_families(paths: list[Path], clusters: Path | None = None) -> dict[int, list[Any]]:
    """Family number -> member token arrays.

    The simulated sample's records (``SIMF<family>M<member>``) group by family. Real proteins
    group by the cluster of ``clusters`` (a ``protein-performer data cluster`` directory or its
    ``members.tsv``; a record it does not list is a family of its own) or, without it, each
    record is a family of one (``--context copy`` only: there is no other member to place).
    Families are numbered in a fixed order (simulated: their number; clusters: sorted ids).
    """
    from protein_performer.data.alphabet import default_alphabet
    from protein_performer.data.cluster import read_members
    from protein_performer.data.fasta import read_fasta

    alphabet = default_alphabet()
    members = read_members(clusters) if clusters is not None else None
    simulated: dict[int, list[Any]] = {}
    real: dict[str, list[Any]] = {}
    for path in paths:
        for rec in read_fasta(path):
            tokens = alphabet.encode(rec.sequence)
            m = FAMILY.match(rec.id)
            if m is not None:
                simulated.setdefault(int(m.group(1)), []).append(tokens)
            else:
                key = members.get(rec.id, rec.id) if members is not None else rec.id
                real.setdefault(key, []).append(tokens)
            if simulated and real:
                raise SystemExit(
                    f"{path}: record {rec.id} mixes simulated family members and real proteins"
                )
    if not simulated and not real:
        raise SystemExit(f"{', '.join(map(str, paths))}: no records")
    return simulated or {i: real[k] for i, k in enumerate(sorted(real))}


def probed_families(families: dict[int, list[Any]], context: str) -> list[int]:
    """The family keys the probe draws from: with ``--context family`` only families with
    another member to place before the target (a family of one would give no context)."""
    keys = sorted(families)
    if context == "family":
        keys = [f for f in keys if len(families[f]) >= 2]
        if not keys:
            raise SystemExit("--context family needs families: the simulated sample or --clusters")
    return keys


def make_window(rng, members, args, alphabet, eval_mode: bool = False):
    """(context window, single window, labels for each) for one target drawn from a family."""
    import numpy as np

    from protein_performer.data.context_windows import context_window, single_window
    from protein_performer.data.masking import IGNORE_INDEX, mask_tokens
    from protein_performer.data.pairwise_alignment import aligned_positions

    i = int(rng.integers(len(members)))
    target = members[i]
    # a fixed crop puts the copy at a fixed offset, which rotary positions can find without
    # matching content; --vary-length draws the crop length so that offsets vary
    crop = int(rng.integers(args.crop // 2, args.crop + 1)) if args.vary_length else args.crop
    if len(target) > crop:
        start = int(rng.integers(len(target) - crop + 1))
        target = target[start : start + crop]
    else:
        start = 0
    single = single_window(target, alphabet)
    inputs, labels = mask_tokens(single, alphabet, rng)
    if args.context == "copy":
        context = [target]
    elif args.context == "copy-whole":
        # data.pair_copy's layout: the whole protein, cut around the target's region to fit
        context = [members[i]]
    elif args.context == "family":
        others = [m for j, m in enumerate(members) if j != i]
        context = [others[int(rng.integers(len(others)))]] if others else []
    else:
        context = []
    anchor = 0.0  # the other contexts keep their N-terminal part when cut, as they always did
    if args.context == "copy-whole" and len(members[i]) > len(target):
        anchor = start / (len(members[i]) - len(target))
    tokens, tstart, _ = context_window(
        inputs[1:-1], context, alphabet, args.crop * 2 + 3, anchor=anchor
    )
    ctx_labels = np.full(len(tokens), IGNORE_INDEX, dtype=np.int64)
    ctx_labels[tstart : tstart + len(target)] = labels[1:-1]
    # the row position of the context residue aligned to each target residue (-1: none), from
    # the true residues: the target of --align's attention supervision and of its measurement
    align_to = np.full(len(tokens), -1, dtype=np.int64)
    if tstart > 2:
        hit = aligned_positions(alphabet.decode(target), alphabet.decode(tokens[1 : tstart - 1]))
        align_to[tstart : tstart + len(target)] = np.where(hit >= 0, hit + 1, -1)
    return tokens, ctx_labels, inputs, labels, align_to


def label(args: argparse.Namespace) -> str:
    """The attention kind, with its hybrid and feature settings when they are not plain."""
    out = args.attention
    if args.local_heads:
        out += f" + {args.local_heads} local heads (w={args.local_window})"
    if args.exact_layers:
        out += f" + exact layers {args.exact_layers}"
    if args.qkv_conv:
        out += f" + qkv conv {args.qkv_conv}"
    if args.attention.startswith("performer") and args.features != 256:
        out += f", m={args.features}"
    if args.attention == "hedgehog":
        out += f", F={args.features}"
    if args.vary_length:
        out += ", varying offsets"
    if args.align:
        out += f", align {args.align:g}"
    return out


def batch(windows, alphabet):
    import torch

    from protein_performer.data.batching import pad_batch
    from protein_performer.data.masking import IGNORE_INDEX

    ids, pad = pad_batch([w[0] for w in windows], alphabet.pad_idx)
    labels, _ = pad_batch([w[1] for w in windows], IGNORE_INDEX)
    return ids, pad, labels.to(torch.int64)


def align_targets(windows):
    """``(B, L)`` int64: the aligned context position per target residue, ``-1`` elsewhere."""
    import torch

    from protein_performer.data.batching import pad_batch

    return pad_batch([w[4] for w in windows], -1)[0].to(torch.int64)


def distill_maps(student, teacher, rng, families, train, args) -> list[float]:
    """Hedgehog's attention distillation: train only ``student``'s feature maps, layer by layer
    on ``teacher``'s hidden states, to reproduce each head's attention rows (soft
    cross-entropy against the teacher's rows) for ``args.distill`` steps. Returns the loss
    every 50 steps (nats per row, averaged over the distilled layers and heads)."""
    import torch

    from protein_performer.data.alphabet import default_alphabet

    alphabet = default_alphabet()
    maps = [p for n, p in student.named_parameters() if ".attn.maps." in f".{n}"]
    opt = torch.optim.Adam(maps, lr=args.distill_lr)
    layers = [i for i, k in enumerate(student.config.layer_kinds()) if k == "hedgehog"]
    losses = []
    student.train()
    for step in range(args.distill):
        windows = [
            make_window(rng, families[train[int(rng.integers(len(train)))]], args, alphabet)
            for _ in range(args.batch)
        ]
        ids, pad, _ = batch([(w[0], w[1]) for w in windows], alphabet)
        pad = pad if bool(pad.any()) else None
        with torch.no_grad():
            hidden = teacher(ids, pad, return_hidden=True)["hidden_states"]
        rotary = (
            None
            if teacher.rotary is None
            else teacher.rotary(ids.shape[1], ids.device, hidden[0].dtype)
        )
        valid = torch.ones(ids.shape, dtype=torch.bool) if pad is None else ~pad
        loss = 0.0
        for i in layers:
            x = teacher.blocks[i].norm1(hidden[i])
            for h in range(student.config.local_heads, student.config.heads):
                with torch.no_grad():
                    target = teacher.blocks[i].attn.head_attention(
                        x, h, pad, teacher.layer_rotary(i, rotary)
                    )
                rows = student.blocks[i].attn.head_attention(
                    x, h, pad, student.layer_rotary(i, rotary)
                )
                ce = -(target * torch.log(rows.clamp_min(1e-30))).sum(-1)
                loss = loss + ce[valid].mean()
        loss = loss / (len(layers) * (student.config.heads - student.config.local_heads))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == args.distill - 1:
            losses.append(float(loss.detach()))
            print(
                f"[distill] step {step}: {losses[-1]:.3f} nats per row",
                file=sys.stderr,
                flush=True,
            )
    student.eval()
    return losses


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from protein_performer.data.alphabet import default_alphabet
    from protein_performer.model.checkpoints import load_weights
    from protein_performer.model.config import ModelConfig
    from protein_performer.model.metrics import alignment_nll
    from protein_performer.model.performer import ProteinLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    alphabet = default_alphabet()
    families = load_families([Path(f) for f in args.fasta], args.clusters)
    keys = probed_families(families, args.context)
    held = [f for f in keys if f % 10 == 0]
    train = [f for f in keys if f % 10 != 0]
    counts = np.bincount(
        np.concatenate([m for f in train for m in families[f]]), minlength=len(alphabet)
    ).astype(np.float64)
    uni = np.log(np.maximum(counts, 1e-12) / counts.sum())
    eval_rng = np.random.default_rng([args.seed, 1])
    eval_windows = [
        make_window(eval_rng, families[held[int(eval_rng.integers(len(held)))]], args, alphabet)
        for _ in range(args.eval_windows)
    ]
    config = ModelConfig(
        attention=args.attention,
        dim=args.dim,
        depth=args.depth,
        heads=args.heads,
        ffn_dim=4 * args.dim,
        dropout=0.0,
        max_len=2 * args.crop + 8,
        position=args.position,
        nb_features=args.features,
        redraw_interval=args.redraw,
        local_heads=args.local_heads,
        local_window=args.local_window,
        exact_layers=list(args.exact_layers or []),
        qkv_conv=args.qkv_conv,
    )
    model = ProteinLM(config, len(alphabet), alphabet.pad_idx)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warm = max(1, args.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warm)
            * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
        ),
    )
    from protein_performer.attention.favor import redraw_all

    @torch.no_grad()
    def evaluate(model: torch.nn.Module = model) -> dict[str, float]:
        model.eval()
        out = {}
        # on the context windows also the probed head's attention on the aligned context
        # residue at the scored positions: what --align trains, measured whether or not it is
        mass = hits = 0.0
        for name, (tok_i, lab_i) in {"context": (0, 1), "single": (2, 3)}.items():
            nll = n = 0.0
            for i in range(0, len(eval_windows), 32):
                chunk = eval_windows[i : i + 32]
                ids, pad, labels = batch([(w[tok_i], w[lab_i]) for w in chunk], alphabet)
                res = model(ids, pad, probe=PROBE if name == "context" else None)
                sel = labels != -100
                nll += float(F.cross_entropy(res["logits"][sel], labels[sel], reduction="sum"))
                n += int(sel.sum())
                if name == "context":
                    align = align_targets(chunk)
                    _, on = alignment_nll(res["probe_attention"], align, labels)
                    if on is not None:
                        k = int(((align >= 0) & sel).sum())
                        mass, hits = mass + float(on) * k, hits + k
            out[name] = math.exp(nll / n)
        out["align_mass"] = mass / hits if hits else float("nan")
        labels = np.concatenate([w[3][w[3] != -100] for w in eval_windows])
        out["unigram"] = math.exp(-float(uni[labels].mean()))
        out["positions"] = len(labels)
        model.train()
        return out

    rng = np.random.default_rng([args.seed, 0])
    curve = []
    start = time.perf_counter()
    model.train()
    for step in range(args.steps + 1):
        if step % args.eval_every == 0 or step == args.steps:
            point = {"step": step, "seconds": time.perf_counter() - start, **evaluate()}
            curve.append(point)
            print(
                f"[{args.attention}] step {step}: context {point['context']:.2f} "
                f"single {point['single']:.2f} unigram {point['unigram']:.2f} "
                f"aligned attention {point['align_mass']:.3f}",
                file=sys.stderr,
                flush=True,
            )
        if step == args.steps:
            break
        redraw_all(model, step)
        windows = [
            make_window(rng, families[train[int(rng.integers(len(train)))]], args, alphabet)
            for _ in range(args.batch)
        ]
        ids, pad, labels = batch([(w[0], w[1]) for w in windows], alphabet)
        out = model(ids, pad, probe=PROBE if args.align else None)
        sel = labels != -100
        loss = F.cross_entropy(out["logits"][sel], labels[sel])
        if args.align:
            align_nll, _ = alignment_nll(out["probe_attention"], align_targets(windows), labels)
            if align_nll is not None:
                loss = loss + args.align * align_nll
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    # the trained weights under other attention kinds, unchanged (the shared parameterization
    # that init_from uses): what the conversion costs once the attention has become sharp;
    # --exact-layers stay exact
    transfer = []
    for spec in args.transfer or []:
        kind, _, m = spec.partition("@")
        other = ProteinLM(
            dataclasses.replace(config, attention=kind, nb_features=int(m or args.features)),
            len(alphabet),
            alphabet.pad_idx,
        )
        load_weights(other, model.state_dict(), "the trained probe model")
        point = evaluate(other)
        if kind == "hedgehog" and args.distill:
            point["before_distill"] = {k: point[k] for k in ("context", "single", "align_mass")}
            point["distill_loss"] = distill_maps(other, model, rng, families, train, args)
            point.update(evaluate(other))
        transfer.append({"attention": spec, **point})
        print(
            f"[{args.attention} -> {spec}] context {point['context']:.2f} "
            f"single {point['single']:.2f}",
            file=sys.stderr,
            flush=True,
        )
    return {"attention": label(args), "curve": curve, "transfer": transfer}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--attention", nargs="+", default=["transformer", "performer_relu"])
    p.add_argument(
        "--context",
        choices=["copy", "copy-whole", "family", "none"],
        default="copy",
        help="copy: the target's crop; copy-whole: its whole protein cut around the crop "
        "(data.pair_copy's layout); family: another member; none",
    )
    p.add_argument("--steps", type=positive_int, default=600)
    p.add_argument("--eval-every", type=positive_int, default=100)
    p.add_argument("--eval-windows", type=positive_int, default=128)
    p.add_argument("--batch", type=positive_int, default=16)
    p.add_argument("--crop", type=positive_int, default=200, help="target residues at most")
    p.add_argument(
        "--vary-length",
        action="store_true",
        help="crop each target to a random length in [crop/2, crop]: the copy's offset varies",
    )
    p.add_argument("--dim", type=positive_int, default=128)
    p.add_argument("--depth", type=positive_int, default=2)
    p.add_argument("--heads", type=positive_int, default=4)
    p.add_argument("--features", type=positive_int, default=256)
    p.add_argument("--redraw", type=int, default=0)
    p.add_argument("--local-heads", type=int, default=0, help="model.local_heads (hybrid)")
    p.add_argument("--local-window", type=int, default=16, help="model.local_window")
    p.add_argument("--position", default="rotary")
    p.add_argument("--qkv-conv", type=int, default=0, help="model.qkv_conv (kernel size)")
    p.add_argument(
        "--exact-layers",
        type=int,
        nargs="+",
        default=None,
        help="model.exact_layers: layers with exact attention (the layer-wise hybrid)",
    )
    p.add_argument(
        "--transfer",
        nargs="+",
        default=None,
        metavar="KIND[@M]",
        help="after training, score the same weights with these attention kinds (M features)",
    )
    p.add_argument(
        "--distill",
        type=int,
        default=0,
        metavar="STEPS",
        help="--transfer hedgehog: first train its feature maps for STEPS steps to mimic the "
        "trained model's attention rows (Hedgehog's attention distillation)",
    )
    p.add_argument("--distill-lr", type=float, default=1e-2)
    p.add_argument(
        "--align",
        type=float,
        default=0.0,
        help="attention supervision weight (the last head of the last layer, as align.weight)",
    )
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument(
        "--fasta",
        nargs="+",
        default=[str(SAMPLE)],
        help="the simulated sample (default) or real proteins (each record a family of one)",
    )
    p.add_argument(
        "--clusters",
        type=Path,
        default=None,
        help="group real proteins by these clusters (data cluster's output) for --context family",
    )
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--quick", action="store_true", help="20 steps on 60-residue crops: a smoke run (seconds)"
    )
    p.add_argument("--png", type=Path, default=None, help="default: next to the JSON")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_output_args(p)
    return p


def _tag(args: argparse.Namespace) -> str:
    tag = f"retrieval_{args.context}" + ("_vary" if args.vary_length else "")
    return tag + ("_align" if args.align else "")


def main() -> None:
    cli = parser()
    args = cli.parse_args()
    if args.quick:
        args.steps, args.eval_every, args.eval_windows, args.crop = 20, 10, 16, 60
    if args.worker:
        args.attention = args.attention[0]
        print(json.dumps(worker(args)))
        return
    json_path = args.json or RESULTS / f"{_tag(args)}.json"
    png_path = args.png or json_path.with_suffix(".png")
    check_outputs(cli, [json_path, png_path], args.overwrite)
    print(machine_line(threads=args.threads), flush=True)
    runs = []
    for kind in args.attention:
        cmd = [sys.executable, __file__, "--worker", "--attention", kind]
        for key, value in vars(args).items():
            skip = key in ("attention", "worker", "quick", "json", "png")
            if skip or value is False or value is None:
                continue
            flag = f"--{key.replace('_', '-')}"
            if isinstance(value, list):
                cmd += [flag, *map(str, value)]
            else:
                cmd += [flag] if value is True else [flag, str(value)]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"{kind}: worker failed (exit {done.returncode})")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))

    def row(name: str, point: dict[str, Any], steps: Any = "", seconds: str = "") -> list[Any]:
        ratio = point["context"] / point["single"]
        return [
            name, steps, seconds, f"{point['single']:.2f}", f"{point['context']:.2f}",
            f"{ratio:.3f}", f"{point['unigram']:.2f}", f"{point['align_mass']:.3f}",
        ]  # fmt: skip

    rows = []
    for run in runs:
        last = run["curve"][-1]
        rows.append(row(run["attention"], last, last["step"], f"{last['seconds']:.0f}"))
    for run in runs:
        rows += [row(f"  {run['attention']} -> {t['attention']}", t) for t in run["transfer"]]
    headers = [
        "attention",
        "steps",
        "s",
        "ppl alone",
        "ppl w/ context",
        "ratio",
        "unigram",
        "aligned attn",
    ]
    print(
        f"context={args.context}, held-out families, {runs[0]['curve'][-1]['positions']} "
        "masked positions"
    )
    print(format_table(headers, rows))
    payload = {"env": environment(), "args": vars(args) | {"json": None, "png": None}, "runs": runs}
    write_json(json_path, payload)
    print(f"wrote {json_path}")
    plot(runs, args, png_path)


def plot(runs: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, run in enumerate(runs):
        steps = [c["step"] for c in run["curve"]]
        ax.plot(steps, [c["context"] for c in run["curve"]], color=f"C{i}", label=run["attention"])
        ax.plot(steps, [c["single"] for c in run["curve"]], color=f"C{i}", ls=":")
    ax.axhline(runs[0]["curve"][-1]["unigram"], color="grey", lw=0.8, label="unigram")
    ax.set_xlabel("training step")
    ax.set_ylabel("perplexity on the target's masked positions")
    ax.set_title(
        f"context={args.context}: solid with context, dotted alone; {args.steps} steps\n"
        f"{machine_line(threads=args.threads)}" + ("\nsmoke run (--quick)" if args.quick else ""),
        fontsize=8,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
