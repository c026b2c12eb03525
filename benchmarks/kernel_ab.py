"""The FAVOR attention of another git revision beside this tree's, timed in one process.

``protein_performer/attention`` of ``--rev`` is loaded from ``git show`` as a package of its
own; both versions build the same ``FavorAttention`` (the revision's projection copied into this
tree's module), are checked to agree on outputs and gradients, then forward+backward of each is
timed, alternating (ABBA), ``--rounds`` times (B = 1, H = 8, D = 64, m = 256, fp32 by default).
With ``--model SIZE`` the unit timed is a whole training step (forward, backward, Adam) of a
model of ``model_scaling.py``'s size with ``--tokens`` tokens per step, once with every layer's
attention from the revision and once from this tree (same weights): what a kernel change is
worth among the model's own work and allocations, which the attention alone does not show.
Alternating in one process is what separates a kernel change of 5-20% from the drift of a
shared machine, which moves separate runs of the same point by as much. Reported per kernel and
length: fastest and median time of each version, their ratio (this tree / revision), and the
largest difference of outputs and input gradients; exit status 1 when that exceeds ``--rtol``
of their largest value. Table on stdout, JSON to ``--json``.

    python benchmarks/kernel_ab.py --rev a9946a1 --lengths 2048 8192
    python benchmarks/kernel_ab.py --rev HEAD~1 --model regular --lengths 1024 --kernels relu
"""

from __future__ import annotations

import argparse
import importlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    add_attention_shape_args,
    add_output_args,
    check_outputs,
    environment,
    format_table,
    machine_line,
    positive_int,
    write_json,
)

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "protein_performer/attention"
VERSIONS = ("revision", "tree")


def git(*args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"kernel_ab: git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def load_revision(commit: str, into: Path) -> Any:
    """The ``favor`` module of ``protein_performer/attention`` at ``commit``, imported from
    ``into`` as a package of its own (imports of the rest of the library resolve to this tree).
    The caller removes ``into`` from ``sys.path`` and the package from ``sys.modules``."""
    name = re.sub(r"\W", "_", f"pp_rev_{commit[:12]}_{into.name}")  # unique per call
    pkg = into / name
    pkg.mkdir()
    # every module and the compiled kernel's source, in their subfolders (kernels/, csrc/)
    paths = [
        p
        for p in git("ls-tree", "-r", "--name-only", commit, f"{PACKAGE}/").split()
        if p.endswith((".py", ".cpp"))
    ]
    if f"{PACKAGE}/favor.py" not in paths:
        raise SystemExit(f"kernel_ab: {commit[:12]} has no {PACKAGE}/favor.py")
    for path in paths:
        text = git("show", f"{commit}:{path}")
        if path.count("/") == 2:  # `from ..errors import X` (older revisions) -> this tree's
            text = re.sub(r"from \.\.(\w+)", r"from protein_performer.\1", text)
        target = pkg / Path(path).relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    sys.path.insert(0, str(into))
    module = importlib.import_module(f"{name}.favor")
    assert Path(module.__file__).resolve().is_relative_to(into.resolve()), module.__file__
    return module


def compare(old_cls: type, kernel: str, length: int, args: argparse.Namespace) -> dict[str, Any]:
    from protein_performer.attention.favor import FavorAttention

    torch.manual_seed(0)
    old = old_cls(args.dim, args.features, kernel=kernel, causal=args.causal)
    new = FavorAttention(args.dim, args.features, kernel=kernel, causal=args.causal)
    new.load_state_dict(old.state_dict())
    g = torch.Generator().manual_seed(1)
    shape = (args.batch, args.heads, length, args.dim)
    q, k, v = (torch.randn(shape, generator=g).requires_grad_() for _ in range(3))
    grad_out = torch.randn(shape, generator=g)
    versions = {"revision": old, "tree": new}

    def run(name: str) -> tuple[torch.Tensor, ...]:
        out = versions[name](q, k, v)
        return (out, *torch.autograd.grad(out, (q, k, v), grad_out))

    causal = bool(new.causal and old.causal)
    return alternate(kernel, causal, length, check=run, timed=run, rounds=args.rounds)


def revision_kind(old_cls: type) -> type:
    """A revision's FavorAttention as an attention kind the blocks build (one from before the
    common interface has no ``from_options``, ``slot`` or ``reads_packed``): the same class
    with this tree's builder."""
    from protein_performer.attention import AttentionKind, FavorAttention

    class Revision(old_cls, AttentionKind):
        slot = "favor"
        reads_packed = True  # the blocks' packed route is switched by block.attn.packed
        from_options = classmethod(FavorAttention.from_options.__func__)

    Revision.__name__ = Revision.__qualname__ = old_cls.__name__
    return Revision


def compare_model(
    old_cls: type, kernel: str, length: int, args: argparse.Namespace
) -> dict[str, Any]:
    """:func:`compare` for a whole training step of a ``--model`` sized Performer."""
    import torch.nn.functional as F
    from model_scaling import SIZES

    from protein_performer.attention import registry
    from protein_performer.data.alphabet import default_alphabet
    from protein_performer.model.config import ModelConfig
    from protein_performer.model.performer import ProteinLM

    alphabet = default_alphabet()
    dim, depth, heads, ffn_dim = SIZES[args.model]
    config = ModelConfig(
        attention=f"performer_{kernel}",
        dim=dim,
        depth=depth,
        heads=heads,
        ffn_dim=ffn_dim,
        dropout=0.0,
        max_len=length,
        nb_features=args.features,
    )
    models = {}
    key = f"performer_{kernel}"
    for name in VERSIONS:
        tree_cls = registry.ATTENTION_CLASSES[key]
        if name == "revision":  # the blocks build the revision's attention
            registry.ATTENTION_CLASSES[key] = revision_kind(old_cls)
        try:
            torch.manual_seed(0)
            models[name] = ProteinLM(config, len(alphabet), alphabet.pad_idx, causal=args.causal)
        finally:
            registry.ATTENTION_CLASSES[key] = tree_cls
    for block in models["revision"].blocks:  # a revision before the packed route has none
        block.attn.packed = hasattr(block.attn.favor, "forward_packed")
    models["tree"].load_state_dict(models["revision"].state_dict())
    assert isinstance(models["revision"].blocks[0].attn.favor, old_cls)
    optimizers = {n: torch.optim.Adam(m.parameters(), lr=1e-4) for n, m in models.items()}
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 24, (max(1, args.tokens // length), length), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.15, ids, -100)
    inputs = torch.where(labels != -100, alphabet.mask_idx, ids)

    def step(name: str, update: bool = True) -> tuple[torch.Tensor, ...]:
        model = models[name]
        logits = model(inputs)["logits"]
        # (a causal model is timed on the same targets: the step's cost is what is compared)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        grads = tuple(p.grad.clone() for p in model.parameters()) if not update else ()
        if update:
            optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)
        return (loss.detach(), *grads)

    # the same weights: loss and gradients agree before any update (also the warm-up)
    return alternate(
        kernel,
        args.causal,
        length,
        check=lambda name: step(name, update=False),
        timed=step,
        rounds=args.rounds,
    )


def alternate(
    kernel: str,
    causal: bool,
    length: int,
    check: Callable[[str], tuple[torch.Tensor, ...]],
    timed: Callable[[str], object],
    rounds: int,
) -> dict[str, Any]:
    """One point of the JSON: ``check(version)`` once per version (the tensors compared between
    them; also the warm-up), then ``timed(version)`` alternating ABBA ``rounds`` times; fastest
    and median time of each version and their ratios."""
    results = {name: check(name) for name in VERSIONS}
    diff = max(
        (a - b).abs().max().item()
        for a, b in zip(results["revision"], results["tree"], strict=True)
    )
    scale = max(t.abs().max().item() for t in results["revision"])
    times: dict[str, list[float]] = {name: [] for name in VERSIONS}
    for i in range(rounds):
        for name in VERSIONS if i % 2 == 0 else VERSIONS[::-1]:  # neither always goes first
            start = time.perf_counter()
            timed(name)
            times[name].append(time.perf_counter() - start)
    best = {name: min(t) for name, t in times.items()}
    return {
        "kernel": kernel,
        "causal": causal,
        "length": length,
        "revision_ms": 1e3 * best["revision"],
        "tree_ms": 1e3 * best["tree"],
        "revision_median_ms": 1e3 * statistics.median(times["revision"]),
        "tree_median_ms": 1e3 * statistics.median(times["tree"]),
        "ratio": best["tree"] / best["revision"],
        "median_ratio": statistics.median(times["tree"]) / statistics.median(times["revision"]),
        "max_abs_diff": diff,
        "max_abs_value": scale,
        "times_s": times,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="git revision to compare with, e.g. HEAD~1")
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[2048, 8192])
    parser.add_argument("--kernels", nargs="+", default=["relu", "softmax"])
    parser.add_argument("--rounds", type=positive_int, default=8)
    parser.add_argument("--causal", action="store_true", help="the causal (prefix-sum) kernels")
    add_attention_shape_args(parser)
    parser.add_argument(
        "--model",
        choices=["regular", "small", "tiny"],
        default=None,
        help="time a whole training step of a model this size (model_scaling.py's sizes)",
    )
    parser.add_argument(
        "--tokens", type=int, default=8192, help="--model: tokens per step (tokens // L sequences)"
    )
    parser.add_argument(
        "--rtol", type=float, default=1e-4, help="largest difference allowed, relative"
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "kernel_ab.json")
    add_output_args(parser)
    args = parser.parse_args(argv)
    check_outputs(parser, [args.json], args.overwrite)
    try:
        commit = git("rev-parse", "--verify", "--quiet", f"{args.rev}^{{commit}}").strip()
    except SystemExit:
        raise SystemExit(f"kernel_ab: {args.rev!r} is not a commit of {REPO}") from None
    tree = git("rev-parse", "HEAD").strip()
    dirty = bool(git("status", "--porcelain", "--", PACKAGE).strip())
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            old_favor = load_revision(commit, Path(tmp))
            run = compare_model if args.model else compare
            points = [
                run(old_favor.FavorAttention, kernel, length, args)
                for kernel in args.kernels
                for length in args.lengths
            ]
        finally:
            torch.set_num_threads(threads)
            sys.path[:] = [p for p in sys.path if p != tmp]
            for mod in [m for m in sys.modules if m.startswith(f"pp_rev_{commit[:12]}")]:
                del sys.modules[mod]
    headers = ["kernel", "L", "revision ms", "tree ms", "tree/revision", "median ratio", "max diff"]
    rows = [
        [
            p["kernel"],
            p["length"],
            p["revision_ms"],
            p["tree_ms"],
            p["ratio"],
            p["median_ratio"],
            f"{p['max_abs_diff']:.1e}",
        ]
        for p in points
    ]
    where = f"{tree[:12]}{' + uncommitted changes' if dirty else ''}"
    kind = "causal" if args.causal else "bidirectional"
    if args.model:
        kind += f", training steps of the {args.model} model ({args.tokens} tokens)"
    print(f"revision {commit[:12]} vs this tree ({where}), {kind}, fastest of {args.rounds} rounds")
    print(machine_line(threads=args.threads))
    print(format_table(headers, rows))
    config = {k: v for k, v in vars(args).items() if k != "json"}
    write_json(
        args.json,
        {
            "benchmark": "kernel_ab",
            "revision": commit,
            "tree": {"head": tree, "attention_changed_since_head": dirty},
            "config": config,
            "environment": environment(),
            "points": points,
        },
    )
    print(f"\nwrote {args.json}")
    off = [p for p in points if p["max_abs_diff"] > args.rtol * p["max_abs_value"]]
    for p in off:
        print(
            f"kernel_ab: {p['kernel']} L={p['length']}: the versions differ by "
            f"{p['max_abs_diff']:.2e} (largest value {p['max_abs_value']:.2e})"
        )
    return 1 if off else 0


if __name__ == "__main__":
    raise SystemExit(main())
