"""The library side of ``estratos tasks list/show/check``: raw option values in, text out.

cli.py only parses options and calls these, so every command is also a Python call
(``tasks_list_text("es-senteval", ["DATA"])``) and can be tested without click.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from estratos.errors import OptionError, TaskError
from estratos.tasks.custom import load_task_file
from estratos.tasks.datadirs import DataDirs
from estratos.tasks.describe import (check_tasks, list_tasks, render_task, render_task_list,
                                     show_task, tasks_with_files)
from estratos.tasks.registry import all_specs, get_spec, select_tasks
from estratos.tasks.types import TaskSpec


def _selection(expr: Optional[str], task_files: Sequence[str]) -> Tuple[List[TaskSpec], bool]:
    """(specs, explicit): the selected specs, or every spec (and custom ones) when no expr."""
    extra = [load_task_file(path) for path in task_files]
    if expr:
        return select_tasks(expr, extra), True
    builtin = all_specs()
    clashes = [s.id for s in extra if s.id in {x.id for x in builtin}]
    if clashes:
        raise TaskError(f"custom task {clashes[0]} has the id of a built-in task; give it "
                        "another name or suite")
    return builtin + extra, False


def tasks_list_text(expr: Optional[str] = None, data_dirs: Sequence[str] = (),
                    fmt: str = "table", sizes: bool = False,
                    task_files: Sequence[str] = ()) -> str:
    """``estratos tasks list``: one row per task (sizes counted only with ``sizes``)."""
    specs, _ = _selection(expr, task_files)
    dirs = DataDirs.parse(data_dirs)
    dirs.check(specs, survey=True)
    rows = list_tasks(specs, dirs, counts=sizes)
    return render_task_list(rows, fmt, counts=sizes)


def tasks_show_text(task_id: str, data_dirs: Sequence[str] = (), fmt: str = "text",
                    task_files: Sequence[str] = ()) -> str:
    """``estratos tasks show ID``: loads the task and describes its splits and labels."""
    extra = [load_task_file(path) for path in task_files]
    custom = {s.id: s for s in extra}
    if task_id in custom:
        spec = custom[task_id]
    elif extra:
        found = select_tasks(task_id, extra)
        spec = found[0] if len(found) == 1 else get_spec(task_id)
    else:
        spec = get_spec(task_id)
    dirs = DataDirs.parse(data_dirs)
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
    specs, explicit = _selection(expr, task_files)
    dirs = DataDirs.parse(data_dirs)
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
