"""The compiled CPU kernel for bidirectional FAVOR (``fused_cpu``; ReLU and softmax kernels): the
PyTorch kernel's numbers in float64 (values and gradients), its handling of padding and NaN, and
the switch ``PP_FUSED_KERNEL`` with its fallback when the kernel cannot be built."""

from __future__ import annotations

import os
import shutil
import sys
import warnings

import pytest
import torch
from torch.utils import cpp_extension

import protein_performer.attention.kernels.bidirectional as la
from protein_performer.attention import FavorAttention
from protein_performer.attention.kernels import fused_cpu

COMPILER = fused_cpu.compiler_identity(fused_cpu._compiler()) is not None and bool(
    # ninja on PATH, or beside this Python (where the kernel's build finds it too)
    cpp_extension.is_ninja_available()
    or shutil.which("ninja", path=os.path.dirname(sys.executable))
)


@pytest.fixture
def built(monkeypatch):
    """The kernel, whatever PP_FUSED_KERNEL says: skipped where no C++ compiler (or ninja) is
    there to build it; where one is, a kernel that does not build or fails its self-test
    fails these tests (a skip would hide it)."""
    monkeypatch.setenv(fused_cpu.ENV, "auto")
    ext = fused_cpu._build()
    if not isinstance(ext, Exception):
        return ext
    if not COMPILER:
        pytest.skip(f"no C++ compiler or ninja: the fused kernel cannot be built here ({ext})")
    pytest.fail(f"the fused kernel did not build with a compiler here: {fused_cpu._reason(ext)}")


@pytest.fixture(autouse=True)
def _threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_the_kernel_builds_where_a_compiler_and_ninja_are():
    if not COMPILER:
        pytest.skip("no C++ compiler or ninja")
    assert fused_cpu.kernel() is not None, fused_cpu._build()


def _both(attn: FavorAttention, qkv: torch.Tensor, mask: torch.Tensor | None, g: torch.Tensor):
    """Output and input gradient of the fused kernel and of the PyTorch one (the fused one
    checked to run: it takes calls with at least one head per thread)."""
    torch.set_num_threads(min(torch.get_num_threads(), qkv.shape[0] * qkv.shape[3]))
    results = []
    with pytest.MonkeyPatch.context() as mp:
        routes = _spy_routes(mp)
        for fused in (True, False):
            attn.fused = fused
            out = attn.forward_packed(qkv, mask)
            (grad,) = torch.autograd.grad((out * g).sum(), qkv)
            results.append((out, grad))
    assert routes == ["fused", "pytorch"]
    return results


SHAPES = [  # (b, length, h, d, m, projection)
    (1, 1, 1, 8, 16, "random"),  # one row, one head
    (2, 255, 3, 16, 24, "random"),
    (1, 256, 2, 16, 40, "random"),  # exactly one block
    (3, 257, 1, 8, 8, "none"),  # one row into a second block; m = D, no projection (ReLU only)
    (2, 600, 2, 16, 32, "random"),
]
KERNELS = [{"kernel": "relu"}, {"kernel": "softmax"}, {"kernel": "softmax", "estimator": "favor+"}]


@pytest.mark.parametrize(
    ("b", "length", "h", "d", "m", "projection", "cfg"),
    [
        (*shape, cfg)
        for shape in SHAPES
        for cfg in KERNELS
        if cfg["kernel"] == "relu" or shape[-1] != "none"
    ],
)
@pytest.mark.parametrize("masked", [False, True])
def test_fused_equals_the_pytorch_kernel_in_float64(
    built, b, length, h, d, m, projection, cfg, masked
):
    torch.manual_seed(0)
    attn = FavorAttention(d, m, projection=projection, **cfg).double()
    qkv = torch.randn(b, length, 3, h, d, dtype=torch.float64, requires_grad=True)
    mask = None
    if masked:
        mask = torch.zeros(b, length, dtype=torch.bool)
        mask[0, length // 2 :] = True  # padding across a block boundary
        if b > 2:
            mask[1] = True  # every key padded: zero output, zero gradient
    g = torch.randn(b, length, h, d, dtype=torch.float64)
    (out, grad), (want, want_grad) = _both(attn, qkv, mask, g)
    torch.testing.assert_close(out, want, atol=1e-13, rtol=1e-12)
    torch.testing.assert_close(grad, want_grad, atol=1e-12, rtol=1e-11)
    if masked and b > 2:
        assert not out[1].any() and not grad[1].any()


@pytest.mark.parametrize("kernel", ["relu", "softmax"])
def test_fused_gradcheck(built, kernel):
    torch.manual_seed(1)
    # favor+: OPRF's parameter follows q and k without a gradient (by design), see test_favor
    attn = FavorAttention(4, 6, kernel=kernel, estimator="favor+").double()
    qkv = torch.randn(2, 7, 3, 2, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[1, -3:] = True
    with pytest.MonkeyPatch.context() as mp:
        routes = _spy_routes(mp)
        assert torch.autograd.gradcheck(lambda x: attn.forward_packed(x, mask), (qkv,))
    assert set(routes) == {"fused"}  # the fused kernel was the one checked


@pytest.mark.parametrize("kernel", ["relu", "softmax"])
def test_padded_rows_holding_nan_do_not_reach_real_rows_and_a_real_nan_propagates(built, kernel):
    torch.manual_seed(2)
    attn = FavorAttention(8, 16, kernel=kernel, estimator="favor+").double()
    clean = torch.randn(2, 300, 3, 2, 8, dtype=torch.float64)
    mask = torch.zeros(2, 300, dtype=torch.bool)
    mask[0, 280:] = True
    dirty = clean.clone()
    dirty[0, 280:, 1:] = float("nan")  # keys and values of padded positions
    g = torch.randn(2, 300, 2, 8, dtype=torch.float64)
    results = []
    for x in (clean, dirty):
        x = x.clone().requires_grad_()
        attn.fused = True
        out = attn.forward_packed(x, mask)
        (grad,) = torch.autograd.grad((out * g).sum(), x)
        results.append((out, grad))
    (out, grad), (dirty_out, dirty_grad) = results
    torch.testing.assert_close(dirty_out, out, atol=0, rtol=0)
    torch.testing.assert_close(dirty_grad[:, :, 0], grad[:, :, 0], atol=0, rtol=0)  # dq
    real = ~mask
    torch.testing.assert_close(dirty_grad[real], grad[real], atol=0, rtol=0)
    # a NaN in a real key is a diverging step: it shows, as in the PyTorch kernel
    bad = clean.clone()
    bad[1, 5, 1, 0, 0] = float("nan")
    for fused in (True, False):
        attn.fused = fused
        with torch.no_grad():
            assert attn.forward_packed(bad, mask)[1, :, 0].isnan().all()


@pytest.mark.parametrize("attention", ["performer_relu", "performer_softmax"])
def test_a_float32_model_step_takes_the_fused_kernel_and_matches_the_pytorch_one(built, attention):
    from protein_performer.model.config import ModelConfig
    from protein_performer.model.performer import ProteinLM

    torch.manual_seed(3)
    config = ModelConfig(attention=attention, dim=32, depth=2, heads=4, ffn_dim=64)
    model = ProteinLM(config, 25, 0).eval()
    ids = torch.randint(4, 25, (3, 40))
    ids[0, -7:] = 0
    losses = []
    for fused in (True, False):
        for block in model.blocks:
            block.attn.favor.fused = fused
        model.zero_grad()
        loss = model(ids)["logits"].square().mean()
        loss.backward()
        losses.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss, grads), (want, want_grads) = losses
    torch.testing.assert_close(loss, want, atol=1e-6, rtol=1e-5)
    for got, exp in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, exp, atol=1e-5, rtol=1e-4)


def _spy_routes(monkeypatch) -> list[str]:
    routes: list[str] = []
    for name, function in [
        ("fused", fused_cpu.FusedReluFavorFunction),
        ("fused", fused_cpu.FusedSoftmaxFavorFunction),
        ("pytorch", la.PackedBidirectionalFavorFunction),
    ]:
        forward = function.forward

        def spy(ctx, *args, _name=name, _forward=forward):
            routes.append(_name)
            return _forward(ctx, *args)

        monkeypatch.setattr(function, "forward", staticmethod(spy))
    return routes


def test_off_keeps_the_pytorch_kernel_and_on_fails_loudly_where_it_cannot_build(monkeypatch):
    routes = _spy_routes(monkeypatch)
    attn = FavorAttention(8, 16, kernel="relu")
    qkv = torch.randn(1, 20, 3, 2, 8)
    monkeypatch.setenv(fused_cpu.ENV, "off")
    attn.forward_packed(qkv)
    assert routes == ["pytorch"]

    monkeypatch.setattr(fused_cpu, "_build", lambda: OSError("no compiler here"))
    monkeypatch.setenv(fused_cpu.ENV, "on")
    with pytest.raises(fused_cpu.FusedKernelError, match="no compiler here"):
        attn.forward_packed(qkv)
    monkeypatch.setenv(fused_cpu.ENV, "sometimes")
    with pytest.raises(ValueError, match="PP_FUSED_KERNEL='sometimes'"):
        attn.forward_packed(qkv)


def test_auto_falls_back_to_the_pytorch_kernel_with_one_warning(monkeypatch):
    routes = _spy_routes(monkeypatch)
    monkeypatch.setenv(fused_cpu.ENV, "auto")
    monkeypatch.setattr(fused_cpu, "_build", lambda: OSError("ninja is required"))
    fused_cpu._warn_once.cache_clear()
    attn = FavorAttention(8, 16, kernel="relu")
    qkv = torch.randn(1, 20, 3, 2, 8)
    with pytest.warns(RuntimeWarning, match="could not be built .*ninja is required"):
        attn.forward_packed(qkv)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per process
        attn.forward_packed(qkv)
    assert routes == ["pytorch", "pytorch"]
    fused_cpu._warn_once.cache_clear()


def test_only_bidirectional_attention_without_kept_features_takes_it(built, monkeypatch):
    routes = _spy_routes(monkeypatch)
    qkv = torch.randn(1, 20, 3, 2, 8)
    FavorAttention(8, 16, kernel="relu").forward_packed(qkv)
    FavorAttention(8, 16, kernel="softmax").forward_packed(qkv)
    with torch.enable_grad():
        FavorAttention(8, 16, kernel="relu", save_features=True).forward_packed(
            qkv.requires_grad_()
        )
    assert routes == ["fused", "fused", "pytorch"]


def test_softmax_keys_whose_maximum_grows_block_by_block_rescale_the_summary(built):
    """The running max of key logits rises in later blocks (keys scaled up), and one sequence's
    first block is all padding (no finite logit yet): the PyTorch kernel's numbers."""
    torch.manual_seed(4)
    attn = FavorAttention(16, 32, kernel="softmax").double()
    qkv = torch.randn(2, 700, 3, 2, 16, dtype=torch.float64)
    qkv[:, 300:, 1] *= 2.0  # keys of later blocks: larger logits
    qkv[:, 600:, 1] *= 1.5
    qkv.requires_grad_()
    mask = torch.zeros(2, 700, dtype=torch.bool)
    mask[1, :300] = True
    g = torch.randn(2, 700, 2, 16, dtype=torch.float64)
    (out, grad), (want, want_grad) = _both(attn, qkv, mask, g)
    torch.testing.assert_close(out, want, atol=1e-13, rtol=1e-11)
    torch.testing.assert_close(grad, want_grad, atol=1e-12, rtol=1e-10)


def test_the_kernels_float_exp_is_within_two_ulp_and_keeps_inf_and_nan(built):
    """The softmax kernel's vectorisable exp (float32): against float64 exp over the range its
    arguments take (<= 0 after a max is subtracted) and beyond, and its special values."""
    x = torch.cat([torch.linspace(-87.3, 88.72, 200001), torch.tensor([-1e-30, 0.0, 1e-30])])
    got = fused_cpu.kernel().exp_float(x).double()
    want = torch.exp(x.double())
    ulp = torch.finfo(torch.float32).eps * want
    assert ((got - want).abs() <= 2 * ulp).all()
    special = torch.tensor([float("-inf"), -1e4, -87.5, 88.73, float("inf"), float("nan")])
    got = fused_cpu.kernel().exp_float(special)
    assert got[:3].tolist() == [0.0, 0.0, 0.0]  # padded keys' -inf logits: exactly 0
    assert got[3:5].tolist() == [float("inf")] * 2 and got[5].isnan()


@pytest.mark.parametrize("kernel", ["relu", "softmax"])
def test_float32_over_several_blocks_and_nan_gradients_as_the_pytorch_kernel(built, kernel):
    """float32 (the vectorised exp and reductions) over blocks with a growing stabiliser,
    padded keys holding inf; and where a real key is NaN, the same gradients are NaN."""
    torch.manual_seed(5)
    attn = FavorAttention(32, 64, kernel=kernel)
    qkv = torch.randn(2, 900, 3, 4, 32)
    qkv[:, 600:, 1] *= 1.5
    mask = torch.zeros(2, 900, dtype=torch.bool)
    mask[0, 700:] = True
    qkv[0, 700:, 1:] = float("inf")
    g = torch.randn(2, 900, 4, 32)
    (out, grad), (want, want_grad) = _both(attn, qkv.requires_grad_(), mask, g)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(grad, want_grad, atol=1e-5, rtol=1e-4)
    bad = qkv.detach().clone()
    bad[1, 10, 1, 2, 3] = float("nan")  # a real key
    (_, grad), (_, want_grad) = _both(attn, bad.requires_grad_(), mask, g)
    assert torch.equal(grad.isnan(), want_grad.isnan())


def test_a_package_copy_without_the_kernel_source_falls_back(monkeypatch, tmp_path):
    monkeypatch.setenv(fused_cpu.ENV, "auto")
    monkeypatch.setattr(fused_cpu, "SOURCE", tmp_path / "csrc" / "favor_cpu.cpp")
    fused_cpu._build.cache_clear()
    fused_cpu._warn_once.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not be built .*FileNotFoundError"):
            assert fused_cpu.kernel() is None
    finally:
        monkeypatch.undo()
        fused_cpu._build.cache_clear()
        fused_cpu._warn_once.cache_clear()


def _fresh_build(monkeypatch):
    monkeypatch.setenv(fused_cpu.ENV, "auto")
    fused_cpu._build.cache_clear()
    fused_cpu._warn_once.cache_clear()


def test_no_compiler_is_said_as_such_and_on_makes_it_a_one_line_config_error(monkeypatch):
    from protein_performer.errors import ProteinPerformerError

    _fresh_build(monkeypatch)
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    try:
        with pytest.warns(RuntimeWarning, match=r"no C\+\+ compiler \(no-such-compiler-here\)"):
            assert fused_cpu.kernel() is None
        monkeypatch.setenv(fused_cpu.ENV, "on")
        with pytest.raises(ProteinPerformerError, match="PP_FUSED_KERNEL=on"):  # CLI: one line
            fused_cpu.kernel()
    finally:
        monkeypatch.undo()
        fused_cpu._build.cache_clear()
        fused_cpu._warn_once.cache_clear()


def test_the_warning_gives_the_compilers_error_not_the_command_line():
    exc = RuntimeError(
        "Error building extension 'x': [1/2] c++ -MMD -MF a.o.d -DTORCH -isystem /a -isystem /b\n"
        "FAILED: a.o\n/bin/sh: 1: c++: not found\nninja: build stopped: subcommand failed."
    )
    assert fused_cpu._reason(exc) == "RuntimeError: /bin/sh: 1: c++: not found"


def test_a_dead_builds_lock_is_removed_before_building(monkeypatch, tmp_path):
    import os
    import time

    from torch.utils import cpp_extension

    _fresh_build(monkeypatch)
    lock = tmp_path / "lock"
    lock.write_text("")
    old = time.time() - fused_cpu.STALE_LOCK_S - 60
    os.utime(lock, (old, old))
    seen = []
    monkeypatch.setattr(cpp_extension, "_get_build_directory", lambda *a, **k: str(tmp_path))
    monkeypatch.setattr(fused_cpu, "compiler_identity", lambda compiler: "/usr/bin/c++ (fake)")

    def load(**kwargs):
        seen.append(lock.exists())
        raise RuntimeError("stop here")

    monkeypatch.setattr(cpp_extension, "load", load)
    try:
        assert isinstance(fused_cpu._build(), RuntimeError)
        assert seen == [False]  # torch would have waited on it forever
        fused_cpu._build.cache_clear()
        lock.write_text("")  # a live build's (fresh) lock is left to torch
        assert isinstance(fused_cpu._build(), RuntimeError) and seen == [False, True]
    finally:
        monkeypatch.undo()
        fused_cpu._build.cache_clear()
        fused_cpu._warn_once.cache_clear()


# ---- one build per environment, always announced, built at set-up ------------------------------


def test_two_environments_get_two_builds_and_one_environment_one(monkeypatch, tmp_path):
    """Keyed by the source alone, a venv and a system install (say) rebuilt the kernel for
    each other on every switch: the name follows torch, the Python ABI, the compiler, the
    flags and the platform."""
    import sys
    import types

    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    here = fused_cpu.build_key(b"source", "/usr/bin/g++ (g++ 12.2)")
    name = fused_cpu.build_name(here)
    assert name == fused_cpu.build_name(fused_cpu.build_key(b"source", "/usr/bin/g++ (g++ 12.2)"))
    others = {
        "source": fused_cpu.build_key(b"edited", "/usr/bin/g++ (g++ 12.2)"),
        "compiler": fused_cpu.build_key(b"source", "/usr/bin/clang++ (clang 17)"),
        "ninja": fused_cpu.build_key(
            b"source", "/usr/bin/g++ (g++ 12.2)", "/usr/bin/ninja (1.11.1)"
        ),
        "venv ninja": fused_cpu.build_key(
            b"source", "/usr/bin/g++ (g++ 12.2)", "/venv/bin/ninja (1.13.2)"
        ),
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "__version__", torch.__version__ + "-other+cu121")
        others["torch"] = fused_cpu.build_key(b"source", "/usr/bin/g++ (g++ 12.2)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "__file__", str(tmp_path / "venv" / "torch" / "__init__.py"))
        others["torch install"] = fused_cpu.build_key(b"source", "/usr/bin/g++ (g++ 12.2)")
    with pytest.MonkeyPatch.context() as mp:
        other_python = types.SimpleNamespace(**vars(sys.implementation))
        other_python.cache_tag = "cpython-399"
        mp.setattr(sys, "implementation", other_python)
        others["python"] = fused_cpu.build_key(b"source", "/usr/bin/g++ (g++ 12.2)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fused_cpu, "CFLAGS", (*fused_cpu.CFLAGS, "-march=native"))
        others["flags"] = fused_cpu.build_key(b"source", "/usr/bin/g++ (g++ 12.2)")
    names = {what: fused_cpu.build_name(key) for what, key in others.items()}
    assert name not in names.values() and len(set(names.values())) == len(names), names
    dirs = {cpp_extension._get_build_directory(n, verbose=False) for n in [name, *names.values()]}
    assert len(dirs) == len(names) + 1  # each its own build directory


def _fake_builds(monkeypatch, tmp_path) -> list[bool]:
    """``cpp_extension.load`` as torch's build without a compiler: the library file written
    (a new file) when it or ninja's log is absent or when ``rebuild[0]``, into
    ``TORCH_EXTENSIONS_DIR=tmp_path``."""
    import os
    import types

    from torch.utils import cpp_extension

    _fresh_build(monkeypatch)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(fused_cpu, "_self_test", lambda ext: None)
    monkeypatch.setattr(fused_cpu, "compiler_identity", lambda compiler: "/usr/bin/c++ (fake)")
    rebuild = [False]

    def load(name, **kwargs):
        build_dir = cpp_extension._get_build_directory(name, verbose=False)
        library, log = (os.path.join(build_dir, f) for f in (f"{name}.so", ".ninja_log"))
        if rebuild[0] or not os.path.exists(library) or not os.path.exists(log):  # as ninja
            with open(library + ".new", "w") as fh:
                fh.write(name)
            os.replace(library + ".new", library)
            with open(log, "w") as fh:
                fh.write("# ninja log v7\n")
        return types.SimpleNamespace(__file__=library)

    monkeypatch.setattr(cpp_extension, "load", load)
    return rebuild


def test_every_build_is_announced(monkeypatch, tmp_path, capsys):
    rebuild = _fake_builds(monkeypatch, tmp_path)

    def build() -> str:
        fused_cpu._build.cache_clear()
        assert not isinstance(fused_cpu._build(), Exception)
        return capsys.readouterr().err

    try:
        first = build()
        assert "compiling the fused CPU FAVOR kernel" in first and str(tmp_path) in first
        assert build() == ""  # built: loaded, nothing said
        (library,) = tmp_path.rglob("*.so")
        (library.parent / ".ninja_log").unlink()  # ninja will rebuild it: said before
        assert "compiling" in build()
        rebuild[0] = True  # torch rebuilds for a reason not foreseen: said after
        assert "recompiled the fused CPU FAVOR kernel" in build()
        rebuild[0] = False
        with pytest.MonkeyPatch.context() as mp:  # another environment: its own build, said
            mp.setattr(torch, "__version__", torch.__version__ + "-other")
            assert "compiling" in build()
        assert len(list(tmp_path.rglob("*.so"))) == 2
        assert build() == ""  # and the first one's is still there
        with pytest.MonkeyPatch.context() as mp:  # another ninja on PATH: its own build too
            mp.setattr(
                fused_cpu, "compiler_identity",
                lambda tool: "/venv/bin/ninja (1.13.2)" if tool == "ninja" else "/usr/bin/c++ (fake)",
            )  # fmt: skip
            assert "compiling" in build()
        assert len(list(tmp_path.rglob("*.so"))) == 3 and build() == ""
    finally:
        monkeypatch.undo()
        fused_cpu._build.cache_clear()
        fused_cpu._warn_once.cache_clear()


def test_the_set_up_command_says_what_it_did_and_fails_only_where_on(monkeypatch, tmp_path, capsys):
    _fake_builds(monkeypatch, tmp_path)
    try:
        assert fused_cpu.main(["--build"]) == 0
        assert "compiled" in capsys.readouterr().out
        fused_cpu._build.cache_clear()
        monkeypatch.setattr(fused_cpu, "_compiled", False)
        assert fused_cpu.main(["--build"]) == 0
        assert "already built" in capsys.readouterr().out
        monkeypatch.setattr(fused_cpu, "_build", lambda: RuntimeError("error: no Python.h"))
        assert fused_cpu.main(["--build"]) == 0  # auto: set-up goes on, on the PyTorch kernel
        assert "did not build (RuntimeError: error: no Python.h)" in capsys.readouterr().out
        monkeypatch.setenv(fused_cpu.ENV, "on")
        assert fused_cpu.main(["--build"]) == 1
        assert "PP_FUSED_KERNEL=on" in capsys.readouterr().err
        monkeypatch.setenv(fused_cpu.ENV, "off")
        assert fused_cpu.main(["--build"]) == 0
        assert "PP_FUSED_KERNEL=off" in capsys.readouterr().out
    finally:
        monkeypatch.undo()
        fused_cpu._build.cache_clear()
        fused_cpu._warn_once.cache_clear()


def test_training_builds_the_kernel_before_its_first_step(monkeypatch):
    """``on_fit_start``: the ~30 s compile is not inside the first timed step; only a model
    whose FAVOR can take the kernel asks for it."""
    import types

    from protein_performer.attention.favor import prepare_fused_kernel
    from protein_performer.model.config import ModelConfig
    from protein_performer.model.performer import ProteinLM
    from protein_performer.training.lm_module import ProteinLMModule

    asked = []
    monkeypatch.setattr(fused_cpu, "kernel", lambda: asked.append(True))
    config = ModelConfig(attention="performer_relu", dim=32, depth=1, heads=4, ffn_dim=64)
    module = ProteinLMModule(config)
    module.trainer = types.SimpleNamespace(datamodule=None)
    module.on_fit_start()
    assert asked == [True]
    for model in (
        ProteinLM(config, 25, 0, causal=True),
        ProteinLM(ModelConfig(attention="transformer", dim=32, depth=1, heads=4), 25, 0),
    ):
        assert not prepare_fused_kernel(model)
    assert asked == [True]


@pytest.mark.parametrize("field", ["soabi", "python_include", "platform", "source_path"])
def test_each_part_of_the_environment_alone_changes_the_build_name(monkeypatch, tmp_path, field):
    """Two Pythons of one cache tag but another ABI (a debug or free-threaded build), other
    headers, another machine, another checkout: each its own build."""
    import platform
    import sysconfig

    compiler = "/usr/bin/g++ (g++ 12.2)"
    here = fused_cpu.build_key(b"source", compiler)
    if field == "soabi":
        real = sysconfig.get_config_var
        monkeypatch.setattr(
            sysconfig,
            "get_config_var",
            lambda name: "cpython-311d-x86_64-linux-gnu" if name == "SOABI" else real(name),
        )
    elif field == "python_include":
        paths = {**sysconfig.get_paths(), "include": str(tmp_path / "include")}
        monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: paths)
    elif field == "platform":
        monkeypatch.setattr(platform, "machine", lambda: "riscv64-test")
    else:
        monkeypatch.setattr(fused_cpu, "SOURCE", tmp_path / "other" / "favor_cpu.cpp")
    there = fused_cpu.build_key(b"source", compiler)
    assert field in [k for k in here if here[k] != there[k]]
    assert fused_cpu.build_name(there) != fused_cpu.build_name(here)
