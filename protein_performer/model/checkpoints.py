"""Safe checkpoint loading (``torch.load(weights_only=True)``) and weight transfer.

Every checkpoint written by :class:`~protein_performer.training.lm_module.ProteinLMModule`
carries a ``"protein_performer"`` entry: format version, alphabet, model config, objective,
data settings and the FAVOR+ projection matrices in use. Only plain containers, numbers,
strings and tensors are stored, so nothing executable is unpickled when loading.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from protein_performer.attention import FavorAttention
from protein_performer.data.alphabet import Alphabet
from protein_performer.data.config import CLUSTER_PACKINGS, OBJECTIVES
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.config import ARCHITECTURE_FIELDS, ModelConfig
from protein_performer.model.performer import ProteinLM
from protein_performer.utils.atomic import write_atomic

log = logging.getLogger(__name__)

META_KEY = "protein_performer"
FORMAT_VERSION = 1
MODEL_PREFIX = "model."
# FAVOR+ random projections live under this module name; they are drawn, not learned, so they
# are not required when weights move between attention kinds.
PROJECTION_MARK = ".attn.favor."
# Hedgehog's learned feature maps belong to that kind only: a model of another kind has none,
# and a Hedgehog model loading another kind's weights keeps its own (identity) maps.
FEATURE_MAP_MARK = ".attn.maps."


def make_metadata(
    model: ProteinLM, alphabet: Alphabet, objective: str, data: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``"protein_performer"`` checkpoint entry for ``model``. ValueError when
    ``objective`` or ``alphabet`` does not describe ``model`` (the checkpoint would load as
    another model, or not at all)."""
    from protein_performer.version import __version__

    expected = "causal" if getattr(model, "causal", False) else "mlm"
    if objective != expected:
        raise ValueError(
            f"objective={objective!r} does not describe this model: it is "
            f"{'causal (next-token)' if expected == 'causal' else 'bidirectional (masked LM)'}, "
            f"objective={expected!r}"
        )
    if len(alphabet) != model.vocab_size:
        raise ValueError(
            f"the alphabet has {len(alphabet)} tokens, the model's vocabulary {model.vocab_size}"
        )

    projections = {
        name: buf.detach().cpu().clone()
        for name, buf in model.named_buffers()
        if PROJECTION_MARK in f".{name}" and name.endswith(".projection")
    }
    return {
        "format": FORMAT_VERSION,
        "package_version": __version__,
        "alphabet": alphabet.to_dict(),
        "model": model.config.to_dict(),
        "objective": objective,
        "data": dict(data or {}),
        "projections": projections,
    }


#: ``checkpoint=default``: the model shipped with the package (data/pretrained/README.md).
DEFAULT_CHECKPOINT = "data/pretrained/performer_relu_14.ckpt"
HOMOLOGS_CHECKPOINT = "data/pretrained/performer_homologs_14.ckpt"
HOMOLOGS_MSA_CHECKPOINT = "data/pretrained/performer_homologs_msa_14.ckpt"
HOMOLOGS_DEEP_CHECKPOINT = "data/pretrained/performer_homologs_deep_14.ckpt"
HOMOLOGS_COLUMNS_CHECKPOINT = "data/pretrained/performer_homologs_columns_14.ckpt"
HOMOLOGS_COLUMNS_DEEP_CHECKPOINT = "data/pretrained/performer_homologs_columns_deep_14.ckpt"
#: The checkpoints shipped with the package: name -> path in the project (data/pretrained/,
#: whose README holds their cards). ``default`` reads one protein; ``homologs`` a protein after
#: its homologs; ``homologs-msa`` the same model trained on to read a protein after up to 32 of
#: its search hits in 4,096-token windows (the ``context=`` commands' model); ``homologs-deep``
#: that one trained on with up to 64 hits in 8,192-token windows (it reads more of a deep
#: alignment: best with all the homologs a long window holds); ``homologs-columns`` reads 16
#: homologs cut to each site's columns, every residue at its column's position;
#: ``homologs-columns-deep`` is that one trained on with up to 64 (``score context=``'s model).
SHIPPED_CHECKPOINTS = {
    "default": DEFAULT_CHECKPOINT,
    "homologs": HOMOLOGS_CHECKPOINT,
    "homologs-msa": HOMOLOGS_MSA_CHECKPOINT,
    "homologs-deep": HOMOLOGS_DEEP_CHECKPOINT,
    "homologs-columns": HOMOLOGS_COLUMNS_CHECKPOINT,
    "homologs-columns-deep": HOMOLOGS_COLUMNS_DEEP_CHECKPOINT,
}


#: ``checkpoint=``'s default for the commands that can read homologs (evaluate, aa-similarity,
#: score): the shipped model for the job (:func:`choose_checkpoint`)
AUTO_CHECKPOINT = "auto"
#: the shipped homolog models ``auto`` is read as with homologs, the first installed: the one
#: trained on alignment-like rows (search hits, up to 32 in 4,096 tokens), then the earlier one
#: (cluster members in 1,024 tokens), still reachable by name
CONTEXT_CHECKPOINTS = ("homologs-msa", "homologs")
#: ``score``'s: first the models that read homologs at the columns they align to (the one
#: trained with up to 64 of them a row, then the one with 16)
SCORE_CONTEXT_CHECKPOINTS = ("homologs-columns-deep", "homologs-columns", *CONTEXT_CHECKPOINTS)


def choose_checkpoint(
    checkpoint: str | Path, context: bool, names: tuple[str, ...] = CONTEXT_CHECKPOINTS
) -> str | Path:
    """``checkpoint``, or for :data:`AUTO_CHECKPOINT` the shipped model for the job: with
    homologs (``context``) the first installed of ``names``, else ``default`` (the
    single-protein model, never trained with homologs before a protein). A path or a name,
    ``default`` included, is kept."""
    if str(checkpoint) != AUTO_CHECKPOINT:
        return checkpoint
    if context:
        return next((name for name in names if shipped(name)), "default")
    return "default"


def resolve_checkpoint(path: str | Path) -> Path:
    """A shipped checkpoint's name (:data:`SHIPPED_CHECKPOINTS`; ``auto``: ``default``) -> its
    file (in a checkout or an installed wheel); any other value is taken as a path."""
    if str(path) == AUTO_CHECKPOINT and not Path(path).exists():
        path = "default"  # auto without homologs (:func:`choose_checkpoint`)
    name = str(path)
    if name not in SHIPPED_CHECKPOINTS or Path(path).exists():  # a file of that name: the user's
        return Path(path)
    from protein_performer.utils.resources import project_path

    p = Path(project_path(SHIPPED_CHECKPOINTS[name]))
    if not p.is_file():
        which = (
            "the shipped checkpoint" if name == "default" else f"the shipped {name!r} checkpoint"
        )
        raise DataError(f"{which} is not in this installation; give checkpoint=PATH", path=p)
    return p


def shipped(name: str) -> bool:
    """Whether the shipped checkpoint ``name`` is in this installation."""
    from protein_performer.utils.resources import project_path

    return name in SHIPPED_CHECKPOINTS and Path(project_path(SHIPPED_CHECKPOINTS[name])).is_file()


def _zip_problem(path: Path) -> str | None:
    """What is wrong with the zip archive at ``path`` (cut short, a member failing its CRC),
    or None when it reads back intact."""
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        return str(e) or type(e).__name__
    return f"CRC mismatch in {bad}" if bad else None


def read_checkpoint(path: str | Path, *, mmap: bool = False) -> dict[str, Any]:
    """Load a protein-performer checkpoint on CPU with ``weights_only=True`` (``mmap``: map
    the tensors instead of reading them, for a check that needs the metadata only).

    Raises :class:`DataError` (one line, naming the file) when it is missing, unreadable, holds
    anything but plain data, or was not written by protein-performer. ``"default"`` reads the
    shipped checkpoint (:data:`DEFAULT_CHECKPOINT`).
    """
    p = resolve_checkpoint(path)
    if not p.exists():
        bare = not p.suffix and len(p.parts) == 1  # a name, as the shipped ones are given
        names = f" (nor a shipped name: {', '.join(SHIPPED_CHECKPOINTS)})" if bare else ""
        raise DataError(f"checkpoint: no such file{names}", path=p)
    if not p.is_file():
        found = [
            f"{c} {p / d / f'{c}.ckpt'}"
            for d in ("checkpoints", ".")
            for c in ("last", "best")
            if (p / d / f"{c}.ckpt").is_file()
        ]
        hint = ""
        if found:  # last: where a resume continues; best: what evaluate and the analyses read
            hint = f" (a run directory? its checkpoints: {', '.join(found)})"
        raise DataError(f"checkpoint path is not a file{hint}", path=p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError as e:
        raise DataError(f"cannot read the checkpoint ({e.strerror or e})", path=p) from None
    # torch.save writes a zip archive (legacy files: a pickle, protocol byte 0x80)
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):
        what = "an empty file" if not head else "a text file" if head.isascii() else "other data"
        if head[:1] == b">":
            what = "a text file that looks like FASTA: a sequence file given as the checkpoint?"
        raise DataError(f"not a PyTorch checkpoint ({what})", path=p)
    if head.startswith(b"PK"):
        # torch.load does not check the archive's CRCs: damaged bytes would load as weights
        problem = _zip_problem(p)
        if problem:
            raise DataError(f"truncated or corrupt checkpoint ({problem})", path=p)
    try:
        with warnings.catch_warnings():
            # torch warns about a pickle protocol it may not read, then fails: one line below
            warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
            # only the zip format maps; a legacy file is read (it is small, or it is old)
            ckpt = torch.load(
                p, map_location="cpu", weights_only=True, mmap=mmap and head.startswith(b"PK")
            )
    except pickle.UnpicklingError as e:
        # torch's wording differs for unknown classes and for blocked modules (os, posix, ...)
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e)) or re.search(
            r"unsupported GLOBAL ([\w.]+)", str(e)
        )
        if found:
            raise DataError(
                "refusing to load: it holds objects that weights_only=True does not allow "
                f"({found.group(1)})",
                path=p,
            ) from None
        what = "a plain pickle, or damaged" if head[:1] == b"\x80" else "corrupt or unknown format"
        raise DataError(f"not a readable PyTorch checkpoint ({what})", path=p) from None
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:  # torch raises many kinds (IndexError, KeyError, ...) on bad bytes
        raise DataError(f"not a readable PyTorch checkpoint ({type(e).__name__})", path=p) from None
    if not isinstance(ckpt, dict) or META_KEY not in ckpt or "state_dict" not in ckpt:
        raise DataError("not a protein-performer checkpoint (no model metadata)", path=p)
    meta = ckpt[META_KEY]
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise DataError(
            f"unsupported checkpoint format {found!r} (this version reads {FORMAT_VERSION})",
            path=p,
        )
    missing = [k for k in ("model", "alphabet", "objective") if k not in meta]
    alphabet = meta.get("alphabet")
    if not missing and not (
        isinstance(meta["model"], dict)
        and isinstance(alphabet, dict)
        and all(k in alphabet for k in ("specials", "residues", "version"))
    ):
        missing = ["a readable model or alphabet"]
    if missing:
        raise DataError(
            f"damaged checkpoint metadata (no {', '.join(missing)}); not loaded", path=p
        )
    if meta["objective"] not in OBJECTIVES:
        # anything else would load as a masked LM
        raise DataError(
            f"damaged checkpoint metadata (objective {meta['objective']!r}, not one of "
            f"{', '.join(OBJECTIVES)}); "
            "not loaded",
            path=p,
        )
    return ckpt


def model_state(ckpt: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The model's own state dict (Lightning's ``model.`` prefix removed)."""
    return {
        k[len(MODEL_PREFIX) :]: v
        for k, v in ckpt["state_dict"].items()
        if k.startswith(MODEL_PREFIX)
    }


def _is_projection(key: str) -> bool:
    return PROJECTION_MARK in f".{key}"


def _kind_specific(key: str) -> bool:
    """Tensors one side may lack when weights move between attention kinds."""
    return _is_projection(key) or FEATURE_MAP_MARK in f".{key}"


def check_finite_weights(state: Mapping[str, torch.Tensor], source: str | Path) -> None:
    """DataError when a floating-point tensor of ``state`` holds NaN or inf: the weights of a
    run that diverged, whose every output would be NaN."""
    bad = [
        k
        for k, v in state.items()
        if torch.is_tensor(v) and v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]
    if bad:
        raise DataError(
            f"holds non-finite weights ({len(bad)} of {len(state)} tensors, e.g. {bad[0]}): "
            "the run diverged; use a checkpoint from before it (or train again with a lower "
            "optim.lr)",
            path=str(source),
        )


def load_weights(model: ProteinLM, state: Mapping[str, torch.Tensor], source: str) -> None:
    """Copy ``state`` into ``model``. FAVOR+ projection buffers are taken from ``state`` when
    both sides have them with the same shape; otherwise the model keeps its own draw (so an
    exact-attention checkpoint loads into a Performer and vice versa). Hedgehog's feature
    maps are taken when both sides have them (a shape mismatch is an error) and kept at the
    model's own initialisation when the checkpoint has none."""
    check_finite_weights(state, source)
    own = model.state_dict()
    check_fits(own, state, source)
    # FavorAttention resizes its own running statistics buffer when loading
    usable = {
        k: v
        for k, v in state.items()
        if k in own
        and (tuple(v.shape) == tuple(own[k].shape) or k.endswith((".oprf_stat", ".oprf_pending")))
    }
    model.load_state_dict(usable, strict=False)
    # a projection not taken (another feature count, or none stored) is the model's own draw
    # 0: its counter must say so, or the next redraw would skip or repeat draws
    kept = {k.rpartition(".")[0] for k in usable if k.endswith(".projection")}
    for name, module in model.named_modules():
        if (
            isinstance(module, FavorAttention)
            and module.projection is not None
            and name not in kept
            and int(module.redraw_counter) != 0
        ):
            module.redraw_projection(0)


def check_fits(
    own: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor], source: str
) -> None:
    """Refuse ``state`` for a model whose state dict is ``own`` (its tensors' shapes only are
    read: a model on the meta device will do) when tensors are missing, unexpected or of
    another shape (random projections and kind-specific tensors aside, see
    :func:`load_weights`)."""
    unexpected = [k for k in state if k not in own and not _kind_specific(k)]
    missing = [k for k in own if k not in state and not _kind_specific(k)]
    mismatched = [
        k
        for k, v in state.items()
        if k in own and not _is_projection(k) and tuple(v.shape) != tuple(own[k].shape)
    ]
    if unexpected or missing or mismatched:
        parts = []
        for label, keys in (("unexpected", unexpected), ("missing", missing)):
            if keys:
                parts.append(f"{len(keys)} {label} tensors (e.g. {keys[0]})")
        if mismatched:
            k = mismatched[0]
            parts.append(
                f"{len(mismatched)} shape mismatches (e.g. {k}: "
                f"{tuple(state[k].shape)} vs {tuple(own[k].shape)})"
            )
        raise ConfigError(f"checkpoint {source} does not fit this model: {'; '.join(parts)}")


def architecture_mismatch(stored: Mapping[str, Any], config: ModelConfig) -> list[str]:
    """``["model.dim: checkpoint 128, config 256", ...]`` for architecture fields that differ."""
    out = []
    default = ModelConfig()  # a field newer than the checkpoint: it was trained with the default
    for name in ARCHITECTURE_FIELDS:
        value = stored.get(name, getattr(default, name))
        if value != getattr(config, name):
            out.append(f"model.{name}: checkpoint {value!r}, config {getattr(config, name)!r}")
    return out


def load_model(
    path: str | Path,
    *,
    attention: str | None = None,
    nb_features: int | None = None,
    alphabet: Alphabet | None = None,
) -> tuple[ProteinLM, dict[str, Any]]:
    """Rebuild the model stored in a checkpoint, in eval mode on CPU.

    ``attention`` / ``nb_features`` convert it to another attention kind (e.g. an exact
    ``transformer`` checkpoint run as ``performer_softmax``); ``alphabet``, when given, must
    equal the checkpoint's. Returns ``(model, metadata)``.
    """
    ckpt = read_checkpoint(path)
    meta = ckpt[META_KEY]
    stored_alphabet = Alphabet.from_dict(meta["alphabet"])
    if alphabet is not None:
        alphabet.check_compatible(meta["alphabet"], where=f"checkpoint {path}")
    config = ModelConfig.from_dict(dict(meta["model"]))
    if attention is not None:
        config.attention = attention
    if nb_features is not None:
        config.nb_features = nb_features
    build = functools.partial(
        ProteinLM,
        config,
        len(stored_alphabet),
        stored_alphabet.pad_idx,
        causal=meta["objective"] == "causal",
    )
    state = model_state(ckpt)
    # metadata that does not describe the weights is refused before a model of the
    # metadata's size is allocated: the shapes are compared on the meta device first
    with torch.device("meta"):
        skeleton = build()
    check_fits(skeleton.state_dict(), state, str(path))
    model = build()
    load_weights(model, state, str(path))
    model.eval()
    # the window it trained on: the library's default window, as the CLI's (not a weight)
    model.trained_length = trained_length(meta)
    # whether its rows held homologs before a protein (pairs, family packing): a model trained
    # on single proteins reads homologs before one as text it never saw; None where the
    # metadata does not describe its training windows (a model saved by hand)
    data = meta.get("data") or {}
    known = "mode" in data or "packing" in data
    model.trained_with_homologs = data.get("packing") in CLUSTER_PACKINGS if known else None
    return model, meta


def trained_length(meta: dict[str, Any]) -> int | None:
    """The crop length (tokens) the checkpoint's run trained on, when it says so."""
    value = (meta.get("data") or {}).get("max_length")
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def init_weights_from(
    model: ProteinLM, path: str | Path, alphabet: Alphabet, objective: str
) -> dict[str, Any]:
    """``init_from``: start ``model`` from a checkpoint's weights (any attention kind); the
    architecture (sizes, positions) and alphabet must match. Returns the checkpoint metadata."""
    ckpt = read_checkpoint(path)
    meta = ckpt[META_KEY]
    check_init_from(meta, model.config, alphabet, objective, path)
    state = model_state(ckpt)
    if model.config.qkv_conv > int(meta["model"].get("qkv_conv", 0)):
        state = widen_conv(state, model)
    load_weights(model, state, str(path))
    return meta


def check_init_from(
    meta: Mapping[str, Any], config: ModelConfig, alphabet: Alphabet, objective: str, path: Any
) -> None:
    """Refuse ``init_from`` weights (checkpoint metadata ``meta``) for a model of ``config``:
    another alphabet, architecture (a wider q/k/v convolution aside) or objective."""
    alphabet.check_compatible(meta["alphabet"], where=f"init_from checkpoint {path}")
    widen = config.qkv_conv > int(meta["model"].get("qkv_conv", 0))
    diff = [
        d
        for d in architecture_mismatch(meta["model"], config)
        if not (widen and d.startswith("model.qkv_conv:"))
    ]
    if diff:
        raise ConfigError(
            f"init_from checkpoint {path} has another architecture: {'; '.join(diff)}"
        )
    if meta["objective"] != objective:
        raise ConfigError(
            f"init_from checkpoint {path} was trained with objective={meta['objective']}, "
            f"this run uses objective={objective}"
        )


def widen_conv(state: Mapping[str, torch.Tensor], model: ProteinLM) -> dict[str, torch.Tensor]:
    """``state`` with its q/k/v convolutions (narrower than ``model``'s, or absent:
    ``qkv_conv=0``) widened to the model's kernel with zero taps, each old tap at the same
    offset from the current position: the widened model computes what the checkpoint did, and
    training can then use the new taps (``init_from`` with a larger ``model.qkv_conv``)."""
    out = dict(state)
    for i, block in enumerate(model.blocks):
        conv = block.attn.conv
        if conv is None:
            continue
        key = f"blocks.{i}.attn.conv"
        weight = state.get(f"{key}.weight")
        if weight is None:  # no convolution in the checkpoint: the model's own identity filter
            out[f"{key}.weight"] = conv.weight.detach().clone()
            out[f"{key}.bias"] = conv.bias.detach().clone()
            continue
        old = weight.shape[-1]
        new = conv.kernel_size[0]
        if old == new:
            continue
        if old > new:
            raise ConfigError(f"cannot narrow the q/k/v convolution from {old} to {new} taps")
        causal = block.attn.causal
        offset = (new - old) if causal else (new - 1) // 2 - (old - 1) // 2
        wide = torch.zeros(*weight.shape[:-1], new, dtype=weight.dtype)
        wide[..., offset : offset + old] = weight
        out[f"{key}.weight"] = wide
    return out


def check_resume_compatible(
    meta: Mapping[str, Any] | None,
    config: ModelConfig,
    alphabet: Alphabet,
    objective: str,
    source: str,
) -> None:
    """Refuse to resume from a checkpoint of another model (``config``: the run's), alphabet
    or objective."""
    if not isinstance(meta, Mapping):
        raise ConfigError(f"{source} is not a protein-performer checkpoint (no model metadata)")
    alphabet.check_compatible(meta["alphabet"], where=f"checkpoint {source}")
    stored = meta["model"]
    diff = architecture_mismatch(stored, config)
    for name in ("attention", "nb_features"):
        if stored.get(name) != getattr(config, name):
            diff.append(
                f"model.{name}: checkpoint {stored.get(name)!r}, config {getattr(config, name)!r}"
            )
    stored_config = ModelConfig.from_dict(dict(stored))
    kinds = stored_config.layer_kinds()
    if kinds != config.layer_kinds() and not diff:
        diff.append(
            f"model.exact_layers: checkpoint {stored.get('exact_layers', [])!r}, config "
            f"{list(config.exact_layers)!r}"
        )
    if [stored_config.layer_rotary(i) for i in range(config.depth)] != [
        config.layer_rotary(i) for i in range(config.depth)
    ] and not diff:
        diff.append(
            f"model.nope_layers: checkpoint {stored.get('nope_layers', [])!r}, config {list(config.nope_layers)!r}"
        )
    if stored.get("scalable_softmax", 0) != config.scalable_softmax:
        diff.append(
            f"model.scalable_softmax: checkpoint {stored.get('scalable_softmax', 0)!r}, "
            f"config {config.scalable_softmax!r}"
        )
    if meta.get("objective") != objective:
        diff.append(f"objective: checkpoint {meta.get('objective')!r}, config {objective!r}")
    if diff:
        raise ConfigError(
            f"cannot resume from {source}: it is another model ({'; '.join(diff)}); "
            "use init_from=PATH to start a new run from its weights"
        )


def save_model_checkpoint(
    path: str | Path,
    model: ProteinLM,
    alphabet: Alphabet,
    objective: str,
    data: Mapping[str, Any] | None = None,
) -> None:
    """Write a weights-only checkpoint (same layout as the training checkpoints, without
    optimizer state) atomically: ``load_model`` and ``init_from`` accept it. ``objective``
    (``"mlm"`` or ``"causal"``) must be the model's. Like ``torch.save``, replaces ``path``
    when it exists."""

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "state_dict": {MODEL_PREFIX + k: v.detach().cpu() for k, v in model.state_dict().items()},
        META_KEY: make_metadata(model, alphabet, objective, data),
    }
    write_atomic(p, lambda fh: torch.save(payload, fh))


def run_files(checkpoint: str | Path, split: str | None) -> list[str]:
    """The FASTA files the checkpoint's training run read and split (``split=`` without
    ``fasta=`` in evaluate and aa-similarity), checked to be here; said."""
    meta = read_checkpoint(checkpoint, mmap=True).get(META_KEY) or {}
    stored = meta.get("data") or {}
    files = stored.get("files")
    # an older checkpoint does not say whether its files were all it split: not guessed
    if not files or stored.get("held_out_files") is not False:
        raise ConfigError(
            f"split={split} without fasta=: the checkpoint records no files it split "
            "(trained on shards, on held-out files given apart, or saved before this was "
            "recorded); give fasta="
        )
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise DataError(
            f"split={split} without fasta=: the training run's file is not here (of "
            f"{len(files)}); give fasta= (the same files, where they are now)",
            path=missing[0],
        )
    what = (
        "FASTA file, as it read it"
        if len(files) == 1
        else f"{len(files)} FASTA files, as it read them"
    )
    log.warning("split=%s: the training run's %s", split, what)
    return list(files)
