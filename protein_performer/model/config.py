"""Model hyper-parameters as a plain dataclass (usable without Hydra)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import numpy as np

from protein_performer.errors import ConfigError
from protein_performer.utils.checks import check_choice

_Section = TypeVar("_Section")

ATTENTION_KINDS: tuple[str, ...] = (
    "performer_relu",
    "performer_softmax",
    "taylor",
    "hedgehog",
    "transformer",
)
POSITION_KINDS: tuple[str, ...] = ("learned", "rotary")
#: how a homolog's residues before the protein are numbered: by their place in the window, or
#: by the protein's column each is aligned to (``position_ids``)
CONTEXT_POSITIONS: tuple[str, ...] = ("window", "columns")

# Fields that define the parameter shapes; they must agree for weights to transfer
# between checkpoints (attention kind and feature settings may differ).
ARCHITECTURE_FIELDS: tuple[str, ...] = (
    "dim",
    "depth",
    "heads",
    "ffn_dim",
    "max_len",
    "position",
    "qkv_conv",
)


@dataclass
class ModelConfig:
    """Transformer/Performer LM hyper-parameters.

    ``attention`` picks the attention: ``performer_relu`` / ``performer_softmax`` (FAVOR+ with
    ReLU or positive-softmax random features), ``taylor`` (linear attention with the exact
    second-order Taylor features of exp, as in "Based"), ``hedgehog`` (linear attention with
    learned feature maps, ``nb_features`` per head, as in "Hedgehog") or ``transformer`` (exact
    softmax). All share the same parameters, so weights move freely between them (Hedgehog's
    maps, when absent from a checkpoint, start as the identity).

    Hybrid: ``local_heads`` > 0 makes the first ``local_heads`` heads of every layer exact
    softmax attention within ``local_window`` positions (O(L·window)); the other heads keep
    ``attention``. ``exact_layers`` lists layers (negative: from the end) whose global heads are
    exact softmax attention whatever ``attention`` is: a layer-wise hybrid, O(L²) in those
    layers only. ``qkv_conv`` > 0 passes queries, keys and values through a depthwise
    convolution over ``qkv_conv`` neighbouring positions (Primer's multi-dconv-head attention;
    causal models see only earlier positions), so that every key and query carries its
    neighbourhood: matching a residue's context in a homolog then takes one layer, not two.
    Linear in L for every kind; initialised to the identity. ``checkpointing`` recomputes each
    block's activations in the backward pass (activation checkpointing: less memory for long
    windows, about one more forward in time). ``save_features`` (bidirectional FAVOR layers)
    keeps each layer's query and key random features for the backward, ``2·m`` floats per token
    and head in place of q's ``D`` (and k's, ReLU), instead of rebuilding them there (the
    default: less memory; keeping them saves a few percent of a training step on a CPU).

    ``nope_layers`` (with ``position="rotary"``) lists layers whose queries and keys are not
    rotated (no positional encoding, "NoPE"): their scores depend on content only, so a match
    scores the same at any distance. Rotary scores between equal contents fall with distance
    in all but the slowest frequencies (with head size 32, only 2 of 16 frequency pairs turn by
    less than a quarter turn over 4,000 positions), which makes a content lookup thousands of
    tokens back nearly impossible in a rotary layer. Order still reaches such a layer through the rotary
    layers below it and ``qkv_conv``.

    ``context_positions``: how the model reads homologs placed before a protein. ``window``:
    every token at its place in the window. ``columns`` (``position="rotary"``): each homolog
    residue at the position of the protein's residue it is aligned to, so that one column's
    residues share a rotary position and a head can pool a column as a profile does; it is
    trained on such rows (``data.pair_columns``) and scored on them
    (:func:`~protein_performer.data.context_windows.column_window`).

    ``scalable_softmax`` = B > 1: the exact global heads (``transformer``, ``exact_layers``)
    multiply their scores by ``log(n) / log(B)``, n the keys a query sees (Scalable-Softmax,
    Nakanishi 2025); unchanged at n = B, so set B to the training window. Why: a match learned in
    short windows gets a share of attention that falls as 1/n among n unrelated keys (measured:
    an identical copy's share fell from 0.50 with no other protein in the window to 0.04 among
    7,000 tokens of other proteins); the log n factor keeps a large enough margin winning at any
    length. On our models it did not lift that share by itself; a wider ``qkv_conv`` did
    (``docs/results.md``). 0 = off.
    """

    attention: str = "performer_relu"
    dim: int = 256
    depth: int = 4
    heads: int = 8
    ffn_dim: int = 1024
    dropout: float = 0.1
    max_len: int = 1024
    position: str = "learned"
    nb_features: int = 256
    orthogonal: bool = True
    redraw_interval: int = 1000
    feature_seed: int = 0
    local_heads: int = 0
    local_window: int = 64
    exact_layers: list[int] = field(default_factory=list)
    qkv_conv: int = 0
    nope_layers: list[int] = field(default_factory=list)
    scalable_softmax: int = 0
    context_positions: str = "window"
    checkpointing: bool = False
    save_features: bool = False

    def __post_init__(self) -> None:
        # numpy scalars (a sweep read from a table) as the Python values they stand for, so
        # that checks and saved configs see ints, floats and bools
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.generic):
                setattr(self, f.name, value.item())

    @property
    def dim_head(self) -> int:
        return self.dim // self.heads

    @property
    def is_performer(self) -> bool:
        return self.attention.startswith("performer_")

    @property
    def kind_label(self) -> str:
        """The attention kind as reports name it: ``attention``, with ``+exact[...]`` for a
        layer-wise hybrid."""
        if not self.exact_layers or self.attention == "transformer":  # every layer is exact
            return self.attention
        return f"{self.attention}+exact{list(self.exact_layers)}"

    def layer_attention(self, layer: int) -> str:
        """The attention kind of layer ``layer`` (0-based): ``transformer`` in ``exact_layers``,
        ``attention`` elsewhere."""
        exact = {i % self.depth for i in self.exact_layers}
        return "transformer" if layer % self.depth in exact else self.attention

    def layer_rotary(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) rotates queries and keys (rotary positions, not in
        ``nope_layers``)."""
        nope = {i % self.depth for i in self.nope_layers}
        return self.position == "rotary" and layer % self.depth not in nope

    def layer_kinds(self) -> list[str]:
        """The attention kind of each layer, first to last."""
        return [self.layer_attention(i) for i in range(self.depth)]

    def validate(self, prefix: str = "model") -> None:
        """Raise :class:`ConfigError` (one line, naming the key) for invalid values."""
        check_choice(f"{prefix}.attention", self.attention, ATTENTION_KINDS)
        check_choice(f"{prefix}.position", self.position, POSITION_KINDS)
        for name in ("dim", "depth", "heads", "ffn_dim", "max_len", "nb_features"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{prefix}.{name} must be a positive integer (got {value!r})")
        for name in ("orthogonal", "checkpointing", "save_features"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"{prefix}.{name} must be true or false (got {getattr(self, name)!r})"
                )
        if isinstance(self.feature_seed, bool) or not isinstance(self.feature_seed, int):
            raise ConfigError(
                f"{prefix}.feature_seed must be an integer (got {self.feature_seed!r})"
            )
        if self.dim % self.heads:
            raise ConfigError(
                f"{prefix}.dim ({self.dim}) must be divisible by {prefix}.heads ({self.heads})"
            )
        if self.position == "rotary" and self.dim_head % 2:
            raise ConfigError(
                f"{prefix}.position=rotary needs an even head size (dim/heads = {self.dim_head})"
            )
        if self.attention == "hedgehog" and self.nb_features % 2:
            raise ConfigError(
                f"{prefix}.nb_features must be even for {prefix}.attention=hedgehog "
                f"(two halves, softmax(+z) and softmax(-z)); got {self.nb_features}"
            )
        if (
            isinstance(self.dropout, bool)
            or not isinstance(self.dropout, (int, float))
            or not 0.0 <= self.dropout < 1.0
        ):
            raise ConfigError(f"{prefix}.dropout must be in [0, 1) (got {self.dropout!r})")
        if not isinstance(self.local_heads, int) or not 0 <= self.local_heads <= self.heads:
            raise ConfigError(
                f"{prefix}.local_heads must be an integer in 0..{prefix}.heads ({self.heads}); "
                f"got {self.local_heads!r}"
            )
        if not isinstance(self.local_window, int) or self.local_window < 1:
            raise ConfigError(
                f"{prefix}.local_window must be a positive integer (got {self.local_window!r})"
            )
        conv = self.qkv_conv
        if isinstance(conv, bool) or not isinstance(conv, int) or conv < 0:
            raise ConfigError(
                f"{prefix}.qkv_conv must be a kernel size >= 0 (0 = off, e.g. 3); got {conv!r}"
            )
        _check_layers(f"{prefix}.exact_layers", self.exact_layers, self.depth)
        _check_layers(f"{prefix}.nope_layers", self.nope_layers, self.depth)
        if self.nope_layers and self.position != "rotary":
            raise ConfigError(
                f"{prefix}.nope_layers needs {prefix}.position=rotary (learned positions are "
                f"added to the input, not per layer); got position={self.position!r}"
            )
        check_choice(f"{prefix}.context_positions", self.context_positions, CONTEXT_POSITIONS)
        if self.context_positions == "columns" and self.position != "rotary":
            raise ConfigError(
                f"{prefix}.context_positions=columns needs {prefix}.position=rotary (a column's "
                f"residues share a position); got position={self.position!r}"
            )
        base = self.scalable_softmax
        if isinstance(base, bool) or not isinstance(base, int) or base < 0 or base == 1:
            raise ConfigError(
                f"{prefix}.scalable_softmax must be 0 (off) or the window length B >= 2 at which "
                f"scores are unchanged (e.g. 2048); got {base!r}"
            )
        if base and (self.local_heads == self.heads or "transformer" not in self.layer_kinds()):
            raise ConfigError(
                f"{prefix}.scalable_softmax applies to exact global heads and this model has "
                f"none (attention={self.attention!r}, exact_layers={list(self.exact_layers)!r}, "
                f"local_heads={self.local_heads}); use {prefix}.attention=transformer or "
                f"{prefix}.exact_layers"
            )
        interval = self.redraw_interval
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
            raise ConfigError(
                f"{prefix}.redraw_interval must be an integer >= 0 (0 = never redraw; "
                f"got {interval!r})"
            )

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown model config keys: {', '.join(unknown)}")
        return cls(**d)


def _check_layers(key: str, layers: object, depth: int) -> None:
    """A list of distinct layer numbers in ``-depth..depth-1`` (negative: from the end)."""
    if not isinstance(layers, (list, tuple)):
        raise ConfigError(f"{key} must be a list of layer numbers, e.g. [-1] (got {layers!r})")
    layers = list(layers)
    if any(isinstance(i, bool) or not isinstance(i, int) for i in layers) or not all(
        -depth <= i < depth for i in layers
    ):
        raise ConfigError(
            f"{key} must list layer numbers in {-depth}..{depth - 1} "
            f"({key.rsplit('.', 1)[0]}.depth={depth}; negative counts from the end); got {layers!r}"
        )
    if len({i % depth for i in layers}) != len(layers):
        raise ConfigError(f"{key} names a layer twice: {layers!r}")


def as_section(cls: type[_Section], value: object, name: str) -> _Section:
    """``value`` as the config dataclass ``cls``: an instance as it is, a mapping (a section
    given as a dict from Python) converted with its keys checked; anything else refused with
    a one-line :class:`ConfigError` naming ``name``."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{name} must be a {cls.__name__} or a dict of its keys; got {type(value).__name__}"
        )
    known = {x.name for x in fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(
            f"{name}.{unknown[0]} is not a key of {name} (keys: {', '.join(sorted(known))})"
        )
    return cls(**value)
