"""The errors estratos reports to users.

Every failure caused by the user's input (a data file, an option, a cache) is raised as an
:class:`EstratosError` subclass whose message names the file and line, or the option. The CLI
turns these into one line on stderr and a non-zero exit code; anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any, Dict, Optional, Tuple


def _restore(cls: type, args: Tuple[Any, ...], state: Dict[str, Any]) -> "EstratosError":
    """Unpickle an error as itself: its class, arguments and fields, no constructor call
    (whose signature differs per class)."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class EstratosError(Exception):
    """Base class of all user-facing errors; ``exit_code`` is what the CLI exits with.

    Errors pickle as themselves with every field (``InputError.path``/``line``,
    ``MissingSentences.missing``...), so one raised in a worker process is re-raised in the
    parent unchanged. :meth:`in_context` adds what the parent knows (the task) around the
    message without losing the fields.
    """

    exit_code = 1
    #: what :meth:`in_context` puts before and after the message
    _prefix = ""
    _suffix = ""

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_restore, (type(self), self.args, dict(self.__dict__)))

    def in_context(self, prefix: str = "", suffix: str = "") -> "EstratosError":
        """A copy whose message reads ``prefix: <message> suffix`` (same class and fields)."""
        out = copy.copy(self)
        out._prefix = (f"{prefix}: " if prefix else "") + self._prefix
        out._suffix = self._suffix + (f" {suffix}" if suffix else "")
        return out

    def _text(self) -> str:
        """The message itself (what ``str()`` shows inside any context)."""
        return super().__str__()

    def __str__(self) -> str:
        return self._prefix + self._text() + self._suffix

    def cli_text(self) -> str:
        """The message as the command line shows it (``Error: <this>``); the same as
        ``str()`` except where an error names what a command-line user typed."""
        return str(self)


class InputError(EstratosError):
    """A malformed or missing input file. ``str()`` reads ``path:line: message``."""

    def __init__(self, message: str, path: Optional[os.PathLike | str] = None,
                 line: Optional[int] = None) -> None:
        self.message = message
        self.path = None if path is None else os.fspath(path)
        self.line = line
        super().__init__(str(self))

    def _text(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        return where + self.message


class OptionError(EstratosError):
    """An invalid option value. The message is written naming the command-line option
    (``--model: ...``), which is what the CLI shows (:meth:`cli_text`); ``str()``, what a
    Python caller sees, names the function's parameter instead (``model: ...``): the same
    option with its dashes dropped and ``-`` read as ``_``."""

    exit_code = 2

    def _text(self) -> str:
        return _OPTION_PREFIX.sub(lambda m: m.group(1).replace("-", "_"), super()._text(), 1)

    def cli_text(self) -> str:
        return self._prefix + super()._text() + self._suffix


#: the option an option error starts with (``--model:``, ``--data-dir ...``)
_OPTION_PREFIX = re.compile(r"^--([a-z][a-z0-9-]*)(?=[:\s]|$)")


class TaskError(EstratosError):
    """An unknown task name or an invalid task spec."""


class SelectionError(TaskError):
    """A task selection (``--tasks``, ``--task-file``) that names no task, an ambiguous one
    or clashing ones: a usage error like any other option's (exit 2)."""

    exit_code = 2


class CacheError(EstratosError):
    """A cache that is missing, incomplete, corrupted or made with other settings."""


class DamagedCache(CacheError):
    """A cache whose own structures (its root attributes) cannot be read: a damaged file."""


class SettingsMismatch(CacheError):
    """The cache was made with other settings (model, pooling, dtype...) than asked for."""


class MissingSentences(CacheError):
    """The cache lacks sentences a task needs; ``missing`` counts them."""

    def __init__(self, message: str, missing: int) -> None:
        self.missing = missing
        super().__init__(message)


class EncodeError(EstratosError):
    """The encoder gave what no cache may hold (NaN or infinite hidden states)."""


class DownloadError(EstratosError):
    """A download that could not be completed (offline, HTTP error, corrupt archive)."""


class ResultsError(EstratosError):
    """A results (JSON lines) file that cannot be read as results."""


class ResultsFileError(InputError, ResultsError):
    """A results file (or one of its lines) that is not valid results: both an input error
    naming ``path:line`` and a results error, so either kind of handler catches it."""


class DiskFull(CacheError, ResultsError):
    """A folder with too little free space for what was about to be written (a cache, a
    results line, predictions, a report): raised before the write, so nothing is torn; a
    cache's ``.partial`` written so far is kept and resumes once space is free. Both a cache
    and a results error, so either kind of handler catches it."""


class SchedulerError(EstratosError):
    """The cluster's scheduler (``sbatch``) refused a job script; the message is its own."""


class Interrupted(EstratosError, KeyboardInterrupt):
    """Ctrl-C during a long run: the message says what was kept and how to resume.

    Still a :class:`KeyboardInterrupt` (code that stops on Ctrl-C keeps doing so); the CLI
    shows the message and exits with 130, as a shell does for SIGINT.
    """

    exit_code = 130
