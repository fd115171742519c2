"""A task's classifier: validated per-task overrides on a fresh estimator per task.

Why: per-task overrides (DC's 2000 hidden units, NLI's short schedule...) must never leak into
the next task. The defaults live in one place, the estimators' constructors
(:mod:`estratos.probe.estimators.classifiers`, scikit-learn style, found by name in the registry of
:mod:`estratos.probe.estimators.registry`); a task's ``spec.classifier`` mapping
(read-only) is validated here and applied to a NEW estimator (:func:`resolve_classifier`), so
nothing is shared or mutated between tasks. What results record is that estimator's
``record()``, built from ``get_params()``.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Union

from estratos.errors import TaskError
from estratos.probe.estimators.classifiers import (
    DEFAULT_CLASSIFIER,
    RecordedEstimator,
    RelatednessRegressor,
    get_estimator,
)
from estratos.vocab import DEFAULT_L2_GRID, NOREG_GRID, OVERRIDE_KEYS, Role  # noqa: F401


def _as_int(task: str, key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TaskError(f"{task}: classifier override {key}={value!r} must be an integer "
                        f">= {minimum}")
    return int(value)


def _l2_grid(task: str, value: Any) -> Tuple[float, ...]:
    if isinstance(value, str):
        if value == "noreg":
            return NOREG_GRID
        raise TaskError(f"{task}: classifier override l2_grid={value!r}: use a list of "
                        "numbers or \"noreg\"")
    try:
        grid = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise TaskError(f"{task}: classifier override l2_grid={value!r} is not a list of "
                        "numbers") from None
    if not grid or any(not (v >= 0.0) for v in grid):
        raise TaskError(f"{task}: classifier override l2_grid={value!r} needs at least one "
                        "value, all >= 0")
    return grid


def task_overrides(overrides: Optional[Mapping[str, Any]] = None, *,
                   task: str = "task") -> Dict[str, Any]:
    """A task's ``spec.classifier`` validated and converted to constructor parameters (a new
    dict). Unknown keys or bad values raise :class:`TaskError` naming the task."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(OVERRIDE_KEYS))
    if unknown:
        raise TaskError(f"{task}: unknown classifier override(s) {', '.join(unknown)} "
                        f"(known: {', '.join(OVERRIDE_KEYS)})")
    values: Dict[str, Any] = {}
    for key in ("batch_size", "tenacity", "epoch_size", "max_epoch"):
        if key in overrides:
            values[key] = _as_int(task, key, overrides[key], 1 if key != "tenacity" else 0)
    if "nhid" in overrides:
        values["nhid"] = _as_int(task, "nhid", overrides["nhid"], 0)
    if "kfold" in overrides:
        values["kfold"] = _as_int(task, "kfold", overrides["kfold"], 2)
    if "dropout" in overrides:
        p = overrides["dropout"]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise TaskError(f"{task}: classifier override dropout={p!r} must be in [0, 1)")
        values["dropout"] = float(p)
    if "optim" in overrides:
        if overrides["optim"] != "adam":
            raise TaskError(f"{task}: classifier override optim={overrides['optim']!r}: only "
                            "\"adam\" (SentEval's default, used by every published task) "
                            "is implemented")
        values["optim"] = "adam"
    if "l2_grid" in overrides:
        values["l2_grid"] = _l2_grid(task, overrides["l2_grid"])
    return values


def resolve_classifier(overrides: Optional[Mapping[str, Any]] = None, *,
                       classifier: Union[str, RecordedEstimator] = DEFAULT_CLASSIFIER,
                       task: str = "task", **params: Any) -> RecordedEstimator:
    """A NEW estimator with a task's overrides applied: ``classifier`` is a registered name
    (``--classifier``) or an estimator whose parameters are the starting point (it is not
    changed).

    Overrides that the chosen estimator has no parameter for (e.g. ``nhid`` for ``lbfgs``,
    a linear model), or does not take (its ``task_overrides``), are validated and then do
    not apply. ``params`` (``n_classes``, ``seed``,
    ``device``...) are set last. Raises :class:`OptionError` (unknown classifier) or
    :class:`TaskError` (bad override).
    """
    est = (get_estimator(classifier)() if isinstance(classifier, str)
           else classifier.fresh())
    values = task_overrides(overrides, task=task)
    known = est.get_params()
    taken = known if est.task_overrides is None else set(est.task_overrides) & set(known)
    est.set_params(**{k: v for k, v in values.items() if k in taken}, **params)
    return est


def resolve_regressor(score_range: Optional[Tuple[float, float]], **params: Any
                      ) -> RelatednessRegressor:
    """The relatedness protocol's regressor for a task's gold ``score_range`` (its levels
    are the integer scores of the range; task overrides do not apply to it)."""
    from estratos.protocols import relatedness_levels

    _, levels = relatedness_levels(score_range)
    return RelatednessRegressor(n_classes=levels, **params)


def task_estimator(spec: Any, protocol: Any, classifier: Union[str, RecordedEstimator],
                   n_classes: Optional[int] = None) -> Optional[RecordedEstimator]:
    """The estimator ``protocol`` trains for a task (``spec``: its :class:`TaskSpec`): the
    chosen classifier with the task's overrides, the relatedness regressor, or None when the
    protocol trains nothing. What cost estimates and result records are built from."""
    if protocol.trains == Role.REGRESSOR:
        return resolve_regressor(spec.score_range)
    if protocol.trains is None:
        return None
    extra = {} if n_classes is None else {"n_classes": n_classes}
    return resolve_classifier(spec.classifier, classifier=classifier, task=spec.id, **extra)
