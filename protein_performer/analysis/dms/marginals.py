"""Zero-shot variant-effect scores from a masked LM (ESM-1v's scoring rules).

A mutant is written as in ProteinGym / ESM (``H24C``; ``H24C:P25A`` for a multi-mutant), with
1-based positions; ``offset`` is the number the sequence's first residue has. Scores are
``log p(mutant) − log p(wild type)`` at each mutated site, summed over the sites of a
multi-mutant:

- ``masked-marginal``: the site is masked (one forward pass per distinct mutated position, not
  per mutant; ESM-1v's best rule);
- ``wt-marginal``: the wild-type sequence unmasked (one forward pass per window);
- ``pseudo-ll``: the pseudo-log-likelihood (every position masked in turn) of the mutant
  sequence minus that of the wild type: one pass per residue per mutant, so slow;
- ``log-likelihood`` (a causal model's, as ProGen2 and Tranception score): the sequence's
  log-likelihood ``Σ_t log p(x_t | x_<t)`` (its ``<eos>`` included) of the mutant minus that of
  the wild type, one pass per mutant. The masked-LM methods read the prediction at a site from
  both sides, so they need a masked LM; this one needs a causal model.

A variant can also be given as its whole sequence (ProteinGym's ``mutated_sequence``, or its
indel files' ``mutant`` column): one of the wild type's length is read as the substitutions
where it differs; one of another length is an :class:`Indel`, which only the whole-sequence
methods (``pseudo-ll``, ``log-likelihood``) score: the marginals read one aligned site.

Proteins longer than the model's window (learned positions) are scored by the marginal methods
on a window of the model's length centred on each site, as ESM-1v does (clamped at the
protein's ends); ``pseudo-ll`` and ``log-likelihood`` need the whole protein in the window.
Baselines for context: the BLOSUM62 score of each substitution and the unigram log-ratio
``log f(mutant) − log f(wild type)`` from the training data's residue frequencies.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from protein_performer.analysis.dms.variants import (
    Indel,
    Substitution,
    Variant,
    check_mutants,
    looks_like_sequence,
    misfit_error,
    parse_variant,
    whole_sequence_problem,
    window_start,
)
from protein_performer.analysis.inputs import check_toks_per_batch
from protein_performer.analysis.inputs import max_tokens as token_limit
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, Alphabet
from protein_performer.data.blosum62 import blosum62_matrix
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.performer import ProteinLM, evaluating
from protein_performer.utils.progress import progress as progress_bar

#: Masked-LM methods, then the causal model's.
MLM_METHODS = ("masked-marginal", "wt-marginal", "pseudo-ll")
CAUSAL_METHODS = ("log-likelihood",)
METHODS = MLM_METHODS + CAUSAL_METHODS
#: The methods that score a variant by its whole sequence (so indels too).
WHOLE_SEQUENCE_METHODS = ("pseudo-ll", "log-likelihood")
#: Other names for them: ESM's predict.py (``masked-marginals``, ``pseudo-ppl``) and the
#: output columns (``masked_marginal``).
METHOD_ALIASES = {
    "masked-marginals": "masked-marginal",
    "masked_marginal": "masked-marginal",
    "wt-marginals": "wt-marginal",
    "wt_marginal": "wt-marginal",
    "pseudo-ppl": "pseudo-ll",
    "pseudo_ll": "pseudo-ll",
    "log_likelihood": "log-likelihood",
    "ll": "log-likelihood",
    "loglik": "log-likelihood",
}


def default_methods(causal: bool) -> list[str]:
    """The methods ``score`` uses when none is named: ESM-1v's masked marginal for a masked
    LM, the sequence log-likelihood for a causal model."""
    return ["log-likelihood"] if causal else ["masked-marginal"]


def check_methods(methods: Sequence[str], causal: bool) -> None:
    """ConfigError (one line) when a method does not fit the model's objective."""
    wrong = [m for m in methods if m not in (CAUSAL_METHODS if causal else MLM_METHODS)]
    if not wrong:
        return
    if causal:
        raise ConfigError(
            f"method={wrong[0]} reads a masked-LM prediction at the site (from both sides), and "
            "this model is causal (next-token): score it with method=log-likelihood"
        )
    raise ConfigError(
        "method=log-likelihood scores with a causal (next-token) model; this one is a masked "
        "LM: use masked-marginal or pseudo-ll"
    )


def method_name(method: str) -> str:
    """``method`` as one of :data:`METHODS` (aliases mapped); unknown names pass through."""
    return METHOD_ALIASES.get(str(method).strip().lower(), str(method).strip().lower())


def _batches(items: list, width: int, toks_per_batch: int) -> list[list]:
    size = max(1, toks_per_batch // max(1, width))
    return [items[i : i + size] for i in range(0, len(items), size)]


@torch.no_grad()
def _site_log_probs(
    model: ProteinLM,
    alphabet: Alphabet,
    ids: np.ndarray,
    sites: Sequence[int],
    *,
    masked: bool,
    width: int | None,
    toks_per_batch: int,
    progress: bool = False,
) -> dict[int, np.ndarray]:
    """``{site: (V,) log-probabilities}`` at each 0-based ``site`` of the residue ids ``ids``,
    with the site masked or not, each on its window."""
    device = next(model.parameters()).device
    n = len(ids)
    span = n if width is None else min(n, width)
    jobs = [(s, window_start(n, s, width)) for s in sorted(set(sites))]
    if not masked:  # one pass per distinct window serves every site in it
        starts = sorted({start for _, start in jobs})
        windows = {start: [s for s, st in jobs if st == start] for start in starts}
    out: dict[int, np.ndarray] = {}
    groups = _batches(jobs if masked else list(windows.items()), span + 2, toks_per_batch)
    bar = progress_bar(total=len(jobs), desc="scoring", unit="site", enabled=progress)
    for group in groups:
        tokens = torch.empty((len(group), span + 2), dtype=torch.long)
        for row, job in enumerate(group):
            start = job[1] if masked else job[0]
            tokens[row, 0], tokens[row, -1] = alphabet.cls_idx, alphabet.eos_idx
            tokens[row, 1:-1] = torch.from_numpy(ids[start : start + span].astype(np.int64))
            if masked:
                tokens[row, job[0] - start + 1] = alphabet.mask_idx
        logp = torch.log_softmax(model(tokens.to(device))["logits"].float(), dim=-1).cpu()
        for row, job in enumerate(group):
            if masked:
                site, start = job
                out[site] = logp[row, site - start + 1].numpy()
            else:
                start, members = job
                for site in members:
                    out[site] = logp[row, site - start + 1].numpy()
        bar.update(len(group) if masked else sum(len(m) for _, m in group))
    bar.close()
    return out


@torch.no_grad()
def log_likelihoods(
    model: ProteinLM,
    alphabet: Alphabet,
    sequences: Sequence[np.ndarray | str],
    *,
    toks_per_batch: int = 8192,
    progress: bool = False,
    packed: bool = False,
) -> np.ndarray:
    """``(n,)`` float64: each sequence's log-likelihood under a causal model,
    ``Σ_t log p(x_t | <cls> x_<t)`` over its residues and the ``<eos>`` after them (residue ids,
    or strings read as FASTA records are), in eval mode. Every sequence must fit the model.
    ``packed``: a model trained on packed windows, whose proteins lie between ``<sep>`` tokens
    (:func:`~protein_performer.analysis.generation.protein_bounds`)."""
    from protein_performer.analysis.generation import protein_bounds

    begin, end = protein_bounds(alphabet, packed)
    if not getattr(model, "causal", False):
        raise ConfigError(
            "log_likelihood needs a causal (next-token) model; a masked LM's counterpart is "
            "pseudo_log_likelihood"
        )
    seqs = [_residue_ids(alphabet, x, i) for i, x in enumerate(sequences)]
    toks_per_batch = check_toks_per_batch(toks_per_batch)
    if not seqs:
        return np.zeros(0, dtype=np.float64)
    device = next(model.parameters()).device
    out = np.zeros(len(seqs), dtype=np.float64)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    bar = progress_bar(total=len(seqs), desc="log-likelihood", unit="sequence", enabled=progress)
    with evaluating(model):
        for group in _batches(order, max(len(x) for x in seqs) + 2, toks_per_batch):
            width = max(len(seqs[i]) for i in group) + 2
            tokens = torch.full((len(group), width), alphabet.pad_idx, dtype=torch.long)
            for row, i in enumerate(group):
                n = len(seqs[i])
                tokens[row, 0], tokens[row, n + 1] = begin, end
                tokens[row, 1 : n + 1] = torch.from_numpy(seqs[i].astype(np.int64))
            pad = tokens == alphabet.pad_idx
            logits = model(tokens.to(device), pad.to(device))["logits"].double()
            logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, tokens[:, 1:, None].to(device))
            keep = ~pad[:, 1:].to(device)
            sums = (logp[..., 0] * keep).sum(-1).cpu().numpy()
            for row, i in enumerate(group):
                out[i] = sums[row]
            bar.update(len(group))
    bar.close()
    return out


def log_likelihood(
    model: ProteinLM, alphabet: Alphabet, ids: np.ndarray | str, *, packed: bool = False
) -> float:
    """One sequence's log-likelihood under a causal model (see :func:`log_likelihoods`)."""
    return float(log_likelihoods(model, alphabet, [ids], packed=packed)[0])


def _residue_ids(alphabet: Alphabet, x: np.ndarray | str, index: int = 0) -> np.ndarray:
    """Residue ids of ``x`` (ids, or a sequence read as a FASTA record's is); an empty one is
    a ValueError (it has nothing to score, and its "score" would read as a real number)."""
    if not isinstance(alphabet, Alphabet):
        raise TypeError(
            f"alphabet must be an Alphabet (e.g. default_alphabet()), got {type(alphabet).__name__}"
        )
    ids = alphabet.encode(x) if isinstance(x, str) else np.asarray(x)
    if ids.ndim == 1 and not len(ids):
        raise ValueError(f"sequence {index + 1} is empty (no residues)")
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):  # letters, bytes, nested
        raise TypeError(
            f"a sequence must be a str of residues (or a 1-D array of residue ids); got "
            f"{type(x).__name__}" + (f" of {ids.dtype}" if isinstance(x, np.ndarray) else "")
        )
    return ids


@torch.no_grad()
def pseudo_log_likelihood(
    model: ProteinLM, alphabet: Alphabet, ids: np.ndarray | str, *, toks_per_batch: int = 8192
) -> float:
    """Σ_i log p(x_i | x with i masked) over every residue of ``ids`` (residue ids, or the
    sequence as a string), in eval mode; the protein must fit the model. A causal model is
    refused: its logits at a position predict the next residue, not the masked one."""
    if getattr(model, "causal", False):
        raise ConfigError(
            "pseudo_log_likelihood needs a masked-LM model: it reads the prediction at a masked "
            "residue, and this model is causal (next-token; its logits at i predict i + 1): "
            "use log_likelihood"
        )
    ids = _residue_ids(alphabet, ids)
    toks_per_batch = check_toks_per_batch(toks_per_batch)
    with evaluating(model):
        logp = _site_log_probs(
            model,
            alphabet,
            ids,
            range(len(ids)),
            masked=True,
            width=None,
            toks_per_batch=toks_per_batch,
        )
    return float(sum(logp[i][int(ids[i])] for i in range(len(ids))))


def blosum62_scores(mutants: Sequence[Sequence[Substitution] | Indel]) -> np.ndarray:
    """Σ over sites of BLOSUM62(wt, mt), 0 for a synonymous site (``S2S``); NaN for an indel
    (no substitution score)."""
    m = blosum62_matrix()
    # a synonymous site (S2S) changes nothing: 0, as the wild type and every model column
    return np.array(
        [
            np.nan
            if isinstance(sites, Indel)
            else sum(m[s.wt, s.mt] for s in sites if s.wt != s.mt)
            for sites in mutants
        ],
        dtype=np.float64,
    )


def unigram_scores(
    mutants: Sequence[Sequence[Substitution] | Indel],
    counts: np.ndarray,
    alphabet: Alphabet,
    wild_type: str | None = None,
) -> np.ndarray:
    """Σ over sites of log f(mt) − log f(wt), f the add-one smoothed residue frequencies; for
    an indel, Σ log f over its sequence minus over ``wild_type`` (the same sum, which the
    sites' terms are the part of that differs)."""
    counts = np.asarray(counts, dtype=np.float64)
    freq = {aa: counts[alphabet.index(aa)] + 1.0 for aa in STANDARD_AMINO_ACIDS}
    total = sum(freq.values())
    logf = {aa: np.log(v / total) for aa, v in freq.items()}

    def whole(seq: str) -> float:
        return sum(logf[aa] for aa in seq)

    if wild_type is None and any(isinstance(m, Indel) for m in mutants):
        raise ValueError("unigram_scores: an indel's score needs wild_type=")
    return np.array(
        [
            whole(sites.sequence) - whole(wild_type)  # type: ignore[arg-type]
            if isinstance(sites, Indel)
            else sum(logf[s.mt] - logf[s.wt] for s in sites)
            for sites in mutants
        ],
        dtype=np.float64,
    )


def score_mutants(
    model: ProteinLM,
    alphabet: Alphabet,
    sequence: str,
    mutants: Sequence[Sequence[Substitution] | Indel | str],
    *,
    methods: Sequence[str] | str | None = None,
    max_tokens: int | None = None,
    toks_per_batch: int = 8192,
    progress: bool = False,
    offset: int = 1,
    packed: bool = False,
    context: Any = None,
    context_options: Mapping[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """``{method: (n,) scores}`` for ``mutants`` of the wild-type ``sequence``: parsed
    substitutions, :class:`Indel` s or strings (``"H24C"``, ``"H24C:P25A"``, positions numbered
    from ``offset``, the number of the sequence's first residue; or a variant's whole
    sequence, see :func:`parse_variant`). Indels need one of :data:`WHOLE_SEQUENCE_METHODS`
    (site methods beside it give them NaN).

    ``sequence`` is read as a FASTA record's is (whitespace and line breaks removed, any
    case, a final ``*`` dropped), and the mutants are checked against what is scored. Every
    mutant must fit it (positions inside it, its wild-type letters, mutant letters among the
    20 amino acids): a DataError (a ValueError) names the first that does not. ``max_tokens``:
    the window in tokens (with ``<cls>``/``<eos>``) a protein is scored in; None: the model's own (its
    ``max_len`` with learned positions, no limit with rotary ones). Scored in eval mode (the
    model is left in the mode it was in). The masked-LM methods need a masked LM and
    ``log-likelihood`` a causal model (:func:`check_methods`); ``methods=None`` picks the
    model's (:func:`default_methods`). ``packed``: a causal model trained on packed windows
    (``log-likelihood`` frames each sequence by ``<sep>``, see :func:`log_likelihoods`).

    ``context``: the wild type's homologs, an alignment or FASTA hits file (any format
    ``score context=`` reads), the :class:`~protein_performer.data.msa.MSA` ``read_msa`` read
    from one against this wild type, or a :class:`~protein_performer.analysis.dms.homologs.
    ScanContext`;
    adds the columns ``masked_marginal_context``, ``context_retrieval`` and ``pssm`` (the
    profile of the same homologs) to the result, ``context_options`` going to
    :func:`~protein_performer.analysis.dms.homologs.context_columns` (``max_length``,
    ``sampling``, ``samples``, ``window_homologs``, ``max_identity``, ``seed``, ``retrieval``,
    ``crop``; the window defaults to the one the CLI takes: the model's ``max_len`` with
    learned positions, else the window a loaded checkpoint trained on, else 1,024 tokens)
    and, for a file, ``max_homologs`` and ``min_coverage`` to ``read_scan_context``; the
    CLI's names (``context_tokens``, ``context_max_homologs``, ...) are taken too. To see
    what the windows held, pass a ``ScanContext`` (``read_scan_context``): its ``info`` holds
    them after the call. A model whose checkpoint says it was trained on single proteins is
    warned about (``UserWarning``): the homolog models read homologs before a protein.
    """
    causal = bool(getattr(model, "causal", False))
    if isinstance(mutants, str):
        mutants = [mutants]  # one mutant, not its letters
    if methods is None:
        methods = default_methods(causal)
    if isinstance(methods, str):
        methods = [methods]
    methods = list(dict.fromkeys(method_name(m) for m in methods))
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    check_methods(methods, causal)
    ids = _residue_ids(alphabet, sequence)
    wild_type = alphabet.decode(ids)
    toks_per_batch = check_toks_per_batch(toks_per_batch)
    bad = next((m for m in mutants if not isinstance(m, (str, Indel, Sequence))), None)
    if bad is not None:
        raise TypeError(
            f"a mutant must be a string (e.g. 'H24C', 'H24C:P25A' or a variant's sequence), "
            f"substitutions or an Indel; got {type(bad).__name__} {bad!r}"
        )
    whole = [
        isinstance(m, Indel) or (isinstance(m, str) and looks_like_sequence(m, wild_type))
        for m in mutants
    ]
    mutants = [
        parse_variant(m, wild_type, offset)
        if isinstance(m, str)
        else m
        if isinstance(m, Indel)
        else list(m)
        for m in mutants
    ]
    max_tokens = token_limit(model, max_tokens, name="max_tokens")
    window = None if max_tokens is None else max_tokens - 2
    problems = [
        (i, problem)
        for i, (m, w) in enumerate(zip(mutants, whole, strict=True))
        if (problem := whole_sequence_problem(m, wild_type, window, w)) is not None
    ]
    problems += check_mutants(mutants, wild_type, offset)
    problems.sort(key=lambda x: x[0])
    if problems:
        raise misfit_error(problems)
    site_methods = [m for m in methods if m not in WHOLE_SEQUENCE_METHODS]
    indel = next((i for i, m in enumerate(mutants) if isinstance(m, Indel)), None)
    if indel is not None and site_methods == methods:
        raise ValueError(
            f"mutant {indel + 1} is {indel_problem(mutants[indel], wild_type, site_methods[0])}"
        )
    if context is not None and indel is not None:  # before any pass of the model
        raise DataError(
            f"mutant {indel + 1}: context= scores substitutions; an indel has no aligned site"
        )
    with evaluating(model):
        scores = _score(
            model, alphabet, ids, mutants, methods, max_tokens, toks_per_batch, progress, packed
        )
    if context is None:
        return scores
    scores.update(
        _context_scores(model, alphabet, wild_type, mutants, context, context_options,
                        offset, packed=packed, toks_per_batch=toks_per_batch, progress=progress)
    )  # fmt: skip
    return scores


def _context_scores(
    model: ProteinLM,
    alphabet: Alphabet,
    wild_type: str,
    mutants: list[Any],
    context: Any,
    context_options: dict[str, Any] | None,
    offset: int,
    **run: Any,
) -> dict[str, np.ndarray]:
    """:func:`score_mutants`' homolog columns (``run``: packed, toks_per_batch, progress)."""
    from protein_performer.analysis.dms.homologs import (
        ScanContext,
        context_columns,
        read_scan_context,
        single_protein_model,
    )

    # the window: as the CLI's, the model's own with learned positions (a longer one would not
    # run), else the one it trained on; context_columns' default for a model built by hand
    trained = getattr(model, "trained_length", None)  # set by load_model
    own = token_limit(model, None, trained) or trained
    if context_options is not None and not isinstance(context_options, Mapping):
        raise TypeError(
            "context_options must be a mapping such as {'context_max_homologs': 300}; got "
            f"{type(context_options).__name__}"
        )
    options = {"max_length": own, **context_keywords(context_options or {})}
    reading = {k: options.pop(k) for k in _READ_KEYWORDS if k in options}
    if (problem := single_protein_model(model)) is not None:
        warnings.warn(f"{problem}: protein_performer.load('homologs-columns-deep')", stacklevel=3)
    if isinstance(context, ScanContext):
        if reading:
            raise ConfigError(
                f"context_options: {', '.join(reading)} choose the homologs read from a file; "
                "this context is read already (give them to read_scan_context)"
            )
    else:
        seed = options.get("seed", 0)
        context = read_scan_context(
            context, alphabet, wild_type, None, seed=seed, offset=offset, **reading
        )
    with evaluating(model):
        return context_columns(model, alphabet, wild_type, mutants, context, **run, **options)


#: ``score``'s option names -> :func:`context_columns`' keywords
_CLI_CONTEXT_NAMES = {
    "context_tokens": "max_length",
    "context_sampling": "sampling",
    "context_samples": "samples",
    "context_retrieval": "retrieval",
    "context_window_homologs": "window_homologs",
    "context_max_identity": "max_identity",
    "context_crop": "crop",
    "context_max_homologs": "max_homologs",
    "context_min_coverage": "min_coverage",
}
#: the options that choose which homologs are read (:func:`read_scan_context`'s)
_READ_KEYWORDS = ("max_homologs", "min_coverage")
_CONTEXT_KEYWORDS = (
    *_READ_KEYWORDS,
    "max_length",
    "sampling",
    "samples",
    "window_homologs",
    "max_identity",
    "seed",
    "retrieval",
    "crop",
)


def context_keywords(options: Mapping[str, Any]) -> dict[str, Any]:
    """``context_options`` with the CLI's names (``context_sampling=``) turned into
    :func:`context_columns`' keywords (``sampling``); a ConfigError for any other name or a
    setting given under both names."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        name = _CLI_CONTEXT_NAMES.get(key, key)
        if name not in _CONTEXT_KEYWORDS:
            known = ", ".join([*_CONTEXT_KEYWORDS, *_CLI_CONTEXT_NAMES])
            raise ConfigError(f"context_options: unknown option {key!r} (known: {known})")
        if name in out:
            raise ConfigError(f"context_options: {name} given twice ({key!r} and another name)")
        out[name] = value
    return out


def indel_problem(variant: Indel, wild_type: str, method: str) -> str:
    """Why ``method`` (a site method) leaves an indel unscored, in words."""
    return (
        f"an indel ({len(variant.sequence):,} residues, the wild type has "
        f"{len(wild_type):,}): {method} reads one aligned site; indels are scored by "
        "method=pseudo-ll (masked LM) or log-likelihood (causal)"
    )


def _mutant_ids(ids: np.ndarray, variant: Variant, alphabet: Alphabet) -> np.ndarray:
    """The residue ids of the wild type ``ids`` with ``variant``'s substitutions made (an
    indel: its own sequence's)."""
    if isinstance(variant, Indel):
        return alphabet.encode(variant.sequence)
    mut = ids.copy()
    for s in variant:
        mut[s.index] = alphabet.index(s.mt)
    return mut


def _score(
    model: ProteinLM,
    alphabet: Alphabet,
    ids: np.ndarray,
    mutants: list[Variant],
    methods: Sequence[str],
    max_tokens: int | None,
    toks_per_batch: int,
    progress: bool,
    packed: bool = False,
) -> dict[str, np.ndarray]:
    if max_tokens is None and model.rotary is None:
        max_tokens = model.config.max_len
    width = None if max_tokens is None else max_tokens - 2
    longest = max([len(ids), *(len(m.sequence) for m in mutants if isinstance(m, Indel))])
    sites = sorted({s.index for m in mutants if not isinstance(m, Indel) for s in m})
    out: dict[str, np.ndarray] = {}

    def marginal(masked: bool) -> np.ndarray:
        logp = _site_log_probs(
            model,
            alphabet,
            ids,
            sites,
            masked=masked,
            width=width,
            toks_per_batch=toks_per_batch,
            progress=progress,
        )
        return np.array(
            [
                np.nan  # a site method reads no indel (a whole-sequence method beside it does)
                if isinstance(m, Indel)
                else sum(
                    logp[s.index][alphabet.index(s.mt)] - logp[s.index][alphabet.index(s.wt)]
                    for s in m
                )
                for m in mutants
            ],
            dtype=np.float64,
        )

    for method in methods:
        if method == "masked-marginal":
            out[method] = marginal(True)
        elif method == "wt-marginal":
            out[method] = marginal(False)
        elif method == "pseudo-ll":
            if width is not None and longest > width:
                hint = "; use masked-marginal" if len(ids) > width else " (an indel)"
                raise DataError(
                    f"method=pseudo-ll needs the whole protein in the model's window "
                    f"({longest} residues > {width}){hint}"
                )
            wt = pseudo_log_likelihood(model, alphabet, ids, toks_per_batch=toks_per_batch)
            scores = []
            # one pass per residue per mutant: the slow method, so its progress is shown
            for m in progress_bar(mutants, desc="pseudo-ll", unit="mutant", enabled=progress):
                mut = _mutant_ids(ids, m, alphabet)
                scores.append(
                    pseudo_log_likelihood(model, alphabet, mut, toks_per_batch=toks_per_batch) - wt
                )
            out[method] = np.array(scores, dtype=np.float64)
        elif method == "log-likelihood":
            if width is not None and longest > width:
                raise DataError(
                    f"method=log-likelihood needs the whole protein in the model's window "
                    f"({longest} residues > {width})"
                )
            variants = [ids, *(_mutant_ids(ids, m, alphabet) for m in mutants)]
            ll = log_likelihoods(
                model,
                alphabet,
                variants,
                toks_per_batch=toks_per_batch,
                progress=progress,
                packed=packed,
            )
            out[method] = ll[1:] - ll[0]
        else:
            raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho (average ranks for ties) over pairs where both are finite; None when
    fewer than 3 pairs or a side is constant."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0
        i = j + 1
    return ranks


def column_name(method: str) -> str:
    return method.replace("-", "_")


def baseline_columns(
    mutants: Sequence[Sequence[Substitution] | Indel],
    alphabet: Alphabet,
    counts: np.ndarray | None,
    wild_type: str | None = None,
) -> Mapping[str, np.ndarray]:
    cols = {"blosum62": blosum62_scores(mutants)}
    if counts is not None:
        cols["unigram_log_ratio"] = unigram_scores(mutants, counts, alphabet, wild_type)
    return cols
