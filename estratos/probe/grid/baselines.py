"""``estratos baseline`` as a grid: every (task, baseline, seed) cell, from the text alone.

Why through the probes' loop (:mod:`estratos.probe.grid.loop`): a surface baseline is one
more system whose cells go in a results file, so what is already done, how the rest is cut
into work units and spread over ``--jobs`` processes or ``--shard`` nodes, the progress, a
Ctrl-C and a resume are decided by the same code as for a probe. Only what a cell is differs:
here the grid's columns are baseline names (:data:`estratos.probe.baseline.BASELINES`), a
process needs no cache (:class:`BaselineUnits` loads tasks and evaluates each cell with
:func:`estratos.probe.baseline.evaluate_cell`), and a cell's cost is estimated from its
task's sizes, classes and the whitespace tokens of its sentences (the nonzeros of its
sparse features, roughly), the same for every baseline of a task. Torch is never imported.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from estratos.errors import OptionError
from estratos.outputs import check_output_file
from estratos.probe.config import BaselineConfig
from estratos.probe.grid.loop import Grid, RunStats, collect, execute
from estratos.probe.grid.outcome import ProbeRun
from estratos.probe.grid.plan import TaskShape, WorkUnit, cell_cost, shard_path
from estratos.probe.grid.units import TASKS_KEPT, TaskLoader, default_loader, spec_state
from estratos.results import CellKey, ResultRecord
from estratos.results.provenance import check_done_cells
from estratos.results.reader import done_keys
from estratos.tasks.datadirs import DataDirs
from estratos.tasks.types import TaskSpec

log = logging.getLogger(__name__)

#: what every unit needs imported: each worker imports these as soon as it is spawned
BASELINE_PRELOAD = ("sklearn.linear_model", "estratos.probe.baseline", "estratos.protocols")


@dataclasses.dataclass(frozen=True)
class BaselineContext:
    """What every process of a baseline run needs (picklable: sent to each worker once):
    where results go, the tasks (id -> :func:`~estratos.probe.grid.units.spec_state`),
    where their data is and how it is loaded, and whether stored cells are redone."""

    out: str
    specs: Mapping[str, Dict[str, Any]]
    data_dirs: Any
    loader: Optional[Callable[[Any, Any], Any]] = None
    overwrite: bool = False


class BaselineUnits:
    """Surveys tasks and runs baseline work units in one process (a worker, or the
    caller's); a context manager, as the pool expects. The last
    :data:`~estratos.probe.grid.units.TASKS_KEPT` loaded tasks are kept, so a survey and the
    units that follow it in the same process load a task once."""

    def __init__(self, context: BaselineContext) -> None:
        self.context = context
        self._tasks: "OrderedDict[str, Any]" = OrderedDict()

    def __enter__(self) -> "BaselineUnits":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._tasks.clear()

    def _load(self, task_id: str) -> Any:
        """The task's data, from the kept tasks or the loader."""
        from estratos.tasks.types import TaskSpec

        if task_id in self._tasks:
            self._tasks.move_to_end(task_id)
            return self._tasks[task_id]
        spec = TaskSpec(**self.context.specs[task_id])
        loader = self.context.loader or default_loader()
        data = loader(spec, self.context.data_dirs)
        self._tasks[task_id] = data
        while len(self._tasks) > TASKS_KEPT:
            self._tasks.popitem(last=False)
        return data

    def survey(self, task_id: str) -> TaskShape:
        """Load the task and measure it: sizes, classes and, as its features' width, the
        mean whitespace tokens of its sentences times its combiner's width (what a sparse
        example holds, roughly: a cost estimate, never a result)."""
        from estratos.probe.features import COMBINER_WIDTH
        from estratos.text import surface_length

        data = self._load(task_id)
        tokens = sum(surface_length(s)[0] for s in data.sentences)
        per_sentence = max(1, round(tokens / max(1, len(data.sentences))))
        return TaskShape(task=task_id, protocol=data.protocol,
                         sizes={name: len(split) for name, split in data.splits.items()},
                         n_classes=len(data.labels),
                         n_features=COMBINER_WIDTH[data.spec.combiner] * per_sentence)

    def run(self, unit: WorkUnit, report: Callable[[List[ResultRecord]], None]) -> float:
        """Evaluate every cell of ``unit`` (its columns are baseline names), each stored as
        soon as it is final (predictions first, then its results line) and passed to
        ``report``. Returns the seconds the unit took."""
        from estratos.probe.baseline import BASELINES, evaluate_cell
        from estratos.probe.records import store_cells
        from estratos.results import ResultsStore

        t_start = time.perf_counter()
        data = self._load(unit.task)
        store = ResultsStore(self.context.out)
        for seed in unit.seeds:
            for name in unit.layers:
                record, outcome = evaluate_cell(data, seed, BASELINES[str(name)])
                report(store_cells(self.context.out, data, [record], [outcome],
                                   overwrite=self.context.overwrite, store=store))
        return time.perf_counter() - t_start


class BaselineGrid(Grid):
    """A baseline run as a grid of the shared loop: columns are baseline names, a cell's
    identity is its baseline's (:attr:`estratos.probe.baseline.SurfaceBaseline.system`),
    and a cell costs what the task's logistic regression trains (nothing for a cosine)."""

    def __init__(self, specs: Sequence[Any], names: Sequence[str], seeds: Sequence[int],
                 out: Path, done: Set[CellKey], *, data_dirs: Any,
                 loader: Optional[Callable[[Any, Any], Any]], overwrite: bool, jobs: int,
                 shard: Optional[Tuple[int, int]]) -> None:
        from estratos.probe.baseline import BASELINES

        super().__init__(label="baseline", out=out, ids=[s.id for s in specs],
                         columns=names, seeds=seeds, done=done, jobs=jobs, threads=1,
                         shard=shard, preload=BASELINE_PRELOAD)
        self.specs = list(specs)
        self.systems = {name: BASELINES[name].system for name in names}
        self.context = BaselineContext(str(out), {s.id: spec_state(s) for s in specs},
                                       data_dirs, loader, overwrite)
        # bad task overrides fail here, before any task is read; the estimators feed the
        # cost estimates
        self.estimators = {s.id: _trained_estimator(s, BASELINES[names[0]].estimator)
                           for s in specs}

    def key(self, task: str, column: Any, seed: int) -> CellKey:
        return self.systems[column].key(task=task, layer=None, pooling=None, seed=seed,
                                        classifier=column)

    def column_of(self, record: ResultRecord) -> str:
        return str(record.classifier.get("name"))

    def runner(self, stats: RunStats) -> Tuple[Callable[[Any], Any], Any]:
        stats.device = "cpu"
        return BaselineUnits, self.context

    def costs(self, shapes: Mapping[str, TaskShape], surveyed: Sequence[str]
              ) -> Dict[str, float]:
        return {t: cell_cost(shapes[t], self.estimators[t]) for t in surveyed}


def _trained_estimator(spec: Any, estimator: Any) -> Any:
    """The estimator the task's protocol trains with a baseline (the task's overrides
    applied), or None when it trains nothing (the cosine of the baseline's vectors)."""
    from estratos.probe.estimators.settings import resolve_classifier
    from estratos.protocols import get_protocol
    from estratos.vocab import Role

    if get_protocol(spec.protocol).trains != Role.CLASSIFIER:
        return None
    return resolve_classifier(spec.classifier, classifier=estimator(), task=spec.id)


def run_baseline(specs: Sequence[TaskSpec], data_dirs: Optional[DataDirs],
                 out: Union[str, os.PathLike], config: BaselineConfig, *,
                 loader: Optional[TaskLoader] = None,
                 progress: Optional[bool] = False) -> ProbeRun:
    """Run the baselines of ``config`` (:class:`~estratos.probe.config.BaselineConfig`) on
    ``specs`` and append one record per (task, baseline, seed) to ``out``; returns the
    records written as a :class:`~estratos.probe.grid.outcome.ProbeRun` (a sequence of
    records in grid order: task, seed, baseline; with timing).

    Cells already in ``out`` are skipped unless ``config.overwrite`` (then a new record is
    appended and readers keep the last); a stored cell computed on other data than the
    task's now is refused (:func:`estratos.results.provenance.check_done_cells`).
    ``config.jobs``: processes kept busy with work units; ``config.shard``: ``(I, N)``,
    results then going to ``<out stem>.shard-I-of-N<suffix>``; ``progress``: a bar on
    stderr (None: when stderr is a terminal, else periodic lines). ``loader(spec,
    data_dirs) -> TaskData`` replaces :func:`estratos.tasks.load_task` (with ``jobs > 1`` it
    must be picklable).
    """
    t_start = time.monotonic()
    seed_list, names, overwrite = config.seeds, config.baselines, config.overwrite
    jobs_n, where = config.jobs, config.shard
    specs = list(specs)
    if not specs:
        raise OptionError("--tasks: no task selected")
    ids = [spec.id for spec in specs]
    if len(set(ids)) != len(ids):
        raise OptionError(f"--tasks: a task is selected twice ({', '.join(ids)})")
    out_path = shard_path(out, where)
    check_output_file(out_path)  # before any work, not after the first unit
    done = set() if overwrite else done_keys([str(out_path)])
    grid = BaselineGrid(specs, names, seed_list, out_path, done, data_dirs=data_dirs,
                        loader=loader, overwrite=overwrite, jobs=jobs_n, shard=where)
    if done:  # the cells to be skipped must have been computed on this data
        in_grid = {grid.key(t, name, s) for t in ids for name in names for s in seed_list}
        check_done_cells([out_path], specs, data_dirs, in_grid.__contains__, loader)
    if not grid.pending():
        log.info("baseline: every cell already in %s; nothing to do", out_path)
        return ProbeRun([], out_path, time.monotonic() - t_start, "cpu", 0, grid.grid_cells)
    return collect(grid, execute(grid, progress), time.monotonic() - t_start)


__all__ = ["BaselineContext", "BaselineGrid", "BaselineUnits", "run_baseline"]
