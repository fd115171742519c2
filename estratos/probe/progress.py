"""The probe grid's progress bar (stderr, tqdm) and its estimate of the time left.

Why not a rate over cells, nor the estimated costs alone: cells of one grid differ by orders
of magnitude (a DC MLP against an STS cosine), and the estimates miss what each unit costs
whatever its size, so the bar advances by cells but its ETA comes from what the finished
units really took (:class:`estratos.probe.eta.GridEta`, issue 24).
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Dict, Optional, Sequence

from estratos.probe.eta import GridEta
from estratos.probe.grid import WorkUnit


class GridProgress:
    """A tqdm bar over the cells of ``units`` run on ``processes`` processes; fed the units'
    ``started``/``update`` (cells written)/``finished`` events. ``clock``: for tests."""

    def __init__(self, units: Sequence[WorkUnit], processes: int, show: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bar = None
        self.eta = GridEta({u.index: u.cost for u in units}, processes, clock)
        self.written: Dict[int, int] = {}
        total_cells = sum(u.n_cells for u in units)
        if show and total_cells:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total_cells, unit="cell", desc="probe", file=sys.stderr,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                       "cells [{elapsed}{postfix}]")

    def started(self, unit: WorkUnit) -> None:
        self.eta.started(unit.index)

    def update(self, unit: WorkUnit, cells: int) -> None:
        self.written[unit.index] = self.written.get(unit.index, 0) + cells
        self.eta.progress(unit.index, self.written[unit.index] / unit.n_cells)
        self._show(cells)

    def finished(self, unit: WorkUnit, seconds: float) -> None:
        self.eta.finished(unit.index, seconds)
        self._show(0)

    def text(self) -> Optional[str]:
        """``ETA m:ss``, or None before anything was measured."""
        left = self.eta.seconds_left()
        return None if left is None else f"ETA {clock(left)}"

    def _show(self, cells: int) -> None:
        if self.bar is None:
            return
        text = self.text()
        if text is not None:
            self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(cells)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def clock(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"
