"""The estimator interface protocols train through, and helpers over feature groups.

A protocol only needs an estimator *factory* ``make() -> estimator``. Classifiers follow:

- ``fit(X, y, X_dev, y_dev, l2)``: ``X`` is G feature groups (an array ``(G, n, F)`` or a list
  of G 2-d matrices, e.g. sparse), ``l2`` a grid ``(R,)`` or a table ``(G, R)``;
- ``dev_score_`` ``(G', R)``: best dev accuracy (fraction); ``epochs_`` ``(G', R)``;
- ``predict(X)`` -> labels ``(G', R, n)``;
- optionally ``fit_folds(X, y, folds, l2)``: k-fold cross-validation's fits, fold ``k``'s
  models trained on its ``(train, held_out)`` index pair of ``X``; ``dev_score_`` and
  ``epochs_`` ``(K * G', R)``, fold-major (the protocols fit fold after fold without it).

Regressors (relatedness): ``fit(X, y, X_dev, y_dev)``, ``dev_score_ (G',)`` (dev Pearson),
``epochs_ (G',)``, ``predict(X) -> (G', n)``.

``G'`` is G, or a multiple of it when one estimator trains several seeds at once (seed-major:
group ``s * G + g``); protocols treat each of the ``G'`` as one cell.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from estratos.protocols.base import EstimatorFactory


def take(X: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of every feature group: ``X[:, rows]`` or ``[x[rows] for x in X]``."""
    if isinstance(X, np.ndarray):
        return X[:, rows]
    return [x[rows] for x in X]


def n_groups(X: Any) -> int:
    return X.shape[0] if isinstance(X, np.ndarray) else len(X)


def group(X: Any, g: int) -> Any:
    """Feature group ``g`` kept as a one-group stack."""
    return X[g:g + 1] if isinstance(X, np.ndarray) else [X[g]]


class OneAtATime:
    """Wrap an estimator factory so every (group, L2) model is trained alone (G = R = 1).

    Why: ``--sequential`` runs cell by cell through the same code, to check that batching
    changes nothing and to measure what batching saves.
    """

    #: every fold's models are trained alone through :meth:`fit`
    fit_folds = None

    def __init__(self, make: EstimatorFactory) -> None:
        self.make = make

    def fit(self, X, y, X_dev, y_dev, l2=None) -> "OneAtATime":
        G = n_groups(X)
        if l2 is None:  # regressors: one model per group
            self.models_ = [[self.make().fit(group(X, g), y, group(X_dev, g), y_dev)]
                            for g in range(G)]
            self.dev_score_ = np.array([m[0].dev_score_[0] for m in self.models_])
            self.epochs_ = np.array([m[0].epochs_[0] for m in self.models_])
            self._regressor = True
            return self
        table = np.asarray(l2, dtype=np.float64)
        if table.ndim == 1:
            table = np.tile(table[None, :], (G, 1))
        self._regressor = False
        self.models_ = [[self.make().fit(group(X, g), y, group(X_dev, g), y_dev, [table[g, r]])
                         for r in range(table.shape[1])] for g in range(G)]
        self.dev_score_ = np.array([[m.dev_score_[0, 0] for m in row] for row in self.models_])
        self.epochs_ = np.array([[m.epochs_[0, 0] for m in row] for row in self.models_])
        first = self.models_[0][0] if self.models_ and self.models_[0] else None
        if first is not None and hasattr(first, "capped_"):  # iteration caps (capped_at)
            self.capped_ = np.array([[m.capped_[0, 0] for m in row] for row in self.models_])
            self.max_iter = first.max_iter
        return self

    def predict(self, X) -> np.ndarray:
        if self._regressor:
            return np.stack([row[0].predict(group(X, g))[0]
                             for g, row in enumerate(self.models_)])
        return np.stack([np.stack([m.predict(group(X, g))[0, 0] for m in row])
                         for g, row in enumerate(self.models_)])
