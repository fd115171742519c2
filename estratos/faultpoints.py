"""Named crash points for the fault campaign (tests/faults); inert unless ``ESTRATOS_FAULT`` is set.

Why: a SIGKILL sent after a random delay rarely lands inside the few microseconds that matter
(between a flush and the ``n_done`` update, between marking a cache complete and renaming
it). With ``ESTRATOS_FAULT=POINT[:N]`` the process kills itself with SIGKILL the N-th time
(default: first) it reaches ``fault_point("POINT")``, so every such window is tested on
purpose. Points are listed in docs/reliability.md. Unset (always, outside tests) it costs one
environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "ESTRATOS_FAULT"
_reached: dict = {}  # per-process count of each point reached (only used when ENV is set)


def fault_point(name: str) -> None:
    """SIGKILL this process if ``ESTRATOS_FAULT`` names ``name`` and its count is reached."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
