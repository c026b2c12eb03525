"""The device a command runs on (``device=auto|cpu|cuda``) and how much memory it has."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
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
    if threads_for(cpus, load) == cpus:
        return cpus, None
    return threads_for(cpus, load), f"of {cpus} CPUs: the machine is busy, {load:.1f} CPUs in use"


def threads_for(cpus: int, others: float) -> int:
    """Threads that leave the CPUs ``others`` keep busy (rounded) to them: at least one, at most
    ``cpus``."""
    return cpus - max(0, min(cpus - 1, int(others + 0.5)))


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine since boot (``/proc/stat``'s first line:
    iowait counts as idle)."""
    with open("/proc/stat") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:9]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def _process_tree_jiffies(pid: int | None = None) -> int:
    """User + system clock ticks of this process and of its children, theirs and so on (data
    loading workers are ours, not other work)."""
    pid = os.getpid() if pid is None else pid
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or no children file: counted as far as read
    return total


class OtherWork:
    """How many CPUs processes other than this one (and its children) kept busy between two
    calls of :meth:`cpus`, without waiting (the first call only starts the count). The
    readers are arguments so that a test can feed them."""

    def __init__(
        self,
        machine: Callable[[], tuple[int, int]] = _machine_jiffies,
        own: Callable[[], int] = _process_tree_jiffies,
        ncpu: int | None = None,
    ) -> None:
        self._machine, self._own = machine, own
        self._ncpu = ncpu or os.cpu_count() or 1
        self._last: tuple[int, int, int] | None = None

    def cpus(self) -> float | None:
        """CPUs of other work since the last call; None on the first call, where nothing
        changed, or where ``/proc`` cannot be read."""
        try:
            busy, total = self._machine()
            own = self._own()
        except (OSError, ValueError, IndexError):
            return None
        last, self._last = self._last, (busy, total, own)
        if last is None or total <= last[1]:
            return None
        others = (busy - last[0]) - (own - last[2])
        return max(0.0, others / (total - last[1]) * self._ncpu)


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
