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

#: with several processes, a unit is cut while it costs more than the grid's
#: total / (jobs x SPLIT_FACTOR): the tail of a longest-first schedule then stays short
SPLIT_FACTOR = 6
#: cutting a unit's layer specs apart loses batching: a program pays a fixed Python cost per
#: optimizer step (~0.35 s per program on TASS1) that its layer specs share. Measured on
#: TASS1 (one seed, MiniLM, idle cores): 8 specs in one program 3.3 s; two programs of 4
#: specs 1.2 + 2.2 s; four of 2 specs 4.4 s in all (1.33x). A cell of TASS1 is estimated at
#: 5.9e9, so at this threshold a seed's 8 specs (4.7e10) may be halved but halves are not
#: cut again; with ``--jobs 2`` on one task, cutting to halves or quarters made the whole
#: command slower (7.8-8.2 s against 7.5 s with seeds cut apart only), since real costs
#: differ by layer (later layers train longer) where the estimates cannot tell. Seeds that
#: train one after the other anyway (on the CPU) are cut apart first, at no loss.
MIN_LAYER_CUT = 4.0e10
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
    (:func:`estratos.probe.settings.task_estimator`; None when it trains nothing): its
    :meth:`~estratos.probe.estimator.RecordedEstimator.cost_per_example` and
    :meth:`~estratos.probe.estimator.RecordedEstimator.fits_per_cell` give the cost.
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
    first), which names it in messages and statistics.
    """

    task: str
    layers: Tuple[LayerSpec, ...]
    seeds: Tuple[int, ...]
    cost: float
    index: int = 0

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
        return f"{self.task} layers {layers} seeds {seeds}"


def _halves(items: Tuple, ) -> Tuple[Tuple, Tuple]:
    mid = (len(items) + 1) // 2
    return items[:mid], items[mid:]


def _split(unit: WorkUnit, seeds_apart: bool = False,
           min_layer_cut: float = MIN_LAYER_CUT) -> List[WorkUnit]:
    """Cut a unit in two: by seeds first when they train one after the other anyway
    (``seeds_apart``), else by layer specs first (each half reads fewer hidden states); layer
    specs only while each half costs at least ``min_layer_cut``; a single cell cannot be
    cut."""
    per_cell = unit.cost / unit.n_cells
    by_layers = (len(unit.layers) > 1
                 and per_cell * len(unit.seeds) * (len(unit.layers) // 2) >= min_layer_cut)
    if len(unit.seeds) > 1 and (seeds_apart or not by_layers):
        parts = [(unit.layers, half) for half in _halves(unit.seeds)]
    elif by_layers:
        parts = [(half, unit.seeds) for half in _halves(unit.layers)]
    else:
        return [unit]
    return [WorkUnit(unit.task, layers, seeds, per_cell * len(layers) * len(seeds))
            for layers, seeds in parts]


def plan_units(pending: Mapping[str, Mapping[int, Sequence[LayerSpec]]],
               cost: Mapping[str, float], jobs: int = 1,
               seeds_apart: bool = False,
               min_layer_cut: float = MIN_LAYER_CUT) -> List[WorkUnit]:
    """Work units covering exactly the ``pending`` cells (task -> seed -> layer specs),
    longest first.

    Seeds of a task with the same pending layer specs share a unit (rectangles); with
    ``jobs > 1``, units costing more than total / (jobs x :data:`SPLIT_FACTOR`) are cut
    (:func:`_split`: seeds first when ``seeds_apart``, i.e. they train one after the other on
    this device; layer specs only into halves costing at least ``min_layer_cut``) until
    they fit or cannot be cut. The plan depends only on its arguments (ties keep the order of
    ``pending``), so it is the same on every run of the same grid.
    """
    units: List[WorkUnit] = []
    for task, by_seed in pending.items():
        groups: Dict[Tuple[LayerSpec, ...], List[int]] = {}
        for seed, layers in by_seed.items():
            if layers:
                groups.setdefault(tuple(layers), []).append(int(seed))
        for layers, seeds in groups.items():
            units.append(WorkUnit(task, layers, tuple(seeds),
                                  cost[task] * len(layers) * len(seeds)))
    if jobs > 1 and units:
        target = sum(u.cost for u in units) / (jobs * SPLIT_FACTOR)
        # max-heap on cost; the sequence number keeps ties in plan order
        heap = [(-u.cost, i, u) for i, u in enumerate(units)]
        heapq.heapify(heap)
        done: List[Tuple[int, WorkUnit]] = []
        seq = len(units)
        while heap:
            neg, i, unit = heapq.heappop(heap)
            parts = _split(unit, seeds_apart, min_layer_cut) if -neg > target else [unit]
            if len(parts) == 1:
                done.append((i, unit))
                continue
            for part in parts:
                heapq.heappush(heap, (-part.cost, seq, part))
                seq += 1
        units = [u for _, u in sorted(done, key=lambda t: t[0])]
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
