"""The results file: JSON lines, one per cell, safe to append from several processes.

Why this shape: a probe run is long and may be killed, rerun, or split over processes or
SLURM jobs writing the same file. Each record is appended under an exclusive ``fcntl.flock``
with ONE ``write`` of the whole line and an ``fsync``, so lines never interleave or go
missing. A line torn by a killed process (no trailing newline) is ignored with a warning and
cut off before the next append, so it is redone once and never duplicated. A cell is
identified by (task, layer, pooling, seed, classifier name, model, revision): a rerun skips
cells already present; with ``--overwrite`` a new record is appended and readers keep the
last record of each cell (:func:`read_results` with ``latest=True``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from estratos.errors import ResultsError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
CellKey = Tuple[Any, ...]


def cell_key(record: Mapping[str, Any]) -> CellKey:
    """The identity of a cell (docs/contracts.md): what resume and de-duplication compare."""
    classifier = record.get("classifier") or {}
    name = classifier.get("name") if isinstance(classifier, Mapping) else classifier
    return (record.get("task"), record.get("layer"), record.get("pooling"), record.get("seed"),
            name, record.get("model"), record.get("revision"))


def _parse(path: Path, data: bytes) -> Tuple[List[Dict[str, Any]], bool]:
    """Records of ``data``; also whether it ends with a torn (unterminated, invalid) line."""
    records: List[Dict[str, Any]] = []
    lines = data.split(b"\n")
    torn = False
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        last = number == len(lines)  # no newline after it: written by a killed process
        try:
            obj = json.loads(raw.decode("utf-8"))
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            if last:
                torn = True
                log.warning("%s:%d: ignoring an incomplete last line (a killed run?)",
                            path, number)
                continue
            raise ResultsError(f"{path}:{number}: not a results record ({exc})") from None
        if obj.get("schema") != SCHEMA_VERSION:
            raise ResultsError(f"{path}:{number}: unsupported results schema "
                               f"{obj.get('schema')!r} (this estratos reads {SCHEMA_VERSION})")
        records.append(obj)
    return records, torn


def read_results(path: os.PathLike | str, *, latest: bool = True,
                 kind: Optional[str] = None) -> List[Dict[str, Any]]:
    """All records of a results file, in file order.

    ``latest``: keep only the last record of each cell (what ``--overwrite`` appended wins).
    ``kind``: keep only ``"probe"`` or ``"baseline"`` records. A missing file raises
    :class:`ResultsError`; a malformed line raises it with the file and line.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ResultsError(f"{p}: results file not found") from None
    except OSError as exc:
        raise ResultsError(f"{p}: cannot read results file ({exc.strerror})") from None
    records, _ = _parse(p, data)
    if kind is not None:
        records = [r for r in records if r.get("kind") == kind]
    if not latest:
        return records
    last: Dict[CellKey, int] = {}
    for i, r in enumerate(records):
        last[cell_key(r)] = i
    keep = set(last.values())
    return [r for i, r in enumerate(records) if i in keep]


class ResultsStore:
    """Append-only, lock-protected results file (see the module docstring)."""

    def __init__(self, path: os.PathLike | str) -> None:
        self.path = Path(path)

    def done_keys(self) -> Set[CellKey]:
        """Identities of the cells already in the file (empty if it does not exist)."""
        if not self.path.exists():
            return set()
        return {cell_key(r) for r in read_results(self.path, latest=False)}

    def append(self, records: Iterable[Mapping[str, Any]], *, skip_done: bool = True
               ) -> List[Dict[str, Any]]:
        """Append records under the lock; returns those written.

        With ``skip_done``, a record whose cell another process wrote meanwhile is not
        written again (checked under the lock, so two writers never duplicate a cell).
        """
        records = [dict(r) for r in records]
        if not records:
            return []
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # as open(): umask applies
        except OSError as exc:
            raise ResultsError(f"{self.path}: cannot open results file for writing "
                               f"({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            data = b""
            if size:
                os.lseek(fd, 0, os.SEEK_SET)
                chunks = []
                while True:
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        break
                    chunks.append(chunk)
                data = b"".join(chunks)
            existing, torn = _parse(self.path, data)
            if torn or (data and not data.endswith(b"\n")):
                cut = data.rfind(b"\n") + 1
                os.ftruncate(fd, cut)
                log.warning("%s: removed an incomplete last line before appending", self.path)
            done = {cell_key(r) for r in existing} if skip_done else set()
            written = []
            lines = []
            for r in records:
                key = cell_key(r)
                if key in done:
                    log.info("%s: cell %s already written by another run; skipped",
                             self.path, key)
                    continue
                done.add(key)
                lines.append(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n")
                written.append(r)
            if lines:
                payload = "".join(lines).encode("utf-8")
                os.lseek(fd, 0, os.SEEK_END)
                view = memoryview(payload)
                while view:  # one write normally; loop only on a short write
                    n = os.write(fd, view)
                    view = view[n:]
                os.fsync(fd)
            return written
        finally:
            os.close(fd)  # closing releases the lock
