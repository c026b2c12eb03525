"""The protein language model: embeddings, pre-LN blocks (exact or FAVOR+ attention), tied head."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from protein_performer.attention import FavorAttention
from protein_performer.attention.base import check_positions
from protein_performer.errors import ConfigError
from protein_performer.model.blocks import Block
from protein_performer.model.config import ModelConfig, as_section
from protein_performer.model.embeddings import TiedLMHead, TokenPositionEmbedding
from protein_performer.model.rotary import RotaryEmbedding
from protein_performer.utils.devices import check_dense_fits

T = TypeVar("T")


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode (no dropout) for the block, then back in the mode it was in:
    analysis results must not depend on whether the caller was training."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def evaluates(fn: Callable[..., T]) -> Callable[..., T]:
    """Run ``fn(model, ...)`` with ``model`` in eval mode (:func:`evaluating`)."""

    @functools.wraps(fn)
    def wrapper(model: nn.Module, *args: Any, **kwargs: Any) -> T:
        with evaluating(model):
            return fn(model, *args, **kwargs)

    return wrapper


class ProteinLM(nn.Module):
    """Masked (bidirectional) or causal protein language model.

    Args:
        config: hyper-parameters (see :class:`ModelConfig`).
        vocab_size: alphabet size (31 for ``pp-aa-v1``).
        pad_idx: padding token id (its embedding row stays zero).
        causal: unidirectional attention (next-token LM) instead of bidirectional (MLM).
    """

    def __init__(
        self, config: ModelConfig, vocab_size: int, pad_idx: int = 0, causal: bool = False
    ) -> None:
        super().__init__()
        config = as_section(ModelConfig, config, "config")  # a dict of its keys too
        config.validate()
        if vocab_size < 1 or not 0 <= pad_idx < vocab_size:
            raise ValueError(f"need vocab_size >= 1 and 0 <= pad_idx < vocab_size, got "
                             f"{vocab_size} and {pad_idx}")  # fmt: skip
        self.config = config
        self.vocab_size = vocab_size
        self.pad_idx = pad_idx
        self.causal = causal
        self.embed = TokenPositionEmbedding(
            vocab_size, config.dim, config.max_len, pad_idx, config.position == "learned"
        )
        self.rotary = RotaryEmbedding(config.dim_head) if config.position == "rotary" else None
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            Block(
                config.dim,
                config.heads,
                config.ffn_dim,
                config.dropout,
                attention=config.layer_attention(i),
                causal=causal,
                nb_features=config.nb_features,
                orthogonal=config.orthogonal,
                redraw_interval=config.redraw_interval,
                feature_seed=config.feature_seed,
                layer_idx=i,
                local_heads=config.local_heads,
                local_window=config.local_window,
                qkv_conv=config.qkv_conv,
                save_features=config.save_features,
                length_base=config.scalable_softmax,
            )
            for i in range(config.depth)
        )
        self.norm = nn.LayerNorm(config.dim)
        self.head = TiedLMHead(config.dim, vocab_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, 0.02) weights, zero biases; residual output projections scaled by depth."""
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02
                if name.endswith(("attn.out.weight", "ffn.fc2.weight")):
                    std /= math.sqrt(2 * self.config.depth)
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        with torch.no_grad():
            self.embed.tokens.weight[self.pad_idx].zero_()
        for block in self.blocks:  # these start at their own identities, not at N(0, 0.02)
            block.attn.reset_conv()
            for kind, _ in block.attn.kinds():
                kind.reset_parameters()

    def favor_modules(self) -> list[FavorAttention]:
        return [m for m in self.modules() if isinstance(m, FavorAttention)]

    def layer_rotary(
        self, layer: int, rotary: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The rotary tables for ``layer``: None in ``model.nope_layers``."""
        return rotary if self.config.layer_rotary(layer) else None

    def _rotary_tables(
        self, x: torch.Tensor, position_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The rotary tables for ``x`` ``(B, L, dim)``: positions ``0..L-1``, or each token's
        own from ``position_ids`` ``(B, L)``."""
        b, n = x.shape[:2]
        if position_ids is not None:
            if self.rotary is None:
                raise ValueError(
                    "position_ids needs a model with rotary positions (model.position=rotary); "
                    "this one adds learned positions 0..L-1 to its input"
                )
            if not isinstance(position_ids, torch.Tensor) or tuple(position_ids.shape) != (b, n):
                shape = tuple(getattr(position_ids, "shape", ()))
                raise ValueError(f"position_ids must be a ({b}, {n}) tensor, got shape {shape}")
            if position_ids.is_floating_point() and not torch.isfinite(position_ids).all():
                raise ValueError("position_ids must be finite")
        if self.rotary is None:
            return None
        return self.rotary(n, x.device, x.dtype, position_ids)

    def _check_batch(self, input_ids: torch.Tensor, padding_mask: torch.Tensor | None) -> None:
        """ValueError/TypeError for ids or a mask the model cannot mean to be given (torch
        would fail deep inside, or an out-of-range id index another row of the embedding)."""
        if not isinstance(input_ids, torch.Tensor):
            raise TypeError(
                f"input_ids must be a (B, L) tensor of token ids, got {type(input_ids).__name__} "
                "(protein_performer.data.encode_batch(sequences) makes a batch)"
            )
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (B, L), got shape {tuple(input_ids.shape)}")
        if input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            raise TypeError(f"input_ids must be integer token ids, got {input_ids.dtype}")
        if input_ids.dtype == torch.uint8:
            raise TypeError(
                "input_ids must be int64 tokens with <cls>/<eos>, got uint8 (alphabet.encode's "
                "residue ids?): protein_performer.data.encode_batch(sequences) makes a batch"
            )
        if input_ids.numel() == 0:
            raise ValueError(f"input_ids is empty (shape {tuple(input_ids.shape)})")
        if padding_mask is not None:
            if padding_mask.dtype != torch.bool:
                raise TypeError(
                    f"padding_mask must be bool (True = padding), got {padding_mask.dtype}"
                )
            if padding_mask.shape != input_ids.shape:
                raise ValueError(
                    f"padding_mask must have input_ids' shape {tuple(input_ids.shape)}, got "
                    f"{tuple(padding_mask.shape)}"
                )

    def _key_padding(
        self, input_ids: torch.Tensor, padding_mask: torch.Tensor | None
    ) -> torch.Tensor | None:
        """The padding mask (``input_ids == pad_idx`` when None), or None when nothing is
        padded; checks that every id is in the vocabulary (an out-of-range id would index
        another row of the embedding) and that a given mask is True at every ``<pad>`` and
        leaves each row something (another convention's mask, e.g. Hugging Face's
        ``attention_mask``, True where to attend, is refused). One host sync for all, which
        the padding decision needs anyway."""
        given = padding_mask is not None
        if padding_mask is None:
            padding_mask = input_ids == self.pad_idx
        checks = [input_ids.min(), input_ids.max(), padding_mask.any().to(input_ids.dtype)]
        if given:
            checks.append((~padding_mask & (input_ids == self.pad_idx)).any().to(input_ids.dtype))
            # a row marked padding throughout: fine for a row of <pad> (a batch filled to a
            # fixed size), another convention's mask for a row of tokens
            tokens_in_row = (input_ids != self.pad_idx).any(dim=1)
            checks.append((padding_mask.all(dim=1) & tokens_in_row).any().to(input_ids.dtype))
        low, high, padded, *mask_problems = torch.stack(checks).tolist()
        if low < 0 or high >= self.vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{self.vocab_size - 1})")
        if any(mask_problems):
            what = "is False at <pad> tokens" if mask_problems[0] else "pads a whole row of tokens"
            raise ValueError(
                f"padding_mask {what}: it must be True at padding (a Hugging Face "
                "attention_mask is the opposite: pass ~attention_mask)"
            )
        return padding_mask if padded else None

    def _check_length(self, n: int) -> None:
        if n > self.config.max_len and self.rotary is None:
            raise ConfigError(
                f"{n:,} tokens (the residues with <cls> and <eos>) exceed model.max_len="
                f"{self.config.max_len} (learned positions): crop the input to fit (truncate=true "
                "in the analysis commands, read_proteins(..., truncate=True, max_tokens=...) from "
                "Python), or train with a larger model.max_len or model.position=rotary"
            )

    @torch.no_grad()
    def iter_attention(
        self,
        input_ids: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        *,
        layers: Sequence[int] | None = None,
        heads: Sequence[int] | None = None,
        chunk_size: int = 256,
        position_ids: torch.Tensor | None = None,
    ) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Yield ``(layer, start, rows)`` for each selected layer (ascending; all: None) and
        block of ``chunk_size`` query rows: ``rows`` is ``(B, H', rows, L)``, the attention of
        the heads in ``heads`` (all: None). Only one block is held at a time, so the attention
        of a long sequence never needs its L×L matrices at once. Runs in eval semantics (no
        dropout); the caller sets ``eval()``.
        """
        self._check_batch(input_ids, padding_mask)
        depth, n_heads = self.config.depth, self.config.heads
        for name, values, count in (("layers", layers, depth), ("heads", heads, n_heads)):
            bad = [v for v in values or [] if not 0 <= v < count]
            if bad:
                raise ValueError(f"{name}: {bad[0]} is not one of 0..{count - 1}")
        n = input_ids.shape[1]
        self._check_length(n)
        key_padding_mask = self._key_padding(input_ids, padding_mask)
        wanted = set(range(self.config.depth)) if layers is None else set(layers)
        last = max(wanted, default=-1)
        x = self.embed(input_ids)
        rotary = self._rotary_tables(x, position_ids)
        for i, block in enumerate(self.blocks):
            if i > last:
                return
            r = self.layer_rotary(i, rotary)
            if i in wanted:
                rows = block.attn.attention_rows(
                    block.norm1(x), key_padding_mask, r, heads=heads, chunk_size=chunk_size
                )
                for start, weights in rows:
                    yield i, start, weights
            x, _ = block(x, key_padding_mask, r)

    def forward(
        self,
        input_ids: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        *,
        return_attentions: bool = False,
        return_hidden: bool = False,
        probe: tuple[int, int] | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """``input_ids`` ``(B, L)`` int64; ``padding_mask`` ``(B, L)`` bool, True at padding
        (default: where ``input_ids == pad_idx``); or ``attention_mask`` ``(B, L)`` in the
        Hugging Face convention (1 = a token, 0 = padding), read as ``padding_mask``.

        Returns a dict with ``logits`` ``(B, L, V)``; with ``return_attentions`` also
        ``attentions``: a list (one per layer) of ``(B, H, L, L)`` matrices (the FAVOR+
        approximation for Performer layers); with ``return_hidden`` also ``hidden_states``:
        the embedding output and each block's output, ``depth + 1`` tensors ``(B, L, dim)``
        (the last before the final LayerNorm, unlike ``representations``' layer ``depth``);
        with ``probe=(layer, head)`` also ``probe_attention``: that head's attention matrix
        ``(B, L, L)``, with gradients (attention supervision). ``position_ids`` ``(B, L)``:
        each token's rotary position (default ``0..L-1``; a model with
        ``context_positions="columns"`` reads a homolog's residues at the columns they align
        to, see :func:`~protein_performer.data.context_windows.column_positions`).
        """
        if attention_mask is not None:
            padding_mask = padding_from_attention_mask(attention_mask, padding_mask)
        self._check_batch(input_ids, padding_mask)
        if return_attentions:
            b, n = input_ids.shape
            check_dense_fits(
                (self.config.depth, b, self.config.heads, n, n),
                next(self.parameters()).dtype,
                input_ids.device,
                "return_attentions: the attention matrices of every layer",
                "iter_attention() yields them a block of rows at a time",
            )
        if probe is not None and not (
            -self.config.depth <= probe[0] < self.config.depth
            and -self.config.heads <= probe[1] < self.config.heads
        ):
            raise ValueError(
                f"probe=(layer, head) {tuple(probe)} is outside the model's "
                f"{self.config.depth} layers x {self.config.heads} heads"
            )
        n = input_ids.shape[1]
        self._check_length(n)
        key_padding_mask = self._key_padding(input_ids, padding_mask)
        x = self.dropout(self.embed(input_ids))
        rotary = self._rotary_tables(x, position_ids)
        hidden = [x] if return_hidden else None
        attentions = [] if return_attentions else None
        recompute = self.config.checkpointing and self.training and torch.is_grad_enabled()
        probed = None
        for i, block in enumerate(self.blocks):
            r = self.layer_rotary(i, rotary)
            if probe is not None and i == probe[0] % len(self.blocks):
                probed = block.attn.head_attention(
                    block.norm1(x), probe[1] % self.config.heads, key_padding_mask, r
                )
            if recompute and not return_attentions:
                # activation checkpointing: keep only the block's input, recompute the rest in
                # backward (RNG state replayed, so dropout masks and gradients are unchanged)
                x, weights = checkpoint(block, x, key_padding_mask, r, use_reentrant=False)
            else:
                x, weights = block(x, key_padding_mask, r, need_weights=return_attentions)
            if attentions is not None:
                attentions.append(weights)
            if hidden is not None:
                hidden.append(x)
        logits = self.head(self.norm(x), self.embed.tokens.weight)
        out: dict[str, Any] = {"logits": logits}
        if attentions is not None:
            out["attentions"] = attentions
        if hidden is not None:
            out["hidden_states"] = hidden
        if probed is not None:
            out["probe_attention"] = probed
        return out

    def logits_at(
        self,
        input_ids: torch.Tensor,
        padding_mask: torch.Tensor | None,
        positions: torch.Tensor,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The logits ``(B, P, V)`` at ``positions`` ``(B, P)`` (long; row ``b``'s positions
        in ``0..L-1``) of ``input_ids`` ``(B, L)``: ``forward(input_ids, padding_mask)
        ["logits"]`` gathered there (in eval mode; equal up to float rounding), for less.

        Every block but the last runs in full; the last computes attention, residual and
        feed-forward for the chosen rows only (keys and values from every position). An exact
        last layer then costs O(L·P) instead of O(L²), a FAVOR one sums its keys once: reading
        one masked site per row (mutation scoring) costs a forward of the layers below.
        ``padding_mask`` and ``position_ids`` as in :meth:`forward` (None: where ``input_ids ==
        pad_idx``; ``0..L-1``).
        """
        self._check_batch(input_ids, padding_mask)
        b, n = input_ids.shape
        if not isinstance(positions, torch.Tensor):
            raise TypeError(f"positions must be a (B, P) tensor, got {type(positions).__name__}")
        positions = positions.to(input_ids.device)
        check_positions(positions, n, b)
        self._check_length(n)
        key_padding_mask = self._key_padding(input_ids, padding_mask)
        x = self.dropout(self.embed(input_ids))
        rotary = self._rotary_tables(x, position_ids)
        *below, last = self.blocks
        for i, block in enumerate(below):
            x, _ = block(x, key_padding_mask, self.layer_rotary(i, rotary))
        x = last.forward_at(x, positions, key_padding_mask, self.layer_rotary(len(below), rotary))
        return self.head(self.norm(x), self.embed.tokens.weight)


def reads_columns(model: nn.Module) -> bool:
    """Whether ``model`` reads homologs at the columns they align to
    (``model.context_positions="columns"``; a model without a config reads a window)."""
    return getattr(getattr(model, "config", None), "context_positions", "window") == "columns"


def require_window_positions(model: nn.Module, what: str) -> None:
    """A one-line :class:`ConfigError` when ``model`` reads homologs at the columns they align
    to (:func:`reads_columns`) and ``what`` places them at their places in a window."""
    if reads_columns(model):
        raise ConfigError(
            f"{what} places homologs at their places in the window, and this model reads them "
            "at the columns they align to (model.context_positions=columns): use it with score "
            "context=, or give a model such as checkpoint=homologs-msa here"
        )


def padding_from_attention_mask(
    attention_mask: torch.Tensor, padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """A Hugging Face ``attention_mask`` ``(B, L)`` (1 = a token, 0 = padding; bool, int or
    float) as this model's ``padding_mask`` ``(B, L)`` bool, True at padding."""
    if padding_mask is not None:
        raise ValueError(
            "give padding_mask (True at padding) or attention_mask (1 = a token, 0 = "
            "padding, the Hugging Face convention), not both"
        )
    if not torch.is_tensor(attention_mask):
        raise TypeError(
            f"attention_mask must be a (B, L) tensor (got {type(attention_mask).__name__}); "
            "this model's own argument is padding_mask, True at padding"
        )
    return attention_mask == 0
