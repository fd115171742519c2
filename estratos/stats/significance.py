"""Exact tests and multiple-comparison corrections.

McNemar's exact test compares two classifiers' accuracies on the same examples using only
the examples where exactly one of them is right; Holm's step-down correction keeps the
family-wise error rate when one layer is compared with many others.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

#: names accepted by :func:`adjust`
CORRECTIONS = ("holm", "bonferroni", "none")


def mcnemar_exact(correct_a: np.ndarray, correct_b: np.ndarray) -> Tuple[int, int, float]:
    """(b, c, p): b = examples only A gets right, c = only B; p = two-sided exact binomial
    p-value of b against Binomial(b + c, 1/2) (1 when b + c = 0)."""
    a = np.asarray(correct_a, dtype=bool)
    bb = np.asarray(correct_b, dtype=bool)
    if a.shape != bb.shape:
        raise ValueError("McNemar needs the two classifiers' results on the same examples")
    only_a = int(np.sum(a & ~bb))
    only_b = int(np.sum(~a & bb))
    return only_a, only_b, mcnemar_p(only_a, only_b)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts of a 2x2 table."""
    from scipy.stats import binom

    n = b + c
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(b, c), n, 0.5)))


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (same order as given)."""
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def adjust(p_values: Sequence[float], correction: str = "holm") -> np.ndarray:
    """Adjusted p-values by ``correction`` (one of :data:`CORRECTIONS`)."""
    p = np.asarray(p_values, dtype=np.float64)
    if correction == "holm":
        return holm(p_values)
    if correction == "bonferroni":
        return np.minimum(1.0, p * len(p))
    if correction == "none":
        return p.copy()
    raise ValueError(f"unknown correction {correction!r} (known: {', '.join(CORRECTIONS)})")
