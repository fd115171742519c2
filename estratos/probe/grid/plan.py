"""The probe grid as work units: what one process trains at a time, what it costs, and which
shard of a split grid owns each cell.

Why units and not tasks: a grid's cost is very uneven (DiscoEval's DC tasks train a
2000-unit MLP for ~150 passes; the STS cosines cost nothing), so one process per task leaves
most cores idle while a few long tasks run. A unit is a (task, layer specs, seeds) rectangle
of cells that one process trains as one batched program; big tasks are cut into several units
so that ``--jobs`` processes stay busy until the end, and units start longest first (the
classic longest-processing-time rule, whose finish is at most a third above the optimum and
usually much closer).

Costs are *estimates* in arbitrary units (roughly floating-point operations), from the
task's sizes, features, classes, protocol folds and epoch budget; they only order and balance
work, they never change a result. Sharding (``probe --shard I/N``) uses the same estimates on
the whole grid, independently of ``--jobs`` and of what is already done, so every shard of one
grid agrees on who owns which cell without talking to the others.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union

from estratos.cache import schema
from estratos.errors import OptionError
from estratos.vocab import LayerSpec

#: (task id, layer spec, seed): one cell of a grid (pooling, classifier and model are fixed
#: for a run)
Cell = Tuple[str, LayerSpec, int]

#: a *program* (the layer specs of a unit trained together: one per seed on the CPU, one for
#: all seeds on a GPU) costs about this many of its cells on top of its cells' own cost: the
#: per-step work its layer specs share (batch gathers, Python and dispatch per optimizer
#: step, the dev passes). Measured with MiniLM's vectors on idle cores, one seed, seconds
#: ~ a + b x layer specs: TASS1 (split, 3 classes) a = 0.37, b = 0.37 (8 specs 3.3 s, two
#: programs of 4 1.2 + 2.2 s, four of 2 4.4 s in all); SQC (10-fold, 6 classes) a = 5.4,
#: b = 5.0 (8 specs 45.5 s, one spec 10.4 s on average).
PROGRAM_OVERHEAD_CELLS = 1.0
#: a shard block (task, seed: all its layer specs) costing more than total / (count x this)
#: is split into single cells before blocks are dealt to shards
SHARD_SPLIT_FACTOR = 2


@dataclasses.dataclass(frozen=True)
class TaskShape:
    """What planning needs to know about one task, found by reading its data once.

    ``sizes``: examples per split; ``n_classes``: 0 for regression/cosine tasks;
    ``n_features``: probe input width (combiner width x vector dimension); ``missing``:
    sentences the cache lacks (the run stops before training when any task has some).
    """

    task: str
    protocol: str
    sizes: Mapping[str, int]
    n_classes: int
    n_features: int
    missing: int = 0


def cell_cost(shape: TaskShape, estimator: Optional[Any]) -> float:
    """Estimated cost of one (layer spec, seed) cell of a task (see the module docstring).

    ``estimator``: what the task's protocol trains, with the task's overrides
    (:func:`estratos.probe.estimators.settings.task_estimator`; None when it trains nothing): its
    :meth:`~estratos.probe.estimators.registry.RecordedEstimator.cost_per_example` and
    :meth:`~estratos.probe.estimators.registry.RecordedEstimator.fits_per_cell` give the cost.
    """
    from estratos.protocols import get_protocol

    f = shape.n_features
    protocol = get_protocol(shape.protocol)
    if estimator is None:  # nothing trained (STS cosines): a pass over the examples
        return float(sum(shape.sizes.values()) * f * 4)
    grid, k = estimator.fits_per_cell()
    per_example = estimator.cost_per_example(f, max(2, shape.n_classes))
    return float(protocol.examples_trained(shape.sizes, grid, k) * per_example)


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """A (task, layer specs, seeds) rectangle of cells trained as one program by one process.

    ``cost``: estimated cost of all its cells; ``index``: its place in the plan (longest
    first), which names it in messages and statistics; ``device``: where it trains when the
    run places units on several devices (:mod:`estratos.probe.grid.placement`), None for
    the run's device.
    """

    task: str
    layers: Tuple[LayerSpec, ...]
    seeds: Tuple[int, ...]
    cost: float
    index: int = 0
    device: Optional[str] = None

    @property
    def n_cells(self) -> int:
        return len(self.layers) * len(self.seeds)

    def cells(self) -> Iterator[Cell]:
        for seed in self.seeds:
            for layer in self.layers:
                yield (self.task, layer, seed)

    def describe(self) -> str:
        layers = ",".join(str(layer) for layer in self.layers)
        seeds = ",".join(str(s) for s in self.seeds)
        where = f" on {self.device}" if self.device else ""
        return f"{self.task} layers {layers} seeds {seeds}{where}"


def unit_cost(per_cell: float, n_layers: int, n_seeds: int, seeds_apart: bool) -> float:
    """Estimated cost of a unit of ``n_layers`` layer specs x ``n_seeds`` seeds whose cells
    cost ``per_cell`` each: its cells plus :data:`PROGRAM_OVERHEAD_CELLS` per program (one
    per seed when ``seeds_apart``, i.e. they train one after the other, else one)."""
    programs = n_seeds if seeds_apart else 1
    return per_cell * (n_layers * n_seeds + PROGRAM_OVERHEAD_CELLS * programs)


def makespan(costs: Sequence[float], jobs: int) -> float:
    """When the last of ``jobs`` processes ends if each takes the next unit, longest first,
    as soon as it is free (what :mod:`estratos.probe.grid.pool` does), for these costs."""
    return _schedule(costs, jobs)[0]


def _schedule(costs: Sequence[float], jobs: int) -> Tuple[float, int]:
    """``(makespan, processes that end at it)`` of the longest-first schedule: a plan is
    better when it ends sooner, or as soon with fewer processes ending last (a tie that one
    more cut can then break)."""
    loads = [0.0] * max(1, jobs)
    for cost in sorted(costs, reverse=True):
        heapq.heapreplace(loads, loads[0] + cost)
    end = max(loads)
    return end, sum(1 for load in loads if load >= end * (1 - 1e-9))


def _halves(items: Tuple) -> Tuple[Tuple, Tuple]:
    mid = (len(items) + 1) // 2
    return items[:mid], items[mid:]


def _split(unit: WorkUnit, per_cell: float, seeds_apart: bool) -> List[WorkUnit]:
    """``unit`` cut apart: into its seeds when they train one after the other anyway
    (``seeds_apart``: no program is added; all at once, so that an odd number of seeds
    does not leave one part twice the other's size), else into two halves of its layer
    specs (each reads fewer hidden states), or of its seeds when it has one layer spec; a
    single cell cannot be cut (returns ``[unit]``)."""
    parts: List[Tuple[Tuple[LayerSpec, ...], Tuple[int, ...]]]
    if len(unit.seeds) > 1 and seeds_apart:
        parts = [(unit.layers, (seed,)) for seed in unit.seeds]
    elif len(unit.layers) > 1:
        parts = [(half, unit.seeds) for half in _halves(unit.layers)]
    elif len(unit.seeds) > 1:
        parts = [(unit.layers, half) for half in _halves(unit.seeds)]
    else:
        return [unit]
    return [WorkUnit(unit.task, layers, seeds,
                     unit_cost(per_cell, len(layers), len(seeds), seeds_apart))
            for layers, seeds in parts]


#: planning tries cutting only this many of the largest units per step (enough: cutting a
#: small unit cannot shorten a schedule its large ones set)
CUT_CANDIDATES = 8


def _better(a: Tuple[float, int], b: Tuple[float, int]) -> bool:
    """Whether schedule ``a`` (:func:`_schedule`) ends sooner than ``b``, or as soon with
    fewer processes ending last."""
    if a[0] < b[0] * (1 - 1e-9):
        return True
    return a[0] <= b[0] * (1 + 1e-9) and a[1] < b[1]


def plan_units(pending: Mapping[str, Mapping[int, Sequence[LayerSpec]]],
               cost: Mapping[str, float], jobs: int = 1,
               seeds_apart: bool = False) -> List[WorkUnit]:
    """Work units covering exactly the ``pending`` cells (task -> seed -> layer specs;
    ``cost``: task -> estimated cost of one cell), longest first.

    Seeds of a task with the same pending layer specs share a unit (rectangles). With
    ``jobs > 1`` a unit is cut (:func:`_split`) only where that shortens the estimated
    schedule (:func:`makespan`), or leaves fewer processes ending last at the same time (so
    that two equal units can both be cut): each cut that adds a program also adds its
    overhead (:func:`unit_cost`), so a task is cut only as far as splitting pays. Each step
    takes the best of the cuts of the largest units. (Cutting a
    task's grid into single cells, as a fixed size limit did, made ``--jobs 2`` slower than
    ``--jobs 1`` on SQC: 176 s of work against 92 s.) The plan depends only on its arguments
    (ties keep the order of ``pending``), so it is the same on every run of the same grid.
    """
    units: List[WorkUnit] = []
    for task, by_seed in pending.items():
        groups: Dict[Tuple[LayerSpec, ...], List[int]] = {}
        for seed, layers in by_seed.items():
            if layers:
                groups.setdefault(tuple(layers), []).append(int(seed))
        for layers, seeds in groups.items():
            units.append(WorkUnit(task, layers, tuple(seeds),
                                  unit_cost(cost[task], len(layers), len(seeds), seeds_apart)))
    if jobs > 1 and units:
        span = _schedule([u.cost for u in units], jobs)
        while True:
            order = sorted(range(len(units)), key=lambda i: (-units[i].cost, i))
            best = None
            for i in order[:CUT_CANDIDATES]:
                parts = _split(units[i], cost[units[i].task], seeds_apart)
                if len(parts) == 1:
                    continue
                trial = units[:i] + parts + units[i + 1:]
                trial_span = _schedule([u.cost for u in trial], jobs)
                if _better(trial_span, span) and (best is None or _better(trial_span, best[0])):
                    best = (trial_span, trial)
            if best is None:
                break
            span, units = best
    order = sorted(range(len(units)), key=lambda i: (-units[i].cost, i))
    return [dataclasses.replace(units[i], index=n) for n, i in enumerate(order)]


# ---- shards ----------------------------------------------------------------------------------

def shard_path(out: Union[str, os.PathLike], shard: Optional[Tuple[int, int]]) -> Path:
    """The results file of shard ``(I, N)``: ``<stem>.shard-I-of-N<suffix>`` beside ``out``
    (``out`` itself when not sharded). One file per shard: no shared-file locking is needed
    across the nodes of a cluster (NFS locks are unreliable)."""
    if shard is None:
        return Path(out)
    return schema.shard_path(out, shard[0], shard[1])  # the naming rule of cache shards


def shard_cells(tasks: Sequence[str], layers: Sequence[LayerSpec], seeds: Sequence[int],
                cost: Mapping[str, float], shard: Tuple[int, int]) -> Set[Cell]:
    """The cells of the whole grid (``tasks`` x ``layers`` x ``seeds``) that shard
    ``(I, N)`` owns.

    Blocks of (task, seed, every layer spec) are dealt longest first to the least loaded
    shard (ties: the lower shard number); a block costing more than total / (N x
    :data:`SHARD_SPLIT_FACTOR`) is dealt cell by cell. The split depends only on the grid and
    the cost estimates, never on ``--jobs`` or on what is done, so all shards agree, their
    union is the grid and no cell belongs to two shards.
    """
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise OptionError(f"--shard: need N >= 1 and 0 <= I < N, got {index}/{count}")
    layers = tuple(layers)
    total = sum(cost[t] for t in tasks) * len(layers) * len(seeds)
    limit = total / (count * SHARD_SPLIT_FACTOR)
    blocks: List[Tuple[float, List[Cell]]] = []
    for task in tasks:
        for seed in seeds:
            block = cost[task] * len(layers)
            if block > limit and len(layers) > 1:
                blocks += [(cost[task], [(task, layer, seed)]) for layer in layers]
            else:
                blocks.append((block, [(task, layer, seed) for layer in layers]))
    loads = [(0.0, s) for s in range(count)]  # heap of (load, shard number)
    owned: Set[Cell] = set()
    for i in sorted(range(len(blocks)), key=lambda i: (-blocks[i][0], i)):
        load, s = heapq.heappop(loads)
        if s == index:
            owned.update(blocks[i][1])
        heapq.heappush(loads, (load + blocks[i][0], s))
    return owned
