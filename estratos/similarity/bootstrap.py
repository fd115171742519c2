"""Linear CKA on resampled sentences: an interval for each value, and ties between a layer's
most similar layer and the runners-up.

Why: the most similar layer of another model is often ahead by 0.001-0.02 CKA, while another
sample of sentences moves values by several hundredths, so a single value cannot say which
layer is closest. Resampling sentences says how far a value moves and whether the best
layer stays ahead of each other one on the same resamples (a paired difference).

Why on Gram matrices: a map's CKA comes from d x d products over every sentence; redoing
them for each resample would cost a pass over every sentence per resample. Linear CKA of
resampled rows is a function of the rows' Gram matrices instead. A resample of the m rows
is a vector of counts w (sum m); centred at the resample's mean, the cross-product of two
layers X and Y has

    |X~^T W Y~|_F^2 = w^T (K o L) w - 2 m sum_i w_i k_i l_i + m^2 kappa lambda

with ``K = X X^T`` (rows first centred at their own mean, so the terms stay small),
``k = K w / m``, ``kappa = w^T K w / m^2`` (``L``, ``l``, ``lambda`` for Y), and CKA is
``Q(X, Y) / sqrt(Q(X, X) Q(Y, Y))``: one m x m product per layer pair for all resamples at
once, no d x d product per resample (:func:`resampled_cka`; checked against CKA of the
resampled rows themselves in tests/test_similarity.py).

Which sentences, which scale: the seeded subsample of m sentences that RSA and mutual k-NN
read (``--max-sentences``) is resampled, and the spread is rescaled by ``sqrt(m / n)`` to
the n sentences the value was computed on (the m-out-of-n bootstrap: CKA is a smooth
function of means, whose spread shrinks as ``1 / sqrt(n)``). The interval is
``v_n + sqrt(m / n) * ([q_lo, q_hi] - median)`` of the resamples' values v*_b (v_n: the
value over every sentence). Why around the resamples' median rather than the percentile
interval itself: a resample repeats about a third of its sentences, and biased CKA rises
with fewer distinct rows (by more than its spread when layers are barely related and m is
small), so the resamples' values sit above the subsample's own; their spread is what they
say about the value, and it is centred on the value.

Ties: in each row (one layer of the first cache against every layer of the other; within
one cache, against the other layers) the most similar layer is the one of largest value
(:func:`estratos.results.similarity.most_similar`); another layer is tied with it when the
interval of the paired difference (best minus it, the same resamples, rescaled the same
way) reaches 0.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from estratos.results.similarity import most_similar
from estratos.similarity.measures import centred

#: the interval's level (two-sided)
LEVEL = 0.95

#: ``each(fn, items, item_bytes)``: ``fn`` of every item, in order (run.py's ``_each``
#: runs them on every core)
Each = Callable[..., List[Any]]


def _in_order(fn: Callable[[Any], Any], items: Sequence[Any], item_bytes: int = 0
              ) -> List[Any]:
    return [fn(item) for item in items]


def resample_weights(m: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, m) float32: each resample's count of each of the m sentences (m
    positions drawn with replacement from ``numpy.random.default_rng(seed)``)."""
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, m, size=(resamples, m))
    counts = np.empty((resamples, m), dtype=np.float32)
    for b in range(resamples):
        counts[b] = np.bincount(drawn[b], minlength=m)
    return counts


class GramTerms(NamedTuple):
    """One layer's part of the resampled cross-products: its Gram matrix ``K`` (float32,
    rows centred), ``K w / m`` for each resample (``kw``) and ``w^T K w / m^2``
    (``kappa``)."""

    gram: np.ndarray
    kw: np.ndarray
    kappa: np.ndarray


def gram_terms(x: np.ndarray, weights: np.ndarray) -> GramTerms:
    """:class:`GramTerms` of the rows ``x`` (m, d) under ``weights`` (R, m)."""
    xc = centred(x)  # float64; a constant feature exactly 0
    gram = (xc @ xc.T).astype(np.float32)
    m = weights.shape[1]
    kw = (weights @ gram).astype(np.float64) / m  # K is symmetric: (K w)^T = w^T K
    kappa = np.einsum("rm,rm->r", kw, weights, dtype=np.float64) / m
    return GramTerms(gram, kw, kappa)


def quadratic(k: GramTerms, l_: GramTerms, weights: np.ndarray) -> np.ndarray:
    """``|X~^T W Y~|_F^2`` of each resample (R,), float64 (see the module docstring)."""
    m = weights.shape[1]
    t = np.einsum("rm,rm->r", weights @ (k.gram * l_.gram), weights, dtype=np.float64)
    s = np.einsum("rm,rm,rm->r", weights, k.kw, l_.kw, dtype=np.float64)
    return t - 2.0 * m * s + m * m * k.kappa * l_.kappa


def resampled_cka(xs: Sequence[np.ndarray], ys: Optional[Sequence[np.ndarray]],
                  weights: np.ndarray, each: Each = _in_order) -> np.ndarray:
    """Linear CKA of every layer of ``xs`` with every layer of ``ys`` (None: ``xs`` with
    itself) on each resample: (R, len(xs), len(ys)) float64, NaN where a layer is constant
    on a resample. ``weights``: :func:`resample_weights` (a row of ones: the rows as they
    are). ``each`` maps a function over items (run.py's ``_each``: every core)."""
    m = weights.shape[1]
    pair_bytes = 8 * m * m  # a Hadamard product and its product with the weights
    terms_x = each(lambda x: gram_terms(x, weights), list(xs), pair_bytes)
    self_x = each(lambda t: quadratic(t, t, weights), terms_x, pair_bytes)
    same = ys is None
    ny = len(xs) if ys is None else len(ys)
    out = np.full((weights.shape[0], len(xs), ny), np.nan)
    if same:
        pairs = [(i, j) for i in range(len(xs)) for j in range(i, len(xs))]
        found = each(lambda p: quadratic(terms_x[p[0]], terms_x[p[1]], weights), pairs,
                     pair_bytes)
        for (i, j), q in zip(pairs, found):
            out[:, i, j] = out[:, j, i] = _ratio(q, self_x[i], self_x[j])
        return out
    assert ys is not None
    for j, y in enumerate(ys):  # one layer of the other side at a time: its Gram only
        terms_y = gram_terms(y, weights)
        self_y = quadratic(terms_y, terms_y, weights)
        found = each(lambda t, other=terms_y: quadratic(t, other, weights), terms_x,
                     pair_bytes)
        for i, q in enumerate(found):
            out[:, i, j] = _ratio(q, self_x[i], self_y)
    return out


def _ratio(q: np.ndarray, qx: np.ndarray, qy: np.ndarray) -> np.ndarray:
    den = np.sqrt(np.clip(qx, 0.0, None) * np.clip(qy, 0.0, None))
    return np.divide(q, den, out=np.full(len(q), np.nan), where=den > 0)


def _spread(values: np.ndarray, level: float) -> Optional[np.ndarray]:
    """The ``level`` percentile interval of the finite ``values`` minus their median."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return None
    low, mid, high = np.quantile(finite, [(1.0 - level) / 2.0, 0.5, (1.0 + level) / 2.0])
    return np.array([low - mid, high - mid])


def cka_intervals(full: np.ndarray, resampled: np.ndarray, m: int, n: int, within: bool,
                  level: float = LEVEL) -> List[List[Optional[Dict[str, Any]]]]:
    """Per layer pair (i, j), the ``detail["bootstrap"]`` of its linear CKA record (None
    when the value over every sentence is undefined): the interval (``lo``, ``hi``), the
    level, the resamples used, the scale sqrt(m / n); ``best`` when j is row i's most
    similar layer, else ``tie`` and the paired difference's interval (``difference``:
    best minus j). ``full``: (A, B) values over all ``n`` sentences, NaN where undefined;
    ``resampled``: :func:`resampled_cka` over a subsample of ``m`` sentences; ``within``:
    one cache with itself (row i's own layer is not a candidate)."""
    scale = math.sqrt(min(1.0, m / n))
    out: List[List[Optional[Dict[str, Any]]]] = []
    for i in range(full.shape[0]):
        row: List[Optional[Dict[str, Any]]] = [None] * full.shape[1]
        candidates = [(j, None if not math.isfinite(full[i, j]) else float(full[i, j]))
                      for j in range(full.shape[1]) if not (within and j == i)]
        best = most_similar(candidates, "linear-cka")
        for j in range(full.shape[1]):
            v = full[i, j]
            if not math.isfinite(v):
                continue
            q = _spread(resampled[:, i, j], level)
            entry: Dict[str, Any] = {"level": level, "scale": scale,
                                     "resamples": int(np.isfinite(resampled[:, i, j]).sum())}
            if q is not None:
                entry["lo"] = float(max(0.0, v + scale * q[0]))
                entry["hi"] = float(min(1.0, v + scale * q[1]))
            if best is not None and not (within and j == i):
                b = best[0]
                assert isinstance(b, int)  # the candidates are column indices
                if j == b:
                    entry["best"] = True
                else:
                    d = full[i, b] - v
                    qd = _spread(resampled[:, i, b] - resampled[:, i, j], level)
                    if qd is not None:
                        entry["difference"] = {"lo": float(d + scale * qd[0]),
                                               "hi": float(d + scale * qd[1])}
                        entry["tie"] = bool(d + scale * qd[0] <= 0.0)
            row[j] = entry
        out.append(row)
    return out


__all__ = ["LEVEL", "GramTerms", "cka_intervals", "gram_terms", "quadratic",
           "resample_weights", "resampled_cka"]
