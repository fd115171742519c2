"""``estratos probe`` and ``estratos baseline`` as functions: configuration checked first,
then the grid runner.

Why apart from :mod:`estratos.probe.grid.runner`: the runner needs torch (seconds to import);
the options are checked by the configuration's ``build`` (:mod:`estratos.probe.config`) and
the task selection and the cache file here, with light imports, so a mistake is reported at
once, and only then is the runner imported. The baselines' grid
(:mod:`estratos.probe.grid.baselines`) needs scikit-learn, not torch, and is imported the
same way, after its options are checked.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from estratos.probe.config import BaselineConfig, ProbeConfig

if TYPE_CHECKING:  # pragma: no cover - the runner imports torch
    from estratos.probe.grid.outcome import ProbeRun

log = logging.getLogger(__name__)


def probe_tasks(cache: Union[str, os.PathLike[str]], tasks: Optional[str],
                out: Union[str, os.PathLike[str]], config: ProbeConfig, *,
                data_dir: Sequence[str] = (), task_files: Sequence[str] = (),
                resume_from: Sequence[Union[str, os.PathLike[str]]] = (),
                progress: Optional[bool] = False) -> "ProbeRun":
    """``estratos probe`` with its options checked (``config``:
    :meth:`ProbeConfig.build`): select the tasks (``--tasks``, ``--task-file``,
    ``--data-dir``: :func:`estratos.tasks.selection.select_specs`), check that the cache
    opens, then :func:`estratos.probe.grid.runner.run_probe` (a ``ProbeRun``)."""
    from estratos.cache import open_cache
    from estratos.tasks.selection import select_specs

    selection = select_specs(tasks, task_files, data_dir)
    if config.control is None:  # a control's labels are drawn from the seed
        warn_identical_seeds(config.classifier, config.seeds, selection.specs)
    expect = {"model": config.expect_model} if config.expect_model else None
    with open_cache(cache, expect=expect):
        pass  # a missing, partial or other model's cache is reported before torch loads
    from estratos.probe.grid.runner import run_probe  # torch: only now that the options are good

    return run_probe(cache, selection.specs, selection.data_dirs, out, config,
                     resume_from=resume_from, progress=progress)


def baseline_tasks(tasks: Optional[str], out: Union[str, os.PathLike[str]],
                   config: BaselineConfig, *, data_dir: Sequence[str] = (),
                   task_files: Sequence[str] = (),
                   progress: Optional[bool] = False) -> "ProbeRun":
    """``estratos baseline`` with its options checked (``config``:
    :meth:`BaselineConfig.build`): the tasks selected (``--tasks``, ``--task-file``,
    ``--data-dir``: :func:`estratos.tasks.selection.select_specs`), then
    :func:`estratos.probe.grid.baselines.run_baseline` (a ``ProbeRun``; it checks ``--out``
    before any work)."""
    from estratos.tasks.selection import select_specs

    selection = select_specs(tasks, task_files, data_dir)
    from estratos.probe.grid.baselines import run_baseline  # scikit-learn: only now

    return run_baseline(selection.specs, selection.data_dirs, out, config, progress=progress)


def warn_identical_seeds(classifier: Any, seeds: Sequence[int], specs: Sequence[Any]) -> None:
    """Say when several seeds will train the same model: a deterministic classifier on
    tasks whose protocol does not draw from the seed (their cells repeat, their spread is
    not measured; reports mark them deterministic)."""
    from estratos.probe.estimators.classifiers import seeds_cannot_differ

    name = classifier if isinstance(classifier, str) else getattr(classifier, "name", "")
    if len(seeds) < 2:
        return
    same = [spec for spec in specs if seeds_cannot_differ(name, spec.protocol)]
    if same:
        shown = ", ".join(s.id for s in same[:5]) + (f" and {len(same) - 5} more"
                                                     if len(same) > 5 else "")
        log.warning("--classifier %s is deterministic: on %s (the %s protocol: the seed picks "
                    "no data) the %d seeds train the same model, so their cells are repeats "
                    "with no measured spread; use one seed there, or a seeded classifier",
                    name, shown, "/".join(sorted({s.protocol for s in same})), len(seeds))


__all__ = ["baseline_tasks", "probe_tasks", "warn_identical_seeds"]
