"""A task's classifier: validated per-task overrides on a fresh estimator per task.

Why: per-task overrides (DC's 2000 hidden units, NLI's short schedule...) must never leak into
the next task. The defaults live in one place, the estimators' constructors
(:mod:`estratos.probe.classifiers`, scikit-learn style); a task's ``spec.classifier`` mapping
(read-only) is validated here and applied to a NEW estimator (:func:`resolve_classifier`), so
nothing is shared or mutated between tasks. What results record is that estimator's
``record()``, built from ``get_params()``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from sklearn.base import BaseEstimator

from estratos.errors import OptionError, TaskError

#: the L2 grid of SentEval's PyTorch classifiers: 10**-5 .. 10**-2
DEFAULT_L2_GRID: Tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)
#: what SentEval uses when a task sets ``noreg`` (NLI, DC, SSP, RST)
NOREG_GRID: Tuple[float, ...] = (1e-9,)
#: ``--classifier`` choices (estratos.probe.classifiers.CLASSIFIERS maps them to classes)
CLASSIFIERS: Tuple[str, ...] = ("senteval", "lbfgs")
#: the override keys a task spec (``spec.classifier``) may set
OVERRIDE_KEYS: Tuple[str, ...] = ("nhid", "dropout", "optim", "batch_size", "tenacity",
                                  "epoch_size", "max_epoch", "l2_grid", "kfold")


class RecordedEstimator(BaseEstimator):
    """scikit-learn parameters (``get_params``/``set_params``/``clone``) plus :meth:`record`,
    the ``classifier`` object of a result record, built from ``get_params()``."""

    name = ""
    #: parameters recorded in results, in this order
    _recorded: Tuple[str, ...] = ()
    #: what the method fixes (not parameters) but results record, e.g. ``optim: "lbfgs"``
    _facts: Dict[str, Any] = {}

    def record(self, name: Optional[str] = None) -> Dict[str, Any]:
        """``{"name": name or self.name, <recorded parameters>}`` (docs/contracts.md)."""
        params = self.get_params()
        out: Dict[str, Any] = {"name": name or self.name}
        for key in self._recorded:
            value = self._facts[key] if key in self._facts else params[key]
            out[key] = [float(v) for v in value] if key == "l2_grid" else value
        return out


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


def check_classifier(classifier: str) -> str:
    """``--classifier`` must name a known classifier (:class:`OptionError` otherwise)."""
    if classifier not in CLASSIFIERS:
        raise OptionError(f"--classifier: unknown classifier {classifier!r} "
                          f"(choose from {', '.join(CLASSIFIERS)})")
    return classifier


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
                       classifier: str = "senteval", task: str = "task",
                       **params: Any) -> Any:
    """A NEW estimator ``classifier`` (``--classifier``) with a task's overrides applied.

    Overrides that the chosen estimator has no parameter for (e.g. ``nhid`` for ``lbfgs``,
    a linear model) are validated and then do not apply. ``params`` (``n_classes``, ``seed``,
    ``device``...) are set last. Raises :class:`OptionError` (unknown classifier) or
    :class:`TaskError` (bad override).
    """
    from estratos.probe.classifiers import CLASSIFIER_CLASSES

    cls = CLASSIFIER_CLASSES[check_classifier(classifier)]
    values = task_overrides(overrides, task=task)
    est = cls()
    known = est.get_params()
    est.set_params(**{k: v for k, v in values.items() if k in known}, **params)
    return est


def parse_seeds(seeds: Union[str, int, Iterable[Any]]) -> Tuple[int, ...]:
    """``"1111,1,2"`` (or an int, or integers) -> (1111, 1, 2), duplicates dropped in order;
    bad values raise :class:`OptionError` naming ``--seeds``."""
    if isinstance(seeds, str):
        items: List[Any] = [t for t in seeds.split(",") if t.strip()]
    elif isinstance(seeds, Iterable):
        items = list(seeds)
    else:
        items = [seeds]
    out: List[int] = []
    for item in items:
        if isinstance(item, bool):
            raise OptionError(f"--seeds: {item!r} is not an integer seed")
        try:
            value = int(str(item).strip())
        except ValueError:
            raise OptionError(f"--seeds: {item!r} is not an integer seed") from None
        if value < 0:
            raise OptionError(f"--seeds: seeds must be >= 0, got {value}")
        if value not in out:
            out.append(value)
    if not out:
        raise OptionError("--seeds: give at least one seed")
    return tuple(out)
