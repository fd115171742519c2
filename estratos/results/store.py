"""The results file: JSON lines, one per cell, safe to append from several processes.

Why this shape: a probe run is long and may be killed, rerun, or split over processes or
SLURM jobs writing the same file. Each record is appended under an exclusive ``fcntl.flock``
with ONE ``write`` of the whole line and an ``fsync``, so lines never interleave or go
missing. A line torn by a killed process (no trailing newline) is ignored with a warning and
cut off before the next append, so it is redone once and never duplicated. A cell is
identified by (task, layer, pooling, seed, classifier name, model, revision): a rerun skips
cells already present; with ``--overwrite`` a new record is appended and readers keep the
last record of each cell (:func:`~estratos.results.reader.read_results` with ``latest=True``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Iterable, List, Set

from estratos.errors import ResultsError
from estratos.results.reader import done_keys, parse_results
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
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # 0o666: the umask decides, as for any file a plain open() creates
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise ResultsError(f"{self.path}: cannot open results file for writing "
                               f"({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = _read_all(fd)
            parsed = parse_results(self.path, data)
            if parsed.good_end < len(data):
                os.ftruncate(fd, parsed.good_end)
                log.warning("%s: removed an incomplete last line before appending", self.path)
            done = {loc.record.key for loc in parsed.records} if skip_done else set()
            written = []
            lines = []
            for r in records:
                if r.key in done:
                    log.info("%s: cell %s already written by another run; skipped",
                             self.path, r.key)
                    continue
                done.add(r.key)
                lines.append(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
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


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
