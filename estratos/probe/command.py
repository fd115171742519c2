"""``estratos probe`` and ``estratos baseline`` as functions: options checked first, then
the grid runner.

Why apart from :mod:`estratos.probe.grid.runner`: the runner needs torch (seconds to import); every
option a user can get wrong (seeds, jobs, threads, classifier, layers, pooling, device, shard,
the task selection, the cache file) is checked here with light imports, so a mistake is
reported at once, and only then is the runner imported. The baselines' grid
(:mod:`estratos.probe.grid.baselines`) needs scikit-learn, not torch, and is imported the
same way, after its options are checked.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional, Sequence, Union

from estratos.options import (
    ShardSpec,
    parse_baselines,
    parse_seeds,
    positive_int,
    resolve_shard,
)
from estratos.probe.config import ProbeConfig
from estratos.vocab import DEFAULT_BASELINE, DEFAULT_POOLING, DEFAULT_SEED

log = logging.getLogger(__name__)


def probe_tasks(cache: Union[str, os.PathLike], tasks: Optional[str],
                out: Union[str, os.PathLike], *, data_dir: Sequence[str] = (),
                task_files: Sequence[str] = (), layers: str = "all",
                pooling: Optional[str] = DEFAULT_POOLING,
                seeds: Union[str, Sequence[int]] = str(DEFAULT_SEED),
                classifier: Any = None, features: Optional[str] = None,
                control: Optional[str] = None, control_l2: Optional[str] = None,
                mdl: bool = False, sequential: bool = False,
                jobs: Optional[int] = None, overwrite: bool = False,
                expect_model: Optional[str] = None,
                threads: Optional[int] = None, device: Optional[str] = "auto",
                shard: ShardSpec = None, resume_from: Sequence[Union[str, os.PathLike]] = (),
                progress: Optional[bool] = False) -> Any:
    """``estratos probe``: check the options (:meth:`ProbeConfig.build`), select the tasks
    (``--tasks``, ``--task-file``, ``--data-dir``:
    :func:`estratos.tasks.selection.select_specs`), check that the cache opens, then
    :func:`estratos.probe.grid.runner.run_probe` (a ``ProbeRun``)."""
    config = ProbeConfig.build(layers=layers, pooling=pooling, seeds=seeds,
                               classifier=classifier, features=features, control=control,
                               control_l2=control_l2, mdl=mdl, sequential=sequential,
                               device=device, jobs=jobs,
                               threads=threads, shard=shard, overwrite=overwrite)
    from estratos.cache import open_cache
    from estratos.tasks.selection import select_specs

    selection = select_specs(tasks, task_files, data_dir)
    if config.control is None:  # a control's labels are drawn from the seed
        warn_identical_seeds(config.classifier, config.seeds, selection.specs)
    with open_cache(cache, expect={"model": expect_model} if expect_model else None):
        pass  # a missing, partial or other model's cache is reported before torch loads
    from estratos.probe.grid.runner import run_probe  # torch: only now that the options are good

    return run_probe(cache, selection.specs, selection.data_dirs, out, config,
                     expect_model=expect_model, resume_from=resume_from, progress=progress)


def baseline_tasks(tasks: Optional[str], out: Union[str, os.PathLike], *,
                   data_dir: Sequence[str] = (), task_files: Sequence[str] = (),
                   seeds: Union[str, Sequence[int]] = (DEFAULT_SEED,),
                   overwrite: bool = False,
                   baselines: Union[str, Sequence[str]] = DEFAULT_BASELINE,
                   jobs: int = 1, shard: ShardSpec = None,
                   progress: Optional[bool] = False) -> Any:
    """``estratos baseline``: ``--baseline``, ``--seeds``, ``--jobs`` and ``--shard``
    checked, the tasks selected (``--tasks``, ``--task-file``, ``--data-dir``:
    :func:`estratos.tasks.selection.select_specs`), then
    :func:`estratos.probe.grid.baselines.run_baseline` (a ``ProbeRun``; it checks
    ``--out`` before any work)."""
    seed_list = parse_seeds(seeds)
    names = parse_baselines(baselines)
    jobs_n = positive_int("--jobs", jobs)
    where = resolve_shard(shard)
    from estratos.tasks.selection import select_specs

    selection = select_specs(tasks, task_files, data_dir)
    from estratos.probe.grid.baselines import run_baseline  # scikit-learn: only now

    return run_baseline(selection.specs, selection.data_dirs, out, seeds=seed_list,
                        overwrite=overwrite, baselines=names, jobs=jobs_n, shard=where,
                        progress=progress)


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
