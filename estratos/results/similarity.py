"""Similarity and geometry records: the JSON lines `estratos similarity` and `estratos
geometry` write and `estratos report --similarity` reads.

Why in results/: like a probe cell, a record is written by one stage and read by another,
so its layout (fields, schema version, identity) is written here once. Why a record type of
its own: a map entry has two caches and two layers and no task, seed or classifier, so
:class:`~estratos.results.record.ResultRecord` does not fit it; the file discipline is the
same (one ``write`` of whole lines under the file's ``flock``, space reserved first, then
``fsync``; a cut last line skipped with a warning and cut off before the next append).

One line per (kind, measure, cache pair, layer pair, pooling, features, sentence-set
digest, settings); ``layer_b`` and ``b`` are null for geometry. ``value`` is a finite float
or null with ``undefined`` saying why (never NaN or inf)::

    {"schema": 1, "kind": "similarity", "measure": "linear-cka", "value": 0.912,
     "layer_a": 3, "layer_b": 5, "pooling": "mean", "features": "raw",
     "a": {"model": "...", "revision": "...", "path": "...", "n_states": 7, "dim": 384},
     "b": {...}, "sentences": {"digest": "3f2a...", "n": 212345},
     "settings": {"products": "float32"}, "sample": null, "detail": {},
     "estratos_version": "0.1.0", "created": "2026-11-27T20:00:00Z"}
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from estratos.errors import ResultsError, ResultsFileError
from estratos.files import fsync_file, locked, write_all

log = logging.getLogger(__name__)

#: the layout version this estratos writes and reads (a newer one is refused, naming it)
MAP_SCHEMA = 1
#: what a record describes: a pair of layers, or one layer's space
MAP_KINDS = ("similarity", "geometry")
#: the parts of a cache's identity a record keeps (``CacheReader.identity()`` names)
CACHE_FIELDS = ("model", "revision", "random_init", "prompt", "path", "n_states", "dim")
#: the parts that make two caches' vectors different systems (a record's identity)
CACHE_IDENTITY = ("model", "revision", "random_init", "prompt")

#: measures where a smaller value means more similar (a distance)
DISTANCES = ("procrustes",)

Layer = Union[int, str, None]
MapKey = Tuple[Any, ...]
PathLike = Union[str, os.PathLike]


def most_similar(candidates: Iterable[Tuple[Layer, Optional[float]]], measure: str
                 ) -> Optional[Tuple[Layer, float]]:
    """The most similar layer among ``(layer, value)`` candidates, with its value: the
    largest value (the smallest for a distance, :data:`DISTANCES`), the first in the given
    order among equal values; None when no value is defined. The one rule behind the
    report's "most similar layers" and the ties ``estratos similarity`` records."""
    defined = [(layer, value) for layer, value in candidates if value is not None]
    if not defined:
        return None
    pick = min if measure in DISTANCES else max
    return pick(defined, key=lambda c: c[1])


def cache_part(identity: Mapping[str, Any]) -> Dict[str, Any]:
    """What a record keeps of a cache (its identity's fields that are set)."""
    return {k: identity.get(k) for k in CACHE_FIELDS if identity.get(k) is not None}


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False)


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float made None (a record never holds NaN or inf)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


@dataclass(frozen=True)
class MapRecord:
    """One similarity (a layer pair) or geometry (one layer) value; see the module docstring."""

    kind: str
    measure: str
    value: Optional[float]
    layer_a: Layer
    layer_b: Layer
    pooling: str
    features: str
    a: Dict[str, Any]
    b: Optional[Dict[str, Any]]
    sentences: Dict[str, Any]
    settings: Dict[str, Any] = field(default_factory=dict)
    sample: Optional[Dict[str, Any]] = None
    undefined: Optional[str] = None
    detail: Dict[str, Any] = field(default_factory=dict)
    seconds: Optional[float] = None
    estratos_version: str = ""
    created: str = ""
    schema: int = MAP_SCHEMA

    @property
    def key(self) -> MapKey:
        """The record's identity: what resume skips and readers de-duplicate on."""
        side_b = None if self.b is None else tuple(self.b.get(k) for k in CACHE_IDENTITY)
        return (self.kind, self.measure, tuple(self.a.get(k) for k in CACHE_IDENTITY), side_b,
                self.layer_a, self.layer_b, self.pooling, self.features,
                self.sentences.get("digest"), _canonical(self.settings),
                _canonical(self.sample))

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "schema": self.schema, "kind": self.kind, "measure": self.measure,
            "value": _finite(self.value), "layer_a": self.layer_a, "layer_b": self.layer_b,
            "pooling": self.pooling, "features": self.features, "a": self.a, "b": self.b,
            "sentences": self.sentences, "settings": self.settings, "sample": self.sample,
            "detail": _finite(self.detail)}
        if out["value"] is None:
            out["undefined"] = self.undefined or "not finite"
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 3)
        out["estratos_version"] = self.estratos_version
        out["created"] = self.created
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str, line: int) -> "MapRecord":
        """A validated record, or :class:`ResultsFileError` naming ``path:line``."""
        def bad(why: str) -> ResultsFileError:
            return ResultsFileError(why, path, line)

        if not isinstance(obj, dict):
            raise bad("not a JSON object")
        if obj.get("kind") not in MAP_KINDS:
            raise bad(f"not a similarity or geometry record (kind {obj.get('kind')!r}); "
                      "`report --similarity` reads the files of `estratos similarity` and "
                      "`estratos geometry`")
        if obj.get("schema") != MAP_SCHEMA:
            raise bad(f"similarity schema {obj.get('schema')!r}: this estratos reads version "
                      f"{MAP_SCHEMA}; upgrade estratos to read newer files")
        for name, kind in (("measure", str), ("pooling", str), ("features", str),
                           ("a", dict), ("sentences", dict)):
            if not isinstance(obj.get(name), kind):
                raise bad(f"field {name!r} is missing or not a {kind.__name__}")
        value = obj.get("value")
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                  or not math.isfinite(value)):
            raise bad(f"value {value!r} is not a finite number or null")
        return cls(kind=obj["kind"], measure=obj["measure"],
                   value=None if value is None else float(value),
                   layer_a=obj.get("layer_a"), layer_b=obj.get("layer_b"),
                   pooling=obj["pooling"], features=obj["features"], a=obj["a"],
                   b=obj.get("b"), sentences=obj["sentences"],
                   settings=obj.get("settings") or {}, sample=obj.get("sample"),
                   undefined=obj.get("undefined"), detail=obj.get("detail") or {},
                   seconds=obj.get("seconds"),
                   estratos_version=str(obj.get("estratos_version", "")),
                   created=str(obj.get("created", "")))


def _parse(path: Path, data: bytes) -> Tuple[List[MapRecord], int]:
    """The records of a file's bytes and the offset after its last whole line (a cut last
    line is left out with a warning)."""
    records: List[MapRecord] = []
    end = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if end + len(raw) == len(data):  # no newline after it: cut by a killed writer
            if raw.strip():
                log.warning("%s:%d: an incomplete last line was skipped", path, number)
            break
        end += len(raw) + 1
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise ResultsFileError(f"not a similarity file: this line is not JSON ({exc})",
                                   str(path), number) from None
        records.append(MapRecord.from_json(obj, str(path), number))
    return records, end


def read_maps(paths: Sequence[PathLike]) -> List[MapRecord]:
    """Every record of the files, the last copy of each identity kept, in file order."""
    latest: Dict[MapKey, MapRecord] = {}
    for p in paths:
        path = Path(p)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ResultsError(f"{path}: cannot read ({exc.strerror or exc})") from None
        for record in _parse(path, data)[0]:
            latest.pop(record.key, None)
            latest[record.key] = record
    return list(latest.values())


def done_map_keys(path: PathLike) -> set:
    """Identities already in ``path`` (empty when it does not exist)."""
    return {r.key for r in read_maps([path])} if Path(path).exists() else set()


def append_maps(path: PathLike, records: Iterable[MapRecord], *, skip_done: bool = True
                ) -> List[MapRecord]:
    """Append records under the file's lock in one write (space reserved first, then
    fsync); with ``skip_done`` those whose identity the file already holds are left out.
    Returns the records written."""
    path = Path(path)
    records = list(records)
    if not records:
        return []
    with locked(path, ResultsError, "similarity file for writing") as fd:
        data = b""
        while True:
            chunk = os.pread(fd, 1 << 20, len(data))
            if not chunk:
                break
            data += chunk
        existing, end = _parse(path, data)
        if end < len(data):
            os.ftruncate(fd, end)
            log.warning("%s: removed an incomplete last line before appending", path)
        seen = {r.key for r in existing} if skip_done else set()
        written = []
        for r in records:
            if r.key in seen:
                continue
            seen.add(r.key)
            written.append(r)
        if written:
            payload = "".join(json.dumps(r.to_json(), ensure_ascii=False, allow_nan=False)
                              + "\n" for r in written).encode("utf-8")
            write_all(fd, payload, offset=end, folder=path.parent,
                      what=f"appending {len(written)} line(s) to {path.name}")
            fsync_file(fd)
        return written


__all__ = ["CACHE_FIELDS", "DISTANCES", "MAP_KINDS", "MAP_SCHEMA", "Layer", "MapKey", "MapRecord",
           "append_maps", "cache_part", "done_map_keys", "most_similar", "read_maps"]
