"""Simulated families: BLOSUM62-implied model, trees, indels, determinism, committed sample."""

from __future__ import annotations

import gzip
import inspect
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from Bio import SeqIO
from Bio.Align import PairwiseAligner, substitution_matrices

from protein_performer.data.headers import parse_header
from protein_performer.data.simulate import (
    AMINO_ACIDS,
    SimulationParams,
    blosum62_model,
    evolve_branch,
    random_coalescent_tree,
    simulate_families,
    simulate_fasta,
    simulate_records,
    substitute,
)
from protein_performer.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "simulated_families.fasta.gz"
# Parameters of the committed sample; keep in sync with data/README.md.
SAMPLE_KWARGS = dict(n_families=300, min_members=5, max_members=20, seed=0)

# Published BLOSUM62 background frequencies (Henikoff & Henikoff 1992, blosum62.qij marginals).
PUBLISHED_Q = dict(
    A=0.074, R=0.052, N=0.045, D=0.054, C=0.025, Q=0.034, E=0.054, G=0.074, H=0.026, I=0.068,
    L=0.099, K=0.058, M=0.025, F=0.047, P=0.039, S=0.057, T=0.051, W=0.013, Y=0.032, V=0.073,
)  # fmt: skip


def blosum_scores() -> np.ndarray:
    m = substitution_matrices.load("BLOSUM62")
    return np.array([[m[a][b] for b in AMINO_ACIDS] for a in AMINO_ACIDS], dtype=float)


def conditional(q: np.ndarray, weights: np.ndarray) -> np.ndarray:
    p = q[None, :] * weights
    return p / p.sum(axis=1, keepdims=True)


# ---------------------------------------------------------------- substitution model


def test_background_frequencies_are_self_consistent():
    model = blosum62_model()
    q = model.q
    assert q.shape == (20,) and np.all(q > 0)
    assert q.sum() == pytest.approx(1.0, abs=1e-12)
    # p_ab = q_a q_b 2^(S/2) has marginals proportional to q: W q is a constant vector.
    w_q = 2.0 ** (blosum_scores() / 2.0) @ q
    np.testing.assert_allclose(w_q, w_q[0], rtol=1e-12)
    # With the half-bit scale the rounded matrix is nearly normalised already (c ~ 1).
    assert w_q[0] == pytest.approx(model.consistency, rel=1e-12)
    assert 0.95 < model.consistency < 1.1
    published = np.array([PUBLISHED_Q[a] for a in AMINO_ACIDS])
    np.testing.assert_allclose(q, published, atol=0.02)


def test_a_wrong_score_scale_is_not_self_consistent():
    # Sanity check of the test above: full-bit scaling gives a different, far-off q.
    x = np.linalg.solve(2.0 ** blosum_scores(), np.ones(20))
    assert abs(1.0 / x.sum() - blosum62_model().consistency) > 0.2


def test_transition_matrix_is_reversible_with_stationary_q():
    model = blosum62_model()
    P, q = model.transition, model.q
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    joint = q[:, None] * P
    np.testing.assert_allclose(joint, joint.T, atol=1e-15)
    np.testing.assert_allclose(q @ P, q, atol=1e-14)
    np.testing.assert_allclose(P, conditional(q, 2.0 ** (blosum_scores() / 2.0)), atol=1e-14)


def _empirical(events: int, n_per_residue: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    residues = np.repeat(np.arange(20), n_per_residue)
    new = substitute(residues, np.full(residues.size, events), rng)
    counts = np.zeros((20, 20))
    np.add.at(counts, (residues, new), 1)
    return counts / n_per_residue


def _within_tolerance(freq: np.ndarray, expected: np.ndarray, n: int) -> bool:
    sigma = np.sqrt(expected * (1 - expected) / n)
    return bool(np.all(np.abs(freq - expected) <= 5 * sigma + 1e-3))


def test_single_event_conditional_matches_half_bit_formula():
    n = 20_000
    freq = _empirical(events=1, n_per_residue=n, seed=11)
    q, S = blosum62_model().q, blosum_scores()
    assert _within_tolerance(freq, conditional(q, 2.0 ** (S / 2.0)), n)
    # The same check rejects plausible wrong formulas.
    wrong = {
        "full-bit 2^S": conditional(q, 2.0**S),
        "natural e^(S/2)": conditional(q, np.exp(S / 2.0)),
        "no q_b": conditional(np.ones(20), 2.0 ** (S / 2.0)),
        "uniform background": conditional(np.full(20, 0.05), 2.0 ** (S / 2.0)),
    }
    for name, p in wrong.items():
        assert not _within_tolerance(freq, p, n), name


def test_multiple_events_compose_as_matrix_power():
    n = 10_000
    freq = _empirical(events=3, n_per_residue=n, seed=12)
    P3 = np.linalg.matrix_power(blosum62_model().transition, 3)
    assert _within_tolerance(freq, P3, n)
    assert not _within_tolerance(freq, blosum62_model().transition, n)


def test_zero_events_change_nothing():
    rng = np.random.default_rng(0)
    residues = rng.integers(0, 20, size=500)
    assert np.array_equal(substitute(residues, np.zeros(500, dtype=int), rng), residues)


@pytest.mark.parametrize("t", [0.1, 0.5, 2.0])
def test_divergence_follows_branch_length(t):
    """Identity after a branch matches sum_a q_a [exp(mu t (P - I))]_aa (equal site rates)."""
    model = blosum62_model()
    params = SimulationParams(substitution_rate=0.7, indel_rate=0.0, gamma_shape=None)
    rng = np.random.default_rng(5)
    L = 40_000
    root = rng.choice(20, size=L, p=model.q)
    child, _ = evolve_branch(root, np.ones(L), t, rng, params)
    identity = np.mean(child == root)
    # P is reversible: D^1/2 P D^-1/2 is symmetric; exponentiate via its eigenbasis.
    d = np.sqrt(model.q)
    evals, evecs = np.linalg.eigh(d[:, None] * model.transition / d[None, :])
    mu = params.substitution_rate * t
    expm_sym = evecs @ np.diag(np.exp(mu * (evals - 1.0))) @ evecs.T
    expected = float(np.sum(model.q * np.diag(expm_sym)))
    assert identity == pytest.approx(expected, abs=0.01)
    composition = np.bincount(child, minlength=20) / L
    np.testing.assert_allclose(composition, model.q, atol=0.006)


# ---------------------------------------------------------------- trees and indels


@pytest.mark.parametrize("n", [1, 2, 7])
def test_coalescent_tree_structure(n):
    parent, length = random_coalescent_tree(n, np.random.default_rng(n))
    assert parent.shape == length.shape == (2 * n - 1,)
    assert parent[-1] == -1 and np.all(parent[:-1] > np.arange(2 * n - 2))
    children = np.bincount(parent[:-1], minlength=2 * n - 1)
    assert np.all(children[:n] == 0) and np.all(children[n:] == 2)
    assert np.all(length[:-1] > 0) and length[-1] == 0

    def depth(node: int) -> float:
        total = 0.0
        while parent[node] >= 0:
            total += length[node]
            node = parent[node]
        return total

    depths = [depth(leaf) for leaf in range(n)]
    np.testing.assert_allclose(depths, depths[0], rtol=1e-12)  # ultrametric


def test_coalescent_pair_distance_has_mean_two():
    rng = np.random.default_rng(3)
    dists = []
    for _ in range(3000):
        parent, length = random_coalescent_tree(5, rng)
        node, height = 0, 0.0
        ancestors = {}
        while node >= 0:  # heights of leaf 0's ancestors
            ancestors[node] = height
            height += length[node]
            node = parent[node]
        node, up = 1, 0.0
        while node not in ancestors:
            up += length[node]
            node = parent[node]
        dists.append(up + ancestors[node])
    assert np.mean(dists) == pytest.approx(2.0, abs=0.15)  # sd 2, se ~0.037


def test_indels_change_lengths_and_no_indels_keep_them():
    with_indels = list(simulate_families(n_families=5, indel_rate=0.05, seed=1))
    without = list(simulate_families(n_families=5, indel_rate=0.0, seed=1))
    assert all(len({len(r[2]) for r in fam}) == 1 for fam in without)
    assert sum(len({len(r[2]) for r in fam}) > 1 for fam in with_indels) >= 4
    # Same root length (drawn before any indel), so lengths scatter around it.
    for a, b in zip(with_indels, without, strict=True):
        root_len = len(b[0][2])
        mean_len = np.mean([len(r[2]) for r in a])
        assert abs(mean_len - root_len) < 0.5 * root_len


def test_deletions_respect_min_length():
    params = SimulationParams(min_length=30, indel_rate=2.0, substitution_rate=0.0)
    rng = np.random.default_rng(0)
    residues = np.zeros(40, dtype=np.int64)
    for _ in range(20):
        residues, rates = evolve_branch(residues, np.ones(residues.size), 1.0, rng, params)
        assert residues.size >= 30 and rates.size == residues.size


# ---------------------------------------------------------------- records and files


def test_families_cluster_by_identity():
    fams = list(simulate_families(n_families=5, min_members=4, max_members=4, seed=2))
    aligner = PairwiseAligner(
        mode="global",
        substitution_matrix=substitution_matrices.load("BLOSUM62"),
        open_gap_score=-11,
        extend_gap_score=-1,
    )
    seqs = [(f, r[2]) for f, fam in enumerate(fams) for r in fam]

    def identity(a: str, b: str) -> float:
        c = aligner.align(a, b)[0].counts()
        return c.identities / (c.identities + c.mismatches)

    within, between = [], []
    nearest: dict[int, tuple[float, int]] = {}
    for (i, (fa, a)), (j, (fb, b)) in itertools.combinations(enumerate(seqs), 2):
        x = identity(a, b)
        (within if fa == fb else between).append(x)
        for k, other in ((i, fb), (j, fa)):
            if x > nearest.get(k, (-1.0, -1))[0]:
                nearest[k] = (x, other)
    # Unrelated sequences reach ~0.25 over aligned columns under BLOSUM62 scoring.
    assert np.mean(within) > 0.55 > 0.35 > np.mean(between)
    assert np.mean(within) - np.mean(between) > 0.3
    assert all(nearest[k][1] == seqs[k][0] for k in range(len(seqs)))


def test_records_headers_and_residues():
    records = list(simulate_records(n_families=3, min_members=2, max_members=4, seed=9))
    valid = set(AMINO_ACIDS)
    by_family: dict[int, list[int]] = {}
    for record_id, description, seq in records:
        m = re.fullmatch(r"UniRef50_SIMF(\d{5})M(\d{3})", record_id)
        assert m, record_id
        fam, mem = int(m.group(1)), int(m.group(2))
        by_family.setdefault(fam, []).append(mem)
        assert description == (
            f"Simulated family {fam} member {mem} n=1 Tax=synthetic construct TaxID=32630 "
            f"RepID=SIMF{fam:05d}M{mem:03d}"
        )
        info = parse_header(f"{record_id} {description}")
        assert info.kind == "uniref" and info.members == 1 and info.taxid == 32630
        assert info.taxon == "synthetic construct"
        assert info.representative == f"SIMF{fam:05d}M{mem:03d}"
        assert set(seq) <= valid and len(seq) >= 30
    assert sorted(by_family) == [1, 2, 3]
    for members in by_family.values():
        assert members == list(range(1, len(members) + 1)) and 2 <= len(members) <= 4


def test_root_lengths_follow_clip_range():
    fams = list(
        simulate_families(
            n_families=40,
            root_length_median=100,
            root_length_sigma=2.0,
            min_length=50,
            max_length=120,
            indel_rate=0.0,
            seed=4,
        )
    )
    lengths = {len(f[0][2]) for f in fams}
    assert min(lengths) == 50 and max(lengths) == 120  # wide sigma hits both clips


def test_simulate_fasta_is_deterministic(tmp_path):
    kw = dict(n_families=6, min_members=2, max_members=5, progress=False)
    a = simulate_fasta(tmp_path / "a.fasta.gz", seed=3, **kw)
    b = simulate_fasta(tmp_path / "b.fasta.gz", seed=3, **kw)
    c = simulate_fasta(tmp_path / "c.fasta.gz", seed=4, **kw)
    assert (tmp_path / "a.fasta.gz").read_bytes() == (tmp_path / "b.fasta.gz").read_bytes()
    assert a["sha256"] == b["sha256"] != c["sha256"]
    assert gzip.decompress((tmp_path / "a.fasta.gz").read_bytes()) != gzip.decompress(
        (tmp_path / "c.fasta.gz").read_bytes()
    )
    with gzip.open(tmp_path / "a.fasta.gz", "rt") as handle:
        parsed = list(SeqIO.parse(handle, "fasta"))
    assert a["records"] == len(parsed) and a["families"] == 6
    assert a["residues"] == sum(len(r.seq) for r in parsed)
    assert a["params"]["seed"] == 3


def test_families_do_not_depend_on_family_count():
    short = list(simulate_records(n_families=2, seed=7))
    longer = list(simulate_records(n_families=4, seed=7))
    assert longer[: len(short)] == short


def test_plain_output_without_gz_suffix(tmp_path):
    s = simulate_fasta(tmp_path / "p.fasta", n_families=2, progress=False)
    text = (tmp_path / "p.fasta").read_text()
    assert text.startswith(">UniRef50_SIMF00001M001 ")
    assert max(len(line) for line in text.splitlines() if not line.startswith(">")) == 60
    assert s["records"] == text.count(">")


@pytest.mark.parametrize(
    "bad",
    [
        dict(n_families=0),
        dict(min_members=5, max_members=4),
        dict(max_members=1000),
        dict(min_length=100, max_length=50),
        dict(substitution_rate=-0.1),
        dict(gamma_shape=0.0),
        dict(indel_mean_length=0.5),
        dict(indel_rate=float("inf")),
        dict(substitution_rate=float("inf")),
        dict(gamma_shape=float("inf")),
        dict(root_length_median=float("inf")),
        dict(root_length_sigma=float("nan")),
        dict(indel_mean_length=float("inf")),
        dict(indel_rate=1e6),
    ],
)
def test_invalid_parameters_raise_config_error_and_write_nothing(tmp_path, bad):
    with pytest.raises(ConfigError, match=r"^simulate: "):
        simulate_fasta(tmp_path / "x.fasta.gz", progress=False, **bad)
    assert list(tmp_path.iterdir()) == []


def test_public_defaults_match_params_dataclass():
    defaults = SimulationParams()
    for fn in (simulate_records, simulate_fasta):
        for name, p in inspect.signature(fn).parameters.items():
            if name in ("out", "progress", "members"):
                continue
            assert p.default == getattr(defaults, name), (fn.__name__, name)


# ---------------------------------------------------------------- committed sample


def test_committed_sample_regenerates_identically(tmp_path):
    if not SAMPLE.exists():
        pytest.skip("data/simulated_families.fasta.gz not generated yet")
    assert SAMPLE.stat().st_size <= 2 * 1024 * 1024
    regenerated = tmp_path / "sample.fasta.gz"
    table = tmp_path / "members.tsv"
    summary = simulate_fasta(regenerated, progress=False, members=table, **SAMPLE_KWARGS)
    assert table.read_bytes() == SAMPLE.with_name("simulated_families.members.tsv").read_bytes()
    # Compare decompressed text: gzip bytes may differ between zlib builds.
    committed = gzip.decompress(SAMPLE.read_bytes())
    assert gzip.decompress(regenerated.read_bytes()) == committed
    residues = np.frombuffer(
        b"".join(line for line in committed.splitlines() if not line.startswith(b">")),
        dtype=np.uint8,
    )
    composition = np.array([np.mean(residues == ord(a)) for a in AMINO_ACIDS])
    np.testing.assert_allclose(composition, blosum62_model().q, atol=0.005)
    assert summary["records"] == committed.count(b">")


@pytest.fixture
def ctrl_c_acts():
    """Python's Ctrl-C handler for the test: a suite started in the background by a shell
    (``cmd &``) inherits SIGINT ignored, and an ignored signal stays ignored by design."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_between_the_fasta_and_its_members_table_waits_for_both(
    tmp_path, monkeypatch, ctrl_c_acts
):
    """The pair is one output: an interrupt while the first is renamed into place acts once
    both are there (it left a new FASTA beside the previous run's table)."""
    import os
    import signal

    from protein_performer.data import simulate as sim

    out, table = tmp_path / "s.fasta", tmp_path / "s.tsv"
    simulate_fasta(out, n_families=3, seed=1, members=table)
    before = (out.read_bytes(), table.read_bytes())
    real_replace = os.replace
    renamed = []

    def replace_then_ctrl_c(src, dst):  # (os.replace everywhere: temporaries' renames too)
        real_replace(src, dst)
        if Path(dst) in (out, table):
            renamed.append(Path(dst).name)
            if len(renamed) == 1:
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C right after the first rename

    monkeypatch.setattr(sim.os, "replace", replace_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        simulate_fasta(out, n_families=3, seed=2, members=table)
    assert renamed == ["s.tsv", "s.fasta"]  # both, before the interrupt acted
    after = (out.read_bytes(), table.read_bytes())
    assert after[0] != before[0] and after[1] != before[1]
    ids = {line.split("\t")[1] for line in table.read_text().splitlines()[1:]}
    assert ids == {line[1:].split()[0] for line in out.read_text().splitlines() if line[0] == ">"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.fasta", "s.tsv"]  # no temporaries


def test_a_directory_as_the_members_table_is_refused_before_anything_is_written(tmp_path):
    from protein_performer.errors import DataError

    out, table = tmp_path / "s.fasta", tmp_path / "s.tsv"
    table.mkdir()
    with pytest.raises(DataError, match=r"s\.tsv: a directory, not a file"):
        simulate_fasta(out, n_families=2, seed=1, members=table)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.tsv"]


def test_an_error_in_a_deferred_block_is_not_replaced_by_the_stop_asked_for_meanwhile(
    ctrl_c_acts,
):
    import os
    import signal

    from protein_performer.utils.interrupts import signals_deferred

    with pytest.raises(OSError, match="the rename failed"), signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        raise OSError("the rename failed")
    with pytest.raises(KeyboardInterrupt), signals_deferred():  # a block that ends: it acts
        os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
