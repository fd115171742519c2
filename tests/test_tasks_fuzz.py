"""Arbitrary file contents never escape as anything but InputError (or load cleanly)."""

from __future__ import annotations

import pickle
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estratos.errors import InputError
from estratos.tasks import DataDirs, check_tasks, get_spec, load_task

CELLS = st.sampled_from(["0", "1", "2", "4.5", "hola", "", " ", "\t", "tr", "va", "te",
                         "é\u0301", "\r", "x\ty", "{}", '{"sentence": "a", "label": 1}'])
LINES = st.lists(st.lists(CELLS, min_size=0, max_size=7).map("\t".join), max_size=6)
RAW = st.one_of(LINES.map(lambda rows: "\n".join(rows).encode("utf-8")),
                st.binary(max_size=80))

#: (task id, file the fuzzed bytes go to, other files with valid content)
CASES = [
    ("es-senteval:TASS1", "senteval/TASS/task1/train.txt",
     {"senteval/TASS/task1/dev.txt": "a\t1\n", "senteval/TASS/task1/test.txt": "b\t2\n"}),
    ("es-senteval:SICKRelatedness", "senteval/SICK/SICK_train.txt",
     {f"senteval/SICK/SICK_{n}.txt": "h\th\th\th\th\n1\ta\tb\t3\tNEUTRAL\n"
      for n in ("trial", "test")}),
    ("es-senteval:STS17", "senteval/STS/STS17-es-test/STS.gs.track3.es-es.txt",
     {"senteval/STS/STS17-es-test/STS.input.track3.es-es.txt": "a\tb\nc\td\n"}),
    ("es-senteval:Tense", "senteval/Probing/past_present.txt", {}),
    ("es-senteval:SQC", "senteval/SQC/train.txt", {"senteval/SQC/test.txt": "NUM:x ¿ y ?\n"}),
    ("es-discoeval:BSOwiki", "discoeval/BSO/wiki/train.txt",
     {"discoeval/BSO/wiki/valid.txt": "a\tb\n", "discoeval/BSO/wiki/test.txt": "c\td\n"}),
    ("es-discoeval:RST", "discoeval/RST/RST_TRAIN.pkl",
     {"discoeval/RST/RST_DEV.pkl": pickle.dumps([["r", ["a"], ["b"]]]),
      "discoeval/RST/RST_TEST.pkl": pickle.dumps([["r", ["a"], ["b"]]])}),
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), raw=RAW)
def test_fuzzed_files_load_or_fail_cleanly(case, raw):
    task_id, target, others = case
    root = Path(tempfile.mkdtemp())
    try:
        for rel, content in {**others, target: raw}.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        dirs = DataDirs.parse([str(root)])
        spec = get_spec(task_id)
        try:
            data = load_task(spec, dirs)
        except InputError as exc:
            assert exc.path is not None and str(root) in exc.path
            assert check_tasks([spec], dirs), "check must report what load refuses"
        else:
            assert all(data.sentences)
            assert check_tasks([spec], dirs) == []
    finally:
        shutil.rmtree(root)
