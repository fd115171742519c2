"""The score protocols: ``relatedness`` (SICK-R, a trained regressor) and ``cosine`` (STS).

Their labels are float scores. ``relatedness`` trains Tai et al.'s regressor on the combined
features (or, given no regressor, scores the cosine of the two sentence vectors, with MSE
through a least-squares line fitted on train); ``cosine`` trains nothing: it correlates the
cosine of the two sentence vectors with gold, per subset.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from estratos.protocols.base import CellOutcome, Inputs, Protocol, register
from estratos.protocols.classification import plan_all_required, plan_train_dev_test
from estratos.protocols.estimators import n_groups
from estratos.protocols.metrics import correlations, row_cosine
from estratos.vocab import Role

#: the gold score range of relatedness tasks that do not declare one (SICK-R)
DEFAULT_SCORE_RANGE = (1.0, 5.0)


def relatedness_levels(score_range: Optional[Tuple[float, float]]) -> Tuple[float, int]:
    """(offset, K): scores are shifted by ``offset`` onto 1..K for Tai et al.'s target."""
    low, high = DEFAULT_SCORE_RANGE if score_range is None else (float(score_range[0]),
                                                                 float(score_range[1]))
    return 1.0 - low, int(round(high - low)) + 1


def _pair_cosines(pairs: Tuple[Any, Any]) -> np.ndarray:
    """Cosine of every example's two vectors per group: ``(G, n)`` float64."""
    u, v = pairs
    return np.stack([row_cosine(u[g], v[g]) for g in range(n_groups(u))])


def relatedness_protocol(make, train, dev, test, offset: float = 0.0) -> List[CellOutcome]:
    """SICK-R: fit the score-distribution regressor (dev Pearson selects the model), then
    test Pearson, Spearman and MSE of the predicted score against gold.

    Scores are given on the task's scale and shifted by ``offset`` for the regressor; MSE and
    the recorded predictions are on the task's scale (the shift cancels)."""
    shift = float(offset)
    est = make().fit(train[0], np.asarray(train[1], dtype=np.float64) + shift, dev[0],
                     np.asarray(dev[1], dtype=np.float64) + shift)
    yhat = np.asarray(est.predict(test[0]), dtype=np.float64)
    gold = np.asarray(test[1], dtype=np.float64) + shift
    out = []
    for g in range(yhat.shape[0]):
        pearson, spearman = correlations(yhat[g], gold)
        out.append(CellOutcome(
            l2=0.0, dev={"pearson": float(est.dev_score_[g])},
            test={"pearson": pearson, "spearman": spearman,
                  "mse": float(np.mean((yhat[g] - gold) ** 2))},
            epochs=int(est.epochs_[g]), predictions=yhat[g] - shift, predicted=("test",)))
    return out


def cosine_relatedness(train, dev, test) -> List[CellOutcome]:
    """Relatedness with nothing trained: ``train``/``dev``/``test`` are (cosines (G, n),
    gold). Correlations of the cosine; MSE through a line from cosine to gold fitted on
    train (the correlations do not depend on it)."""
    out = []
    for g in range(train[0].shape[0]):
        c_tr, gold_tr = train[0][g], np.asarray(train[1], dtype=np.float64)
        slope, intercept = (np.polyfit(c_tr, gold_tr, 1) if np.ptp(c_tr) > 0
                            else (0.0, float(gold_tr.mean())))
        c_te, gold_te = test[0][g], np.asarray(test[1], dtype=np.float64)
        pearson, spearman = correlations(c_te, gold_te)
        line = slope * c_te + intercept
        dev_p, _ = correlations(dev[0][g], dev[1])
        out.append(CellOutcome(
            l2=None, dev={"pearson": dev_p},
            test={"pearson": pearson, "spearman": spearman,
                  "mse": float(np.mean((line - gold_te) ** 2))},
            predictions=line, predicted=("test",)))
    return out


def cosine_protocol(subsets: Dict[str, Tuple[np.ndarray, np.ndarray]]) -> List[CellOutcome]:
    """STS: cosine vs gold, per subset; "all" as the plain mean and the size-weighted mean
    over subsets (the weighted one is the headline).

    ``subsets``: name -> (cosines (G, n), gold (n,)).
    """
    names = sorted(subsets)
    if not names:
        raise ValueError("cosine protocol needs at least one subset")
    G = subsets[names[0]][0].shape[0]
    out = []
    for g in range(G):
        per: Dict[str, Dict[str, Any]] = {}
        for name in names:
            sims, gold = subsets[name]
            p, s = correlations(sims[g], gold)
            per[name] = {"pearson": p, "spearman": s, "n": int(len(gold))}
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
        out.append(CellOutcome(
            l2=None, dev=None, test=test, epochs=None,
            predictions=np.concatenate([subsets[n][0][g] for n in names]),
            predicted=tuple(names)))
    return out


@register
class CosineProtocol(Protocol):
    """One split per subset: Pearson/Spearman of the two vectors' cosine vs gold."""

    name = "cosine"
    scores = True
    scored_split = None
    trains = None
    train_split = None
    subset_splits = True
    seeds_share_data = True

    def plan(self, published, present, names, holdout):
        return plan_all_required(self.name, published, present, None)

    def evaluate(self, inputs: Inputs) -> List[CellOutcome]:
        pairs = inputs.pair_source()
        return cosine_protocol({name: (_pair_cosines(pairs(name)), inputs.labels(name))
                                for name in inputs.splits})


@register
class RelatednessProtocol(Protocol):
    """train/dev/test scores: Tai et al.'s regressor (dev Pearson early stopping)."""

    name = "relatedness"
    scores = True
    scored_split = None
    trains = Role.REGRESSOR
    seeds_share_data = True

    def plan(self, published, present, names, holdout):
        return plan_train_dev_test(self.name, published, present, names, holdout)

    def evaluate(self, inputs: Inputs) -> List[CellOutcome]:
        y = inputs.labels
        if inputs.regressor is None:
            pairs = inputs.pair_source()

            def cos(split: str):
                return _pair_cosines(pairs(split)), y(split)
            return cosine_relatedness(cos("train"), cos("dev"), cos("test"))
        f = inputs.feature_source()
        offset, _ = relatedness_levels(inputs.score_range)
        return relatedness_protocol(inputs.regressor, (f("train"), y("train")),
                                    (f("dev"), y("dev")), (f("test"), y("test")), offset)
