"""Control runs of a probe (``probe --control``): a control task, or shuffled labels.

**Control task** (``control-task``; Hewitt & Liang 2019). A probe's accuracy mixes what the
layer encodes with what the probe can learn on its own. Hewitt & Liang measure the second
part with a *control task*: labels that are a fixed random function of the input's surface
identity (for words: each word type gets a random label drawn from the task's label
distribution), so they can only be predicted by memorising surface identity, never by the
linguistic property. Selectivity = task accuracy - control accuracy, at the same probe
hyper-parameters (here: the same probe family and selection rule, the control choosing its
L2 on its own dev labels; docs/controls.md); a selective probe (high task accuracy, low
control accuracy) reads the property rather than memorising words.

For sentence-level tasks we keep their two requirements (a deterministic function of the
surface form, the task's label distribution) and lift the word-type assignment to examples:

1. every word type of the task (lower-cased ``\\w+`` tokens of all its sentences) gets a value
   drawn from a standard normal, from ``(seed, CONTROL_TASK_STREAM)`` over the sorted
   vocabulary;
2. the values are centred on their token-frequency-weighted mean over the task's examples
   (every token of every example counts once): drawn values have a non-zero mean over the
   frequent words (the sample mean of a few thousand types, most tokens on a few of them),
   and that mean, times the word count, would make the score grow with length;
3. an example's control score is the sum of the centred values of its words (every sentence
   of every slot, so a pair's two sentences both count), divided by the square root of its
   word count (its spread does not grow with length either), then standardised within its
   word-count band: the examples are cut into bands of word count (each count its own band
   when at least 100 examples have it, else neighbouring counts merged until a band holds
   100), and each band's scores are shifted and scaled to mean 0 and spread 1. Why both: the
   centring removes the trend of the frequent words' mean, but the words themselves change
   with length (long sentences hold other words than short ones), which left correlations
   with the word count of up to 0.29 (TASS2, SICK); the bands remove what is left. Over the
   benchmark's Spanish tasks the correlation with the word count was up to 0.47 in size
   (DCwiki) before, at most 0.02 after (docs/controls.md). Centre and bands are taken over
   every split's examples, as the vocabulary is: they read words and counts, never a label,
   and the test examples, where the control is scored, are then as free of length as the
   training ones;
4. classification: the classes, in an order drawn from the same seed, take consecutive bands
   of the score whose widths are the class shares of the training split, cut at each
   split's own quantiles of those shares, so every split's control labels have the training
   split's class shares (stratified by control class); relatedness: the score is mapped
   monotonically onto the training split's gold scores (quantile to quantile).

Why each split is cut at its own quantiles: cut once at the training scores' quantiles, the
test split's control shares drifted with its score distribution (RST: a control majority
of 22.7 % on train, 28-31 % on test; TASS2 seed 1111: 49.1 % against 39.8 %), so a probe
that learnt nothing scored below the control's own test majority and selectivity counted
that deficit as the layer's (docs/controls.md). Within a split the control label is one
fixed function of the example's words; across splits the cut points differ only by the
splits' sampling (the scores are standardised over all splits together). Like Hewitt &
Liang's control
tasks it generalises from training to test only through word identity (test sentences share
words with training ones), and a probe reaches it only by learning which words carry which
values: what a more expressive probe does better. The probe is trained, early-stopped and
**scored on the control labels** (:func:`control_task`), and the record says ``control =
{"kind": "control-task", "seed": seed}``.

**Label shuffle** (``label-shuffle``). Training and dev labels permuted within their split,
tested on the true labels: every link between features and labels is broken, so whatever the
probe's capacity the expected test accuracy is at most the majority rate. It is a floor (what
the label prior and early stopping reach), not a capacity control: it cannot rise with a more
expressive probe, and in practice it sits below the majority rate (a probe fitted to
shuffled labels predicts a wrong mapping with confidence), so accuracy minus it is not
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
from estratos.vocab import (
    CONTROL_L2_OWN,
    CONTROL_L2_TASK,
    CONTROL_TASK,
    CONTROLS,
    LABEL_SHUFFLE,
)

#: keeps the label-shuffle permutations apart from every other use of the seed
CONTROL_STREAM = 0xC0
#: keeps the control task's word values apart from every other use of the seed
CONTROL_TASK_STREAM = 0xC7
#: ``part`` of the training labels and of the dev labels in :func:`permuted`
TRAIN_PART, DEV_PART = 0, 1
#: what a word is for the control task: a run of word characters, lower-cased
_WORD = re.compile(r"\w+", re.UNICODE)


def control_record(kind: Optional[str], seed: int,
                   l2: str = CONTROL_L2_OWN) -> Optional[Dict[str, Any]]:
    """The ``control`` object of a control cell of ``kind`` trained with ``seed`` (None for
    an ordinary cell); ``l2`` ``"task"``: it reused its task cell's L2 (``--control-l2``),
    recorded as ``"l2": "task"``."""
    if kind is None:
        return None
    out: Dict[str, Any] = {"kind": CONTROLS.check(kind, "--control"), "seed": int(seed)}
    if l2 == CONTROL_L2_TASK:
        out["l2"] = CONTROL_L2_TASK
    return out


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


def example_words(split: Split, sums: np.ndarray, counts: np.ndarray) -> tuple:
    """``(totals, n)`` per example: the word-value sum and the word count over every sentence
    of its slots."""
    total = np.zeros(len(split))
    n = np.zeros(len(split))
    for refs in split.slots:
        owner = np.repeat(np.arange(len(refs)), np.diff(refs.offsets))
        np.add.at(total, owner, sums[refs.indices])
        np.add.at(n, owner, counts[refs.indices])
    return total, n


def example_scores(split: Split, sums: np.ndarray, counts: np.ndarray,
                   centre: float = 0.0) -> np.ndarray:
    """Each example's control score: the sum of its words' values less ``centre`` each, over
    every sentence of its slots, over the square root of their word count (0 for an example
    without words)."""
    total, n = example_words(split, sums, counts)
    return np.where(n > 0, (total - centre * n) / np.sqrt(np.maximum(n, 1.0)), 0.0)


def control_scores(task: TaskData, seed: int) -> Dict[str, np.ndarray]:
    """Every split's control scores (module docstring, steps 1-3): word values centred on
    their token-weighted mean over the task's examples, each example's sum over the root of
    its word count, standardised within its word-count band, so an example's score does not
    grow or shrink with its length. Only words and word counts enter (never a label)."""
    sums, counts = word_scores(task.sentences, seed)
    words = {name: example_words(split, sums, counts) for name, split in task.splits.items()}
    tokens = sum(float(n.sum()) for _, n in words.values())
    centre = sum(float(t.sum()) for t, _ in words.values()) / tokens if tokens else 0.0
    scores = {name: example_scores(split, sums, counts, centre)
              for name, split in task.splits.items()}
    lengths = np.concatenate([n for _, n in words.values()])
    edges = length_bands(lengths)
    bands = np.searchsorted(edges, lengths, side="right")
    every = np.concatenate(list(scores.values()))
    mean = np.zeros(len(edges) + 1)
    scale = np.ones(len(edges) + 1)
    for band in np.unique(bands):
        inside = every[bands == band]
        mean[band] = inside.mean()
        scale[band] = inside.std() or 1.0
    out = {}
    for name, values in scores.items():
        band = np.searchsorted(edges, words[name][1], side="right")
        out[name] = (values - mean[band]) / scale[band]
    return out


#: the fewest examples a word-count band of the control score holds
#: (:func:`length_bands`)
BAND_EXAMPLES = 100


def length_bands(lengths: np.ndarray) -> np.ndarray:
    """Inner edges of the word-count bands of the examples' word counts ``lengths``: counts
    in increasing order, a band closed once it holds :data:`BAND_EXAMPLES` examples (a short
    last band joins the one before), so every frequent count is a band of its own. A count's
    band is ``searchsorted(edges, n, "right")``."""
    values, counts = np.unique(np.asarray(lengths), return_counts=True)
    edges: List[float] = []
    held = 0
    for value, count in zip(values, counts):
        if held >= BAND_EXAMPLES:
            edges.append(float(value))
            held = 0
        held += int(count)
    if edges and held < BAND_EXAMPLES:
        edges.pop()  # the last band is short: it joins the one before
    return np.asarray(edges)


def stratified_bands(scores: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Each score's band when ``scores`` are cut at their own quantiles ``bounds`` (the
    cumulative shares, without the final 1): band ``j`` holds the share ``bounds[j] -
    bounds[j-1]`` of them up to ties, and equal scores (the same words) share a band."""
    scores = np.asarray(scores, dtype=np.float64)
    if not len(scores):
        return np.zeros(0, dtype=np.int64)
    return np.searchsorted(np.quantile(scores, bounds), scores, side="right")


def _training_splits(task: TaskData) -> List[str]:
    from estratos.protocols import get_protocol

    name = get_protocol(task.protocol).train_split
    return [name] if name is not None and name in task.splits else list(task.splits)


def control_task(task: TaskData, seed: int) -> TaskData:
    """``task`` with every split's labels replaced by the control task's (module docstring):
    same sentences, examples and splits; classification labels keep the task's label
    names and, on the training split, its class shares."""
    from estratos.protocols import get_protocol

    scores = control_scores(task, seed)
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
        bounds = np.cumsum(shares[classes])[:-1]

        def relabel(s: np.ndarray) -> np.ndarray:
            # the split's own quantiles: its control shares are the training split's
            return classes[stratified_bands(s, bounds)].astype(np.int64)
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
           "ShuffledLabels", "TRAIN_PART", "control_record", "control_scores", "control_task",
           "example_scores", "example_words", "length_bands", "permuted", "stratified_bands",
           "shuffled_labels_factory",
           "word_scores"]
