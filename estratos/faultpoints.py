"""Named fault points for the fault campaign (tests/faults); inert unless ``ESTRATOS_FAULT`` is set.

Why: a SIGKILL (or a Ctrl-C) sent after a random delay rarely lands inside the few
microseconds that matter (between a flush and the ``n_done`` update, between marking a cache
complete and renaming it), and lands somewhere else on a loaded machine. With
``ESTRATOS_FAULT=POINT[:N[:ACTION]]`` the process acts the N-th time (default: first) it
reaches ``fault_point("POINT")``, so every such window is tested on purpose: ACTION ``kill``
(the default) SIGKILLs the process, ``interrupt`` sends SIGINT to its process group, as a
terminal's Ctrl-C does (once per group: the first of its processes to get there). Points are
listed in docs/reliability.md. Unset (always, outside tests) it costs one environment lookup.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Dict

ENV = "ESTRATOS_FAULT"
_reached: Dict[str, int] = {}  # per-process count of each point reached (only when ENV is set)


def interrupt_marker(group: int) -> Path:
    """The file by which one process of ``group`` claims its ``interrupt`` (tests remove it)."""
    return Path(tempfile.gettempdir()) / f"estratos-fault-interrupt-{group}"


def fault_point(name: str) -> None:
    """Act as ``ESTRATOS_FAULT`` says if it names ``name`` and its count is reached."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    point, _, rest = spec.partition(":")
    if point != name:
        return
    nth, _, action = rest.partition(":")
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] < int(nth or 1):
        return
    if action == "interrupt":
        group = os.getpgrp()
        try:  # the group's first process here claims the marker; the others do nothing
            os.close(os.open(interrupt_marker(group), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                             0o600))
        except FileExistsError:
            return
        os.killpg(group, signal.SIGINT)
        return
    os.kill(os.getpid(), signal.SIGKILL)
