"""Synthetic Spanish probing suite (synthetic-es), written by ``estratos tasks build``.

Nine linguistic probing tasks in SentEval's probing format (``split<TAB>label<TAB>sentence``,
split tr/va/te), one file per task, ``<data-dir>/<Name>.txt``. The files are generated (see
``estratos.tasks.synthetic``); this module only declares them. Without ``--data-dir`` the
suite is looked for in :data:`SYNTHETIC_ES_DEFAULT_DIR`.
"""

from __future__ import annotations

from pathlib import Path

from estratos.tasks.registry import SuiteInfo, register, register_suite
from estratos.tasks.suites.common import WORD_CONTENT
from estratos.tasks.types import TaskSpec

SUITE = "synthetic-es"
#: where ``estratos tasks build synthetic-es`` writes by default, and where it is read from
SYNTHETIC_ES_DEFAULT_DIR = Path("~/.cache/estratos/synthetic-es").expanduser()

register_suite(SuiteInfo(SUITE, "es", "synthetic Spanish probing tasks (estratos tasks build)",
                         default_dir=SYNTHETIC_ES_DEFAULT_DIR))

#: task name -> classifier overrides (WordContent stays linear, as in SentEval)
TASKS = {
    "Tense": {}, "SubjNumber": {}, "ObjNumber": {}, "Length": {}, "BigramShift": {},
    "CoordinationInversion": {}, "OddManOut": {}, "Depth": {}, "WordContent": WORD_CONTENT,
}

register(*(TaskSpec(suite=SUITE, name=name, group="LPT", language="es", format="probing",
                    combiner="single", protocol="split", metric="accuracy",
                    files={"file": f"{name}.txt"}, classifier=classifier,
                    description=f"synthetic Spanish probing task {name}")
           for name, classifier in TASKS.items()))
