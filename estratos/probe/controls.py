"""Control labels: train a cell's probe on permuted training labels (``--control-labels``).

Why: a probe's accuracy mixes what the layer encodes with what the probe can fit on its own.
Training the same probe, with the same protocol and early stopping, on training labels
permuted within the training set keeps the class distribution and the features but breaks
every link between them; tested on the true labels, such a control measures what the probe's
capacity and the label prior alone achieve (the sentence-level counterpart of Hewitt &
Liang's 2019 control tasks). Selectivity = score - control score (the report shows it).

How: :class:`PermutedLabels` wraps an estimator factory. Every fit the protocol makes (the
train split; each cross-validation fold's training part and the refit) gets its training
labels permuted, and so do the dev labels it early-stops on, so the whole control task
(training, early stopping, the choice of L2) is the protocol run on labels that say nothing
about the features; only the test labels stay true. Why dev too: early stopping and the L2
choice on the true dev labels select, among models trained on noise, the ones that happen
to agree with the truth; on a toy task with one strongly informative feature that lifted
the control 17 points above the majority rate (measured: 91.7 against 75.0). The
permutation of a set of n examples is drawn from ``(seed, CONTROL_STREAM, n, part)`` (part
0: training labels, 1: dev labels): one permutation per seed, the same on every run, so
batched and one-at-a-time training agree. The record says ``control = {"kind":
"permuted-labels", "seed": seed}``.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from estratos.protocols import EstimatorFactory
from estratos.results.record import PERMUTED_LABELS

#: keeps the control permutations apart from every other use of the seed
CONTROL_STREAM = 0xC0

#: ``part`` of the training labels and of the dev labels in :func:`permuted`
TRAIN_PART, DEV_PART = 0, 1


def permuted(y: np.ndarray, seed: int, part: int = TRAIN_PART) -> np.ndarray:
    """``y`` with its entries permuted (the control permutation of ``seed`` for len(y))."""
    y = np.asarray(y)
    rng = np.random.default_rng((int(seed), CONTROL_STREAM, len(y), int(part)))
    return y[rng.permutation(len(y))]


def control_record(seed: int) -> Dict[str, Any]:
    """The ``control`` object of a permuted-labels cell trained with ``seed``."""
    return {"kind": PERMUTED_LABELS, "seed": int(seed)}


class PermutedLabels:
    """An estimator that fits the wrapped one on permuted training labels.

    ``fit(X, y, X_dev, y_dev, *rest)`` (classifiers and regressors alike) passes
    :func:`permuted` training and dev labels; everything else (``dev_score_``, ``epochs_``,
    ``predict``...) is the wrapped estimator's.
    """

    def __init__(self, make: EstimatorFactory, seed: int) -> None:
        self.make = make
        self.seed = int(seed)
        self.estimator_: Any = None

    def fit(self, X: Any, y: Any, X_dev: Any, y_dev: Any, *rest: Any) -> "PermutedLabels":
        self.estimator_ = self.make().fit(X, permuted(y, self.seed), X_dev,
                                          permuted(y_dev, self.seed, DEV_PART), *rest)
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or self.__dict__.get("estimator_") is None:
            raise AttributeError(name)
        return getattr(self.__dict__["estimator_"], name)


def permuted_labels_factory(make: EstimatorFactory, seed: int) -> EstimatorFactory:
    """``make`` wrapped so that every estimator it builds trains on permuted labels."""
    def factory() -> PermutedLabels:
        return PermutedLabels(make, seed)
    return factory
