"""Control runs of a probe (``probe --control``): a control task, or shuffled labels.

**Control task** (``control-task``; Hewitt & Liang 2019). A probe's accuracy mixes what the
layer encodes with what the probe can learn on its own. Hewitt & Liang measure the second
part with a *control task*: labels that are a fixed random function of the input's surface
identity (for words: each word type gets a random label drawn from the task's label
distribution), so they can only be predicted by memorising surface identity, never by the
linguistic property. Selectivity = task accuracy - control accuracy, at the same probe
settings; a selective probe (high task accuracy, low control accuracy) reads the property
rather than memorising words.

For sentence-level tasks we keep their two requirements (a deterministic function of the
surface form, the task's label distribution) and lift the word-type assignment to examples:

1. every word type of the task (lower-cased ``\\w+`` tokens of all its sentences) gets a value
   drawn from a standard normal, from ``(seed, CONTROL_TASK_STREAM)`` over the sorted
   vocabulary;
2. an example's control score is the sum of the values of its words (every sentence of every
   slot, so a pair's two sentences both count), divided by the square root of its word
   count: its variance does not grow with length, so the score is not a length feature;
3. classification: the classes, in an order drawn from the same seed, take consecutive bands
   of the score whose widths are the class shares of the training split (cut at the
   training scores' quantiles), so the control labels follow the task's label distribution;
   relatedness: the score is mapped monotonically onto the training split's gold scores
   (quantile to quantile).

The cut points come from the training split and apply unchanged to dev and test, so the
control label is one fixed function of the example's words. Like Hewitt & Liang's control
tasks it generalises from training to test only through word identity (test sentences share
words with training ones), and a probe reaches it only by learning which words carry which
values: what a more expressive probe does better. The probe is trained, early-stopped and
**scored on the control labels** (:func:`control_task`), and the record says ``control =
{"kind": "control-task", "seed": seed}``.

**Label shuffle** (``label-shuffle``). Training and dev labels permuted within their split,
tested on the true labels: every link between features and labels is broken, so whatever the
probe's capacity the expected test accuracy is at most the majority rate. It is a floor (what
the label prior and early stopping reach), not a capacity control: it cannot rise with a more
expressive probe, and accuracy minus it is accuracy minus the majority rate, not
selectivity. Kept for that reading only. Dev labels are permuted too: early stopping on true
dev labels selects, among models trained on noise, those that happen to agree with the truth
(a toy control rose from 75.0 to 91.7). The permutation of n examples is drawn from
``(seed, CONTROL_STREAM, n, part)``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, List, Optional

import numpy as np

from estratos.protocols import EstimatorFactory
from estratos.tasks.types import Split, TaskData
from estratos.vocab import CONTROL_KINDS, CONTROL_TASK, LABEL_SHUFFLE

#: keeps the label-shuffle permutations apart from every other use of the seed
CONTROL_STREAM = 0xC0
#: keeps the control task's word values apart from every other use of the seed
CONTROL_TASK_STREAM = 0xC7
#: ``part`` of the training labels and of the dev labels in :func:`permuted`
TRAIN_PART, DEV_PART = 0, 1
#: what a word is for the control task: a run of word characters, lower-cased
_WORD = re.compile(r"\w+", re.UNICODE)


def control_record(kind: Optional[str], seed: int) -> Optional[Dict[str, Any]]:
    """The ``control`` object of a control cell of ``kind`` trained with ``seed`` (None for
    an ordinary cell)."""
    if kind is None:
        return None
    if kind not in CONTROL_KINDS:
        raise ValueError(f"unknown control kind {kind!r}")
    return {"kind": kind, "seed": int(seed)}


# ---- the control task ----------------------------------------------------------------------

def _sentence_words(sentences: Any) -> List[List[str]]:
    return [_WORD.findall(s.lower()) for s in sentences]


def word_scores(sentences: Any, seed: int) -> tuple:
    """``(sums, counts)`` per sentence: the sum of its words' random values and its word
    count (values from ``(seed, CONTROL_TASK_STREAM)`` over the sorted vocabulary)."""
    words = _sentence_words(sentences)
    vocab = sorted({w for ws in words for w in ws})
    index = {w: i for i, w in enumerate(vocab)}
    values = np.random.default_rng((int(seed), CONTROL_TASK_STREAM)).standard_normal(len(vocab))
    sums = np.array([values[[index[w] for w in ws]].sum() if ws else 0.0 for ws in words])
    counts = np.array([len(ws) for ws in words], dtype=np.float64)
    return sums, counts


def example_scores(split: Split, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each example's control score: the word-value sum over every sentence of its slots over
    the square root of their word count (0 for an example without words)."""
    total = np.zeros(len(split))
    n = np.zeros(len(split))
    for refs in split.slots:
        owner = np.repeat(np.arange(len(refs)), np.diff(refs.offsets))
        np.add.at(total, owner, sums[refs.indices])
        np.add.at(n, owner, counts[refs.indices])
    return np.where(n > 0, total / np.sqrt(np.maximum(n, 1.0)), 0.0)


def _training_splits(task: TaskData) -> List[str]:
    from estratos.protocols import get_protocol

    name = get_protocol(task.protocol).train_split
    return [name] if name is not None and name in task.splits else list(task.splits)


def control_task(task: TaskData, seed: int) -> TaskData:
    """``task`` with every split's labels replaced by the control task's (module docstring):
    same sentences, examples and splits; classification labels keep the task's label
    names and, on the training split, its class shares."""
    from estratos.protocols import get_protocol

    sums, counts = word_scores(task.sentences, seed)
    scores = {name: example_scores(split, sums, counts) for name, split in task.splits.items()}
    train = _training_splits(task)
    train_scores = np.concatenate([scores[n] for n in train])
    train_labels = np.concatenate([np.asarray(task.splits[n].labels) for n in train])
    rng = np.random.default_rng((int(seed), CONTROL_TASK_STREAM, 1))
    if get_protocol(task.protocol).scores:
        order = np.argsort(train_scores, kind="stable")
        ranked, gold = train_scores[order], np.sort(train_labels.astype(np.float64))

        def relabel(s: np.ndarray) -> np.ndarray:
            return np.interp(s, ranked, gold)
    else:
        k = max(len(task.labels), int(train_labels.max(initial=0)) + 1)
        shares = np.bincount(train_labels.astype(np.int64), minlength=k) / len(train_labels)
        classes = rng.permutation(k)
        cuts = np.quantile(train_scores, np.cumsum(shares[classes])[:-1])

        def relabel(s: np.ndarray) -> np.ndarray:
            return classes[np.searchsorted(cuts, s, side="right")].astype(np.int64)
    splits = {name: dataclasses.replace(split, labels=relabel(scores[name]))
              for name, split in task.splits.items()}
    return dataclasses.replace(task, splits=splits)


# ---- label shuffle ---------------------------------------------------------------------------

def permuted(y: np.ndarray, seed: int, part: int = TRAIN_PART) -> np.ndarray:
    """``y`` with its entries permuted (the label-shuffle permutation of ``seed`` for
    len(y))."""
    y = np.asarray(y)
    rng = np.random.default_rng((int(seed), CONTROL_STREAM, len(y), int(part)))
    return y[rng.permutation(len(y))]


class ShuffledLabels:
    """An estimator that fits the wrapped one on shuffled training and dev labels.

    ``fit(X, y, X_dev, y_dev, *rest)`` (classifiers and regressors alike) passes
    :func:`permuted` training and dev labels; everything else (``dev_score_``, ``epochs_``,
    ``predict``...) is the wrapped estimator's.
    """

    #: no fold fits at once: the protocols fit each fold through :meth:`fit`, which
    #: shuffles that fold's own training and dev labels
    fit_folds = None

    def __init__(self, make: EstimatorFactory, seed: int) -> None:
        self.make = make
        self.seed = int(seed)
        self.estimator_: Any = None

    def fit(self, X: Any, y: Any, X_dev: Any, y_dev: Any, *rest: Any) -> "ShuffledLabels":
        self.estimator_ = self.make().fit(X, permuted(y, self.seed), X_dev,
                                          permuted(y_dev, self.seed, DEV_PART), *rest)
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or self.__dict__.get("estimator_") is None:
            raise AttributeError(name)
        return getattr(self.__dict__["estimator_"], name)


def shuffled_labels_factory(make: EstimatorFactory, seed: int) -> EstimatorFactory:
    """``make`` wrapped so that every estimator it builds trains on shuffled labels."""
    def factory() -> ShuffledLabels:
        return ShuffledLabels(make, seed)
    return factory


__all__ = ["CONTROL_STREAM", "CONTROL_TASK", "CONTROL_TASK_STREAM", "DEV_PART", "LABEL_SHUFFLE",
           "ShuffledLabels", "TRAIN_PART", "control_record", "control_task", "example_scores",
           "permuted", "shuffled_labels_factory", "word_scores"]
