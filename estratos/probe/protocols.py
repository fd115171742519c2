"""Evaluation protocols: how train/dev/test (or folds) turn estimators into scores.

Why separate from the classifiers: the same split / k-fold / nested k-fold logic serves the
batched SentEval probe, the L-BFGS probe, a one-model-at-a-time wrapper (``--sequential``)
and other estimators (the TF-IDF baseline). A protocol only needs an estimator *factory*
``make() -> estimator`` whose estimators follow this small interface:

- ``fit(X, y, X_dev, y_dev, l2)``: ``X`` is G feature groups (an array ``(G, n, F)`` or a list
  of G 2-d matrices, e.g. sparse), ``l2`` a grid ``(R,)`` or a table ``(G, R)``;
- ``dev_score_`` ``(G, R)``: best dev accuracy (fraction); ``epochs_`` ``(G, R)``;
- ``predict(X)`` -> labels ``(G, R, n)``.

The protocols follow SentEval's validation code (faithful to the published numbers):
L2 is chosen on dev accuracy rounded to 2 decimals in percent, ties -> the smaller L2 (first);
``kfold`` cross-validates on train with folds seeded by the run seed, each fold model early-
stopping on its held-out fold, then refits on train with 5% held out; ``inner-kfold`` nests
k x k folds seeded by 1111 (SentEval fixes that seed) and reports the mean outer test accuracy.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

log = logging.getLogger(__name__)

#: SentEval fixes the folds of its nested cross-validation to this seed
INNER_KFOLD_SEED = 1111


@dataclass
class CellOutcome:
    """What one feature group (one layer spec) scored under a protocol."""

    l2: Optional[float]
    dev: Optional[Dict[str, float]]
    test: Dict[str, Any]
    epochs: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict)


# ---- data helpers --------------------------------------------------------------------------

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


# ---- metrics -------------------------------------------------------------------------------

def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    """Accuracy in percent."""
    return float(100.0 * np.mean(np.asarray(pred) == np.asarray(gold))) if len(gold) else 0.0


def f1_positive(pred: np.ndarray, gold: np.ndarray, positive: int) -> float:
    """F1 (percent) of the positive class; 0 when it is never predicted nor present."""
    pred, gold = np.asarray(pred), np.asarray(gold)
    tp = float(np.sum((pred == positive) & (gold == positive)))
    fp = float(np.sum((pred == positive) & (gold != positive)))
    fn = float(np.sum((pred != positive) & (gold == positive)))
    return 0.0 if tp == 0 else 100.0 * 2 * tp / (2 * tp + fp + fn)


def _test_metrics(pred: np.ndarray, gold: np.ndarray, positive: Optional[int]) -> Dict[str, float]:
    out = {"accuracy": round(accuracy(pred, gold), 2)}
    if positive is not None:
        out["f1"] = round(f1_positive(pred, gold, positive), 2)
    return out


def _choose(dev_pct: np.ndarray) -> np.ndarray:
    """Index of the best L2 per group on dev percent rounded to 2 decimals (first max)."""
    return np.argmax(np.round(dev_pct, 2), axis=1)


def _l2_of(grid: Sequence[float], r: int) -> float:
    return float(grid[r])


# ---- trained protocols ---------------------------------------------------------------------

EstimatorFactory = Callable[[], Any]


def split_protocol(make: EstimatorFactory, train: Tuple[Any, np.ndarray],
                   dev: Tuple[Any, np.ndarray], test: Tuple[Any, np.ndarray],
                   l2_grid: Sequence[float], positive: Optional[int] = None
                   ) -> List[CellOutcome]:
    """Train every (group, L2) on train with dev early stopping; best L2 on dev; test it."""
    est = make().fit(train[0], train[1], dev[0], dev[1], list(l2_grid))
    dev_pct = 100.0 * np.asarray(est.dev_score_)
    best = _choose(dev_pct)
    pred = est.predict(test[0])
    out = []
    for g, r in enumerate(best):
        out.append(CellOutcome(
            l2=_l2_of(l2_grid, r), dev={"accuracy": round(float(dev_pct[g, r]), 2)},
            test=_test_metrics(pred[g, r], test[1], positive),
            epochs=int(est.epochs_[g, r])))
    return out


def _cross_validate(make: EstimatorFactory, X: Any, y: np.ndarray, l2_grid: Sequence[float],
                    folds: Sequence[Tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Mean held-out accuracy (percent) ``(G, R)`` over folds; each fold model early-stops
    on its held-out part (as SentEval's k-fold classifiers do)."""
    total = None
    for tr, te in folds:
        est = make().fit(take(X, tr), y[tr], take(X, te), y[te], list(l2_grid))
        s = np.asarray(est.dev_score_, dtype=np.float64)
        total = s if total is None else total + s
    return 100.0 * total / len(folds)


def _refit_and_predict(make: EstimatorFactory, X: Any, y: np.ndarray, l2: np.ndarray,
                       X_test: Any, validation_split: float, seed: int
                       ) -> Tuple[np.ndarray, np.ndarray]:
    """Refit each group with its chosen L2 on all of ``X`` (a seeded share held out for
    early stopping) and predict ``X_test``: (labels (G, n), epochs (G,))."""
    tr, dv = holdout_split(len(y), validation_split, seed)
    est = make().fit(take(X, tr), y[tr], take(X, dv), y[dv], np.asarray(l2)[:, None])
    return np.asarray(est.predict(X_test))[:, 0], np.asarray(est.epochs_)[:, 0]


def kfold_protocol(make: EstimatorFactory, train: Tuple[Any, np.ndarray],
                   test: Tuple[Any, np.ndarray], l2_grid: Sequence[float], *, k: int = 10,
                   seed: int = 1111, validation_split: float = 0.05,
                   positive: Optional[int] = None) -> List[CellOutcome]:
    """SentEval's k-fold classifier: k-fold CV on train picks L2, refit on train, test once."""
    X, y = train
    folds = stratified_folds(y, k, seed)
    cv = _cross_validate(make, X, y, l2_grid, folds)
    best = _choose(cv)
    l2 = np.asarray([l2_grid[r] for r in best], dtype=np.float64)
    pred, epochs = _refit_and_predict(make, X, y, l2, test[0], validation_split, seed)
    return [CellOutcome(l2=float(l2[g]), dev={"accuracy": round(float(cv[g, r]), 2)},
                        test=_test_metrics(pred[g], test[1], positive), epochs=int(epochs[g]))
            for g, r in enumerate(best)]


def inner_kfold_protocol(make: EstimatorFactory, pool: Tuple[Any, np.ndarray],
                         l2_grid: Sequence[float], *, k: int = 10, seed: int = 1111,
                         validation_split: float = 0.05, positive: Optional[int] = None,
                         fold_seed: int = INNER_KFOLD_SEED) -> List[CellOutcome]:
    """SentEval's nested k x k CV on one pool: per outer fold, inner CV picks L2, refit on the
    outer train part, test on the outer fold; report mean outer test (and mean inner dev).
    Accuracy and F1 are means over outer folds, rounded per fold as SentEval does."""
    X, y = pool
    G = n_groups(X)
    dev_best: List[np.ndarray] = []
    test_acc: List[np.ndarray] = []
    test_f1: List[np.ndarray] = []
    epochs: List[np.ndarray] = []
    chosen: List[np.ndarray] = []
    for tr, te in stratified_folds(y, k, fold_seed):
        X_tr, y_tr = take(X, tr), y[tr]
        inner = stratified_folds(y_tr, k, fold_seed)
        cv = _cross_validate(make, X_tr, y_tr, l2_grid, inner)
        best = _choose(cv)
        dev_best.append(np.round(cv[np.arange(G), best], 2))
        l2 = np.asarray([l2_grid[r] for r in best], dtype=np.float64)
        chosen.append(l2)
        pred, ep = _refit_and_predict(make, X_tr, y_tr, l2, take(X, te), validation_split, seed)
        epochs.append(ep)
        test_acc.append(np.array([round(accuracy(pred[g], y[te]), 2) for g in range(G)]))
        if positive is not None:
            test_f1.append(np.array([round(f1_positive(pred[g], y[te], positive), 2)
                                     for g in range(G)]))
    out = []
    for g in range(G):
        test = {"accuracy": round(float(np.mean([a[g] for a in test_acc])), 2)}
        if positive is not None:
            test["f1"] = round(float(np.mean([f[g] for f in test_f1])), 2)
        l2s = [float(c[g]) for c in chosen]
        # the L2 most often chosen across outer folds (smallest on ties) summarises the cell
        values, counts = np.unique(l2s, return_counts=True)
        out.append(CellOutcome(
            l2=float(values[np.argmax(counts)]),
            dev={"accuracy": round(float(np.mean([d[g] for d in dev_best])), 2)},
            test=test, epochs=int(round(float(np.mean([e[g] for e in epochs])))),
            extra={"l2_per_fold": l2s}))
    return out


def relatedness_protocol(make: EstimatorFactory, train: Tuple[Any, np.ndarray],
                         dev: Tuple[Any, np.ndarray], test: Tuple[Any, np.ndarray]
                         ) -> List[CellOutcome]:
    """SICK-R: fit the score-distribution regressor (dev Pearson selects the model), then
    test Pearson, Spearman and MSE of the predicted score against gold."""
    from scipy.stats import pearsonr, spearmanr

    est = make().fit(train[0], train[1], dev[0], dev[1])
    yhat = np.asarray(est.predict(test[0]), dtype=np.float64)
    gold = np.asarray(test[1], dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        test_pear = [pearsonr(row, gold)[0] if len(gold) > 1 else np.nan for row in yhat]
    out = []
    for g in range(yhat.shape[0]):
        rho = spearmanr(yhat[g], gold).correlation
        out.append(CellOutcome(
            l2=0.0, dev={"pearson": float(est.dev_score_[g])},
            test={"pearson": _finite_or_none(test_pear[g]),
                  "spearman": _finite_or_none(rho),
                  "mse": float(np.mean((yhat[g] - gold) ** 2))},
            epochs=int(est.epochs_[g])))
    return out


def cosine_protocol(subsets: Mapping[str, Tuple[np.ndarray, np.ndarray, np.ndarray]]
                    ) -> List[CellOutcome]:
    """STS: cosine of the two sentence vectors vs gold, per subset; "all" as the plain mean
    and the size-weighted mean over subsets (the weighted one is the headline).

    ``subsets``: name -> (u (G, n, D), v (G, n, D), gold (n,)).
    """
    from scipy.stats import pearsonr, spearmanr

    names = sorted(subsets)
    if not names:
        raise ValueError("cosine protocol needs at least one subset")
    G = subsets[names[0]][0].shape[0]
    out = []
    for g in range(G):
        per: Dict[str, Dict[str, float]] = {}
        for name in names:
            u, v, gold = subsets[name]
            sims = cosine_similarity(u[g], v[g])
            gold = np.asarray(gold, dtype=np.float64)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = pearsonr(sims, gold)[0] if len(gold) > 1 else np.nan
                s = spearmanr(sims, gold).correlation if len(gold) > 1 else np.nan
            per[name] = {"pearson": _finite_or_none(p), "spearman": _finite_or_none(s),
                         "n": int(len(gold))}
        sizes = np.array([per[n]["n"] for n in names], dtype=np.float64)
        test: Dict[str, Any] = {}
        for metric in ("pearson", "spearman"):
            vals = [per[n][metric] for n in names]
            if any(v is None for v in vals):  # undefined in a subset: undefined overall
                test[f"{metric}_mean"] = test[f"{metric}_wmean"] = None
            else:
                arr = np.array(vals, dtype=np.float64)
                test[f"{metric}_mean"] = float(arr.mean())
                test[f"{metric}_wmean"] = float((arr * sizes).sum() / sizes.sum())
            test[metric] = test[f"{metric}_wmean"]
        test["subsets"] = per
        out.append(CellOutcome(l2=None, dev=None, test=test, epochs=None))
    return out


def _finite_or_none(value: float) -> Optional[float]:
    """A correlation, or None when it is undefined (constant predictions or gold)."""
    return float(value) if np.isfinite(value) else None


def cosine_similarity(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity (float64); a zero vector gives 0."""
    u = np.asarray(u, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    num = (u * v).sum(axis=1)
    den = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sims = num / den
    return np.where(den > 0, sims, 0.0)


# ---- one model at a time -------------------------------------------------------------------

class OneAtATime:
    """Wrap an estimator factory so every (group, L2) model is trained alone (G = R = 1).

    Why: ``--sequential`` runs cell by cell through the same code, to check that batching
    changes nothing and to measure what batching saves.
    """

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
        return self

    def predict(self, X) -> np.ndarray:
        if self._regressor:
            return np.stack([row[0].predict(group(X, g))[0]
                             for g, row in enumerate(self.models_)])
        return np.stack([np.stack([m.predict(group(X, g))[0, 0] for m in row])
                         for g, row in enumerate(self.models_)])
