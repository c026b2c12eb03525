"""Sampling proteins from a causal (next-token) model.

Each sequence starts as ``<cls> prompt`` and grows one token at a time, drawn from the model's
next-token distribution over the 20 amino acids and ``<eos>`` (the other tokens are never
drawn), after ``temperature`` and, optionally, top-k / nucleus (top-p) truncation, until it
draws ``<eos>`` or reaches ``max_length`` tokens (then it is cut there, and said so). Every
step reruns the model on the whole prefix (no cache: simple and exact for every attention kind,
quadratic in the length). Protein ``i`` draws from its own CPU generator, seeded from
``(seed, i)``: a call is reproducible on any device, and a protein does not depend on how many
are sampled with it (``n``, ``batch_size``; up to float rounding of batched products).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, Alphabet, InvalidResidueError
from protein_performer.errors import ConfigError
from protein_performer.model.performer import ProteinLM, evaluating
from protein_performer.utils.progress import progress as progress_bar


@dataclass
class Sample:
    """One generated protein: its residues (prompt included), whether the model ended it
    (``<eos>``) or ``max_length`` cut it, and its log-probability under the sampling
    distribution actually used (temperature and truncation applied)."""

    sequence: str
    ended: bool
    log_prob: float


def check_sampling(
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    n: int,
    max_length: int,
    batch_size: int = 1,
    min_length: int = 1,
) -> None:
    """One-line ConfigError for sampling settings that cannot work."""
    if not (isinstance(temperature, (int, float)) and 1e-3 <= temperature < math.inf):
        raise ConfigError(f"temperature must be a number from 0.001 up (got {temperature!r})")
    if top_k is not None and not (
        isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 1
    ):
        raise ConfigError(f"top_k must be a whole number >= 1 (got {top_k!r})")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ConfigError(f"top_p must be in (0, 1] (got {top_p!r})")
    if not (isinstance(n, int) and n >= 1):
        raise ConfigError(f"n must be a whole number >= 1 (got {n!r})")
    if not (isinstance(max_length, int) and max_length >= 3):
        raise ConfigError(
            f"max_length must be >= 3 tokens, <cls> and <eos> included (got {max_length!r})"
        )
    if not (isinstance(batch_size, int) and batch_size >= 1):
        raise ConfigError(f"batch_size must be a whole number >= 1 (got {batch_size!r})")
    if not (isinstance(min_length, int) and not isinstance(min_length, bool) and min_length >= 0):
        raise ConfigError(f"min_length must be a whole number >= 0 residues (got {min_length!r})")
    if min_length > max_length - 2:
        raise ConfigError(
            f"min_length must be a whole number from 0 to max_length - 2 = {max_length - 2} "
            f"residues (got {min_length!r})"
        )


def _generator(seed: int, index: int) -> torch.Generator:
    """Protein ``index``'s own generator, from ``(seed, index)``."""
    seed = int(seed)
    # 0 <= seed < 2**63 as before; any other seed its own entropy (no two seeds alias)
    words = [seed, index] if 0 <= seed < 2**63 else [abs(seed), index, 1 + (seed < 0)]
    state = np.random.SeedSequence(words).generate_state(2)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def _truncate(logits: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """``(B, V)`` logits with the tokens outside the top ``k`` / the smallest set holding
    ``top_p`` of the probability set to -inf."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        probs, order = logits.softmax(-1).sort(-1, descending=True)
        before = probs.cumsum(-1) - probs  # mass of the tokens ranked above each
        drop = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, before >= top_p)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def prompt_ids(alphabet: Alphabet, prompt: str) -> list[int]:
    """The residue ids of ``prompt``, read as a FASTA record's are (whitespace removed, any
    case, a final ``*`` dropped); a one-line ConfigError for a letter that is no residue."""
    try:
        ids = alphabet.clean_encode(prompt).ids if prompt else None
    except InvalidResidueError as e:  # the problem without the reader's invalid= hints
        raise ConfigError(f"prompt: {e.residue_problem or e.problem}") from None
    return [] if ids is None else [int(i) for i in ids]


def protein_bounds(alphabet: Alphabet, packed: bool = False) -> tuple[int, int]:
    """The tokens a causal model saw before and after a protein: ``<cls>``/``<eos>``, or
    ``<sep>``/``<sep>`` for one trained on packed windows (``data.mode=concat``)."""
    if packed:
        return alphabet.sep_idx, alphabet.sep_idx
    return alphabet.cls_idx, alphabet.eos_idx


@torch.no_grad()
def generate(
    model: ProteinLM,
    alphabet: Alphabet,
    n: int = 1,
    *,
    prompt: str = "",
    max_length: int | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    batch_size: int = 16,
    min_length: int = 1,
    progress: bool = False,
    packed: bool = False,
) -> list[Sample]:
    """``n`` proteins sampled from a causal ``model`` (see the module docstring), in eval mode.

    ``prompt``: residues every sequence starts with (read as a FASTA record's are);
    ``max_length``: tokens with ``<cls>``/``<eos>`` (None: the model's ``max_len``);
    ``min_length``: residues (prompt included) before ``<eos>`` may be drawn (an empty
    protein is no FASTA record the other commands read). ``packed``: the model trained on
    packed windows (``data.mode=concat``), where a protein follows a ``<sep>`` and ends at the
    next one and ``<cls>``/``<eos>`` never occur: each sequence starts after ``<sep>`` and ends
    at one (:func:`protein_bounds`).
    """
    begin, end = protein_bounds(alphabet, packed)
    if not getattr(model, "causal", False):
        raise ConfigError(
            "generate samples from a causal (next-token) model; this one is a masked LM "
            "(train one with objective=causal)"
        )
    max_length = model.config.max_len if max_length is None else max_length
    check_sampling(temperature, top_k, top_p, n, max_length, batch_size, min_length)
    if model.rotary is None and max_length > model.config.max_len:
        raise ConfigError(
            f"max_length={max_length} exceeds the model's {model.config.max_len} positions "
            "(learned positions)"
        )
    start_ids = prompt_ids(alphabet, prompt)
    if len(start_ids) + 3 > max_length:  # <cls>, the prompt, one drawn residue, <eos>
        raise ConfigError(
            f"the prompt's {len(start_ids)} residues leave no room for a drawn residue in "
            f"max_length={max_length} tokens (with <cls> and <eos>)"
        )
    allowed = torch.zeros(len(alphabet), dtype=torch.bool)
    allowed[[alphabet.index(a) for a in STANDARD_AMINO_ACIDS]] = True
    allowed[end] = True
    device = next(model.parameters()).device
    samples: list[Sample] = []
    bar = progress_bar(total=n, desc="generate", unit="protein", enabled=progress)
    with evaluating(model):
        for first in range(0, n, batch_size):
            rows = min(batch_size, n - first)
            generators = [_generator(seed, first + row) for row in range(rows)]
            tokens = torch.tensor([[begin, *start_ids]] * rows, dtype=torch.long)
            done = torch.zeros(rows, dtype=torch.bool)
            log_prob = torch.zeros(rows, dtype=torch.float64)
            # up to max_length - 2 residues: with its <cls> and <eos> a sequence fits the window
            while not bool(done.all()) and tokens.shape[1] < max_length:
                logits = model(tokens.to(device))["logits"][:, -1].float().cpu()
                logits = logits.masked_fill(~allowed, float("-inf")) / temperature
                if tokens.shape[1] - 1 < min_length:  # residues so far: no <eos> yet
                    logits[:, end] = float("-inf")
                logp = torch.log_softmax(_truncate(logits, top_k, top_p), -1)
                probs = logp.exp()
                drawn = torch.cat(
                    [torch.multinomial(probs[r], 1, generator=g) for r, g in enumerate(generators)]
                )
                if tokens.shape[1] == max_length - 1:  # no room for a residue: cut there
                    drawn = torch.where(drawn == end, drawn, alphabet.pad_idx)
                step = logp.gather(-1, drawn[:, None])[:, 0].double()
                log_prob += torch.where(done | (drawn == alphabet.pad_idx), 0.0, step)
                drawn = torch.where(done, alphabet.pad_idx, drawn)
                done |= drawn == end
                tokens = torch.cat([tokens, drawn[:, None]], dim=1)
            for row in range(rows):
                ids = [i for i in tokens[row, 1:].tolist() if i != alphabet.pad_idx]
                ended = end in ids
                residues = ids[: ids.index(end)] if ended else ids
                samples.append(Sample(alphabet.decode(residues), ended, float(log_prob[row])))
            bar.update(rows)
    bar.close()
    return samples


__all__ = ["Sample", "check_sampling", "generate", "prompt_ids", "protein_bounds"]
