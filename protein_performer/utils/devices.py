"""The device a command runs on (``device=auto|cpu|cuda``) and how much memory it has."""

from __future__ import annotations

import contextlib
import os
import re
import time
from typing import Any

import torch

from protein_performer.errors import ConfigError


def is_rank_zero() -> bool:
    """Global rank 0 (or no distributed launcher): the process that owns the run directory
    and says what is said once."""
    for var in ("RANK", "SLURM_PROCID"):
        if os.environ.get(var, "0") != "0":
            return False
    return os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says, else all)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def busy_cpus(seconds: float = 0.5) -> float | None:
    """How many CPUs other work keeps busy now: the machine's non-idle share over ``seconds``
    (``/proc/stat``), times its CPUs; else the 1-minute load average (which lags: a run that
    just ended still counts); None where neither can be read."""

    def sample() -> list[int]:
        with open("/proc/stat") as fh:
            return [int(x) for x in fh.readline().split()[1:]]

    try:
        first = sample()
        time.sleep(seconds)
        delta = [b - a for a, b in zip(first, sample(), strict=False)]
        total = sum(delta[:8])  # user nice system idle iowait irq softirq steal (guests in user)
        if total > 0:
            return (1.0 - (delta[3] + delta[4]) / total) * (os.cpu_count() or 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows
        return None


def choose_threads(setting: int | None = None) -> tuple[int, str | None]:
    """torch's CPU threads for a run, and why when not every CPU: ``setting`` when given, else
    ``OMP_NUM_THREADS`` when set, else the CPUs other work is not using (:func:`busy_cpus`,
    rounded, taken off :func:`usable_cpus`; at least one). Threads that wait on a busy core
    make every step wait: on a shared 2-core machine one thread trained 8x faster."""
    cpus = usable_cpus()
    if setting:
        return int(setting), None
    if os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"])), "OMP_NUM_THREADS"
    load = busy_cpus()
    if load is None:
        return cpus, None
    busy = min(cpus - 1, int(load + 0.5))
    if busy <= 0:
        return cpus, None
    return cpus - busy, f"of {cpus} CPUs: the machine is busy, {load:.1f} CPUs in use"


#: What ``device=`` accepts (checked before any work by the configs).
DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")


def pick_device(name: str | torch.device) -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N`` (an error when there is
    no such device); a ``torch.device`` of those kinds is taken as it is."""
    text = str(name)
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not DEVICE_NAME.fullmatch(text):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N (got {text!r})")
    kind, _, index = text.partition(":")
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device={text} but no CUDA device is available; use device=cpu")
        if index and int(index) >= count:
            raise ConfigError(f"device={text} but this machine has {count} CUDA device(s)")
    return torch.device(text)


def bf16_native() -> bool:
    """The CUDA GPU computes in bf16 natively (Ampere and later; older ones emulate it)."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch without the argument
        return bool(torch.cuda.is_bf16_supported())


def inference_autocast(device: torch.device) -> Any:
    """The precision a forward pass runs in on ``device``: what ``precision=auto`` trains
    with there (bf16 autocast on GPUs that compute in bf16, fp16 on older ones, fp32 on CPU)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.bfloat16 if bf16_native() else torch.float16)


def size_text(n: float) -> str:
    """``1.6 GB``, ``12.0 MB``, ``512 B``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def memory_available() -> tuple[int, int] | None:
    """``(available, total)`` bytes of RAM from /proc/meminfo (Linux), else None."""
    try:
        info = {}
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
        return info["MemAvailable"], info["MemTotal"]
    except (OSError, KeyError, ValueError, IndexError):
        if hasattr(os, "sysconf"):
            try:
                total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                return total, total
            except (ValueError, OSError):
                return None
        return None


def check_dense_fits(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, what: str, instead: str
) -> None:
    """Refuse to build a dense tensor of ``shape`` larger than the memory ``device`` has free
    (an attention matrix grows as L²: at L = 100,000 one head is 40 GB), before any of it is
    computed, with what to use ``instead``."""
    nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if device.type == "cuda":
        # what the caching allocator holds but does not use is free to this process too
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        free = torch.cuda.mem_get_info(device)[0] + cached
    else:
        mem = memory_available()
        if mem is None:
            return
        free = mem[0]
    if nbytes > free:
        dims = " × ".join(f"{d:,}" for d in shape)
        raise ConfigError(
            f"{what} ({dims}) needs {size_text(nbytes)}, more than the {size_text(free)} of "
            f"memory free; {instead}"
        )
