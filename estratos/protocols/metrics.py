"""Metrics the protocols report: accuracy, F1 of a positive class, correlations, cosine."""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from estratos.stats.metrics import pearson_rows, spearman_rows

log = logging.getLogger(__name__)

#: label names taken as the positive class of a binary task that reports F1, in this order
POSITIVE_NAMES = ("1", "true", "True", "yes", "paraphrase", "entailment")


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    """Accuracy in percent."""
    return float(100.0 * np.mean(np.asarray(pred) == np.asarray(gold))) if len(gold) else 0.0


def f1_positive(pred: np.ndarray, gold: np.ndarray, positive: int) -> float:
    """F1 (percent) of the positive class of one set of predictions
    (:func:`estratos.stats.metrics.f1_rows`, the one rule: 0 without a true positive)."""
    from estratos.stats.metrics import f1_rows

    return float(f1_rows(np.asarray(pred)[None], np.asarray(gold)[None], positive)[0])


def test_metrics(pred: np.ndarray, gold: np.ndarray, positive: Optional[int]) -> Dict[str, float]:
    """``{"accuracy"}`` (plus ``"f1"`` with a positive class), percent, 2 decimals."""
    out = {"accuracy": round(accuracy(pred, gold), 2)}
    if positive is not None:
        out["f1"] = round(f1_positive(pred, gold, positive), 2)
    return out


def positive_class(task_id: str, metric: str, extra_metrics: Sequence[str],
                   labels: Sequence[str]) -> Optional[int]:
    """Index of the positive class when the task reports F1 (binary tasks only): the label
    named in :data:`POSITIVE_NAMES`, else the second label in sorted order."""
    if metric != "f1" and "f1" not in tuple(extra_metrics or ()):
        return None
    labels = list(labels)
    if len(labels) != 2:
        log.warning("%s: F1 asked for a task with %d classes; only binary F1 is reported",
                    task_id, len(labels))
        return None
    for name in POSITIVE_NAMES:
        if name in labels:
            return labels.index(name)
    return 1


def finite_or_none(value: float) -> Optional[float]:
    """A correlation, or None when it is undefined (constant predictions or gold)."""
    return float(value) if np.isfinite(value) else None


def correlations(pred: np.ndarray, gold: np.ndarray) -> Tuple[Optional[float], Optional[float]]:
    """(Pearson, Spearman) of ``pred`` with ``gold`` (fractions), from the package's one
    implementation (:func:`estratos.stats.metrics.pearson_rows`); None where undefined (a
    constant side, or fewer than two examples), as results records store it."""
    pred = np.asarray(pred, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.float64)
    return (finite_or_none(float(pearson_rows(pred, gold))),
            finite_or_none(float(spearman_rows(pred, gold))))


def row_cosine(u: Any, v: Any) -> np.ndarray:
    """Row-wise cosine similarity (float64) of two dense arrays or two sparse matrices; a
    zero (empty) row gives 0."""
    import scipy.sparse as sp

    if sp.issparse(u):
        num = np.asarray(u.multiply(v).sum(axis=1)).ravel()
        nu = np.sqrt(np.asarray(u.multiply(u).sum(axis=1)).ravel())
        nv = np.sqrt(np.asarray(v.multiply(v).sum(axis=1)).ravel())
        den = nu * nv
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    u = np.asarray(u, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    num = (u * v).sum(axis=1)
    den = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sims = num / den
    return np.where(den > 0, sims, 0.0)
