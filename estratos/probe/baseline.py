"""``estratos baseline``: a baseline with no linguistic knowledge (ODESIA's definition).

Tokens are the whitespace-separated pieces of the sentence as published (``str.split``; no
lower-casing, no punctuation splitting, no accents stripped), weighted by TF-IDF
(scikit-learn's ``TfidfVectorizer``: smoothed idf, l2-normalized rows). Nothing else is
known about the language, which is the point: ODESIA's Delta
(:mod:`estratos.report.odesia`) measures how far a system goes beyond this.

Per protocol (:mod:`estratos.protocols`; the baseline asks the protocol, never its name):

- classification protocols (``split``, ``kfold``, ``inner-kfold``): example features are built
  from the sparse sentence vectors with the task's own combiner (:data:`estratos.probe.features.
  COMBINERS`, e.g. ``[|u-v|, u*v]`` for pairs; an RST subtree is the mean of its EDU
  vectors), and the probes' logistic-regression grid (scikit-learn, here with saga) is trained
  by the probes' own cell code and protocol objects (same splits, same folds, same seeds, L2
  chosen on dev accuracy): the baseline is an estimator (:class:`TfidfLogReg`) with its own
  features. The L2 grid is SentEval's ``1e-5 .. 1e-2``; as scikit-learn sums the loss over
  examples while SentEval's weight decay applies to the mean loss, ``C = 1 / (L2 * n_train)``
  makes the two penalties equal (:class:`estratos.probe.classifiers.LogisticGrid`). Tasks that turn
  regularization off for the neural probes (``noreg``) still use the grid: an unregularized
  linear model on sparse TF-IDF only memorizes.
- score protocols: the protocol is evaluated with nothing trained, on the TF-IDF cosine of
  the two sentences. ``cosine`` (STS): Pearson/Spearman vs gold per subset, then their
  size-weighted mean (as the probes report). ``relatedness`` (SICK-R): Pearson/Spearman of
  the cosine vs gold on test; ``mse`` uses a least-squares line from cosine to gold fitted on
  train (correlations do not depend on it). An undefined correlation is null.

The vectorizer is fitted on the protocol's training split (``inner-kfold``: the whole pool,
whose IDF then also sees the held-out folds' words; IDF uses no labels; ``cosine``, which
trains nothing: every sentence of the task). Results use the probe
schema with ``kind: "baseline"``, model ``baseline:tfidf`` and ``layer``/``pooling`` null.
"""

from __future__ import annotations

import logging
import os
import time
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import numpy as np
import scipy.sparse as sp
# imported at module level on purpose: the BLAS/OpenMP libraries must be loaded before
# threadpool_limits is entered, or the limit does not reach them
from sklearn.feature_extraction.text import TfidfVectorizer
from threadpoolctl import threadpool_limits

from estratos.errors import OptionError
from estratos.probe.features import COMBINERS
from estratos.probe.cells import classifier_record, evaluate_groups
from estratos.probe.classifiers import LogisticGrid
from estratos.probe.records import System, cell_record, store_cells
from estratos.options import parse_seeds
from estratos.protocols import CellOutcome, get_protocol
from estratos.vocab import DEFAULT_KFOLD, DEFAULT_L2_GRID, DEFAULT_SEED, VALIDATION_SPLIT
from estratos.results import ResultRecord, ResultsStore
from estratos.tasks.types import SlotRefs, Split, TaskData, TaskSpec

log = logging.getLogger(__name__)

BASELINE_MODEL = "baseline:tfidf"
#: bump when the recipe changes, so old and new baseline results never count as one cell
BASELINE_REVISION = "tfidf-v1"
CLASSIFIER_NAME = "tfidf"
MAX_ITER = 1000
#: saga's stopping tolerance: 1e-4 took 4x longer on WordContent for the same dev accuracy
TOL = 1e-3


# ----------------------------------------------------------------------------- features

def whitespace_tokens(text: str) -> List[str]:
    """The baseline's tokenizer: split on whitespace, nothing else."""
    return text.split()


def make_vectorizer() -> TfidfVectorizer:
    """A TF-IDF vectorizer on whitespace tokens, case kept (see the module docstring)."""
    return TfidfVectorizer(tokenizer=whitespace_tokens, token_pattern=None, lowercase=False,
                           dtype=np.float64)


def sentence_ids(*splits: Split) -> np.ndarray:
    """Sorted unique sentence indices the examples of ``splits`` refer to."""
    ids = [refs.indices for split in splits for refs in split.slots]
    return np.unique(np.concatenate(ids)) if ids else np.zeros(0, dtype=np.int64)


def tfidf_matrix(sentences: Sequence[str], fit_ids: np.ndarray) -> sp.csr_array:
    """TF-IDF rows of every sentence, the vectorizer fitted on ``sentences[fit_ids]``."""
    vec = make_vectorizer()
    fit_text = [sentences[i] for i in fit_ids]
    try:
        vec.fit(fit_text)
    except ValueError:  # no token at all in the fitting sentences: every vector is empty
        return sp.csr_array((len(sentences), 1), dtype=np.float64)
    return sp.csr_array(vec.transform(list(sentences)))


def slot_matrix(T: sp.csr_array, refs: SlotRefs) -> sp.csr_array:
    """(n_examples, V): each slot's sentence row, or the mean of its sentences' rows."""
    counts = np.diff(refs.offsets).astype(np.float64)
    weights = np.repeat(1.0 / counts, np.diff(refs.offsets))
    A = sp.csr_array((weights, refs.indices, refs.offsets), shape=(len(refs), T.shape[0]))
    return sp.csr_array(A @ T)


def split_matrix(T: sp.csr_array, split: Split, combiner: str) -> sp.csr_array:
    """Sparse example features of one split with the task's combiner (32-bit indices, which
    every scikit-learn solver accepts)."""
    parts = COMBINERS[combiner]([slot_matrix(T, refs) for refs in split.slots])
    X = sp.csr_array(sp.hstack(parts, format="csr"))
    if X.nnz < np.iinfo(np.int32).max and X.shape[1] < np.iinfo(np.int32).max:
        X.indices = X.indices.astype(np.int32, copy=False)
        X.indptr = X.indptr.astype(np.int32, copy=False)
    return X


# ----------------------------------------------------------------------------- estimator

class TfidfLogReg(LogisticGrid):
    """The baseline's estimator: the probes' logistic-regression grid
    (:class:`~estratos.probe.classifiers.LogisticGrid`, ``C = 1 / (l2 * n)``) on sparse
    TF-IDF features, run by the probes' cell code
    (:func:`estratos.probe.cells.evaluate_groups`).

    The solver is saga (seeded by ``seed``): lbfgs keeps 2 x 10 copies of the whole
    classes x vocabulary coefficient matrix, 6.8 GB on WordContent's 1000 classes, while
    saga needs one and reached the same accuracy in a fraction of the time on every task
    measured. It keeps SentEval's L2 grid whatever the task says (``noreg`` does not apply,
    see the module docstring) and takes only the task's ``kfold``; score protocols train
    nothing with it (they use the TF-IDF cosine, recorded as :data:`COSINE_RECORD`).
    """

    name = CLASSIFIER_NAME
    solver = "saga"
    task_overrides = ("kfold",)
    trains_regressor = False
    _recorded = ("method", "solver", "tol", "tokenizer", "lowercase", "max_iter", "l2_grid",
                 "C")
    _facts: Mapping[str, Any] = {"method": "logistic-regression", "solver": "saga",
                                 "tokenizer": "whitespace", "lowercase": False,
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
        return dict(COSINE_RECORD)


# ----------------------------------------------------------------------------- protocols

#: what a baseline record says when nothing is trained (score protocols)
COSINE_RECORD = {"name": CLASSIFIER_NAME, "method": "cosine", "tokenizer": "whitespace",
                 "lowercase": False}


def evaluate_outcome(data: TaskData, estimator: TfidfLogReg, seed: int = DEFAULT_SEED
                     ) -> CellOutcome:
    """The baseline's outcome on one loaded task: its TF-IDF features through the probes'
    cell code (:func:`estratos.probe.cells.evaluate_groups`) with ``estimator``."""
    spec = data.spec
    protocol = get_protocol(data.protocol)
    fit = [data.splits[protocol.train_split]] if protocol.train_split else [
        data.splits[name] for name in sorted(data.splits)]
    T = tfidf_matrix(data.sentences, sentence_ids(*fit))

    def features(name: str):
        return [split_matrix(T, data.splits[name], spec.combiner)]

    def pairs(name: str):
        slots = data.splits[name].slots
        return [slot_matrix(T, slots[0])], [slot_matrix(T, slots[1])]

    [[outcome]] = evaluate_groups(data, features, pairs, 1, [seed], estimator)
    return outcome


def evaluate_task(data: TaskData, seed: int = DEFAULT_SEED, *,
                  l2_grid: Sequence[float] = DEFAULT_L2_GRID) -> ResultRecord:
    """Run the baseline on one loaded task; returns the result record (not written)."""
    return _evaluate(data, seed, l2_grid)[0]


#: what produced baseline cells (no cache, no device: the baseline reads text only)
BASELINE_SYSTEM = System(kind="baseline", model=BASELINE_MODEL, revision=BASELINE_REVISION)


def _evaluate(data: TaskData, seed: int, l2_grid: Sequence[float]
              ) -> Tuple[ResultRecord, CellOutcome]:
    spec = data.spec
    start = time.perf_counter()
    # one thread: these sparse problems are small, and OpenMP/BLAS threads on a busy machine
    # spin more than they compute (an lbfgs fit was measured 40x slower with them)
    estimator = TfidfLogReg(l2_grid=tuple(l2_grid))
    with threadpool_limits(limits=1):
        outcome = evaluate_outcome(data, estimator, seed)
    seconds = time.perf_counter() - start
    record = cell_record(data, outcome, BASELINE_SYSTEM, layer=None, pooling=None, seed=seed,
                         classifier=classifier_record(data, estimator), seconds=seconds)
    log.info("baseline %s seed %d: %s %s (%.1fs)", spec.id, seed, spec.metric,
             "n/a" if record.score is None else f"{record.score:.2f}", seconds)
    return record, outcome


def run_baseline(specs: Sequence[TaskSpec], data_dirs: Any,
                 out: Union[str, os.PathLike], *, seeds: Iterable[int] = (DEFAULT_SEED,),
                 overwrite: bool = False,
                 loader: Optional[Callable[[TaskSpec, Any], TaskData]] = None
                 ) -> List[ResultRecord]:
    """Run the TF-IDF baseline on ``specs`` and append one record per (task, seed) to ``out``.

    Cells already in ``out`` are skipped unless ``overwrite`` (then a new record is appended
    and readers keep the last). ``loader`` defaults to :func:`estratos.tasks.load_task`.
    Returns the records written.
    """
    seeds = parse_seeds(seeds)
    if not specs:
        raise OptionError("--tasks: no task selected")
    if loader is None:
        from estratos.tasks import load_task
        loader = load_task
    store = ResultsStore(out)
    done = set() if overwrite else store.done_keys()
    written: List[ResultRecord] = []
    for spec in specs:
        todo = [s for s in seeds if BASELINE_SYSTEM.key(spec.id, None, None, s,
                                                        CLASSIFIER_NAME) not in done]
        if not todo:
            log.info("baseline %s: every seed already in %s; skipped", spec.id, out)
            continue
        data = loader(spec, data_dirs)
        for seed in todo:
            record, outcome = _evaluate(data, seed, DEFAULT_L2_GRID)
            written += store_cells(out, data, [record], [outcome], overwrite=overwrite,
                                   store=store)
    return written


def baseline_tasks(tasks: Optional[str], out: Union[str, os.PathLike], *,
                   data_dir: Sequence[str] = (), task_files: Sequence[str] = (),
                   seeds: Union[str, Sequence[int]] = (DEFAULT_SEED,),
                   overwrite: bool = False) -> List[ResultRecord]:
    """``estratos baseline`` as a function: task ids / suites (plus ``--task-file`` specs)
    and data folders in their command-line forms, then :func:`run_baseline`."""
    from estratos.tasks.selection import select_specs

    seed_list = parse_seeds(seeds)
    selection = select_specs(tasks, task_files, data_dir)
    return run_baseline(selection.specs, selection.data_dirs, out, seeds=seed_list,
                        overwrite=overwrite)
