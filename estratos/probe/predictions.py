"""What the predictions store keeps of a protocol's outcome (probe and baseline alike).

Why a module of its own: the probe runner and the TF-IDF baseline both hand their outcomes'
per-example predictions to :func:`estratos.results.predictions.write_predictions`; this is
the one place that pairs them with the gold labels of the split(s) they predict. Torch-free,
so the baseline does not load torch for it.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import numpy as np

from estratos.protocols import CellOutcome, get_protocol
from estratos.results.predictions import CellPredictions
from estratos.tasks.types import TaskData
from estratos.vocab import ONE_CLASS_SHARE


def outcome_predictions(task: TaskData, outcome: CellOutcome) -> Optional[CellPredictions]:
    """The outcome's per-example predictions with the gold labels of the split(s) they
    predict, in that order (None when the protocol gave none)."""
    if outcome.predictions is None or not outcome.predicted:
        return None
    golds = [(name, np.asarray(task.splits[name].labels)) for name in outcome.predicted]
    return CellPredictions.from_splits(outcome.predictions, golds, outcome.folds,
                                       outcome.positive)


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
