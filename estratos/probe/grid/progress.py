"""A grid's progress on stderr (a tqdm bar on a terminal, periodic lines elsewhere)
and its estimate of the time left.

Why not a rate over cells, nor the estimated costs alone: cells of one grid differ by orders
of magnitude (a DC MLP against an STS cosine), and the estimates miss what each unit costs
whatever its size, so the bar advances by cells but its ETA comes from what the finished
units really took (:class:`estratos.probe.grid.eta.GridEta`).

Off a terminal (a log file, ``nohup``, a SLURM job's output) a bar is unreadable and was
nothing at all, so a run looked hung for minutes: there the progress is one line every
:data:`LINE_SECONDS` (cells done, elapsed time, ETA), plus a first and a last line, written
whenever warnings are shown (``-q`` hides them).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Callable, Dict, Optional, Sequence, TextIO

from estratos.probe.grid.eta import GridEta
from estratos.probe.grid.plan import WorkUnit

#: seconds between two progress lines off a terminal
LINE_SECONDS = 60.0


class GridProgress:
    """Progress over the cells of ``units`` run on ``processes`` processes; fed the units'
    ``started``/``update`` (cells written)/``finished`` events. ``label``: what the bar and
    the lines are called (the grid's command: ``probe``, ``baseline``). ``show``: a tqdm bar;
    ``lines``: periodic lines on ``stream`` instead (every ``every`` seconds, checked on each
    event and by a timer thread, so a long unit still gets its lines). ``clock``: for
    tests."""

    def __init__(self, units: Sequence[WorkUnit], processes: int, show: bool,
                 clock: Callable[[], float] = time.monotonic, *, lines: bool = False,
                 every: float = LINE_SECONDS, stream: Optional[TextIO] = None,
                 label: str = "probe") -> None:
        self.bar = None
        self.label = label
        self.eta = GridEta({u.index: u.cost for u in units}, processes, clock)
        self.written: Dict[int, int] = {}
        self.total = sum(u.n_cells for u in units)
        self.clock = clock
        self.start = clock()
        self.every = every
        self.stream = stream
        self.lock = threading.Lock()
        self.lines = bool(lines and not show and self.total
                          and logging.getLogger("estratos").isEnabledFor(logging.WARNING))
        self.last = self.start
        self.stop = threading.Event()
        self.ticker: Optional[threading.Thread] = None
        if self.lines:
            self._line(f"{self.total} cell(s) in {len(units)} unit(s) on {processes} "
                       f"process(es)")
            self.ticker = threading.Thread(target=self._tick, name=f"{label}-progress",
                                           daemon=True)
            self.ticker.start()
        total_cells = self.total
        if show and total_cells:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total_cells, unit="cell", desc=label, file=sys.stderr,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                       "cells [{elapsed}{postfix}]")

    def started(self, unit: WorkUnit) -> None:
        with self.lock:
            self.eta.started(unit.index)

    def update(self, unit: WorkUnit, cells: int) -> None:
        with self.lock:
            self.written[unit.index] = self.written.get(unit.index, 0) + cells
            self.eta.progress(unit.index, self.written[unit.index] / unit.n_cells)
        self._show(cells)

    def finished(self, unit: WorkUnit, seconds: float) -> None:
        with self.lock:
            self.eta.finished(unit.index, seconds)
        self._show(0)

    def text(self) -> Optional[str]:
        """``ETA m:ss``, or None before anything was measured."""
        with self.lock:
            left = self.eta.seconds_left()
        return None if left is None else f"ETA {clock(left)}"

    def status(self) -> str:
        """``12/96 cells (12%), 1:05 elapsed, ETA 7:30`` (what a progress line says)."""
        with self.lock:
            done = sum(self.written.values())
        eta = self.text()
        share = 100 * done / self.total if self.total else 100.0
        return (f"{done}/{self.total} cells ({share:.0f}%), "
                f"{clock(self.clock() - self.start)} elapsed" + (f", {eta}" if eta else ""))

    def tick(self) -> None:
        """Write a progress line if :attr:`every` seconds passed since the last one."""
        if self.lines and self.clock() - self.last >= self.every:
            self._line(self.status())

    def _tick(self) -> None:
        while not self.stop.wait(min(self.every, 5.0)):
            self.tick()

    def _line(self, text: str) -> None:
        stream = self.stream or sys.stderr
        with self.lock:
            self.last = self.clock()
            stream.write(f"{self.label}: {text}\n")
            stream.flush()

    def _show(self, cells: int) -> None:
        self.tick()
        if self.bar is None:
            return
        text = self.text()
        if text is not None:
            self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(cells)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.ticker is not None:
            self.stop.set()
            self.ticker.join()
            self.ticker = None
            self._line(self.status())


def clock(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"
