"""Task selection from command-line forms: ``--tasks``, ``--task-file`` and ``--data-dir``.

Why one function: encode, probe, baseline, the ``tasks`` commands, slurm and the demo all
turn the same three options into task specs and data folders; written once, every command
accepts ``--task-file``, refuses the same clashes (a custom task with a built-in id, two task
files with one id) with the same messages, and checks the data folders the same way before
any work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

from estratos.errors import OptionError
from estratos.tasks.custom import load_task_file
from estratos.tasks.datadirs import DataDirs
from estratos.tasks.registry import all_specs, builtin_clash, select_tasks
from estratos.tasks.types import TaskSpec

#: the message when a command needs tasks and got none
NO_TASKS = "--tasks: give task ids, suites or suite:GROUP (or --task-file)"


@dataclass(frozen=True)
class Selection:
    """The selected specs (registry order, then custom tasks), their data folders, and
    whether ``--tasks`` named them (``explicit``) or every task was taken."""

    specs: List[TaskSpec]
    data_dirs: DataDirs
    explicit: bool = True

    @property
    def ids(self) -> List[str]:
        return [spec.id for spec in self.specs]


def read_task_files(task_files: Sequence[Union[str, os.PathLike]]) -> List[TaskSpec]:
    """The custom specs of ``--task-file`` values; two files defining one id, or a file
    defining a built-in id, is an error naming both."""
    specs: List[TaskSpec] = []
    seen: Dict[str, Union[str, os.PathLike]] = {}
    for path in task_files:
        spec = load_task_file(path)
        if spec.id in seen:
            raise OptionError(f"--task-file: {path} and {seen[spec.id]} both define the task "
                              f"{spec.id}; give one of them another name or suite")
        seen[spec.id] = path
        specs.append(spec)
    builtin_clash(specs)
    return specs


def select_specs(tasks: Optional[str], task_files: Sequence[Union[str, os.PathLike]] = (),
                 data_dirs: Sequence[str] = (), *, default_all: bool = False,
                 check: bool = True, survey: bool = False) -> Selection:
    """``--tasks`` / ``--task-file`` / ``--data-dir`` -> :class:`Selection`.

    ``tasks``: a selection expression (:func:`~estratos.tasks.registry.select_tasks`; custom
    tasks take part in it), and every custom task besides, whether the expression names it
    or not (``--task-file`` always adds its task). Without one: the custom tasks, or with
    ``default_all`` every registered task plus the custom ones; neither is :data:`NO_TASKS`.
    ``check``: the data folders are checked for the selected specs (:meth:`DataDirs.check`,
    ``survey`` as there).
    Raises :class:`OptionError` / :class:`~estratos.errors.TaskError` (unknown or clashing
    tasks, exit 2) or :class:`~estratos.errors.InputError` (a bad task file).
    """
    extra = read_task_files(task_files)
    dirs = DataDirs.parse(list(data_dirs))
    expr = "" if tasks is None else str(tasks).strip()
    if expr:
        specs = select_tasks(expr, extra=extra, hint_suites=dirs.suites_present())
        chosen = {spec.id for spec in specs}
        specs += [spec for spec in extra if spec.id not in chosen]  # "also" these
        explicit = True
    elif default_all:
        specs, explicit = all_specs() + extra, False
    elif extra:
        specs, explicit = extra, True
    else:
        raise OptionError(NO_TASKS)
    if check:
        dirs.check(specs, survey=survey)
    return Selection(specs, dirs, explicit)


def task_options(selection: Selection) -> List[str]:
    """The command-line words that select the same tasks again (``--tasks IDS`` and a
    ``--task-file`` per custom task): what hints and generated scripts print."""
    words = ["--tasks", ",".join(selection.ids)]
    for spec in selection.specs:
        if spec.source:
            words += ["--task-file", spec.source]
    return words


__all__ = ["NO_TASKS", "Selection", "read_task_files", "select_specs", "task_options"]
