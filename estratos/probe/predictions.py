"""What the predictions store keeps of a protocol's outcome (probe and baseline alike).

Why a module of its own: the probe runner and the TF-IDF baseline both hand their outcomes'
per-example predictions to :func:`estratos.results.predictions.write_predictions`; this is
the one place that pairs them with the gold labels of the split(s) they predict. Torch-free,
so the baseline does not load torch for it.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from estratos.protocols import CellOutcome
from estratos.results.predictions import CellPredictions
from estratos.tasks.types import TaskData


def outcome_predictions(task: TaskData, outcome: CellOutcome) -> Optional[CellPredictions]:
    """The outcome's per-example predictions with the gold labels of the split(s) they
    predict, in that order (None when the protocol gave none)."""
    if outcome.predictions is None or not outcome.predicted:
        return None
    golds = [(name, np.asarray(task.splits[name].labels)) for name in outcome.predicted]
    return CellPredictions.from_splits(outcome.predictions, golds, outcome.folds,
                                       outcome.positive)
