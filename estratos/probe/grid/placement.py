"""Which device trains each task of a grid when the node has a GPU and many cores.

Why: a probe program pays a fixed cost per optimizer step (a few dozen small operations,
launched from Python) and the cost of its arithmetic. On a GPU the arithmetic is almost free
and the fixed cost is not; on a CPU core the fixed cost is small and the arithmetic is not.
Measured on one H100 node (16 cores, 2026-11-27, docs/probe.md): DC's 2,000-unit MLP took
13.7 s a cell on the GPU against 336-399 s on a core, WordContent's 1,000 classes 0.8 s
against 56 s, while the small tasks ran 2-5x slower on the GPU than on a core. So under
``--device auto`` with a GPU, the tasks whose arithmetic dominates train on the GPU while the
others train at the same time in CPU worker processes.

The cost model (:class:`DeviceSpeed`): a program's seconds on a device = its optimizer steps x
the device's fixed cost per step + its floating-point operations / the device's rate. Steps and
flops come from the estimator (:meth:`RecordedEstimator.step_work`) and the protocol
(:meth:`Protocol.examples_trained`); the two constants of each device are measured when the run
starts (:func:`measure_speed`: a few steps of the real trainer at two sizes, well under a
second), or taken from :data:`STATED_SPEEDS`. Placement changes where a cell trains, never
its numbers beyond what the device changes (docs/probe.md, "Devices"); each cell records its
device.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from estratos.probe.grid.plan import TaskShape

log = logging.getLogger(__name__)

#: where a task is placed
CPU, ACCELERATOR = "cpu", "accelerator"


@dataclasses.dataclass(frozen=True)
class DeviceSpeed:
    """What a probe program costs on one device (one process): ``step_seconds`` per optimizer
    step whatever its size, and ``flops`` float32 operations per second on top."""

    device: str
    step_seconds: float
    flops: float
    measured: bool = False

    def seconds(self, steps: float, flops: float) -> float:
        return steps * self.step_seconds + flops / self.flops

    def describe(self) -> str:
        how = "measured" if self.measured else "stated"
        return (f"{self.device}: {self.step_seconds * 1e3:.2f} ms a step + "
                f"{self.flops / 1e9:,.0f} GFLOP/s ({how})")


#: stated speeds, used when a measurement fails; from the H100 node's runs of 2026-11-27
#: (one core of its CPU: WordContent 448 s for 3.9k steps of 4.7 GFLOP, Tense 1.4 ms a
#: step; the GPU: WordContent 1.7 ms a step with next to no arithmetic)
STATED_SPEEDS: Mapping[str, DeviceSpeed] = {
    "cpu": DeviceSpeed("cpu", 1.2e-3, 40e9),
    "cuda": DeviceSpeed("cuda", 1.7e-3, 8e12),
}


@dataclasses.dataclass(frozen=True)
class TaskWork:
    """A task's training work per cell, apart by what each device pays for: optimizer
    steps of one program (the L2 grid and the layer specs train together; k folds once on
    devices that fit them as one program) and floating-point operations of one cell."""

    steps_apart: float      # steps of one seed's program, folds one after the other
    steps_together: float   # steps of one program whose folds train at once
    flops: float            # one cell's operations (every fit it makes)
    seeds_share_data: bool  # whether the seeds may train as one program on an accelerator
    trains: bool            # False: nothing is trained (a cosine), the CPU scores it


def task_work(shape: TaskShape, estimator: Optional[Any]) -> TaskWork:
    """The :class:`TaskWork` of one task (``estimator``: what its protocol trains, None when
    it trains nothing)."""
    from estratos.protocols import get_protocol

    protocol = get_protocol(shape.protocol)
    work = None if estimator is None else estimator.step_work(
        shape.n_features, max(2, shape.n_classes))
    if work is None:
        return TaskWork(0.0, 0.0, 0.0, False, False)
    steps_per_example, flops_per_example = work
    grid, k = estimator.fits_per_cell()  # type: ignore[union-attr]
    apart = protocol.examples_trained(shape.sizes, 1, k)
    together = protocol.examples_trained(shape.sizes, 1, k, folds_together=True)
    return TaskWork(steps_apart=apart * steps_per_example,
                    steps_together=together * steps_per_example,
                    flops=protocol.examples_trained(shape.sizes, grid, k) * flops_per_example,
                    seeds_share_data=bool(protocol.seeds_share_data), trains=True)


def seconds_on(work: TaskWork, speed: DeviceSpeed, n_layers: int, n_seeds: int) -> float:
    """Estimated seconds of ``n_layers`` x ``n_seeds`` cells of a task trained on the device
    of ``speed`` (one program per seed on the CPU; the seeds fused where they share their
    data, and the folds at once, on an accelerator)."""
    if not work.trains:
        return 0.0
    if speed.device == "cpu":
        steps = n_seeds * work.steps_apart
    else:
        steps = (1 if work.seeds_share_data else n_seeds) * work.steps_together
    return speed.seconds(steps, n_layers * n_seeds * work.flops)


#: a move to the accelerator may lengthen the estimated run by this share when it takes work
#: off the CPU: the estimates are rough (measured on an H100 node: DC's MLP took 1.6x its
#: estimate on the GPU, WordContent 1.35x on the cores), and a task the accelerator runs
#: 50x faster is better there even when the estimate says the cores would end first
ESTIMATE_SLACK = 0.10


def place_tasks(seconds: Mapping[str, Tuple[float, float, float]],
                cpu_lanes: int) -> Dict[str, str]:
    """task -> :data:`CPU` or :data:`ACCELERATOR`, from each task's estimated ``(CPU
    seconds, accelerator seconds, CPU seconds of its smallest piece)``.

    Starts with every task on the CPU lanes and moves tasks to the accelerator, the ones it
    speeds up most first, while the estimated end of the run stays within
    :data:`ESTIMATE_SLACK` of the best seen and the work left on the CPU shrinks. The end is
    the later of the accelerator's (its load: one process drives it) and the CPU lanes'
    (their total over ``cpu_lanes``, or their longest piece, which cannot be cut). With no
    CPU lane (one process drives both), each task goes where it is faster. The result
    depends only on the arguments."""
    if cpu_lanes <= 0:
        return {t: ACCELERATOR if acc < cpu else CPU for t, (cpu, acc, _) in seconds.items()}
    place = dict.fromkeys(seconds, CPU)

    def end(where: Mapping[str, str]) -> float:
        on_cpu = [seconds[t] for t in where if where[t] == CPU]
        cpu_end = max(sum(c for c, _, _ in on_cpu) / cpu_lanes,
                      max((piece for _, _, piece in on_cpu), default=0.0))
        return max(cpu_end, sum(seconds[t][1] for t in where if where[t] == ACCELERATOR))

    order = sorted((t for t, (c, a, _) in seconds.items() if a < c),
                   key=lambda t: (-seconds[t][0] / max(seconds[t][1], 1e-9), t))
    best = end(place)
    for task in order:  # most sped up first: the accelerator's time goes where it pays most
        trial = dict(place)
        trial[task] = ACCELERATOR
        trial_end = end(trial)
        if trial_end <= best * (1 + ESTIMATE_SLACK):
            place, best = trial, min(best, trial_end)
    return place


def measure_speed(device: Any, repeats: int = 2) -> DeviceSpeed:
    """The :class:`DeviceSpeed` of one process on ``device``, timed on the real trainer: a
    pass of a small program (8 layer specs x 4 L2 values of a 2-class linear probe on 64
    features: next to no arithmetic, so its steps' fixed cost) and of a large one (wide
    features, many classes: the rate), each after a warm-up, best of ``repeats``. Well
    under a second on a CPU core or a GPU; falls back to :data:`STATED_SPEEDS` if it fails."""
    import torch

    device = torch.device(device)
    stated = STATED_SPEEDS.get(device.type, STATED_SPEEDS["cpu"])
    try:
        small = _time_pass(device, n_features=64, n_classes=2, steps=24, repeats=repeats)
        if device.type == "cpu":  # about 20 ms a step on one core
            large = _time_pass(device, n_features=1024, n_classes=64, steps=4,
                               repeats=repeats)
        else:  # enough arithmetic to stand out of a GPU step's fixed cost
            large = _time_pass(device, n_features=2048, n_classes=1024, steps=24,
                               repeats=repeats)
    except Exception as exc:  # noqa: BLE001 - a measurement must never stop a run
        log.warning("could not time the probe's steps on %s (%s); using stated speeds",
                    device, exc)
        return stated
    step = max(small[0] / small[1], 1e-6)
    extra = large[0] - large[1] * step
    flops = large[2] / extra if extra > 0 else stated.flops
    return DeviceSpeed(device.type, step, flops, measured=True)


def _time_pass(device: Any, n_features: int, n_classes: int, steps: int,
               repeats: int) -> Tuple[float, int, float]:
    """(seconds, steps, flops) of one training pass of a 8 x 4-model linear program."""
    import numpy as np
    import torch

    from estratos.probe.estimators.training import (
        StackedNet,
        cross_entropy_grad,
        train_stacked,
    )

    groups, l2_values, batch = 8, 4, 64
    n = steps * batch
    gen = np.random.default_rng(0)
    x = torch.from_numpy(gen.standard_normal((groups, n, n_features), dtype=np.float32))
    labels = gen.integers(0, n_classes, n)
    onehot = torch.nn.functional.one_hot(torch.from_numpy(labels), n_classes).float()
    x_dev = x[:, :batch]
    l2 = np.full((groups, l2_values), 1e-4)

    def score(logits: torch.Tensor, rows: Optional[np.ndarray]) -> np.ndarray:
        return logits.sum(dim=(1, 3)).double().cpu().numpy() * 0.0  # waits for the device

    def once() -> float:
        net = StackedNet(groups, l2_values, n_features, n_classes, 0, 0.0, [0], device)
        t0 = time.perf_counter()
        train_stacked(net, x, onehot, x_dev, l2, grad_fn=cross_entropy_grad, score_fn=score,
                      batch_size=batch, epoch_size=1, max_epoch=0, tenacity=0, lr=1e-3)
        return time.perf_counter() - t0

    once()  # warm-up: kernels, allocator, cuBLAS handles
    seconds = min(once() for _ in range(repeats))
    flops = 6.0 * n * groups * l2_values * n_features * n_classes
    return seconds, steps, flops


def describe_placement(place: Mapping[str, str],
                       seconds: Mapping[str, Tuple[float, float, float]],
                       accelerator: str) -> Sequence[str]:
    """One log line per task: where it trains and the estimates that put it there."""
    return [f"{t} on {accelerator if where == ACCELERATOR else 'the CPU workers'} "
            f"(estimated {c:.1f} s on a core, {a:.1f} s on {accelerator})"
            for t, where in place.items() for c, a, _ in [seconds[t]]]
