"""Stage two: probes for every task x layer x seed from the cache alone.

Public API: :class:`ProbeConfig` / :class:`BaselineConfig` (a run's options, checked once),
:func:`run_probe` (the grid runner), :func:`probe_tasks` (the same from
command-line forms), :func:`run_baseline` / :func:`baseline_tasks` (the surface baselines'
grid, and the same from command-line forms), :func:`evaluate_cells` /
:func:`classifier_record` (one task's cells through its protocol,
:mod:`estratos.protocols`), :func:`resolve_probe_device`, :func:`resolve_classifier` (a
task's estimator) and the classifiers (:class:`SentEvalClassifier`,
:class:`LBFGSClassifier`, :class:`RelatednessRegressor`, scikit-learn style). Results are
written and read through :mod:`estratos.results`. See docs/probe.md.

Names are imported on first use, so importing a light submodule does not load torch.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "run_probe": "grid.runner", "probe_tasks": "command", "summarize": "grid.outcome",
    "run_baseline": "grid.baselines", "baseline_tasks": "command",
    "ProbeConfig": "config", "BaselineConfig": "config",
    "resolve_classifier": "estimators.settings", "evaluate_cells": "cells",
    "classifier_record": "cells", "resolve_probe_device": "cells",
    "SentEvalClassifier": "estimators.classifiers",
    "LBFGSClassifier": "estimators.classifiers",
    "RelatednessRegressor": "estimators.classifiers",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazy exports' one table


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"estratos.probe.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'estratos.probe' has no attribute {name!r}")
