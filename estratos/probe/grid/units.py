"""One process's share of a probe grid: surveying tasks and running work units.

Why apart from the runner: this is what every worker process runs (the runner only plans,
feeds the workers and collects); it opens the cache, loads tasks, reads only the hidden
states a unit needs, checks them for NaN, trains the unit's cells through
:func:`estratos.probe.cells.evaluate_cells` and stores each program's cells
(:func:`estratos.probe.records.store_cells`), so a killed run keeps every finished program.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    cast,
)

import numpy as np

from estratos.errors import CacheError, MissingSentences
from estratos.probe.cells import chance_levels, classifier_record, evaluate_cells
from estratos.probe.conditional import GivenFeatures, group_given, is_baseline
from estratos.probe.config import ProbeConfig
from estratos.probe.controls import control_record, control_task
from estratos.probe.erasure import Concept, concept_of
from estratos.probe.estimators.runtime import torch_runtime
from estratos.probe.features import AVG, COMBINER_WIDTH, LayerSpec, build_features
from estratos.probe.grid.plan import TaskShape, WorkUnit
from estratos.probe.records import CellSource, cell_record, store_cells
from estratos.results import ResultRecord, ResultsStore
from estratos.vocab import CONTROL_L2_TASK, CONTROL_TASK, ERASE_LENGTH

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from estratos.tasks.datadirs import DataDirs
    from estratos.tasks.types import TaskData, TaskSpec

log = logging.getLogger(__name__)

#: what one program holds of its layer specs (their vectors read from the cache, their
#: features and the trainer's example-major copy, :func:`layer_bytes`) is kept under this
#: many bytes by splitting its layer specs into groups trained one after the other (results
#: do not depend on it): two processes of ``--jobs 2`` then stay under 4 GB together
FEATURE_BUDGET_BYTES = 1_000_000_000
#: loaded tasks each process keeps for its next units (a unit of the same task skips the load)
TASKS_KEPT = 2
#: what every unit needs imported (about 1.5 s in all, torch the most): a worker imports
#: these as soon as it is spawned, while the parent is still checking options and importing
#: them itself (this module imports them lazily, so that the parent can spawn its workers
#: first)
WORKER_PRELOAD = ("torch", "estratos.probe.estimators.training", "estratos.protocols")


@dataclasses.dataclass(frozen=True)
class GridContext:
    """What every process of a run needs to survey tasks and run units (picklable: it is
    sent to each worker once): the run's configuration with its pooling, threads and device
    resolved, and where the cache, results and tasks are."""

    config: ProbeConfig
    cache_path: str
    out: str
    specs: Mapping[str, Dict[str, Any]]  # task id -> TaskSpec fields (see spec_state)
    data_dirs: Any
    loader: Optional[Callable[[Any, Any], Any]] = None
    #: ``--control-l2 task``: (task, layer spec as text, seed) -> its task cell's L2
    task_l2: Mapping[Tuple[str, str, int], Optional[float]] = dataclasses.field(
        default_factory=dict)


def _check_vectors(cache_path: Path, spec_id: str, vectors: np.ndarray,
                   sentences: Sequence[str], pooling: str) -> None:
    bad = ~np.isfinite(vectors).all(axis=(1, 2))
    if bad.any():
        first = sentences[int(np.flatnonzero(bad)[0])]
        raise CacheError(f"{cache_path}: {int(bad.sum())} row(s) needed by {spec_id} hold NaN "
                         f"or infinite {pooling} vectors, e.g. {first[:60]!r}; the cache is "
                         "corrupted: re-encode these sentences (`estratos cache verify` lists "
                         "them)")


def layer_bytes(n_rows: int, dim: int, n_examples: int, n_features: int) -> int:
    """Bytes one layer spec of a program holds at once (float32): its ``n_rows`` cached
    vectors, its examples' combined features and the trainer's example-major copy of them
    (at most every example)."""
    return 4 * (n_rows * dim + 2 * n_examples * n_features)


def _layer_chunks(layers: Sequence[LayerSpec], per_layer: int) -> List[List[LayerSpec]]:
    size = max(1, FEATURE_BUDGET_BYTES // max(1, per_layer))
    return [list(layers[i:i + size]) for i in range(0, len(layers), size)]


def spec_state(spec: Any) -> Dict[str, Any]:
    """A picklable copy of a TaskSpec's fields (its read-only mappings are not picklable)."""
    state = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        state[f.name] = dict(value) if isinstance(value, Mapping) else value
    return state


#: ``loader(spec, data_dirs) -> TaskData``: loads a task in place of
#: :func:`estratos.tasks.load_task` (tasks built in memory)
TaskLoader = Callable[["TaskSpec", Optional["DataDirs"]], "TaskData"]


def default_loader() -> TaskLoader:
    """:func:`estratos.tasks.load_task`, imported when a unit first loads a task (the task
    formats are not imported by a process that never loads one)."""
    from estratos.tasks import load_task

    # a task file's task reads its own folder: load_task takes None for it at run time
    return cast(TaskLoader, load_task)


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
        import importlib

        from estratos.cache import open_cache

        # imported before torch's threads are pinned: scipy's BLAS loaded after that trained
        # TASS1 15% slower (7.4 s against 6.4 s for 16 cells, same scores)
        for name in WORKER_PRELOAD:
            importlib.import_module(name)
        runtime = torch_runtime(self.context.config.threads or 1)
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
        task = (self.context.loader or default_loader())(spec, self.context.data_dirs)
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

    def _concept(self, task_id: str) -> Concept:
        """``--erase``'s concept in a loaded task (:func:`estratos.probe.erasure.concept_of`;
        ``length`` reads the task's token counts from the cache)."""
        _, task = self._load(task_id)
        erase = str(self.context.config.erase)
        counts = self.cache.token_counts(self._rows(task_id)) if erase == ERASE_LENGTH else None
        return concept_of(task, erase, counts)

    def survey(self, task_id: str) -> TaskShape:
        """Load the task and look its sentences up in the cache (keys only, no vectors)."""
        spec, task = self._load(task_id)
        missing = 0
        try:
            self._rows(task_id)
        except MissingSentences as exc:
            missing = exc.missing
        if not missing and self.context.config.erase is not None:
            self._concept(task_id)  # a concept that cannot be erased stops the run here
        return TaskShape(task=task_id, protocol=task.protocol,
                         sizes={name: len(split) for name, split in task.splits.items()},
                         n_classes=len(task.labels),
                         n_features=COMBINER_WIDTH[spec.combiner] * self.cache.dim,
                         missing=missing)

    def _vectors(self, task_id: str, rows: np.ndarray, layers: Sequence[LayerSpec],
                 sentences: Sequence[str]) -> Tuple[np.ndarray, List[Any]]:
        """``(vectors, positions)``: the task's vectors of the hidden states ``layers`` need
        (read from the cache for these layers only) and each layer spec's position along
        their second axis. ``avg`` is the stored mean over all hidden states; a cache that
        does not store it gets every state read and averaged (``"avg"``)."""
        ctx, pooling = self.context, self.context.config.pooling
        ints = sorted({int(layer) for layer in layers if layer != AVG})
        if AVG in layers and not self.cache.has_avg:
            states: List[Any] = list(self.cache.states)
        else:
            states = ints + ([AVG] if AVG in layers else [])
        t0 = time.perf_counter()
        vectors = self.cache.read(rows, str(pooling), states)
        log.info("%s: read %d rows x %d states in %.2fs", task_id, len(rows), len(states),
                 time.perf_counter() - t0)
        _check_vectors(Path(ctx.cache_path), task_id, vectors, sentences, str(pooling))
        position: Dict[Any, Any] = {s: i for i, s in enumerate(states)}
        if not self.cache.has_avg:
            position[AVG] = AVG  # evaluate_cells averages every state read
        return vectors, [position[layer] for layer in layers]

    def run(self, unit: WorkUnit, report: Callable[[List[ResultRecord]], None]) -> float:
        """Train every cell of ``unit``; each program's records are appended to the results
        file, then passed to ``report``. Returns the seconds the unit took."""
        t_start = time.perf_counter()
        ctx, config = self.context, self.context.config
        spec, task = self._load(unit.task)
        rows = self._rows(unit.task)
        classifier = classifier_record(task, config.classifier)
        results = ResultsStore(ctx.out)
        device = unit.device or config.device
        system = CellSource.of_cache(self.identity, device)
        n_examples = sum(len(s) for s in task.splits.values())
        n_features = COMBINER_WIDTH[spec.combiner] * self.cache.dim
        # a control task is a task of its own per seed (its labels are drawn from the seed)
        runs = ([(control_task(task, seed), (seed,)) for seed in unit.seeds]
                if config.control == CONTROL_TASK else [(task, tuple(unit.seeds))])
        # one chunk of layer specs at a time, its vectors read for it alone: the features of a
        # program (and the vectors behind them) stay under FEATURE_BUDGET_BYTES whatever the
        # width and the number of hidden states (docs/probe.md, "Memory")
        per_layer = layer_bytes(len(rows), self.cache.dim, n_examples, n_features)
        concept = None if config.erase is None else self._concept(unit.task)
        for chunk in _layer_chunks(list(unit.layers), per_layer):
            given_specs, of_group = ((), ()) if config.given is None else group_given(
                config.given, chunk, self.cache.states)
            read = list(dict.fromkeys([*chunk, *(b for b in given_specs if b is not None)]))
            vectors, read_positions = self._vectors(unit.task, rows, read, task.sentences)
            position_of = dict(zip(read, read_positions))
            positions = [position_of[layer] for layer in chunk]
            given = None if config.given is None else self._given(
                task, vectors, given_specs, of_group, position_of)
            for labelled, seeds in runs:
                self._evaluate(labelled, vectors, positions, seeds, chunk, system, classifier,
                               results, report, task.digest, device, given, concept)
            del vectors
        return time.perf_counter() - t_start

    def _given(self, task: Any, vectors: np.ndarray, specs: Sequence[Optional[LayerSpec]],
               of_group: Tuple[int, ...], position_of: Mapping[LayerSpec, Any]
               ) -> GivenFeatures:
        """``--given``'s B for one program: the given layer specs' features from the
        vectors read (their positions in ``position_of``), or the surface baseline's."""
        name = str(self.context.config.given)
        if is_baseline(name):
            from estratos.probe.baseline import given_features

            return GivenFeatures(name, given_features(task, name), of_group, (None,))
        positions = [position_of[spec] for spec in specs if spec is not None]

        def features(split: str) -> np.ndarray:
            return build_features(vectors, positions, task.splits[split], task.spec.combiner)

        return GivenFeatures(name, features, of_group, tuple(specs))

    def _evaluate(self, task: Any, vectors: np.ndarray, positions: List[Any],
                  seeds: Sequence[int], chunk: List[LayerSpec], system: CellSource,
                  classifier: Mapping[str, Any], results: ResultsStore,
                  report: Callable[[List[ResultRecord]], None], data_digest: str,
                  device: str, given: Optional[GivenFeatures] = None,
                  concept: Optional[Concept] = None) -> None:
        """Train the cells of ``chunk`` x ``seeds`` on ``device`` and store each seed's as
        soon as final (``data_digest``: of the task's data, a control task's source
        included)."""
        ctx, config = self.context, self.context.config
        chance = chance_levels(task)

        def storing(layers: List[LayerSpec]) -> Callable[[int, List[Any], float], None]:
            def store(seed: int, outcomes: List[Any], took: float) -> None:
                # each seed's cells as soon as they are final: a killed run keeps them
                seconds = took / len(layers)
                records = [cell_record(task, o, system,
                                       layer=layer if layer == AVG else int(layer),
                                       pooling=config.pooling, features=config.features,
                                       seed=seed, classifier=classifier, seconds=seconds,
                                       chance=chance, data_digest=data_digest,
                                       control=control_record(config.control, seed,
                                                              config.control_l2),
                                       given=config.given, erase=config.erase)
                           for layer, o in zip(layers, outcomes)]
                written = store_cells(ctx.out, task, records, list(outcomes),
                                      overwrite=config.overwrite, store=results)
                log.info("%s layers %s seed %d: %d cell(s) in %.1fs", task.spec.id,
                         ",".join(map(str, layers)), seed, len(records), took)
                report(written)
            return store

        if config.control_l2 != CONTROL_L2_TASK:
            evaluate_cells(task, vectors, positions, seeds, config, device=device,
                           on_seed=storing(chunk), given=given, erase=concept)
            return
        # each control cell with the L2 its task cell chose: one program per layer spec and
        # seed (their L2 values differ), the L2 grid reduced to that value
        for layer, position in zip(chunk, positions):
            for seed in seeds:
                l2 = ctx.task_l2.get((task.spec.id, str(layer), int(seed)))
                evaluate_cells(task, vectors, [position], [seed], config, device=device,
                               l2_grid=None if l2 is None else [float(l2)],
                               on_seed=storing([layer]))
