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

Steps 2 to 4 (and Ctrl-C) are the loop every grid shares (:mod:`estratos.probe.grid.loop`);
what is a probe's is here: the checks of step 1 (:func:`plan_run`) and :class:`ProbeGrid`
(layer specs as columns, the cache's runner, missing sentences, costs, GPU placement).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from estratos.commandline import Command, ShellText, task_options
from estratos.encode.config import options_for_cache
from estratos.errors import EstratosError, MissingSentences, OptionError
from estratos.options import parse_layers
from estratos.optiontable import OptionPair
from estratos.outputs import check_output_file
from estratos.probe.cells import ACCELERATOR_DEVICES, FUSED_SEED_DEVICES, resolve_probe_device
from estratos.probe.conditional import given_layers
from estratos.probe.config import ProbeConfig
from estratos.probe.estimators.settings import task_estimator
from estratos.probe.grid.loop import Grid, Pending, RunStats, collect, execute, pending_cells
from estratos.probe.grid.outcome import ProbeRun
from estratos.probe.grid.placement import (
    ACCELERATOR,
    describe_placement,
    measure_speed,
    place_tasks,
    seconds_on,
    task_work,
)
from estratos.probe.grid.plan import TaskShape, WorkUnit, cell_cost, plan_units, shard_path
from estratos.probe.grid.units import (
    WORKER_PRELOAD,
    GridContext,
    TaskLoader,
    UnitRunner,
    spec_state,
)
from estratos.probe.records import CellSource
from estratos.results import CellKey, ResultRecord
from estratos.results.provenance import check_done_cells
from estratos.results.reader import done_keys, expand_paths
from estratos.tasks.datadirs import DataDirs
from estratos.tasks.types import TaskSpec
from estratos.vocab import CONTROL_L2_TASK, RAW_FEATURES, LayerSpec, Role

log = logging.getLogger(__name__)

__all__ = ["ProbeRun", "RunPlan", "plan_run", "run_probe"]


def _encode_hint(cache_path: Path, encode_options: Sequence[OptionPair], specs: Sequence[Any],
                 data_dirs: Any) -> str:
    """The ``estratos encode`` command that adds the sentences of ``specs`` to the cache,
    with the cache's own settings (so it is not refused as other settings)."""
    dirs: List[str] = []
    for spec in specs:
        if spec.source:  # a custom task's folder comes with its task file
            continue
        try:
            d = str(data_dirs.for_suite(spec.suite))
        except (EstratosError, AttributeError):  # no DataDirs (tasks built in memory)
            continue
        if d not in dirs:
            dirs.append(d)
    if not dirs and any(not s.source for s in specs):
        dirs = [ShellText("DIR")]  # where the built-in tasks' data is: the user's to say
    selection = task_options(",".join(s.id for s in specs),
                             [s.source for s in specs if s.source], dirs)
    return Command.of("encode", encode_options, selection,
                      [("--out", str(cache_path))]).shell()


# ---- the run as a whole -------------------------------------------------------------------

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
    #: the ``estratos encode`` options that add rows to this cache (its model and recorded
    #: settings: :func:`~estratos.encode.config.options_for_cache`), for the missing-sentences
    #: hint
    encode_options: Tuple[OptionPair, ...]
    done: Set[CellKey]
    pending: Pending
    estimators: Dict[str, Any]
    #: ``--control-l2 task``: (task, layer spec, seed) -> the L2 its task cell chose
    task_l2: Dict[Tuple[str, str, int], Optional[float]] = dataclasses.field(
        default_factory=dict)

    @property
    def ids(self) -> List[str]:
        return [spec.id for spec in self.specs]

    def key(self, task: str, layer: LayerSpec, seed: int) -> CellKey:
        """The identity of one of this run's cells."""
        c = self.config
        return self.system.key(task=task, layer=layer, pooling=c.pooling, seed=seed,
                               classifier=c.classifier_name, features=c.features,
                               control=c.control_identity, given=c.given, erase=c.erase)

    @property
    def grid_cells(self) -> int:
        return len(self.specs) * len(self.layers) * len(self.config.seeds)


def run_probe(cache_path: os.PathLike | str, specs: Sequence[TaskSpec],
              data_dirs: Optional[DataDirs], out: os.PathLike | str, config: ProbeConfig, *,
              loader: Optional[TaskLoader] = None,
              resume_from: Sequence[Union[str, os.PathLike]] = (),
              progress: Optional[bool] = False) -> ProbeRun:
    """Probe every (task, layer spec, pooling, seed) cell; returns the records written as a
    :class:`ProbeRun` (a sequence of :class:`ResultRecord`, with timing).

    ``config``: the run's :class:`ProbeConfig` (:meth:`ProbeConfig.build`). Control cells
    (``control``) are other cells than the ordinary ones (same results file, both kept);
    tasks whose protocol trains nothing (cosine similarity) have no control and no
    standardized reading and are left out of such runs with a warning.

    Cells already in the results file, or in ``resume_from`` files (paths or globs), are
    skipped unless ``overwrite``. ``progress``: a bar on stderr (None: when stderr is a
    terminal). ``pooling`` None: the cache's first pooling; cls on a decoder-only model's
    cache is refused (:func:`estratos.cache.architecture.cls_refusal`).

    Raises :class:`OptionError`, :class:`CacheError` (incomplete cache),
    :class:`MissingSentences` (with the ``estratos encode`` command that adds them) or
    :class:`SettingsMismatch` (``config.expect_model``) before training; a unit that fails (bad
    task data, NaN rows) raises after the other units ended, naming its task.
    ``loader(spec, data_dirs) -> TaskData`` replaces :func:`estratos.tasks.load_task` (for
    data built in memory; with ``jobs > 1`` it must be picklable).
    """
    t_start = time.monotonic()
    plan = plan_run(cache_path, specs, out, config,
                    data_dirs=data_dirs, loader=loader,
                    resume_from=resume_from)
    if not plan.pending:
        return ProbeRun([], plan.out, time.monotonic() - t_start,
                        str(resolve_probe_device(config.device)), 0, plan.grid_cells)
    grid = ProbeGrid(plan, data_dirs, loader)
    return collect(grid, execute(grid, progress), time.monotonic() - t_start)


def plan_run(cache_path: os.PathLike | str, specs: Sequence[TaskSpec], out: os.PathLike | str,
             config: ProbeConfig, *,
             resume_from: Sequence[Union[str, os.PathLike]] = (),
             data_dirs: Optional[DataDirs] = None,
             loader: Optional[TaskLoader] = None) -> RunPlan:
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
    _check_conditions(specs, config)
    ids = [spec.id for spec in specs]
    if len(set(ids)) != len(ids):
        raise OptionError(f"--tasks: a task is selected twice ({', '.join(ids)})")
    # bad task overrides fail before any reading; the estimators feed the cost estimates
    estimators = {spec.id: task_estimator(spec, get_protocol(spec.protocol), config.classifier)
                  for spec in specs}
    cache_path = Path(cache_path)
    out_path = shard_path(out, config.shard)
    check_output_file(out_path)  # before any training, not after the first unit
    expect = {"model": config.expect_model} if config.expect_model else None
    with open_cache(cache_path, expect=expect) as cache:
        pooling = config.pooling or cache.poolings[0]
        if pooling == "cls" and cache_is_decoder(cache.attrs):
            raise cls_refusal(str(cache.attrs.get("model")))
        if pooling not in cache.poolings:
            raise OptionError(f"--pooling: {pooling!r} is not in the cache {cache_path} "
                              f"(it has {', '.join(cache.poolings)})")
        layer_specs = tuple(parse_layers(config.layers, cache.n_states, cache.states))
        if config.given is not None:
            layer_specs = given_layers(config.given, layer_specs, config.layers,
                                       cache.n_states, cache.states)
        identity = cache.identity()
        encode_options = tuple(options_for_cache(cache.attrs))
        if config.features == RAW_FEATURES and cache_is_decoder(cache.attrs):
            # measured (docs/probe.md, "Raw or standardized features"): a decoder's hidden
            # states grow in scale with depth and its last one follows the final norm, so a
            # raw probe ranks layers by their scale as much as by what they hold
            log.warning("%s is a decoder-only model's cache: raw features favour the states "
                        "whose scale suits the probe (the last one, after the final norm); "
                        "run the same command with --features standardized too (same --out) "
                        "before comparing layers", cache_path)
    done: Set[CellKey] = set()
    if not config.overwrite:
        done = done_keys([str(out_path), *expand_paths(list(resume_from))])
    plan = RunPlan(config=config.replace(pooling=pooling), cache_path=cache_path, out=out_path,
                   specs=tuple(specs), layers=layer_specs, system=CellSource.of_cache(identity),
                   encode_options=encode_options, done=done, pending={},
                   estimators=estimators)
    if done:
        grid = {plan.key(t, layer, s) for t in ids for layer in layer_specs
                for s in config.seeds}
        files: List[Union[str, Path]] = [out_path, *expand_paths(list(resume_from))]
        check_done_cells(files, specs, data_dirs, grid.__contains__, loader,
                         encoding=plan.system.encoding, source=f"the cache {cache_path}")
    plan.pending.update(pending_cells(ids, layer_specs, config.seeds, plan.key, done))
    if config.control_l2 == CONTROL_L2_TASK and plan.pending:
        plan.task_l2.update(_task_cells_l2(plan, [out_path, *expand_paths(list(resume_from))]))
    return plan


def _refuse_tasks(specs: Sequence[TaskSpec], flag: str, fits: Callable[[Any], bool],
                  needs: str, is_: str, are: str) -> None:
    """One :class:`OptionError` naming every task whose protocol does not ``fit`` ``flag``:
    ``"FLAG: NEEDS; TASK IS ... (leave it out of --tasks)"`` (``are`` for several)."""
    from estratos.protocols import get_protocol

    other = [spec.id for spec in specs if not fits(get_protocol(spec.protocol))]
    if other:
        one = len(other) == 1
        raise OptionError(f"{flag}: {needs}; {', '.join(other)} {is_ if one else are} (leave "
                          f"{'it' if one else 'them'} out of --tasks)")


def _check_conditions(specs: Sequence[TaskSpec], config: ProbeConfig) -> None:
    """``--given`` and ``--erase`` need classified tasks (class probabilities to measure
    bits with, classes to erase); ``--given`` also a dev split of the protocol's own, since
    its probes choose L2 by dev cross-entropy
    (:attr:`~estratos.protocols.Protocol.selects_on_dev`)."""
    for flag, value in (("--given", config.given), ("--erase", config.erase)):
        if value is not None:
            _refuse_tasks(specs, flag, lambda p: p.trains == Role.CLASSIFIER,
                          "classification tasks only", "is scored by correlation",
                          "are scored by correlation")
    if config.given is not None:
        _refuse_tasks(specs, "--given", lambda p: p.selects_on_dev,
                      "tasks with a dev split only (the probes choose L2 by dev cross-entropy)",
                      "chooses it by k-fold cross-validation",
                      "choose it by k-fold cross-validation")


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
                twin = by_key.get(plan.system.key(
                    task=task, layer=layer, pooling=c.pooling, seed=seed,
                    classifier=c.classifier_name, features=c.features))
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


class ProbeGrid(Grid):
    """A probe run as a grid of the shared loop (:mod:`estratos.probe.grid.loop`): columns
    are layer specs; every process opens the cache (:class:`UnitRunner`); a cell costs what
    its task's estimator trains on its vectors' width; under ``--device auto`` on a node
    with a GPU, the tasks are placed on the GPU or the CPU cores
    (:mod:`estratos.probe.grid.placement`)."""

    def __init__(self, plan: RunPlan, data_dirs: Any,
                 loader: Optional[Callable[[Any, Any], Any]]) -> None:
        config = plan.config
        super().__init__(label="probe", out=plan.out, ids=plan.ids, columns=plan.layers,
                         seeds=config.seeds, done=plan.done, jobs=config.jobs or 1,
                         threads=config.threads or 1, shard=config.shard,
                         preload=WORKER_PRELOAD)
        self.plan = plan
        self.data_dirs = data_dirs
        self.loader = loader
        self.device: Any = None
        self.both = False

    def key(self, task: str, column: LayerSpec, seed: int) -> CellKey:
        return self.plan.key(task, column, seed)

    def column_of(self, record: ResultRecord) -> LayerSpec:
        return record.layer  # type: ignore[return-value]  # a probe cell always has one

    def runner(self, stats: RunStats) -> Tuple[Callable[[Any], Any], Any]:
        plan, config = self.plan, self.plan.config
        self.device = device = resolve_probe_device(config.device)
        # --device auto on a node with a GPU: the GPU and the CPU cores at once
        self.both = both = config.device == "auto" and device.type in ACCELERATOR_DEVICES
        stats.device = f"{device} and cpu" if both else str(device)
        context = GridContext(config.replace(device="cpu" if both else str(device),
                                             threads=self.threads),
                              str(plan.cache_path), str(plan.out),
                              {spec.id: spec_state(spec) for spec in plan.specs},
                              self.data_dirs, self.loader, dict(plan.task_l2))
        return UnitRunner, context

    def check(self, shapes: Mapping[str, TaskShape], surveyed: Sequence[str]) -> None:
        _check_missing(self.plan, shapes, surveyed, self.data_dirs)

    def costs(self, shapes: Mapping[str, TaskShape], surveyed: Sequence[str]
              ) -> Dict[str, float]:
        return {t: cell_cost(shapes[t], self.plan.estimators[t]) for t in surveyed}

    def units(self, pending: Pending, shapes: Mapping[str, TaskShape],
              cost: Mapping[str, float], processes: int) -> List[WorkUnit]:
        if self.both:
            return _placed_units(self.plan, pending, shapes, cost, self.device, processes)
        return plan_units(pending, cost, processes,
                          seeds_apart=self.device.type not in FUSED_SEED_DEVICES)


def _placed_units(plan: RunPlan, pending: Pending, shapes: Mapping[str, TaskShape],
                  cost: Mapping[str, float], accelerator: Any,
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


def _check_missing(plan: RunPlan, shapes: Mapping[str, TaskShape], surveyed: Sequence[str],
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
        f"{_encode_hint(plan.cache_path, plan.encode_options, short, data_dirs)}",
        missing=total)


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
