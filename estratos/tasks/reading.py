"""Reading task files line by line, turning every defect into an :class:`InputError`.

All loaders read through :func:`read_lines` and :func:`split_columns`, so every format reports
bad input the same way (``path:line: message``) and nothing else has to know about encodings,
line endings or byte-order marks. A :class:`LoadContext` decides what happens to a bad
record: ``load_task`` stops at the first one (strict), ``estratos tasks check`` collects them
all and keeps going, so one run lists every problem in a file.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

from estratos.errors import InputError

#: problems kept per file in collect mode (a file with every line broken would flood the report)
MAX_PROBLEMS_PER_FILE = 20


class LoadContext:
    """Where loaders send bad-input errors: raise at once (strict) or collect and skip.

    Use ``with ctx.guard(): ...`` around the parsing of one record: in strict mode an
    :class:`InputError` propagates; in collect mode it is recorded and the record is skipped.
    """

    def __init__(self, collect: bool = False) -> None:
        self.collect = collect
        self.problems: List[InputError] = []
        self._per_file: dict = {}
        self.suppressed = 0

    def report(self, error: InputError) -> None:
        """Raise ``error`` (strict) or record it (collect)."""
        if not self.collect:
            raise error
        count = self._per_file.get(error.path, 0) + 1
        self._per_file[error.path] = count
        if count <= MAX_PROBLEMS_PER_FILE:
            self.problems.append(error)
        else:
            self.suppressed += 1

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Route an :class:`InputError` raised inside the block to :meth:`report`."""
        try:
            yield
        except InputError as exc:
            self.report(exc)

    def messages(self) -> List[str]:
        """The collected problems as ``path:line: message`` strings (plus a truncation note)."""
        out = [str(p) for p in self.problems]
        if self.suppressed:
            out.append(f"... and {self.suppressed} more problems (first "
                       f"{MAX_PROBLEMS_PER_FILE} shown per file)")
        return out


def require_file(path: Path) -> None:
    """Fail with an :class:`InputError` naming ``path`` when it is missing or not a file."""
    if not path.exists():
        raise InputError("missing required file", path)
    if not path.is_file():
        raise InputError("not a regular file", path)


def read_lines(path: os.PathLike | str, encoding: str = "utf-8",
               skip_blank: bool = True) -> Iterator[Tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line of ``path`` (1-based, line ending removed).

    Bytes are decoded strictly, so invalid UTF-8 fails with the line number instead of
    silently becoming replacement characters (which would create new "sentences"). A leading
    UTF-8 byte-order mark is dropped. Blank lines are skipped unless ``skip_blank`` is False
    (aligned files such as STS gold scores need them to keep line numbers in step). An empty
    file (no non-blank line) is an error: it is always a truncated download or a wrong path.
    """
    path = Path(path)
    require_file(path)
    seen = False
    try:
        # opened apart from the `with`, so that only open()'s own errors become InputError
        handle = open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf") and encoding.lower() in (
                    "utf-8", "utf8"):
                raw = raw[3:]
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise InputError(f"invalid {encoding} at byte {exc.start + 1} of the line "
                                 f"({raw[exc.start:exc.start + 4]!r})", path, number) from None
            text = text.rstrip("\r\n")
            if not text.strip():
                if skip_blank:
                    continue
            else:
                seen = True
            yield number, text
    if not seen:
        raise InputError("empty file (no data lines)", path)


def split_columns(text: str, path: os.PathLike | str, line: int, expected: int,
                  at_least: bool = False) -> List[str]:
    """Split a line on TABs and check the column count (exact, or a minimum)."""
    fields = text.split("\t")
    if (len(fields) < expected) if at_least else (len(fields) != expected):
        want = f"at least {expected}" if at_least else str(expected)
        raise InputError(f"expected {want} TAB-separated columns, found {len(fields)}",
                         path, line)
    return fields


def parse_score(text: str, path: os.PathLike | str, line: int,
                bounds: Optional[Sequence[float]] = None, what: str = "score") -> float:
    """Parse a finite float score, optionally checking it lies within ``bounds``."""
    value_text = text.strip()
    if not value_text:
        raise InputError(f"missing {what}", path, line)
    try:
        value = float(value_text)
    except ValueError:
        raise InputError(f"{what} is not a number: {value_text!r}", path, line) from None
    if not math.isfinite(value):
        raise InputError(f"{what} is not finite: {value_text!r}", path, line)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise InputError(f"{what} {value:g} outside [{bounds[0]:g}, {bounds[1]:g}]", path, line)
    return value


def count_lines(path: os.PathLike | str) -> int:
    """Number of non-blank lines, counted on raw bytes (cheap: no decoding, no parsing)."""
    count = 0
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                count += 1
    return count


def count_first_column(path: os.PathLike | str) -> dict:
    """Non-blank lines per value of the first TAB column (SentEval probing split tokens)."""
    counts: dict = {}
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                key = raw.split(b"\t", 1)[0].strip().decode("utf-8", "replace")
                counts[key] = counts.get(key, 0) + 1
    return counts
