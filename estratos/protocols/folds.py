"""Seeded folds and held-out parts: the data splits protocols make at evaluation time."""

from __future__ import annotations

import warnings
from typing import List, Tuple

import numpy as np

from estratos.vocab import DEFAULT_SEED

#: SentEval fixes the folds of its nested cross-validation to this seed
INNER_KFOLD_SEED = DEFAULT_SEED


def stratified_folds(y: np.ndarray, k: int, seed: int) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Shuffled stratified k folds (scikit-learn's, as SentEval uses): (train, held-out)."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(y)
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=int(seed))
    with warnings.catch_warnings():
        # classes smaller than k: sklearn warns and still makes valid folds
        warnings.simplefilter("ignore", UserWarning)
        return [(tr, te) for tr, te in skf.split(np.zeros(len(y)), y)]


def holdout_split(n: int, fraction: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """(train, dev) rows: the first ``int(fraction * n)`` of a seeded permutation are dev.

    SentEval's ``validation_split``; the permutation has its own seeded stream (not the
    training passes'), so batched and one-at-a-time runs hold out the same rows.
    """
    perm = np.random.default_rng((int(seed), 1)).permutation(n)
    cut = int(fraction * n)
    if cut == 0 and n > 1:
        cut = 1  # early stopping needs at least one dev example
    return np.sort(perm[cut:]), np.sort(perm[:cut])
