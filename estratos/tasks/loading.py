"""Loading a task: which splits to read, the fallbacks for missing ones, and the TaskData.

The published protocol of a spec assumes every split's files exist. When some are missing
(the Spanish benchmark lacks several train files), the protocol
(:meth:`estratos.protocols.Protocol.plan`) picks the documented fallback, the same for every
format:

* ``split`` / ``relatedness`` without train: train on the dev (``valid``/``va``) file minus a
  held-out part (10%, fixed seed, stratified by class) that becomes the dev split; test on
  test. Without dev: the held-out part comes from train instead.
* ``kfold`` without train (PAWS here): protocol ``inner-kfold`` on the test file alone
  (split ``all``).
* anything else missing (a test file, a class file, an STS subset) is an error.

The plan only looks at which files exist, so ``estratos tasks list`` can show it without
reading data. :func:`load_task` then reads the planned files through the spec's format.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from estratos.errors import InputError
from estratos.protocols import POOL, get_protocol
from estratos.tasks.building import (
    HOLDOUT_FRACTION,
    MAX_POOL_TEST_OVERLAP,
    TEST_FRACTION,
    TaskBuilder,
    holdout,
    overlap_share,
    three_way,
)
from estratos.tasks.datadirs import DataDirs
from estratos.tasks.formats import Source, get_format
from estratos.tasks.reading import LoadContext
from estratos.tasks.types import TaskData, TaskSpec

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Plan:
    """What :func:`load_task` will read and produce for one spec (decided without reading)."""

    spec: TaskSpec
    root: Path
    protocol: str
    reads: Tuple[Source, ...]
    splits: Tuple[str, ...]
    holdout_from: Optional[Source] = None
    fallback: Optional[str] = None
    missing: Tuple[Tuple[str, Path], ...] = ()

    @property
    def present(self) -> bool:
        return not self.missing


def task_root(spec: TaskSpec, data_dirs: DataDirs) -> Path:
    """The folder a spec's relative file names start from.

    Custom specs (``--task-file``) carry their own ``files["root"]``; registered ones use the
    suite's data folder.
    """
    if "root" in spec.files:
        return Path(spec.files["root"])
    return data_dirs.for_suite(spec.suite)


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _names(source: Source, root: Path) -> str:
    return " + ".join(_rel(p, root) for p in dict.fromkeys(source.paths))


def plan_task(spec: TaskSpec, data_dirs: DataDirs) -> Plan:
    """Decide the effective protocol, the files to read and the fallback (stats files only).

    The decision is the protocol's (:meth:`estratos.protocols.Protocol.plan`); this turns its
    source names into the format's files.
    """
    root = task_root(spec, data_dirs)
    fmt = get_format(spec.format)
    published = fmt.sources(spec, root)
    present = {name for name, src in published.items() if src.exists}
    notes = [n for n in [fmt.note(spec, root)] if n]

    def names(source: str) -> str:
        return _names(published[source], root) if source in published else "none given"

    split_plan = get_protocol(spec.protocol).plan(tuple(published), present, names,
                                                  HOLDOUT_FRACTION)
    reads = tuple(published[src] if into == src else dataclasses.replace(published[src],
                                                                         split=into)
                  for src, into in split_plan.reads)
    pool = next((r for r in reads if r.split == split_plan.holdout_from), None)
    missing = tuple((name, p) for name in split_plan.missing if name in published
                    for p in published[name].missing)
    text = "; ".join(notes + ([split_plan.fallback] if split_plan.fallback else [])) or None
    return Plan(spec, root, split_plan.protocol, reads, split_plan.splits, pool, text, missing)


def _missing_error(plan: Plan, split: str, path: Path) -> InputError:
    return InputError(f"missing required file (the {split} split of {plan.spec.id})", path)


def load_task(spec: TaskSpec, data_dirs: DataDirs,
              ctx: Optional[LoadContext] = None) -> TaskData:
    """Read and validate a task's files into a :class:`TaskData` (fallbacks applied).

    Bad input raises :class:`~estratos.errors.InputError` naming the file and line, unless a
    collecting ``ctx`` is given (``estratos tasks check``), in which case problems are
    recorded there and the returned data may be partial.
    """
    ctx = ctx or LoadContext()
    plan = plan_task(spec, data_dirs)
    for split, path in plan.missing:
        ctx.report(_missing_error(plan, split, path))
    fmt = get_format(spec.format)
    builder = TaskBuilder(spec)
    if plan.missing:
        return builder.build(plan.protocol, plan.splits, plan.fallback)
    fmt.read_many(spec, plan.reads, builder, ctx)
    for source in plan.reads:
        if builder.count(source.split) == 0 and not ctx.problems:
            ctx.report(InputError(f"no examples for the {source.split} split",
                                  source.paths[0]))
    sources = {src.split: _names(src, plan.root) for src in plan.reads}
    for split, note in builder.notes.items():
        sources[split] = f"{sources.get(split, '')} ({note})"
    if plan.holdout_from is None:
        data = builder.build(plan.protocol, plan.splits, plan.fallback, sources)
    else:
        read_splits = [src.split for src in plan.reads]
        data = builder.build(plan.protocol, read_splits, plan.fallback, sources)
        data = _apply_holdout(plan, plan.holdout_from, data, sources,
                              stratify=not builder.scores)
    log.info("loaded %s: %s (%d sentences)%s", spec.id, data.sizes, len(data.sentences),
             f"; fallback: {data.fallback}" if data.fallback else "")
    return data


def _apply_holdout(plan: Plan, holdout_from: Source, data: TaskData, sources: Dict[str, str],
                   stratify: bool) -> TaskData:
    """Cut the dev split from the training pool; re-split the test file when the pool is
    (mostly) the test set itself, since training on test sentences gives no held-out score."""
    pool_name = _names(holdout_from, plan.root)
    pool, test = data.splits[POOL], data.splits["test"]
    share = overlap_share(pool, test)
    fallback = data.fallback
    if share > MAX_POOL_TEST_OVERLAP:
        train, dev, test = three_way(test)
        test_name = sources["test"]
        text = (f"{pool_name} repeats {share:.0%} of the test file {test_name}, so the "
                f"test file alone is split (fixed seed, stratified): {TEST_FRACTION:.0%} "
                f"test, {HOLDOUT_FRACTION:.0%} dev, the rest train")
        log.warning("%s: %s", plan.spec.id, text)
        fallback = f"{fallback}; but {text}" if fallback else text
        sources = {"train": f"{test_name} minus held-out parts",
                   "dev": f"held-out {HOLDOUT_FRACTION:.0%} of {test_name}",
                   "test": f"held-out {TEST_FRACTION:.0%} of {test_name}"}
    else:
        train, dev = holdout(pool, stratify=stratify)
        sources = dict(sources, train=f"{pool_name} minus held-out part",
                       dev=f"held-out {HOLDOUT_FRACTION:.0%} of {pool_name}")
    splits = {"train": train, "dev": dev, "test": test}
    splits.update({k: v for k, v in data.splits.items() if k not in splits and k != POOL})
    return dataclasses.replace(data, splits={k: splits[k] for k in plan.splits},
                               sources={k: sources[k] for k in plan.splits},
                               fallback=fallback)


def unique_sentences(specs: Iterable[TaskSpec], data_dirs: DataDirs) -> List[str]:
    """The normalized sentences all ``specs`` need, each once, in first-seen order.

    This is what ``encode`` caches for a task selection.
    """
    seen: Dict[str, None] = {}
    for spec in specs:
        for sentence in load_task(spec, data_dirs).sentences:
            seen.setdefault(sentence, None)
    return list(seen)
