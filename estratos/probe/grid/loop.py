"""The one loop every grid runs: what is done, what is left, and who runs it.

Why apart from the probe runner: the probes (:mod:`estratos.probe.grid.runner`, cells from a
cache) and the surface baselines (:mod:`estratos.probe.grid.baselines`, cells from text) are
grids of the same shape, ``task x column x seed`` (a column is a layer spec for a probe, a
baseline's name for the baselines), stored in the same results files. Both must skip the same
way what is done, cut the rest into the same work units, share a grid between shards the
same way, run on the same pool of processes with the same progress, and say the same thing on
Ctrl-C. This module is that loop, once; a kind of grid says only what differs
(:class:`Grid`): how a cell is keyed, which runner a process builds, what a cell costs and
how units are cut.

How a run goes once its cells to do are known (:meth:`Grid.pending`):

1. ``jobs`` processes start (:mod:`estratos.probe.grid.pool`) and each builds the grid's
   runner; the tasks with cells to do (every task when sharded: a shard must know the whole
   grid's costs) are *surveyed* in parallel: their data loaded, their sizes measured;
2. with ``shard`` only that shard's cells are kept (:func:`estratos.probe.grid.plan.
   shard_cells`), and the cells are cut into work units, longest first;
3. each process takes the next unit as soon as it is free; a unit appends its cells to the
   results file as they are final, which makes a killed run resumable at any point.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from estratos import errors as _errors
from estratos.devices import available_cores
from estratos.errors import DiskFull, EstratosError
from estratos.probe.grid.outcome import ProbeRun, UnitStat
from estratos.probe.grid.plan import TaskShape, WorkUnit, plan_units, shard_cells
from estratos.probe.grid.pool import Event, make_executor
from estratos.probe.grid.progress import GridProgress
from estratos.results import CellKey, ResultRecord
from estratos.results.reader import done_keys
from estratos.vocab import LayerSpec

log = logging.getLogger(__name__)

#: a grid's second axis: a layer spec for a probe (a hidden state's index or ``avg``), a
#: baseline's name for the surface baselines
Column = LayerSpec
#: task -> seed -> the columns still to do
Pending = Dict[str, Dict[int, List[Column]]]
#: (task, the error as raised) of each unit that failed
Failures = List[Tuple[str, EstratosError]]


class Grid:
    """What a kind of grid tells the loop (:func:`execute`, :func:`collect`); a subclass
    passes its facts to ``__init__`` and overrides the methods whose default does not fit.

    ``label`` names the grid in progress lines and messages (its command); ``out`` is where
    its results go (the shard's own file when sharded); ``ids``, ``columns`` and ``seeds``
    are its axes, in the order results are returned; ``done`` holds the identities of the
    cells already stored (empty with ``--overwrite``); ``jobs`` and ``threads`` say how many
    processes, and threads each, run it; ``shard`` is ``(I, N)`` or None; ``preload``:
    modules each worker imports as soon as it is spawned."""

    def __init__(self, *, label: str, out: Path, ids: Sequence[str],
                 columns: Sequence[Column], seeds: Sequence[int], done: Set[CellKey],
                 jobs: int = 1, threads: int = 1, shard: Optional[Tuple[int, int]] = None,
                 preload: Sequence[str] = ()) -> None:
        self.label = label
        self.out = Path(out)
        self.ids = tuple(ids)
        self.columns = tuple(columns)
        self.seeds = tuple(seeds)
        self.done = done
        self.jobs = jobs
        self.threads = threads
        self.shard = shard
        self.preload = tuple(preload)

    def key(self, task: str, column: Column, seed: int) -> CellKey:
        """The identity of one cell of this grid (what a results line's ``key`` is)."""
        raise NotImplementedError

    def column_of(self, record: ResultRecord) -> Column:
        """The column a record of this grid belongs to (for the order of the results)."""
        raise NotImplementedError

    @property
    def grid_cells(self) -> int:
        return len(self.ids) * len(self.columns) * len(self.seeds)

    def pending(self, owned: Optional[Set[Tuple[str, Column, int]]] = None) -> Pending:
        """task -> seed -> the columns not in :attr:`done` (and in ``owned``, when sharded),
        in grid order; tasks with nothing to do are left out."""
        return pending_cells(self.ids, self.columns, self.seeds, self.key, self.done, owned)

    def runner(self, stats: "RunStats") -> Tuple[Callable[[Any], Any], Any]:
        """``(factory, context)``: what every process builds its runner from (a context
        manager with ``survey(task) -> TaskShape`` and ``run(unit, report) -> seconds``,
        :mod:`estratos.probe.grid.pool`). Called once the workers are spawning, so slow
        set-up here overlaps their imports; it may note the run's device in ``stats``."""
        raise NotImplementedError

    def check(self, shapes: Mapping[str, TaskShape], surveyed: Sequence[str]) -> None:
        """Stop before any training when the surveys found a problem (default: none)."""

    def costs(self, shapes: Mapping[str, TaskShape], surveyed: Sequence[str]
              ) -> Dict[str, float]:
        """task -> the estimated cost of one of its cells (arbitrary units: they order and
        balance work, and share a grid between shards)."""
        raise NotImplementedError

    def units(self, pending: Pending, shapes: Mapping[str, TaskShape],
              cost: Mapping[str, float], processes: int) -> List[WorkUnit]:
        """The work units of ``pending`` for ``processes`` processes (default: one program
        per seed, :func:`estratos.probe.grid.plan.plan_units`)."""
        return plan_units(pending, cost, processes, seeds_apart=True)


def pending_cells(ids: Sequence[str], columns: Sequence[Column], seeds: Sequence[int],
                  key: Callable[[str, Any, int], CellKey], done: Set[CellKey],
                  owned: Optional[Set[Tuple[str, Any, int]]] = None) -> Pending:
    """task -> seed -> the columns whose cell (``key(task, column, seed)``) is not in
    ``done`` (and is in ``owned``, when sharded), in grid order; tasks with nothing to do
    are left out. The one rule for what a run still has to do."""
    out: Pending = {}
    for task in ids:
        by_seed = {seed: [column for column in columns
                          if key(task, column, seed) not in done
                          and (owned is None or (task, column, seed) in owned)]
                   for seed in seeds}
        if any(by_seed.values()):
            out[task] = by_seed
    return out


@dataclass
class RunStats:
    """What :func:`execute` learnt while running: the device, the processes, the cells it
    planned and the size of the grid (this shard's, when sharded)."""

    device: str
    processes: int
    todo: int
    grid_cells: int


@dataclass
class Executed:
    """What :func:`execute` returns: the records written, each unit's statistics, the
    failed units (raised by :func:`collect`) and how the run went."""

    records: List[ResultRecord]
    stats: List[UnitStat]
    failures: Failures
    ran: RunStats


def execute(grid: Grid, progress: Optional[bool]) -> Executed:
    """Survey the tasks, plan the units and run them on the grid's processes (see the
    module docstring). ``progress``: a bar on stderr (None: when stderr is a terminal, and
    periodic lines when it is not). Ctrl-C stops every process and raises
    :class:`estratos.errors.Interrupted` saying how many cells were kept."""
    pending = grid.pending()
    # a shard must know the whole grid's costs; an unsharded run only its pending tasks'
    to_survey = list(grid.ids) if grid.shard is not None else list(pending)
    n_cells = sum(len(v) for by_seed in pending.values() for v in by_seed.values())
    processes = max(1, min(grid.jobs, n_cells))
    if grid.threads * processes > available_cores():
        log.warning("--jobs %d x --threads %d exceeds the %d available cores; expect "
                    "slow-downs", processes, grid.threads, available_cores())
    done = Executed([], [], [], RunStats(device="cpu", processes=processes, todo=n_cells,
                                         grid_cells=grid.grid_cells))
    ran = done.ran
    bar: Optional[GridProgress] = None
    try:
        # the workers start now and import their modules while this process sets up its
        # own runner: the imports overlap
        with make_executor(processes, preload=grid.preload) as executor:
            executor.start(*grid.runner(ran))
            shapes = _survey(executor, to_survey, grid.label)
            grid.check(shapes, to_survey)
            cost = grid.costs(shapes, to_survey)
            if grid.shard is not None:
                owned = shard_cells(grid.ids, grid.columns, grid.seeds, cost, grid.shard)
                pending = grid.pending(owned)
                ran.grid_cells = len(owned)
            units = grid.units(pending, shapes, cost, executor.processes)
            ran.todo = sum(u.n_cells for u in units)
            log.info("%d cell(s) in %d unit(s) on %d process(es)", ran.todo, len(units),
                     executor.processes)
            show = sys.stderr.isatty() if progress is None else bool(progress)
            bar = GridProgress(units, executor.processes, show,
                               lines=progress is None and not show, label=grid.label)
            done.failures = _run_units(executor, units, done.records, done.stats, bar)
            ran.processes = executor.processes
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        # the workers are stopped: what the file holds now is what was kept
        planned = {grid.key(t, column, s) for t, by_seed in pending.items()
                   for s, columns in by_seed.items() for column in columns}
        kept = len(planned & done_keys([grid.out]))
        raise interrupted(grid.out, kept, len(planned) - kept) from None
    finally:
        if bar is not None:
            bar.close()
    return done


def collect(grid: Grid, executed: Executed, seconds: float) -> ProbeRun:
    """The run's records in grid order (task, seed, column), or its first failure raised
    (:func:`raise_failures`)."""
    order = {t: i for i, t in enumerate(grid.ids)}
    column_order: Dict[Any, int] = {c: i for i, c in enumerate(grid.columns)}
    seed_order = {s: i for i, s in enumerate(grid.seeds)}
    records, ran = executed.records, executed.ran
    records.sort(key=lambda r: (order[r.task], seed_order[r.seed],
                                column_order.get(grid.column_of(r), len(column_order))))
    raise_failures(executed.failures)
    return ProbeRun(records, grid.out, seconds, ran.device, ran.processes,
                    ran.grid_cells - ran.todo, executed.stats)


def raise_failures(failures: Failures) -> None:
    """Raise the first failure as itself (its class and fields, as raised in the worker),
    its task named first; mention the others."""
    if not failures:
        return
    task, exc = failures[0]
    others = sorted({t for t, _ in failures[1:]})
    raise exc.in_context(task, f"(also failed: {', '.join(others)})" if others else "")


def _survey(executor: Any, task_ids: Sequence[str], label: str) -> Dict[str, TaskShape]:
    """Every task's :class:`TaskShape`; a task whose data cannot be loaded stops the run
    here, before any training."""
    shapes: Dict[str, TaskShape] = {}
    failures: Failures = []

    def on_event(kind: Event, key: Any, value: Any) -> None:
        if kind == Event.SURVEY:
            shapes[key] = value
        elif kind == Event.ERROR:
            failures.append((key, value))
        elif kind == Event.BUG:
            raise RuntimeError(f"{label} worker failed while reading {key}:\n{value}")

    executor.run([(Event.SURVEY, t, t) for t in task_ids], on_event)
    raise_failures(failures)
    return shapes


def _run_units(executor: Any, units: Sequence[WorkUnit], records: List[ResultRecord],
               stats: List[UnitStat], bar: GridProgress) -> Failures:
    """Run every unit, collecting records and statistics; returns the failures (task, the
    error as raised), raised by the caller once every other unit has ended."""
    by_index = {u.index: u for u in units}
    written: Dict[int, int] = {}
    failures: Failures = []

    def on_event(kind: Event, key: Any, value: Any) -> None:
        unit = by_index[key]
        if kind == Event.START:
            bar.started(unit)
        elif kind == Event.CELLS:
            records.extend(value)
            written[key] = written.get(key, 0) + len(value)
            bar.update(unit, len(value))
        elif kind == Event.DONE:
            stats.append(UnitStat(unit, float(value), written.get(key, 0)))
            bar.finished(unit, float(value))
        elif kind == Event.ERROR:
            if isinstance(value, DiskFull):  # every other unit would fail to store as well
                raise value.in_context(unit.task)
            log.error("%s: %s", unit.describe(), value)
            failures.append((unit.task, value))
        elif kind == Event.BUG:
            raise RuntimeError(f"{bar.label} worker failed on {unit.describe()}:\n{value}")

    # a unit placed on a device of its own (the GPU) runs in this process, which drives it
    executor.run([(Event.UNIT, u.index, u) for u in units], on_event,
                 pinned=lambda job: job[2].device is not None)
    return failures


def interrupted(out: Path, kept: int, left: int) -> EstratosError:
    """The Ctrl-C message: what was kept, and that the same command resumes."""
    return _errors.Interrupted(
        f"interrupted: {kept} new cell(s) of this run are kept in {out}, {left} still to do; "
        "run the same command again to resume (cells already in the results file are "
        "skipped)")


__all__ = ["Column", "Executed", "Grid", "Pending", "RunStats", "collect", "execute",
           "interrupted", "pending_cells", "raise_failures"]
