"""How long a probe grid has left, from what its finished work units really took.

Why not the estimates alone: a unit's estimated cost (:func:`estratos.probe.grid.plan.cell_cost`)
orders and balances the work, but it is in arbitrary units and misses what does not grow with
the training (loading a task, reading its hidden states, starting a program). Units run longest
first, so the first ones to finish are the big ones, whose seconds per estimated cost are the
smallest: extrapolating their rate to the many small units left would make the bar say 0:18 when
55 s are left (measured on a real grid). Here every finished unit is a measurement: the seconds
a unit takes are fitted as ``a * cost + b`` (``a``: seconds per unit of estimated cost, ``b``:
the fixed part per unit; both >= 0, least squares), which scales the prior by observed /
predicted and adds the overhead the prior lacks. The units still to run are then laid out the
way the scheduler runs them (longest first, each on the next free process, after what the
running units have left), and the estimate is when the last process ends.

The clock is a parameter, so tests drive it by hand.
"""

from __future__ import annotations

import heapq
import time
from typing import Callable, Dict, Hashable, List, Mapping, Optional, Tuple


class GridEta:
    """Seconds left in a grid of work units run on ``processes`` processes.

    ``costs``: each unit's estimated cost (any positive scale). Feed it :meth:`started` (when
    a unit begins, if known), :meth:`progress` (the fraction of its cells written) and
    :meth:`finished` (with the seconds it took); :meth:`seconds_left` is None until some work
    has been measured.
    """

    def __init__(self, costs: Mapping[Hashable, float], processes: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.costs = {key: max(0.0, float(cost)) for key, cost in costs.items()}
        self.processes = max(1, int(processes))
        self.clock = clock
        self.t0 = clock()
        self.started_at: Dict[Hashable, float] = {}
        self.fraction: Dict[Hashable, float] = {}
        self.took: Dict[Hashable, float] = {}

    def started(self, key: Hashable) -> None:
        self.started_at.setdefault(key, self.clock())

    def progress(self, key: Hashable, fraction: float) -> None:
        self.fraction[key] = min(1.0, max(self.fraction.get(key, 0.0), float(fraction)))

    def finished(self, key: Hashable, seconds: float) -> None:
        self.took[key] = max(0.0, float(seconds))
        self.fraction[key] = 1.0

    def model(self) -> Optional[Tuple[float, float]]:
        """``(a, b)``: a unit takes ``a * cost + b`` seconds, fitted on the finished units;
        before any has finished, ``a`` from the cells written so far over the elapsed busy
        time (``b = 0``); None when nothing has been measured."""
        points = [(self.costs[k], s) for k, s in self.took.items()]
        if points:
            return _fit_nonnegative(points)
        done = sum(self.costs[k] * f for k, f in self.fraction.items())
        if done <= 0:
            return None
        busy = (self.clock() - self.t0) * min(self.processes, max(1, len(self.fraction)))
        return busy / done, 0.0

    def seconds_left(self) -> Optional[float]:
        """When the last process should end, from now; None before any measurement."""
        fitted = self.model()
        if fitted is None:
            return None
        a, b = fitted
        now = self.clock()
        lanes: List[float] = []
        waiting: List[float] = []
        for key, cost in self.costs.items():
            if key in self.took:
                continue
            predicted = a * cost + b
            if key in self.started_at:
                lanes.append(max(0.0, predicted - (now - self.started_at[key])))
            elif self.fraction.get(key, 0.0) > 0:  # running, start unknown: by its cells
                lanes.append(predicted * (1.0 - self.fraction[key]))
            else:
                waiting.append(predicted)
        lanes = sorted(lanes)[-self.processes:]  # more running than processes cannot be
        lanes += [0.0] * (self.processes - len(lanes))
        heapq.heapify(lanes)
        for seconds in sorted(waiting, reverse=True):  # longest first, next free process
            heapq.heappush(lanes, heapq.heappop(lanes) + seconds)
        return max(lanes)


def _fit_nonnegative(points: List[Tuple[float, float]]) -> Tuple[float, float]:
    """Least squares ``seconds = a * cost + b`` with ``a, b >= 0``: the unconstrained fit
    when it is admissible, else the better of the two one-parameter fits on the boundary."""
    n = len(points)
    sx = sum(c for c, _ in points)
    sy = sum(s for _, s in points)
    sxx = sum(c * c for c, _ in points)
    sxy = sum(c * s for c, s in points)
    det = n * sxx - sx * sx
    if n >= 2 and det > 1e-12 * max(1.0, sxx * n):
        a = (n * sxy - sx * sy) / det
        b = (sy - a * sx) / n
        if a >= 0 and b >= 0:
            return a, b

    def sse(a: float, b: float) -> float:
        return sum((a * c + b - s) ** 2 for c, s in points)

    through_zero = (sxy / sxx if sxx > 0 else 0.0, 0.0)  # b = 0: the plain ratio
    constant = (0.0, sy / n)  # a = 0: every unit the mean
    return min((through_zero, constant), key=lambda ab: sse(*ab))
