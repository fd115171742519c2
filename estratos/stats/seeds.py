"""Two runs of one cell compared over seeds: the difference of their means and its interval.

Why apart from :mod:`.bootstrap`: that module resamples test examples (test-set variance on
one shared test set); this one treats each seed's score as one independent draw of a run's
training randomness, as parity checks do when they ask whether two implementations of one
protocol differ by more than their seeds do. With the handful of seeds such checks afford
(3 to 15 a side), a percentile bootstrap over seeds understates the spread of a mean;
Welch's t interval (unequal variances, Welch-Satterthwaite degrees of freedom) is the
textbook interval for a difference of two small-sample means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from estratos.stats.bootstrap import DEFAULT_LEVEL


@dataclass(frozen=True)
class SeedDifference:
    """``mean(b) - mean(a)`` with its interval; ``lo == hi == diff`` when neither side varies
    (deterministic runs: the difference is exact)."""

    diff: float
    lo: float
    hi: float
    level: float
    n_a: int
    n_b: int

    def contains(self, value: float = 0.0, tolerance: float = 0.0) -> bool:
        """Whether ``value`` lies in the interval widened by ``tolerance`` each side (the
        scores' rounding, for deterministic runs)."""
        return self.lo - tolerance <= value <= self.hi + tolerance


def mean_difference(a: Sequence[float], b: Sequence[float],
                    level: float = DEFAULT_LEVEL) -> SeedDifference:
    """``mean(b) - mean(a)`` and its Welch t interval at ``level``.

    Each side needs at least one score; a side of one score contributes no variance (its
    spread is unknown: give two or more when the runs are random).
    """
    from scipy import stats

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(x) == 0 or len(y) == 0:
        raise ValueError("each side needs at least one score")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("scores must be finite (an undefined score has no place in a mean)")
    if not (0.0 < level < 1.0):
        raise ValueError(f"level must be in (0, 1), got {level}")
    diff = float(y.mean() - x.mean())
    va = float(x.var(ddof=1)) / len(x) if len(x) > 1 else 0.0
    vb = float(y.var(ddof=1)) / len(y) if len(y) > 1 else 0.0
    se = math.sqrt(va + vb)
    if se == 0.0:
        return SeedDifference(diff, diff, diff, level, len(x), len(y))
    terms = [v * v / (len(s) - 1) for v, s in ((va, x), (vb, y)) if len(s) > 1 and v > 0]
    dof = (va + vb) ** 2 / sum(terms)
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    return SeedDifference(diff, diff - half, diff + half, level, len(x), len(y))
