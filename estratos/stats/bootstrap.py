"""Percentile bootstrap over test examples: a cell's interval, and paired differences.

Why over test examples: a score is measured on one finite test set; resampling its examples
(with replacement, within each fold or subset, keeping their sizes) shows how much the score
would move on another test set of the same size from the same source. That is test-set
variance; seed variance (training randomness) is what the spread over seeds shows, and is
reported apart. Several seeds of a cell are averaged inside every resample.

Both functions are seeded (same inputs, same seed: same interval) and draw resamples in
fixed-size chunks, so memory stays bounded for large test sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, cast

import numpy as np

from estratos.stats.metrics import Sample
from estratos.vocab import BOOTSTRAP_SEED

DEFAULT_RESAMPLES = 1000
DEFAULT_LEVEL = 0.95
#: resamples drawn per chunk (results do not depend on memory: always this many)
CHUNK = 100
METHOD = "percentile bootstrap over test examples"


@dataclass(frozen=True)
class Interval:
    """A metric with its bootstrap interval (``lo``/``hi`` None when undefined)."""

    estimate: Optional[float]
    lo: Optional[float]
    hi: Optional[float]
    se: Optional[float]
    level: float
    resamples: int
    seed: int
    n: int

    def to_json(self, decimals: int = 2) -> Dict[str, Any]:
        """The ``ci`` object of a results line."""
        def r(x: Optional[float]) -> Optional[float]:
            return None if x is None else round(x, decimals)
        return {"lo": r(self.lo), "hi": r(self.hi), "se": r(self.se), "level": self.level,
                "resamples": self.resamples, "seed": self.seed, "method": METHOD}


@dataclass(frozen=True)
class Difference:
    """B minus A on a shared test set: the difference, its interval and two-sided p-value."""

    a: Optional[float]
    b: Optional[float]
    diff: Optional[float]
    lo: Optional[float]
    hi: Optional[float]
    p_value: Optional[float]
    level: float
    resamples: int
    seed: int
    n: int


def _check(resamples: int, level: float) -> None:
    if not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def _resamples(sample: Sample, resamples: int, seed: int) -> Iterator[List[np.ndarray]]:
    """Chunks of resampled positions, one ``(b, n_k)`` array per stratum."""
    rng = np.random.default_rng(seed)
    groups = sample.groups()
    done = 0
    while done < resamples:
        b = min(CHUNK, resamples - done)
        yield [pos[rng.integers(0, len(pos), size=(b, len(pos)))] for pos, _ in groups]
        done += b


def _finite(x: float) -> Optional[float]:
    return float(x) if np.isfinite(x) else None


def _percentiles(values: np.ndarray, level: float):
    values = values[np.isfinite(values)]
    if not len(values):
        return None, None, None
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
    se = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return float(lo), float(hi), se


def bootstrap_ci(sample: Sample, *, resamples: int = DEFAULT_RESAMPLES,
                 level: float = DEFAULT_LEVEL, seed: int = BOOTSTRAP_SEED) -> Interval:
    """Percentile interval of ``sample``'s metric (mean over its seeds) over resampled test
    sets; resamples where the metric is undefined (e.g. a constant side of a correlation)
    are left out."""
    return bootstrap_cis([sample], resamples=resamples, level=level, seed=seed)[0]


def bootstrap_cis(samples: Sequence[Sample], *, resamples: int = DEFAULT_RESAMPLES,
                  level: float = DEFAULT_LEVEL, seed: int = BOOTSTRAP_SEED) -> List[Interval]:
    """:func:`bootstrap_ci` of each sample, the same numbers, with the resampled positions
    drawn once for all the samples of one test-set layout (size and strata).

    Why: the draws depend only on the layout and the seed, so the cells of one task (every
    layer spec of a unit) would each draw the same 1,000 x n positions again; drawing them
    took most of a cell's interval (0.05 s per cell of TASS1's 7,260 test examples)."""
    _check(resamples, level)
    out: List[Optional[Interval]] = [None] * len(samples)
    estimates = [_finite(sample.value()) for sample in samples]
    layouts: Dict[Any, List[int]] = {}
    for i, sample in enumerate(samples):
        if estimates[i] is None:
            out[i] = Interval(None, None, None, None, level, resamples, seed, sample.n)
            continue
        strata = None
        if sample.strata is not None:
            array = np.asarray(sample.strata)
            strata = (array.dtype.str, array.tobytes())
        layouts.setdefault((sample.n, strata), []).append(i)
    for members in layouts.values():
        stats: Dict[int, List[np.ndarray]] = {i: [] for i in members}
        for pos in _resamples(samples[members[0]], resamples, seed):
            for i in members:
                stats[i].append(samples[i].values(pos).mean(axis=0))
        for i in members:
            lo, hi, se = _percentiles(np.concatenate(stats[i]), level)
            out[i] = Interval(estimates[i], lo, hi, se, level, resamples, seed, samples[i].n)
    return cast(List[Interval], out)  # every entry is set above


def paired_bootstrap(a: Sample, b: Sample, *, resamples: int = DEFAULT_RESAMPLES,
                     level: float = DEFAULT_LEVEL, seed: int = BOOTSTRAP_SEED) -> Difference:
    """B - A on the same resampled test sets (paired), with a two-sided p-value.

    The p-value is twice the smaller share of resampled differences on either side of 0
    (add-one smoothed, so never exactly 0): identical predictions give 1, a difference
    that every resample keeps gives about 2 / (resamples + 1).
    """
    return compare_to(a, [b], resamples=resamples, level=level, seed=seed)[0]


def same_test_set(a: Sample, b: Sample) -> bool:
    """Whether two samples hold the same test examples (gold, strata) and metric."""
    if a.n != b.n or a.metric != b.metric or not np.array_equal(a.gold, b.gold):
        return False
    if (a.strata is None) != (b.strata is None):
        return False
    return a.strata is None or b.strata is None or np.array_equal(a.strata, b.strata)


def compare_to(a: Sample, others: List[Sample], *, resamples: int = DEFAULT_RESAMPLES,
               level: float = DEFAULT_LEVEL, seed: int = BOOTSTRAP_SEED) -> List[Difference]:
    """:func:`paired_bootstrap` of ``a`` against each of ``others`` on one shared series of
    resamples (``a``'s metric is computed once per resample)."""
    _check(resamples, level)
    for b in others:
        if not same_test_set(a, b):
            raise ValueError("paired bootstrap needs two cells on the same test set and metric")
    va = _finite(a.value())
    vbs = [_finite(b.value()) for b in others]
    live = [i for i, vb in enumerate(vbs) if va is not None and vb is not None]
    diffs: List[List[np.ndarray]] = [[] for _ in others]
    if live:
        for pos in _resamples(a, resamples, seed):
            base = a.values(pos).mean(axis=0)
            for i in live:
                diffs[i].append(others[i].values(pos).mean(axis=0) - base)
    out = []
    for i, vb in enumerate(vbs):
        if va is None or vb is None:
            out.append(Difference(va, vb, None, None, None, None, level, resamples, seed, a.n))
            continue
        d = np.concatenate(diffs[i])
        d = d[np.isfinite(d)]
        lo, hi, _ = _percentiles(d, level)
        k = len(d)
        below = (np.sum(d <= 0) + 1) / (k + 1)
        above = (np.sum(d >= 0) + 1) / (k + 1)
        p = min(1.0, 2.0 * min(below, above))
        out.append(Difference(va, vb, vb - va, lo, hi, float(p), level, resamples, seed, a.n))
    return out
