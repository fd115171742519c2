"""The classification protocols: ``split``, ``kfold`` and ``inner-kfold``.

They follow SentEval's validation code (faithful to the published numbers): L2 is chosen on
dev accuracy rounded to 2 decimals in percent, ties -> the smaller L2 (first); ``kfold``
cross-validates on train with folds seeded by the run seed, each fold model early-stopping on
its held-out fold, then refits on train with 5% held out; ``inner-kfold`` nests k x k folds
seeded by 1111 (SentEval fixes that seed) and reports the mean outer test accuracy.
"""

from __future__ import annotations

from typing import AbstractSet, Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from estratos.protocols.base import (
    POOL,
    VALIDATION_SPLIT,
    CellOutcome,
    EstimatorFactory,
    Inputs,
    Protocol,
    SplitPlan,
    capped_at,
    register,
)
from estratos.protocols.estimators import n_groups, take
from estratos.protocols.folds import INNER_KFOLD_SEED, holdout_split, stratified_folds
from estratos.protocols.information import gold_bits, prior_log2p
from estratos.protocols.metrics import accuracy, f1_positive, test_metrics
from estratos.vocab import DEFAULT_KFOLD, DEFAULT_SEED, SELECT_ACCURACY, SELECT_CROSS_ENTROPY

Data = Tuple[Any, np.ndarray]


def _choose(dev_pct: np.ndarray) -> np.ndarray:
    """Index of the best L2 per group on dev percent rounded to 2 decimals (first max)."""
    return np.argmax(np.round(dev_pct, 2), axis=1)


# ---- the protocols as functions (any estimator factory) ------------------------------------

def split_protocol(make: EstimatorFactory, train: Data, dev: Data, test: Data,
                   l2_grid: Sequence[float], positive: Optional[int] = None,
                   select: str = SELECT_ACCURACY) -> List[CellOutcome]:
    """Train every (group, L2) on train with dev early stopping; best L2 on dev (by
    accuracy, SentEval's rule, or with ``select`` cross-entropy by the dev examples' mean
    gold-label log-loss, first minimum; the dev record then holds it too); test it."""
    est = make().fit(train[0], train[1], dev[0], dev[1], list(l2_grid))
    dev_pct = 100.0 * np.asarray(est.dev_score_)
    dev_ce: Optional[np.ndarray] = None
    if select == SELECT_CROSS_ENTROPY:
        dev_bits = gold_bits(est, dev[0], dev[1])
        if dev_bits is None:
            raise ValueError("choosing L2 by dev cross-entropy needs class probabilities")
        dev_ce = -dev_bits.mean(axis=-1)
        best = np.argmin(np.round(dev_ce, 6), axis=1)
    else:
        best = _choose(dev_pct)
    pred = np.asarray(est.predict(test[0]))
    bits = gold_bits(est, test[0], test[1])
    prior = prior_log2p(train[1], test[1])
    out = []
    for g, r in enumerate(best):
        dev_record: Dict[str, Optional[float]] = {"accuracy": round(float(dev_pct[g, r]), 2)}
        if dev_ce is not None:
            dev_record["cross_entropy"] = round(float(dev_ce[g, r]), 6)
        out.append(CellOutcome(
            l2=float(l2_grid[r]), dev=dev_record,
            test=test_metrics(pred[g, r], test[1], positive),
            epochs=int(est.epochs_[g, r]), predictions=pred[g, r], predicted=("test",),
            positive=positive, capped=capped_at(est, (g, r)),
            gold_log2p=None if bits is None else bits[g, r],
            prior_log2p=None if bits is None else prior))
    return out


def _cross_validate(make: EstimatorFactory, X: Any, y: np.ndarray, l2_grid: Sequence[float],
                    folds: Sequence[Tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Mean held-out accuracy (percent) ``(G, R)`` over folds; each fold model early-stops
    on its held-out part (as SentEval's k-fold classifiers do). An estimator with
    ``fit_folds`` fits every fold at once; any other, fold after fold."""
    if not folds:
        raise ValueError("cross-validation needs at least one fold")
    est = make()
    if callable(getattr(est, "fit_folds", None)):
        scores = np.asarray(est.fit_folds(X, y, folds, list(l2_grid)).dev_score_,
                            dtype=np.float64)
        per_fold = np.split(scores, len(folds))
    else:
        per_fold = [np.asarray(make().fit(take(X, tr), y[tr], take(X, te), y[te],
                                          list(l2_grid)).dev_score_, dtype=np.float64)
                    for tr, te in folds]
    total = per_fold[0]
    for s in per_fold[1:]:
        total = total + s
    return 100.0 * total / len(folds)


def _refit_and_predict(make: EstimatorFactory, X: Any, y: np.ndarray, l2: np.ndarray,
                       X_test: Any, y_test: np.ndarray, validation_split: float, seed: int
                       ) -> Tuple[np.ndarray, np.ndarray, List[Optional[int]],
                                  Optional[np.ndarray]]:
    """Refit each group with its chosen L2 on all of ``X`` (a seeded share held out for
    early stopping) and predict ``X_test``: (labels (G, n), epochs (G,), each group's
    :func:`capped_at`, the gold labels' log2-probabilities (G, n) or None)."""
    tr, dv = holdout_split(len(y), validation_split, seed)
    est = make().fit(take(X, tr), y[tr], take(X, dv), y[dv], np.asarray(l2)[:, None])
    epochs = np.asarray(est.epochs_)[:, 0]
    bits = gold_bits(est, X_test, y_test)
    return (np.asarray(est.predict(X_test))[:, 0], epochs,
            [capped_at(est, (g, 0)) for g in range(len(epochs))],
            None if bits is None else bits[:, 0])


def kfold_protocol(make: EstimatorFactory, train: Data, test: Data, l2_grid: Sequence[float],
                   *, k: int = DEFAULT_KFOLD, seed: int = DEFAULT_SEED,
                   validation_split: float = VALIDATION_SPLIT,
                   positive: Optional[int] = None) -> List[CellOutcome]:
    """SentEval's k-fold classifier: k-fold CV on train picks L2, refit on train, test once."""
    X, y = train
    folds = stratified_folds(y, k, seed)
    cv = _cross_validate(make, X, y, l2_grid, folds)
    best = _choose(cv)
    l2 = np.asarray([l2_grid[r] for r in best], dtype=np.float64)
    pred, epochs, capped, bits = _refit_and_predict(make, X, y, l2, test[0], test[1],
                                                    validation_split, seed)
    prior = prior_log2p(y, test[1])
    return [CellOutcome(l2=float(l2[g]), dev={"accuracy": round(float(cv[g, r]), 2)},
                        test=test_metrics(pred[g], test[1], positive), epochs=int(epochs[g]),
                        predictions=pred[g], predicted=("test",), positive=positive,
                        capped=capped[g],
                        gold_log2p=None if bits is None else bits[g],
                        prior_log2p=None if bits is None else prior)
            for g, r in enumerate(best)]


def inner_kfold_protocol(make: EstimatorFactory, pool: Data, l2_grid: Sequence[float], *,
                         k: int = DEFAULT_KFOLD, seed: int = DEFAULT_SEED,
                         validation_split: float = VALIDATION_SPLIT,
                         positive: Optional[int] = None,
                         fold_seed: int = INNER_KFOLD_SEED) -> List[CellOutcome]:
    """SentEval's nested k x k CV on one pool: per outer fold, inner CV picks L2, refit on the
    outer train part, test on the outer fold; report mean outer test (and mean inner dev).
    Accuracy and F1 are means over outer folds, rounded per fold as SentEval does. Every
    example is tested once, by the model of its outer fold (``folds``)."""
    X, y = pool
    G = n_groups(X)
    dev_best: List[np.ndarray] = []
    test_acc: List[np.ndarray] = []
    test_f1: List[np.ndarray] = []
    epochs: List[np.ndarray] = []
    chosen: List[np.ndarray] = []
    capped: List[List[Optional[int]]] = []
    predictions = np.zeros((G, len(y)), dtype=np.int64)
    gold_fold: Optional[np.ndarray] = np.zeros((G, len(y)))
    prior_bits = np.zeros(len(y))
    fold_of = np.zeros(len(y), dtype=np.int64)
    for f, (tr, te) in enumerate(stratified_folds(y, k, fold_seed)):
        X_tr, y_tr = take(X, tr), y[tr]
        inner = stratified_folds(y_tr, k, fold_seed)
        cv = _cross_validate(make, X_tr, y_tr, l2_grid, inner)
        best = _choose(cv)
        dev_best.append(np.round(cv[np.arange(G), best], 2))
        l2 = np.asarray([l2_grid[r] for r in best], dtype=np.float64)
        chosen.append(l2)
        pred, ep, cap, bits = _refit_and_predict(make, X_tr, y_tr, l2, take(X, te), y[te],
                                                 validation_split, seed)
        capped.append(cap)
        predictions[:, te] = pred
        prior_bits[te] = prior_log2p(y_tr, y[te], int(y.max(initial=0)) + 1)
        if bits is None or gold_fold is None:
            gold_fold = None
        else:
            gold_fold[:, te] = bits
        fold_of[te] = f
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
            extra={"l2_per_fold": l2s}, predictions=predictions[g], predicted=("all",),
            folds=fold_of, positive=positive,
            capped=max((n for c in capped if (n := c[g]) is not None), default=None),
            gold_log2p=None if gold_fold is None else gold_fold[g],
            prior_log2p=None if gold_fold is None else prior_bits))
    return out


# ---- split handling shared by the train/dev/test protocols ---------------------------------

def plan_train_dev_test(name: str, published: Sequence[str], present: AbstractSet[str],
                        names: Callable[[str], str], holdout: float) -> SplitPlan:
    """train/dev/test, or a held-out dev part cut from whichever of train/dev exists.

    Without train: train on the dev file minus a held-out part that becomes dev. Without
    dev: the held-out part comes from train. Without test (or both others): unusable.
    """
    splits = ("train", "dev", "test")
    if "test" not in present:
        return SplitPlan(name, (), splits, missing=("test", "train", "dev"))
    pct = f"{holdout:.0%}"
    if "train" in present and "dev" in present:
        return SplitPlan(name, (("train", "train"), ("dev", "dev"), ("test", "test")), splits)
    if "dev" in present:
        text = (f"no train file ({names('train')}): train on {names('dev')} minus a "
                f"held-out {pct} (fixed seed) that is the dev split; test on {names('test')}")
        return SplitPlan(name, (("dev", POOL), ("test", "test")), splits, POOL, text)
    if "train" in present:
        text = (f"no dev file ({names('dev')}): dev is a held-out {pct} (fixed seed) of "
                f"{names('train')}")
        return SplitPlan(name, (("train", POOL), ("test", "test")), splits, POOL, text)
    return SplitPlan(name, (), splits, missing=("train", "dev"))


def plan_all_required(name: str, published: Sequence[str], present: AbstractSet[str],
                      into: Optional[str]) -> SplitPlan:
    """Every published source is required; each is read into ``into`` (or its own name)."""
    missing = tuple(src for src in published if src not in present)
    splits = (into,) if into else tuple(published)
    if missing:
        return SplitPlan(name, (), splits, missing=tuple(published))
    return SplitPlan(name, tuple((src, into or src) for src in published), splits)


def _held_out(X: Any, y: np.ndarray, inputs: Inputs) -> Tuple[Data, Data]:
    """``(X, y)`` less a seeded ``validation_split`` share, and that share (as dev)."""
    tr, dv = holdout_split(len(y), inputs.validation_split, inputs.seed)
    return (take(X, tr), y[tr]), (take(X, dv), y[dv])


def _kfold_examples(n: float, grid: int, k: int, folds_together: bool = False) -> float:
    """Examples k-fold selection on ``n`` trains on: k folds per L2 value (counted once when
    they train together), then one refit."""
    return float(grid * (1 if folds_together else k) * n * (k - 1) / k + n)


# ---- the registered protocols --------------------------------------------------------------

@register
class SplitProtocol(Protocol):
    """train/dev/test: each L2 early-stops on dev, the best on dev is tested."""

    name = "split"
    seeds_share_data = True
    selects_on_dev = True

    def plan(self, published, present, names, holdout):
        return plan_train_dev_test(self.name, published, present, names, holdout)

    def code_data(self, inputs: Inputs):
        f, y = inputs.feature_source(), inputs.labels
        return (f("train"), y("train")), (f("dev"), y("dev"))

    def evaluate(self, inputs: Inputs) -> List[CellOutcome]:
        f, y = inputs.feature_source(), inputs.labels
        return split_protocol(inputs.classifier_factory(), (f("train"), y("train")),
                              (f("dev"), y("dev")), (f("test"), y("test")), inputs.l2_grid,
                              positive=inputs.positive, select=inputs.select)


@register
class KFoldProtocol(Protocol):
    """train/test: k-fold CV on train (folds seeded by the run seed) picks L2; refit; test."""

    name = "kfold"

    def plan(self, published, present, names, holdout):
        if "test" not in present:
            return SplitPlan(self.name, (), ("train", "test"), missing=("test", "train"))
        if "train" in present:
            return SplitPlan(self.name, (("train", "train"), ("test", "test")),
                             ("train", "test"))
        text = (f"no train file ({names('train')}): nested k-fold cross-validation on the "
                f"test file {names('test')} alone")
        return SplitPlan(InnerKFoldProtocol.name, (("test", "all"),), ("all",), fallback=text)

    def examples_trained(self, sizes, grid, k, folds_together=False):
        return _kfold_examples(sizes.get("train", 0), grid, k, folds_together)

    def code_data(self, inputs: Inputs):
        # the refit's data: train, with its seeded held-out share as dev
        return _held_out(inputs.feature_source()("train"), inputs.labels("train"), inputs)

    def evaluate(self, inputs: Inputs) -> List[CellOutcome]:
        f, y = inputs.feature_source(), inputs.labels
        return kfold_protocol(inputs.classifier_factory(), (f("train"), y("train")),
                              (f("test"), y("test")), inputs.l2_grid, k=inputs.kfold,
                              seed=inputs.seed, validation_split=inputs.validation_split,
                              positive=inputs.positive)


@register
class InnerKFoldProtocol(Protocol):
    """all: nested k x k CV (folds seeded by 1111); mean outer-fold test accuracy."""

    name = "inner-kfold"
    train_split = "all"
    scored_split = "all"

    def plan(self, published, present, names, holdout):
        return plan_all_required(self.name, published, present, "all")

    def examples_trained(self, sizes, grid, k, folds_together=False):
        # per outer fold: inner k folds per L2 value, then one refit
        return float(k * _kfold_examples(sizes.get("all", 0) * (k - 1) / k, grid, k,
                                         folds_together))

    def code_data(self, inputs: Inputs):
        return _held_out(inputs.feature_source()("all"), inputs.labels("all"), inputs)

    def evaluate(self, inputs: Inputs) -> List[CellOutcome]:
        return inner_kfold_protocol(inputs.classifier_factory(),
                                    (inputs.feature_source()("all"), inputs.labels("all")),
                                    inputs.l2_grid, k=inputs.kfold, seed=inputs.seed,
                                    validation_split=inputs.validation_split,
                                    positive=inputs.positive)
