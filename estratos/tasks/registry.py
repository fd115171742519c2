"""The registry of task specs and suites, and task selection by name.

Specs are plain data registered by the suite modules (``estratos.tasks.suites``) when the
package is imported; nothing here knows a task by name. Selection expressions are the same
everywhere a task list is taken (CLI ``--tasks``, ``select_tasks``): a comma list whose items
are task ids (``suite:name``), suite names, ``suite:GROUP`` or bare names unique across suites.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set

from estratos.errors import SelectionError, TaskError
from estratos.registry import Registry, closest_hint
from estratos.tasks.types import TaskSpec


@dataclass(frozen=True)
class SuiteInfo:
    """A suite: a benchmark's tasks sharing one data folder layout.

    ``default_dir`` is where the suite's data is looked for when no ``--data-dir`` names it
    (only suites that estratos builds itself have one).
    """

    name: str
    language: str
    description: str
    default_dir: Optional[Path] = None


#: the suites and the task specs, in registration order (:class:`estratos.registry.Registry`)
_SUITES: Registry[SuiteInfo] = Registry("suite")
_SPECS: Registry[TaskSpec] = Registry("task")


def register_suite(info: SuiteInfo) -> SuiteInfo:
    """Declare a suite (once); its specs are added with :func:`register`."""
    return _SUITES.register(info.name, info)


def register(*specs: TaskSpec) -> None:
    """Add specs to the registry; their suite must be registered and ids unique."""
    for spec in specs:
        if spec.suite not in _SUITES:
            raise ValueError(f"{spec.id}: suite {spec.suite!r} is not registered")
        _SPECS.register(spec.id, spec)


def suites() -> List[SuiteInfo]:
    """All registered suites, in registration order."""
    return _SUITES.values()


def suite_info(name: str) -> Optional[SuiteInfo]:
    """The registered suite called ``name`` (None when unknown)."""
    return _SUITES.find(name)


def all_specs() -> List[TaskSpec]:
    """Every registered spec, in registry order (suite by suite, as declared)."""
    return _SPECS.values()


def get_spec(task_id: str) -> TaskSpec:
    """The spec registered as ``task_id`` (``suite:name``; a unique bare name also works)."""
    found_id = _SPECS.find(task_id)
    if found_id is not None:
        return found_id
    found = select_tasks(task_id)
    if len(found) != 1:
        raise TaskError(f"{task_id!r} names {len(found)} tasks, not one: "
                        + ", ".join(s.id for s in found))
    return found[0]


def _by_case(item: str, specs: Sequence[TaskSpec]) -> List[TaskSpec]:
    """The specs ``item`` names when compared without case (ids, suites, ``suite:GROUP``,
    bare names), or [] when it names nothing or more than one thing that way."""
    low = item.lower()
    named: Dict[tuple, List[TaskSpec]] = {}
    for s in specs:
        for kind, text in (("id", s.id), ("suite", s.suite), ("group", f"{s.suite}:{s.group}"),
                           ("name", s.name)):
            if text.lower() == low:
                named.setdefault((kind, text), []).append(s)
    if len(named) != 1:
        return []
    (kind, _), found = next(iter(named.items()))
    return found if kind != "name" or len(found) == 1 else []


def _resolve_item(item: str, specs: Sequence[TaskSpec],
                  context: Sequence[str] = ()) -> List[TaskSpec]:
    """The specs one selection item names, in registry order. Exact names first, then the
    same compared without case when that is unambiguous (``tass1`` -> ``TASS1``). An unknown
    name's hint lists names of ``context`` (the suites the rest of the selection names) when
    there are any, else of every suite; an unknown name in ``suite:NAME`` lists that suite's."""
    ids = {s.id: s for s in specs}
    suite_names = list(dict.fromkeys(s.suite for s in specs))
    if item in ids:
        return [ids[item]]
    if item in suite_names:
        return [s for s in specs if s.suite == item]
    if ":" in item:
        suite, _, rest = item.partition(":")
        if suite in suite_names:
            group = [s for s in specs if s.suite == suite and s.group == rest]
            if group:
                return group
        folded = _by_case(item, specs)
        if folded:
            return folded
        if suite in suite_names:
            in_suite = [s.name for s in specs if s.suite == suite]
            groups = sorted({s.group for s in specs if s.suite == suite})
            raise SelectionError(f"unknown task or group {item!r} in suite {suite}"
                                 + closest_hint(rest, in_suite + groups))
        raise SelectionError(f"unknown suite {suite!r} in {item!r}"
                             + closest_hint(suite, suite_names))
    bare = [s for s in specs if s.name == item]
    if len(bare) == 1:
        return bare
    if len(bare) > 1:
        raise SelectionError(f"task name {item!r} is ambiguous; say which: "
                             + ", ".join(s.id for s in bare))
    folded = _by_case(item, specs)
    if folded:
        return folded
    same = [s for s in specs if s.name.lower() == item.lower()]
    if len(same) > 1:  # "tense": the qualified ids, not a bare name that is ambiguous too
        raise SelectionError(f"unknown task {item!r}; say which: "
                             + ", ".join(s.id for s in same))
    near = [s for s in specs if s.suite in context] or list(specs)
    groups = list(dict.fromkeys(f"{s.suite}:{s.group}" for s in near
                                if s.group.lower() == item.lower()))
    if groups:  # a group is named with its suite (LPT is in several suites)
        name = groups[0].partition(":")[2]
        choices = groups[0] if len(groups) == 1 else \
            f"{', '.join(groups[:-1])} or {groups[-1]}"
        raise SelectionError(f"unknown task {item!r}: {name} is a group; select it with its "
                             f"suite: {choices}")
    everything = (list(dict.fromkeys(s.id for s in near))
                  + list(dict.fromkeys(s.suite for s in near))
                  + list(dict.fromkeys(s.name for s in near)))
    # a bare name several tasks share is suggested as their ids: it would be ambiguous too
    shared: Dict[str, List[str]] = {}
    for s in specs:
        shared.setdefault(s.name, []).append(s.id)
    where = f" in {', '.join(context)}" if context and len(near) < len(specs) else ""
    raise SelectionError(f"unknown task {item!r}{where}" + closest_hint(
        item, everything, {name: ids for name, ids in shared.items() if len(ids) > 1}))


def builtin_clash(extra: Sequence[TaskSpec]) -> None:
    """A custom task (``--task-file``) may not take a registered task's id."""
    clashes = [s.id for s in extra if s.id in _SPECS]
    if clashes:
        raise SelectionError(f"custom task {clashes[0]} has the id of a built-in task; give "
                             "it another name or suite")


def select_tasks(expr: str, extra: Sequence[TaskSpec] = (),
                 hint_suites: Sequence[str] = ()) -> List[TaskSpec]:
    """The specs named by a selection expression, in registry order, without duplicates.

    ``extra`` are specs that are not registered (custom tasks from ``--task-file``); they
    take part in selection after the registered ones. Unknown, ambiguous or clashing names
    raise :class:`~estratos.errors.SelectionError` (exit 2) with the closest names: of the
    suites the expression names, else of ``hint_suites`` (e.g. those whose data folder was
    given), else of every suite.
    """
    builtin_clash(extra)
    pool = all_specs() + list(extra)
    items = [part.strip() for part in expr.split(",") if part.strip()]
    if not items:
        raise SelectionError("empty task selection")
    suites_named = {s.suite for s in pool}
    context = list(dict.fromkeys(item.partition(":")[0] for item in items
                                 if item.partition(":")[0] in suites_named))
    context = context or [s for s in hint_suites if s in suites_named]
    chosen: Set[str] = set()
    for item in items:
        chosen.update(s.id for s in _resolve_item(item, pool, context))
    return [s for s in pool if s.id in chosen]
