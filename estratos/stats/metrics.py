"""A cell's metric computed from its per-example test predictions.

Why here: a confidence interval or a significance test recomputes the metric on resampled
test sets thousands of times, so every metric is written for a batch of resamples at once
(rows of a 2-d array). Values are on the paper's scale, like a result's ``score``: accuracy
and F1 in percent, Pearson and Spearman x100.

How the protocols combine examples is kept: ``inner-kfold`` reports the mean of the outer
folds' accuracies (each fold a stratum, equal weights); STS reports the size-weighted mean
of its subsets' correlations (each subset a stratum, weights by size). Several seeds of one
cell are averaged, as reports average them.

The package's one Pearson and Spearman are here (:func:`pearson_rows`,
:func:`spearman_rows`; :func:`pearson_matrix` for every pair of rows of two stacks): the
protocols' recorded correlations, these bootstrap metrics and the relatedness regressor's
early stopping all compute them with it. One rule for an undefined correlation (a constant
side, or fewer than two values): NaN in arrays, None in results records
(:func:`estratos.protocols.metrics.correlations`), never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

#: how strata combine: the plain mean of their metrics, or the mean weighted by their size
WEIGHTINGS = ("equal", "size")


def _accuracy(pred: np.ndarray, gold: np.ndarray, positive: Optional[int]) -> np.ndarray:
    return 100.0 * np.mean(pred == gold, axis=1)


def f1_rows(pred: np.ndarray, gold: np.ndarray, positive: Optional[int]) -> np.ndarray:
    """F1 (percent) of the ``positive`` class for each row of ``pred`` against ``gold``
    (both ``(b, m)``): the one F1 rule, 0 when a row has no true positive (never predicted
    nor present, or always wrong), as SentEval's probes report it."""
    if positive is None:
        raise ValueError("F1 needs the positive class")
    pred, gold = np.asarray(pred), np.asarray(gold)
    p, g = pred == positive, gold == positive
    tp = np.sum(p & g, axis=1, dtype=np.float64)
    fp = np.sum(p & ~g, axis=1, dtype=np.float64)
    fn = np.sum(~p & g, axis=1, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = 100.0 * 2 * tp / (2 * tp + fp + fn)
    return np.where(tp > 0, f1, 0.0)  # as the probe reports it: 0 when no true positive


def pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r (a fraction) of each row of ``x`` ``(..., n)`` with the matching row of
    ``y`` (broadcast: ``y`` may be one ``(n,)`` row); NaN where undefined (a constant row on
    either side, or ``n < 2``). Float noise past +-1 is clipped. Computed in the inputs'
    dtype (callers pass float64)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.shape[-1] < 2:
        return np.full(np.broadcast_shapes(x.shape[:-1], y.shape[:-1]), np.nan)
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt(np.sum(xc * xc, axis=-1) * np.sum(yc * yc, axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.sum(xc * yc, axis=-1) / den
    # a constant row is undefined even where its mean's rounding leaves den > 0
    constant = np.all(x == x[..., :1], axis=-1) | np.all(y == y[..., :1], axis=-1)
    return np.where((den > 0) & ~constant, np.clip(r, -1.0, 1.0), np.nan)


#: the most memory :func:`pearson_matrix` keeps for the second stack's normalised rows
#: (float64: 16 RDMs of 2,000 sentences)
KEPT_UNIT_BYTES = 256 * 2**20


def pearson_matrix(x: np.ndarray, y: np.ndarray, block: int = 8) -> np.ndarray:
    """Pearson r of every row of ``x`` ``(a, n)`` with every row of ``y`` ``(b, n)``:
    ``(a, b)`` fractions, NaN where undefined (as :func:`pearson_rows`). Rows are centred
    and normalised in float64 ``block`` at a time, so long rows (RSA's RDMs: millions of
    entries) are multiplied as matrices without a float64 copy of the first side (nor of
    the second beyond ``KEPT_UNIT_BYTES``)."""
    x, y = np.atleast_2d(np.asarray(x)), np.atleast_2d(np.asarray(y))
    out = np.full((len(x), len(y)), np.nan)
    if x.shape[1] < 2:
        return out

    def unit(rows: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        r = rows.astype(np.float64)
        r -= r.mean(axis=1, keepdims=True)
        norm = np.sqrt(np.einsum("ij,ij->i", r, r))
        ok = (norm > 0) & ~np.all(rows == rows[:, :1], axis=1)
        return r / np.where(ok, norm, 1.0)[:, None], ok

    # the second stack's normalised blocks are kept when they fit in KEPT_UNIT_BYTES (each is
    # then computed once, not once per block of the first; one stack against itself reuses
    # them for its own blocks), else normalised again for every block of the first
    kept = len(y) * y.shape[1] * 8 <= KEPT_UNIT_BYTES
    units_y = [unit(y[j:j + block]) for j in range(0, len(y), block)] if kept else []
    for i in range(0, len(x), block):
        ux, ok_x = units_y[i // block] if kept and x is y else unit(x[i:i + block])
        for n_j, j in enumerate(range(0, len(y), block)):
            uy, ok_y = units_y[n_j] if kept else unit(y[j:j + block])
            r = np.clip(ux @ uy.T, -1.0, 1.0)
            out[i:i + block, j:j + block] = np.where(ok_x[:, None] & ok_y[None, :], r, np.nan)
    return out


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho (a fraction) of each row of ``x`` with ``y`` (same shapes, or ``y`` one
    row): :func:`pearson_rows` of the average ranks (ties get their mean rank)."""
    x2, y2 = np.atleast_2d(np.asarray(x)), np.atleast_2d(np.asarray(y))
    rho = pearson_rows(average_ranks(dense_codes(x2)), average_ranks(dense_codes(y2)))
    return rho.reshape(np.broadcast_shapes(np.shape(x)[:-1], np.shape(y)[:-1]))


def _pearson(x: np.ndarray, y: np.ndarray, positive: Optional[int] = None) -> np.ndarray:
    return 100.0 * pearson_rows(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))


def dense_codes(values: np.ndarray) -> np.ndarray:
    """Each value's index among the sorted distinct values (a tie-keeping monotone map:
    ranks of the codes are the ranks of the values)."""
    return np.unique(np.asarray(values), return_inverse=True)[1].reshape(np.shape(values))


def average_ranks(codes: np.ndarray) -> np.ndarray:
    """Ranks (1-based, ties get their mean rank) within each row of ``codes`` ``(b, m)``
    (non-negative ints from :func:`dense_codes`): scipy's ``rankdata(axis=1)`` by counting
    instead of sorting every row, which is what makes a Spearman bootstrap cheap."""
    k = np.asarray(codes, dtype=np.int64)
    b = k.shape[0]
    n_unique = int(k.max()) + 1 if k.size else 0
    counts = np.bincount((k + np.arange(b)[:, None] * n_unique).ravel(),
                         minlength=b * n_unique).reshape(b, n_unique)
    below = np.cumsum(counts, axis=1) - counts
    ranks = below + (counts + 1) / 2.0
    return np.take_along_axis(ranks, k, axis=1)


def average_ranks_1d(values: np.ndarray) -> np.ndarray:
    """Ranks (1-based, ties get their mean rank) of a 1-D array, equal to
    ``average_ranks(dense_codes(values[None]))[0]`` but from one sort: for one long vector
    (RSA's RDMs, millions of entries) that is about half the time of the codes' unique."""
    v = np.asarray(values).reshape(-1)
    ranks = np.empty(len(v))
    if not len(v):
        return ranks
    order = np.argsort(v)
    ordered = v[order]
    if not (ordered[1:] == ordered[:-1]).any():  # no ties: the ranks are the positions
        ranks[order] = np.arange(1.0, len(v) + 1.0)
        return ranks
    starts_group = np.empty(len(v), dtype=bool)
    starts_group[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts_group[1:])
    starts = np.flatnonzero(starts_group)
    sizes = np.diff(np.append(starts, len(v)))
    ranks[order] = (starts + (sizes + 1) / 2.0)[np.cumsum(starts_group) - 1]
    return ranks


def _spearman(x: np.ndarray, y: np.ndarray, positive: Optional[int] = None) -> np.ndarray:
    """Spearman of rows; ``x`` and ``y`` must be :func:`dense_codes` (see :class:`Sample`)."""
    return _pearson(average_ranks(x), average_ranks(y))


#: metric name (:data:`estratos.vocab.METRICS`) -> function(predicted (b, m), gold (b, m),
#: positive) -> values (b,)
METRIC_FUNCTIONS: Dict[str, Callable[[np.ndarray, np.ndarray, Optional[int]], np.ndarray]] = {
    "accuracy": _accuracy, "f1": f1_rows, "pearson": _pearson, "spearman": _spearman}


@dataclass(frozen=True)
class Sample:
    """One cell's test predictions, as a metric needs them.

    ``predicted`` is ``(S, n)``: one row per seed of the cell (labels, or scores for STS and
    SICK-R), in the test split's order; ``gold`` is ``(n,)``. ``strata`` (``(n,)`` ints)
    marks the outer fold (``inner-kfold``) or subset (STS) of each example, combined with
    ``weighting``; ``positive`` is F1's positive class.
    """

    metric: str
    predicted: np.ndarray
    gold: np.ndarray
    strata: Optional[np.ndarray] = None
    weighting: str = "equal"
    positive: Optional[int] = None
    #: what the metric reads: ``predicted`` and ``gold``, as dense integer codes for Spearman
    _pred: np.ndarray = field(init=False, repr=False, compare=False)
    _gold: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.metric not in METRIC_FUNCTIONS:
            raise ValueError(f"unknown metric {self.metric!r} (known: "
                             f"{', '.join(METRIC_FUNCTIONS)})")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"unknown weighting {self.weighting!r}")
        pred = np.atleast_2d(np.asarray(self.predicted))
        object.__setattr__(self, "predicted", pred)
        object.__setattr__(self, "gold", np.asarray(self.gold))
        if pred.shape[1] != self.gold.shape[0]:
            raise ValueError(f"{pred.shape[1]} predictions for {self.gold.shape[0]} test "
                             "examples")
        if self.strata is not None and np.asarray(self.strata).shape != self.gold.shape:
            raise ValueError("strata must give one stratum per test example")
        # Spearman ranks integer codes of the values (same ranks, counted fast)
        codes = self.metric == "spearman"
        object.__setattr__(self, "_pred", np.stack([dense_codes(p) for p in pred])
                           if codes else pred)
        object.__setattr__(self, "_gold", dense_codes(self.gold) if codes else self.gold)

    @property
    def n(self) -> int:
        return int(self.gold.shape[0])

    @property
    def n_seeds(self) -> int:
        return int(self.predicted.shape[0])

    def groups(self) -> List[Tuple[np.ndarray, float]]:
        """(positions, weight) of each stratum (one stratum: every example, weight 1)."""
        if self.strata is None:
            return [(np.arange(self.n), 1.0)]
        strata = np.asarray(self.strata)
        out = [np.flatnonzero(strata == s) for s in np.unique(strata)]
        sizes = np.array([len(p) for p in out], dtype=np.float64)
        weights = sizes / sizes.sum() if self.weighting == "size" else \
            np.full(len(out), 1.0 / len(out))
        return list(zip(out, weights.tolist()))

    def values(self, positions: Sequence[np.ndarray]) -> np.ndarray:
        """The metric of every seed on resampled test sets: ``positions[k]`` ``(b, n_k)``
        are the examples drawn from stratum ``k``. Returns ``(S, b)``."""
        fn = METRIC_FUNCTIONS[self.metric]
        groups = self.groups()
        out = np.zeros((self.n_seeds, positions[0].shape[0]))
        for (_, weight), pos in zip(groups, positions):
            gold = self._gold[pos]
            for s in range(self.n_seeds):
                out[s] += weight * fn(self._pred[s][pos], gold, self.positive)
        return out

    def per_seed(self) -> np.ndarray:
        """The metric of each seed on the test set itself: ``(S,)``."""
        return self.values([p[None, :] for p, _ in self.groups()])[:, 0]

    def value(self) -> float:
        """The metric on the test set, averaged over seeds (NaN when undefined)."""
        return float(np.mean(self.per_seed()))


def metric_value(metric: str, predicted: np.ndarray, gold: np.ndarray, *,
                 strata: Optional[np.ndarray] = None, weighting: str = "equal",
                 positive: Optional[int] = None) -> float:
    """The metric of predictions on the paper's scale (see :class:`Sample`)."""
    return Sample(metric, predicted, gold, strata, weighting, positive).value()
