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

import logging
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from estratos import errors as _errors
from estratos.errors import EstratosError, MissingSentences, OptionError
from estratos.options import (available_cores, check_output_file, parse_layers, parse_seeds,
                              positive_int, resolve_shard)
from estratos.probe.cells import FUSED_SEED_DEVICES, Classifier, resolve_probe_device
from estratos.probe.estimator import DEFAULT_CLASSIFIER, get_estimator
from estratos.probe.grid import (TaskShape, WorkUnit, cell_cost, plan_units, shard_cells,
                                 shard_path)
from estratos.probe.outcome import ProbeRun, UnitStat, summarize
from estratos.probe.progress import GridProgress
from estratos.probe.records import System
from estratos.probe.scheduler import make_executor
from estratos.probe.settings import check_classifier, task_estimator
from estratos.probe.units import WORKER_PRELOAD, GridContext, UnitRunner, spec_state
from estratos.results import ResultRecord
from estratos.results.provenance import check_done_cells
from estratos.results.reader import done_keys, expand_paths
from estratos.results.record import PERMUTED_LABELS
from estratos.vocab import DEFAULT_POOLING, DEFAULT_SEED, LayerSpec

log = logging.getLogger(__name__)

#: names that moved to their own modules and are still imported from here
__all__ = ["GridContext", "ProbeRun", "UnitRunner", "UnitStat", "run_probe", "summarize"]


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
              shard: Union[str, Tuple[int, int], None] = None,
              resume_from: Sequence[Union[str, os.PathLike]] = (),
              progress: Optional[bool] = False, control_labels: bool = False,
              mdl: bool = False) -> ProbeRun:
    """Probe every (task, layer spec, pooling, seed) cell; returns the records written as a
    :class:`ProbeRun` (a sequence of :class:`ResultRecord`, with timing).

    ``control_labels``: the run's cells are control cells, trained on permuted training
    and dev labels (:mod:`estratos.probe.controls`); they are other cells than the ordinary
    ones (same results file, both kept). Tasks whose protocol trains nothing (cosine
    similarity) have no control and are left out with a warning. ``mdl``: every
    classification cell also records its online code length (:mod:`estratos.probe.mdl`;
    estimators with ``fit_subsets``, e.g. senteval).

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
    if control_labels:
        specs = _controllable(specs)
    ids = [spec.id for spec in specs]
    if len(set(ids)) != len(ids):
        raise OptionError(f"--tasks: a task is selected twice ({', '.join(ids)})")
    classifier_name = check_classifier(classifier)
    if mdl and not hasattr(get_estimator(classifier) if isinstance(classifier, str)
                           else classifier, "fit_subsets"):
        raise OptionError(f"--mdl: the {classifier_name} classifier cannot train MDL's block "
                          "models; use --classifier senteval")
    # bad task overrides fail before any reading; the estimators feed the cost estimates
    estimators = {spec.id: task_estimator(spec, get_protocol(spec.protocol), classifier)
                  for spec in specs}
    where = resolve_shard(shard)
    cache_path = Path(cache_path)
    out_path = shard_path(out, where)
    check_output_file(out_path)  # before any training, not after the first unit
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

    control = PERMUTED_LABELS if control_labels else None

    def key(task: str, layer: LayerSpec, seed: int) -> tuple:
        return system.key(task, layer, pooling, seed, classifier_name, control)

    if done:  # a cell computed on other data than the task's now is not skipped silently
        grid = {key(t, layer, s) for t in ids for layer in layer_specs for s in seeds_t}
        files: List[Union[str, Path]] = [out_path]
        files += expand_paths(list(resume_from)) if resume_from else []
        check_done_cells(files, specs, data_dirs, grid.__contains__, loader)
    pending = _pending_cells(ids, layer_specs, seeds_t, key, done)
    grid_cells = len(ids) * len(layer_specs) * len(seeds_t)
    if not pending:
        return ProbeRun([], out_path, time.monotonic() - t_start,
                        str(resolve_probe_device(device)), 0, grid_cells)
    # a shard must know the whole grid's costs; an unsharded run only its pending tasks'
    to_survey = ids if where is not None else list(pending)
    n_cells = sum(len(v) for by_seed in pending.values() for v in by_seed.values())
    processes = max(1, min(jobs, n_cells))
    if threads is None:
        threads = 1
    if threads * processes > available_cores():
        log.warning("--jobs %d x --threads %d exceeds the %d available cores; expect "
                    "slow-downs", processes, threads, available_cores())
    records: List[ResultRecord] = []
    stats: List[UnitStat] = []
    failures: List[Tuple[str, EstratosError]] = []
    bar: Optional[GridProgress] = None
    todo = n_cells
    try:
        # the workers start now and import torch while this process does the same below
        # (resolving the device, building its own runner): the imports overlap
        with make_executor(processes, preload=WORKER_PRELOAD) as executor:
            device_name = str(resolve_probe_device(device))
            context = GridContext(str(cache_path), str(out_path), pooling, classifier,
                                  bool(sequential), bool(overwrite), threads, device_name,
                                  {spec.id: spec_state(spec) for spec in specs}, data_dirs,
                                  loader, bool(control_labels), bool(mdl))
            executor.start(UnitRunner, context)
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
            units = plan_units(pending, cost, executor.processes,
                               seeds_apart=resolve_probe_device(device_name).type
                               not in FUSED_SEED_DEVICES)
            todo = sum(u.n_cells for u in units)
            if where is not None:
                grid_cells = len(owned)
            log.info("%d cell(s) in %d unit(s) on %d process(es)",
                     sum(u.n_cells for u in units), len(units), executor.processes)
            show = sys.stderr.isatty() if progress is None else bool(progress)
            bar = GridProgress(units, executor.processes, show,
                               lines=progress is None and not show)
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


def _controllable(specs: Sequence[Any]) -> List[Any]:
    """The tasks that can have control-label cells: those whose protocol trains a model
    (a cosine similarity has nothing to permute); the others are named in a warning."""
    from estratos.protocols import get_protocol

    kept = [s for s in specs if get_protocol(s.protocol).trains is not None]
    left = [s.id for s in specs if s not in kept]
    if left and not kept:
        raise OptionError(f"--control-labels: no selected task trains a probe "
                          f"({', '.join(left)} {'scores' if len(left) == 1 else 'score'} an "
                          "untrained cosine)")
    if left:
        log.warning("--control-labels: no control for %s (an untrained cosine: nothing to "
                    "permute)", ", ".join(left))
    return kept


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
               stats: List[UnitStat], bar: GridProgress) -> List[Tuple[str, EstratosError]]:
    """Run every unit, collecting records and statistics; returns the failures (task, the
    error as raised), raised by the caller once every other unit has ended."""
    by_index = {u.index: u for u in units}
    written: Dict[int, int] = {}
    failures: List[Tuple[str, EstratosError]] = []

    def on_event(kind: str, key: Any, value: Any) -> None:
        unit = by_index[key]
        if kind == "start":
            bar.started(unit)
        elif kind == "cells":
            records.extend(value)
            written[key] = written.get(key, 0) + len(value)
            bar.update(unit, len(value))
        elif kind == "done":
            stats.append(UnitStat(unit, float(value), written.get(key, 0)))
            bar.finished(unit, float(value))
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
