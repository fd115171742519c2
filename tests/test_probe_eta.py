"""The probe's ETA (estratos.probe.grid.eta.GridEta) on a fake clock: a simulated grid whose units
take ``0.2 s x cost + 6 s`` (a per-unit overhead the estimates do not have), run longest first
on two processes, as the scheduler runs them."""

from __future__ import annotations

import heapq
from typing import Dict, List, Tuple

import pytest

from estratos.probe.grid.eta import GridEta, _fit_nonnegative


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def schedule(costs: Dict[int, float], processes: int, seconds) -> List[Tuple[float, str, int]]:
    """(time, "start"|"done", unit) events of a longest-first run on ``processes`` processes."""
    events = []
    lanes = [(0.0, p) for p in range(processes)]
    for unit in sorted(costs, key=lambda u: -costs[u]):
        free, p = heapq.heappop(lanes)
        events += [(free, "start", unit), (free + seconds(costs[unit]), "done", unit)]
        heapq.heappush(lanes, (free + seconds(costs[unit]), p))
    return sorted(events, key=lambda e: (e[0], e[1] == "start"))


COSTS = {0: 200.0, 1: 180.0, **{i: 10.0 + i for i in range(2, 40)}}


def true_seconds(cost: float) -> float:
    return 0.2 * cost + 6.0


def test_the_estimate_follows_what_the_finished_units_took():
    clock = Clock()
    eta = GridEta(COSTS, 2, clock)
    events = schedule(COSTS, 2, true_seconds)
    end = max(t for t, _, _ in events)
    assert eta.seconds_left() is None  # nothing measured yet
    seen, n_done, done_cost = [], 0, 0.0
    for t, kind, unit in events:
        clock.now = t
        if kind == "start":
            eta.started(unit)
            continue
        eta.finished(unit, true_seconds(COSTS[unit]))
        n_done += 1
        done_cost += COSTS[unit]
        # what the bar said before: elapsed x (estimated cost left / estimated cost done)
        prior = t * (sum(COSTS.values()) - done_cost) / done_cost
        seen.append((n_done, end - t, eta.seconds_left(), prior))
    for n, truth, left, _ in seen:
        assert left is not None and left >= 0
        if n >= 4:  # two different costs measured: the overhead is known
            assert left == pytest.approx(truth, abs=1e-6 * end)
    # the old estimate was far off at half the units (the issue: 0:18 shown, 55 s left)
    n, truth, left, prior = seen[len(COSTS) // 2]
    assert abs(prior - truth) > 0.2 * truth and left == pytest.approx(truth)


def test_running_units_count_what_they_have_left():
    clock = Clock()
    eta = GridEta({"a": 10.0, "b": 10.0, "c": 10.0}, 2, clock)
    eta.started("a")
    eta.started("b")
    clock.now = 10.0
    eta.finished("a", 10.0)  # 1 s per unit of cost
    eta.started("c")
    clock.now = 12.0
    # b has 0 s left (it should have ended at 10), c 8 s: c decides
    assert eta.seconds_left() == pytest.approx(8.0)


def test_before_any_unit_ends_the_written_cells_give_a_rate():
    clock = Clock()
    eta = GridEta({"a": 100.0, "b": 100.0}, 1, clock)
    clock.now = 5.0
    eta.progress("a", 0.5)  # half of a (50 cost) in 5 s
    assert eta.model() == pytest.approx((0.1, 0.0))
    assert eta.seconds_left() == pytest.approx(5.0 + 10.0)


@pytest.mark.parametrize("points, want", [
    ([(1.0, 2.0), (3.0, 4.0)], (1.0, 1.0)),          # exact line
    ([(1.0, 5.0), (3.0, 1.0)], (0.0, 3.0)),          # falling: a clipped at 0
    ([(1.0, 1.0), (3.0, 9.0)], (2.8, 0.0)),          # negative intercept: through zero
    ([(2.0, 4.0)], (2.0, 0.0)),                      # one point: the ratio
])
def test_the_fit_keeps_both_parameters_nonnegative(points, want):
    assert _fit_nonnegative(points) == pytest.approx(want)


def test_the_probe_bar_shows_the_measured_estimate():
    """The runner's bar (estratos.probe.grid.progress.GridProgress) fed the events a grid sends."""
    from estratos.probe.grid.plan import WorkUnit
    from estratos.probe.grid.progress import GridProgress

    clock = Clock()
    units = [WorkUnit("t", (0, 1), (1,), 100.0, 0), WorkUnit("t", (2, 3), (1,), 10.0, 1),
             WorkUnit("u", (0, 1), (1,), 10.0, 2)]
    bar = GridProgress(units, 1, show=False, clock=clock)
    assert bar.text() is None
    bar.started(units[0])
    clock.now = 20.0
    bar.update(units[0], 2)
    bar.finished(units[0], 20.0)
    assert bar.text() == "ETA 0:04"  # 0.2 s per unit of cost, nothing else known yet
    bar.started(units[1])
    clock.now = 32.0
    bar.update(units[1], 2)
    bar.finished(units[1], 12.0)  # a small unit took 12 s: a fixed part the prior lacks
    # a x 100 + b = 20, a x 10 + b = 12: the last unit needs 12 s (the prior alone: 2.9 s)
    assert bar.text() == "ETA 0:12"
