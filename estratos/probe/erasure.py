"""Concept erasure (``probe --erase CONCEPT``): what a probe still reads once no linear
classifier can recover a concept from the features.

Why: a probe that reads Depth or SubjNumber from a layer may read it through a confound such
as sentence length. LEACE (Belrose et al., NeurIPS 2023; the ``concept-erasure`` package's
``LeaceFitter``) finds the least-squares affine edit of the features after which every
class of the concept has the same mean, so no linear classifier does better than a constant
one on the data it was fitted on; the task is then probed as usual on the edited features.

How it is applied here: per layer spec, to the probe's own input (the task's combined
example features), fitted on the protocol's training split only and applied to every split,
so the eraser sees no dev or test example. The statistics are d x d (``d`` the feature
width), streamed from the training features in float64; nothing is n x n. The covariance's
trace is not constrained (the package's option for edited states fed back into a model,
which mixes in a projection that is not LEACE's and so weakens the guarantee), and only
singular values of the whitened cross-covariance below :data:`SVD_TOLERANCE` are dropped.

Concepts (:data:`estratos.vocab.ERASE_CONCEPTS`):

- ``length``: bins of the example's token count under the model's tokenizer (summed over
  its sentences, from the cache), ``words``: bins of its whitespace word count; the bins are
  :data:`LENGTH_BINS` equal-frequency bins of the training split (their edges recorded);
- ``labels``: the task's own labels, the sanity check: after it the task's probe must fall
  to its majority class;
- ``random:RANK``: the control: a random subspace of that rank, drawn with
  :data:`RANDOM_SEED`, projected out (orthogonally), as much damage of the same rank with no
  concept behind it.

Each erased cell records (``erasure``) the concept, its bins or classes, the eraser's rank,
and a linear probe of the concept itself before and after erasure (scikit-learn's logistic
regression on standardized features, trained on the training split, scored on the scored
split) beside the concept's majority rate there: after LEACE it must be at that rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from estratos.errors import OptionError
from estratos.probe.estimators.scaling import FeatureScale
from estratos.protocols import CellOutcome, get_protocol
from estratos.tasks.types import TaskData
from estratos.text import surface_length
from estratos.vocab import ERASE_LABELS, ERASE_LENGTH, ERASE_RANDOM, ERASE_WORDS

#: equal-frequency bins of the training split a length concept is cut into
LENGTH_BINS = 6
#: whitened cross-covariance singular values at most this are taken as zero (the package's
#: default of 0.01 leaves small correlations that a probe of the concept can still read)
SVD_TOLERANCE = 1e-8
#: the seed of ``random:RANK``'s subspace (one subspace per layer spec and run)
RANDOM_SEED = 1111
#: L2 of the concept's own check probe (scikit-learn's C)
CHECK_C = 1.0
#: the check probe's L-BFGS tolerance and iteration cap: the ``lbfgs`` probe's (1e-3: the
#: precision of an accuracy; scikit-learn's default 1e-4 took 4x longer on Tense's length
#: bins, MiniLM layer 3, for the same accuracy within 0.3 points)
CHECK_TOL = 1e-3
CHECK_MAX_ITER = 1000


@dataclass(frozen=True)
class Concept:
    """What ``--erase`` erases in one task: its name, each split's class per example
    (``labels``; None for a random erasure) and how the classes were made (``bins``: the
    bin edges of a length concept; ``rank``: a random erasure's)."""

    name: str
    labels: Optional[Mapping[str, np.ndarray]]
    bins: Optional[List[float]] = None
    rank: Optional[int] = None


def _example_sums(task: TaskData, per_sentence: np.ndarray, split: str) -> np.ndarray:
    """An example's total over its slots' sentences (a slot of several: their mean)."""
    total = np.zeros(len(task.splits[split]), dtype=np.float64)
    for refs in task.splits[split].slots:
        values = per_sentence[refs.indices].astype(np.float64)
        total += np.add.reduceat(values, refs.offsets[:-1]) / np.diff(refs.offsets)
    return total


def _bins(values: Mapping[str, np.ndarray], train: str, name: str, task: str
          ) -> Concept:
    """Equal-frequency bins of the training split's values, applied to every split; a
    concept with one bin on the training split (every example the same length) is an
    :class:`OptionError` naming ``--erase``."""
    quantiles = np.quantile(values[train], np.linspace(0, 1, LENGTH_BINS + 1)[1:-1])
    edges = sorted({float(q) for q in quantiles})
    labels = {split: np.searchsorted(edges, v, side="right") for split, v in values.items()}
    if len(np.unique(labels[train])) < 2:
        raise OptionError(f"--erase {name}: {task}'s training examples all fall in one "
                          f"{name} bin; there is nothing to erase")
    return Concept(name, labels, bins=edges)


def concept_of(task: TaskData, concept: str, token_counts: Optional[np.ndarray]) -> Concept:
    """The concept ``--erase`` names, for ``task`` (``token_counts``: each sentence's
    token count from the cache, for ``length``)."""
    protocol = get_protocol(task.protocol)
    train = protocol.train_split
    if train is None or train not in task.splits or train == protocol.scored_split:
        raise OptionError(f"--erase: {task.spec.id} has no training split apart from the "
                          "examples it scores (nested k-fold on one pool): the eraser would "
                          "see the test examples")
    kind, _, rank = concept.partition(":")
    if kind == ERASE_RANDOM:
        return Concept(concept, None, rank=int(rank))
    if concept == ERASE_LABELS:
        return Concept(concept, {s: np.asarray(split.labels, dtype=np.int64)
                                 for s, split in task.splits.items()})
    if concept == ERASE_LENGTH:
        if token_counts is None:
            raise ValueError("--erase length needs the cache's token counts")
        per_sentence = np.asarray(token_counts, dtype=np.float64)
    elif concept == ERASE_WORDS:
        per_sentence = np.array([surface_length(s)[0] for s in task.sentences], dtype=np.float64)
    else:
        raise OptionError(f"--erase: unknown concept {concept!r}")
    values = {s: _example_sums(task, per_sentence, s) for s in task.splits}
    return _bins(values, train, concept, task.spec.id)


def fit_leace(X: np.ndarray, z: np.ndarray) -> Any:
    """LEACE's eraser of the classes ``z`` from the rows of ``X`` (float64 statistics);
    returns the package's ``LeaceEraser``."""
    import torch
    from concept_erasure import LeaceFitter

    classes = np.unique(z)
    onehot = (np.asarray(z)[:, None] == classes[None, :]).astype(np.float64)
    fitter = LeaceFitter(X.shape[1], len(classes), dtype=torch.float64,
                         constrain_cov_trace=False, svd_tol=SVD_TOLERANCE)
    step = 4096
    for start in range(0, len(X), step):  # streamed: d x d statistics, never n x n
        fitter.update(torch.from_numpy(np.asarray(X[start:start + step], dtype=np.float64)),
                      torch.from_numpy(onehot[start:start + step]))
    return fitter.eraser


def random_projection(dim: int, rank: int, seed: int = RANDOM_SEED) -> np.ndarray:
    """An orthonormal basis ``(dim, rank)`` of a random subspace (Gaussian draws, QR)."""
    if rank >= dim:
        raise OptionError(f"--erase {ERASE_RANDOM}:{rank}: the features have {dim} "
                          "dimensions; erase fewer")
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, rank)))
    return q


@dataclass
class Erased:
    """One layer spec's erasure: ``apply(X)`` edits any split's features; ``rank``: the
    dimensions it removes."""

    apply: Callable[[np.ndarray], np.ndarray]
    rank: int


def fit_erasure(concept: Concept, X_train: np.ndarray,
                z_train: Optional[np.ndarray] = None) -> Erased:
    """The erasure of ``concept`` fitted on one layer spec's training features and their
    concept classes ``z_train`` (none for a random erasure)."""
    if concept.labels is None:
        basis = random_projection(X_train.shape[1], int(concept.rank or 0))
        centre = X_train.astype(np.float64).mean(axis=0)

        def project(X: np.ndarray) -> np.ndarray:
            delta = X.astype(np.float64) - centre
            return (X - (delta @ basis) @ basis.T).astype(np.float32)

        return Erased(project, basis.shape[1])
    import torch

    if z_train is None:
        raise ValueError("a concept erasure is fitted on the training split's classes")
    eraser = fit_leace(X_train, z_train)
    rank = int(torch.linalg.matrix_rank(eraser.proj_left)) if eraser.proj_left.numel() else 0

    def edited(X: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return eraser(torch.from_numpy(np.asarray(X, dtype=np.float64))).numpy()

    # a feature constant on the training split (MiniLM's layer 6 has three) leaves the
    # eraser as rounding noise, ~1e-17, that still follows the concept: a probe that
    # standardizes with a looser rule than ours would scale it up and read the concept back
    # (38.7 % on Depth's length bins against a 18.8 % majority). It stays its constant.
    scale = FeatureScale.fit(edited(X_train))
    constant = np.isinf(scale.std)

    def edit(X: np.ndarray) -> np.ndarray:
        out = edited(X)
        out[:, constant] = scale.mean[constant]
        return out.astype(np.float32)

    return Erased(edit, rank)


def check_probe(X_train: np.ndarray, z_train: np.ndarray, X_test: np.ndarray,
                z_test: np.ndarray) -> float:
    """Test accuracy (%) of a linear probe of the concept (scikit-learn's logistic
    regression, C = :data:`CHECK_C`, tolerance :data:`CHECK_TOL`, on features standardized
    with the training split's mean and std as the probes read them,
    :class:`~estratos.probe.estimators.scaling.FeatureScale`)."""
    from sklearn.linear_model import LogisticRegression

    if len(np.unique(z_train)) < 2:
        return 100.0 * float(np.mean(z_test == z_train[0]))
    scale = FeatureScale.fit(X_train)
    model = LogisticRegression(C=CHECK_C, tol=CHECK_TOL, max_iter=CHECK_MAX_ITER)
    model.fit(scale.apply(X_train, np.float64), z_train)
    return 100.0 * float(np.mean(model.predict(scale.apply(X_test, np.float64)) == z_test))


def erasure_record(concept: Concept, erased: Erased, before: Optional[float],
                   after: Optional[float], majority: Optional[float]) -> Dict[str, Any]:
    """A cell's ``erasure``: the concept, its bins (length concepts) or its number of
    classes, the eraser's rank, and the concept probe's accuracy before and after erasure
    beside the concept's majority rate on the scored split (None for a random erasure)."""
    out: Dict[str, Any] = {"concept": concept.name, "rank": erased.rank}
    if concept.bins is not None:
        out["bins"] = [round(b, 4) for b in concept.bins]
    if concept.labels is not None:
        out["n_classes"] = int(len(np.unique(np.concatenate(list(concept.labels.values())))))
        out["concept_accuracy_before"] = None if before is None else round(before, 2)
        out["concept_accuracy"] = None if after is None else round(after, 2)
        out["concept_majority"] = None if majority is None else round(majority, 2)
    return out


class ErasedFeatures:
    """The features of one program's layer specs with ``concept`` erased, each layer spec's
    eraser fitted on its training split (``features(split)``: the unedited ``(G, n, F)``
    stack), and each one's ``erasure`` record, for :func:`estratos.probe.cells.
    evaluate_cells`."""

    def __init__(self, task: TaskData, concept: Concept,
                 features: Callable[[str], np.ndarray]) -> None:
        protocol = get_protocol(task.protocol)
        self.train = str(protocol.train_split)
        self.scored = str(protocol.scored_split)
        self.concept = concept
        self._features = features
        self._erased: Optional[List[Erased]] = None
        self._cache: Dict[str, np.ndarray] = {}
        self.records: List[Dict[str, Any]] = []

    def _fit(self) -> List[Erased]:
        if self._erased is None:
            train = self._features(self.train)
            z = None if self.concept.labels is None else self.concept.labels[self.train]
            self._erased = [fit_erasure(self.concept, train[g], z) for g in range(len(train))]
        return self._erased

    def __call__(self, split: str) -> np.ndarray:
        """``split``'s features with the concept erased, layer spec by layer spec."""
        if split not in self._cache:
            raw = self._features(split)
            self._cache[split] = np.stack([e.apply(raw[g]) for g, e in enumerate(self._fit())])
        return self._cache[split]

    def describe(self) -> List[Dict[str, Any]]:
        """Each layer spec's ``erasure`` record (the concept probe trained once per layer
        spec: it does not depend on the cell's seed)."""
        if self.records:
            return self.records
        labels = self.concept.labels
        raw_train, raw_test = self._features(self.train), self._features(self.scored)
        erased_train, erased_test = self(self.train), self(self.scored)
        for g, erased in enumerate(self._fit()):
            before = after = majority = None
            if labels is not None:
                z_train, z_test = labels[self.train], labels[self.scored]
                before = check_probe(raw_train[g], z_train, raw_test[g], z_test)
                after = check_probe(erased_train[g], z_train, erased_test[g], z_test)
                majority = 100.0 * float(np.bincount(z_test).max()) / len(z_test)
            self.records.append(erasure_record(self.concept, erased, before, after, majority))
        return self.records


def attach_erasure(outcomes: Sequence[CellOutcome], records: Sequence[Dict[str, Any]]) -> None:
    """Each outcome's ``extra["erasure"]``: its layer spec's record."""
    for outcome, record in zip(outcomes, records):
        outcome.extra["erasure"] = dict(record)


__all__ = ["Concept", "ErasedFeatures", "attach_erasure", "check_probe", "concept_of",
           "fit_erasure", "fit_leace", "random_projection"]
