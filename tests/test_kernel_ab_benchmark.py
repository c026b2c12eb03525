"""benchmarks/kernel_ab.py: a revision's FAVOR kernel loads beside this tree's and agrees."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.benchmark_scripts import BENCH, load_benchmark


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(BENCH.parent), *args], capture_output=True, text=True, check=False
    )


def _in_git_checkout() -> bool:
    return _git("rev-parse", "--verify", "HEAD").returncode == 0


def _attention_edited() -> bool:
    status = _git("status", "--porcelain", "--", "protein_performer/attention")
    return bool(status.stdout.strip())


@pytest.fixture
def tree_as_committed(monkeypatch, tmp_path):
    """The tree's FavorAttention as HEAD has it: where ``attention/`` has uncommitted edits,
    HEAD's package is loaded from ``git show`` (as the benchmark loads a revision) and stands
    in for the tree's, so HEAD against "this tree" is the same code whatever is being edited."""
    import sys

    if not _attention_edited():
        yield
        return
    import protein_performer.attention.favor as favor
    import protein_performer.model.blocks as blocks

    bench = load_benchmark("kernel_ab.py")
    into = tmp_path / "tree_at_head"
    into.mkdir()
    head = _git("rev-parse", "HEAD").stdout.strip()
    try:
        committed = bench.load_revision(head, into).FavorAttention
        monkeypatch.setattr(favor, "FavorAttention", committed)
        if hasattr(bench, "revision_kind"):  # the blocks build attention kinds by name
            from protein_performer.attention import registry

            for key in ("performer_relu", "performer_softmax"):
                kind = bench.revision_kind(committed)
                monkeypatch.setitem(registry.ATTENTION_CLASSES, key, kind)
        else:
            monkeypatch.setattr(blocks, "FavorAttention", committed)
        yield
    finally:
        sys.path[:] = [p for p in sys.path if p != str(into)]
        for name in [m for m in sys.modules if m.startswith(f"pp_rev_{head[:12]}_{into.name}")]:
            del sys.modules[name]


@pytest.mark.skipif(not _in_git_checkout(), reason="no git checkout")
@pytest.mark.parametrize("causal", [False, True])
def test_head_against_itself_is_identical_and_writes_json(
    tmp_path, capsys, causal, tree_as_committed
):
    bench = load_benchmark("kernel_ab.py")
    out = tmp_path / "ab.json"
    args = ["--rev", "HEAD", "--lengths", "40", "--rounds", "2", "--heads", "2", "--dim", "8"]
    args += ["--causal"] * causal
    assert bench.main([*args, "--features", "16", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["revision"] == _git("rev-parse", "HEAD").stdout.strip()
    points = result["points"]
    assert {p["kernel"] for p in points} == {"relu", "softmax"}
    for p in points:
        # the same code on the same inputs and projection: bit-identical results
        assert p["max_abs_diff"] == 0.0 and p["max_abs_value"] > 0 and p["causal"] is causal
        assert len(p["times_s"]["revision"]) == len(p["times_s"]["tree"]) == 2
    assert result["config"]["causal"] is causal
    printed = capsys.readouterr().out
    assert "tree/revision" in printed and ("causal," in printed) is causal


def test_an_unknown_revision_is_one_line(tmp_path):
    bench = load_benchmark("kernel_ab.py")
    with pytest.raises(SystemExit, match="kernel_ab: 'no-such-revision-xyz' is not a commit"):
        bench.main(["--rev", "no-such-revision-xyz", "--json", str(tmp_path / "x.json")])


@pytest.mark.skipif(not _in_git_checkout(), reason="no git checkout")
def test_versions_that_disagree_fail_the_run(tmp_path, monkeypatch, capsys, tree_as_committed):
    bench = load_benchmark("kernel_ab.py")
    real = bench.compare

    def off(*args, **kwargs):
        point = real(*args, **kwargs)
        return {**point, "max_abs_diff": point["max_abs_value"] * 1e-3}

    monkeypatch.setattr(bench, "compare", off)
    args = ["--rev", "HEAD", "--lengths", "16", "--rounds", "1", "--heads", "1", "--dim", "4"]
    assert bench.main([*args, "--features", "8", "--json", str(tmp_path / "ab.json")]) == 1
    assert "the versions differ" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(not _in_git_checkout(), reason="no git checkout")
def test_model_steps_of_head_against_itself_are_identical(
    tmp_path, capsys, monkeypatch, tree_as_committed
):
    bench = load_benchmark("kernel_ab.py")
    built = []
    real = bench.compare_model

    def spy(old_cls, *args, **kwargs):
        built.append(old_cls)
        return real(old_cls, *args, **kwargs)

    monkeypatch.setattr(bench, "compare_model", spy)
    # the unfused route: the revision's copy of the fused kernel would compile in its own
    # folder (seconds); what this checks, the revision's class in the timed model, is the same
    monkeypatch.setenv("PP_FUSED_KERNEL", "off")
    out = tmp_path / "ab.json"
    args = ["--rev", "HEAD", "--model", "tiny", "--lengths", "32", "--tokens", "64"]
    args += ["--threads", "1"]  # a tiny model: one thread is fastest, and immune to a busy CPU
    assert bench.main([*args, "--rounds", "2", "--features", "16", "--json", str(out)]) == 0
    points = json.loads(out.read_text())["points"]
    assert len(built) == len(points) == 2 and {p["kernel"] for p in points} == {"relu", "softmax"}
    # the revision's class (loaded from git), not this tree's, in the timed model
    from protein_performer.attention.favor import FavorAttention

    assert all(cls is not FavorAttention and cls.__name__ == "FavorAttention" for cls in built)
    for p in points:  # same weights, same code: loss and every gradient bit-identical
        assert p["max_abs_diff"] == 0.0 and p["max_abs_value"] > 0
        assert len(p["times_s"]["tree"]) == 2
    assert "training steps of the tiny model" in capsys.readouterr().out


def test_a_model_of_a_revision_before_the_packed_route_takes_its_flat_route():
    """``--model`` against a revision whose FavorAttention has no ``forward_packed``."""
    import argparse

    from protein_performer.attention.favor import FavorAttention

    class Old(FavorAttention):
        def __getattribute__(self, name: str):
            if name == "forward_packed":
                raise AttributeError(name)
            return super().__getattribute__(name)

    bench = load_benchmark("kernel_ab.py")
    args = argparse.Namespace(model="tiny", features=16, causal=False, tokens=64, rounds=1)
    point = bench.compare_model(Old, "relu", 32, args)
    assert point["max_abs_diff"] <= 1e-5 * point["max_abs_value"]
