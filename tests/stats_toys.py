"""Hand-made results with per-example predictions, for the statistics tests (no tests here)."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from estratos.results import ResultRecord, ResultsStore, read_results
from estratos.results.predictions import (CellPredictions, PredictionsReader, check_metric,
                                          sample_of, write_predictions)
from estratos.stats import metric_value

#: accuracy (%) each layer is built to reach on the toy classification task
ACCURACY = {0: 55.0, 1: 70.0, 2: 71.0, "avg": 69.0, **{i: 60.0 for i in range(3, 8)}}
#: noise of each layer's STS scores (less noise, higher Pearson)
STS_NOISE = {0: 2.0, 1: 0.6, 2: 0.5, "avg": 0.7}


def _code(value) -> int:
    """A stable small integer of a value (``hash`` of a str changes between processes)."""
    return zlib.crc32(str(value).encode()) % 1000


def _labels(rng: np.random.Generator, gold: np.ndarray, accuracy: float, n_classes: int
            ) -> np.ndarray:
    wrong = rng.permutation(len(gold))[:int(round(len(gold) * (1 - accuracy / 100)))]
    pred = gold.copy()
    pred[wrong] = (gold[wrong] + 1 + rng.integers(0, n_classes - 1, len(wrong))) % n_classes
    return pred


def classification_cell(layer, seed: int, *, n: int = 400, n_classes: int = 3,
                        task: str = "toy:A", protocol: str = "split", folds: int = 0,
                        model: str = "org/mini", accuracy: Optional[Mapping] = None,
                        gold_seed: int = 7):
    """(record, predictions) of a classification cell whose accuracy is ACCURACY[layer]
    (+ a little seed noise); ``folds`` > 0 makes it an inner-kfold cell."""
    gold = np.random.default_rng(gold_seed).integers(0, n_classes, n)
    rng = np.random.default_rng([seed, _code(layer), _code(model)])
    target = (accuracy or ACCURACY)[layer] + rng.normal(0, 0.5)
    pred = _labels(rng, gold, target, n_classes)
    strata = np.arange(n) % folds if folds else None
    preds = CellPredictions(pred, gold, strata, tuple(str(i) for i in range(folds)))
    value = round(metric_value("accuracy", pred, gold, strata=strata), 2)
    suite, name = task.split(":")
    record = ResultRecord(kind="probe", task=task, suite=suite, name=name, group="SC",
                          language="es", layer=layer, pooling="mean", seed=seed,
                          protocol=protocol, classifier={"name": "senteval"},
                          metric="accuracy", score=value, test={"accuracy": value},
                          model=model, revision="r1", created="2026-11-23T09:00:00Z")
    return record, preds


def sts_cell(layer, seed: int, *, task: str = "toy:STS", model: str = "org/mini",
             sizes: Sequence[int] = (120, 80)):
    """(record, predictions) of an STS cell: two subsets, size-weighted Pearson."""
    rng = np.random.default_rng(11)
    gold = np.round(rng.uniform(0, 5, sum(sizes)), 1)
    noise = np.random.default_rng([seed, _code(layer), _code(model)])
    pred = gold + noise.normal(0, STS_NOISE[layer], len(gold))
    strata = np.repeat(np.arange(len(sizes)), sizes)
    preds = CellPredictions(pred, gold, strata, tuple(f"sub{i}" for i in range(len(sizes))),
                            weighting="size")
    pearson = metric_value("pearson", pred, gold, strata=strata, weighting="size") / 100
    spearman = metric_value("spearman", pred, gold, strata=strata, weighting="size") / 100
    suite, name = task.split(":")
    record = ResultRecord(kind="probe", task=task, suite=suite, name=name, group="SS",
                          language="es", layer=layer, pooling="mean", seed=seed,
                          protocol="cosine", classifier={"name": "senteval"},
                          metric="pearson", score=round(100 * pearson, 2),
                          test={"pearson": pearson, "spearman": spearman},
                          model=model, revision="r1", created="2026-11-23T09:00:00Z")
    return record, preds


def write_cells(results: Path, cells: Iterable, *, predictions: bool = True
                ) -> List[ResultRecord]:
    """Append cells to ``results`` the way the probe does (predictions first, with CIs)."""
    cells = list(cells)
    records = [r for r, _ in cells]
    if predictions:
        records = write_predictions(results, records, [p for _, p in cells])
    return ResultsStore(results).append(records)


def toy_run(results: Path, *, layers=(0, 1, 2, "avg"), seeds=(1111, 2),
            model: str = "org/mini", sts: bool = True, **kwargs) -> List[ResultRecord]:
    """A toy classification task (and an STS task) at every layer and seed."""
    cells = [classification_cell(layer, seed, model=model, **kwargs)
             for layer in layers for seed in seeds]
    if sts:
        cells += [sts_cell(layer, seed, model=model) for layer in layers for seed in seeds]
    return write_cells(results, cells)


def reproduced(path) -> List[ResultRecord]:
    """The results lines of ``path``, each checked against its stored predictions: the
    primary score and the extra metrics recomputed, the score inside its ``ci``."""
    reader = PredictionsReader()
    records = read_results(path)
    for record in records:
        found = reader.find(record, path)
        assert found.problem is None, (record.key, found.problem)
        assert abs(check_metric(record, found.preds) - record.score) <= 0.011, record.key
        for extra in ("f1", "spearman"):
            if extra in (record.test or {}) and extra != record.metric:
                value = sample_of(record, found.preds, extra).value()
                scale = 1.0 if extra == "f1" else 100.0
                assert abs(value - scale * record.test[extra]) <= 0.011, (record.key, extra)
        assert record.ci["lo"] <= record.score <= record.ci["hi"]
    return records


def by_layer(records: Iterable[ResultRecord]) -> Dict:
    out: Dict = {}
    for r in records:
        out.setdefault((r.task, r.layer), []).append(r)
    return out
