"""The library side of ``estratos tasks list/show/check``: raw option values in, text out.

cli.py only parses options and calls these, so every command is also a Python call
(``tasks_list_text("es-senteval", ["DATA"])``) and can be tested without click.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from estratos.errors import OptionError, SelectionError
from estratos.tasks.describe import (
    check_tasks,
    list_tasks,
    render_task,
    render_task_list,
    show_task,
    tasks_with_files,
)
from estratos.tasks.selection import select_specs


def tasks_list_text(expr: Optional[str] = None, data_dirs: Sequence[str] = (),
                    fmt: str = "table", sizes: bool = False,
                    task_files: Sequence[str] = ()) -> str:
    """``estratos tasks list``: one row per task (sizes counted only with ``sizes``)."""
    selection = select_specs(expr, task_files, data_dirs, default_all=True, survey=True)
    specs, dirs = selection.specs, selection.data_dirs
    rows = list_tasks(specs, dirs, counts=sizes)
    return render_task_list(rows, fmt, counts=sizes)


def tasks_show_text(task_id: str, data_dirs: Sequence[str] = (), fmt: str = "text",
                    task_files: Sequence[str] = ()) -> str:
    """``estratos tasks show ID``: loads the task and describes its splits and labels."""
    selection = select_specs(task_id, task_files, data_dirs, check=False)
    if len(selection.specs) != 1:
        raise SelectionError(f"{task_id!r} names {len(selection.specs)} tasks, not one: "
                             + ", ".join(selection.ids))
    spec, dirs = selection.specs[0], selection.data_dirs
    dirs.check([spec])
    return render_task(show_task(spec, dirs), fmt)


@dataclass(frozen=True)
class CheckOutcome:
    """What ``tasks check`` prints and its exit status (1 when any problem was found)."""

    text: str
    problems: int
    exit_code: int


def tasks_check(expr: Optional[str] = None, data_dirs: Sequence[str] = (),
                task_files: Sequence[str] = ()) -> CheckOutcome:
    """``estratos tasks check``: validate every file; without ``expr``, every task that has
    at least one file in the data folders."""
    selection = select_specs(expr, task_files, data_dirs, default_all=True, check=False)
    specs, dirs, explicit = selection.specs, selection.data_dirs, selection.explicit
    dirs.check(specs, survey=not explicit)
    checked = specs if explicit else tasks_with_files(specs, dirs)
    if not checked:
        raise OptionError("--data-dir: no task has any data file in the given folders "
                          "(pass the benchmark's folder, or SUITE=DIR)")
    problems = check_tasks(checked, dirs)
    lines = list(problems)
    bad = {p.rsplit(" [", 1)[-1].rstrip("]") for p in problems}
    lines.append(f"checked {len(checked)} tasks: "
                 + (f"{len(problems)} problems in {len(bad)} tasks" if problems
                    else "no problems"))
    if not explicit and len(checked) < len(specs):
        lines.append(f"({len(specs) - len(checked)} tasks without any data file were skipped)")
    return CheckOutcome("\n".join(lines), len(problems), 1 if problems else 0)
