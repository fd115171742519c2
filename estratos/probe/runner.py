"""The probe grid runner: every (task, layer spec, pooling, seed) cell, from the cache alone.

How a run goes (docs/probe.md, "How the grid is scheduled"):

1. options, the cache and the results files are checked; cells already in the results file
   (or in ``resume_from`` files) are left out;
2. each task with cells to do is *surveyed* (its data loaded, its sentences looked up in the
   cache by key: cheap, and done by the worker processes in parallel), so missing sentences
   stop the run before any training, with the ``estratos encode`` command that adds them;
3. the cells are cut into work units (:mod:`estratos.probe.grid`), the longest first; with
   ``shard`` only this shard's cells are kept and results go to the shard's own file;
4. ``jobs`` processes (:mod:`estratos.probe.scheduler`) each take the next unit as soon as
   they are free. A unit loads its task, reads only the hidden states it needs, checks them
   for NaN, trains its layer specs and seeds as batched programs
   (:mod:`estratos.probe.classifiers`) and appends each program's cells to the results file,
   which makes a killed run resumable at any point.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Set,
                    Tuple, Union)

import numpy as np

from estratos import errors as _errors
from estratos.errors import CacheError, EstratosError, MissingSentences, OptionError
from estratos.options import (available_cores, parse_layers, parse_seeds, positive_int,
                              resolve_shard)
from estratos.probe.cells import (Classifier, chance_levels, classifier_record, evaluate_cells,
                                  resolve_probe_device)
from estratos.probe.estimator import DEFAULT_CLASSIFIER
from estratos.probe.features import AVG, COMBINER_WIDTH, LayerSpec
from estratos.probe.records import System, cell_record, store_cells
from estratos.probe.grid import (TaskShape, WorkUnit, cell_cost, plan_units, shard_cells,
                                 shard_path)
from estratos.probe.runtime import torch_runtime
from estratos.probe.scheduler import make_executor
from estratos.probe.settings import check_classifier, task_estimator
from estratos.results import ResultRecord, ResultsStore
from estratos.results.reader import done_keys, expand_paths
from estratos.vocab import DEFAULT_POOLING, DEFAULT_SEED

log = logging.getLogger(__name__)

#: features of one program are kept under this many bytes by splitting its layer specs into
#: groups trained one after the other (results do not depend on it); the trainer holds one
#: more (example-major) copy of the training features
FEATURE_BUDGET_BYTES = 1_000_000_000
#: loaded tasks each process keeps for its next units (a unit of the same task skips the load)
TASKS_KEPT = 2


@dataclasses.dataclass(frozen=True)
class GridContext:
    """What every process of a run needs to survey tasks and run units (picklable: it is
    sent to each worker once)."""

    cache_path: str
    out: str
    pooling: str
    classifier: Any  # a registered name or an estimator (estratos.probe.cells.Classifier)
    sequential: bool
    overwrite: bool
    threads: int
    device: str
    specs: Mapping[str, Dict[str, Any]]  # task id -> TaskSpec fields (see _spec_state)
    data_dirs: Any
    loader: Optional[Callable[[Any, Any], Any]]


def _encode_hint(cache_path: Path, model: Any, specs: Sequence[Any], data_dirs: Any) -> str:
    dirs = []
    for spec in specs:
        if spec.source:  # a custom task's folder comes with its task file
            continue
        try:
            d = str(data_dirs.for_suite(spec.suite))
        except (EstratosError, AttributeError):  # no DataDirs (tasks built in memory)
            continue
        if d not in dirs:
            dirs.append(d)
    builtin = [s for s in specs if not s.source]
    data = " ".join(f"--data-dir {shlex.quote(d)}" for d in dirs) or (
        "--data-dir DIR" if builtin else "")
    ids = ",".join(s.id for s in specs)
    files = " ".join(f"--task-file {shlex.quote(s.source)}" for s in specs if s.source)
    words = [f"estratos encode --model {shlex.quote(str(model))} --out "
             f"{shlex.quote(str(cache_path))} --tasks {ids}", files, data]
    return " ".join(w for w in words if w)


def _check_vectors(cache_path: Path, spec_id: str, vectors: np.ndarray,
                   sentences: Sequence[str], pooling: str) -> None:
    bad = ~np.isfinite(vectors).all(axis=(1, 2))
    if bad.any():
        first = sentences[int(np.flatnonzero(bad)[0])]
        raise CacheError(f"{cache_path}: {int(bad.sum())} row(s) needed by {spec_id} hold NaN "
                         f"or infinite {pooling} vectors, e.g. {first[:60]!r}; the cache is "
                         "corrupted: re-encode these sentences (`estratos cache verify` lists "
                         "them)")


def _layer_chunks(layers: Sequence[LayerSpec], n_examples: int, n_features: int
                  ) -> List[List[LayerSpec]]:
    per_layer = max(1, n_examples * n_features * 4)
    size = max(1, FEATURE_BUDGET_BYTES // per_layer)
    return [list(layers[i:i + size]) for i in range(0, len(layers), size)]


def _spec_state(spec: Any) -> Dict[str, Any]:
    """A picklable copy of a TaskSpec's fields (its read-only mappings are not picklable)."""
    state = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        state[f.name] = dict(value) if isinstance(value, Mapping) else value
    return state


def _default_loader() -> Callable[[Any, Any], Any]:
    from estratos.tasks import load_task

    return load_task


# ---- one process's work: surveys and units ---------------------------------------------------

class UnitRunner:
    """Surveys tasks and runs work units in one process (a worker, or the caller's).

    A context manager: it opens the cache and pins torch's threads for its lifetime. The
    last :data:`TASKS_KEPT` loaded tasks (data and cache rows) are kept, so a survey and the
    units that follow it in the same process load a task once.
    """

    def __init__(self, context: GridContext) -> None:
        self.context = context
        self._tasks: "OrderedDict[str, Tuple[Any, Any, Optional[np.ndarray]]]" = OrderedDict()
        self._stack: List[Any] = []

    def __enter__(self) -> "UnitRunner":
        from estratos.cache import open_cache

        runtime = torch_runtime(self.context.threads)
        runtime.__enter__()
        self._stack.append(runtime)
        self.cache_cm = open_cache(self.context.cache_path)
        self.cache = self.cache_cm.__enter__()
        self._stack.append(self.cache_cm)
        self.identity = self.cache.identity()
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._stack:
            self._stack.pop().__exit__(None, None, None)

    def _load(self, task_id: str) -> Tuple[Any, Any]:
        """(spec, task data) from the kept tasks or the loader."""
        from estratos.tasks.types import TaskSpec

        if task_id in self._tasks:
            self._tasks.move_to_end(task_id)
            spec, task, _ = self._tasks[task_id]
            return spec, task
        spec = TaskSpec(**self.context.specs[task_id])
        task = (self.context.loader or _default_loader())(spec, self.context.data_dirs)
        self._tasks[task_id] = (spec, task, None)
        while len(self._tasks) > TASKS_KEPT:
            self._tasks.popitem(last=False)
        return spec, task

    def _rows(self, task_id: str) -> np.ndarray:
        """Cache rows of the task's sentences (raises :class:`MissingSentences`)."""
        spec, task, rows = self._tasks[task_id]
        if rows is None:
            rows = self.cache.rows_for(task.sentences)
            self._tasks[task_id] = (spec, task, rows)
        return rows

    def survey(self, task_id: str) -> TaskShape:
        """Load the task and look its sentences up in the cache (keys only, no vectors)."""
        spec, task = self._load(task_id)
        missing = 0
        try:
            self._rows(task_id)
        except MissingSentences as exc:
            missing = exc.missing
        return TaskShape(task=task_id, protocol=task.protocol,
                         sizes={name: len(split) for name, split in task.splits.items()},
                         n_classes=len(task.labels),
                         n_features=COMBINER_WIDTH[spec.combiner] * self.cache.dim,
                         missing=missing)

    def _vectors(self, task_id: str, rows: np.ndarray, layers: Sequence[LayerSpec],
                 sentences: Sequence[str]) -> Tuple[np.ndarray, List[Any]]:
        """``(vectors, positions)``: the task's vectors of the hidden states ``layers`` need
        (read from the cache for these layers only) and each layer spec's position along
        their second axis. ``avg`` is the stored mean over all hidden states; a cache
        written before encode stored it gets every state read and averaged (``"avg"``)."""
        ctx = self.context
        ints = sorted({int(layer) for layer in layers if layer != AVG})
        if AVG in layers and not self.cache.has_avg:
            states: List[Any] = list(self.cache.states)
        else:
            states = ints + ([AVG] if AVG in layers else [])
        t0 = time.perf_counter()
        vectors = self.cache.read(rows, ctx.pooling, states)
        log.info("%s: read %d rows x %d states in %.2fs", task_id, len(rows), len(states),
                 time.perf_counter() - t0)
        _check_vectors(Path(ctx.cache_path), task_id, vectors, sentences, ctx.pooling)
        position: Dict[Any, Any] = {s: i for i, s in enumerate(states)}
        if not self.cache.has_avg:
            position[AVG] = AVG  # evaluate_cells averages every state read
        return vectors, [position[layer] for layer in layers]

    def run(self, unit: WorkUnit, report: Callable[[List[ResultRecord]], None]) -> float:
        """Train every cell of ``unit``; each program's records are appended to the results
        file, then passed to ``report``. Returns the seconds the unit took."""
        t_start = time.perf_counter()
        ctx = self.context
        spec, task = self._load(unit.task)
        rows = self._rows(unit.task)
        classifier = classifier_record(task, ctx.classifier)
        store = ResultsStore(ctx.out)
        system = System.of_cache(self.identity, ctx.device)
        chance = chance_levels(task)
        n_examples = sum(len(s) for s in task.splits.values())
        n_features = COMBINER_WIDTH[spec.combiner] * self.cache.dim
        # one chunk of layer specs at a time, its vectors read for it alone: the features of a
        # program (and the vectors behind them) stay under FEATURE_BUDGET_BYTES whatever the
        # width and the number of hidden states (docs/probe.md, "Memory")
        for chunk in _layer_chunks(list(unit.layers), n_examples, n_features):
            vectors, positions = self._vectors(unit.task, rows, chunk, task.sentences)
            t0 = time.perf_counter()
            outcomes = evaluate_cells(task, vectors, positions,
                                      unit.seeds, ctx.classifier, sequential=ctx.sequential,
                                      device=ctx.device)
            del vectors
            seconds = (time.perf_counter() - t0) / (len(chunk) * len(unit.seeds))
            records = [cell_record(task, o, system, layer=layer if layer == AVG else int(layer),
                                   pooling=ctx.pooling, seed=seed, classifier=classifier,
                                   seconds=seconds, chance=chance)
                       for seed, per_layer in zip(unit.seeds, outcomes)
                       for layer, o in zip(chunk, per_layer)]
            written = store_cells(ctx.out, task, records,
                                  [o for per_layer in outcomes for o in per_layer],
                                  overwrite=ctx.overwrite, store=store)
            log.info("%s layers %s: %d cell(s) in %.1fs", unit.task,
                     ",".join(map(str, chunk)), len(records), seconds * len(records))
            report(written)
        return time.perf_counter() - t_start


# ---- the run as a whole -------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class UnitStat:
    """How one unit went: what it was, how long it took, how many cells it wrote."""

    unit: WorkUnit
    seconds: float
    written: int


class ProbeRun(Sequence[ResultRecord]):
    """The records a run wrote (a sequence, in grid order: task, seed, layer spec) and how
    the run went: ``out`` (the results file written), ``seconds`` (wall time), ``device``,
    ``processes``, ``already_done`` (cells skipped because they were done), ``units``
    (:class:`UnitStat` of each unit run)."""

    def __init__(self, records: Sequence[ResultRecord], out: Path, seconds: float,
                 device: str, processes: int, already_done: int,
                 units: Sequence[UnitStat] = ()) -> None:
        self.records = list(records)
        self.out = out
        self.seconds = seconds
        self.device = device
        self.processes = processes
        self.already_done = already_done
        self.units = list(units)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: Any) -> Any:
        return self.records[i]

    def __iter__(self) -> Iterator[ResultRecord]:
        return iter(self.records)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ProbeRun):
            return self.records == other.records
        if isinstance(other, (list, tuple)):
            return self.records == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ProbeRun({len(self.records)} records, out={str(self.out)!r})"

    def timing(self) -> str:
        """One line: cells, wall time, cells/s, device and processes."""
        rate = len(self.records) / self.seconds if self.seconds > 0 else 0.0
        done = f"; {self.already_done} already done" if self.already_done else ""
        return (f"{len(self.records)} cell(s) in {self.seconds:.1f} s ({rate:.2f} cells/s) "
                f"on {self.device}, {self.processes} process(es){done}")

    def describe(self) -> str:
        """The terminal summary: cells written, each task's best layer spec, timing."""
        text = summarize(self.records, self.out)
        return text if not self.records else f"{text}\n{self.timing()}"


class _Progress:
    """A tqdm bar over cells whose ETA comes from the units' estimated costs (cells of one
    grid differ by orders of magnitude, so a rate over cells would mislead)."""

    def __init__(self, total_cells: int, total_cost: float, show: bool) -> None:
        self.bar = None
        self.total_cost = total_cost
        self.done_cost = 0.0
        self.t0 = time.monotonic()
        if show and total_cells:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total_cells, unit="cell", desc="probe", file=sys.stderr,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                       "cells [{elapsed}{postfix}]")

    def update(self, cells: int, cost: float) -> None:
        self.done_cost += cost
        if self.bar is None:
            return
        elapsed = time.monotonic() - self.t0
        if self.done_cost > 0 and self.total_cost > 0:
            left = elapsed * max(0.0, self.total_cost - self.done_cost) / self.done_cost
            self.bar.set_postfix_str(f"ETA {_clock(left)}", refresh=False)
        self.bar.update(cells)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _pending_cells(spec_ids: Sequence[str], layers: Sequence[LayerSpec], seeds: Sequence[int],
                   key: Callable[[str, LayerSpec, int], tuple], done: Set[tuple],
                   owned: Optional[Set[tuple]] = None) -> Dict[str, Dict[int, List[LayerSpec]]]:
    """task -> seed -> layer specs still to do (in ``owned`` when sharded)."""
    out: Dict[str, Dict[int, List[LayerSpec]]] = {}
    for task in spec_ids:
        by_seed = {seed: [layer for layer in layers
                          if key(task, layer, seed) not in done
                          and (owned is None or (task, layer, seed) in owned)]
                   for seed in seeds}
        if any(by_seed.values()):
            out[task] = by_seed
    return out


def _raise_failures(failures: List[Tuple[str, EstratosError]]) -> None:
    """Raise the first failure as itself (its class and fields, as raised in the worker),
    its task named first; mention the others."""
    if not failures:
        return
    task, exc = failures[0]
    others = sorted({t for t, _ in failures[1:]})
    raise exc.in_context(task, f"(also failed: {', '.join(others)})" if others else "")


def run_probe(cache_path: os.PathLike | str, specs: Sequence[Any], data_dirs: Any,
              out: os.PathLike | str, *, layers: Union[str, Sequence[LayerSpec]] = "all",
              pooling: Optional[str] = DEFAULT_POOLING,
              seeds: Sequence[int] = (DEFAULT_SEED,),
              classifier: Classifier = DEFAULT_CLASSIFIER, sequential: bool = False,
              jobs: int = 1,
              overwrite: bool = False, expect_model: Optional[str] = None,
              threads: Optional[int] = None,
              loader: Optional[Callable[[Any, Any], Any]] = None,
              device: Optional[str] = "auto",
              shard: Union[None, str, Tuple[int, int]] = None,
              resume_from: Sequence[Union[str, os.PathLike]] = (),
              progress: Optional[bool] = False) -> ProbeRun:
    """Probe every (task, layer spec, pooling, seed) cell; returns the records written as a
    :class:`ProbeRun` (a sequence of :class:`ResultRecord`, with timing).

    ``layers``: ``"all"`` (every hidden state + ``avg``) or a comma list / sequence of
    indices and ``"avg"``. ``jobs``: processes kept busy with work units, each pinned to
    ``threads`` torch threads (default 1: the probes are small, so extra threads gain little
    and lose a lot on shared cores). ``device``: ``cpu``, ``auto`` or ``cuda[:N]``.
    ``shard``: ``"I/N"``, ``(I, N)`` or ``"auto"`` (SLURM array variables): only this
    shard's cells, written to ``<stem>.shard-I-of-N<suffix>``. Cells already in the results
    file, or in ``resume_from`` files (paths or globs), are skipped unless ``overwrite``.
    ``progress``: a bar on stderr (None: when stderr is a terminal). ``pooling`` None: the
    cache's first pooling (cls for an encoder's default cache, last for a decoder's); cls on
    a decoder-only model's cache is refused (:func:`estratos.encode.pooling.cls_refusal`).

    Raises :class:`OptionError`, :class:`CacheError` (incomplete cache),
    :class:`MissingSentences` (with the ``estratos encode`` command that adds them) or
    :class:`SettingsMismatch` (``expect_model``) before training; a unit that fails (bad
    task data, NaN rows) raises after the other units ended, naming its task.
    ``loader(spec, data_dirs) -> TaskData`` replaces :func:`estratos.tasks.load_task` (for
    data built in memory; with ``jobs > 1`` it must be picklable).
    """
    from estratos.cache import open_cache
    from estratos.encode.pooling import cache_is_decoder, cls_refusal
    from estratos.protocols import get_protocol

    t_start = time.monotonic()
    seeds_t = parse_seeds(seeds)
    jobs = positive_int("--jobs", jobs)
    threads = positive_int("--threads", threads, allow_none=True)
    specs = list(specs)
    if not specs:
        raise OptionError("--tasks: no task selected")
    ids = [spec.id for spec in specs]
    if len(set(ids)) != len(ids):
        raise OptionError(f"--tasks: a task is selected twice ({', '.join(ids)})")
    classifier_name = check_classifier(classifier)
    # bad task overrides fail before any reading; the estimators feed the cost estimates
    estimators = {spec.id: task_estimator(spec, get_protocol(spec.protocol), classifier)
                  for spec in specs}
    device_name = str(resolve_probe_device(device))
    where = resolve_shard(shard)
    cache_path = Path(cache_path)
    out_path = shard_path(out, where)
    expect = {"model": expect_model} if expect_model else None
    with open_cache(cache_path, expect=expect) as cache:
        if pooling is None:
            pooling = cache.poolings[0]
        if pooling == "cls" and cache_is_decoder(cache.attrs):
            raise cls_refusal(str(cache.attrs.get("model")))
        if pooling not in cache.poolings:
            raise OptionError(f"--pooling: {pooling!r} is not in the cache {cache_path} "
                              f"(it has {', '.join(cache.poolings)})")
        layer_specs = parse_layers(layers, cache.n_states, cache.states)
        identity = cache.identity()
        model_name = cache.attrs.get("model")
    done: Set[tuple] = set()
    if not overwrite:
        done = done_keys([out_path] + expand_paths(list(resume_from)) if resume_from
                         else [out_path])

    system = System.of_cache(identity)

    def key(task: str, layer: LayerSpec, seed: int) -> tuple:
        return system.key(task, layer, pooling, seed, classifier_name)

    pending = _pending_cells(ids, layer_specs, seeds_t, key, done)
    grid_cells = len(ids) * len(layer_specs) * len(seeds_t)
    if not pending:
        return ProbeRun([], out_path, time.monotonic() - t_start, device_name, 0, grid_cells)
    # a shard must know the whole grid's costs; an unsharded run only its pending tasks'
    to_survey = ids if where is not None else list(pending)
    n_cells = sum(len(v) for by_seed in pending.values() for v in by_seed.values())
    processes = max(1, min(jobs, n_cells))
    if threads is None:
        threads = 1
    if threads * processes > available_cores():
        log.warning("--jobs %d x --threads %d exceeds the %d available cores; expect "
                    "slow-downs", processes, threads, available_cores())
    context = GridContext(str(cache_path), str(out_path), pooling, classifier, bool(sequential),
                          bool(overwrite), threads, device_name,
                          {spec.id: _spec_state(spec) for spec in specs}, data_dirs, loader)
    records: List[ResultRecord] = []
    stats: List[UnitStat] = []
    failures: List[Tuple[str, EstratosError]] = []
    bar: Optional[_Progress] = None
    todo = n_cells
    try:
        with make_executor(UnitRunner, context, processes) as executor:
            shapes = _survey(executor, to_survey)
            missing = {t: shapes[t].missing for t in to_survey if shapes[t].missing}
            if missing:
                total = sum(missing.values())
                short = [s for s in specs if s.id in missing]
                detail = ", ".join(f"{k}: {v}" for k, v in missing.items())
                raise MissingSentences(
                    f"{cache_path}: {total} sentence(s) the tasks need are not in the cache "
                    f"({detail}); add them with: "
                    f"{_encode_hint(cache_path, model_name, short, data_dirs)}",
                    missing=total)
            cost = {t: cell_cost(shapes[t], estimators[t]) for t in to_survey}
            if where is not None:
                owned = shard_cells(ids, layer_specs, seeds_t, cost, where)
                pending = _pending_cells(ids, layer_specs, seeds_t, key, done, owned)
            units = plan_units(pending, cost, executor.processes)
            todo = sum(u.n_cells for u in units)
            if where is not None:
                grid_cells = len(owned)
            log.info("%d cell(s) in %d unit(s) on %d process(es)",
                     sum(u.n_cells for u in units), len(units), executor.processes)
            show = sys.stderr.isatty() if progress is None else bool(progress)
            bar = _Progress(sum(u.n_cells for u in units), sum(u.cost for u in units), show)
            failures = _run_units(executor, units, records, stats, bar)
            processes = executor.processes
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        # the workers are stopped: what the file holds now is what was kept
        planned = {key(t, layer, s) for t, by_seed in pending.items()
                   for s, layers in by_seed.items() for layer in layers}
        kept = len(planned & done_keys([out_path]))
        raise _interrupted(out_path, kept, len(planned) - kept) from None
    finally:
        if bar is not None:
            bar.close()
    order = {t: i for i, t in enumerate(ids)}
    layer_order = {layer: i for i, layer in enumerate(layer_specs)}
    seed_order = {s: i for i, s in enumerate(seeds_t)}
    records.sort(key=lambda r: (order[r.task], seed_order[r.seed], layer_order[r.layer]))
    _raise_failures(failures)
    return ProbeRun(records, out_path, time.monotonic() - t_start, device_name, processes,
                    grid_cells - todo, stats)


def _survey(executor: Any, task_ids: Sequence[str]) -> Dict[str, TaskShape]:
    """Every task's :class:`TaskShape`; a task whose data cannot be loaded stops the run
    here, before any training."""
    shapes: Dict[str, TaskShape] = {}
    failures: List[Tuple[str, EstratosError]] = []

    def on_event(kind: str, key: Any, value: Any) -> None:
        if kind == "survey":
            shapes[key] = value
        elif kind == "error":
            failures.append((key, value))
        elif kind == "bug":
            raise RuntimeError(f"probe worker failed while reading {key}:\n{value}")

    executor.run([("survey", t, t) for t in task_ids], on_event)
    _raise_failures(failures)
    return shapes


def _run_units(executor: Any, units: Sequence[WorkUnit], records: List[ResultRecord],
               stats: List[UnitStat], bar: _Progress) -> List[Tuple[str, EstratosError]]:
    """Run every unit, collecting records and statistics; returns the failures (task, the
    error as raised), raised by the caller once every other unit has ended."""
    by_index = {u.index: u for u in units}
    written: Dict[int, int] = {}
    failures: List[Tuple[str, EstratosError]] = []

    def on_event(kind: str, key: Any, value: Any) -> None:
        unit = by_index[key]
        if kind == "cells":
            records.extend(value)
            written[key] = written.get(key, 0) + len(value)
            bar.update(len(value), unit.cost / unit.n_cells * len(value))
        elif kind == "done":
            stats.append(UnitStat(unit, float(value), written.get(key, 0)))
        elif kind == "error":
            log.error("%s: %s", unit.describe(), value)
            failures.append((unit.task, value))
        elif kind == "bug":
            raise RuntimeError(f"probe worker failed on {unit.describe()}:\n{value}")

    executor.run([("unit", u.index, u) for u in units], on_event)
    return failures


def _interrupted(out: Path, kept: int, left: int) -> EstratosError:
    """The Ctrl-C message: what was kept, and that the same command resumes."""
    return _errors.Interrupted(
        f"interrupted: {kept} new cell(s) of this run are kept in {out}, {left} still to do; "
        "run the same command again to resume (cells already in the results file are "
        "skipped)")


def summarize(records: Sequence[ResultRecord], out: os.PathLike | str) -> str:
    """A few lines for the terminal: cells written, and each task's best layer spec.

    A cell whose score is undefined (null, e.g. a correlation of constant cosines) is left
    out of the best-layer mean; a task with no defined score says so."""
    if not records:
        return f"nothing to do: every cell is already in {out} (use --overwrite to redo)"
    lines = [f"wrote {len(records)} cell(s) to {out}"]
    by_task: Dict[str, Dict[Any, List[float]]] = {}
    for r in records:
        scores = by_task.setdefault(r.task, {}).setdefault(r.layer, [])
        if r.score is not None:
            scores.append(float(r.score))
    for task, layers in by_task.items():
        means = {layer: sum(v) / len(v) for layer, v in layers.items() if v}
        if not means:
            lines.append(f"  {task}: every score undefined")
            continue
        best = max(means, key=lambda k: means[k])
        undefined = [str(layer) for layer, v in layers.items() if not v]
        note = f"; undefined at layer {', '.join(undefined)}" if undefined else ""
        lines.append(f"  {task}: best layer {best} ({means[best]:.2f}, mean over seeds){note}")
    return "\n".join(lines)
