"""The control task on real data: a slice of TASS1 encoded with the real MiniLM-L6.

What Hewitt & Liang's control tasks are for: a more expressive probe memorises more of a
task whose labels are a random function of the words, so its control accuracy rises; with
shuffled labels it could not (they cap any probe at the majority rate)."""

from __future__ import annotations

import numpy as np
import pytest

from test_probe_realdata import SliceLoader, encoded_tass_slice

pytestmark = [pytest.mark.realdata, pytest.mark.slow]


@pytest.fixture(scope="module")
def tass(es_data_dir, minilm_dir, tmp_path_factory):
    task, cache, _ = encoded_tass_slice(es_data_dir, minilm_dir, tmp_path_factory,
                                        {"train": 1500, "dev": 300, "test": 500})
    return task, cache


def test_an_mlp_reaches_a_higher_control_task_accuracy_than_a_linear_probe(tass, tmp_path):
    from estratos.probe.estimators.classifiers import SentEvalClassifier
    from estratos.probe.grid.runner import run_probe

    task, cache = tass
    scores = {}
    for nhid in (0, 256):
        kw = dict(loader=SliceLoader(task), layers="6", pooling="mean", seeds=(1, 2, 3),
                  classifier=SentEvalClassifier(nhid=nhid), features="standardized",
                  threads=1)
        out = tmp_path / f"r{nhid}.jsonl"
        control = run_probe(cache, [task.spec], None, out, control="control-task", **kw)
        scores[nhid] = np.mean([r.score for r in control])
        assert all(r.control["kind"] == "control-task" for r in control)
    majority = control[0].chance["majority"]
    assert scores[256] > scores[0] > majority - 5, (scores, majority)
