"""Where the encoder runs and in which precision.

CUDA runs under autocast (bfloat16 where the GPU supports it, else float16): the pooled
vectors are stored in float16 anyway, and autocast keeps LayerNorm/softmax in float32. On CPU
the model stays float32 (CPU half precision is slow and inexact) and torch uses every core
this process may run on, unless told otherwise (``threads``, or ``OMP_NUM_THREADS`` in the
environment: on a busy shared machine, fewer threads than cores avoids OpenMP threads spinning
against each other, which can make small models many times slower).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import ContextManager, Optional

import torch

from estratos.errors import OptionError

log = logging.getLogger(__name__)


def usable_cores() -> int:
    """Cores this process may run on (respects taskset / cgroup affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def select_device(requested: Optional[str] = None) -> torch.device:
    """``None``/``"auto"``: CUDA if available, else CPU. Otherwise the named device, checked."""
    if requested in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except (RuntimeError, ValueError) as exc:
        raise OptionError(f"--device: unknown device {requested!r} ({exc})") from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise OptionError(f"--device: {requested!r} asked for but CUDA is not available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise OptionError(f"--device: {requested!r}: only {torch.cuda.device_count()} GPU(s)")
    elif device.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise OptionError(f"--device: {requested!r} asked for but MPS is not available")
    elif device.type != "cpu":
        raise OptionError(f"--device: unsupported device type {device.type!r} (cpu, cuda, mps)")
    return device


def autocast_dtype(device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype for ``device`` (None: run in float32)."""
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def autocast(device: torch.device) -> ContextManager:
    """Autocast context for the forward pass on ``device`` (a no-op off CUDA)."""
    dtype = autocast_dtype(device)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype)


def compute_label(device: torch.device) -> str:
    """How vectors were computed, recorded in the cache (e.g. ``cpu/float32``)."""
    dtype = autocast_dtype(device)
    return f"{device.type}/{'float32' if dtype is None else str(dtype).replace('torch.', '')}"


def cpu_threads(threads: Optional[int] = None) -> int:
    """Threads to use: ``threads``, else ``OMP_NUM_THREADS`` when set, else all usable cores."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise OptionError(f"--threads: must be a positive integer, got {threads!r}")
        return threads
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) >= 1:
        return int(env)
    return usable_cores()


def prepare_cpu_threads(device: torch.device, threads: Optional[int] = None) -> None:
    """On CPU, set torch's thread count (:func:`cpu_threads`; some launchers default to fewer)."""
    if device.type == "cpu":
        n = cpu_threads(threads)
        if torch.get_num_threads() != n:
            log.info("using %d CPU threads", n)
            torch.set_num_threads(n)
