"""The results file: JSON lines, one per cell, safe to append from several processes.

Why this shape: a probe run is long and may be killed, rerun, or split over processes or
SLURM jobs writing the same file. Each record is appended under an exclusive ``fcntl.flock``
with ONE ``write`` of the whole line (its space reserved first, so a full disk is an error
before any byte: :func:`estratos.files.write_all`) and an ``fsync``, so lines never
interleave or go missing. A line torn by a killed process (no trailing newline) is ignored
with a warning and cut off before the next append, so it is redone once and never
duplicated. A cell is identified by (task, layer, pooling, seed, classifier name, model,
revision): a rerun skips cells already present; with ``--overwrite`` a new record is
appended and readers keep the last record of each cell
(:func:`~estratos.results.reader.read_results` with ``latest=True``).

Why appends stay cheap: an append must know the cells already in the file (another process
may have written them) and cut a torn last line, but reading the whole file each time would
cost in proportion to the file, i.e. the grid's square over a run. Each process remembers
what it has read of each results file (:class:`_Seen`: the offset after the last whole line,
the cell keys before it, and the bytes just before it to notice a file replaced behind its
back) and, under the lock, reads only what was appended since.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

from estratos.errors import ResultsError
from estratos.faultpoints import fault_point
from estratos.files import fsync_file, locked, write_all
from estratos.results.reader import Located, done_keys, parse_results
from estratos.results.record import CellKey, ResultRecord

log = logging.getLogger(__name__)


class ResultsStore:
    """Append-only, lock-protected results file (see the module docstring)."""

    def __init__(self, path: os.PathLike | str) -> None:
        self.path = Path(path)

    def done_keys(self) -> Set[CellKey]:
        """Identities of the cells already in the file (empty if it does not exist)."""
        return done_keys([self.path])

    def append(self, records: Iterable[ResultRecord], *, skip_done: bool = True
               ) -> List[ResultRecord]:
        """Append records under the lock; returns those written.

        With ``skip_done``, a record whose cell another process wrote meanwhile is not
        written again (checked under the lock, so two writers never duplicate a cell).
        """
        records = list(records)
        if not records:
            return []
        with locked(self.path, ResultsError, "results file for writing") as fd:
            seen = _catch_up(self.path, fd)
            batch: Set[CellKey] = set()
            written = []
            lines = []
            for r in records:
                if skip_done and (r.key in seen.keys or r.key in batch):
                    log.info("%s: cell %s already written by another run; skipped",
                             self.path, r.key)
                    continue
                batch.add(r.key)
                lines.append(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
                written.append(r)
            if lines:
                payload = "".join(lines).encode("utf-8")
                # the space first: a full disk stops here, before a byte (or half a line)
                write_all(fd, payload, offset=seen.end, folder=self.path.parent,
                          what=f"appending {len(lines)} line(s) to {self.path.name}")
                fsync_file(fd)
                seen.advance(payload, len(lines), [r.key for r in written])
                fault_point("results-appended")
            return written


#: how many bytes before the read offset are kept to notice a file replaced behind our back
_TAIL = 64


@dataclass
class _Seen:
    """What this process has read of one results file: up to ``end`` (after a whole line),
    ``lines`` lines holding the cells ``keys``; ``tail`` = the bytes just before ``end``."""

    inode: Tuple[int, int]
    end: int = 0
    lines: int = 0
    keys: Set[CellKey] = field(default_factory=set)
    tail: bytes = b""
    first: Optional[Located] = None

    def advance(self, data: bytes, lines: int, keys: Iterable[CellKey]) -> None:
        self.end += len(data)
        self.lines += lines
        self.keys.update(keys)
        self.tail = (self.tail + data)[-_TAIL:]

    def still_valid(self, fd: int, inode: Tuple[int, int], size: int) -> bool:
        """The same file, not shortened, with the same bytes before ``end``."""
        return (inode == self.inode and size >= self.end
                and os.pread(fd, len(self.tail), self.end - len(self.tail)) == self.tail)


#: per process, by real path: what :class:`ResultsStore` has read of each results file
_SEEN: Dict[str, _Seen] = {}


def _catch_up(path: Path, fd: int) -> _Seen:
    """Read (under the lock) what was appended to the file since this process last looked;
    cut a torn last line. Returns the updated :class:`_Seen`."""
    st = os.fstat(fd)
    inode = (st.st_dev, st.st_ino)
    key = os.path.realpath(path)
    seen = _SEEN.get(key)
    if seen is None or not seen.still_valid(fd, inode, st.st_size):
        seen = _SEEN[key] = _Seen(inode)
    data = _read_from(fd, seen.end)
    parsed = parse_results(path, data, seen.first, lines_before=seen.lines)
    if parsed.good_end < len(data):
        os.ftruncate(fd, seen.end + parsed.good_end)
        log.warning("%s: removed an incomplete last line before appending", path)
    if seen.first is None and parsed.records:
        seen.first = parsed.records[0]
    good = data[:parsed.good_end]
    seen.advance(good, good.count(b"\n"), (loc.record.key for loc in parsed.records))
    return seen


def _read_from(fd: int, offset: int) -> bytes:
    os.lseek(fd, offset, os.SEEK_SET)
    chunks: List[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
