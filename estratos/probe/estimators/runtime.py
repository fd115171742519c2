"""Process-wide torch switches the probes set for their own work, and give back.

Why a context manager: torch's thread count and deterministic-algorithms flag are global to
the process; the probe sets them while it trains and restores them after (no hidden global
state for the caller).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional


def _set_deterministic(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode)`` without its side import of the inductor
    compiler (about 4 s per process, to set a flag for compiled code we never run)."""
    import torch

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:  # pragma: no cover - other torch versions
        torch.use_deterministic_algorithms(mode)
    else:
        setter(mode)


@contextlib.contextmanager
def torch_runtime(threads: Optional[int] = None) -> Iterator[None]:
    """Pin torch's intra-op threads and turn on deterministic algorithms, then restore both.

    Why a context manager: these are process-wide torch switches; the probe sets them for
    its own work and gives the process back as it found it (no hidden global state). Every op
    the probes run on CPU is deterministic for a fixed thread count; the switch guards
    against a future op that is not (torch then raises instead of silently varying).

    torch is imported here, not with the module: the probe runner imports this module while
    it checks options, before it starts its worker processes (they import torch meanwhile).
    """
    import torch

    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    try:
        if threads is not None:
            torch.set_num_threads(max(1, int(threads)))
        _set_deterministic(True)
        yield
    finally:
        _set_deterministic(old_det)
        torch.set_num_threads(old_threads)
