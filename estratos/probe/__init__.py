"""Stage two: probes for every task x layer x seed from the cache alone; results and reports.

Public API: :func:`run_probe` (the grid runner), :func:`probe_tasks` (the same from
command-line forms), :func:`read_results` / :class:`ResultsStore` (the JSON-lines store),
:func:`resolve_settings` / :class:`ClassifierSettings`, the classifiers
(:class:`SentEvalClassifier`, :class:`LBFGSClassifier`, :class:`RelatednessRegressor`) and
the protocols (:mod:`estratos.probe.protocols`). See docs/probe.md.

Names are imported on first use, so ``estratos.probe.report`` (no torch needed) stays light.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "run_probe": "runner", "probe_tasks": "runner", "summarize": "runner",
    "read_results": "results", "ResultsStore": "results", "cell_key": "results",
    "resolve_settings": "settings", "ClassifierSettings": "settings",
    "SentEvalClassifier": "classifiers", "LBFGSClassifier": "classifiers",
    "RelatednessRegressor": "classifiers",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"estratos.probe.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'estratos.probe' has no attribute {name!r}")
