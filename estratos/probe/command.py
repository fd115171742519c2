"""``estratos probe`` as a function: options checked first, then the grid runner.

Why apart from :mod:`estratos.probe.runner`: the runner needs torch (seconds to import); every
option a user can get wrong (seeds, jobs, threads, classifier, layers, pooling, device, shard,
the task selection, the cache file) is checked here with light imports, so a mistake is
reported at once, and only then is the runner imported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, Union

from estratos.errors import OptionError
from estratos.options import (PROBE_DEVICES, ShardSpec, check_device, parse_layers, parse_seeds,
                              positive_int, resolve_shard)
from estratos.vocab import CACHE_POOLINGS, DEFAULT_POOLING, DEFAULT_SEED, LayerSpec


@dataclass(frozen=True)
class ProbeOptions:
    """``estratos probe``'s options, checked (see :func:`check_probe_options`)."""

    seeds: Tuple[int, ...]
    jobs: int
    threads: Optional[int]
    classifier: str
    layers: Union[str, Tuple[LayerSpec, ...]]
    pooling: Optional[str]
    device: str
    shard: Optional[Tuple[int, int]]


def check_probe_options(*, layers: Union[str, Sequence[LayerSpec]] = "all",
                        pooling: Optional[str] = DEFAULT_POOLING,
                        seeds: Union[str, Sequence[int]] = (DEFAULT_SEED,),
                        classifier: Any = None, jobs: int = 1,
                        threads: Optional[int] = None, device: Optional[str] = "auto",
                        shard: ShardSpec = None) -> ProbeOptions:
    """Every probe option that can be checked without the cache or torch; raises
    :class:`OptionError` naming the option. ``classifier``: a registered name (None: the
    default) or an estimator."""
    seeds_t = parse_seeds(seeds)
    jobs_n = positive_int("--jobs", jobs)
    threads_n = positive_int("--threads", threads, allow_none=True)
    parse_layers(layers)  # syntax (indices are checked against the cache by the runner)
    if pooling is not None and pooling not in CACHE_POOLINGS:
        raise OptionError(f"--pooling: {pooling!r} is not one of {', '.join(CACHE_POOLINGS)}")
    device_t = check_device(device, kinds=PROBE_DEVICES)
    shard_t = resolve_shard(shard)
    # the estimator registry imports numpy: after the checks that need none
    from estratos.probe.classifiers import DEFAULT_CLASSIFIER, get_estimator

    if classifier is None:
        classifier = DEFAULT_CLASSIFIER
    name = get_estimator(classifier).name if isinstance(classifier, str) else classifier.name
    return ProbeOptions(seeds_t, jobs_n, threads_n, name,
                        layers if isinstance(layers, str) else tuple(layers), pooling,
                        device_t, shard_t)


def probe_tasks(cache: Union[str, os.PathLike], tasks: Optional[str],
                out: Union[str, os.PathLike], *, data_dir: Sequence[str] = (),
                task_files: Sequence[str] = (), layers: str = "all",
                pooling: Optional[str] = DEFAULT_POOLING,
                seeds: Union[str, Sequence[int]] = str(DEFAULT_SEED),
                classifier: Any = None, sequential: bool = False, jobs: int = 1,
                overwrite: bool = False, expect_model: Optional[str] = None,
                threads: Optional[int] = None, device: Optional[str] = "auto",
                shard: ShardSpec = None, resume_from: Sequence[Union[str, os.PathLike]] = (),
                progress: Optional[bool] = False, control_labels: bool = False,
                mdl: bool = False) -> Any:
    """``estratos probe``: check the options, select the tasks (``--tasks``,
    ``--task-file``, ``--data-dir``: :func:`estratos.tasks.selection.select_specs`), check
    that the cache opens, then :func:`estratos.probe.runner.run_probe` (a ``ProbeRun``)."""
    opts = check_probe_options(layers=layers, pooling=pooling, seeds=seeds,
                               classifier=classifier, jobs=jobs, threads=threads,
                               device=device, shard=shard)
    from estratos.cache import open_cache
    from estratos.tasks.selection import select_specs

    selection = select_specs(tasks, task_files, data_dir)
    with open_cache(cache, expect={"model": expect_model} if expect_model else None):
        pass  # a missing, partial or other model's cache is reported before torch loads
    from estratos.probe.runner import run_probe  # torch: only now that the options are good

    return run_probe(cache, selection.specs, selection.data_dirs, out, layers=opts.layers,
                     pooling=opts.pooling, seeds=opts.seeds,
                     classifier=opts.classifier if classifier is None or isinstance(
                         classifier, str) else classifier,
                     sequential=sequential, jobs=opts.jobs, overwrite=overwrite,
                     expect_model=expect_model, threads=opts.threads, device=opts.device,
                     shard=opts.shard, resume_from=resume_from, progress=progress,
                     control_labels=control_labels, mdl=mdl)


__all__ = ["ProbeOptions", "check_probe_options", "probe_tasks"]
