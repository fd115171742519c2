"""SIGKILL ``probe`` mid-grid (after k result lines, or after seeded random delays); rerun;
the results file may end in a cut line only; after the rerun it has no duplicated or torn line and equals an uninterrupted run's."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

import _forkrun
import probekit
from estratos.results import read_results
from estratos.probe.runner import probe_tasks

#: (--jobs, kill once the file holds this many lines): one process appends each task's 15
#: cells at once (one unit: 5 layer specs x 3 seeds); two processes run smaller units
AFTER_LINES = [(1, 1), (2, 1), (2, 6), (2, 12), (2, 20)]
#: and after seeded random delays, as fractions of an uninterrupted run's duration
RANDOM_KILLS = [round(random.Random(7 + i).uniform(0.05, 0.95), 3) for i in range(3)]


def _start(forkserver, cache, files, out, jobs=1):
    proc = forkserver.Process(target=_forkrun.probe_files,
                              args=(str(cache), files, str(out),
                                    dict(probekit.PROBE_KWARGS, jobs=jobs)))
    proc.start()
    return proc


def _whole_lines(out) -> bool:
    return all(line.endswith(b"\n") for line in out.read_bytes().splitlines(keepends=True))


def _torn_only_at_the_end(out) -> bool:
    """Only the last line may lack its newline: Linux stops a write at a page boundary when
    SIGKILL arrives, so a kill can cut the line being appended, never an earlier one."""
    return all(line.endswith(b"\n")
               for line in out.read_bytes().splitlines(keepends=True)[:-1])


def _resume_and_compare(figures, cache, files, ref, out):
    if out.exists():
        assert _torn_only_at_the_end(out), "a line before the last is torn"
        read_results(out)  # every whole line parses; a cut last one is skipped
    probe_tasks(cache, "", out, task_files=files, **probekit.PROBE_KWARGS)
    assert _whole_lines(out)
    got, want = probekit.outcome(out), probekit.outcome(ref)
    lost = len(set(want) - set(got))
    figures.add("rows_lost", lost)
    assert set(got) == set(want), "cells missing or extra after the rerun"
    assert got == want, "a resumed run gave other numbers than an uninterrupted one"
    figures.add("crash_points_survived")


@pytest.mark.parametrize("jobs,lines", AFTER_LINES)
def test_kill_after_k_result_lines_then_rerun(jobs, lines, probe_grid, tmp_path, forkserver,
                                              figures):
    """SIGKILL the run (with --jobs 2: its parent; the workers notice and exit), rerun."""
    cache, files, ref, _ = probe_grid
    out = tmp_path / "r.jsonl"
    figures.add("crash_points_tried")
    proc = _start(forkserver, cache, files, out, jobs)
    while proc.is_alive() and probekit.count_lines(out) < lines:
        time.sleep(0.005)
    if proc.is_alive():
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(60)
    assert proc.exitcode == -9, "the run ended before it could be killed"
    assert probekit.count_lines(out) < probekit.n_cells()
    figures.note(kind="probe-kill", point=f"after {lines} lines, --jobs {jobs}",
                 lines=probekit.count_lines(out))
    _resume_and_compare(figures, cache, files, ref, out)


@pytest.mark.parametrize("fraction", RANDOM_KILLS)
def test_kill_after_random_delay_then_rerun(fraction, probe_grid, tmp_path, forkserver, figures):
    cache, files, ref, seconds = probe_grid
    out = tmp_path / "r.jsonl"
    figures.add("crash_points_tried")
    proc = _start(forkserver, cache, files, out)
    proc.join(fraction * seconds)
    if proc.is_alive():
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(60)
    figures.note(kind="probe-kill", point=f"after {fraction * seconds:.2f}s",
                 killed=proc.exitcode == -9, lines=probekit.count_lines(out))
    _resume_and_compare(figures, cache, files, ref, out)


def test_a_line_torn_by_a_dying_writer_is_redone_once(probe_grid, tmp_path, figures):
    """A kill during a short write (network file systems) leaves half a line: the rerun
    drops it and redoes that cell, exactly once."""
    cache, files, ref, _ = probe_grid
    out = tmp_path / "r.jsonl"
    figures.add("crash_points_tried")
    probe_tasks(cache, "", out, task_files=files[:1], **probekit.PROBE_KWARGS)
    data = out.read_bytes()
    last = data[:-1].rfind(b"\n") + 1
    out.write_bytes(data[: last + (len(data) - last) // 2])  # tear the last line in half
    assert len(read_results(out)) == len(data.splitlines()) - 1
    _resume_and_compare(figures, cache, files, ref, out)
