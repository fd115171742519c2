"""Per-example test predictions, stored beside each results file.

Why: a confidence interval, a significance test between two layers or two models, or any
metric not in the results line needs every test example's prediction, not one number. The
JSON lines stay small; the predictions go to a folder named after the results file
(``run.jsonl`` -> ``run.predictions/``, a shard ``run.shard-1-of-4.jsonl`` ->
``run.shard-1-of-4.predictions/``), so a result needs nothing beyond its cell identity
(:attr:`ResultRecord.key`) to find its predictions.

Why a folder of small files: each write (one program's cells) adds new files and never
rewrites an old one, so adding cells costs in proportion to those cells, however large the
grid already is (the single file of earlier versions was copied whole by every write).

Layout: every file is an HDF5 file with root attrs ``format = "estratos-predictions"``,
``version = 2``, holding some of these groups::

    tests-<digest>.h5    /tests/<digest>: gold (n,), strata (n,) when present, texts (n,)
                         when given (each example's sentences, UTF-8); attrs:
                         strata_names (JSON list), weighting ("equal" | "size"),
                         label_names (JSON list) when given.
                         One file per distinct test set, written by the first write using it.
    cells-<NNNNNN>.h5    /cells/<id> per cell of one write (id: sha1 of the JSON cell key):
                         predicted (n,); classification cells also log2p (n,) and
                         prior_log2p (n,), float64: each example's gold-label
                         log2-probability under the probe and under the training
                         labels' class prior; a conditional cell (probe --given) also
                         given_log2p (n,): under the probe on the given features alone;
                         attrs: key (JSON), test (its digest), metric,
                         and when set: created, score, protocol, positive (an unset
                         value is an absent attribute).
                         Numbered in writing order; a later copy of a cell comes after.

Version 1 files are read through one migration (:func:`_migrate_cell`): they stored an
unset ``created``/``protocol`` as ``""``, an undefined score as NaN and no positive class as
-1. Version 1 also had ``run.predictions.h5`` beside the results file (both groups in one
file): it is read, before the folder's files, and never written.

``predicted`` holds labels (int) for classification and scores (float64) for STS cosines and
SICK-R, in the test split's order (``inner-kfold``: the pool's order, each example predicted
by the model of its outer fold, ``strata`` = that fold; STS: subsets one after the other,
``strata`` = the subset).

Concurrency and crashes: like the results file, many processes may write. Each write holds
the results file's ``flock`` (the results file is never replaced, so its lock is stable);
every file is built in memory and written under a hidden temporary name (its space reserved
first, so a full disk is an error before HDF5 or the file sees it), fsynced and renamed (a
new test set's file before the cells that use it), then the folder is fsynced. Readers and a
killed writer only ever see whole files; a killed writer's temporary file is removed by the
next writer (under the lock, so it is nobody's). The probe writes predictions *before*
appending the results lines, so every results line has its predictions; a cell whose line
never got written is redone on resume, its predictions written again in a later file. A cell
is matched to its results line by key, ``created`` and ``score`` (the latest copy that
matches); no match (two runs racing on one cell with ``--overwrite``) is reported, never
used.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from estratos.errors import ResultsError
from estratos.faultpoints import fault_point
from estratos.files import create_beside, fsync_file, fsync_folder, locked, write_all
from estratos.results.record import KeyJson, ResultRecord
from estratos.stats import BOOTSTRAP_SEED, DEFAULT_LEVEL, DEFAULT_RESAMPLES, Sample, bootstrap_cis

log = logging.getLogger(__name__)

FORMAT = "estratos-predictions"
VERSION = 2
#: the oldest format version read (through :func:`_migrate_cell`)
OLDEST_VERSION = 1
#: the predictions folder's name ends so; the single file of version 1, so
FOLDER_SUFFIX = ".predictions"
SUFFIX = ".predictions.h5"
PathLike = Union[str, os.PathLike]


#: between the slots of an example in ``texts`` (a pair's two sentences, a discourse context)
SLOT_SEPARATOR = " ‖ "
#: the longest text kept per example (a long discourse context is cut, ending in "…")
MAX_TEXT = 500


#: the per-example log2-probabilities a classification cell stores beside its predictions
BITS_DATASETS: Tuple[str, ...] = ("log2p", "prior_log2p", "given_log2p")


@dataclass(frozen=True)
class CellPredictions:
    """One cell's per-example test predictions (what the probe hands the store).

    ``predicted``/``gold``: ``(n,)`` in the test split's order; ``strata`` ``(n,)`` ints mark
    the outer fold (``inner-kfold``) or STS subset of each example, named by
    ``strata_names``, and combine by ``weighting``: ``"equal"`` (the mean of the folds'
    metrics) or ``"size"`` (STS: the size-weighted mean of the subsets'); ``positive`` is
    F1's positive class (binary tasks reporting F1). ``log2p``/``prior_log2p`` ``(n,)``
    (classification cells): each example's gold-label log2-probability under the probe and
    under the class prior of its training labels; their difference is the example's
    pointwise V-information (Ethayarajh et al. 2022), its mean the cell's V-information.
    ``texts`` (one string per example: its sentences, slots joined by
    :data:`SLOT_SEPARATOR`) and ``label_names`` (the class names of ``gold``'s ids) let a
    report show the examples themselves; they are stored with the test set, not part of its
    identity. ``given_log2p`` ``(n,)`` (a conditional cell, ``probe --given``): each
    example's gold-label log2-probability under the probe on the given features B alone;
    ``log2p - given_log2p`` is what the layer adds for that example (:attr:`gain`).
    """

    predicted: np.ndarray
    gold: np.ndarray
    strata: Optional[np.ndarray] = None
    strata_names: Tuple[str, ...] = ()
    positive: Optional[int] = None
    weighting: str = "equal"
    log2p: Optional[np.ndarray] = None
    prior_log2p: Optional[np.ndarray] = None
    texts: Optional[Tuple[str, ...]] = None
    label_names: Tuple[str, ...] = ()
    given_log2p: Optional[np.ndarray] = None

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
        if self.texts is not None:
            if len(self.texts) != len(gold):
                raise ValueError("texts must give one text per test example")
            object.__setattr__(self, "texts", tuple(str(t) for t in self.texts))
        object.__setattr__(self, "label_names", tuple(str(n) for n in self.label_names))
        if (self.log2p is None) != (self.prior_log2p is None):
            raise ValueError("log2p and prior_log2p come together")
        if self.given_log2p is not None and self.log2p is None:
            raise ValueError("given_log2p comes with log2p")
        for name in BITS_DATASETS:
            value = getattr(self, name)
            if value is None:
                continue
            value = np.asarray(value, dtype=np.float64)
            if value.shape != gold.shape or not np.isfinite(value).all() or (value > 0).any():
                raise ValueError(f"{name} must give one finite log-probability (<= 0) per "
                                 "test example")
            object.__setattr__(self, name, value)

    @property
    def pvi(self) -> Optional[np.ndarray]:
        """Each example's pointwise V-information in bits, ``log2p - prior_log2p`` (None
        without them)."""
        if self.log2p is None or self.prior_log2p is None:
            return None
        return self.log2p - self.prior_log2p

    @property
    def gain(self) -> Optional[np.ndarray]:
        """A conditional cell's pointwise gain in bits, ``log2p - given_log2p``: what the
        layer adds over the given features for each example (None without them)."""
        if self.log2p is None or self.given_log2p is None:
            return None
        return self.log2p - self.given_log2p

    @classmethod
    def from_splits(cls, predicted: np.ndarray, golds: Sequence[Tuple[str, np.ndarray]],
                    folds: Optional[np.ndarray] = None, positive: Optional[int] = None,
                    log2p: Optional[np.ndarray] = None,
                    prior_log2p: Optional[np.ndarray] = None,
                    texts: Optional[Sequence[str]] = None,
                    label_names: Sequence[str] = (),
                    given_log2p: Optional[np.ndarray] = None) -> "CellPredictions":
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
        return cls(np.asarray(predicted), gold, strata, names, positive, weighting, log2p,
                   prior_log2p, None if texts is None else tuple(texts), tuple(label_names),
                   given_log2p)

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


def _stem(results_path: PathLike) -> Path:
    p = Path(results_path)
    return p.with_name(p.name[:-len(p.suffix)] if p.suffix else p.name)


def predictions_dir(results_path: PathLike) -> Path:
    """The predictions folder of a results file: ``run.jsonl`` -> ``run.predictions/``."""
    stem = _stem(results_path)
    return stem.with_name(stem.name + FOLDER_SUFFIX)


def predictions_path(results_path: PathLike) -> Path:
    """The single predictions file of format version 1 beside a results file
    (``run.jsonl`` -> ``run.predictions.h5``): still read, never written."""
    stem = _stem(results_path)
    return stem.with_name(stem.name + SUFFIX)


def cell_id(key: KeyJson) -> str:
    """The group name of a cell: sha1 of its key's JSON form (keys hold '/' in model paths;
    :attr:`ResultRecord.predictions_key`)."""
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
                seed: int = BOOTSTRAP_SEED) -> Optional[Dict[str, Any]]:
    """The ``ci`` object of a record from its predictions (None for metrics we cannot
    recompute)."""
    return intervals_of([(record, preds)], resamples=resamples, level=level, seed=seed)[0]


def intervals_of(pairs: Sequence[Tuple[ResultRecord, CellPredictions]], *,
                 resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL,
                 seed: int = BOOTSTRAP_SEED) -> List[Optional[Dict[str, Any]]]:
    """:func:`interval_of` of each (record, predictions) pair, with the resamples drawn once
    per test set (:func:`estratos.stats.bootstrap_cis`: the same numbers, faster)."""
    samples: List[Optional[Sample]] = []
    for record, preds in pairs:
        try:
            samples.append(sample_of(record, preds))
        except ValueError:
            samples.append(None)
    known = [s for s in samples if s is not None]
    cis = iter(bootstrap_cis(known, resamples=resamples, level=level, seed=seed))
    return [None if s is None else next(cis).to_json() for s in samples]


# --------------------------------------------------------------------------- writing

def _open_error(path: Path, exc: Exception) -> ResultsError:
    return ResultsError(f"{path}: not a readable estratos predictions file ({exc}); move it "
                        "away to read the other predictions (the results lines are "
                        "unaffected)")


def _tests_name(digest: str) -> str:
    return f"tests-{digest}.h5"


def _cells_name(number: int) -> str:
    return f"cells-{number:06d}.h5"


def _cells_number(name: str) -> Optional[int]:
    """The number of a cells file's name, None for any other name."""
    if name.startswith("cells-") and name.endswith(".h5") and name[6:-3].isdigit():
        return int(name[6:-3])
    return None


def _write_test(h5: Any, digest: str, preds: CellPredictions) -> None:
    t = h5.require_group("tests").create_group(digest)
    gold = preds.gold
    t.create_dataset("gold", data=gold.astype(np.float64) if gold.dtype.kind == "f"
                     else gold.astype(np.int64))
    if preds.strata is not None:
        t.create_dataset("strata", data=np.asarray(preds.strata, dtype=np.int32))
    t.attrs["strata_names"] = json.dumps(list(preds.strata_names))
    t.attrs["weighting"] = preds.weighting
    if preds.texts is not None:
        import h5py

        t.create_dataset("texts", data=list(preds.texts), dtype=h5py.string_dtype("utf-8"))
    if preds.label_names:
        t.attrs["label_names"] = json.dumps(list(preds.label_names))


def _write_cell(h5: Any, record: ResultRecord, preds: CellPredictions) -> None:
    cells = h5.require_group("cells")
    name = cell_id(record.predictions_key)
    if name in cells:
        del cells[name]  # the same cell twice in one write: the last copy is meant
    g = cells.create_group(name)
    pred = preds.predicted
    g.create_dataset("predicted", data=pred.astype(np.float64) if pred.dtype.kind == "f"
                     else pred.astype(np.int32))
    for extra in BITS_DATASETS:
        values = getattr(preds, extra)
        if values is not None:
            g.create_dataset(extra, data=np.asarray(values, dtype=np.float64))
    g.attrs["key"] = json.dumps(list(record.predictions_key))
    g.attrs["test"] = preds.test_digest()
    g.attrs["metric"] = record.metric
    optional = {"created": record.created, "protocol": record.protocol,
                "score": None if record.score is None else float(record.score),
                "positive": None if preds.positive is None else int(preds.positive)}
    for name, value in optional.items():
        if value is not None:  # unset: no attribute
            g.attrs[name] = value


class _Folder:
    """Writes the files of one predictions folder; call only under the results file's lock.

    Finding the next free cells number by listing the folder would cost in proportion to the
    files already there on every write; instead each process remembers the next number it
    expects (:data:`_NEXT`) and steps over the few that other processes took meanwhile.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def make(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ResultsError(f"{self.folder}: exists and is not a folder; move it away to "
                               "store predictions") from None
        except OSError as exc:
            raise ResultsError(f"{self.folder}: cannot create the predictions folder "
                               f"({exc.strerror})") from None

    def _first_number(self) -> int:
        """1 + the highest cells number present; removes what killed writers left (their
        temporary files: every writer holds the lock, so none of them is in use)."""
        highest = 0
        for entry in os.scandir(self.folder):
            if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                os.unlink(entry.path)
                log.info("%s: removed %s, left by a killed writer", self.folder, entry.name)
                continue
            number = _cells_number(entry.name)
            if number is not None:
                highest = max(highest, number)
        return highest + 1

    def _write_file(self, name: str, fill: Callable[[Any], None]) -> None:
        """``name`` written whole or not at all. The HDF5 file is built in memory and its
        bytes written through :func:`estratos.files.write_all` (space reserved first), so a
        full disk is a :class:`DiskFull` before anything is written, never an error inside
        HDF5; then fsync and rename."""
        import h5py

        image = io.BytesIO()
        with h5py.File(image, "w") as h5:
            h5.attrs["format"] = FORMAT
            h5.attrs["version"] = VERSION
            fill(h5)
        target = self.folder / name
        fd, tmp = create_beside(target)
        try:
            try:
                write_all(fd, image.getbuffer(), offset=0, folder=self.folder,
                          what=f"the predictions file {name}")
                fsync_file(fd)
            finally:
                os.close(fd)
            fault_point("predictions-file")
            os.rename(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)

    def write(self, pairs: Sequence[Tuple[ResultRecord, CellPredictions]]) -> Path:
        """The test sets not stored yet, then one new cells file; returns its path."""
        self.make()
        tests: Dict[str, CellPredictions] = {}
        for _, p in pairs:
            tests.setdefault(p.test_digest(), p)
        for digest, p in tests.items():
            if not (self.folder / _tests_name(digest)).exists():
                self._write_file(_tests_name(digest),
                                 functools.partial(_write_test, digest=digest, preds=p))
        key = os.path.realpath(self.folder)
        number = _NEXT.get(key) or self._first_number()
        while (self.folder / _cells_name(number)).exists():
            number += 1

        def fill(h5: Any) -> None:
            for r, p in pairs:
                _write_cell(h5, r, p)

        self._write_file(_cells_name(number), fill)
        _NEXT[key] = number + 1
        fsync_folder(self.folder)
        fault_point("predictions-stored")
        return self.folder / _cells_name(number)


#: per process: the next cells number each predictions folder (by real path) should get
_NEXT: Dict[str, int] = {}


def write_predictions(results_path: PathLike, records: Sequence[ResultRecord],
                      predictions: Sequence[Optional[CellPredictions]], *,
                      with_ci: bool = True) -> List[ResultRecord]:
    """Store the predictions of ``records`` beside ``results_path``; returns the records,
    each with its bootstrap ``ci`` when ``with_ci`` (call before appending the records).

    ``predictions[i]`` belongs to ``records[i]``; None (a cell without predictions) is
    skipped. The write adds files to the predictions folder, each atomically, under the
    results file's lock (module docstring); its cost does not depend on what the folder
    already holds.
    """
    if len(records) != len(predictions):
        raise ValueError(f"{len(records)} records but {len(predictions)} predictions")
    with_preds = [(r, p) for r, p in zip(records, predictions) if p is not None]
    cis = iter(intervals_of(with_preds) if with_ci else [None] * len(with_preds))
    out = []
    pairs = []
    for r, p in zip(records, predictions):
        if p is not None:
            ci = next(cis)
            r = r.replace(ci=ci) if ci is not None else r
            pairs.append((r, p))
        out.append(r)
    if not pairs:
        return out
    results = Path(results_path)
    with locked(results, ResultsError, "the results file to lock it"):
        written = _Folder(predictions_dir(results)).write(pairs)
    log.debug("%s: stored predictions of %d cell(s)", written, len(pairs))
    return out


# --------------------------------------------------------------------------- reading

@dataclass(frozen=True)
class Found:
    """Predictions looked up for a record: ``preds`` or, when unusable, ``problem``."""

    preds: Optional[CellPredictions]
    problem: Optional[str] = None


_Test = Tuple[np.ndarray, Optional[np.ndarray], Tuple[str, ...], str,
              Optional[Tuple[str, ...]], Tuple[str, ...]]
#: a stored copy of a cell: its attributes and predicted values
_Copy = Tuple[Dict[str, Any], np.ndarray, Dict[str, np.ndarray]]


@dataclass
class _Stored:
    """What the predictions beside one results file hold: test sets by digest, and every
    stored copy of each cell (by cell id, oldest first)."""

    tests: Dict[str, _Test]
    cells: Dict[str, List[_Copy]]


def _stored_files(results_path: PathLike) -> List[Path]:
    """The predictions files of a results file, in reading order: the single file of
    version 1, the folder's test sets, then its cells files by number."""
    files = []
    single = predictions_path(results_path)
    if single.exists():
        files.append(single)
    folder = predictions_dir(results_path)
    if folder.is_dir():
        names = [e.name for e in os.scandir(folder) if not e.name.startswith(".")]
        files += [folder / n for n in sorted(n for n in names if n.startswith("tests-")
                                              and n.endswith(".h5"))]
        numbered = sorted((_cells_number(n), n) for n in names
                          if _cells_number(n) is not None)
        files += [folder / n for _, n in numbered]
    elif folder.exists():
        raise ResultsError(f"{folder}: exists and is not a folder; estratos keeps a results "
                           "file's predictions in a folder of that name")
    return files


def _read_file(path: Path, stored: _Stored) -> None:
    import h5py

    try:
        with h5py.File(path, "r", locking=False) as h5:
            if h5.attrs.get("format") != FORMAT:
                raise ValueError("not an estratos predictions file")
            version = int(h5.attrs.get("version", 0))
            if not OLDEST_VERSION <= version <= VERSION:
                raise ValueError(f"predictions format version {version} (this estratos "
                                 f"reads {OLDEST_VERSION} to {VERSION}; a newer one wrote it?)")
            for digest, t in (h5["tests"].items() if "tests" in h5 else ()):
                stored.tests[digest] = (
                    t["gold"][()], t["strata"][()] if "strata" in t else None,
                    tuple(json.loads(t.attrs["strata_names"])), str(t.attrs["weighting"]),
                    tuple(x.decode("utf-8") if isinstance(x, bytes) else str(x)
                          for x in t["texts"][()]) if "texts" in t else None,
                    tuple(json.loads(t.attrs["label_names"])) if "label_names" in t.attrs
                    else ())
            for name, g in (h5["cells"].items() if "cells" in h5 else ()):
                attrs = {k: (v.decode() if isinstance(v, bytes) else v)
                         for k, v in g.attrs.items()}
                bits = {d: g[d][()] for d in BITS_DATASETS if d in g}
                stored.cells.setdefault(name, []).append((_migrate_cell(attrs, version),
                                                          g["predicted"][()], bits))
    except (OSError, ValueError, KeyError) as exc:
        raise _open_error(path, exc) from None


def _migrate_cell(attrs: Dict[str, Any], version: int) -> Dict[str, Any]:
    """A stored cell's attributes as the current version has them (an unset value is an
    absent attribute). Version 1 stored an unset ``created`` or ``protocol`` as ``""``, an
    undefined score as NaN and no positive class as -1."""
    if version == 1:
        attrs = dict(attrs)
        for name in ("created", "protocol"):
            if attrs.get(name) == "":
                del attrs[name]
        if "score" in attrs and math.isnan(float(attrs["score"])):
            del attrs["score"]
        if int(attrs.get("positive", -1)) < 0:
            attrs.pop("positive", None)
    return attrs


def _same_run(attrs: Dict[str, Any], record: ResultRecord) -> bool:
    """Whether a stored copy was written with this results line (``created`` and score)."""
    stored = attrs.get("score")
    same_score = (record.score is None and stored is None) or (
        record.score is not None and stored is not None
        and abs(float(stored) - record.score) < 1e-9)
    return attrs.get("created") == record.created and same_score


class PredictionsReader:
    """Reads the predictions stored beside results files (each file opened once, read
    whole)."""

    def __init__(self) -> None:
        self._stored: Dict[str, Optional[_Stored]] = {}
        self._problems: Dict[str, str] = {}

    def _load(self, results_path: str) -> Optional[_Stored]:
        if results_path in self._stored:
            return self._stored[results_path]
        files = _stored_files(results_path)
        stored: Optional[_Stored] = None
        if not files:
            self._problems[results_path] = (
                f"no predictions file ({predictions_dir(results_path)}/ or "
                f"{predictions_path(results_path)})")
        else:
            stored = _Stored({}, {})
            for path in files:
                _read_file(path, stored)
        self._stored[results_path] = stored
        return stored

    def find(self, record: ResultRecord, results_path: PathLike) -> Found:
        """The predictions of ``record`` (stored beside ``results_path``)."""
        stored = self._load(os.fspath(results_path))
        if stored is None:
            return Found(None, self._problems[os.fspath(results_path)])
        copies = stored.cells.get(cell_id(record.predictions_key))
        if not copies:
            return Found(None, f"no predictions for this cell beside {results_path}")
        for attrs, predicted, bits in reversed(copies):
            if not _same_run(attrs, record):
                continue
            test = stored.tests.get(attrs["test"])
            if test is None:
                return Found(None, f"the test set of this cell's predictions is missing "
                                   f"beside {results_path} ({_tests_name(attrs['test'])})")
            gold, strata, names, weighting, texts, label_names = test
            positive = attrs.get("positive")
            return Found(CellPredictions(predicted, gold, strata, names,
                                         None if positive is None else int(positive),
                                         weighting, bits.get("log2p"),
                                         bits.get("prior_log2p"), texts, label_names,
                                         bits.get("given_log2p")))
        return Found(None, f"the predictions beside {results_path} belong to another run of "
                           "this cell (rerun it with --overwrite)")


def check_metric(record: ResultRecord, preds: CellPredictions) -> Optional[float]:
    """The record's primary score recomputed from its predictions (paper's scale)."""
    value = sample_of(record, preds).value()
    return None if not math.isfinite(value) else value


__all__ = ["CellPredictions", "FOLDER_SUFFIX", "Found", "PredictionsReader", "SUFFIX",
           "cell_id", "check_metric", "interval_of", "intervals_of", "predictions_dir",
           "predictions_path", "sample_of", "write_predictions"]
