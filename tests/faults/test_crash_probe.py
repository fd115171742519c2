"""SIGKILL ``probe`` mid-grid (after k result lines, after seeded random delays, or at the
named points of a predictions write); rerun; the results file may end in a cut line only,
every whole line has its predictions; after the rerun it has no duplicated or torn line,
equals an uninterrupted run's, and every line's predictions reproduce its score."""

from __future__ import annotations

import os
import random
import signal
import time

import _forkrun
import probekit
import pytest
from crashkit import run_child

from estratos.probe.command import probe_tasks
from estratos.probe.config import ProbeConfig
from estratos.results import read_results
from estratos.results.predictions import PredictionsReader, check_metric, predictions_dir

#: (--jobs, kill once the file holds this many lines): one process appends each task's 15
#: cells at once (one unit: 5 layer specs x 3 seeds); two processes run smaller units
AFTER_LINES = [(1, 1), (2, 1), (2, 6), (2, 12), (2, 20)]
#: named points of a predictions write (each task is one write: its test set's file, then its
#: cells file): the first task's cells file not yet renamed; the second task's test set not
#: yet renamed (the first task's lines are written); each task's files stored, lines not yet
PREDICTION_POINTS = ["predictions-file:2", "predictions-file:3", "predictions-stored:1",
                     "predictions-stored:2"]
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


def _every_line_has_its_predictions(out) -> int:
    """Each whole results line finds predictions that reproduce its score; returns the count."""
    reader = PredictionsReader()
    records = read_results(out)
    for record in records:
        found = reader.find(record, out)
        assert found.problem is None, f"{record.key}: {found.problem}"
        assert abs(check_metric(record, found.preds) - record.score) < 0.011, record.key
    return len(records)


def _resume_and_compare(figures, cache, files, ref, out):
    if out.exists():
        assert _torn_only_at_the_end(out), "a line before the last is torn"
        read_results(out)  # every whole line parses; a cut last one is skipped
        _every_line_has_its_predictions(out)
    probe_tasks(cache, "", out, ProbeConfig.build(**probekit.PROBE_KWARGS), task_files=files)
    assert _whole_lines(out)
    assert _every_line_has_its_predictions(out) == probekit.n_cells()
    assert not [p.name for p in predictions_dir(out).iterdir() if p.name.endswith(".tmp")]
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


@pytest.mark.parametrize("fault", PREDICTION_POINTS)
def test_kill_while_storing_predictions_then_rerun(fault, probe_grid, tmp_path, forkserver,
                                                   figures):
    """A kill inside a predictions write loses no earlier cell and leaves no line without
    its predictions; the rerun removes the killed write's temporary file."""
    cache, files, ref, _ = probe_grid
    out = tmp_path / "r.jsonl"
    figures.add("crash_points_tried")
    code = run_child(forkserver, _forkrun.probe_files_at,
                     (fault, str(cache), files, str(out), probekit.PROBE_KWARGS))
    assert code == -9, f"{fault}: the point was never reached (exit {code})"
    lines = probekit.count_lines(out)
    # a store writes one seed's cells of one task (every layer spec); the kill falls in the
    # first store or in the second, after the first one's lines
    assert lines == (0 if fault in ("predictions-file:2", "predictions-stored:1")
                     else probekit.N_STATES + 1)
    figures.note(kind="probe-kill", point=fault, lines=lines)
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
    probe_tasks(cache, "", out, ProbeConfig.build(**probekit.PROBE_KWARGS),
                task_files=files[:1])
    data = out.read_bytes()
    last = data[:-1].rfind(b"\n") + 1
    out.write_bytes(data[: last + (len(data) - last) // 2])  # tear the last line in half
    assert len(read_results(out)) == len(data.splitlines()) - 1
    _resume_and_compare(figures, cache, files, ref, out)
