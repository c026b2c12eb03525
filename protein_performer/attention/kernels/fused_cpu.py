"""The fused CPU kernel for bidirectional FAVOR (``csrc/favor_cpu.cpp``), built on first use.

On a CPU, bidirectional FAVOR (ReLU and softmax kernels) on a packed q/k/v projection runs in
this C++ kernel when it can be built: one head per thread, block by block, with the feature map,
its mask and the normaliser applied to each block while it is in cache, between BLAS calls on
the packed layout (benchmarks/README.md has what it saves). The same numbers as the PyTorch kernel
(:class:`.bidirectional.PackedBidirectionalFavorFunction`) up to float rounding; tests compare them in float64.

The kernel is compiled once per environment with ``torch.utils.cpp_extension`` (needs a C++
compiler and Python's headers, and ninja, a dependency; ~30 s) into torch's extension cache
(``TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``), under a name keyed by all
that changes the binary or torch's build command (:func:`build_key`): two environments on one
machine each keep their own build instead of rebuilding it for each other. A build is always
announced on stderr. ``python -m protein_performer.attention.kernels.fused_cpu --build`` builds it
during set-up (``make venv`` does), and training builds it before its first step
(:func:`prepare`); where it cannot be built, FAVOR runs on the PyTorch kernel with one warning.
``PP_FUSED_KERNEL`` chooses: ``auto`` (the default), ``off`` (never build or use it), ``on``
(fail when it cannot be built).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from protein_performer.errors import ConfigError

from ..feature_maps import FeatureParams, KernelSpec
from .bidirectional import PackedBidirectionalFavorFunction, packed_bidirectional_linear_attention
from .common import without_autocast

SOURCE = Path(__file__).with_name("csrc") / "favor_cpu.cpp"
ENV = "PP_FUSED_KERNEL"
#: Rows of a head's block: (rows, m) features stay in a core's L2 cache (256 KiB at m = 256).
ROWS = 256
_MODES = {
    **dict.fromkeys(("auto", ""), "auto"),
    **dict.fromkeys(("on", "1", "true", "yes"), "on"),
    **dict.fromkeys(("off", "0", "false", "no"), "off"),
}


#: A build lock older than this is a dead process's (a build takes ~30 s): torch would wait on
#: it forever.
STALE_LOCK_S = 600
#: -fopenmp: at::parallel_for's OpenMP loop (one head per thread); no -march=native, as the
#: build is cached under the user's home, which other machines may share
CFLAGS = ("-O3", "-fopenmp")
PREFIX = "protein_performer_favor_cpu_"
#: whether this process compiled the kernel (the set-up command says so)
_compiled = False


class FusedKernelError(ConfigError):
    """``PP_FUSED_KERNEL=on`` and the kernel could not be built or loaded (the CLI's one-line
    error)."""


def mode() -> str:
    """``PP_FUSED_KERNEL`` as ``auto``, ``on`` or ``off``."""
    raw = os.environ.get(ENV, "auto").strip().lower()
    if raw not in _MODES:
        raise ConfigError(f"{ENV}={raw!r}: expected auto, on or off")
    return _MODES[raw]


def _reason(exc: BaseException) -> str:
    """One line on why a build failed: the end of the compiler's output, where the cause is,
    not the ninja command line that torch's message starts with."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if "error" in line.lower() or "not found" in line.lower()]
    text = (useful or lines or [""])[-1]
    return f"{type(exc).__name__}: {text}"[:300]


def _compiler() -> str:
    return os.environ.get("CXX", "c++")  # what torch's build runs


@functools.cache
def compiler_identity(compiler: str) -> str | None:
    """The compiler's (or another build tool's) resolved path and the first line of its
    ``--version`` (None: not on PATH)."""
    path = shutil.which(compiler)
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    version = next((line.strip() for line in out.splitlines() if line.strip()), "unknown")
    return f"{os.path.realpath(path)} ({version})"


def build_key(source: bytes, compiler: str, ninja: str = "") -> dict[str, str]:
    """What the compiled kernel depends on, as torch's ``build.ninja`` spells it: the source
    (its bytes, and its path, which the build file names), torch (version with its +cpu/+cuXY
    tag, and the install its headers and libraries come from), the Python ABI and headers,
    the flags, the compiler (``compiler``: :func:`compiler_identity`), the platform, and the
    ninja that builds it (``ninja``, the same form: two ninja versions on one machine, a
    virtual environment's and the system's, read each other's logs as out of date)."""
    return {
        "ninja": ninja,
        "source": hashlib.sha256(source).hexdigest(),
        "source_path": str(SOURCE.resolve()),
        "torch": torch.__version__,
        "torch_dir": str(Path(torch.__file__).resolve().parent),
        "python": sys.implementation.cache_tag or "",
        "soabi": sysconfig.get_config_var("SOABI") or "",
        "python_include": sysconfig.get_paths().get("include", ""),
        "cflags": " ".join(CFLAGS),
        "compiler": compiler,
        "platform": f"{sys.platform}-{platform.machine()}",
        # the strings build.ninja holds, as given: a resolved path alone let another spelling
        # of the same files (CXX=/usr/bin/c++ for c++, a symlinked checkout or venv) share the
        # name, and ninja rebuilt that build in place, "(out of date)", at each switch
        "ninja_paths": json.dumps([_compiler(), str(SOURCE), *_torch_paths()]),
    }


def _torch_paths() -> list[str]:
    """The include and library directories torch's build command names (unresolved)."""
    from torch.utils import cpp_extension

    return [*cpp_extension.include_paths(), *cpp_extension.library_paths()]


def build_name(key: dict[str, str]) -> str:
    """The extension's name (and build directory's) for :func:`build_key`'s ``key``: one
    build per environment, never another environment's loaded or rebuilt."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return PREFIX + digest[:16]


def _announce(text: str) -> None:
    global _compiled
    _compiled = True
    print(f"protein-performer: {text}", file=sys.stderr, flush=True)


def _library(build_dir: Path, name: str) -> tuple[int, int] | None:
    """The built library's (inode, mtime) stamp, None where it is not built."""
    try:
        st = (build_dir / f"{name}.so").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _out_of_date(build_dir: Path, library: tuple[int, int]) -> bool:
    """Whether ninja will rebuild the library (stamp ``library``): its source is newer, or
    ninja's log is gone (no command on record: a rebuild). (Not asked of ``ninja -n``: a dry
    run drops that log, so that the next build redoes everything.)"""
    try:
        return (
            SOURCE.stat().st_mtime_ns > library[1] or not (build_dir / ".ninja_log").stat().st_size
        )
    except OSError:
        return True


@functools.cache
def _build() -> ModuleType | Exception:
    from torch.utils import cpp_extension

    try:
        source = SOURCE.read_bytes()
    except OSError as exc:  # a copy of the package without its csrc/
        return exc
    compiler = _compiler()
    identity = compiler_identity(compiler)
    if identity is None:  # before torch, whose own banner blames compatibility
        return FileNotFoundError(f"no C++ compiler ({compiler}) on PATH")
    # ninja from the environment's own bin (the dependency), when that is not on PATH (a
    # virtual environment's python run without activating it)
    here = str(Path(sys.executable).parent)
    path = os.environ.get("PATH")
    if shutil.which("ninja") is None and shutil.which("ninja", path=here):
        os.environ["PATH"] = here if path is None else here + os.pathsep + path
    name = build_name(build_key(source, identity, compiler_identity("ninja") or ""))
    try:
        build_dir: Path | None = None
        try:  # private, hence guarded: only to say that a build is coming, and for a stale lock
            build_dir = Path(cpp_extension._get_build_directory(name, verbose=False))
            before = _library(build_dir, name)
            announced = before is None or _out_of_date(build_dir, before)
            lock = build_dir / "lock"
            if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
                # left by a build killed outright (SIGKILL, out of memory): torch would wait
                lock.unlink(missing_ok=True)
        except Exception:
            before, announced = None, True
        if announced:
            where = "" if build_dir is None else f" into {build_dir}"
            _announce(f"compiling the fused CPU FAVOR kernel for this environment{where} (~30 s; "
                      f"{ENV}=off skips it)")  # fmt: skip
        ext = cpp_extension.load(name=name, sources=[str(SOURCE)], extra_cflags=list(CFLAGS),
                                 verbose=False)  # fmt: skip
        if not announced and build_dir is not None and _library(build_dir, name) != before:
            _announce(f"recompiled the fused CPU FAVOR kernel in {build_dir} (out of date)")
        _self_test(ext)
        return ext
    except Exception as exc:  # no compiler, no ninja, no headers, an unwritable cache
        return exc
    finally:
        if path is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = path


def _self_test(ext: ModuleType) -> None:
    """One tiny call of each kernel against the PyTorch kernel: a BLAS of another interface
    (64-bit integers, say) behind ``sgemm_`` would give wrong numbers, not an error."""
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(1, 9, 3, 2, 4, generator=g)
    wq = torch.randn(2, 6, 4, generator=g) * 0.5
    row, bias = torch.ones(2, 6), torch.randn(2, 6, generator=g)
    wk = torch.cat([wq, row[..., None], bias[..., None]], -1)
    relu = ext.relu_forward(qkv, wq, wq, None, 1e-3, 4)[0]
    softmax = ext.softmax_forward(qkv, wq, wq, row, bias, None, 0.25, 1e-6, 4)[0]
    for got, params in [
        (relu, FeatureParams(KernelSpec("relu"), wq, wq)),
        (softmax, FeatureParams(KernelSpec("softmax"), wq, wk, 0.25)),
    ]:
        with torch.no_grad():
            want = PackedBidirectionalFavorFunction.apply(qkv, None, params, 4, False)
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            kind = params.spec.kind
            raise RuntimeError(f"the compiled {kind} kernel disagrees with the PyTorch one")


def kernel() -> ModuleType | None:
    """The compiled kernel, or None where it is off or cannot be built (warned once)."""
    chosen = mode()
    if chosen == "off":
        return None
    built = _build()
    if not isinstance(built, Exception):
        return built
    reason = _reason(built)
    if chosen == "on":
        raise FusedKernelError(f"{ENV}=on, but the fused CPU kernel did not build ({reason})")
    _warn_once(reason)
    return None


@functools.cache
def _warn_once(reason: str) -> None:
    warnings.warn(
        f"the fused CPU FAVOR kernel could not be built ({reason}); using the PyTorch kernel "
        f"(same results, slower). {ENV}=off silences this.",
        RuntimeWarning,
        stacklevel=3,
    )


def usable(qkv: torch.Tensor, params: FeatureParams, save_features: bool) -> bool:
    """Whether the fused kernel computes this call: bidirectional FAVOR (ReLU, or softmax
    with its key row term and feature bias) on a float32/float64 CPU projection, features
    rebuilt in the backward, at least as many heads (B·H) as torch's threads."""
    extra = {"relu": 0, "softmax": 2}.get(params.spec.kind)  # wk's columns beyond wq's
    return (
        extra is not None
        # one head per thread: with fewer heads than threads, cores would idle (the PyTorch
        # kernel's batched products use them all)
        and qkv.shape[0] * qkv.shape[3] >= torch.get_num_threads()
        and params.wk.shape[-1] == params.wq.shape[-1] + extra
        and not save_features
        and qkv.device.type == "cpu"
        and qkv.dtype in (torch.float32, torch.float64)
        and params.wq.dtype == params.wk.dtype == qkv.dtype
        and kernel() is not None
    )


class FusedReluFavorFunction(torch.autograd.Function):
    """Bidirectional ReLU FAVOR on a packed ``qkv`` ``(B, L, 3, H, D)`` -> ``(B, L, H, D)``,
    in the compiled kernel; saves what the PyTorch kernel saves (the projection, the
    ``(m, D+1)`` summary, the output and its normaliser)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        qkv: torch.Tensor,
        mask: torch.Tensor | None,
        wq: torch.Tensor,
        wk: torch.Tensor,
        eps: float,
    ) -> torch.Tensor:
        qkv, wq, wk = qkv.contiguous(), wq.contiguous(), wk.contiguous()
        mask = None if mask is None else mask.contiguous()
        out, den, state = kernel().relu_forward(qkv, wq, wk, mask, eps, ROWS)
        # the projections as attributes, as the PyTorch kernel keeps its FeatureParams:
        # detached parameters of the call, not activations (the memory estimate counts those)
        ctx.eps, ctx.wq, ctx.wk = eps, wq, wk
        ctx.save_for_backward(qkv, mask, out, den, state)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @without_autocast
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        qkv, mask, out, den, state = ctx.saved_tensors
        g = g.to(qkv.dtype).contiguous()
        dqkv = kernel().relu_backward(g, qkv, ctx.wq, ctx.wk, mask, ctx.eps, ROWS, out, den, state)
        return dqkv, None, None, None, None


class FusedSoftmaxFavorFunction(torch.autograd.Function):
    """Bidirectional softmax FAVOR (positive random features) on a packed ``qkv`` ``(B, L, 3,
    H, D)`` -> ``(B, L, H, D)``, in the compiled kernel: key features ``exp(k·w_k + row·c +
    bias − ref)`` against a running max ``ref``, query features ``softmax(q·w_q) + eps``
    (:func:`~protein_performer.attention.feature_maps.key_features`, ``query_features``)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        qkv: torch.Tensor,
        mask: torch.Tensor | None,
        wq: torch.Tensor,
        wk: torch.Tensor,
        ksq: float,
        eps: float,
    ) -> torch.Tensor:
        # wk = [projection, row-term coefficient, bias] (FeatureParams), each its own array
        d = wq.shape[-1]
        ctx.proj = (wq.contiguous(), wk[..., :d].contiguous(), wk[..., d].contiguous(),
                    wk[..., d + 1].contiguous())  # fmt: skip
        ctx.ksq, ctx.eps = ksq, eps  # attributes: see FusedReluFavorFunction
        qkv = qkv.contiguous()
        mask = None if mask is None else mask.contiguous()
        out, den, state, ref = kernel().softmax_forward(qkv, *ctx.proj, mask, ksq, eps, ROWS)
        ctx.save_for_backward(qkv, mask, out, den, state, ref)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    @without_autocast
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        qkv, mask, out, den, state, ref = ctx.saved_tensors
        g = g.to(qkv.dtype).contiguous()
        dqkv = kernel().softmax_backward(
            g, qkv, *ctx.proj, mask, ctx.ksq, ctx.eps, ROWS, out, den, state, ref
        )
        return dqkv, None, None, None, None, None


def fused_attention(
    qkv: torch.Tensor, key_mask: torch.Tensor | None, params: FeatureParams
) -> torch.Tensor:
    """:func:`~protein_performer.attention.kernels.bidirectional.packed_bidirectional_linear_attention`
    in the compiled kernel (check :func:`usable` first): ``qkv`` ``(B, L, 3, H, D)``,
    ``key_mask`` ``(B·H, L)`` True = padded key -> ``(B, L, H, D)``."""
    if params.spec.kind == "relu":
        return FusedReluFavorFunction.apply(
            qkv, key_mask, params.wq, params.wk, params.spec.kernel_eps
        )
    return FusedSoftmaxFavorFunction.apply(
        qkv, key_mask, params.wq, params.wk, params.k_sq_coef, params.spec.eps
    )


def packed_attention(
    qkv: torch.Tensor,
    key_mask: torch.Tensor | None,
    params: FeatureParams,
    chunk: int = 1024,
    save_features: bool = False,
    fused: bool = True,
) -> torch.Tensor:
    """Bidirectional FAVOR on a packed ``qkv`` ``(B, L, 3, H, D)`` -> ``(B, L, H, D)``: in the
    compiled kernel where ``fused`` and :func:`usable` allow, else in
    :func:`~protein_performer.attention.kernels.bidirectional.packed_bidirectional_linear_attention`
    (same arguments)."""
    if fused and usable(qkv, params, save_features and torch.is_grad_enabled()):
        return fused_attention(qkv, key_mask, params)
    return packed_bidirectional_linear_attention(qkv, key_mask, params, chunk, save_features)


def main(argv: list[str] | None = None) -> int:
    """``python -m protein_performer.attention.kernels.fused_cpu [--build]``: say where this
    environment's kernel is built, or build it now; non-zero only where it cannot be built
    and ``PP_FUSED_KERNEL=on``."""
    parser = argparse.ArgumentParser(
        prog="python -m protein_performer.attention.kernels.fused_cpu",
        description="The fused CPU FAVOR kernel of this environment (PP_FUSED_KERNEL=auto|on|off).",
    )
    parser.add_argument("--build", action="store_true", help="build it now (set-up)")
    args = parser.parse_args(argv)
    try:
        chosen = mode()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if chosen == "off":
        print(f"{ENV}=off: the fused CPU FAVOR kernel is not built or used")
        return 0
    if not args.build:
        identity = compiler_identity(_compiler())
        if identity is None or not SOURCE.is_file():
            print(f"the fused CPU FAVOR kernel cannot be built here (no {_compiler()} or source)")
        else:
            name = build_name(build_key(SOURCE.read_bytes(), identity))
            print(f"the fused CPU FAVOR kernel's build here: {name} (--build builds it)")
        return 0
    built = _build()
    if isinstance(built, Exception):
        reason = _reason(built)
        if chosen == "on":
            print(f"error: {ENV}=on, but the fused CPU kernel did not build ({reason})",
                  file=sys.stderr)  # fmt: skip
            return 1
        print(f"the fused CPU FAVOR kernel did not build ({reason}); FAVOR on a CPU uses the "
              "PyTorch kernel (same results, slower)")  # fmt: skip
        return 0
    done = "compiled" if _compiled else "already built"
    print(f"the fused CPU FAVOR kernel: {done} ({getattr(built, '__file__', built)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
