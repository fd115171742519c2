"""The probe grid's progress bar (stderr, tqdm) and its estimate of the time left.

Why estimated costs and not a rate over cells: cells of one grid differ by orders of
magnitude (a DC MLP against an STS cosine), so the bar advances by cells but its ETA comes
from the units' cost estimates (:mod:`estratos.probe.grid`).
"""

from __future__ import annotations

import sys
import time


class GridProgress:
    """A tqdm bar over cells whose ETA comes from the units' estimated costs (cells of one
    grid differ by orders of magnitude, so a rate over cells would mislead)."""

    def __init__(self, total_cells: int, total_cost: float, show: bool) -> None:
        self.bar = None
        self.total_cost = total_cost
        self.done_cost = 0.0
        self.t0 = time.monotonic()
        if show and total_cells:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total_cells, unit="cell", desc="probe", file=sys.stderr,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                       "cells [{elapsed}{postfix}]")

    def update(self, cells: int, cost: float) -> None:
        self.done_cost += cost
        if self.bar is None:
            return
        elapsed = time.monotonic() - self.t0
        if self.done_cost > 0 and self.total_cost > 0:
            left = elapsed * max(0.0, self.total_cost - self.done_cost) / self.done_cost
            self.bar.set_postfix_str(f"ETA {clock(left)}", refresh=False)
        self.bar.update(cells)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
