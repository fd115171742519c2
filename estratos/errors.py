"""The errors estratos reports to users.

Every failure caused by the user's input (a data file, an option, a cache) is raised as an
:class:`EstratosError` subclass whose message names the file and line, or the option. The CLI
turns these into one line on stderr and a non-zero exit code; anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import os
from typing import Optional


class EstratosError(Exception):
    """Base class of all user-facing errors; ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class InputError(EstratosError):
    """A malformed or missing input file. ``str()`` reads ``path:line: message``."""

    def __init__(self, message: str, path: Optional[os.PathLike | str] = None,
                 line: Optional[int] = None) -> None:
        self.message = message
        self.path = None if path is None else os.fspath(path)
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        return where + self.message


class OptionError(EstratosError):
    """An invalid option value (the message names the option)."""

    exit_code = 2


class TaskError(EstratosError):
    """An unknown task name or an invalid task spec."""


class SelectionError(TaskError):
    """A task selection (``--tasks``, ``--task-file``) that names no task, an ambiguous one
    or clashing ones: a usage error like any other option's (exit 2)."""

    exit_code = 2


class CacheError(EstratosError):
    """A cache that is missing, incomplete, corrupted or made with other settings."""


class SettingsMismatch(CacheError):
    """The cache was made with other settings (model, pooling, dtype...) than asked for."""


class MissingSentences(CacheError):
    """The cache lacks sentences a task needs; ``missing`` counts them."""

    def __init__(self, message: str, missing: int) -> None:
        self.missing = missing
        super().__init__(message)


class EncodeError(EstratosError):
    """The encoder gave what no cache may hold (NaN or infinite hidden states)."""


class ResultsError(EstratosError):
    """A results (JSON lines) file that cannot be read as results."""


class ResultsFileError(InputError, ResultsError):
    """A results file (or one of its lines) that is not valid results: both an input error
    naming ``path:line`` and a results error, so either kind of handler catches it."""


class SchedulerError(EstratosError):
    """The cluster's scheduler (``sbatch``) refused a job script; the message is its own."""


class Interrupted(EstratosError, KeyboardInterrupt):
    """Ctrl-C during a long run: the message says what was kept and how to resume.

    Still a :class:`KeyboardInterrupt` (code that stops on Ctrl-C keeps doing so); the CLI
    shows the message and exits with 130, as a shell does for SIGINT.
    """

    exit_code = 130
