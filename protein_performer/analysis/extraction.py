"""Attention maps and representations of proteins, in memory or as one ``.npz`` per record.

Like ESM's ``extract.py``: one FASTA in, one file per record out, named safely
(:func:`record_file_names`: ``sp|P00974|BPT1_BOVIN`` -> ``P00974.npz``; the manifest maps
files to ids). Each ``RECORD.npz`` holds ``id`` (the record's own), ``description``, ``sequence``, ``tokens`` (the token ids of the rows/columns below,
alphabet ``pp-aa-v1``); with ``attention``: ``attention`` ``(layers, heads, L, L)``
(row = query, column = key; exact softmax, or for FAVOR+ layers the matrix its features imply)
with ``attention_layers`` / ``attention_heads`` naming the selection; with ``per_tok``:
``per_tok`` ``(repr_layers, L, dim)``; with ``mean``: ``mean`` ``(repr_layers, dim)``, the mean
over residues; ``repr_layers`` names them (0 = embeddings, ``depth`` = the last block after the
final LayerNorm, as in ESM). ``L`` counts residues: the ``<cls>``/``<eos>`` rows and columns are
dropped unless ``keep_specials`` (so attention rows sum to 1 minus what went to them).

With ``join`` every record read goes into one window ``p_1 <sep> p_2 … <sep> p_n`` (file
order), written as one file (named for the last record and how many precede it) whose
``segments`` ``(n, 2)`` hold each protein's ``[start, stop)`` in the rows above, with
``segment_ids``; ``mean`` is then ``(repr_layers, n, dim)``, one mean per protein; ``sequence``
shows ``<sep>`` as ``|``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from protein_performer.analysis.inputs import (
    PathLike,
    Protein,
    as_protein,
    as_proteins,
    join_proteins,
    max_tokens,
    padded_tokens,
    parse_indices,
    read_proteins,
    source_names,
    token_batches,
)
from protein_performer.analysis.npz import NpzWriter
from protein_performer.data.alphabet import Alphabet
from protein_performer.data.encoding import EncodeCounts
from protein_performer.errors import ConfigError
from protein_performer.model.performer import ProteinLM, evaluating
from protein_performer.utils.devices import check_dense_fits, pick_device, size_text
from protein_performer.utils.outputs import check_output_dir, dir_with_manifest, staged_dir
from protein_performer.utils.progress import progress as progress_bar

log = logging.getLogger(__name__)

#: Outputs above this many bytes are announced before the work starts.
ANNOUNCE_BYTES = 1 << 30

FORMAT = "protein-performer-extract/1"
MANIFEST = "manifest.json"
INCLUDE = ("attention", "per_tok", "mean")
# Attention of one layer is computed for all selected heads in one pass while it fits this many
# bytes; beyond it (long records) each head is computed on its own, block of rows by block.
LAYER_BUFFER_BYTES = 256 * 2**20


def _span(protein: Protein, keep_specials: bool) -> slice:
    n = protein.sequence_length
    return slice(0, n + 2) if keep_specials else slice(1, n + 1)


@torch.no_grad()
def attention_blocks(
    model: ProteinLM,
    tokens: torch.Tensor,
    layer: int,
    head: int,
    *,
    keep_specials: bool = False,
    chunk_size: int = 256,
) -> Iterator[np.ndarray]:
    """The attention matrix of one ``(layer, head)`` for ``tokens`` ``(1, L+2)``, as float32
    row blocks ``(rows, L')`` in order (``L'`` drops ``<cls>``/``<eos>`` unless ``keep_specials``),
    computed in eval mode."""
    lo, hi = (0, tokens.shape[1]) if keep_specials else (1, tokens.shape[1] - 1)
    blocks = model.iter_attention(tokens, layers=[layer], heads=[head], chunk_size=chunk_size)
    try:
        while True:
            # each block in eval mode, and the model back in the caller's mode between them
            with evaluating(model):
                item = next(blocks, None)
            if item is None:
                return
            _, start, rows = item
            a, b = max(start, lo), min(start + rows.shape[2], hi)
            if a < b:
                yield rows[0, 0, a - start : b - start, lo:hi].float().cpu().numpy()
    finally:
        blocks.close()


@torch.no_grad()
def attention_maps(
    model: ProteinLM,
    protein: Protein | str,
    alphabet: Alphabet,
    *,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    keep_specials: bool = False,
    chunk_size: int = 256,
) -> np.ndarray:
    """``(layers, heads, L, L)`` float32 attention of one protein (or sequence string; all
    layers/heads: None),
    in the order ``layers`` and ``heads`` list them (negative: from the end), in eval mode.

    Holds the whole result; for long proteins use :func:`extract` (it streams) or
    :func:`attention_blocks`.
    """
    device = next(model.parameters()).device
    protein = as_protein(protein, alphabet)
    tokens = protein.tokens(alphabet).to(device)
    layers = parse_indices(layers, model.config.depth, "layers", keep_order=True)
    heads = parse_indices(heads, model.config.heads, "heads", keep_order=True)
    model._check_length(tokens.shape[1])  # a too-long protein is that, before any memory check
    span = _span(protein, keep_specials)
    n = span.stop - span.start
    check_dense_fits(
        (len(layers), len(heads), n, n),
        torch.float32,
        torch.device("cpu"),
        "attention_maps: the attention matrices of this protein",
        "attention_blocks() or extract() stream them a block of rows at a time",
    )
    out = np.zeros((len(layers), len(heads), n, n), dtype=np.float32)
    li = {layer: i for i, layer in enumerate(layers)}
    computed = sorted(heads)  # iter_attention's head order; out follows the caller's
    hi = [computed.index(h) for h in heads]
    with evaluating(model):
        for layer, start, rows in model.iter_attention(
            tokens, layers=sorted(layers), heads=computed, chunk_size=chunk_size
        ):
            block = rows[0][hi][:, :, span].float().cpu().numpy()  # (H', rows, L')
            a, b = max(start, span.start), min(start + block.shape[1], span.stop)
            if a < b:
                out[li[layer], :, a - span.start : b - span.start] = block[:, a - start : b - start]
    return out


@torch.no_grad()
def representations(
    model: ProteinLM,
    proteins: Sequence[Protein | str] | Protein | str,
    alphabet: Alphabet,
    *,
    repr_layers: Sequence[int] = (-1,),
    toks_per_batch: int = 4096,
    keep_specials: bool = False,
) -> Iterator[tuple[Protein, np.ndarray]]:
    """Yield ``(protein, per_tok)`` with ``per_tok`` float32 ``(len(repr_layers), L, dim)`` for
    each protein (or sequence string) in order, batching proteins up to ``toks_per_batch``
    tokens; layers in the order ``repr_layers`` lists them, computed in eval mode. Layer
    ``0`` is the embedding output, ``depth`` (or ``-1``) the last block after the final
    LayerNorm (ESM's convention)."""
    device = next(model.parameters()).device
    depth = model.config.depth
    proteins = as_proteins(proteins, alphabet)
    if isinstance(repr_layers, int):
        repr_layers = [repr_layers]
    layers = parse_indices(list(repr_layers), depth + 1, "repr_layers", keep_order=True)
    for batch in token_batches(proteins, toks_per_batch):
        members = [proteins[i] for i in batch]
        with evaluating(model):
            hidden = model(padded_tokens(members, alphabet).to(device), return_hidden=True)
            states = hidden["hidden_states"]
            states[depth] = model.norm(states[depth])
        stacked = torch.stack([states[i] for i in layers], dim=1).float().cpu().numpy()
        for row, p in enumerate(members):
            yield p, stacked[row, :, _span(p, keep_specials)]


#: ``db|ACCESSION|NAME`` (UniProt's ``sp|P00974|BPT1_BOVIN``), and a joined window's ``+N``.
_DB_ID = re.compile(r"[^|]+\|([^|]+)\|[^|]*?(\+\d+)?")


def record_file_names(ids: Sequence[str]) -> list[str]:
    """One safe, distinct file name per record id: the accession for ``db|ACC|NAME``
    (``sp|P00974|BPT1_BOVIN`` -> ``P00974.npz``; a joined window's ``+N`` kept), else the id
    with characters other than letters, digits and ``._+-`` as ``_``; no leading ``.`` or
    ``-``; a name already given (in any case) gets ``-2``, ``-3``. The id itself is kept in
    the file and the manifest."""
    names, seen = [], set()
    for rid in ids:
        m = _DB_ID.fullmatch(rid)
        stem = m.group(1) + (m.group(2) or "") if m else rid
        # no leading "." (hidden) or "-" (read as an option by `ls *.npz`, `rm`, ...)
        base = re.sub(r"[^A-Za-z0-9._+-]", "_", stem).lstrip(".-") or "record"
        if len(base) > 150:  # file names end at 255 bytes: cut, keep a hash of the whole id
            base = f"{base[:140]}~{hashlib.sha1(rid.encode()).hexdigest()[:8]}"
        name, k = base, 1
        while name.lower() in seen:
            k += 1
            name = f"{base}-{k}"
        seen.add(name.lower())
        names.append(f"{name}.npz")
    return names


def _listed_files(manifest: dict) -> set[str]:
    records = manifest.get("records")
    return (
        {r.get("file") for r in records if isinstance(r, dict)}
        if isinstance(records, list)
        else set()
    )


#: Whether a directory holds an :func:`extract` output and nothing else.
is_extract_dir = dir_with_manifest(MANIFEST, FORMAT, _listed_files)


def check_include(include: Sequence[str]) -> list[str]:
    chosen = list(dict.fromkeys([include] if isinstance(include, str) else include))
    unknown = [x for x in chosen if x not in INCLUDE]
    if unknown or not chosen:
        raise ConfigError(f"include must list some of {', '.join(INCLUDE)} (got {chosen})")
    return chosen


@dataclass
class _Plan:
    """What :func:`extract` writes of each record: the selections, the dtype, and for a
    joined window its members and their ``rows`` (``[start, stop)`` in the stored rows)."""

    model: ProteinLM
    alphabet: Alphabet
    include: list[str]
    layers: list[int]
    heads: list[int]
    repr_layers: list[int]
    keep_specials: bool
    chunk_size: int
    dtype: Any
    segments: list[tuple[int, int]] | None = None
    members: list[Protein] = field(default_factory=list)
    rows: list[tuple[int, int]] = field(default_factory=list)
    read_count: int = 0


def extract(
    model: ProteinLM,
    alphabet: Alphabet,
    fasta: PathLike | Sequence[PathLike],
    out: PathLike,
    *,
    include: Sequence[str] = ("attention", "mean"),
    layers: Any = None,
    heads: Any = None,
    repr_layers: Any = (-1,),
    max_length: int | None = None,
    trained_length: int | None = None,
    truncate: bool | str = "auto",
    keep_specials: bool = False,
    float16: bool = False,
    toks_per_batch: int = 4096,
    chunk_size: int = 256,
    invalid: str = "error",
    strip_gaps: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    source: str | None = None,
    records: Sequence[str] | None = None,
    max_records: int | None = None,
    join: bool = False,
) -> dict[str, Any]:
    """Write one ``RECORD.npz`` per FASTA record into ``out`` plus ``manifest.json``.

    ``records``: only these ids (or accessions / entry names; one not found is an error);
    ``max_records``: read at most this many records. ``join``: one window of all the records
    read instead (see the module docstring; ``truncate`` cuts the window's front).

    ``trained_length`` (the checkpoint's training crop, in tokens) caps the default window.
    Everything is checked and read before the first file is written; the directory appears
    complete or not at all (a temporary folder renamed at the end). Returns the manifest.
    """
    include = check_include(include)
    outdir = _extract_dir(out, overwrite)
    depth, n_heads = model.config.depth, model.config.heads
    plan = _Plan(
        model,
        alphabet,
        include,
        parse_indices(layers, depth, "layers"),
        parse_indices(heads, n_heads, "heads"),
        parse_indices(repr_layers, depth + 1, "repr_layers"),
        keep_specials,
        chunk_size,
        np.float16 if float16 else np.float32,
    )
    if toks_per_batch < 1 or chunk_size < 1:
        raise ConfigError("toks_per_batch and chunk_size must be >= 1")
    limit = max_tokens(model, max_length, trained_length)
    counts = EncodeCounts()
    proteins = read_proteins(
        fasta,
        alphabet,
        max_tokens=None if join else limit,
        truncate=truncate is not False,  # "auto": a single record is cropped, and said
        invalid=invalid,
        strip_gaps=strip_gaps,
        counts=counts,
        ids=records,
        max_records=max_records,
    )
    if join:
        proteins = _join_window(plan, proteins, fasta, limit, truncate is True)
    files = record_file_names([p.id for p in proteins])
    size = output_bytes(
        [_span(p, keep_specials) for p in proteins],
        include,
        len(plan.layers) * len(plan.heads),
        len(plan.repr_layers) * model.config.dim,
        np.dtype(plan.dtype).itemsize,
    )
    _say_size(outdir, size, len(proteins), float16, progress)
    reprs = None
    if "per_tok" in include or "mean" in include:
        reprs = representations(
            model,
            proteins,
            alphabet,
            repr_layers=plan.repr_layers,
            toks_per_batch=toks_per_batch,
            keep_specials=keep_specials,
        )
    with staged_dir(outdir, lambda: _extract_dir(outdir, overwrite)) as work:
        bar = progress_bar(proteins, desc="extract", unit="protein", enabled=progress)
        written = [
            _write_record(plan, work / name, protein, reprs)
            for protein, name in zip(bar, files, strict=True)
        ]
        manifest = {
            "format": FORMAT,
            "checkpoint": source,
            "attention_kind": model.config.kind_label,
            # causal attention maps are lower-triangular: each row sees the keys up to itself
            "objective": "causal" if getattr(model, "causal", False) else "mlm",
            "fasta": [str(p) for p in ([fasta] if isinstance(fasta, (str, Path)) else fasta)],
            "include": include,
            "attention_layers": plan.layers if "attention" in include else None,
            "attention_heads": plan.heads if "attention" in include else None,
            "repr_layers": plan.repr_layers if reprs is not None else None,
            "keep_specials": keep_specials,
            "join": join,
            "dtype": np.dtype(plan.dtype).name,
            "input_changes": counts.changes(),
            "records": written,
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _extract_dir(out: PathLike, overwrite: bool) -> Path:
    return check_output_dir(
        out,
        "out",
        overwrite=overwrite,
        is_ours=is_extract_dir,
        what="extract directory",
        overwrite_hint="overwrite=true",
    )


def _join_window(
    plan: _Plan,
    proteins: list[Protein],
    fasta: PathLike | Sequence[PathLike],
    limit: int | None,
    truncate: bool,
) -> list[Protein]:
    """The records read, joined into one window (its members and rows kept in ``plan``)."""
    plan.read_count = len(proteins)
    joined, plan.segments, plan.members = join_proteins(
        proteins, plan.alphabet, limit, truncate=truncate, model=plan.model,
        source=source_names(fasta),
    )  # fmt: skip
    shift = 1 if plan.keep_specials else 0  # the stored rows start with <cls> when it is kept
    plan.rows = [(a + shift, b + shift) for a, b in plan.segments]
    return [joined]


def _write_record(
    plan: _Plan,
    path: Path,
    protein: Protein,
    reprs: Iterator[tuple[Protein, np.ndarray]] | None,
) -> dict[str, Any]:
    """One ``RECORD.npz`` (see the module docstring); returns its manifest entry."""
    alphabet, include, dtype = plan.alphabet, plan.include, plan.dtype
    span = _span(protein, plan.keep_specials)
    n = span.stop - span.start
    with NpzWriter(path) as npz:
        npz.add("id", protein.id)
        npz.add("description", protein.description)
        if plan.segments is None:
            npz.add("sequence", alphabet.decode(protein.residues))
        else:
            text = alphabet.decode(protein.residues, keep_specials=True)
            npz.add("sequence", text.replace(alphabet.tokens[alphabet.sep_idx], "|"))
            npz.add("segments", np.asarray(plan.rows, dtype=np.int64))
            npz.add("segment_ids", np.asarray([p.id for p in plan.members]))
        npz.add("tokens", protein.tokens(alphabet)[0, span].numpy().astype(np.uint8))
        if "attention" in include:
            npz.add("attention_layers", np.asarray(plan.layers))
            npz.add("attention_heads", np.asarray(plan.heads))
            shape = (len(plan.layers), len(plan.heads), n, n)
            stream = _attention_stream(
                plan.model,
                protein,
                alphabet,
                plan.layers,
                plan.heads,
                plan.keep_specials,
                plan.chunk_size,
                next(plan.model.parameters()).device,
            )
            npz.add_blocks("attention", shape, dtype, stream)
        if reprs is not None:
            got, per_tok = next(reprs)
            assert got is protein
            npz.add("repr_layers", np.asarray(plan.repr_layers))
            if "per_tok" in include:
                npz.add("per_tok", per_tok.astype(dtype))
            if "mean" in include:
                residues = per_tok[:, 1:-1] if plan.keep_specials else per_tok
                if plan.segments is None:
                    mean = residues.mean(axis=1)
                else:
                    parts = [residues[:, a:b].mean(axis=1) for a, b in plan.segments]
                    mean = np.stack(parts, axis=1)
                npz.add("mean", mean.astype(dtype))
    entry: dict[str, Any] = {
        "id": protein.id,
        "file": path.name,
        "length": protein.sequence_length,
        "cropped": protein.cropped,
    }
    if plan.segments is not None:
        entry["joined"] = [
            {"id": p.id, "start": a, "stop": b}
            for p, (a, b) in zip(plan.members, plan.rows, strict=True)
        ]
        entry["proteins_read"] = plan.read_count
    return entry


def output_bytes(
    spans: Sequence[slice], include: Sequence[str], maps: int, width: int, itemsize: int
) -> int:
    """What :func:`extract` writes before compression, in bytes: per record of ``n`` stored
    positions, ``maps`` attention maps of ``n × n`` and ``width`` (representation layers ×
    model width) values per position (``per_tok``) or once (``mean``)."""
    total = 0
    for span in spans:
        n = span.stop - span.start
        if "attention" in include:
            total += maps * n * n * itemsize
        if "per_tok" in include:
            total += width * n * itemsize
        if "mean" in include:
            total += width * itemsize
    return total


def _say_size(outdir: Path, size: int, records: int, float16: bool, progress: bool) -> None:
    """Announce a large output (with ``progress``), and warn when it exceeds the free space
    where it goes (an estimate before compression, which shrinks attention maps little)."""
    where = next((p for p in (outdir, *outdir.parents) if p.exists()), Path("."))
    free = shutil.disk_usage(where).free
    what = (
        f"about {size_text(size)} for {records:,} records (before compression; "
        + ("" if float16 else "float16=true halves it, ")
        + "layers=/heads=/include=/max_records= write less)"
    )
    if size > free:
        log.warning("extract: %s, and %s are free in %s", what, size_text(free), where)
    elif progress and size >= ANNOUNCE_BYTES:
        print(f"extract: writing {what}", file=sys.stderr, flush=True)


def _attention_stream(
    model: ProteinLM,
    protein: Protein,
    alphabet: Alphabet,
    layers: list[int],
    heads: list[int],
    keep_specials: bool,
    chunk_size: int,
    device: torch.device,
) -> Iterator[np.ndarray]:
    """Blocks of ``(layers, heads, L, L)`` in C order: every layer in one pass when they fit
    :data:`LAYER_BUFFER_BYTES`, else a layer at a time, else head by head, row block by row
    block (each rerunning the blocks below it: memory, not time, is what long records lack)."""
    tokens = protein.tokens(alphabet).to(device)
    n = tokens.shape[1]
    if len(layers) * len(heads) * n * n * 4 <= LAYER_BUFFER_BYTES:  # one pass for all layers
        maps = attention_maps(
            model,
            protein,
            alphabet,
            layers=layers,
            heads=heads,
            keep_specials=keep_specials,
            chunk_size=chunk_size,
        )
        for layer_maps in maps:
            yield from layer_maps
        return
    if len(heads) * n * n * 4 <= LAYER_BUFFER_BYTES:
        for layer in layers:
            maps = attention_maps(
                model,
                protein,
                alphabet,
                layers=[layer],
                heads=heads,
                keep_specials=keep_specials,
                chunk_size=chunk_size,
            )
            yield from maps[0]
        return
    for layer in layers:
        for head in heads:
            yield from attention_blocks(
                model, tokens, layer, head, keep_specials=keep_specials, chunk_size=chunk_size
            )


def load_for_analysis(
    checkpoint: PathLike,
    device: str = "auto",
    attention: str | None = None,
    nb_features: int | None = None,
) -> tuple[ProteinLM, Alphabet, dict[str, Any]]:
    """The checkpoint's model in eval mode on ``device``, its alphabet and metadata."""
    from protein_performer.model.checkpoints import load_model

    model, meta = load_model(checkpoint, attention=attention, nb_features=nb_features)
    model.to(pick_device(device))
    return model, Alphabet.from_dict(meta["alphabet"]), meta
