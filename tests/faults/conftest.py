"""The fault campaign's shared pieces: the ``faults`` marker, a figures recorder, and a
fork server that runs encode/probe in child processes we can SIGKILL cheaply.

Why a fork server: starting a fresh Python that imports torch and transformers takes seconds
on a loaded 2-core machine, and the campaign kills dozens of runs. The server imports them
once; every run is a fork of it (no torch operation ever ran in the server, so forking is safe).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the fork server unpickles run targets from _forkrun
    sys.path.insert(0, str(HERE))

#: where bench/fault_figures.py asks the session to write the campaign's figures
FIGURES_ENV = "ESTRATOS_FAULT_FIGURES"
FIGURE_NAMES = ("crash_points_tried", "crash_points_survived", "rows_lost",
                "corruptions_injected", "corruptions_detected", "fuzz_cases", "fuzz_escaped",
                "concurrency_scenarios", "concurrency_passed")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.faults)


class Figures:
    """Counts that docs/reliability.md publishes; a test counts an attempt before asserting
    and a success after, so a failing check shows up as a gap between the two."""

    def __init__(self) -> None:
        self.counts = {name: 0 for name in FIGURE_NAMES}
        self.details: list = []

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def note(self, **detail) -> None:
        self.details.append(detail)


_FIGURES = Figures()


@pytest.fixture(scope="session")
def figures() -> Figures:
    return _FIGURES


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get(FIGURES_ENV)
    if target:
        Path(target).write_text(json.dumps({"counts": _FIGURES.counts,
                                            "details": _FIGURES.details}, indent=1))


@pytest.fixture(scope="session")
def forkserver():
    """A multiprocessing context whose children start with torch/transformers imported."""
    old = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["_forkrun"])
    try:
        # start the server now, with the offline variables in its environment
        p = ctx.Process(target=_noop_target())
        p.start()
        p.join()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return ctx


def _noop_target():
    import _forkrun

    return _forkrun.noop


@pytest.fixture(scope="session")
def probe_grid(tmp_path_factory, forkserver):
    """A cache, two custom tasks, an uninterrupted run's results and how long it took."""
    import time

    import _forkrun
    import probekit

    root = tmp_path_factory.mktemp("probe-grid")
    cache, files, _ = probekit.build(root)
    ref = root / "reference.jsonl"
    t0 = time.monotonic()
    proc = forkserver.Process(target=_forkrun.probe_files,
                              args=(str(cache), [str(f) for f in files], str(ref),
                                    probekit.PROBE_KWARGS))
    proc.start()
    proc.join(300)
    assert proc.exitcode == 0
    return cache, [str(f) for f in files], ref, time.monotonic() - t0
