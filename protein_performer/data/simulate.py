"""Simulated protein families: sequences evolved along random trees under BLOSUM62.

Model
-----
* **Background frequencies q.** BLOSUM scores are half-bit log-odds,
  ``S(a,b) = 2·log2(p_ab / (q_a q_b))``, so the implied joint is
  ``p_ab = q_a q_b W_ab`` with ``W_ab = 2^(S(a,b)/2)``. We take the q for which that joint is
  *self-consistent*: its marginals are q itself, ``Σ_b p_ab = q_a``, i.e. ``W q = c·1``. This is
  a linear system, ``q ∝ W⁻¹ 1`` normalised to sum 1 (all 20 entries are positive for BLOSUM62;
  the normaliser ``c`` is 1.033, i.e. the integer-rounded matrix nearly sums to one with no
  rescaling). The result is close to the published BLOSUM62 background (A 0.082, L 0.090,
  W 0.012, ...) and needs no hard-coded table.
* **Substitutions.** One substitution event at a site holding ``a`` draws the new residue
  from ``P(b|a) = q_b W_ab / Σ_b' q_b' W_ab'``. With the self-consistent q the normaliser is
  the same for every ``a`` and ``q_a P(b|a) = p_ab`` is symmetric, so the chain is reversible
  and q is its stationary distribution: composition stays at q however long the tree. ``b``
  may equal ``a`` (probability 0.18–0.52), so an event changes the residue 67% of the
  time on average. Along a branch of length ``t`` a site with relative rate ``r`` receives
  ``Poisson(substitution_rate · r · t)`` events; ``k`` events are applied exactly with the
  ``k``-th matrix power ``P^k``. Relative site rates are Gamma(shape, 1/shape) (mean 1; set
  ``gamma_shape=None`` for equal rates), giving conserved and variable columns per family.
* **Indels.** ``Poisson(indel_rate · t · L)`` events per branch, half insertions and half
  deletions, with Geometric lengths of mean ``indel_mean_length``, at uniform positions;
  inserted residues are drawn from q (with fresh site rates). A deletion that would make the
  sequence shorter than ``min_length`` is skipped. Indels are applied before the branch's
  substitutions.
* **Trees.** A random Kingman coalescent over the family's members: while ``k`` lineages
  remain, wait ``Exponential(rate k(k-1)/2)`` and merge a random pair. Branch lengths are in
  coalescent units: two members are ``2`` units apart on average (expected
  ``2·substitution_rate`` events per site between them), whatever the family size.
* **Roots.** Length ``LogNormal(log(root_length_median), root_length_sigma)`` rounded and
  clipped to ``[min_length, max_length]`` (leaves may drift past ``max_length`` by
  insertions); residues i.i.d. from q.

Every family ``f`` uses its own generator ``numpy.random.default_rng([seed, f])``, so a
family's sequences depend only on the seed, the family number and the parameters: adding
families appends records without changing the earlier ones.

Headers are UniRef-style so the header parser exercises them::

    >UniRef50_SIMF00012M003 Simulated family 12 member 3 n=1 Tax=synthetic construct TaxID=32630 RepID=SIMF00012M003
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from protein_performer.data.blosum62 import blosum62_matrix
from protein_performer.data.fasta_writer import write_fasta
from protein_performer.errors import ConfigError, DataError
from protein_performer.utils.atomic import owner_tag, write_text_atomic
from protein_performer.utils.interrupts import signals_deferred

__all__ = [
    "AMINO_ACIDS",
    "SimulationParams",
    "SubstitutionModel",
    "blosum62_model",
    "evolve_branch",
    "family_record_id",
    "random_coalescent_tree",
    "simulate_families",
    "simulate_fasta",
    "simulate_records",
]

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
_TAXON = "Tax=synthetic construct TaxID=32630"  # NCBI taxid 32630 = "synthetic construct"
_MAX_POWER = 64  # P^k has converged to the stationary rows long before this


@dataclass(frozen=True)
class SubstitutionModel:
    """BLOSUM62-implied background ``q`` (20,) and one-event transition matrix ``P`` (20, 20).

    Index order is :data:`AMINO_ACIDS`. ``P[a, b] = P(b|a)``.
    """

    scores: np.ndarray  # (20, 20) integer half-bit scores
    q: np.ndarray  # (20,)
    transition: np.ndarray  # (20, 20), rows sum to 1
    consistency: float  # c in W q = c·1 before normalising q

    @functools.cached_property
    def _powers(self) -> np.ndarray:
        """``P^k`` for k = 0.._MAX_POWER, shape (_MAX_POWER + 1, 20, 20)."""
        out = np.empty((_MAX_POWER + 1, 20, 20))
        out[0] = np.eye(20)
        for k in range(1, _MAX_POWER + 1):
            out[k] = out[k - 1] @ self.transition
        return out

    def transition_power(self, k: int) -> np.ndarray:
        """``P^k`` (20, 20): residue distribution after ``k`` substitution events."""
        return self._powers[min(int(k), _MAX_POWER)]


@functools.lru_cache(maxsize=1)
def blosum62_model() -> SubstitutionModel:
    """The substitution model implied by biopython's BLOSUM62 (see the module docstring)."""
    matrix = blosum62_matrix()
    scores = np.array([[matrix[a][b] for b in AMINO_ACIDS] for a in AMINO_ACIDS], dtype=float)
    weights = 2.0 ** (scores / 2.0)
    x = np.linalg.solve(weights, np.ones(20))
    if not np.all(x > 0):
        raise RuntimeError("BLOSUM62 implies a non-positive background frequency")
    q = x / x.sum()
    transition = q[None, :] * weights
    transition /= transition.sum(axis=1, keepdims=True)
    for arr in (scores, q, transition):
        arr.setflags(write=False)
    return SubstitutionModel(scores=scores, q=q, transition=transition, consistency=1.0 / x.sum())


@dataclass(frozen=True)
class SimulationParams:
    """Parameters of :func:`simulate_records`; validated on construction (``ConfigError``)."""

    n_families: int = 300
    min_members: int = 5
    max_members: int = 20
    root_length_median: float = 250.0
    root_length_sigma: float = 0.5
    min_length: int = 30
    max_length: int = 1000
    substitution_rate: float = 0.4
    indel_rate: float = 0.02
    indel_mean_length: float = 3.0
    gamma_shape: float | None = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("root_length_median", "root_length_sigma", "substitution_rate",
                    "indel_rate", "indel_mean_length", "gamma_shape"):  # fmt: skip
            value = getattr(self, key)
            if value is not None and not math.isfinite(value):
                raise ConfigError(f"simulate: {key} must be a finite number (got {value!r})")
        checks = [
            (1 <= self.n_families <= 99_999, "n_families must be in [1, 99999]"),
            (1 <= self.min_members <= self.max_members, "need 1 <= min_members <= max_members"),
            (self.max_members <= 999, "max_members must be <= 999"),
            (1 <= self.min_length <= self.max_length, "need 1 <= min_length <= max_length"),
            (self.root_length_median > 0, "root_length_median must be > 0"),
            (self.root_length_sigma >= 0, "root_length_sigma must be >= 0"),
            # beyond these every member is unrelated to its family (and the events per site
            # make a run take hours): a typo, not a family
            (0 <= self.substitution_rate <= 100, "substitution_rate must be in [0, 100]"),
            (0 <= self.indel_rate <= 10, "indel_rate must be in [0, 10]"),
            (1 <= self.indel_mean_length <= 1000, "indel_mean_length must be in [1, 1000]"),
            (self.root_length_sigma <= 10, "root_length_sigma must be <= 10"),
            (self.gamma_shape is None or self.gamma_shape > 0, "gamma_shape must be > 0 or None"),
            (self.seed >= 0, "seed must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"simulate: {message}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def random_coalescent_tree(
    n_leaves: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Random Kingman coalescent tree over ``n_leaves`` leaves.

    Returns ``parent`` (2n-1,) int64 and ``branch_length`` (2n-1,) float64. Nodes ``0..n-1``
    are the leaves, internal node ``n + i`` is the ``i``-th merge, so every parent has a larger
    index than its children; the root is node ``2n-2`` with ``parent = -1`` and length 0.
    """
    if n_leaves < 1:
        raise ValueError("a tree needs at least one leaf")
    n_nodes = 2 * n_leaves - 1
    parent = np.full(n_nodes, -1, dtype=np.int64)
    height = np.zeros(n_nodes)
    active = list(range(n_leaves))
    time = 0.0
    for node in range(n_leaves, n_nodes):
        k = len(active)
        time += rng.exponential(2.0 / (k * (k - 1)))
        i, j = sorted(rng.choice(k, size=2, replace=False).tolist())
        parent[active[i]] = parent[active[j]] = node
        height[node] = time
        del active[j], active[i]
        active.append(node)
    branch_length = np.zeros(n_nodes)
    has_parent = parent >= 0
    branch_length[has_parent] = height[parent[has_parent]] - height[has_parent]
    return parent, branch_length


def _site_rates(n: int, gamma_shape: float | None, rng: np.random.Generator) -> np.ndarray:
    if gamma_shape is None:
        return np.ones(n)
    return rng.gamma(gamma_shape, 1.0 / gamma_shape, size=n)


def substitute(
    residues: np.ndarray,
    events: np.ndarray,
    rng: np.random.Generator,
    model: SubstitutionModel | None = None,
) -> np.ndarray:
    """Apply ``events[i]`` substitution events at site ``i``; returns new residue indices.

    ``residues`` (L,) int indices into :data:`AMINO_ACIDS`, ``events`` (L,) non-negative ints.
    """
    model = model or blosum62_model()
    out = residues.copy()
    for k in np.unique(events):
        if k == 0:
            continue
        sites = np.flatnonzero(events == k)
        cdf = np.cumsum(model.transition_power(int(k))[residues[sites]], axis=1)
        u = rng.random(sites.size)
        out[sites] = np.minimum((u[:, None] >= cdf).sum(axis=1), 19)
    return out


def evolve_branch(
    residues: np.ndarray,
    rates: np.ndarray,
    length: float,
    rng: np.random.Generator,
    params: SimulationParams,
    model: SubstitutionModel | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Evolve one sequence (residue indices (L,), site rates (L,)) along a branch.

    Indels first (insertions from q), then substitutions; returns the new arrays.
    """
    model = model or blosum62_model()
    n_indels = rng.poisson(params.indel_rate * length * residues.size)
    for _ in range(n_indels):
        size = int(rng.geometric(1.0 / params.indel_mean_length))
        if rng.random() < 0.5:
            pos = int(rng.integers(0, residues.size + 1))
            new = rng.choice(20, size=size, p=model.q)
            residues = np.concatenate([residues[:pos], new, residues[pos:]])
            new_rates = _site_rates(size, params.gamma_shape, rng)
            rates = np.concatenate([rates[:pos], new_rates, rates[pos:]])
        else:
            pos = int(rng.integers(0, residues.size))
            end = min(pos + size, residues.size)
            if residues.size - (end - pos) < params.min_length:
                continue
            residues = np.concatenate([residues[:pos], residues[end:]])
            rates = np.concatenate([rates[:pos], rates[end:]])
    events = rng.poisson(params.substitution_rate * length * rates)
    return substitute(residues, events, rng, model), rates


SIMULATED_ID_PREFIX = "UniRef50_SIMF"


def family_record_id(family: int, member: int) -> tuple[str, str]:
    """UniRef-style ``(id, description)`` for a 1-based family and member number."""
    rep = f"SIMF{family:05d}M{member:03d}"
    return (
        f"{SIMULATED_ID_PREFIX[:-4]}{rep}",
        f"Simulated family {family} member {member} n=1 {_TAXON} RepID={rep}",
    )


def _simulate_family(family: int, params: SimulationParams, model: SubstitutionModel) -> list[str]:
    rng = np.random.default_rng([params.seed, family])
    n_members = int(rng.integers(params.min_members, params.max_members + 1))
    length = rng.lognormal(math.log(params.root_length_median), params.root_length_sigma)
    length = int(np.clip(round(length), params.min_length, params.max_length))
    parent, branch_length = random_coalescent_tree(n_members, rng)
    n_nodes = parent.size
    seqs: list[tuple[np.ndarray, np.ndarray] | None] = [None] * n_nodes
    seqs[-1] = (
        rng.choice(20, size=length, p=model.q),
        _site_rates(length, params.gamma_shape, rng),
    )
    for node in range(n_nodes - 2, -1, -1):  # parents always have larger indices
        up = seqs[parent[node]]
        assert up is not None
        seqs[node] = evolve_branch(up[0], up[1], float(branch_length[node]), rng, params, model)
    letters = np.frombuffer(AMINO_ACIDS.encode(), dtype=np.uint8)
    out = []
    for leaf in range(n_members):
        leaf_seq = seqs[leaf]
        assert leaf_seq is not None
        out.append(letters[leaf_seq[0]].tobytes().decode())
    return out


def simulate_families(**kwargs: Any) -> Iterator[list[tuple[str, str, str]]]:
    """Yield one list of ``(id, description, sequence)`` per family (kwargs: SimulationParams)."""
    params = SimulationParams(**kwargs)
    model = blosum62_model()
    for family in range(1, params.n_families + 1):
        seqs = _simulate_family(family, params, model)
        yield [(*family_record_id(family, m), s) for m, s in enumerate(seqs, start=1)]


def simulate_records(
    *,
    n_families: int = 300,
    min_members: int = 5,
    max_members: int = 20,
    root_length_median: float = 250.0,
    root_length_sigma: float = 0.5,
    min_length: int = 30,
    max_length: int = 1000,
    substitution_rate: float = 0.4,
    indel_rate: float = 0.02,
    indel_mean_length: float = 3.0,
    gamma_shape: float | None = 1.0,
    seed: int = 0,
) -> Iterator[tuple[str, str, str]]:
    """Yield ``(id, description, sequence)`` for every member of every simulated family.

    ``description`` is the header text after the id. Parameters: see the module docstring.
    Raises ``ConfigError`` for invalid parameters (on the first ``next``).
    """
    kwargs = dict(locals())
    for family in simulate_families(**kwargs):
        yield from family


def simulate_fasta(
    out: str | Path,
    *,
    n_families: int = 300,
    min_members: int = 5,
    max_members: int = 20,
    root_length_median: float = 250.0,
    root_length_sigma: float = 0.5,
    min_length: int = 30,
    max_length: int = 1000,
    substitution_rate: float = 0.4,
    indel_rate: float = 0.02,
    indel_mean_length: float = 3.0,
    gamma_shape: float | None = 1.0,
    seed: int = 0,
    progress: bool = True,
    members: str | Path | None = None,
) -> dict[str, Any]:
    """Simulate families and write them atomically to ``out`` (gzip when it ends with ``.gz``).

    ``members``: also write a cluster members table there (``cluster_id<TAB>member_id``, the
    format of ``data cluster``'s ``members.tsv``): the families are the clusters, which is what
    ``data.split_by=cluster``, ``data.sample=cluster`` and ``data.packing=family`` read.

    Returns ``{"path", "records", "residues", "families", "bytes", "sha256", "params"}`` (and
    ``"members"``: its path, when written).
    """
    kwargs = dict(locals())
    del kwargs["out"], kwargs["progress"], kwargs["members"]
    params = SimulationParams(**kwargs)  # validate before creating any file
    for path in (out, members):  # a pair's second rename failing would leave it half-way
        if path is not None and Path(path).is_dir():
            raise DataError("a directory, not a file: give a file name", path=path)
    bar = tqdm(
        total=params.n_families, unit="fam", desc="simulate", disable=None if progress else True
    )

    table = ["cluster_id\tmember_id\n"]

    def records() -> Iterator[tuple[str, str, str]]:
        for number, family in enumerate(simulate_families(**kwargs), start=1):
            table.extend(f"SIMF{number:05d}\t{rid}\n" for rid, _, _ in family)
            yield from family
            bar.update(1)

    if members is None:
        try:
            summary = write_fasta(out, records())
        finally:
            bar.close()
        return {**_summary(Path(summary.path), summary, params), "params": params.to_dict()}
    # the FASTA and its members table are one output: both are written aside, then renamed
    # together (an interrupt between the renames waits: no FASTA with another run's table)
    out, members = Path(out), Path(members)
    temps = [p.with_name(f".{p.name}.{owner_tag()}.pair.tmp") for p in (out, members)]
    try:
        try:
            summary = write_fasta(temps[0], records(), compress=out.name.endswith(".gz"))
        finally:
            bar.close()
        write_text_atomic(temps[1], "".join(table))
        with signals_deferred():
            os.replace(temps[1], members)
            os.replace(temps[0], out)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        raise
    return {
        **_summary(out, summary, params),
        "params": params.to_dict(),
        "members": str(members),
    }


def _summary(path: Path, summary: Any, params: SimulationParams) -> dict[str, Any]:
    return {
        "path": str(path),
        "records": summary.records,
        "residues": summary.residues,
        "families": params.n_families,
        "bytes": summary.bytes,
        "sha256": summary.sha256,
    }
