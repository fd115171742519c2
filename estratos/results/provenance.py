"""Which data and which vectors a result was computed on: checks of the ``data_digest`` and
the ``encoding`` a results line records.

Why: a task folder can be rebuilt (``tasks build --seed 7``) or changed in place, and a cell
computed on the old data has the same identity (:attr:`ResultRecord.key`) as the cell of the
new data. Every result records the digest of the examples it was computed on
(:attr:`estratos.tasks.types.TaskData.digest`), so resume refuses to keep a cell of other
data in place of the one asked for (:func:`check_done_cells`), and report and compare tell
builds of one task apart (:func:`data_builds`) instead of putting them side by side or
calling one a copy of the other. Records without a digest (older results) cannot be
checked and are left alone.

The same holds for the vectors: a cache encoded with ``--max-length 8`` or ``--dtype
float32`` gives cells of the same identity as one of ``--max-length 512`` in float16. Each
probe line records the encode settings that made its vectors without being part of the
identity (``encoding``, :data:`estratos.vocab.VECTOR_SETTINGS`), so resume refuses to keep a
cell of other settings (:func:`check_done_cells` with ``encoding``) and report refuses to
take one file's copy of a cell for another file's copy made from other vectors
(:func:`check_copies`). A setting either side does not record is not compared.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from estratos.errors import ResultsError
from estratos.results.reader import Located, read_file
from estratos.results.record import CellKey, ResultRecord
from estratos.vocab import AVG, VECTOR_SETTINGS

log = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]


def cell_encoding(settings: Optional[Mapping[str, Any]], layer: Any
                  ) -> Optional[Dict[str, Any]]:
    """What a cell at ``layer`` records as ``encoding`` from its cache's vector settings
    (:func:`estratos.cache.schema.vector_settings`): all of them, but ``avg`` (what the mean
    over states averaged) only for the ``avg`` layer spec, whose vector it is. None: no
    cache (a baseline)."""
    if settings is None:
        return None
    return {k: v for k, v in settings.items() if k != "avg" or layer == AVG}


def encoding_diff(have: Optional[Mapping[str, Any]], want: Optional[Mapping[str, Any]]
                  ) -> Dict[str, Tuple[Any, Any]]:
    """``{setting: (have, want)}`` for each vector setting both record with other values
    (a setting either side lacks, or a side without ``encoding``, is not compared)."""
    if not have or not want:
        return {}
    out = {}
    for name in have.keys() & want.keys():
        a, b = have[name], want[name]
        if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            a, b = list(a or ()), list(b or ())
        if a != b:
            out[name] = (have[name], want[name])
    return out


def describe_settings(diff: Mapping[str, Tuple[Any, Any]], have: str, want: str) -> str:
    """``max_length 512 in A, 8 in B (--max-length); dtype ...``: the settings in which two
    cells' vectors differ, each with the encode option that sets it."""
    order = [name for name in VECTOR_SETTINGS if name in diff]
    order += sorted(set(diff) - set(order))
    return "; ".join(f"{name} {_value(diff[name][0])} {have}, {_value(diff[name][1])} {want}"
                     + (f" ({VECTOR_SETTINGS[name]})" if name in VECTOR_SETTINGS else "")
                     for name in order)


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_copies(copies: Mapping[CellKey, Sequence[Located]]) -> None:
    """Refuse copies of one cell in different results files made from vectors of other
    encode settings (``LoadedResults.copies``): one report row would show whichever file
    came last as if it were the other. Copies within one file are a rerun with
    ``--overwrite``, whose last copy is meant. Raises :class:`ResultsError` naming both
    ``file:line``s and the settings."""
    found: List[Tuple[Located, Located, Dict[str, Tuple[Any, Any]]]] = []
    for locs in copies.values():
        per_file: Dict[str, Located] = {}
        for loc in locs:
            per_file[loc.path] = loc  # the last copy of each file
        kept = locs[-1]
        for other in per_file.values():
            diff = encoding_diff(other.record.encoding, kept.record.encoding)
            if other.path != kept.path and diff:
                found.append((other, kept, diff))
    if not found:
        return
    other, kept, diff = found[0]
    more = f"; {len(found) - 1} more cell(s) likewise" if len(found) > 1 else ""
    a, b = f"{other.path}:{other.line}", f"{kept.path}:{kept.line}"
    raise ResultsError(
        f"cell {_describe(kept.record)} is in two results files, probed on vectors made with "
        f"other encode settings: {describe_settings(diff, 'at ' + a, 'at ' + b)}{more}. "
        "One report would show one of them as the other: report each file on its own, or "
        "probe both from caches of the same settings")


def _describe(record: ResultRecord) -> str:
    layer = "baseline" if record.layer is None else f"layer {record.layer}"
    return f"{record.task} {layer} seed {record.seed} of {record.model}"


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
                     digests: Optional[Dict[str, str]] = None,
                     encoding: Optional[Mapping[str, Any]] = None,
                     source: str = "this cache") -> None:
    """Refuse to skip cells computed on other data or other vectors: the cells of ``paths``
    that a resumed run would skip (``wanted(key)``) must carry the digest of their task's
    data now (each task with such cells is loaded with ``loader``, default
    :func:`estratos.tasks.load_task`, unless ``digests`` gives its digest) and, given the
    cache's vector settings ``encoding`` (``CacheReader.identity()["encoding"]``, named
    ``source`` in the message), the same settings (:func:`cell_encoding`). Raises
    :class:`ResultsError` naming the file and line of one stale cell, what differs, how
    many there are, and the ways out."""
    ids = {spec.id: spec for spec in specs}
    latest: Dict[CellKey, Located] = {}  # the last copy of a cell is the one kept
    for path in paths:
        if os.path.exists(path):
            for loc in read_file(path).records:
                if loc.record.task in ids and wanted(loc.record.key):
                    latest[loc.record.key] = loc
    _check_encoding(list(latest.values()), encoding, source)
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


def _check_encoding(locs: Sequence[Located], encoding: Optional[Mapping[str, Any]],
                    source: str) -> None:
    """Refuse done cells whose recorded vector settings differ from ``encoding``'s."""
    if encoding is None:
        return
    stale = [(loc, diff) for loc in locs
             if (diff := encoding_diff(loc.record.encoding,
                                       cell_encoding(encoding, loc.record.layer)))]
    if not stale:
        return
    first, diff = stale[0]
    raise ResultsError(
        f"{first.path}:{first.line}: {len(stale)} cell(s) already in the results were probed "
        f"on vectors made with other encode settings than {source} "
        f"({describe_settings(diff, 'there', 'here')}). Skipping them would keep scores of "
        "other vectors: rerun with --overwrite to recompute them from this cache, or write "
        "to another --out")


__all__ = ["cell_encoding", "check_copies", "check_done_cells", "data_builds",
           "describe_builds", "describe_settings", "encoding_diff"]
