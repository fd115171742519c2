"""Reading results files (JSON lines): one strict parser for resume, sharding and reports.

A report must be rebuildable from results files alone, so every line is validated
(:meth:`ResultRecord.from_json`). Two situations are common enough in real runs to be
tolerated, but never silently: a cut last line (a run killed mid-write) is skipped, and a
cell written twice (a rerun with ``--overwrite``, or two files that overlap) keeps the last
copy. Both produce a :class:`Notice`. Anything else (a broken line in the middle, a file
that is not JSON lines at all, a schema version this estratos does not read) is an error
naming the file and line; lines of an older version it reads are migrated
(:func:`estratos.results.record.migrate`).
"""

from __future__ import annotations

import glob
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from estratos.errors import ResultsError, ResultsFileError
from estratos.results.record import READABLE_SCHEMAS, CellKey, ResultRecord

log = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]


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
class Located:
    """A validated record with where it came from (for messages)."""

    record: ResultRecord
    path: str
    line: int


@dataclass
class ParsedFile:
    """What one results file holds: its records, notices, and the byte offset after the last
    complete line (an append cuts a torn last line off there first)."""

    records: List[Located] = field(default_factory=list)
    notices: List[Notice] = field(default_factory=list)
    good_end: int = 0


@dataclass
class LoadedResults:
    """Validated records (duplicates resolved, last wins) and the notices raised on the way.
    ``copies``: every copy of each cell read more than once, in reading order (the last one
    is in ``records``), for a caller that must not pick one silently (``compare``)."""

    records: List[Located] = field(default_factory=list)
    notices: List[Notice] = field(default_factory=list)
    sources: List[str] = field(default_factory=list)
    copies: Dict[CellKey, List[Located]] = field(default_factory=dict)


def _not_results(path: str, line: int, exc: Exception) -> ResultsFileError:
    return ResultsFileError(f"not a results file: this line is not JSON ({exc}); estratos results "
                      "files hold one JSON object per line, as written by `estratos probe` "
                      "or `estratos baseline`", path, line)


def parse_results(path: PathLike, data: bytes, first: Optional[Located] = None, *,
                  lines_before: int = 0) -> ParsedFile:
    """Parse the bytes of a results file (see the module docstring for what is tolerated).
    ``first``: the first record read before this file (names it when versions differ).
    ``lines_before``: ``data`` continues a file after that many lines already read (line
    numbers count on from there; the store reads only what was appended since)."""
    spath = os.fspath(path)
    out = ParsedFile()
    lines = data.split(b"\n")
    last_index = max((i for i, b in enumerate(lines) if b.strip()), default=-1)
    offset = 0
    for index, raw in enumerate(lines):
        start, offset = offset, offset + len(raw) + 1
        if not raw.strip():
            if index < len(lines) - 1:
                out.good_end = min(offset, len(data))
            continue
        line = lines_before + index + 1
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            # a killed writer leaves the start of a JSON object; anything else is no record
            if index == last_index and raw.lstrip().startswith(b"{"):
                notice = Notice(spath, line, "truncated last line skipped (an incomplete "
                                "last line left by a run killed while writing it; the next "
                                "run redoes that cell)")
                log.warning("%s", notice)
                out.notices.append(notice)
                out.good_end = start
                continue
            if not out.records and not lines_before:
                raise _not_results(spath, line, exc) from None
            raise ResultsFileError(f"not a JSON line ({exc})", spath, line) from None
        if isinstance(obj, dict) and "schema" in obj and obj["schema"] not in READABLE_SCHEMAS:
            raise ResultsError(f"{spath}:{line}: unsupported results schema version "
                               f"{obj['schema']!r} (this estratos reads versions "
                               f"{', '.join(map(str, READABLE_SCHEMAS))})")
        out.records.append(Located(ResultRecord.from_json(obj, spath, line), spath, line))
        out.good_end = min(offset, len(data))
    return out


def read_file(path: PathLike, first: Optional[Located] = None) -> ParsedFile:
    """Parse one results file; a missing or unreadable file raises :class:`ResultsFileError`."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ResultsFileError("results file not found", os.fspath(p)) from None
    except IsADirectoryError:
        raise ResultsFileError("cannot read results file (it is a folder)", os.fspath(p)) from None
    except OSError as exc:
        raise ResultsFileError(f"cannot read results file ({exc.strerror})", os.fspath(p)) from None
    return parse_results(p, data, first)


def expand_paths(paths: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    """Results files from paths or glob patterns (e.g. ``run.shard-*-of-4.jsonl``), in order,
    each once. A pattern that matches nothing is an error naming it."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: List[str] = []
    for p in paths:
        text = os.fspath(p)
        if not os.path.exists(text) and glob.has_magic(text):
            matches = sorted(glob.glob(os.path.expanduser(text)))
            if not matches:
                raise ResultsFileError("no results file matches this pattern", text)
        else:
            matches = [text]
        for m in matches:
            if m not in out:
                out.append(m)
    return out


def load_results(paths: Union[PathLike, Sequence[PathLike]]) -> LoadedResults:
    """Read and validate results files (paths or globs), in order; a later copy of a cell
    replaces an earlier one (with a notice). A null score (undefined metric) is kept: reports
    show it as undefined, never as 0."""
    files = expand_paths(paths)
    out = LoadedResults(sources=files)
    by_key: Dict[CellKey, Located] = {}
    first: Optional[Located] = None
    #: path -> (its first plain-duplicate notice, how many it stands for)
    repeats: Dict[str, List[Any]] = {}
    for path in files:
        parsed = read_file(path, first)
        first = first or (parsed.records[0] if parsed.records else None)
        out.notices += parsed.notices
        if not parsed.records and not parsed.notices:
            notice = Notice(path, None, "results file is empty")
            log.warning("%s", notice)
            out.notices.append(notice)
        for loc in parsed.records:
            previous = by_key.pop(loc.record.key, None)
            if previous is not None:
                old, new = previous.record.data_digest, loc.record.data_digest
                if old and new and old != new:  # not a copy: a cell of other data
                    notice = Notice(loc.path, loc.line,
                                    f"cell {_describe(loc.record)} was computed on other data "
                                    f"(data digest {new}) than at {previous.path}:"
                                    f"{previous.line} (data digest {old}); the last one is "
                                    "kept")
                    log.warning("%s", notice)
                    out.notices.append(notice)
                elif str(loc.path) in repeats:  # one line per file, however many copies
                    repeats[str(loc.path)][1] += 1
                else:
                    notice = Notice(loc.path, loc.line,
                                    f"duplicate cell {_describe(loc.record)} (also at "
                                    f"{previous.path}:{previous.line}); the last one is kept")
                    repeats[str(loc.path)] = [notice, 1]
                    out.notices.append(notice)
                out.copies.setdefault(loc.record.key, [previous]).append(loc)
            by_key[loc.record.key] = loc  # re-inserted: keeps last-seen order
    for notice, count in repeats.values():
        if count > 1:  # e.g. a rerun with --overwrite: its copies are meant to replace
            index = out.notices.index(notice)
            notice = Notice(notice.path, notice.line,
                            f"{count} duplicate cells from line {notice.line} on, e.g. "
                            f"{notice.message.removeprefix('duplicate cell ')}; the last copy "
                            "of each is kept (what a rerun with --overwrite appends)")
            out.notices[index] = notice
        log.info("%s", notice)
    out.records = list(by_key.values())
    return out


def read_results(paths: Union[PathLike, Sequence[PathLike]], *, latest: bool = True,
                 kind: Optional[str] = None) -> List[ResultRecord]:
    """The records of one or more results files (paths or globs), in file order.

    ``latest``: keep only the last record of each cell (what ``--overwrite`` appended wins).
    ``kind``: keep only ``"probe"`` or ``"baseline"`` records. Raises :class:`ResultsFileError`
    (file:line) for a missing file or a malformed line that is not the last one.
    """
    records = [loc.record for path in expand_paths(paths) for loc in read_file(path).records]
    if kind is not None:
        records = [r for r in records if r.kind == kind]
    if not latest:
        return records
    last: Dict[CellKey, int] = {r.key: i for i, r in enumerate(records)}
    keep = set(last.values())
    return [r for i, r in enumerate(records) if i in keep]


def done_keys(paths: Iterable[PathLike]) -> set:
    """Identities of the cells already in these results files (missing files hold none)."""
    keys = set()
    for p in paths:
        if os.path.exists(p):
            keys |= {loc.record.key for loc in read_file(p).records}
    return keys


def _describe(record: ResultRecord) -> str:
    layer = "baseline" if record.layer is None else f"layer {record.layer}"
    return f"{record.task} {layer} seed {record.seed} of {record.model}"


