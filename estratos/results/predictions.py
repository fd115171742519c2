"""Per-example test predictions, stored beside each results file.

Why: a confidence interval, a significance test between two layers or two models, or any
metric not in the results line needs every test example's prediction, not one number. The
JSON lines stay small; the predictions go to one HDF5 file per results file, named after it
(``run.jsonl`` -> ``run.predictions.h5``, a shard ``run.shard-1-of-4.jsonl`` ->
``run.shard-1-of-4.predictions.h5``), so a result needs nothing beyond its cell identity
(:attr:`ResultRecord.key`) to find its predictions.

Layout (version 1)::

    /                 attrs: format = "estratos-predictions", version = 1
    /tests/<digest>   group per distinct test set: gold (n,), strata (n,) when present;
                      attrs: strata_names (JSON list), weighting ("equal" | "size")
    /cells/<id>       group per cell (id: sha1 of the JSON cell key): predicted (n,);
                      attrs: key (JSON), test (its digest), created, score (NaN: undefined),
                      metric, protocol, positive (-1: none)

``predicted`` holds labels (int) for classification and scores (float64) for STS cosines and
SICK-R, in the test split's order (``inner-kfold``: the pool's order, each example predicted
by the model of its outer fold, ``strata`` = that fold; STS: subsets one after the other,
``strata`` = the subset).

Concurrency and crashes: like the results file, many processes may write. Each write holds
the results file's ``flock`` (the results file is never replaced, so its lock is stable),
copies the predictions file to a temporary file beside it, adds the cells there and renames
it over the old one: readers and a killed writer only ever see a complete file. The probe
writes predictions *before* appending the results lines, so every result line has its
predictions; a cell whose line never got written is redone on resume and replaced. A cell
is matched to its results line by key, ``created`` and ``score``; a mismatch (two runs
racing on one cell with ``--overwrite``) is reported, never used.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from estratos.atomic import create_beside
from estratos.errors import ResultsError
from estratos.results.record import CellKey, ResultRecord
from estratos.stats import DEFAULT_LEVEL, DEFAULT_RESAMPLES, DEFAULT_SEED, Sample, bootstrap_ci

log = logging.getLogger(__name__)

FORMAT = "estratos-predictions"
VERSION = 1
SUFFIX = ".predictions.h5"
PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class CellPredictions:
    """One cell's per-example test predictions (what the probe hands the store).

    ``predicted``/``gold``: ``(n,)`` in the test split's order; ``strata`` ``(n,)`` ints mark
    the outer fold (``inner-kfold``) or STS subset of each example, named by
    ``strata_names``, and combine by ``weighting``: ``"equal"`` (the mean of the folds'
    metrics) or ``"size"`` (STS: the size-weighted mean of the subsets'); ``positive`` is
    F1's positive class (binary tasks reporting F1).
    """

    predicted: np.ndarray
    gold: np.ndarray
    strata: Optional[np.ndarray] = None
    strata_names: Tuple[str, ...] = ()
    positive: Optional[int] = None
    weighting: str = "equal"

    def __post_init__(self) -> None:
        pred, gold = np.asarray(self.predicted), np.asarray(self.gold)
        if pred.ndim != 1 or pred.shape != gold.shape:
            raise ValueError(f"predictions {pred.shape} and gold {gold.shape} must be two "
                             "vectors of the same length")
        if self.strata is not None and np.shape(self.strata) != gold.shape:
            raise ValueError("strata must give one stratum per test example")
        if self.weighting not in ("equal", "size"):
            raise ValueError(f"unknown weighting {self.weighting!r}")
        object.__setattr__(self, "predicted", pred)
        object.__setattr__(self, "gold", gold)

    @classmethod
    def from_splits(cls, predicted: np.ndarray, golds: Sequence[Tuple[str, np.ndarray]],
                    folds: Optional[np.ndarray] = None, positive: Optional[int] = None
                    ) -> "CellPredictions":
        """Predictions over the named splits ``golds`` (name, gold labels), concatenated in
        that order: several splits (STS subsets) become strata named after them, weighted by
        size; ``folds`` (``inner-kfold``: the outer fold of each example) become strata
        otherwise, weighted equally (the protocols' ways of combining them)."""
        names = tuple(name for name, _ in golds)
        gold = np.concatenate([np.asarray(g) for _, g in golds])
        weighting = "equal"
        if folds is not None:
            strata = np.asarray(folds)
            names = tuple(str(f) for f in np.unique(strata))
        elif len(golds) > 1:
            strata = np.repeat(np.arange(len(golds)), [len(g) for _, g in golds])
            weighting = "size"
        else:
            strata, names = None, ()
        return cls(np.asarray(predicted), gold, strata, names, positive, weighting)

    @property
    def n(self) -> int:
        return int(self.gold.shape[0])

    def test_digest(self) -> str:
        """Identity of the test set as these predictions see it (gold, strata, names)."""
        h = hashlib.sha256()
        gold = self.gold
        gold = gold.astype(np.float64) if gold.dtype.kind == "f" else gold.astype(np.int64)
        h.update(gold.dtype.str.encode() + gold.tobytes())
        if self.strata is not None:
            h.update(b"strata" + np.asarray(self.strata, dtype=np.int64).tobytes())
        h.update(json.dumps([list(self.strata_names), self.weighting]).encode())
        return h.hexdigest()[:32]


def predictions_path(results_path: PathLike) -> Path:
    """The predictions file of a results file: ``run.jsonl`` -> ``run.predictions.h5``."""
    p = Path(results_path)
    stem = p.name[:-len(p.suffix)] if p.suffix else p.name
    return p.with_name(stem + SUFFIX)


def cell_id(key: CellKey) -> str:
    """The group name of a cell: sha1 of its JSON key (keys hold '/' in model paths)."""
    return hashlib.sha1(json.dumps(list(key)).encode("utf-8")).hexdigest()


def sample_of(record: ResultRecord, preds: CellPredictions, metric: Optional[str] = None,
              seeds: Optional[Sequence[CellPredictions]] = None) -> Sample:
    """The :class:`~estratos.stats.Sample` of a cell (or of several seeds of one cell,
    ``seeds``) for ``metric`` (default: the record's primary metric)."""
    rows = [p.predicted for p in (seeds or [preds])]
    return Sample(metric or record.metric, np.stack(rows), preds.gold, preds.strata,
                  preds.weighting, preds.positive)


def interval_of(record: ResultRecord, preds: CellPredictions, *,
                resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL,
                seed: int = DEFAULT_SEED) -> Optional[Dict[str, Any]]:
    """The ``ci`` object of a record from its predictions (None for metrics we cannot
    recompute)."""
    try:
        sample = sample_of(record, preds)
    except ValueError:
        return None
    return bootstrap_ci(sample, resamples=resamples, level=level, seed=seed).to_json()


# --------------------------------------------------------------------------- writing

def _read_all_cells(h5: Any) -> Dict[str, Any]:
    return dict(h5["cells"]) if "cells" in h5 else {}


def _open_error(path: Path, exc: Exception) -> ResultsError:
    return ResultsError(f"{path}: not a readable estratos predictions file ({exc}); move it "
                        "away to write new predictions (the results lines are unaffected)")


def _write_cell(h5: Any, record: ResultRecord, preds: CellPredictions) -> None:
    digest = preds.test_digest()
    tests = h5.require_group("tests")
    if digest not in tests:
        t = tests.create_group(digest)
        gold = preds.gold
        t.create_dataset("gold", data=gold.astype(np.float64) if gold.dtype.kind == "f"
                         else gold.astype(np.int64))
        if preds.strata is not None:
            t.create_dataset("strata", data=np.asarray(preds.strata, dtype=np.int32))
        t.attrs["strata_names"] = json.dumps(list(preds.strata_names))
        t.attrs["weighting"] = preds.weighting
    cells = h5.require_group("cells")
    name = cell_id(record.key)
    if name in cells:
        del cells[name]  # --overwrite, or a cell redone after a kill
    g = cells.create_group(name)
    pred = preds.predicted
    g.create_dataset("predicted", data=pred.astype(np.float64) if pred.dtype.kind == "f"
                     else pred.astype(np.int32))
    g.attrs["key"] = json.dumps(list(record.key))
    g.attrs["test"] = digest
    g.attrs["created"] = record.created or ""
    g.attrs["score"] = np.nan if record.score is None else float(record.score)
    g.attrs["metric"] = record.metric
    g.attrs["protocol"] = record.protocol or ""
    g.attrs["positive"] = -1 if preds.positive is None else int(preds.positive)


def write_predictions(results_path: PathLike, records: Sequence[ResultRecord],
                      predictions: Sequence[Optional[CellPredictions]], *,
                      with_ci: bool = True) -> List[ResultRecord]:
    """Store the predictions of ``records`` beside ``results_path``; returns the records,
    each with its bootstrap ``ci`` when ``with_ci`` (call before appending the records).

    ``predictions[i]`` belongs to ``records[i]``; None (a cell without predictions) is
    skipped. The write is atomic and holds the results file's lock (module docstring).
    """
    if len(records) != len(predictions):
        raise ValueError(f"{len(records)} records but {len(predictions)} predictions")
    pairs = [(r, p) for r, p in zip(records, predictions) if p is not None]
    if not pairs:
        return list(records)
    out = []
    by_key = {}
    for r, p in zip(records, predictions):
        if p is not None and with_ci:
            ci = interval_of(r, p)
            r = r.replace(ci=ci) if ci is not None else r
        out.append(r)
        by_key[r.key] = r
    import h5py

    results = Path(results_path)
    target = predictions_path(results)
    try:
        results.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(results, os.O_RDWR | os.O_CREAT, 0o666)  # as the results store does
    except OSError as exc:
        raise ResultsError(f"{results}: cannot open results file to lock it ({exc.strerror})"
                           ) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fd, tmp = create_beside(target)
        try:
            with os.fdopen(fd, "wb") as fh:
                if target.exists():
                    with open(target, "rb") as src:
                        shutil.copyfileobj(src, fh)
            try:
                h5 = h5py.File(tmp, "a", locking=False)
            except OSError as exc:
                raise _open_error(target, exc) from None
            with h5:
                if h5.attrs.get("format", FORMAT) != FORMAT:
                    raise _open_error(target, ValueError("another HDF5 file"))
                h5.attrs["format"] = FORMAT
                h5.attrs["version"] = VERSION
                for r, p in pairs:
                    _write_cell(h5, by_key[r.key], p)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    finally:
        os.close(lock)
    log.debug("%s: stored predictions of %d cell(s)", target, len(pairs))
    return out


# --------------------------------------------------------------------------- reading

@dataclass(frozen=True)
class Found:
    """Predictions looked up for a record: ``preds`` or, when unusable, ``problem``."""

    preds: Optional[CellPredictions]
    problem: Optional[str] = None


class PredictionsReader:
    """Reads the predictions files of results files (each opened once, read whole)."""

    def __init__(self) -> None:
        self._files: Dict[str, Optional[Dict[str, Tuple[Dict[str, Any], CellPredictions]]]] = {}
        self._problems: Dict[str, str] = {}

    def _load(self, results_path: str) -> Optional[Dict[str, Tuple[Dict[str, Any],
                                                                CellPredictions]]]:
        if results_path in self._files:
            return self._files[results_path]
        import h5py

        target = predictions_path(results_path)
        cells: Optional[Dict[str, Tuple[Dict[str, Any], CellPredictions]]] = None
        if not target.exists():
            self._problems[results_path] = f"no predictions file {target}"
        else:
            try:
                with h5py.File(target, "r", locking=False) as h5:
                    if h5.attrs.get("format") != FORMAT:
                        raise ValueError("not an estratos predictions file")
                    if int(h5.attrs.get("version", 0)) != VERSION:
                        raise ValueError(f"predictions format version "
                                         f"{h5.attrs.get('version')} (this estratos reads "
                                         f"{VERSION})")
                    tests = {}
                    for digest, t in (h5["tests"].items() if "tests" in h5 else ()):
                        tests[digest] = (t["gold"][()], t["strata"][()] if "strata" in t
                                         else None, tuple(json.loads(t.attrs["strata_names"])),
                                         str(t.attrs["weighting"]))
                    cells = {}
                    for name, g in _read_all_cells(h5).items():
                        attrs = {k: (v.decode() if isinstance(v, bytes) else v)
                                 for k, v in g.attrs.items()}
                        gold, strata, names, weighting = tests[attrs["test"]]
                        positive = int(attrs["positive"])
                        cells[name] = (attrs, CellPredictions(
                            g["predicted"][()], gold, strata, names,
                            None if positive < 0 else positive, weighting))
            except (OSError, ValueError, KeyError) as exc:
                raise _open_error(target, exc) from None
        self._files[results_path] = cells
        return cells

    def find(self, record: ResultRecord, results_path: PathLike) -> Found:
        """The predictions of ``record`` (read from ``results_path``'s predictions file)."""
        cells = self._load(os.fspath(results_path))
        if cells is None:
            return Found(None, self._problems[os.fspath(results_path)])
        entry = cells.get(cell_id(record.key))
        if entry is None:
            return Found(None, f"no predictions for this cell in "
                               f"{predictions_path(results_path)}")
        attrs, preds = entry
        stored = float(attrs["score"])
        same_score = (record.score is None and math.isnan(stored)) or (
            record.score is not None and not math.isnan(stored)
            and abs(stored - record.score) < 1e-9)
        if attrs["created"] != (record.created or "") or not same_score:
            return Found(None, f"the predictions in {predictions_path(results_path)} belong "
                               "to another run of this cell (rerun it with --overwrite)")
        return Found(preds)


def read_predictions(results_path: PathLike, records: Iterable[ResultRecord]
                     ) -> Dict[CellKey, Found]:
    """The predictions of each record of one results file, by cell key."""
    reader = PredictionsReader()
    return {r.key: reader.find(r, results_path) for r in records}


def describe_test_set(preds: CellPredictions) -> str:
    """A short name of a test set for messages (n examples, digest prefix)."""
    return f"{preds.n} examples, {preds.test_digest()[:8]}"


def check_metric(record: ResultRecord, preds: CellPredictions) -> Optional[float]:
    """The record's primary score recomputed from its predictions (paper's scale)."""
    value = sample_of(record, preds).value()
    return None if not math.isfinite(value) else value


__all__ = ["CellPredictions", "Found", "PredictionsReader", "SUFFIX", "cell_id",
           "check_metric", "interval_of", "predictions_path", "read_predictions",
           "sample_of", "describe_test_set", "write_predictions"]
