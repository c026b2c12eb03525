"""What a training run will need in memory, estimated before anything is allocated, and
out-of-memory errors turned into one line that says what to reduce.

The estimate is deliberately simple (fp32 training, AdamW): parameters are counted exactly on
PyTorch's ``meta`` device; optimizer state is 16 bytes per parameter (weights, gradients, two
Adam moments); activations are what autograd keeps per token and layer (inputs of the linear
layers, norms and activations: about ``10·dim + 2·ffn_dim`` floats) plus the attention's own
(exact attention: the ``heads × L`` scores and probabilities per query; FAVOR+: the ``heads ×
m`` features of queries and keys when ``save_features`` keeps them) and the logits. It is an
order of magnitude, printed so that a user sees a run that cannot fit before it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from protein_performer.attention.taylor import taylor_feature_dim
from protein_performer.errors import ConfigError
from protein_performer.utils.devices import memory_available
from protein_performer.utils.devices import size_text as _size

GB = 1e9


@dataclass
class MemoryEstimate:
    parameters: int
    state_bytes: int  # parameters + gradients + Adam moments
    activation_bytes: int  # kept for the backward pass, one optimizer step's batch
    tokens: int

    def format(self) -> str:
        return (
            f"{self.parameters / 1e6:,.2f} M parameters ({_size(self.state_bytes)} with "
            f"optimizer state), activations ≈ {_size(self.activation_bytes)} per step of "
            f"{self.tokens:,} tokens (estimate)"
        )


def count_parameters(model_config: Any, vocab_size: int, pad_idx: int = 0) -> int:
    """Exact parameter count of :class:`ProteinLM` without allocating it (meta device)."""
    from protein_performer.model.performer import ProteinLM

    with torch.device("meta"):
        model = ProteinLM(model_config, vocab_size, pad_idx)
    return sum(p.numel() for p in model.parameters())


def estimate_memory(cfg: Any, vocab_size: int) -> MemoryEstimate:
    """Memory of training ``cfg`` (a :class:`TrainConfig`) with a ``vocab_size`` alphabet."""
    m, d = cfg.model, cfg.data
    params = count_parameters(m, vocab_size)
    length = min(d.max_length, m.max_len) if m.position == "learned" else d.max_length
    # a batch holds at least one whole row: a budget below it still trains rows of `length`
    tokens = max(d.toks_per_batch, length) if d.batch_size is None else d.batch_size * length
    per_token = 0
    for kind in m.layer_kinds():
        per_token += 10 * m.dim + 2 * m.ffn_dim
        if m.qkv_conv:  # the convolution keeps its padded input beside its output
            per_token += 3 * m.dim
        if kind == "transformer":
            per_token += 2 * m.heads * length
        elif kind == "taylor":
            # autograd keeps ~6 F floats per token and global head (query/key features, products)
            per_token += 6 * (m.heads - m.local_heads) * taylor_feature_dim(m.dim_head)
        elif kind == "hedgehog":  # the same for its learned features (and their logits)
            per_token += 6 * (m.heads - m.local_heads) * m.nb_features
        elif m.save_features and cfg.objective != "causal":
            # bidirectional FAVOR keeps query and key features (else rebuilt in the backward);
            # they stand in for q (and k, but for the softmax kernel) among the saved tensors
            shared = 1 if kind == "performer_softmax" else 2
            per_token += (m.heads - m.local_heads) * (2 * m.nb_features - shared * m.dim_head)
    floats = tokens * (per_token + 3 * vocab_size)
    return MemoryEstimate(params, 16 * params, 4 * floats, tokens)


def check_fits_cpu(estimate: MemoryEstimate) -> str | None:
    """Raise when the parameters and optimizer state alone exceed the machine's RAM; return a
    warning when the activation estimate exceeds the memory available now (else None)."""
    mem = memory_available()
    if mem is None:
        return None
    available, total = mem
    if estimate.state_bytes > total:
        raise ConfigError(
            f"the model needs ≈ {_size(estimate.state_bytes)} for its "
            f"{estimate.parameters / 1e6:,.0f} M parameters and optimizer state, more than "
            f"this machine's {_size(total)} of memory; reduce model.dim, model.depth or "
            "model.ffn_dim"
        )
    if estimate.state_bytes + estimate.activation_bytes > available:
        return (
            f"this run may not fit in memory: ≈ {_size(estimate.state_bytes)} + "
            f"{_size(estimate.activation_bytes)} activations vs {_size(available)} available; "
            "reduce data.toks_per_batch if it fails"
        )
    return None


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        return (
            "DefaultCPUAllocator" in text
            or "out of memory" in text.lower()
            or "can't allocate memory" in text
        )
    return False


def out_of_memory_error(exc: BaseException, cfg: Any, step: int | None) -> ConfigError:
    """One line: where it ran out, how much it asked for, and the settings to reduce."""
    import re

    found = re.search(r"allocate (\d+) bytes", str(exc)) or re.search(
        r"allocate ([\d.]+ [KMGT]iB)", str(exc)
    )
    asked = ""
    if found:
        value = found.group(1)
        asked = f", asked for {_size(int(value)) if value.isdigit() else value}"
    where = f" at step {step:,}" if step else " while building the model or the first step"
    m, d = cfg.model, cfg.data
    advice = (
        f"reduce data.toks_per_batch (now {d.toks_per_batch:,}) or data.max_length "
        f"(now {d.max_length:,}), or the model (model.dim={m.dim}, model.depth={m.depth}, "
        f"model.ffn_dim={m.ffn_dim})"
    )
    if m.attention == "transformer":
        advice += "; exact attention grows with the square of the length: model=performer_relu"
    elif "transformer" in m.layer_kinds():
        advice += (
            "; exact attention grows with the square of the length: fewer model.exact_layers "
            f"(now {list(m.exact_layers)})"
        )
    return ConfigError(f"out of memory{where}{asked}: {advice}")
