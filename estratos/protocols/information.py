"""Usable information in bits: each scored example's gold-label log2-probability under the
probe and under a model that sees no input, and what a cell records of them.

Why here: the classification protocols know which labels a model was trained on and which
examples it scored, so they compute both log-probabilities as they test (the record and the
predictions store then only copy them). The measures:

- the probe's held-out cross-entropy ``H(Y|X) = -mean log2 p(y|x)`` over the scored examples;
- the prior's, ``H(Y|0) = -mean log2 p0(y)``, with ``p0`` the class shares of the training
  labels, add-one smoothed over the task's classes (a class absent from training keeps a
  finite probability; with balanced training labels it is the uniform prior, so
  ``H(Y|0) = log2 k``);
- V-information ``H(Y|0) - H(Y|X)`` (Xu et al. 2020; Pimentel et al. 2020), the mean of the
  examples' pointwise V-information ``log2 p(y|x) - log2 p0(y)`` (Ethayarajh et al. 2022).
  It is negative where the probe predicts worse than the prior, and is reported so.

Conditional probing (Hewitt, Ethayarajh, Liang & Manning 2021) asks what a layer R adds to a
baseline B: the probe trained on B alone gives ``H(Y|B)``, the same probe family on [B; R]
``H(Y|B,R)``, and the gain ``H(Y|B) - H(Y|B,R)`` (:func:`conditional`) is the mean over the
scored examples of ``log2 p(y|b,r) - log2 p(y|b)``, so its interval comes from the same
pairs of log-probabilities.

A probability that is 0 in float64 (a class a logistic regression never saw) is read as the
smallest positive normal float64, 2**-1022: the log stays finite and the example costs 1022
bits, the most float64 can say.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import numpy as np

#: the lowest log2-probability stored (float64's smallest normal number)
LOG2_FLOOR = -1022.0


def prior_log2p(train_labels: np.ndarray, scored_labels: np.ndarray,
                n_classes: Optional[int] = None) -> np.ndarray:
    """``log2 p0(y)`` of each scored label under the add-one smoothed class shares of
    ``train_labels`` (``n_classes``: the task's classes; default the largest label + 1)."""
    train = np.asarray(train_labels, dtype=np.int64)
    scored = np.asarray(scored_labels, dtype=np.int64)
    k = int(n_classes) if n_classes else int(max(train.max(initial=0),
                                                 scored.max(initial=0))) + 1
    counts = np.bincount(train, minlength=k).astype(np.float64) + 1.0
    return np.log2(counts / counts.sum())[scored]


def gold_log2p(gold_log_e: np.ndarray) -> np.ndarray:
    """``log2 p(y|x)`` from natural-log gold-label probabilities (any shape), floored at
    :data:`LOG2_FLOOR` (finite)."""
    bits = np.asarray(gold_log_e, dtype=np.float64) / math.log(2.0)
    return np.maximum(np.nan_to_num(bits, nan=LOG2_FLOOR, neginf=LOG2_FLOOR), LOG2_FLOOR)


def gold_bits(estimator: Any, X: Any, labels: np.ndarray) -> Optional[np.ndarray]:
    """``log2 p(y|x)`` ``(G, R, n)`` of every model of a fitted ``estimator`` for each row's
    label (its ``gold_log_proba``), or None for an estimator that gives no probabilities."""
    method = getattr(estimator, "gold_log_proba", None)
    return None if method is None else gold_log2p(method(X, labels))


def information(log2p: np.ndarray, prior: np.ndarray) -> Dict[str, float]:
    """A cell's ``information`` record (bits): ``cross_entropy`` ``H(Y|X)``,
    ``prior_cross_entropy`` ``H(Y|0)``, ``v_information`` their difference."""
    ce = -float(np.mean(log2p))
    prior_ce = -float(np.mean(prior))
    return {"cross_entropy": round(ce, 6), "prior_cross_entropy": round(prior_ce, 6),
            "v_information": round(prior_ce - ce, 6)}


def conditional(log2p: np.ndarray, given_log2p: np.ndarray) -> Dict[str, float]:
    """The numbers of a conditional cell's ``conditional`` record (bits):
    ``given_cross_entropy`` ``H(Y|B)`` of the probe on B alone, ``cross_entropy``
    ``H(Y|B,R)`` of the probe on [B; R], and ``gain``, their difference (negative when the
    probe on [B; R] predicts the test labels worse than the one on B alone)."""
    given_ce = -float(np.mean(given_log2p))
    ce = -float(np.mean(log2p))
    return {"given_cross_entropy": round(given_ce, 6), "cross_entropy": round(ce, 6),
            "gain": round(given_ce - ce, 6)}


def information_of(outcome: Any) -> Optional[Dict[str, float]]:
    """The ``information`` of a :class:`~estratos.protocols.CellOutcome` (None when its
    protocol scored no class probabilities: relatedness, similarity)."""
    if outcome.gold_log2p is None or outcome.prior_log2p is None or not len(outcome.gold_log2p):
        return None
    return information(outcome.gold_log2p, outcome.prior_log2p)


__all__ = ["LOG2_FLOOR", "conditional", "gold_log2p", "information", "information_of",
           "prior_log2p"]
