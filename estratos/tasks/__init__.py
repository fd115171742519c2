"""Task registry, data-format loaders and synthetic suites.

Public API (see docs/contracts.md and docs/tasks.md): specs are declarative data registered
by name (:func:`get_spec`, :func:`all_specs`, :func:`select_tasks`); :func:`load_task` reads a
spec's files from the folder :class:`DataDirs` gives for its suite into a
:class:`TaskData` (unique normalized sentences for ``encode``, per-split examples for
``probe``); :func:`load_task_file` reads a custom task's TOML spec.
"""

from estratos.tasks.types import (COMBINER_SLOTS, GROUPS, METRICS, PROTOCOLS,
                                  SlotRefs, Split, TaskData, TaskSpec)
from estratos.tasks.registry import (SuiteInfo, all_specs, get_spec, register,
                                     register_suite, select_tasks, suite_info)
from estratos.tasks.registry import suites as all_suites
from estratos.tasks.datadirs import ENV_VAR, DataDirs
from estratos.tasks import formats  # noqa: F401  (registers the data formats)
from estratos.tasks import suites as _suites  # noqa: F401  (registers the built-in suites)
from estratos.tasks.loading import Plan, load_task, plan_task, task_root, unique_sentences
from estratos.tasks.custom import load_task_file
from estratos.tasks.describe import (check_tasks, describe_task, list_tasks, render_task,
                                     render_task_list, show_task, tasks_with_files)
from estratos.tasks.reading import LoadContext
from estratos.tasks.suites.synthetic_es import SYNTHETIC_ES_DEFAULT_DIR

__all__ = [
    "COMBINER_SLOTS", "GROUPS", "METRICS", "PROTOCOLS", "SlotRefs", "Split", "TaskData",
    "TaskSpec", "SuiteInfo", "all_specs", "get_spec", "register", "register_suite",
    "select_tasks", "suite_info", "all_suites", "ENV_VAR", "DataDirs", "Plan", "load_task",
    "plan_task", "task_root", "unique_sentences", "load_task_file", "check_tasks",
    "describe_task", "list_tasks", "render_task", "render_task_list", "show_task",
    "tasks_with_files",
    "LoadContext", "SYNTHETIC_ES_DEFAULT_DIR",
]
