"""``estratos baseline``: baselines that read only the text (no model, no cache).

Nine of them, each a feature extractor plus the probes' logistic-regression grid (or, for
score protocols, the cosine of its vectors), chosen with ``--baseline`` (names in
:data:`estratos.vocab.SURFACE_BASELINES`):

- ``tfidf``: ODESIA's baseline with no linguistic knowledge. Tokens are the
  whitespace-separated pieces of the sentence as published (``str.split``; no lower-casing,
  no punctuation splitting, no accents stripped), weighted by TF-IDF (scikit-learn's
  ``TfidfVectorizer``: smoothed idf, l2-normalized rows). ODESIA's Delta
  (:mod:`estratos.report.odesia`) measures how far a system goes beyond it.
- ``word-counts``: the same whitespace tokens as raw counts (scikit-learn's
  ``CountVectorizer``, no idf, no normalization): how many times each word occurs, which the
  l2-normalized TF-IDF blurs (a sentence's count of ``que`` or of a determiner).
- ``length-tokens`` / ``length-chars``: the sentence's length in whitespace tokens /
  characters (``len``, spaces included), as a number (divided by the longest training
  sentence's) and as a category (one indicator per length seen in training), so the
  classifier can give any length any label: how much of a task length alone decides.
- ``char-ngrams``: character 1- to 4-grams running across spaces (``analyzer="char"``),
  TF-IDF weighted: spelling, affixes and short words without a tokenizer.
- ``word-bigrams``: pairs of adjacent whitespace tokens, TF-IDF weighted: local word order.
- ``word-position``: which token stands at each position from the start (one indicator per
  (position, token) seen in training): a template's slots.
- ``first-last-word``: one indicator for the first word and one for the last word (a word:
  a token with a letter or digit, so a final period does not hide it; :mod:`estratos.probe.
  cues`): what a template's edges give away.
- ``function-words``: counts of each Spanish function word (lower-cased), of tokens ending
  in ``-s`` and of each punctuation mark (:mod:`estratos.probe.cues`), each as a scaled
  number and one indicator per count seen in training: clause counts (``que``), number
  marking (plural determiners, ``-s``) and punctuation without any content word.

Case is kept everywhere. The extractors are fitted on the protocol's training split
(``inner-kfold``: the whole pool, whose IDF/vocabulary then also sees the held-out folds'
text; fitting uses no labels; ``cosine``, which trains nothing: every sentence of the task).

Per protocol (:mod:`estratos.protocols`; a baseline asks the protocol, never its name):

- classification protocols (``split``, ``kfold``, ``inner-kfold``): example features are built
  from the sparse sentence vectors with the task's own combiner
  (:data:`estratos.probe.features.COMBINER_FUNCTIONS`, e.g. ``[|u-v|, u*v]`` for pairs; an RST
  subtree is the mean of its EDU vectors), exactly as for the probes, and the probes' logistic-
  regression grid (scikit-learn, here with saga) is trained by the probes' own cell code and
  protocol objects (same splits, same folds, same seeds, L2 chosen on dev accuracy): each
  baseline is an estimator (:class:`SurfaceLogReg`) with its own features. The L2 grid is
  SentEval's ``1e-5 .. 1e-2``; as scikit-learn sums the loss over examples while SentEval's
  weight decay applies to the mean loss, ``C = 1 / (L2 * n_train)`` makes the two penalties
  equal (:class:`estratos.probe.estimators.classifiers.LogisticGrid`). Tasks that turn
  regularization off for the neural probes (``noreg``) still use the grid: an unregularized
  linear model on sparse features only memorizes.
- score protocols: the protocol is evaluated with nothing trained, on the cosine of the two
  sentences' baseline vectors. ``cosine`` (STS): Pearson/Spearman vs gold per subset, then
  their size-weighted mean (as the probes report). ``relatedness`` (SICK-R): Pearson/Spearman
  of the cosine vs gold on test; ``mse`` uses a least-squares line from cosine to gold fitted
  on train (correlations do not depend on it). An undefined correlation is null.

Results use the probe schema with ``kind: "baseline"``, model ``baseline:<name>``, revision
``<name>-v1``, classifier name ``<name>`` and ``layer``/``pooling`` null, so several
baselines live in one results file as cells of their own. ``estratos baseline`` runs them as
a grid of (task, baseline, seed) cells through the probes' grid loop
(:mod:`estratos.probe.grid.baselines`): the same resume, work units, processes, shards and
progress.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
)

import numpy as np
import scipy.sparse as sp

# imported at module level on purpose: the BLAS/OpenMP libraries must be loaded before
# threadpool_limits is entered, or the limit does not reach them
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from threadpoolctl import threadpool_limits

from estratos.errors import OptionError
from estratos.options import parse_baselines
from estratos.probe.cells import chance_levels, classifier_record, evaluate_groups
from estratos.probe.cues import first_last_matrix, function_word_matrix, value_columns
from estratos.probe.estimators.classifiers import LogisticGrid
from estratos.probe.features import COMBINER_FUNCTIONS, COMBINER_WIDTH
from estratos.probe.records import CellSource, cell_record
from estratos.protocols import CellOutcome, get_protocol
from estratos.registry import Registry
from estratos.results import ResultRecord
from estratos.tasks.types import SlotRefs, Split, TaskData
from estratos.text import surface_length
from estratos.vocab import (
    BASELINE_MODEL_PREFIX,
    DEFAULT_BASELINE,
    DEFAULT_KFOLD,
    DEFAULT_L2_GRID,
    DEFAULT_SEED,
    SURFACE_BASELINES,
    VALIDATION_SPLIT,
)

log = logging.getLogger(__name__)

#: the model of the default baseline's cells (every baseline's: :func:`baseline_model`,
#: :func:`baseline_revision`)
BASELINE_MODEL = f"{BASELINE_MODEL_PREFIX}{DEFAULT_BASELINE}"
CLASSIFIER_NAME = "tfidf"
MAX_ITER = 1000
#: saga's stopping tolerance: 1e-4 took 4x longer on WordContent for the same dev accuracy
TOL = 1e-3
#: saga's passes over the data in a typical fit, for cost estimates (the synthetic tasks'
#: fits stopped after 50 to 300)
SAGA_PASSES = 100
#: the character n-gram orders of ``char-ngrams``
CHAR_NGRAMS = (1, 4)


def baseline_model(name: str) -> str:
    """The ``model`` of a baseline's cells: ``baseline:<name>``."""
    return f"{BASELINE_MODEL_PREFIX}{name}"


def baseline_revision(name: str) -> str:
    """The ``revision`` of a baseline's cells (bumped whenever its recipe changes)."""
    return f"{name}-v1"


# ----------------------------------------------------------------------------- features

def whitespace_tokens(text: str) -> List[str]:
    """The baselines' tokenizer: split on whitespace, nothing else."""
    return text.split()


def position_tokens(text: str) -> List[str]:
    """``word-position``'s features of a sentence: ``"<i> <token>"`` for each whitespace
    token, ``i`` counted from 0 at the start."""
    return [f"{i} {token}" for i, token in enumerate(text.split())]


def make_vectorizer() -> TfidfVectorizer:
    """A TF-IDF vectorizer on whitespace tokens, case kept (see the module docstring)."""
    return TfidfVectorizer(tokenizer=whitespace_tokens, token_pattern=None, lowercase=False,
                           dtype=np.float64)


def sentence_ids(*splits: Split) -> np.ndarray:
    """Sorted unique sentence indices the examples of ``splits`` refer to."""
    ids = [refs.indices for split in splits for refs in split.slots]
    return np.unique(np.concatenate(ids)) if ids else np.zeros(0, dtype=np.int64)


def _vectorized(vec: Any, sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    """Rows of every sentence from a scikit-learn vectorizer fitted on ``sentences[fit_ids]``
    (no feature at all in those: one empty column, so every vector is zero)."""
    try:
        vec.fit([sentences[i] for i in fit_ids])
    except ValueError:  # an empty vocabulary
        return sp.csr_array((len(sentences), 1), dtype=np.float64)
    return sp.csr_array(vec.transform(list(sentences)), dtype=np.float64)


def tfidf_matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    """TF-IDF rows of every sentence, the vectorizer fitted on ``sentences[fit_ids]``."""
    return _vectorized(make_vectorizer(), sentences, fit_ids)


def word_count_matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    """Raw counts of whitespace tokens (case kept), no idf and no normalization."""
    return _vectorized(CountVectorizer(tokenizer=whitespace_tokens, token_pattern=None,
                                       lowercase=False, dtype=np.float64),
                       sentences, fit_ids)


def char_ngram_matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    """TF-IDF rows of character 1-4-grams (across spaces, case kept)."""
    return _vectorized(TfidfVectorizer(analyzer="char", ngram_range=CHAR_NGRAMS,
                                       lowercase=False, dtype=np.float64),
                       sentences, fit_ids)


def word_bigram_matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    """TF-IDF rows of adjacent whitespace-token pairs (case kept)."""
    return _vectorized(TfidfVectorizer(tokenizer=whitespace_tokens, token_pattern=None,
                                       lowercase=False, ngram_range=(2, 2), dtype=np.float64),
                       sentences, fit_ids)


def word_position_matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    """0/1 rows: one column per (position, token) seen in the fitting sentences."""
    return _vectorized(CountVectorizer(analyzer=position_tokens, lowercase=False, binary=True,
                                       dtype=np.float64),
                       sentences, fit_ids)


def token_lengths(sentences: Sequence[str]) -> np.ndarray:
    """Whitespace tokens per sentence (:func:`estratos.text.surface_length`)."""
    return np.array([surface_length(s)[0] for s in sentences], dtype=np.int64)


def char_lengths(sentences: Sequence[str]) -> np.ndarray:
    """Characters per sentence (:func:`estratos.text.surface_length`: code points of the
    normalized text, spaces included)."""
    return np.array([surface_length(s)[1] for s in sentences], dtype=np.int64)


def length_matrix(lengths: np.ndarray, fit_ids: np.ndarray) -> sp.csr_array:
    """Rows ``[length / longest fitted length, one indicator per fitted length]``
    (:func:`estratos.probe.cues.value_columns`): the number lets the classifier order
    lengths (and place unseen ones), the indicators give each length seen in training a
    weight of its own."""
    return value_columns(lengths, fit_ids)


def slot_matrix(T: sp.csr_array, refs: SlotRefs) -> sp.csr_array:
    """(n_examples, V): each slot's sentence row, or the mean of its sentences' rows."""
    counts = np.diff(refs.offsets).astype(np.float64)
    weights = np.repeat(1.0 / counts, np.diff(refs.offsets))
    A = sp.csr_array((weights, refs.indices, refs.offsets), shape=(len(refs), T.shape[0]))
    return sp.csr_array(A @ T)


def split_matrix(T: sp.csr_array, split: Split, combiner: str) -> sp.csr_array:
    """Sparse example features of one split with the task's combiner (32-bit indices, which
    every scikit-learn solver accepts)."""
    parts = COMBINER_FUNCTIONS[combiner]([slot_matrix(T, refs) for refs in split.slots])
    X = sp.csr_array(sp.hstack(parts, format="csr"))
    if X.nnz < np.iinfo(np.int32).max and X.shape[1] < np.iinfo(np.int32).max:
        X.indices = X.indices.astype(np.int32, copy=False)
        X.indptr = X.indptr.astype(np.int32, copy=False)
    return X


# ----------------------------------------------------------------------------- estimators

class SurfaceLogReg(LogisticGrid):
    """A surface baseline's estimator: the probes' logistic-regression grid
    (:class:`~estratos.probe.estimators.classifiers.LogisticGrid`, ``C = 1 / (l2 * n)``) on
    its sparse features, run by the probes' cell code
    (:func:`estratos.probe.cells.evaluate_groups`).
    Subclasses name the baseline and say what its features are (``_facts["features"]``).

    The solver is saga (seeded by ``seed``): lbfgs keeps 2 x 10 copies of the whole
    classes x vocabulary coefficient matrix, 6.8 GB on WordContent's 1000 classes, while
    saga needs one and reached the same accuracy in a fraction of the time on every task
    measured. It keeps SentEval's L2 grid whatever the task says (``noreg`` does not apply,
    see the module docstring) and takes only the task's ``kfold``; score protocols train
    nothing with it (they use the cosine of its features, :meth:`untrained_record`).
    """

    solver = "saga"
    task_overrides = ("kfold",)
    trains_regressor = False
    _recorded: Tuple[str, ...] = ("method", "solver", "tol", "features", "max_iter",
                                  "l2_grid", "C")
    _facts: Mapping[str, Any] = {"method": "logistic-regression", "solver": "saga",
                                 "C": "1 / (l2 * n_train)"}

    def __init__(self, n_classes: Optional[int] = None, seed: int = DEFAULT_SEED,
                 max_iter: int = MAX_ITER, tol: float = TOL,
                 l2_grid: Sequence[float] = DEFAULT_L2_GRID, kfold: int = DEFAULT_KFOLD,
                 validation_split: float = VALIDATION_SPLIT) -> None:
        self.n_classes = n_classes
        self.seed = seed
        self.max_iter = max_iter
        self.tol = tol
        self.l2_grid = l2_grid
        self.kfold = kfold
        self.validation_split = validation_split

    def untrained_record(self) -> Dict[str, Any]:
        return {"name": self.name, "method": "cosine", "features": self._facts["features"]}

    def cost_per_example(self, n_features: int, n_classes: int) -> float:
        """Estimated cost of one training example in one fit: :data:`SAGA_PASSES` passes
        over its ``n_features`` (for sparse features: the nonzeros an example has) for each
        class. Only orders and balances a grid's work units and shards."""
        return 2.0 * n_features * n_classes * SAGA_PASSES


class TfidfLogReg(SurfaceLogReg):
    """The TF-IDF baseline's estimator (:class:`SurfaceLogReg` on whitespace TF-IDF); its
    record keeps the tokenizer and case of the recipe (:data:`COSINE_RECORD` when nothing
    is trained)."""

    name = CLASSIFIER_NAME
    _recorded = ("method", "solver", "tol", "tokenizer", "lowercase", "max_iter", "l2_grid",
                 "C")
    _facts: Mapping[str, Any] = {"method": "logistic-regression", "solver": "saga",
                                 "tokenizer": "whitespace", "lowercase": False,
                                 "C": "1 / (l2 * n_train)"}

    def untrained_record(self) -> Dict[str, Any]:
        return dict(COSINE_RECORD)


def _surface_estimator(name: str, features: str) -> Type[SurfaceLogReg]:
    """The estimator class of a surface baseline other than TF-IDF (its name and features)."""
    facts = {**SurfaceLogReg._facts, "features": features}
    cls_name = "".join(part.title() for part in name.split("-")) + "LogReg"
    return type(cls_name, (SurfaceLogReg,), {
        "name": name, "_facts": facts, "__module__": __name__,
        "__doc__": f"The ``{name}`` baseline's estimator (:class:`SurfaceLogReg`): {features}."})


#: what a TF-IDF record says when nothing is trained (score protocols)
COSINE_RECORD = {"name": CLASSIFIER_NAME, "method": "cosine", "tokenizer": "whitespace",
                 "lowercase": False}


@dataclass(frozen=True)
class SurfaceBaseline:
    """One baseline: its name, how it turns a task's sentences into sparse rows (fitted on
    the given sentence ids) and its estimator class."""

    name: str
    matrix: Callable[[Sequence[str], np.ndarray], sp.csr_array]
    estimator: Type[SurfaceLogReg]

    @property
    def system(self) -> CellSource:
        """What produced its cells (no cache, no device: a baseline reads text only)."""
        return CellSource(kind="baseline", model=baseline_model(self.name),
                      revision=baseline_revision(self.name))


def _lengths_of(count: Callable[[Sequence[str]], np.ndarray]
                ) -> Callable[[Sequence[str], np.ndarray], sp.csr_array]:
    def matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
        return length_matrix(count(sentences), fit_ids)
    return matrix


#: every surface baseline by name, under the names and in the order
#: :data:`estratos.vocab.SURFACE_BASELINES` declares (the names the CLI offers before numpy
#: loads; a declared registry: a baseline named there without its computation here, or the
#: reverse, fails when this module is imported)
BASELINES: Registry[SurfaceBaseline] = Registry("baseline", {b.name: b for b in (
    SurfaceBaseline("tfidf", tfidf_matrix, TfidfLogReg),
    SurfaceBaseline("word-counts", word_count_matrix, _surface_estimator(
        "word-counts", "raw counts of whitespace tokens, case kept, no idf, no normalization")),
    SurfaceBaseline("length-tokens", _lengths_of(token_lengths), _surface_estimator(
        "length-tokens", "whitespace tokens per sentence: scaled count + one indicator per "
                         "count")),
    SurfaceBaseline("length-chars", _lengths_of(char_lengths), _surface_estimator(
        "length-chars", "characters per sentence: scaled count + one indicator per count")),
    SurfaceBaseline("char-ngrams", char_ngram_matrix, _surface_estimator(
        "char-ngrams", "TF-IDF of character 1-4-grams across spaces, case kept")),
    SurfaceBaseline("word-bigrams", word_bigram_matrix, _surface_estimator(
        "word-bigrams", "TF-IDF of adjacent whitespace-token pairs, case kept")),
    SurfaceBaseline("word-position", word_position_matrix, _surface_estimator(
        "word-position", "one indicator per (position from the start, whitespace token)")),
    SurfaceBaseline("first-last-word", first_last_matrix, _surface_estimator(
        "first-last-word", "one indicator per first word and per last word (tokens with a "
                           "letter or digit), case kept")),
    SurfaceBaseline("function-words", function_word_matrix, _surface_estimator(
        "function-words", "counts of each Spanish function word (lower-cased), of tokens "
                          "ending in -s and of each punctuation mark: scaled count + one "
                          "indicator per count")),
)}, names=SURFACE_BASELINES)

def get_baseline(name: str) -> SurfaceBaseline:
    """The baseline called ``name``; an unknown name is an :class:`OptionError` naming
    ``--baseline``."""
    names = parse_baselines(name)
    if len(names) != 1:
        raise OptionError(f"--baseline: name one baseline here, not {name!r}")
    return BASELINES[names[0]]


def fitted_matrix(data: TaskData, name: str) -> sp.csr_array:
    """The sparse rows of every sentence of a loaded task under baseline ``name``, fitted
    on the protocol's training split (every split when the protocol trains nothing)."""
    protocol = get_protocol(data.protocol)
    fit = [data.splits[protocol.train_split]] if protocol.train_split else [
        data.splits[n] for n in sorted(data.splits)]
    return BASELINES[name].matrix(data.sentences, sentence_ids(*fit))


#: the widest surface features ``probe --given`` takes (made dense beside the layer's):
#: the length baselines have a few hundred columns, bag-of-words ones tens of thousands
GIVEN_MAX_FEATURES = 20_000


def given_features(data: TaskData, name: str) -> Callable[[str], np.ndarray]:
    """``probe --given NAME``: a split's dense example features ``(1, n, F)`` (float32)
    from the surface baseline ``name``, fitted on the protocol's training split as the
    baseline itself fits them (:func:`evaluate_outcome`) and joined by the task's combiner.
    More than :data:`GIVEN_MAX_FEATURES` columns is an :class:`OptionError` naming
    ``--given`` (before anything of the task is trained)."""
    T = fitted_matrix(data, name)
    width = T.shape[1] * COMBINER_WIDTH[data.spec.combiner]
    if width > GIVEN_MAX_FEATURES:
        raise OptionError(f"--given {name}: {data.spec.id} would give {width} dense features "
                          f"(at most {GIVEN_MAX_FEATURES}); give a narrower baseline "
                          "(length-tokens, length-chars, function-words) or a layer")

    def features(split: str) -> np.ndarray:
        X = split_matrix(T, data.splits[split], data.spec.combiner)
        return np.asarray(X.toarray(), dtype=np.float32)[None]

    return features


# ----------------------------------------------------------------------------- protocols

def evaluate_outcome(data: TaskData, estimator: SurfaceLogReg, seed: int = DEFAULT_SEED,
                     baseline: str = DEFAULT_BASELINE) -> CellOutcome:
    """A baseline's outcome on one loaded task: its features through the probes' cell code
    (:func:`estratos.probe.cells.evaluate_groups`) with ``estimator``."""
    spec = data.spec
    T = fitted_matrix(data, baseline)

    def features(name: str):
        return [split_matrix(T, data.splits[name], spec.combiner)]

    def pairs(name: str):
        slots = data.splits[name].slots
        return [slot_matrix(T, slots[0])], [slot_matrix(T, slots[1])]

    [[outcome]] = evaluate_groups(data, features, pairs, 1, [seed], estimator)
    return outcome


def evaluate_task(data: TaskData, seed: int = DEFAULT_SEED, *,
                  l2_grid: Sequence[float] = DEFAULT_L2_GRID,
                  baseline: str = DEFAULT_BASELINE) -> ResultRecord:
    """Run one baseline on one loaded task; returns the result record (not written)."""
    return evaluate_cell(data, seed, get_baseline(baseline), l2_grid)[0]


def evaluate_cell(data: TaskData, seed: int, baseline: SurfaceBaseline,
                  l2_grid: Sequence[float] = DEFAULT_L2_GRID
                  ) -> Tuple[ResultRecord, CellOutcome]:
    """One cell of ``baseline`` on a loaded task: its record (not written; ``seconds`` the
    time it took) and its outcome (whose predictions :func:`estratos.probe.records.
    store_cells` stores). What each unit of a baseline grid runs per cell
    (:mod:`estratos.probe.grid.baselines`)."""
    spec = data.spec
    start = time.perf_counter()
    # one thread: these sparse problems are small, and OpenMP/BLAS threads on a busy machine
    # spin more than they compute (an lbfgs fit was measured 40x slower with them)
    estimator = baseline.estimator(l2_grid=tuple(l2_grid))
    with threadpool_limits(limits=1):
        outcome = evaluate_outcome(data, estimator, seed, baseline.name)
    seconds = time.perf_counter() - start
    record = cell_record(data, outcome, baseline.system, layer=None, pooling=None,
                         features=None, seed=seed,
                         classifier=classifier_record(data, estimator), seconds=seconds,
                         chance=chance_levels(data))
    log.info("baseline %s on %s seed %d: %s %s (%.1fs)", baseline.name, spec.id, seed,
             spec.metric, "n/a" if record.score is None else f"{record.score:.2f}", seconds)
    return record, outcome
