"""evaluate_cells / classifier_record / resolve_probe_device: the interface the runner calls."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from estratos.errors import OptionError, TaskError
from estratos.probe.cells import classifier_record, evaluate_cells, resolve_probe_device
from estratos.probe.config import ProbeConfig
from estratos.probe.estimators.runtime import torch_runtime
from estratos.tasks.types import SlotRefs, Split, TaskData

from probe_toys import spec, toy_split_task


def _config(classifier: str = "senteval", **options) -> ProbeConfig:
    """A probe run's configuration on the CPU (what the grid hands evaluate_cells)."""
    return ProbeConfig.build(classifier=classifier, device="cpu", jobs=1, **options)


@pytest.fixture(autouse=True)
def _one_thread():
    with torch_runtime(1):
        yield


def _fast(task):
    """The toy task with a short schedule (the numbers do not matter here, only equality)."""
    import dataclasses
    return dataclasses.replace(task, spec=dataclasses.replace(
        task.spec, classifier={"max_epoch": 8, "l2_grid": [1e-5, 1e-2]}))


def test_outer_list_is_seeds_inner_is_states_and_each_seed_is_its_own_run():
    task, _, vec = toy_split_task(160)
    task = _fast(task)
    both = evaluate_cells(task, vec, [0, 2, "avg"], [1111, 7], _config("senteval"))
    assert [len(row) for row in both] == [3, 3]
    alone = evaluate_cells(task, vec, [2], [7], _config("senteval"))[0][0]
    assert (both[1][1].test, both[1][1].dev, both[1][1].l2, both[1][1].epochs) == \
        (alone.test, alone.dev, alone.l2, alone.epochs)
    np.testing.assert_array_equal(both[1][1].predictions, alone.predictions)
    assert both[0][1].predictions.shape == (len(task.splits["test"]),)


def test_sequential_gives_the_same_cells():
    task, _, vec = toy_split_task(120)
    task = _fast(task)
    a = evaluate_cells(task, vec, [1, "avg"], [3], _config("senteval"))[0]
    b = evaluate_cells(task, vec, [1, "avg"], [3], _config(sequential=True))[0]
    assert [(o.test, o.dev, o.l2, o.epochs) for o in a] == \
        [(o.test, o.dev, o.l2, o.epochs) for o in b]


def _pair_task(protocol: str, score_range=(1, 5)):
    rng = np.random.default_rng(0)
    n = 60
    vec = rng.normal(size=(2 * n, 2, 4)).astype(np.float32)
    gold = rng.uniform(1, 5, size=n)
    refs = lambda rows: (SlotRefs.single(rows), SlotRefs.single(rows + n))  # noqa: E731
    names = ("train", "dev", "test") if protocol == "relatedness" else ("b", "a")
    cuts = np.array_split(np.arange(n), len(names))
    s = spec("P", combiner="pair", protocol=protocol, metric="pearson", group="SS",
             score_range=score_range)
    splits = {name: Split(name, refs(rows), gold[rows]) for name, rows in zip(names, cuts)}
    sentences = tuple(f"s{i}" for i in range(2 * n))
    return TaskData(s, sentences, splits, (), protocol), vec


def test_cosine_cells_are_the_same_for_every_seed_and_record_the_classifier():
    task, vec = _pair_task("cosine")
    out = evaluate_cells(task, vec, [0, 1], [1, 2], _config("senteval"))
    assert out[0][1].test == out[1][1].test and out[0][1].predicted == ("a", "b")
    assert classifier_record(task, "lbfgs")["name"] == "lbfgs"


def test_relatedness_records_its_regressor_under_the_classifier_name():
    task, vec = _pair_task("relatedness")
    rec = classifier_record(task, "lbfgs")
    assert rec == {"name": "lbfgs", "nhid": 0, "optim": "adam", "batch_size": 64,
                   "tenacity": 3, "epoch_size": 50, "max_epoch": 1000, "dropout": 0.0,
                   "l2_grid": [0.0]}


def test_classifier_record_applies_the_task_overrides_and_refuses_bad_ones():
    task, _, _ = toy_split_task(40, task_spec=spec("DC", classifier={"nhid": 20,
                                                                     "l2_grid": "noreg"}))
    assert classifier_record(task, "senteval")["nhid"] == 20
    assert classifier_record(task, "senteval")["l2_grid"] == [1e-9]
    with pytest.raises(OptionError, match="classifier"):
        classifier_record(task, "svm")
    bad, _, _ = toy_split_task(40, task_spec=spec("Bad", classifier={"nhid": -2}))
    with pytest.raises(TaskError, match="toy:Bad"):
        classifier_record(bad, "senteval")


def test_resolve_probe_device(monkeypatch):
    assert resolve_probe_device("cpu") == torch.device("cpu")
    assert resolve_probe_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_probe_device("auto") == torch.device("cpu")
    for text in ("cuda", "cuda:0", "CUDA:1"):
        with pytest.raises(OptionError, match="device.*CUDA is not available"):
            resolve_probe_device(text)
    for text in ("gpu", "cuda:x", ""):
        with pytest.raises(OptionError, match="device"):
            resolve_probe_device(text)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_probe_device("auto") == torch.device("cuda")
    assert resolve_probe_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(OptionError, match="2 CUDA device"):
        resolve_probe_device("cuda:2")


def test_fused_seeds_give_the_cells_of_each_seed_alone(monkeypatch):
    """Where seeds train as one program (on a GPU), the outcome lists are still seeds x
    states and every cell equals its seed run alone (checked here on the CPU)."""
    import estratos.probe.cells as cells

    task, _, vec = toy_split_task(160)
    task = _fast(task)
    alone = evaluate_cells(task, vec, [1, "avg"], [5, 9], _config("senteval"))
    monkeypatch.setattr(cells, "FUSED_SEED_DEVICES", ("cpu",))
    fused = evaluate_cells(task, vec, [1, "avg"], [5, 9], _config("senteval"))
    assert [[(o.test, o.dev, o.l2, o.epochs) for o in row] for row in fused] == \
        [[(o.test, o.dev, o.l2, o.epochs) for o in row] for row in alone]
    for a, b in zip(alone, fused):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.predictions, y.predictions)
    # lbfgs has no tensor program: its seeds run one after the other even there
    lb = evaluate_cells(task, vec, [1], [5, 9], _config("lbfgs"))
    assert len(lb) == 2 and len(lb[0]) == 1
