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
   of the score whose widths are the class shares of the training split, cut at the
   training scores' quantiles; relatedness: the score is mapped monotonically onto the
   training split's gold scores (quantile to quantile);
5. classification: the cut points apply unchanged to dev and test, so the test split's
   control shares follow its own score distribution, which can sit apart from the training
   split's (the sentences of a split share words: RST's test scores sat a quarter of a
   standard deviation below the training ones, and its control majority was 22.7 % on train
   and 28-31 % on test). The word values are therefore a *draw*: draw 0 from ``(seed,
   CONTROL_TASK_STREAM)``, draw ``d`` > 0 from ``(seed, CONTROL_TASK_STREAM, REDRAW, d)``,
   and the first draw whose control class counts on every other split pass a chi-square
   test of homogeneity with the training split's at :data:`SHARES_P` is kept
   (:func:`shares_p`, :func:`control_labels`); if none of :data:`CONTROL_DRAWS` does,
   the draw with the largest p-value, with a warning.

What holds, then: the control label is one fixed function of an example's bag of words on
every split (the same words get the same label in train, dev and test, the Hewitt & Liang
property); the training split has the task's training class shares (up to ties at a cut);
every other split's control class counts are consistent with the training split's at
:data:`SHARES_P` (its shares match within sampling, not exactly). The draw kept depends on
the seed and on which examples each split holds, never on a label but the training split's
class shares. Cutting each split at its own quantiles instead would match the shares
exactly but give the same words other labels on another split: on RST (seeds 1111 and 1)
it moved 62-65 % of the test examples to another control class than the training cut
points give, labels no memorising probe could reach.

Like Hewitt & Liang's control tasks, the control task generalises from training to test only
through word identity (test sentences share words with training ones), and a probe reaches
it only by learning which words carry which values: what a more expressive probe does
better. The probe is trained, early-stopped and **scored on the control labels**
(:func:`control_task`), and the record says ``control = {"kind": "control-task", "seed":
seed}``.

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
import logging
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

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
#: the third key part of a redrawn set of word values (draw > 0), apart from the class
#: order's ``(seed, CONTROL_TASK_STREAM, 1)``
REDRAW = 2
#: the draws of word values tried before the best one is kept anyway (:func:`control_labels`)
CONTROL_DRAWS = 100
#: the p-value of the chi-square test of homogeneity (a split's control class counts
#: against the training split's) a draw must reach on every other split
SHARES_P = 0.05
#: ``part`` of the training labels and of the dev labels in :func:`permuted`
TRAIN_PART, DEV_PART = 0, 1
#: what a word is for the control task: a run of word characters, lower-cased
_WORD = re.compile(r"\w+", re.UNICODE)

log = logging.getLogger(__name__)


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


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The word types of a task's sentences (lower-cased ``\\w+`` tokens, sorted) and each
    sentence's words as indices into them: read once, then scored for every draw."""

    size: int
    #: per sentence, the vocabulary index of each of its words
    words: Tuple[np.ndarray, ...]
    counts: np.ndarray

    @classmethod
    def of(cls, sentences: Any) -> "Vocabulary":
        words = _sentence_words(sentences)
        vocab = sorted({w for ws in words for w in ws})
        index = {w: i for i, w in enumerate(vocab)}
        return cls(len(vocab),
                   tuple(np.array([index[w] for w in ws], dtype=np.int64) for ws in words),
                   np.array([len(ws) for ws in words], dtype=np.float64))

    def scores(self, seed: int, draw: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """``(sums, counts)`` per sentence: the sum of its words' values (``draw`` of
        ``seed``: :func:`word_values`) and its word count."""
        values = word_values(self.size, seed, draw)
        sums = np.array([values[ix].sum() if len(ix) else 0.0 for ix in self.words])
        return sums, self.counts


def word_values(size: int, seed: int, draw: int = 0) -> np.ndarray:
    """The random values of a vocabulary of ``size`` sorted word types: draw 0 from ``(seed,
    CONTROL_TASK_STREAM)``, draw ``d`` > 0 from ``(seed, CONTROL_TASK_STREAM, REDRAW, d)``."""
    key = ((int(seed), CONTROL_TASK_STREAM) if draw == 0
           else (int(seed), CONTROL_TASK_STREAM, REDRAW, int(draw)))
    return np.random.default_rng(key).standard_normal(size)


def word_scores(sentences: Any, seed: int, draw: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """``(sums, counts)`` per sentence: the sum of its words' random values (``draw`` of
    ``seed`` over the sorted vocabulary) and its word count."""
    return Vocabulary.of(sentences).scores(seed, draw)


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


def control_scores(task: TaskData, seed: int, draw: int = 0,
                   vocabulary: Optional[Vocabulary] = None) -> Dict[str, np.ndarray]:
    """Every split's control scores (module docstring, steps 1-3) for the word values of
    ``draw``: word values centred on their token-weighted mean over the task's examples,
    each example's sum over the root of its word count, standardised within its word-count
    band, so an example's score does not grow or shrink with its length. Only words and word
    counts enter (never a label). ``vocabulary``: the task's, when already read."""
    sums, counts = (vocabulary or Vocabulary.of(task.sentences)).scores(seed, draw)
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


def _training_splits(task: TaskData) -> List[str]:
    from estratos.protocols import get_protocol

    name = get_protocol(task.protocol).train_split
    return [name] if name is not None and name in task.splits else list(task.splits)


def shares_p(labels: Dict[str, np.ndarray], train: Sequence[str], k: int) -> float:
    """The smallest p-value, over the splits not in ``train``, of the chi-square test of
    homogeneity between the training splits' class counts of ``labels`` and the split's
    (``k`` classes; a class absent from both left out); 1.0 without another split or with
    one class."""
    from scipy.stats import chi2_contingency

    reference = np.bincount(np.concatenate([labels[n] for n in train]), minlength=k)
    worst = 1.0
    for name, values in labels.items():
        if name in train or not len(values):
            continue
        table = np.array([reference, np.bincount(values, minlength=k)])
        table = table[:, table.sum(axis=0) > 0]
        if table.shape[1] > 1:
            worst = min(worst, float(chi2_contingency(table, correction=False).pvalue))
    return worst


@dataclasses.dataclass(frozen=True)
class ControlDraw:
    """A task's control labels for one seed: every split's ``labels``, the ``draw`` of word
    values they come from, and that draw's :func:`shares_p` (None for relatedness, whose
    labels are draw 0's)."""

    labels: Dict[str, np.ndarray]
    draw: int
    p: Optional[float]


def control_labels(task: TaskData, seed: int) -> ControlDraw:
    """Every split's control labels for ``seed`` (module docstring, steps 4-5):
    classification takes the first draw of word values whose splits pass :func:`shares_p`
    at :data:`SHARES_P` (else, with a warning, the draw with the largest p-value of
    :data:`CONTROL_DRAWS`); relatedness maps draw 0's scores onto the training gold
    scores."""
    from estratos.protocols import get_protocol

    vocabulary = Vocabulary.of(task.sentences)
    train = _training_splits(task)
    train_labels = np.concatenate([np.asarray(task.splits[n].labels) for n in train])
    if get_protocol(task.protocol).scores:
        scores = control_scores(task, seed, vocabulary=vocabulary)
        train_scores = np.concatenate([scores[n] for n in train])
        ranked = train_scores[np.argsort(train_scores, kind="stable")]
        gold = np.sort(train_labels.astype(np.float64))
        return ControlDraw({name: np.interp(s, ranked, gold) for name, s in scores.items()},
                           0, None)
    k = max(len(task.labels), int(train_labels.max(initial=0)) + 1)
    shares = np.bincount(train_labels.astype(np.int64), minlength=k) / len(train_labels)
    classes = np.random.default_rng((int(seed), CONTROL_TASK_STREAM, 1)).permutation(k)
    bounds = np.cumsum(shares[classes])[:-1]
    best, best_p = None, -1.0
    for draw in range(CONTROL_DRAWS):
        scores = control_scores(task, seed, draw, vocabulary)
        cuts = np.quantile(np.concatenate([scores[n] for n in train]), bounds)
        labels = {name: classes[np.searchsorted(cuts, s, side="right")].astype(np.int64)
                  for name, s in scores.items()}
        p = shares_p(labels, train, k)
        if p > best_p:
            best, best_p = ControlDraw(labels, draw, p), p
        if p >= SHARES_P:
            break
    assert best is not None
    if best_p < SHARES_P:
        log.warning("%s seed %d: no control draw of %d gave every split the training split's "
                    "class shares (chi-square p >= %g); draw %d kept (p = %.3g)",
                    task.spec.id, seed, CONTROL_DRAWS, SHARES_P, best.draw, best_p)
    else:
        log.debug("%s seed %d: control draw %d (shares p = %.3g)", task.spec.id, seed,
                  best.draw, best_p)
    return best


def control_task(task: TaskData, seed: int) -> TaskData:
    """``task`` with every split's labels replaced by the control task's
    (:func:`control_labels`): same sentences, examples and splits; classification labels
    keep the task's label names, on the training split its class shares, and on every
    other split shares that match the training split's within sampling."""
    labels = control_labels(task, seed).labels
    splits = {name: dataclasses.replace(split, labels=labels[name])
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


__all__ = ["CONTROL_DRAWS", "CONTROL_STREAM", "CONTROL_TASK", "CONTROL_TASK_STREAM", "ControlDraw",
           "DEV_PART", "LABEL_SHUFFLE", "REDRAW", "SHARES_P", "ShuffledLabels", "TRAIN_PART",
           "Vocabulary", "control_labels", "control_record", "control_scores", "control_task",
           "example_scores", "example_words", "length_bands", "permuted", "shares_p",
           "shuffled_labels_factory", "word_scores", "word_values"]
