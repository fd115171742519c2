"""What a protocol is, the registry of protocols, and what evaluating one gives back.

Why a leaf package: a protocol has two sides. Its split handling (which files it needs, which
fallback applies when one is missing, whether labels are classes or scores) is read by
``estratos.tasks`` while loading data; its evaluation (features, training through an estimator
factory, metrics, what a cell records) is run by the probe and by the surface baselines. Both
sides live here, below ``tasks/``, depending only on numpy, scipy (scikit-learn for the folds)
and :mod:`estratos.errors`, so every layer above may import it and no protocol name is
switched on anywhere else.

A protocol never sees vectors or files: evaluation gets an :class:`Inputs` whose callbacks
build the features it asks for, and estimator factories (see
:mod:`estratos.protocols.estimators` for the interface).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type

import numpy as np

from estratos.registry import Registry
from estratos.vocab import (
    DEFAULT_KFOLD,
    DEFAULT_SEED,
    SELECT_ACCURACY,
    VALIDATION_SPLIT,
    Role,
)

#: name of the split a held-out part is cut from while loading
POOL = "pool"

EstimatorFactory = Callable[[], Any]


@dataclass
class CellOutcome:
    """What one feature group (one layer spec) scored under a protocol.

    ``l2``/``dev``/``test``/``epochs``/``extra`` are recorded in results, and ``capped`` (the
    iteration cap of an estimator whose model behind the test predictions stopped at it, e.g.
    L-BFGS's ``max_iter``; None when it converged or has no cap). The rest stays out of
    the JSON: ``predictions`` holds one prediction per example of the ``predicted`` split(s),
    concatenated in that order and in each split's example order (the predicted label index
    for classification, the predicted score for relatedness, the cosine for similarity);
    ``folds`` (``inner-kfold``) the outer fold that tested each example; ``positive`` the
    class whose F1 is reported (None: no F1). ``gold_log2p``/``prior_log2p`` (classification:
    each predicted example's gold-label log2-probability under the probe and under the class
    prior of its training labels, :mod:`estratos.protocols.information`), in the order of
    ``predictions``; ``given_log2p`` (a conditional cell, ``probe --given``): each one's
    gold-label log2-probability under the probe trained on the given features B alone.
    """

    l2: Optional[float]
    dev: Optional[Dict[str, Optional[float]]]
    test: Dict[str, Any]
    epochs: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    predictions: Optional[np.ndarray] = field(default=None, repr=False)
    predicted: Tuple[str, ...] = ()
    folds: Optional[np.ndarray] = field(default=None, repr=False)
    positive: Optional[int] = None
    capped: Optional[int] = None
    gold_log2p: Optional[np.ndarray] = field(default=None, repr=False)
    prior_log2p: Optional[np.ndarray] = field(default=None, repr=False)
    given_log2p: Optional[np.ndarray] = field(default=None, repr=False)


def capped_at(est: Any, index: Tuple[int, ...]) -> Optional[int]:
    """The iteration cap of ``est`` when its model at ``index`` (into ``capped_``) stopped at
    it, else None. Estimators with a cap say which fits reached it in ``capped_`` (same shape
    as ``epochs_``) and the cap in ``max_iter``; others have neither."""
    capped = getattr(est, "capped_", None)
    if capped is None or not bool(np.asarray(capped)[index]):
        return None
    return int(est.max_iter)


@dataclass(frozen=True)
class SplitPlan:
    """How a protocol reads a task, decided from which of its published sources exist.

    ``reads``: (published source, split it is read into); ``splits``: the splits the loaded
    task has; ``holdout_from``: the read split a held-out dev part is cut from (``POOL``);
    ``missing``: published sources whose missing files make the task unusable.
    """

    protocol: str
    reads: Tuple[Tuple[str, str], ...] = ()
    splits: Tuple[str, ...] = ()
    holdout_from: Optional[str] = None
    fallback: Optional[str] = None
    missing: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Inputs:
    """What a protocol evaluates, independent of where features come from.

    ``splits``: the task's split names; ``labels(split)``: class ids (int) or scores (float)
    in example order;
    ``features(split)``: G feature groups of the examples (the combiner's features: an array
    ``(G, n, F)`` or a list of G matrices); ``pairs(split)``: the two slots' vectors of every
    example, ``(u, v)`` each ``(G, n, D)`` or a list of G matrices (similarity protocols);
    ``classifier`` / ``regressor``: estimator factories (``regressor=None``: relatedness scores
    the untrained cosine). ``l2_grid``, ``kfold`` and ``validation_split`` come from the
    estimator's parameters; ``positive`` is the class whose F1 is reported (None: no F1);
    ``score_range`` the task's gold score range (relatedness); ``select`` what a protocol
    that chooses L2 on a dev split chooses it by (:data:`~estratos.vocab.SELECT_ACCURACY`, or
    :data:`~estratos.vocab.SELECT_CROSS_ENTROPY` where :attr:`Protocol.selects_on_dev`).
    """

    labels: Callable[[str], np.ndarray]
    splits: Tuple[str, ...] = ()
    features: Optional[Callable[[str], Any]] = None
    pairs: Optional[Callable[[str], Tuple[Any, Any]]] = None
    classifier: Optional[EstimatorFactory] = None
    regressor: Optional[EstimatorFactory] = None
    seed: int = DEFAULT_SEED
    l2_grid: Sequence[float] = ()
    kfold: int = DEFAULT_KFOLD
    validation_split: float = VALIDATION_SPLIT
    positive: Optional[int] = None
    score_range: Optional[Tuple[float, float]] = None
    select: str = SELECT_ACCURACY

    def feature_source(self) -> Callable[[str], Any]:
        """:attr:`features`, which a protocol that trains on features needs."""
        if self.features is None:
            raise ValueError("this protocol needs Inputs.features")
        return self.features

    def pair_source(self) -> Callable[[str], Tuple[Any, Any]]:
        """:attr:`pairs`, which a protocol that compares the two slots needs."""
        if self.pairs is None:
            raise ValueError("this protocol needs Inputs.pairs")
        return self.pairs

    def classifier_factory(self) -> EstimatorFactory:
        """:attr:`classifier`, which a classification protocol needs."""
        if self.classifier is None:
            raise ValueError("this protocol needs Inputs.classifier")
        return self.classifier


class Protocol:
    """One evaluation protocol (subclasses register an instance under :attr:`name`).

    Class attributes say what the rest of the code may ask without naming protocols:

    - ``scores``: labels are float scores (similarity), not class ids;
    - ``trains``: which estimator it trains: ``Role.CLASSIFIER``, ``Role.REGRESSOR`` or None;
    - ``train_split``: the split a model (or a TF-IDF vocabulary) is fitted on; None: every
      split (nothing is trained);
    - ``subset_splits``: splits are named by the data (one per subset), not by the protocol;
    - ``seeds_share_data``: every seed sees the same examples (only init, order and dropout
      depend on the seed), so seeds may be trained as one batched program;
    - ``scored_split``: the split whose examples a classification protocol's accuracy is
      measured on (None: the protocol reports correlations), e.g. for chance levels;
    - ``selects_on_dev``: it chooses L2 on a dev split of its own, so it can choose it by
      dev cross-entropy (``Inputs.select``) as well as by accuracy.
    """

    name: str = ""
    scores: bool = False
    trains: Optional[Role] = Role.CLASSIFIER
    train_split: Optional[str] = "train"
    subset_splits: bool = False
    seeds_share_data: bool = False
    scored_split: Optional[str] = "test"
    selects_on_dev: bool = False

    def plan(self, published: Sequence[str], present: AbstractSet[str],
             names: Callable[[str], str], holdout: float) -> SplitPlan:
        """Which sources to read (and the fallback) given the ``present`` ones.

        ``names(source)`` gives a source's file names for fallback texts ("none given" when
        the format has no such source); ``holdout`` is the share of a pool held out as dev.
        """
        raise NotImplementedError

    def evaluate(self, inputs: Inputs) -> List[CellOutcome]:
        """One :class:`CellOutcome` per feature group (per estimator group)."""
        raise NotImplementedError

    def examples_trained(self, sizes: Mapping[str, int], grid: int, k: int,
                         folds_together: bool = False) -> float:
        """Training examples one cell's model fits see per pass, summed over every fit the
        protocol makes (``grid`` L2 values, ``k`` folds): what a cost estimate scales with.
        ``folds_together``: the k folds of a cross-validation count once, as when they
        train as one program and share its steps (``fit_folds`` on a GPU). By default one
        model per L2 value on :attr:`train_split`."""
        return float(grid * sizes.get(self.train_split or "train", sum(sizes.values())))

    def code_data(self, inputs: "Inputs") -> Optional[Tuple[Tuple[Any, np.ndarray],
                                                          Tuple[Any, np.ndarray]]]:
        """``((X, y), (X_dev, y_dev))``: the examples a classification cell's probe is
        trained on and the dev examples it early-stops on, for an online (MDL) code of the
        training labels (``estratos.probe.mdl``); None when the protocol trains no
        classifier. Why here: which split plays which part is the protocol's business."""
        return None

    def __repr__(self) -> str:
        return f"<protocol {self.name}>"


#: one instance of each protocol class, in registration order
_REGISTRY: Registry[Protocol] = Registry("protocol")


def register(cls: Type[Protocol]) -> Type[Protocol]:
    """Class decorator: register one instance of ``cls`` under ``cls.name`` (a name taken
    by another protocol is a ``ValueError``)."""
    if cls.name in _REGISTRY:
        raise ValueError(f"protocol {cls.name!r} registered twice")
    _REGISTRY.register(cls.name, cls())
    return cls


def get_protocol(name: str) -> Protocol:
    """The registered protocol ``name``; an unknown one is the registries' lookup error
    (:func:`estratos.registry.unknown_name`: a :class:`~estratos.errors.TaskError` with the
    closest names and every protocol)."""
    return _REGISTRY.get(name)


def seeds_cannot_differ(deterministic: bool, protocol: Optional[str]) -> bool:
    """Whether cells of a classifier under ``protocol`` are the same for every seed: the
    classifier is ``deterministic`` (its fit depends on nothing but its data and parameters)
    and the protocol trains it on data that do not depend on the seed (``split``; k-fold
    protocols draw their folds or held-out parts from it). An unknown protocol (another
    version's) may differ."""
    found = _REGISTRY.find(str(protocol))
    return bool(deterministic and found is not None and found.trains == Role.CLASSIFIER
                and found.seeds_share_data)


def protocol_names() -> Tuple[str, ...]:
    """Registered protocol names, in registration order."""
    return tuple(_REGISTRY)


def all_protocols() -> Mapping[str, Protocol]:
    """Name -> protocol, in registration order."""
    return dict(_REGISTRY.items())
