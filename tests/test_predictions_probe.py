"""The probe and the baseline store per-example predictions that reproduce every results
line (all five protocols), with the line's bootstrap interval."""

from __future__ import annotations

import numpy as np
from probe_toys import (
    MemoryLoader,
    single_task,
    spec,
    toy_classification,
    toy_similarity_tasks,
    toy_split_task,
    write_cache,
)
from stats_toys import reproduced as _reproduced

from estratos.probe.config import ProbeConfig
from estratos.probe.grid.runner import run_probe
from estratos.results.predictions import PredictionsReader, predictions_dir


def test_every_protocol_stores_predictions_that_reproduce_the_line(tmp_path):
    sentences, pair_vec, (sts, sick) = toy_similarity_tasks()
    sts_spec, sick_spec = sts.spec, sick.spec
    out = tmp_path / "r.jsonl"
    run_probe(write_cache(tmp_path / "pairs.h5", sentences, pair_vec), [sts_spec, sick_spec],
              None, out, ProbeConfig.build(layers="1,avg", threads=1),
              loader=MemoryLoader({sts_spec.id: sts, sick_spec.id: sick}))

    sentences, vec, y = toy_classification(200, n_states=2, informative=(1,))
    ids = np.arange(200)
    kf_spec = spec("KF", protocol="kfold", classifier={"kfold": 3, "max_epoch": 8},
                   extra_metrics=("f1",))
    kf = single_task(kf_spec, sentences, {"train": (ids[:150], y[:150]),
                                          "test": (ids[150:], y[150:])}, ("0", "1"))
    ik_spec = spec("IK", protocol="inner-kfold", classifier={"kfold": 3, "max_epoch": 4},
                   extra_metrics=("f1",))
    ik = single_task(ik_spec, sentences, {"all": (ids, y)}, ("neg", "pos"))
    split, split_sentences, split_vec = toy_split_task(240, task_spec=spec("SPLIT"))
    single = tmp_path / "single.h5"
    write_cache(single, sentences + [s for s in split_sentences if s not in set(sentences)],
                np.concatenate([vec, split_vec[200:, :2]]))
    run_probe(single, [kf_spec, ik_spec, split.spec], None, out,
              ProbeConfig.build(layers="0,1", threads=1, seeds=(1111, 2)),
              loader=MemoryLoader({kf_spec.id: kf, ik_spec.id: ik, split.spec.id: split}))
    records = _reproduced(out)
    assert {r.task for r in records} == {"toy:STS", "toy:SICKR", "toy:KF", "toy:IK",
                                         "toy:SPLIT"}
    reader = PredictionsReader()
    [ik_line] = [r for r in records if r.task == "toy:IK" and r.layer == 1 and r.seed == 2]
    preds = reader.find(ik_line, out).preds
    assert preds.n == 200 and preds.strata_names == ("0", "1", "2")  # the outer folds
    [sts_line] = [r for r in records if r.task == "toy:STS" and r.layer == 1]
    assert reader.find(sts_line, out).preds.strata_names == ("news", "wiki")


def test_resume_and_overwrite_keep_predictions_matched(tmp_path):
    task, sentences, vec = toy_split_task(240)
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    loader = MemoryLoader({task.spec.id: task})
    out = tmp_path / "r.jsonl"
    config = ProbeConfig.build(layers="0,1", threads=1)
    run_probe(cache, [task.spec], None, out, config, loader=loader)
    folder = predictions_dir(out)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert run_probe(cache, [task.spec], None, out, config, loader=loader) == []
    # nothing redone, nothing rewritten
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    run_probe(cache, [task.spec], None, out,
              ProbeConfig.build(layers="1", threads=1, overwrite=True), loader=loader)
    assert len(_reproduced(out)) == 2


def test_baseline_stores_predictions(tmp_path):
    from estratos.probe.config import BaselineConfig
    from estratos.probe.grid.baselines import run_baseline

    task, _, _ = toy_split_task(120)
    out = tmp_path / "b.jsonl"
    run_baseline([task.spec], None, out, BaselineConfig.build(),
                 loader=MemoryLoader({task.spec.id: task}))
    [record] = _reproduced(out)
    assert record.kind == "baseline" and record.ci["resamples"] == 1000
