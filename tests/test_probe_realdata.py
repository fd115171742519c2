"""Real data, real model: a small slice of TASS1 encoded with MiniLM-L6, probed batched and
one cell at a time (same seed -> the same numbers), and the CLI on the real task ids."""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner

from estratos.tasks.types import TaskData

pytestmark = [pytest.mark.realdata, pytest.mark.slow]


def _slice(task: TaskData, sizes) -> TaskData:
    """The first rows of each split, keeping only the sentences they use."""
    splits = {name: task.splits[name].take(np.arange(n)) for name, n in sizes.items()}
    used = sorted({int(i) for s in splits.values() for refs in s.slots for i in refs.indices})
    remap = {old: new for new, old in enumerate(used)}
    from estratos.tasks.types import SlotRefs, Split

    new_splits = {}
    for name, s in splits.items():
        slots = tuple(SlotRefs.single([remap[int(i)] for i in refs.indices]) for refs in s.slots)
        new_splits[name] = Split(name, slots, s.labels)
    return TaskData(task.spec, tuple(task.sentences[i] for i in used), new_splits,
                    task.labels, task.protocol, task.fallback)


class SliceLoader:
    def __init__(self, task):
        self.task = task

    def __call__(self, spec, data_dirs):
        return self.task


def encoded_tass_slice(es_data_dir, minilm_dir, tmp_path_factory, sizes):
    """(TASS1's first ``sizes`` rows per split, their MiniLM cache, the data folders)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from estratos.encode import encode_sentences
    from estratos.tasks import DataDirs, get_spec, load_task

    dirs = DataDirs.parse([str(es_data_dir)])
    task = _slice(load_task(get_spec("es-senteval:TASS1"), dirs), sizes)
    cache = tmp_path_factory.mktemp("real") / "minilm.h5"
    encode_sentences(task.sentences, str(minilm_dir), cache, device="cpu", progress=False)
    return task, cache, dirs


@pytest.fixture(scope="module")
def tass_slice(es_data_dir, minilm_dir, tmp_path_factory):
    return encoded_tass_slice(es_data_dir, minilm_dir, tmp_path_factory,
                              {"train": 300, "dev": 100, "test": 100})


def test_batched_equals_sequential_on_real_tass1(tass_slice, tmp_path):
    from estratos.probe.config import ProbeConfig
    from estratos.probe.grid.runner import run_probe

    task, cache, dirs = tass_slice
    kw = dict(layers="0,3,6,avg", seeds=(1111,), threads=1)
    loader = SliceLoader(task)
    batched = run_probe(cache, [task.spec], dirs, tmp_path / "b.jsonl", ProbeConfig.build(**kw),
                        loader=loader)
    again = run_probe(cache, [task.spec], dirs, tmp_path / "b2.jsonl", ProbeConfig.build(**kw),
                      loader=loader)
    alone = run_probe(cache, [task.spec], dirs, tmp_path / "s.jsonl",
                      ProbeConfig.build(sequential=True, **kw), loader=loader)

    def pick(rs):
        return [(r.layer, r.l2, r.dev, r.test, r.epochs) for r in rs]

    assert pick(batched) == pick(again)
    # each model follows the trajectory it has alone: identical numbers, not just close ones
    assert pick(batched) == pick(alone)
    assert all(r.model and r.revision for r in batched)
    assert [r.layer for r in batched] == [0, 3, 6, "avg"]


def test_cli_probe_on_real_task_ids(tass_slice, tmp_path):
    from estratos.cli import cli

    _, cache, dirs = tass_slice
    data = str(dirs.for_suite("es-senteval"))
    res = CliRunner().invoke(cli, ["probe", "--cache", str(cache), "--tasks",
                                   "es-senteval:TASS1", "--data-dir", data,
                                   "--out", str(tmp_path / "r.jsonl")])
    # the full TASS1 is not in this small cache: a clear error naming the encode command
    assert res.exit_code == 1, res.output
    assert "not in the cache" in res.output
    assert f"--tasks es-senteval:TASS1 --data-dir {data} --out {cache}" in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "r.jsonl").exists()
