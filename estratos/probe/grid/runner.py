"""The probe grid runner: every (task, layer spec, pooling, seed) cell, from the cache alone.

How a run goes (docs/probe.md, "How the grid is scheduled"):

1. options, the cache and the results files are checked; cells already in the results file
   (or in ``resume_from`` files) are left out;
2. each task with cells to do is *surveyed* (its data loaded, its sentences looked up in the
   cache by key: cheap, and done by the worker processes in parallel), so missing sentences
   stop the run before any training, with the ``estratos encode`` command that adds them;
3. the cells are cut into work units (:mod:`estratos.probe.grid.plan`), the longest first; with
   ``shard`` only this shard's cells are kept and results go to the shard's own file;
4. ``jobs`` processes (:mod:`estratos.probe.grid.pool`) each take the next unit as soon as
   they are free. A unit loads its task, reads only the hidden states it needs, checks them
   for NaN, trains its layer specs and seeds as batched programs
   (:mod:`estratos.probe.estimators.classifiers`) and appends each program's cells to the
   results file, which makes a killed run resumable at any point.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from estratos import errors as _errors
from estratos.errors import DiskFull, EstratosError, MissingSentences, OptionError
from estratos.options import available_cores, check_output_file, parse_layers
from estratos.probe.cells import ACCELERATOR_DEVICES, FUSED_SEED_DEVICES, resolve_probe_device
from estratos.probe.config import ProbeConfig
from estratos.probe.estimators.settings import task_estimator
from estratos.probe.grid.outcome import ProbeRun, UnitStat
from estratos.probe.grid.placement import (
    ACCELERATOR,
    describe_placement,
    measure_speed,
    place_tasks,
    seconds_on,
    task_work,
)
from estratos.probe.grid.plan import (
    TaskShape,
    WorkUnit,
    cell_cost,
    plan_units,
    shard_cells,
    shard_path,
)
from estratos.probe.grid.pool import Event, make_executor
from estratos.probe.grid.progress import GridProgress
from estratos.probe.grid.units import WORKER_PRELOAD, GridContext, UnitRunner, spec_state
from estratos.probe.records import CellSource
from estratos.results import ResultRecord
from estratos.results.provenance import check_done_cells
from estratos.results.reader import done_keys, expand_paths
from estratos.vocab import CONTROL_L2_TASK, RAW_FEATURES, LayerSpec

log = logging.getLogger(__name__)

__all__ = ["ProbeRun", "RunPlan", "plan_run", "run_probe"]


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


# ---- the run as a whole -------------------------------------------------------------------

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


@dataclass(frozen=True)
class RunPlan:
    """What a run will do, decided before any process starts: the checked configuration
    (pooling resolved against the cache), the tasks, the layer specs, where results go, the
    cache's identity and the cells still to do (task -> seed -> layer specs)."""

    config: ProbeConfig
    cache_path: Path
    out: Path
    specs: Tuple[Any, ...]
    layers: Tuple[LayerSpec, ...]
    system: CellSource
    model: Any
    done: Set[tuple]
    pending: Dict[str, Dict[int, List[LayerSpec]]]
    estimators: Dict[str, Any]
    #: ``--control-l2 task``: (task, layer spec, seed) -> the L2 its task cell chose
    task_l2: Dict[Tuple[str, str, int], Optional[float]] = dataclasses.field(
        default_factory=dict)

    @property
    def ids(self) -> List[str]:
        return [spec.id for spec in self.specs]

    def key(self, task: str, layer: LayerSpec, seed: int) -> tuple:
        """The identity of one of this run's cells."""
        c = self.config
        return self.system.key(task, layer, c.pooling, seed, c.classifier_name,
                               c.control_identity, c.features)

    @property
    def grid_cells(self) -> int:
        return len(self.specs) * len(self.layers) * len(self.config.seeds)


def run_probe(cache_path: os.PathLike | str, specs: Sequence[Any], data_dirs: Any,
              out: os.PathLike | str, config: Optional[ProbeConfig] = None, *,
              expect_model: Optional[str] = None,
              loader: Optional[Callable[[Any, Any], Any]] = None,
              resume_from: Sequence[Union[str, os.PathLike]] = (),
              progress: Optional[bool] = False, **options: Any) -> ProbeRun:
    """Probe every (task, layer spec, pooling, seed) cell; returns the records written as a
    :class:`ProbeRun` (a sequence of :class:`ResultRecord`, with timing).

    ``config``: the run's :class:`ProbeConfig`, or its fields as keywords (``layers``,
    ``pooling``, ``seeds``, ``classifier``, ``features``, ``control``, ``mdl``,
    ``sequential``, ``jobs``, ``threads``, ``device``, ``shard``, ``overwrite``), checked by
    :meth:`ProbeConfig.build`. Control cells (``control``) are other cells than the
    ordinary ones (same results file, both kept); tasks whose protocol trains nothing
    (cosine similarity) have no control and no standardized reading and are left out of
    such runs with a warning.

    Cells already in the results file, or in ``resume_from`` files (paths or globs), are
    skipped unless ``overwrite``. ``progress``: a bar on stderr (None: when stderr is a
    terminal). ``pooling`` None: the cache's first pooling; cls on a decoder-only model's
    cache is refused (:func:`estratos.cache.architecture.cls_refusal`).

    Raises :class:`OptionError`, :class:`CacheError` (incomplete cache),
    :class:`MissingSentences` (with the ``estratos encode`` command that adds them) or
    :class:`SettingsMismatch` (``expect_model``) before training; a unit that fails (bad
    task data, NaN rows) raises after the other units ended, naming its task.
    ``loader(spec, data_dirs) -> TaskData`` replaces :func:`estratos.tasks.load_task` (for
    data built in memory; with ``jobs > 1`` it must be picklable).
    """
    t_start = time.monotonic()
    if config is None:
        config = ProbeConfig.build(**options)
    elif options:
        raise TypeError(f"run_probe: give a ProbeConfig or its options, not both "
                        f"({', '.join(sorted(options))})")
    plan = plan_run(cache_path, specs, out, config, expect_model=expect_model,
                    data_dirs=data_dirs, loader=loader,
                    resume_from=resume_from)
    if not plan.pending:
        return ProbeRun([], plan.out, time.monotonic() - t_start,
                        str(resolve_probe_device(config.device)), 0, plan.grid_cells)
    records, stats, failures, ran = _execute(plan, data_dirs, loader, progress)
    return _collect(plan, records, stats, failures, ran, time.monotonic() - t_start)


def plan_run(cache_path: os.PathLike | str, specs: Sequence[Any], out: os.PathLike | str,
             config: ProbeConfig, *, expect_model: Optional[str] = None,
             resume_from: Sequence[Union[str, os.PathLike]] = (), data_dirs: Any = None,
             loader: Optional[Callable[[Any, Any], Any]] = None) -> RunPlan:
    """Check the tasks, the cache and the results file against ``config`` and find the
    cells still to do; a stored cell computed on other data than the task's now is refused
    (:func:`estratos.results.provenance.check_done_cells`), never skipped silently."""
    from estratos.cache import open_cache
    from estratos.cache.architecture import cache_is_decoder, cls_refusal
    from estratos.protocols import get_protocol

    specs = list(specs)
    if not specs:
        raise OptionError("--tasks: no task selected")
    if config.control is not None:
        specs = _trained_only(specs, "--control", "has no control")
    elif config.features != RAW_FEATURES:
        specs = _trained_only(specs, "--features", "reads raw vectors")
    ids = [spec.id for spec in specs]
    if len(set(ids)) != len(ids):
        raise OptionError(f"--tasks: a task is selected twice ({', '.join(ids)})")
    # bad task overrides fail before any reading; the estimators feed the cost estimates
    estimators = {spec.id: task_estimator(spec, get_protocol(spec.protocol), config.classifier)
                  for spec in specs}
    cache_path = Path(cache_path)
    out_path = shard_path(out, config.shard)
    check_output_file(out_path)  # before any training, not after the first unit
    expect = {"model": expect_model} if expect_model else None
    with open_cache(cache_path, expect=expect) as cache:
        pooling = config.pooling or cache.poolings[0]
        if pooling == "cls" and cache_is_decoder(cache.attrs):
            raise cls_refusal(str(cache.attrs.get("model")))
        if pooling not in cache.poolings:
            raise OptionError(f"--pooling: {pooling!r} is not in the cache {cache_path} "
                              f"(it has {', '.join(cache.poolings)})")
        layer_specs = tuple(parse_layers(config.layers, cache.n_states, cache.states))
        identity = cache.identity()
        model_name = cache.attrs.get("model")
        if config.features == RAW_FEATURES and cache_is_decoder(cache.attrs):
            # measured (docs/probe.md, "Raw or standardized features"): a decoder's hidden
            # states grow in scale with depth and its last one follows the final norm, so a
            # raw probe ranks layers by their scale as much as by what they hold
            log.warning("%s is a decoder-only model's cache: raw features favour the states "
                        "whose scale suits the probe (the last one, after the final norm); "
                        "run the same command with --features standardized too (same --out) "
                        "before comparing layers", cache_path)
    done: Set[tuple] = set()
    if not config.overwrite:
        done = done_keys([str(out_path), *expand_paths(list(resume_from))])
    plan = RunPlan(config=config.replace(pooling=pooling), cache_path=cache_path, out=out_path,
                   specs=tuple(specs), layers=layer_specs, system=CellSource.of_cache(identity),
                   model=model_name, done=done, pending={}, estimators=estimators)
    if done:
        grid = {plan.key(t, layer, s) for t in ids for layer in layer_specs
                for s in config.seeds}
        files: List[Union[str, Path]] = [out_path, *expand_paths(list(resume_from))]
        check_done_cells(files, specs, data_dirs, grid.__contains__, loader,
                         encoding=plan.system.encoding, source=f"the cache {cache_path}")
    plan.pending.update(_pending_cells(ids, layer_specs, config.seeds, plan.key, done))
    if config.control_l2 == CONTROL_L2_TASK and plan.pending:
        plan.task_l2.update(_task_cells_l2(plan, [out_path, *expand_paths(list(resume_from))]))
    return plan


def _task_cells_l2(plan: RunPlan, files: Sequence[Union[str, Path]]
                   ) -> Dict[Tuple[str, str, int], Optional[float]]:
    """(task, layer spec, seed) -> the L2 its task cell chose, for every pending control
    cell (``--control-l2 task``), read from the results files; a control cell whose task
    cell is not there is an :class:`OptionError` naming how many and the command that adds
    them."""
    from estratos.results.reader import read_results

    c = plan.config
    existing = [f for f in files if os.path.exists(f)]
    by_key = {r.key: r for r in read_results(existing)} if existing else {}
    out: Dict[Tuple[str, str, int], Optional[float]] = {}
    missing = []
    for task, by_seed in plan.pending.items():
        for seed, layers in by_seed.items():
            for layer in layers:
                twin = by_key.get(plan.system.key(task, layer, c.pooling, seed,
                                                  c.classifier_name, None, c.features))
                if twin is None:
                    missing.append(f"{task} layer {layer} seed {seed}")
                else:
                    out[(task, str(layer), int(seed))] = twin.l2
    if missing:
        raise OptionError(
            f"--control-l2 task: {len(missing)} control cell(s) have no task cell in "
            f"{plan.out} to take the L2 from (e.g. {missing[0]}); run the same probe command "
            "without --control and --control-l2 first (same --out)")
    return out


def _execute(plan: RunPlan, data_dirs: Any, loader: Optional[Callable[[Any, Any], Any]],
             progress: Optional[bool]) -> Tuple[List[ResultRecord], List[UnitStat],
                                                List[Tuple[str, EstratosError]], RunStats]:
    """Survey the tasks, plan the units and run them on the configured processes."""
    config, ids = plan.config, plan.ids
    where = config.shard
    pending = plan.pending
    # a shard must know the whole grid's costs; an unsharded run only its pending tasks'
    to_survey = ids if where is not None else list(pending)
    n_cells = sum(len(v) for by_seed in pending.values() for v in by_seed.values())
    processes = max(1, min(config.jobs, n_cells))
    threads = config.threads or 1
    if threads * processes > available_cores():
        log.warning("--jobs %d x --threads %d exceeds the %d available cores; expect "
                    "slow-downs", processes, threads, available_cores())
    records: List[ResultRecord] = []
    stats: List[UnitStat] = []
    failures: List[Tuple[str, EstratosError]] = []
    bar: Optional[GridProgress] = None
    ran = RunStats(device="cpu", processes=processes, todo=n_cells,
                   grid_cells=plan.grid_cells)
    try:
        # the workers start now and import torch while this process does the same below
        # (resolving the device, building its own runner): the imports overlap
        with make_executor(processes, preload=WORKER_PRELOAD) as executor:
            device = resolve_probe_device(config.device)
            # --device auto on a node with a GPU: the GPU and the CPU cores at once
            both = config.device == "auto" and device.type in ACCELERATOR_DEVICES
            ran.device = f"{device} and cpu" if both else str(device)
            context = GridContext(config.replace(device="cpu" if both else str(device),
                                                 threads=threads),
                                  str(plan.cache_path), str(plan.out),
                                  {spec.id: spec_state(spec) for spec in plan.specs},
                                  data_dirs, loader, dict(plan.task_l2))
            executor.start(UnitRunner, context)
            shapes = _survey(executor, to_survey)
            _check_missing(plan, shapes, to_survey, data_dirs)
            cost = {t: cell_cost(shapes[t], plan.estimators[t]) for t in to_survey}
            if where is not None:
                owned = shard_cells(ids, plan.layers, config.seeds, cost, where)
                pending = _pending_cells(ids, plan.layers, config.seeds, plan.key, plan.done,
                                         owned)
                ran.grid_cells = len(owned)
            if both:
                units = _placed_units(plan, pending, shapes, cost, device, executor.processes)
            else:
                units = plan_units(pending, cost, executor.processes,
                                   seeds_apart=device.type not in FUSED_SEED_DEVICES)
            ran.todo = sum(u.n_cells for u in units)
            log.info("%d cell(s) in %d unit(s) on %d process(es)", ran.todo, len(units),
                     executor.processes)
            show = sys.stderr.isatty() if progress is None else bool(progress)
            bar = GridProgress(units, executor.processes, show,
                               lines=progress is None and not show)
            failures = _run_units(executor, units, records, stats, bar)
            ran.processes = executor.processes
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        # the workers are stopped: what the file holds now is what was kept
        planned = {plan.key(t, layer, s) for t, by_seed in pending.items()
                   for s, layers in by_seed.items() for layer in layers}
        kept = len(planned & done_keys([plan.out]))
        raise _interrupted(plan.out, kept, len(planned) - kept) from None
    finally:
        if bar is not None:
            bar.close()
    return records, stats, failures, ran


def _placed_units(plan: RunPlan, pending: Dict[str, Dict[int, List[LayerSpec]]],
                  shapes: Dict[str, TaskShape], cost: Dict[str, float], accelerator: Any,
                  processes: int) -> List[WorkUnit]:
    """The units of a run that uses a GPU and the CPU cores at once: each task placed by
    the cost model (:mod:`estratos.probe.grid.placement`, both devices timed now), the
    GPU's tasks cut for the one process that drives it (this one) with their seeds fused,
    the others for the ``processes - 1`` workers, one seed per program. One process on the
    GPU: two sharing it trained DC's MLP no faster and ended the grid later (docs/probe.md,
    "A GPU node, measured")."""
    # the CPU timed best of three: the workers may still be busy (their surveys) and a
    # slow reading sends work to the GPU that the cores would have ended sooner
    speeds = {"cpu": measure_speed("cpu", repeats=3), "accelerator": measure_speed(accelerator)}
    for speed in speeds.values():
        log.info("probe speed, %s", speed.describe())
    estimates = {}
    for task, by_seed in pending.items():
        work = task_work(shapes[task], plan.estimators[task])
        n_layers = max(len(layers) for layers in by_seed.values())
        n_seeds = sum(1 for layers in by_seed.values() if layers)
        estimates[task] = (seconds_on(work, speeds["cpu"], n_layers, n_seeds),
                           seconds_on(work, speeds["accelerator"], n_layers, n_seeds),
                           seconds_on(work, speeds["cpu"], 1, 1))
    place = place_tasks(estimates, processes - 1)
    for line in describe_placement(place, estimates, str(accelerator)):
        log.info("placed %s", line)
    on_accelerator = {t: v for t, v in pending.items() if place[t] == ACCELERATOR}
    on_cpu = {t: v for t, v in pending.items() if place[t] != ACCELERATOR}
    units = [dataclasses.replace(u, device=str(accelerator))
             for u in plan_units(on_accelerator, cost, 1, seeds_apart=False)]
    units += plan_units(on_cpu, cost, max(1, processes - 1), seeds_apart=True)
    return [dataclasses.replace(u, index=i) for i, u in enumerate(units)]


@dataclass
class RunStats:
    """What :func:`_execute` learnt while running: the device, the processes, the cells it
    planned and the size of the grid (this shard's, when sharded)."""

    device: str
    processes: int
    todo: int
    grid_cells: int


def _check_missing(plan: RunPlan, shapes: Dict[str, TaskShape], surveyed: Sequence[str],
                   data_dirs: Any) -> None:
    """Stop before any training when the cache lacks sentences the tasks need, with the
    ``estratos encode`` command that adds them."""
    missing = {t: shapes[t].missing for t in surveyed if shapes[t].missing}
    if not missing:
        return
    total = sum(missing.values())
    short = [s for s in plan.specs if s.id in missing]
    detail = ", ".join(f"{k}: {v}" for k, v in missing.items())
    raise MissingSentences(
        f"{plan.cache_path}: {total} sentence(s) the tasks need are not in the cache "
        f"({detail}); add them with: "
        f"{_encode_hint(plan.cache_path, plan.model, short, data_dirs)}", missing=total)


def _collect(plan: RunPlan, records: List[ResultRecord], stats: List[UnitStat],
             failures: List[Tuple[str, EstratosError]], ran: RunStats,
             seconds: float) -> ProbeRun:
    """The run's records in grid order (task, seed, layer spec), or its first failure."""
    order = {t: i for i, t in enumerate(plan.ids)}
    layer_order: Dict[Any, int] = {layer: i for i, layer in enumerate(plan.layers)}
    seed_order = {s: i for i, s in enumerate(plan.config.seeds)}
    records.sort(key=lambda r: (order[r.task], seed_order[r.seed],
                                layer_order.get(r.layer, len(layer_order))))
    _raise_failures(failures)
    return ProbeRun(records, plan.out, seconds, ran.device, ran.processes,
                    ran.grid_cells - ran.todo, stats)


def _trained_only(specs: Sequence[Any], option: str, why: str) -> List[Any]:
    """The tasks whose protocol trains a model, for options that only apply to a trained
    probe (``--control``, ``--features standardized``); the others (an untrained cosine)
    are named in a warning, or an :class:`OptionError` when none is left."""
    from estratos.protocols import get_protocol

    kept = [s for s in specs if get_protocol(s.protocol).trains is not None]
    left = [s.id for s in specs if s not in kept]
    if left and not kept:
        raise OptionError(f"{option}: no selected task trains a probe ({', '.join(left)}: "
                          f"scored by an untrained cosine, which {why})")
    if left:
        log.warning("%s: left out %s (scored by an untrained cosine, which %s)", option,
                    ", ".join(left), why)
    return kept


def _survey(executor: Any, task_ids: Sequence[str]) -> Dict[str, TaskShape]:
    """Every task's :class:`TaskShape`; a task whose data cannot be loaded stops the run
    here, before any training."""
    shapes: Dict[str, TaskShape] = {}
    failures: List[Tuple[str, EstratosError]] = []

    def on_event(kind: Event, key: Any, value: Any) -> None:
        if kind == Event.SURVEY:
            shapes[key] = value
        elif kind == Event.ERROR:
            failures.append((key, value))
        elif kind == Event.BUG:
            raise RuntimeError(f"probe worker failed while reading {key}:\n{value}")

    executor.run([(Event.SURVEY, t, t) for t in task_ids], on_event)
    _raise_failures(failures)
    return shapes


def _run_units(executor: Any, units: Sequence[WorkUnit], records: List[ResultRecord],
               stats: List[UnitStat], bar: GridProgress) -> List[Tuple[str, EstratosError]]:
    """Run every unit, collecting records and statistics; returns the failures (task, the
    error as raised), raised by the caller once every other unit has ended."""
    by_index = {u.index: u for u in units}
    written: Dict[int, int] = {}
    failures: List[Tuple[str, EstratosError]] = []

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
            raise RuntimeError(f"probe worker failed on {unit.describe()}:\n{value}")

    # a unit placed on a device of its own (the GPU) runs in this process, which drives it
    executor.run([(Event.UNIT, u.index, u) for u in units], on_event,
                 pinned=lambda job: job[2].device is not None)
    return failures


def _interrupted(out: Path, kept: int, left: int) -> EstratosError:
    """The Ctrl-C message: what was kept, and that the same command resumes."""
    return _errors.Interrupted(
        f"interrupted: {kept} new cell(s) of this run are kept in {out}, {left} still to do; "
        "run the same command again to resume (cells already in the results file are "
        "skipped)")
