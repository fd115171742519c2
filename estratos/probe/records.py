"""A cell's results line and its predictions: built and stored once, for probe and baseline.

Why a module of its own: the probe runner (cached vectors) and the surface baselines evaluate
cells the same way and must write them the same way: the same record fields from a
protocol's :class:`~estratos.protocols.CellOutcome`, the same cell identity
(:class:`estratos.results.record.CellKey`), and predictions stored *before* the results lines
(with each record's ``ci``), so a line never lacks its predictions, paired with the gold
labels of the split(s) they predict (:func:`outcome_predictions`), and one rule for a
one-class cell (:func:`degenerate`). What differs between them is only what produced the
cells, a :class:`CellSource`. Torch-free, so the baseline does not load torch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from estratos import __version__
from estratos.protocols import CellOutcome, get_protocol
from estratos.protocols.information import information_of
from estratos.results import ResultRecord, ResultsStore, primary_score
from estratos.results.predictions import (
    MAX_TEXT,
    SLOT_SEPARATOR,
    CellPredictions,
    write_predictions,
)
from estratos.results.provenance import cell_encoding
from estratos.results.record import CellKey, Layer
from estratos.tasks.types import TaskData
from estratos.vocab import ONE_CLASS_SHARE, utc_now

#: the cache identity fields a probe's results line records (``cache``)
CACHE_FIELDS = ("path", "dtype", "max_length", "n_states", "dim", "tokenizer")


@dataclass(frozen=True)
class CellSource:
    """What produced a run's cells: ``kind`` (``"probe"`` or ``"baseline"``), the model and
    revision that identify it, the cache's identity (None: the baseline reads no cache), the
    device the probes ran on (None: not recorded) and, for a control model's cache (``encode
    --random-init``), the seed of its random weights; ``encoding``: the cache's vector
    settings (:func:`estratos.cache.schema.vector_settings`; None: no cache), what each cell
    records for its layer (:func:`estratos.results.provenance.cell_encoding`)."""

    kind: str
    model: str
    revision: Optional[str]
    cache: Optional[Mapping[str, Any]] = None
    device: Optional[str] = None
    random_init: Optional[int] = None
    prompt: Optional[str] = None
    encoding: Optional[Mapping[str, Any]] = None

    @classmethod
    def of_cache(cls, identity: Mapping[str, Any], device: Optional[str] = None
                 ) -> "CellSource":
        """A probe on a cache: its model and revision, and the cache fields results record
        (``CacheReader.identity()``)."""
        return cls(kind="probe", model=str(identity.get("model") or ""),
                   revision=identity.get("revision"),
                   cache={k: identity.get(k) for k in CACHE_FIELDS}, device=device,
                   random_init=identity.get("random_init"), prompt=identity.get("prompt"),
                   encoding=identity.get("encoding"))

    def key(self, *, task: str, layer: Layer, pooling: Optional[str], seed: int,
            classifier: Optional[str], features: Optional[str] = None,
            control: Optional[str] = None, given: Optional[str] = None,
            erase: Optional[str] = None) -> CellKey:
        """The identity of one of this system's cells (:class:`CellKey` with this system's
        model, revision and prompt; ``classifier``: its name; ``features``: how a probe read
        them; ``control``: the control part of a control cell; ``given``/``erase``: a
        conditional or an erased cell's part)."""
        return CellKey(task=task, layer=layer, pooling=pooling, seed=seed,
                       classifier=classifier, features=features, model=self.model,
                       revision=self.revision, control=control, prompt=self.prompt,
                       given=given, erase=erase)


def outcome_predictions(task: TaskData, outcome: CellOutcome) -> Optional[CellPredictions]:
    """The outcome's per-example predictions with the gold labels of the split(s) they
    predict, in that order (None when the protocol gave none)."""
    if outcome.predictions is None or not outcome.predicted:
        return None
    golds = [(name, np.asarray(task.splits[name].labels)) for name in outcome.predicted]
    texts = None
    if outcome.gold_log2p is not None:  # classification: what a report of examples shows
        texts = [text for name in outcome.predicted
                 for text in task.example_texts(name, SLOT_SEPARATOR, MAX_TEXT)]
    return CellPredictions.from_splits(outcome.predictions, golds, outcome.folds,
                                       outcome.positive, outcome.gold_log2p,
                                       outcome.prior_log2p, texts,
                                       task.labels if texts is not None else (),
                                       outcome.given_log2p)


def degenerate(task: TaskData, outcome: CellOutcome) -> Optional[Dict[str, Any]]:
    """``{"class": LABEL, "share": S}`` when a share S >= :data:`ONE_CLASS_SHARE` of a
    classification cell's test predictions is one class (the probe barely left it, e.g. the
    majority), else None. Why: such a cell's score is (nearly) that class's rate, not
    something the layer encodes; one prediction in 4,906 off the top class is no reading
    either. Reports show it apart and never mark it best (``ResultRecord.degenerate``)."""
    if get_protocol(task.protocol).scores or outcome.predictions is None:
        return None
    predicted = np.asarray(outcome.predictions).astype(np.int64, copy=False).ravel()
    if predicted.size < 2 or predicted.min() < 0:
        return None
    counts = np.bincount(predicted)
    index = int(counts.argmax())
    share = float(counts[index]) / predicted.size
    if share < ONE_CLASS_SHARE:
        return None
    labels = list(task.labels)
    return {"class": str(labels[index]) if 0 <= index < len(labels) else index,
            "share": math.floor(share * 1e4) / 1e4}  # never rounded up to "every one"


def cell_record(task: TaskData, outcome: CellOutcome, system: CellSource, *, layer: Layer,
                pooling: Optional[str], features: Optional[str], seed: int,
                classifier: Mapping[str, Any],
                seconds: float, chance: Optional[Mapping[str, Any]] = None,
                data_digest: Optional[str] = None, **extra: Any) -> ResultRecord:
    """The results line of one cell: ``outcome`` of ``task`` at ``layer``/``pooling``/
    ``seed``, trained by ``classifier`` (its record object) on ``features`` (None: a
    baseline's own), for ``system``. ``chance``:
    the task's chance levels (classification protocols). ``extra``: further optional
    fields of :class:`ResultRecord` (e.g. ``control``). A (nearly) one-class outcome is
    marked ``degenerate`` and an outcome's online code (``extra["mdl"]``) becomes ``mdl``, for
    probe and baseline alike, as its ``extra["conditional"]`` and ``extra["erasure"]`` become
    ``conditional`` and ``erasure``. ``data_digest``: the digest of the data the task was derived
    from (a control task's source task; default: ``task``'s own)."""
    spec = task.spec
    return ResultRecord(
        kind=system.kind, task=spec.id, suite=spec.suite, name=spec.name, group=spec.group,
        language=spec.language, layer=layer, pooling=pooling, features=features,
        seed=int(seed),
        protocol=task.protocol, fallback=task.fallback, classifier=dict(classifier),
        metric=spec.metric, score=primary_score(spec.metric, outcome.test),
        l2=outcome.l2, dev=outcome.dev, test=outcome.test, sizes=dict(task.sizes),
        chance=chance, epochs=outcome.epochs, seconds=round(seconds, 3),
        model=system.model, revision=system.revision, random_init=system.random_init,
        prompt=system.prompt,
        cache=None if system.cache is None else dict(system.cache),
        estratos_version=__version__, created=utc_now(), device=system.device,
        capped=None if outcome.capped is None else {"max_iter": int(outcome.capped)},
        conditional=outcome.extra.get("conditional"), erasure=outcome.extra.get("erasure"),
        mdl=outcome.extra.get("mdl"), information=information_of(outcome),
        degenerate=degenerate(task, outcome),
        data_digest=data_digest or task.digest,
        encoding=cell_encoding(system.encoding, layer), **extra)


def store_cells(out: Union[str, os.PathLike], task: TaskData,
                records: Sequence[ResultRecord], outcomes: Sequence[CellOutcome], *,
                overwrite: bool = False, store: Optional[ResultsStore] = None
                ) -> List[ResultRecord]:
    """Store the cells of one program: their predictions first (each record gains its
    ``ci``), then their results lines; returns the records written (a cell another process
    wrote meanwhile is skipped unless ``overwrite``)."""
    records = write_predictions(out, records,
                                [outcome_predictions(task, o) for o in outcomes])
    return (store or ResultsStore(out)).append(records, skip_done=not overwrite)


__all__ = ["CACHE_FIELDS", "CellSource", "cell_record", "store_cells"]
