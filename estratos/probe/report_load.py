"""Reading results files (JSON lines, schema 1) for reports, strictly but forgivingly.

A report must be rebuildable from results files alone, so this module trusts nothing: every
line is checked against the schema of docs/contracts.md. Two situations are common enough in
real runs to be tolerated, but never silently: a truncated last line (a run killed mid-write)
is skipped, and a cell written twice (a rerun with ``--overwrite``, or two files that overlap)
keeps the last copy. Both produce a :class:`Notice` that the report prints. Anything else
(a broken line in the middle, results from another schema version) is an error naming the
file and line.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from estratos.errors import InputError, ResultsError

log = logging.getLogger(__name__)

#: the results schema version this module reads (docs/contracts.md)
SCHEMA_VERSION = 1
KINDS = ("probe", "baseline")

#: field -> accepted JSON types (bool is excluded from numbers explicitly below)
_REQUIRED: Mapping[str, Tuple[type, ...]] = {
    "kind": (str,), "task": (str,), "name": (str,), "group": (str,), "metric": (str,),
    "model": (str,), "seed": (int,),
}
_OPTIONAL_STR = ("suite", "language", "protocol", "fallback", "revision", "pooling")

Layer = Union[int, str, None]


@dataclass(frozen=True)
class Notice:
    """Something about the input the reader of a report must know (and the log shows)."""

    path: str
    line: Optional[int]
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class Record:
    """One validated result cell, with where it came from (for messages)."""

    data: Mapping[str, Any]
    path: str
    line: int

    @property
    def identity(self) -> Tuple[Any, ...]:
        """(task, layer, pooling, seed, classifier name, model, revision): docs/contracts.md."""
        d = self.data
        return (d["task"], d["layer"], d.get("pooling"), d["seed"], classifier_name(d),
                d["model"], d.get("revision"))


@dataclass
class LoadedResults:
    """Validated records (duplicates resolved, last wins) and the notices raised on the way."""

    records: List[Record] = field(default_factory=list)
    notices: List[Notice] = field(default_factory=list)
    sources: List[str] = field(default_factory=list)


def classifier_name(data: Mapping[str, Any]) -> Optional[str]:
    """The classifier's name of a record (``classifier`` may be an object or null)."""
    clf = data.get("classifier")
    if isinstance(clf, Mapping):
        name = clf.get("name")
        return None if name is None else str(name)
    return None if clf is None else str(clf)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_record(obj: Any, path: str, line: int) -> Dict[str, Any]:
    """Validate one decoded line against schema 1; returns it or raises InputError."""
    for key, types in _REQUIRED.items():
        if key not in obj:
            raise InputError(f"missing field {key!r}", path, line)
        value = obj[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise InputError(f"field {key!r} must be {types[0].__name__}, got {value!r}",
                             path, line)
    for key in _OPTIONAL_STR:
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise InputError(f"field {key!r} must be a string or null, got {obj[key]!r}",
                             path, line)
    if obj["kind"] not in KINDS:
        raise InputError(f"unknown kind {obj['kind']!r} (expected one of {', '.join(KINDS)})",
                         path, line)
    if "layer" not in obj:
        raise InputError("missing field 'layer'", path, line)
    layer = obj["layer"]
    if not (layer is None or layer == "avg" or (isinstance(layer, int)
                                                 and not isinstance(layer, bool)
                                                 and layer >= 0)):
        raise InputError(f"field 'layer' must be a hidden-state index >= 0, \"avg\" or null, "
                         f"got {layer!r}", path, line)
    if obj["kind"] == "probe" and layer is None:
        raise InputError("a probe result needs a layer (only baselines have layer null)",
                         path, line)
    if "score" not in obj:
        raise InputError("missing field 'score'", path, line)
    if obj["score"] is not None and not _is_number(obj["score"]):
        raise InputError(f"field 'score' must be a number or null, got {obj['score']!r}",
                         path, line)
    for key in ("test", "dev"):
        if obj.get(key) is not None and not isinstance(obj[key], dict):
            raise InputError(f"field {key!r} must be an object or null", path, line)
    return obj


def _read_file(path: Path, version_seen: Dict[str, Any],
               notices: List[Notice]) -> List[Record]:
    """Records of one file; the version of the first line read anywhere is in version_seen."""
    spath = os.fspath(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError("results file not found", spath) from None
    except OSError as exc:
        raise InputError(f"cannot read results file ({exc.strerror})", spath) from None
    lines = raw.split(b"\n")
    # a final newline leaves one empty element; anything else there is an unterminated line
    last_index = max((i for i, b in enumerate(lines) if b.strip()), default=-1)
    records: List[Record] = []
    for index, data in enumerate(lines):
        if not data.strip():
            continue
        line = index + 1
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if index == last_index:
                notice = Notice(spath, line, "truncated or unreadable last line skipped "
                                f"({exc.__class__.__name__}: {exc}); was the run interrupted?")
                log.warning("%s", notice)
                notices.append(notice)
                continue
            raise InputError(f"not a JSON line ({exc})", spath, line) from None
        if not isinstance(obj, dict):
            raise InputError("a results line must be a JSON object", spath, line)
        if "schema" not in obj:
            raise InputError("missing field 'schema' (not an estratos results line?)",
                             spath, line)
        version = obj["schema"]
        if "version" not in version_seen:
            version_seen.update(version=version, path=spath, line=line)
        elif version != version_seen["version"]:
            raise ResultsError(
                f"{spath}:{line}: results schema version {version!r} differs from version "
                f"{version_seen['version']!r} of {version_seen['path']}:{version_seen['line']}; "
                "results written by different estratos versions cannot be mixed in one report "
                "(re-run the probes with one version)")
        if version != SCHEMA_VERSION:
            raise ResultsError(
                f"{spath}:{line}: unsupported results schema version {version!r} "
                f"(this estratos reads version {SCHEMA_VERSION})")
        records.append(Record(_check_record(obj, spath, line), spath, line))
    if not records and last_index < 0:
        notice = Notice(spath, None, "results file is empty")
        log.warning("%s", notice)
        notices.append(notice)
    return records


def load_results(paths: Sequence[Union[str, os.PathLike]]) -> LoadedResults:
    """Read and validate results files, in order; later duplicates of a cell replace earlier.

    Raises :class:`InputError` (file:line) for a malformed line that is not the last one and
    :class:`ResultsError` when lines carry different or unsupported schema versions. Records
    whose score is null or not finite are dropped with a notice (they cannot be averaged).
    """
    out = LoadedResults(sources=[os.fspath(p) for p in paths])
    version_seen: Dict[str, Any] = {}
    by_identity: Dict[Tuple[Any, ...], Record] = {}
    for path in paths:
        for record in _read_file(Path(path), version_seen, out.notices):
            score = record.data["score"]
            if score is None or not math.isfinite(score):
                notice = Notice(record.path, record.line,
                                f"{record.data['task']} has no finite score ({score!r}); "
                                "cell left out")
                log.warning("%s", notice)
                out.notices.append(notice)
                continue
            previous = by_identity.pop(record.identity, None)
            if previous is not None:
                notice = Notice(record.path, record.line,
                                f"duplicate cell {_describe(record)} (also at "
                                f"{previous.path}:{previous.line}); the last one is kept")
                log.warning("%s", notice)
                out.notices.append(notice)
            by_identity[record.identity] = record  # re-inserted: keeps last-seen order
    out.records = list(by_identity.values())
    return out


def _describe(record: Record) -> str:
    d = record.data
    layer = "baseline" if d["layer"] is None else f"layer {d['layer']}"
    return f"{d['task']} {layer} seed {d['seed']} of {d['model']}"
