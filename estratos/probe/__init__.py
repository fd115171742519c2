"""Stage two: probes for every task x layer x seed from the cache alone.

Public API: :func:`run_probe` (the grid runner), :func:`probe_tasks` (the same from
command-line forms), :func:`resolve_settings` / :class:`ClassifierSettings`, the classifiers
(:class:`SentEvalClassifier`, :class:`LBFGSClassifier`, :class:`RelatednessRegressor`) and
the protocols (:mod:`estratos.probe.protocols`). Results are written and read through
:mod:`estratos.results`. See docs/probe.md.

Names are imported on first use, so importing a light submodule does not load torch.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "run_probe": "runner", "probe_tasks": "runner", "summarize": "runner",
    "resolve_settings": "settings", "ClassifierSettings": "settings",
    "SentEvalClassifier": "classifiers", "LBFGSClassifier": "classifiers",
    "RelatednessRegressor": "classifiers",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"estratos.probe.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'estratos.probe' has no attribute {name!r}")
