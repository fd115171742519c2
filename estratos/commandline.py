"""Every ``estratos`` command line that estratos itself writes, written by one class.

Why one writer: commands are printed (the demo's commands, the hint that adds missing
sentences to a cache) and scheduled (SLURM job scripts). Written by hand in each place, they
drifted: a value left unquoted, task-selection words spelled three ways, options parsed back
from words by guessing. A :class:`Command` holds the stage, its ``(flag, value)`` options (from
a configuration's ``to_options``, :mod:`estratos.optiontable`) and its positional arguments;
:meth:`Command.argv` gives the words, :meth:`Command.shell` one quoted line and
:meth:`Command.script` the one-option-per-line form of job scripts. The task selection
(``--tasks``, ``--task-file``, ``--data-dir``) has one writer too, :func:`task_options`.
Standard library only.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

from estratos.optiontable import OptionPair, flatten

#: how a printed command calls estratos
PROGRAM: Tuple[str, ...] = ("estratos",)


class ShellText(str):
    """A value written as is, already quoted for bash (``"$SLURM_ARRAY_TASK_ID/4"``, a glob
    of shard files): :meth:`Command.shell` and :meth:`Command.script` do not quote it."""


def quote(word: Union[str, os.PathLike[str]]) -> str:
    """One word for bash: a :class:`ShellText` as is, anything else :func:`shlex.quote`d."""
    return word if isinstance(word, ShellText) else shlex.quote(os.fspath(word))


@dataclass(frozen=True)
class Command:
    """One ``estratos`` command: ``words`` (``("probe",)``, ``("cache", "verify")``), its
    ``positional`` arguments (after the words) and its ``options`` (``(flag, value)`` pairs;
    a switch's value is None; a repeated option appears once per value)."""

    words: Tuple[str, ...]
    options: Tuple[OptionPair, ...] = ()
    positional: Tuple[str, ...] = ()

    @classmethod
    def of(cls, words: Union[str, Sequence[str]], *options: Sequence[OptionPair],
           positional: Sequence[Union[str, os.PathLike[str]]] = ()) -> "Command":
        """``Command.of("probe", [("--cache", path)], config.to_options(), ...)``: the
        option groups in the order given."""
        stage = (words,) if isinstance(words, str) else tuple(words)
        pairs = tuple(pair for group in options for pair in group)
        return cls(stage, pairs, tuple(w if isinstance(w, ShellText) else os.fspath(w)
                                       for w in positional))

    def argv(self, program: Sequence[str] = PROGRAM) -> List[str]:
        """The command's words (for ``subprocess`` or click's test runner with
        ``program=()``)."""
        return [*program, *self.words, *self.positional, *flatten(self.options)]

    def shell(self, program: Sequence[str] = PROGRAM) -> str:
        """The command as one line a user can paste into bash, every value quoted."""
        return " ".join(quote(word) for word in self.argv(program))

    def script(self, program: str) -> str:
        """The command as job-script lines: ``program`` (written as is, e.g. ``"$PY" -m
        estratos``) and the words on the first line, then one positional argument or
        option per line, joined by ``\\``."""
        head = " ".join([program, *map(quote, self.words)])
        parts = [head] + [f"    {quote(arg)}" for arg in self.positional]
        parts += [f"    {flag}" if value is None else f"    {flag} {quote(value)}"
                  for flag, value in self.options]
        return " \\\n".join(parts)


def task_options(tasks: Optional[str] = None,
                 task_files: Sequence[Union[str, os.PathLike[str]]] = (),
                 data_dirs: Sequence[str] = ()) -> List[OptionPair]:
    """The task-selection options (``--tasks``, ``--task-file``, ``--data-dir``) as pairs,
    each given once per value, nothing for what is empty: the one writer of these words."""
    pairs: List[OptionPair] = [("--tasks", str(tasks))] if tasks and str(tasks).strip() else []
    pairs += [("--task-file", os.fspath(path)) for path in task_files]
    return pairs + [("--data-dir", str(d)) for d in data_dirs]


__all__ = ["PROGRAM", "Command", "ShellText", "quote", "task_options"]
