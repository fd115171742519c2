"""Where a stage runs: the ``--device`` words, whether a GPU driver is installed, the torch
device a word names, and the cores this process may use.

Why apart from the option syntax (:mod:`estratos.options`): these answer questions about the
machine, not about what a user typed. Standard library only, except :func:`resolve_device`,
which imports torch when called: the CLI checks ``--device`` before torch loads.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

from estratos.errors import OptionError

#: ``--device`` words besides ``cuda:N``
DEVICE_WORDS = ("auto", "cpu", "cuda", "mps")
#: the device types each stage runs on: encode's forward pass runs on Apple's MPS too; the
#: probes do not (training and scoring use float64, which MPS lacks)
ENCODE_DEVICES = ("cpu", "cuda", "mps")
PROBE_DEVICES = ("cpu", "cuda")


#: files that exist where a GPU driver torch can use as ``cuda`` is installed (NVIDIA, the
#: WSL2 GPU bridge, AMD ROCm)
_GPU_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def gpu_driver_present() -> bool:
    """Whether this machine may have a CUDA device, known without importing torch: a GPU
    driver's file, or ``nvidia-smi`` on the PATH (True off Linux, where this cannot tell)."""
    import shutil
    import sys

    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(p) for p in _GPU_DRIVER_FILES) or bool(shutil.which("nvidia-smi"))


def default_jobs(device: Optional[str]) -> int:
    """``--jobs`` when not given: 1, or every usable core under ``--device auto`` on a
    machine with a GPU driver, where the probe trains on the GPU and the cores at once (the
    GPU's process is one of them)."""
    if (device or "auto") == "auto" and gpu_driver_present():
        return available_cores()
    return 1


def device_help(kinds: Sequence[str] = ENCODE_DEVICES) -> str:
    """The ``--device`` values a stage running on ``kinds`` takes, for help and errors."""
    words = ["auto", *kinds]
    words.insert(words.index("cuda") + 1, "cuda:N")
    return ", ".join(words)


def check_device(text: Optional[str], option: str = "--device",
                 kinds: Sequence[str] = ENCODE_DEVICES, *, driver: bool = True) -> str:
    """The syntax of ``--device`` for a stage that runs on ``kinds`` (``auto``, a kind, or
    ``cuda:N``), lower-cased, without importing torch; CUDA where no GPU driver is installed
    (:func:`gpu_driver_present`; ``driver=False``: not looked for) is refused at once, since
    torch takes seconds to load and say so; whether the device exists is
    :func:`resolve_device`'s check."""
    value = "auto" if text is None else str(text).strip().lower()
    kind, colon, index = value.partition(":")
    if (kind not in DEVICE_WORDS or (colon and (kind != "cuda" or not index.isdigit()))
            or (kind != "auto" and kind not in kinds)):
        raise OptionError(f"{option}: {text!r} is not a device here (use {device_help(kinds)})")
    if driver and kind == "cuda" and not gpu_driver_present():  # known without torch
        raise OptionError(f"{option}: {text!r} asks for a GPU but CUDA is not available on "
                          "this machine (no GPU driver: no NVIDIA driver, nvidia-smi or "
                          "ROCm; use cpu or auto)")
    return value


def resolve_device(text: Any, option: str = "--device",
                   kinds: Sequence[str] = ENCODE_DEVICES) -> Any:
    """The ``torch.device`` that ``--device`` names on this machine: ``auto`` is CUDA when
    present, else the CPU. Asking for CUDA or MPS where there is none, or a GPU index the
    machine lacks, is an :class:`OptionError` naming the option. The one device rule of
    encode and probe (``kinds``: :data:`ENCODE_DEVICES`, :data:`PROBE_DEVICES`); imports
    torch."""
    import torch

    value = check_device(str(text) if isinstance(text, torch.device) else text, option, kinds,
                         driver=False)  # torch itself says whether CUDA is there
    if value == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, _, index = value.partition(":")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise OptionError(f"{option}: {text!r} asks for a GPU but CUDA is not available "
                              "on this machine (use cpu or auto)")
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            raise OptionError(f"{option}: {text!r}: this machine has {count} CUDA device(s) "
                              f"(cuda:0..cuda:{count - 1})")
    elif kind == "mps" and not (hasattr(torch.backends, "mps")
                                and torch.backends.mps.is_available()):
        raise OptionError(f"{option}: {text!r} asks for Apple's MPS but it is not available "
                          "on this machine (use cpu or auto)")
    return torch.device(value)


def available_cores() -> int:
    """CPU cores this process may use (affinity-aware: taskset, cgroups, SLURM)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


__all__ = ["DEVICE_WORDS", "ENCODE_DEVICES", "PROBE_DEVICES", "available_cores", "check_device",
           "default_jobs", "device_help", "gpu_driver_present", "resolve_device"]
