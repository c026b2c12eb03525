r"""Long proteins scored with their homologs: the column crop against whole-protein windows.

For held-out proteins (the checkpoint's test split, ``--min-residues`` to ``--max-residues``)
with at least ``--min-hits`` search hits into the training split, ``--sites`` evenly spaced
sites of each are masked one at a time and scored as ``score context=`` scores them (the first
16 hits, the profile's local alignments, ``context_window_homologs=16``: one window, whatever
the model's default) with the column crop
(``context_crop=true``: the residues about the site, each homolog's residues in those columns)
and without it (the whole protein, as many whole homologs as fit), beside the model alone
(1,024-token windows): perplexity of the true residue at the masked sites. The scorer's hits
are aligned to the whole protein, which places a hit's residue where it matches the hidden one;
"crop, aligned blind" builds the crop from the hits aligned with the sites unknown, and
"profile" is the profile of those same hits so aligned: the fair pair.

    python benchmarks/long_windows.py --fasta FILES --clusters clusters14 --write-queries long.fasta
    protein-performer data search long.fasta FILES hits_long --min-identity 0.2 --max-identity 0.9 \
        --min-coverage 0.5 --max-hits 48 --margin 0
    python benchmarks/long_windows.py --fasta FILES --clusters clusters14 --queries long.fasta \
        --hits hits_long --json docs/results/long_windows.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
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
    int_at_least,
    machine_line,
    one_line_errors,
    write_json,
)


def test_split(args: argparse.Namespace, alphabet: Any) -> Any:
    """The held-out records (the test split of ``--fasta`` by ``--clusters``)."""
    from protein_performer.data.datamodule import ProteinDataModule

    dm = ProteinDataModule(
        files=args.fasta, clusters=str(args.clusters), split_by="cluster", alphabet=alphabet
    )
    dm.setup("test")
    return dm.datasets["test"].source


def hits_by_query(path: Path, held_out: set[str]) -> dict[str, list[str]]:
    """Each query's hit records (FASTA text, best first) into proteins not in ``held_out``."""
    from protein_performer.analysis.homolog_pairs import query_of

    out: dict[str, list[str]] = {}
    for record in path.read_text().split(">")[1:]:
        head, *body = record.split("\n")
        query = query_of(head)
        if query is None or head.split()[0].rsplit("/", 1)[0] in held_out:
            continue
        out.setdefault(query, []).append(f">{head}\n{''.join(body)}\n")
    return out


def draw_queries(
    hits: dict[str, list[str]], queries: Any, held_out: set[str], args: argparse.Namespace
) -> tuple[list[str], list[str]]:
    """``(eligible, drawn)``: the held-out queries with at least ``args.min_hits`` hits, and
    ``args.proteins`` of them drawn with ``args.seed`` (sorted); a query outside the held-out
    split is a training protein and never eligible."""
    eligible = sorted(
        q for q, h in hits.items() if len(h) >= args.min_hits and q in queries and q in held_out
    )
    rng = np.random.default_rng(args.seed)
    drawn = sorted(rng.choice(eligible, min(args.proteins, len(eligible)), replace=False))
    return eligible, [str(q) for q in drawn]


def read_queries(
    args: argparse.Namespace, alphabet: Any, held_out: Any
) -> tuple[dict[str, str], dict[str, list[str]], list[str]]:
    """``(queries, hits, drawn)``: ``args.queries``' sequences by id, each held-out query's hits
    in ``args.hits``, and the queries :func:`draw_queries` draws; says the machine and the draw."""
    from protein_performer.analysis.inputs import read_proteins

    queries = {q.id: alphabet.decode(q.residues) for q in read_proteins(args.queries, alphabet)}
    held = set(held_out.ids)
    hits = hits_by_query(args.hits / "hits.fasta", held)
    eligible, chosen = draw_queries(hits, queries, held, args)
    print(machine_line("cpu", args.threads))
    print(f"{len(eligible):,} held-out proteins with >= {args.min_hits} hits; {len(chosen)} drawn")
    return queries, hits, chosen


def score_protein(model: Any, alphabet: Any, seq: str, qid: str, hits: list[str], args: Any):
    """``{setting: [−log p(true residue)]}`` at the protein's sites and the mean homologs a
    window held with and without the crop."""
    from protein_performer.analysis.dms import homologs as H
    from protein_performer.analysis.dms.windows import masked_log_probs
    from protein_performer.data.context_windows import context_window
    from protein_performer.model.performer import reads_columns

    n = len(seq)
    sites = [int(s) for s in np.linspace(10, n - 11, args.sites)]
    truth = [alphabet.index(seq[s]) for s in sites]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hits.fasta"
        path.write_text("".join(hits[:16]))
        context = H.read_scan_context(path, alphabet, seq, qid, max_homologs=16)
    nll, held = {}, {}
    columns = reads_columns(model)  # it reads every site on its crop
    for name, crop in (("crop", True),) if columns else (("crop", True), ("whole", False)):
        logp = H.context_log_probs(model, alphabet, seq, sites, context, max_length=args.window,
                                   crop=crop, window_homologs=16)  # fmt: skip
        nll[name] = [-float(logp[s][t]) for s, t in zip(sites, truth, strict=True)]
        held[name] = context.info["mean_homologs_in_window"]
    ids, jobs = alphabet.encode(seq), []
    for s in sites:  # alone: ESM-1v's 1,022-residue window about the site
        a = max(0, min(s - 511, n - 1022))
        target = ids[a : a + 1022].astype(np.int64)
        target[s - a] = alphabet.mask_idx
        tokens, first, _ = context_window(target, [], alphabet, 1024)
        jobs.append((s, tokens, first + s - a))
    alone = masked_log_probs(model, alphabet, jobs)
    nll["alone"] = [-float(alone[s][t]) for s, t in zip(sites, truth, strict=True)]
    blind, nll["profile"] = blind_crop(model, alphabet, seq, hits, sites, args)
    nll["crop, aligned blind"] = [-float(blind[s][t]) for s, t in zip(sites, truth, strict=True)]
    return nll, held


def blind_crop(model: Any, alphabet: Any, seq: str, hits: list[str], sites: list[int], args: Any):
    """The crop's log-probabilities with the hits aligned to the protein with its scored sites
    unknown (``X``): aligned to the whole protein, a hit's residue is placed where it matches
    the hidden one. And the profile of the same hits so aligned (the protein not counted):
    ``−log Q(true residue)`` at the sites."""
    from protein_performer.analysis.dms.profile import COLUMNS, build_pssm
    from protein_performer.analysis.dms.windows import column_jobs, crop_width, masked_log_probs
    from protein_performer.model.performer import reads_columns

    blind = np.array(list(seq))
    blind[sites] = "X"
    records = [h.split("\n", 1)[1].replace("\n", "") for h in hits[:16]]
    pssm = build_pssm("".join(blind), records, include_query=False, allow_query_only=True)
    used = [h for h in pssm.homologs if h["used"]]
    keep = [k for k, h in enumerate(used) if h.get("identity", 0.0) <= 0.9] or range(len(used))
    width = crop_width(len(seq), args.window, 16) or len(seq)
    jobs, _ = column_jobs(
        alphabet.encode(seq), [(k, pssm.matrix[k]) for k in keep], sites, alphabet,
        args.window, width=width, per_window=16,
        positions=reads_columns(model),
    )  # fmt: skip
    profile = [-float(np.log(pssm.frequencies[s][COLUMNS.index(seq[s])])) for s in sites]
    return masked_log_probs(model, alphabet, jobs), profile


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default="homologs-msa", help="a path or a shipped name")
    p.add_argument("--fasta", nargs="+", required=True, help="the files the checkpoint used")
    p.add_argument("--clusters", type=Path, required=True, help="their clusters table")
    p.add_argument("--write-queries", type=Path, help="write the held-out proteins and stop")
    p.add_argument("--queries", type=Path, help="those proteins (--write-queries)")
    p.add_argument("--hits", type=Path, help="a data search of --queries against --fasta")
    p.add_argument("--min-residues", type=int_at_least(1), default=600)
    p.add_argument("--max-residues", type=int_at_least(1), default=2000)
    p.add_argument("--min-hits", type=int_at_least(1), default=16)
    p.add_argument("--proteins", type=int_at_least(1), default=30)
    p.add_argument("--sites", type=int_at_least(1), default=12)
    p.add_argument("--window", type=int_at_least(64), default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int_at_least(1), default=torch.get_num_threads())
    p.add_argument("--json", type=Path, default=RESULTS / "long_windows.json")
    add_output_args(p)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    import protein_performer
    from protein_performer.data.alphabet import default_alphabet

    alphabet = default_alphabet()
    held_out = test_split(args, alphabet)
    if args.write_queries:
        from protein_performer.utils.atomic import write_text_atomic

        check_outputs(p, [args.write_queries], args.overwrite)
        write_text_atomic(  # an interrupt leaves no half-written file
            args.write_queries,
            "".join(
                f">{held_out.ids[i]}\n{alphabet.decode(held_out[i])}\n"
                for i in range(len(held_out))
                if args.min_residues <= len(held_out[i]) <= args.max_residues
            ),
        )
        print(f"wrote {args.write_queries}: now search it (see --help)")
        return 0
    if args.queries is None or args.hits is None:
        p.error("give --queries and --hits (or --write-queries first)")
    check_outputs(p, [args.json], args.overwrite)
    queries, hits, chosen = read_queries(args, alphabet, held_out)
    model, _ = protein_performer.load(args.checkpoint)
    nll: dict[str, list[float]] = {
        "crop": [], "whole": [], "crop, aligned blind": [], "profile": [], "alone": []
    }  # fmt: skip
    held: dict[str, list[float]] = {"crop": [], "whole": []}
    t0 = time.perf_counter()
    for q in chosen:
        one, h = score_protein(model, alphabet, queries[q], q, hits[q], args)
        for k in one:
            nll[k] += one[k]
        for k in h:
            held[k].append(h[k])
    nll = {k: v for k, v in nll.items() if v}  # a columns model has no whole windows
    held = {k: v for k, v in held.items() if v}
    rows = [
        [name, f"{np.exp(np.mean(v)):.2f}", f"{np.mean(held[name]):.1f}" if name in held else "-"]
        for name, v in nll.items()
    ]
    print(format_table(["windows", "perplexity", "homologs in a window"], rows))
    write_json(
        args.json,
        {
            "command": " ".join(sys.argv),
            "environment": environment(),
            "checkpoint": args.checkpoint,
            "window_tokens": args.window,
            "proteins": [{"id": q, "residues": len(queries[q])} for q in chosen],
            "sites": len(nll["alone"]),
            "perplexity": {k: float(np.exp(np.mean(v))) for k, v in nll.items()},
            "mean_homologs_in_window": {k: float(np.mean(v)) for k, v in held.items()},
            "seconds": time.perf_counter() - t0,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
