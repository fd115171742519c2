"""Placing a grid's tasks on a GPU and the CPU cores at once (``--device auto`` on a GPU
node): the cost model, the placement rule, and a whole run with the CPU standing in for the
accelerator, whose cells must equal a CPU-only run's."""

from __future__ import annotations

import logging

import pytest
from probe_toys import spec, toy_split_task, write_cache

from estratos.probe.config import ProbeConfig
from estratos.probe.estimators.classifiers import SentEvalClassifier
from estratos.probe.grid import placement, runner
from estratos.probe.grid.placement import (
    ACCELERATOR,
    CPU,
    DeviceSpeed,
    place_tasks,
    seconds_on,
    task_work,
)
from estratos.probe.grid.plan import TaskShape
from estratos.probe.grid.runner import run_probe

CPU_SPEED = DeviceSpeed("cpu", 1e-3, 40e9)
GPU_SPEED = DeviceSpeed("cuda", 1.5e-3, 10e12)


def shape(protocol="split", n_classes=2, n_features=384, **sizes):
    return TaskShape("t", protocol, sizes or {"train": 9000, "dev": 1000, "test": 1000},
                     n_classes, n_features)


def test_arithmetic_heavy_tasks_go_to_the_accelerator_and_step_bound_ones_stay():
    small = task_work(shape(n_classes=2), SentEvalClassifier())
    wide = task_work(shape(n_classes=1000), SentEvalClassifier())
    mlp = task_work(shape(n_features=2304), SentEvalClassifier(nhid=2000, dropout=0.2))
    assert seconds_on(small, CPU_SPEED, 8, 1) < seconds_on(small, GPU_SPEED, 8, 1)
    for heavy in (wide, mlp):
        assert seconds_on(heavy, GPU_SPEED, 8, 1) * 10 < seconds_on(heavy, CPU_SPEED, 8, 1)


def test_kfold_folds_and_fused_seeds_share_steps_on_the_accelerator():
    kfold = task_work(shape("kfold", train=6000, test=600), SentEvalClassifier())
    assert kfold.steps_together < kfold.steps_apart / 3  # 10 folds count once, then a refit
    split = task_work(shape(), SentEvalClassifier())
    # three seeds on the same data: one program on the accelerator, three on the CPU
    assert seconds_on(split, GPU_SPEED, 1, 3) < 3 * seconds_on(split, GPU_SPEED, 1, 1)
    cpu_one, cpu_three = seconds_on(split, CPU_SPEED, 1, 1), seconds_on(split, CPU_SPEED, 1, 3)
    assert cpu_three == pytest.approx(3 * cpu_one)


def test_untrained_tasks_cost_nothing_and_stay_on_the_cpu():
    cosine = task_work(shape("cosine"), None)
    assert not cosine.trains and seconds_on(cosine, GPU_SPEED, 8, 3) == 0.0
    assert place_tasks({"sts": (0.0, 0.0, 0.0)}, 4) == {"sts": CPU}


def test_placement_moves_tasks_while_the_run_ends_sooner():
    estimates = {"dc": (800.0, 90.0, 100.0), "wc": (450.0, 7.0, 56.0),
                 "small": (4.0, 8.0, 0.5), "kfold": (60.0, 50.0, 8.0)}
    place = place_tasks(estimates, cpu_lanes=15)
    assert place == {"dc": ACCELERATOR, "wc": ACCELERATOR, "small": CPU, "kfold": CPU}
    # one CPU lane: the k-fold task stays (the CPU ends at 64 s, the accelerator at 97 s;
    # with it, 147 s); a longer one moves (CPU 304 s against the accelerator's 147 s)
    assert place_tasks(estimates, cpu_lanes=1)["kfold"] == CPU
    assert place_tasks({**estimates, "kfold": (300.0, 50.0, 40.0)}, 1)["kfold"] == ACCELERATOR
    # no CPU lane (one process drives both): each task where it is faster
    assert place_tasks(estimates, cpu_lanes=0) == {
        "dc": ACCELERATOR, "wc": ACCELERATOR, "small": CPU, "kfold": ACCELERATOR}
    assert place_tasks(estimates, 15) == place  # the same every time


def test_a_busy_accelerator_leaves_the_next_task_to_the_cpu():
    # both speed up on the accelerator, but two there would end later than one on 4 lanes
    estimates = {"a": (400.0, 100.0, 50.0), "b": (400.0, 100.0, 50.0)}
    place = place_tasks(estimates, cpu_lanes=4)
    assert sorted(place.values()) == [ACCELERATOR, CPU]


def test_speed_is_measured_on_the_real_trainer():
    speed = placement.measure_speed("cpu", repeats=1)
    assert speed.measured and speed.device == "cpu"
    assert 1e-6 < speed.step_seconds < 0.1 and 1e8 < speed.flops < 1e13


def _tasks(tmp_path):
    """Two toy tasks on one cache: one with many classes (arithmetic), one with two."""
    wide_spec = spec("Wide", classifier={"max_epoch": 8})
    small_spec = spec("Small", classifier={"max_epoch": 8})
    wide, sentences, vec = toy_split_task(200, seed=0, task_spec=wide_spec)
    small, _, _ = toy_split_task(200, seed=0, task_spec=small_spec)
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    return cache, [wide_spec, small_spec], ToyLoader()


class ToyLoader:
    """Picklable: the workers load the tasks themselves."""

    def __call__(self, task_spec, data_dirs):
        return toy_split_task(200, seed=0, task_spec=task_spec)[0]


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_a_run_on_both_devices_equals_a_cpu_run(tmp_path, monkeypatch, caplog, jobs):
    """The CPU plays the accelerator (every code path of the placed run but CUDA itself):
    the accelerator's units run in the process that drives it, the others in the workers,
    and every cell equals the CPU-only run's, each recording its device."""
    cache, specs, loader = _tasks(tmp_path)
    kw = dict(layers="0,1,avg", seeds=(1, 2), threads=1, jobs=jobs)
    plain = run_probe(cache, specs, None, tmp_path / "cpu.jsonl",
                      ProbeConfig.build(device="cpu", **kw), loader=loader)

    monkeypatch.setattr(runner, "ACCELERATOR_DEVICES", ("cpu",))
    monkeypatch.setattr(runner, "measure_speed", lambda device, repeats=2: (
        CPU_SPEED if str(device) == "cpu" and not hasattr(device, "type") else GPU_SPEED))
    monkeypatch.setattr(runner, "task_work", lambda shape, est: placement.TaskWork(
        10.0, 10.0, 1e12 if shape.task.endswith("Wide") else 1.0, False, True))
    with caplog.at_level(logging.INFO, logger="estratos"):
        both = run_probe(cache, specs, None, tmp_path / "both.jsonl",
                         ProbeConfig.build(device="auto", **kw), loader=loader)
    placed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("placed")]
    assert any(m.startswith("placed toy:Wide on cpu (") for m in placed), placed
    assert any(m.startswith("placed toy:Small on the CPU workers") for m in placed), placed
    assert both.device == "cpu and cpu"
    key = lambda r: (r.task, str(r.layer), r.seed)  # noqa: E731
    assert sorted(map(key, both)) == sorted(map(key, plain))
    by = {key(r): r for r in plain}
    for r in both:
        p = by[key(r)]
        assert (r.score, r.dev, r.l2, r.epochs, r.test) == (p.score, p.dev, p.l2, p.epochs,
                                                              p.test)
        assert r.device == "cpu"


class PidRunner:
    """A runner that answers each unit with the pid of the process that ran it."""

    def __init__(self, context):
        self.context = context

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def survey(self, payload):
        return None

    def run(self, payload, report):
        import os
        import time

        time.sleep(0.05)
        report((payload, os.getpid()))
        return 0.0


def test_pinned_jobs_run_only_in_the_caller():
    """GPU jobs go to the process that drives the GPU (this one), never to a worker (which
    may still be starting when the first jobs are dealt: which processes take the CPU jobs
    is left open)."""
    import os

    from estratos.probe.grid.pool import Event, make_executor

    ran = {}
    with make_executor(4) as executor:
        executor.start(PidRunner, None)
        jobs = [(Event.UNIT, i, ("gpu" if i < 6 else "cpu", i)) for i in range(30)]

        def on_event(kind, key, value):
            if kind == Event.CELLS:
                ran[value[0][1]] = (value[0][0], value[1])

        executor.run(jobs, on_event, pinned=lambda job: job[2][0] == "gpu")
    assert len(ran) == 30
    assert {pid for kind, pid in ran.values() if kind == "gpu"} == {os.getpid()}
