"""Evaluation protocols as registered objects (``split``, ``kfold``, ``inner-kfold``,
``relatedness``, ``cosine``).

A task names its protocol (``TaskSpec.protocol``); everything that depends on it asks the
registered :class:`Protocol` instead of comparing names: ``estratos.tasks`` its split handling
(:meth:`Protocol.plan`, ``scores``, ``subset_splits``), the probe and the surface baselines its
evaluation (:meth:`Protocol.evaluate` with an :class:`Inputs`). This package sits below
``tasks/`` (numpy, scipy, scikit-learn and :mod:`estratos.errors` only); see
docs/contracts.md.
"""

from estratos.protocols.base import (
    DEFAULT_KFOLD,
    POOL,
    VALIDATION_SPLIT,
    CellOutcome,
    EstimatorFactory,
    Inputs,
    Protocol,
    SplitPlan,
    all_protocols,
    get_protocol,
    protocol_names,
    register,
    seeds_cannot_differ,
)
from estratos.protocols.classification import inner_kfold_protocol, kfold_protocol, split_protocol
from estratos.protocols.estimators import OneAtATime, group, n_groups, take
from estratos.protocols.folds import INNER_KFOLD_SEED, holdout_split, stratified_folds
from estratos.protocols.metrics import (
    accuracy,
    correlations,
    f1_positive,
    finite_or_none,
    positive_class,
    row_cosine,
)
from estratos.protocols.similarity import (
    cosine_protocol,
    cosine_relatedness,
    relatedness_levels,
    relatedness_protocol,
)

#: registered protocol names (registration order)
PROTOCOLS = protocol_names()

__all__ = [
    "DEFAULT_KFOLD", "INNER_KFOLD_SEED", "POOL", "PROTOCOLS", "VALIDATION_SPLIT", "CellOutcome",
    "EstimatorFactory", "Inputs", "OneAtATime", "Protocol", "SplitPlan", "accuracy",
    "all_protocols", "correlations", "cosine_protocol", "cosine_relatedness", "f1_positive",
    "finite_or_none", "get_protocol", "group", "holdout_split", "inner_kfold_protocol",
    "kfold_protocol", "n_groups", "positive_class", "protocol_names", "register",
    "relatedness_levels", "relatedness_protocol", "row_cosine", "seeds_cannot_differ",
    "split_protocol", "stratified_folds", "take",
]
