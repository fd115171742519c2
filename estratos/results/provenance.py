"""Which data a result was computed on: checks of the ``data_digest`` results record.

Why: a task folder can be rebuilt (``tasks build --seed 7``) or changed in place, and a cell
computed on the old data has the same identity (:attr:`ResultRecord.key`) as the cell of the
new data. Every result records the digest of the examples it was computed on
(:attr:`estratos.tasks.types.TaskData.digest`), so resume refuses to keep a cell of other
data in place of the one asked for (:func:`check_done_cells`), and report and compare tell
builds of one task apart (:func:`data_builds`) instead of putting them side by side or
calling one a copy of the other. Records without a digest (older results) cannot be
checked and are left alone.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from estratos.errors import ResultsError
from estratos.results.reader import Located, read_file
from estratos.results.record import CellKey

log = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]


def data_builds(records: Iterable[Located]) -> Dict[str, Dict[str, List[Located]]]:
    """Per task, its records grouped by data digest (records without one left out), for the
    tasks whose results were computed on more than one build of their data."""
    by_task: Dict[str, Dict[str, List[Located]]] = {}
    for loc in records:
        digest = loc.record.data_digest
        if digest:
            by_task.setdefault(loc.record.task, {}).setdefault(digest, []).append(loc)
    return {task: builds for task, builds in by_task.items() if len(builds) > 1}


def describe_builds(task: str, builds: Dict[str, List[Located]]) -> str:
    """``task T was computed on 2 builds of its data: a1b2... (3 cells, e.g. f.jsonl:4); ...``"""
    parts = [f"{digest} ({len(locs)} cell(s), e.g. {locs[0].path}:{locs[0].line})"
             for digest, locs in builds.items()]
    return (f"{task} was computed on {len(builds)} different builds of its data (data "
            f"digests {'; '.join(parts)})")


def check_done_cells(paths: Sequence[PathLike], specs: Sequence[Any], data_dirs: Any,
                     wanted: Callable[[CellKey], bool],
                     loader: Optional[Callable[[Any, Any], Any]] = None,
                     digests: Optional[Dict[str, str]] = None) -> None:
    """Refuse to skip cells computed on other data: the cells of ``paths`` that a resumed run
    would skip (``wanted(key)``) must carry the digest of their task's data now (each task
    with such cells is loaded with ``loader``, default :func:`estratos.tasks.load_task`,
    unless ``digests`` gives its digest). Raises :class:`ResultsError` naming the file and
    line of one stale cell, how many there are, and the ways out."""
    ids = {spec.id: spec for spec in specs}
    latest: Dict[CellKey, Located] = {}  # the last copy of a cell is the one kept
    for path in paths:
        if os.path.exists(path):
            for loc in read_file(path).records:
                if loc.record.task in ids and wanted(loc.record.key):
                    latest[loc.record.key] = loc
    found: Dict[str, List[Located]] = {}
    unchecked = 0
    for loc in latest.values():
        if loc.record.data_digest:
            found.setdefault(loc.record.task, []).append(loc)
        else:
            unchecked += 1
    if unchecked:
        log.info("%d cell(s) already in the results record no data digest (older results); "
                 "they are kept without a check of their data", unchecked)
    if not found:
        return
    if loader is None:
        from estratos.tasks import load_task
        loader = load_task
    stale: List[Tuple[str, str, List[Located]]] = []
    for task, locs in found.items():
        digest = (digests or {}).get(task) or loader(ids[task], data_dirs).digest
        other = [loc for loc in locs if loc.record.data_digest != digest]
        if other:
            stale.append((task, digest, other))
    if not stale:
        return
    task, digest, other = stale[0]
    first = other[0]
    more = sum(len(o) for _, _, o in stale[1:])
    also = (f"; {more} more cell(s) of {', '.join(t for t, _, _ in stale[1:])} likewise"
            if more else "")
    raise ResultsError(
        f"{first.path}:{first.line}: {len(other)} cell(s) of {task} already in the results "
        f"were computed on other data (data digest {first.record.data_digest}) than the "
        f"task's data now ({digest}: the task's folder was rebuilt or changed since){also}. "
        "Skipping them would keep scores of other data: rerun with --overwrite to recompute "
        "them on this data, or write to another --out")


__all__ = ["check_done_cells", "data_builds", "describe_builds"]
