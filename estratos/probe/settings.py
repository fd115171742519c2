"""Classifier settings: SentEval's defaults + one task's overrides -> a new frozen object.

Why a frozen dataclass built by :func:`resolve_settings`: per-task overrides (DC's 2000 hidden
units, NLI's short schedule...) must never leak into the next task. Nothing here is mutable
or module-global except the read-only defaults, and every task gets a fresh object.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from estratos.errors import OptionError, TaskError

#: the L2 grid of SentEval's PyTorch classifiers: 10**-5 .. 10**-2
DEFAULT_L2_GRID: Tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)
#: what SentEval uses when a task sets ``noreg`` (NLI, DC, SSP, RST)
NOREG_GRID: Tuple[float, ...] = (1e-9,)
CLASSIFIERS: Tuple[str, ...] = ("senteval", "lbfgs")
#: the L-BFGS probe's solver settings (estratos.probe.classifiers.LBFGSClassifier defaults)
LBFGS_MAX_ITER = 1000
LBFGS_TOL = 1e-4
#: the override keys a task spec (``spec.classifier``) may set
OVERRIDE_KEYS: Tuple[str, ...] = ("nhid", "dropout", "optim", "batch_size", "tenacity",
                                  "epoch_size", "max_epoch", "l2_grid", "kfold")


@dataclass(frozen=True)
class ClassifierSettings:
    """Everything that defines how one task's probes are trained (see docs/probe.md)."""

    name: str = "senteval"
    nhid: int = 0
    dropout: float = 0.0
    optim: str = "adam"
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200
    l2_grid: Tuple[float, ...] = DEFAULT_L2_GRID
    kfold: int = 10
    #: fraction of the training part held out for early stopping when there is no dev set
    validation_split: float = 0.05

    def record(self) -> Dict[str, Any]:
        """The ``classifier`` object of a result record (docs/contracts.md).

        ``lbfgs`` records what it actually runs (no Adam, batches or early stopping).
        """
        if self.name == "lbfgs":
            return {"name": "lbfgs", "nhid": 0, "optim": "lbfgs", "max_iter": LBFGS_MAX_ITER,
                    "tol": LBFGS_TOL, "l2_grid": list(self.l2_grid)}
        return {"name": self.name, "nhid": self.nhid, "optim": self.optim,
                "batch_size": self.batch_size, "tenacity": self.tenacity,
                "epoch_size": self.epoch_size, "max_epoch": self.max_epoch,
                "dropout": self.dropout, "l2_grid": list(self.l2_grid)}


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


def resolve_settings(overrides: Optional[Mapping[str, Any]] = None, *,
                     classifier: str = "senteval", task: str = "task") -> ClassifierSettings:
    """Defaults + ``overrides`` (a task's ``spec.classifier``) + run options -> new settings.

    ``classifier`` is the ``--classifier`` option. Unknown override keys or bad values raise
    :class:`TaskError` naming the task; an unknown classifier raises :class:`OptionError`.
    """
    if classifier not in CLASSIFIERS:
        raise OptionError(f"--classifier: unknown classifier {classifier!r} "
                          f"(choose from {', '.join(CLASSIFIERS)})")
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(OVERRIDE_KEYS))
    if unknown:
        raise TaskError(f"{task}: unknown classifier override(s) {', '.join(unknown)} "
                        f"(known: {', '.join(OVERRIDE_KEYS)})")
    values: Dict[str, Any] = {"name": classifier}
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
    return dataclasses.replace(ClassifierSettings(), **values)


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
