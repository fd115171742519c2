"""``estratos baseline``: a baseline with no linguistic knowledge (ODESIA's definition).

Tokens are the whitespace-separated pieces of the sentence as published (``str.split``; no
lower-casing, no punctuation splitting, no accents stripped), weighted by TF-IDF
(scikit-learn's ``TfidfVectorizer``: smoothed idf, l2-normalized rows). Nothing else is
known about the language, which is the point: ODESIA's Delta
(:mod:`estratos.report.odesia`) measures how far a system goes beyond this.

Per protocol:

- classification (``split``, ``kfold``, ``inner-kfold``): example features are built from the
  sparse sentence vectors with the task's own combiner (:data:`estratos.probe.features.
  COMBINERS`, e.g. ``[|u-v|, u*v]`` for pairs; an RST subtree is the mean of its EDU
  vectors), and a logistic regression (scikit-learn, saga) is trained through the SAME
  protocol functions as the probes (:mod:`estratos.probe.protocols`: same splits, same folds,
  same seeds, L2 chosen on dev accuracy). The L2 grid is SentEval's ``1e-5 .. 1e-2``; as
  scikit-learn sums the loss over examples while SentEval's weight decay applies to the mean
  loss, ``C = 1 / (L2 * n_train)`` makes the two penalties equal. Tasks that turn
  regularization off for the neural probes (``noreg``) still use the grid: an unregularized
  linear model on sparse TF-IDF only memorizes.
- ``cosine`` (STS): Pearson/Spearman of the TF-IDF cosine of the two sentences vs gold, per
  subset, then their size-weighted mean (as the probes report). With no training data, the
  vectorizer is fitted on all the task's sentences.
- ``relatedness`` (SICK-R): Pearson/Spearman of the cosine vs gold on test; ``mse`` uses a
  least-squares line from cosine to gold fitted on train (correlations do not depend on it).

The vectorizer is fitted on the training sentences (``inner-kfold``: the whole pool, whose
IDF then also sees the held-out folds' words; IDF uses no labels). Results use the probe
schema with ``kind: "baseline"``, model ``baseline:tfidf`` and ``layer``/``pooling`` null.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import scipy.sparse as sp
from scipy.stats import pearsonr, spearmanr
# imported at module level on purpose: the BLAS/OpenMP libraries must be loaded before
# threadpool_limits is entered, or the limit does not reach them
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from estratos import __version__
from estratos.errors import OptionError
from estratos.probe import protocols
from estratos.probe.features import COMBINERS
from estratos.probe.settings import DEFAULT_L2_GRID, parse_seeds, resolve_settings
from estratos.results import ResultRecord, ResultsStore, primary_score
from estratos.results.record import utc_now
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


def row_cosine(U: sp.csr_array, V: sp.csr_array) -> np.ndarray:
    """Row-wise cosine of two sparse matrices (0 where a row is empty)."""
    num = np.asarray(U.multiply(V).sum(axis=1)).ravel()
    nu = np.sqrt(np.asarray(U.multiply(U).sum(axis=1)).ravel())
    nv = np.sqrt(np.asarray(V.multiply(V).sum(axis=1)).ravel())
    den = nu * nv
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


# ----------------------------------------------------------------------------- estimator

class TfidfLogReg:
    """Logistic regressions over an L2 grid, with the interface the protocols expect.

    ``fit(X, y, X_dev, y_dev, l2)``: ``X`` a list of G sparse feature groups, ``l2`` a grid
    ``(R,)`` or table ``(G, R)``; one model per (group, L2) with ``C = 1 / (L2 * n)``.
    ``dev_score_`` (G, R) is dev accuracy (fraction), ``epochs_`` the solver's epochs.

    The solver is saga (seeded by ``seed``): lbfgs keeps 2 x 10 copies of the whole
    classes x vocabulary coefficient matrix, 6.8 GB on WordContent's 1000 classes, while
    saga needs one and reached the same accuracy in a fraction of the time on every task
    measured.
    """

    def __init__(self, classes: Sequence[int], seed: int = 1111, max_iter: int = MAX_ITER,
                 tol: float = TOL) -> None:
        self.classes = np.asarray(classes)
        self.seed = seed
        self.max_iter = max_iter
        self.tol = tol

    def _one(self, X, y, l2: float):
        present = np.unique(y)
        if len(present) < 2:  # a fold with one class: predict it (LogisticRegression refuses)
            return _Constant(present[0] if len(present) else self.classes[0]), 0
        C = 1.0 / (max(float(l2), 1e-12) * max(len(y), 1))
        model = LogisticRegression(C=C, max_iter=self.max_iter, tol=self.tol, solver="saga",
                                   random_state=self.seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(X, y)
        if any("converge" in str(w.message) for w in caught):
            log.info("logistic regression (C=%.3g) stopped at %d epochs before "
                     "converging", C, self.max_iter)
        return model, int(np.max(model.n_iter_))

    def fit(self, X, y, X_dev, y_dev, l2) -> "TfidfLogReg":
        groups = list(X)
        table = np.asarray(l2, dtype=np.float64)
        if table.ndim == 1:
            table = np.tile(table[None, :], (len(groups), 1))
        y = np.asarray(y)
        self.models_ = []
        self.dev_score_ = np.zeros(table.shape)
        self.epochs_ = np.zeros(table.shape, dtype=np.int64)
        for g, Xg in enumerate(groups):
            row = []
            for r, value in enumerate(table[g]):
                model, iters = self._one(Xg, y, value)
                row.append(model)
                self.epochs_[g, r] = iters
                if len(y_dev):
                    self.dev_score_[g, r] = float(np.mean(model.predict(X_dev[g]) ==
                                                          np.asarray(y_dev)))
            self.models_.append(row)
        return self

    def predict(self, X) -> np.ndarray:
        return np.stack([np.stack([m.predict(Xg) for m in row])
                         for Xg, row in zip(list(X), self.models_)])


@dataclass(frozen=True)
class _Constant:
    """The model of a training part that holds a single class (a tiny fold): predict it."""

    label: Any

    def predict(self, X) -> np.ndarray:
        return np.full(X.shape[0], self.label)


# ----------------------------------------------------------------------------- protocols

def _pearson_spearman(pred: np.ndarray, gold: np.ndarray) -> Tuple[float, float]:
    if len(gold) < 2 or np.ptp(pred) == 0 or np.ptp(gold) == 0:
        return 0.0, 0.0  # undefined correlation: reported as 0, as the probes do
    p = float(pearsonr(pred, gold)[0])
    s = float(spearmanr(pred, gold).correlation)
    return (p if np.isfinite(p) else 0.0), (s if np.isfinite(s) else 0.0)


def _cosine_task(data: TaskData) -> protocols.CellOutcome:
    """STS: per-subset correlations of the TF-IDF cosine, then plain and weighted means."""
    splits = [data.splits[name] for name in sorted(data.splits)]
    T = tfidf_matrix(data.sentences, sentence_ids(*splits))
    per: Dict[str, Dict[str, Any]] = {}
    for name, split in zip(sorted(data.splits), splits):
        sims = row_cosine(slot_matrix(T, split.slots[0]), slot_matrix(T, split.slots[1]))
        p, s = _pearson_spearman(sims, np.asarray(split.labels, dtype=np.float64))
        per[name] = {"pearson": p, "spearman": s, "n": len(split)}
    sizes = np.array([v["n"] for v in per.values()], dtype=np.float64)
    test: Dict[str, Any] = {}
    for metric in ("pearson", "spearman"):
        vals = np.array([v[metric] for v in per.values()])
        test[f"{metric}_mean"] = float(vals.mean())
        test[f"{metric}_wmean"] = float((vals * sizes).sum() / sizes.sum())
        test[metric] = test[f"{metric}_wmean"]
    test["subsets"] = per
    return protocols.CellOutcome(l2=None, dev=None, test=test)


def _relatedness_task(data: TaskData) -> protocols.CellOutcome:
    """SICK-R: cosine vs gold; mse through a line fitted on train."""
    T = tfidf_matrix(data.sentences, sentence_ids(data.splits["train"]))

    def cos(split: Split) -> np.ndarray:
        return row_cosine(slot_matrix(T, split.slots[0]), slot_matrix(T, split.slots[1]))

    train, dev, test = (data.splits[k] for k in ("train", "dev", "test"))
    gold_tr = np.asarray(train.labels, dtype=np.float64)
    c_tr = cos(train)
    slope, intercept = (np.polyfit(c_tr, gold_tr, 1) if np.ptp(c_tr) > 0
                        else (0.0, float(gold_tr.mean())))
    c_te, gold_te = cos(test), np.asarray(test.labels, dtype=np.float64)
    p, s = _pearson_spearman(c_te, gold_te)
    mse = float(np.mean((slope * c_te + intercept - gold_te) ** 2))
    dev_p, _ = _pearson_spearman(cos(dev), np.asarray(dev.labels, dtype=np.float64))
    return protocols.CellOutcome(l2=None, dev={"pearson": dev_p},
                                 test={"pearson": p, "spearman": s, "mse": mse})


def _classification_task(data: TaskData, seed: int, l2_grid: Sequence[float], k: int,
                         validation_split: float) -> protocols.CellOutcome:
    """Logistic regression through the probes' protocol functions."""
    spec = data.spec
    fit_split = "all" if data.protocol == "inner-kfold" else "train"
    T = tfidf_matrix(data.sentences, sentence_ids(data.splits[fit_split]))

    def xy(name: str):
        split = data.splits[name]
        return [split_matrix(T, split, spec.combiner)], np.asarray(split.labels)

    classes = list(range(len(data.labels)))
    wants_f1 = spec.metric == "f1" or "f1" in spec.extra_metrics
    positive = 1 if wants_f1 and len(data.labels) == 2 else None  # F1 of the second label

    def make() -> TfidfLogReg:
        return TfidfLogReg(classes, seed=seed)

    if data.protocol == "split":
        outcomes = protocols.split_protocol(make, xy("train"), xy("dev"), xy("test"),
                                            l2_grid, positive=positive)
    elif data.protocol == "kfold":
        outcomes = protocols.kfold_protocol(make, xy("train"), xy("test"), l2_grid, k=k,
                                            seed=seed, validation_split=validation_split,
                                            positive=positive)
    else:
        outcomes = protocols.inner_kfold_protocol(make, xy("all"), l2_grid, k=k, seed=seed,
                                                  validation_split=validation_split,
                                                  positive=positive)
    return outcomes[0]


def classifier_record(data: TaskData, l2_grid: Sequence[float]) -> Dict[str, Any]:
    """The ``classifier`` object of a baseline record (what was done, for the reader)."""
    if data.protocol in ("cosine", "relatedness"):
        return {"name": CLASSIFIER_NAME, "method": "cosine", "tokenizer": "whitespace",
                "lowercase": False}
    return {"name": CLASSIFIER_NAME, "method": "logistic-regression", "solver": "saga",
            "tol": TOL, "tokenizer": "whitespace", "lowercase": False, "max_iter": MAX_ITER,
            "l2_grid": list(l2_grid), "C": "1 / (l2 * n_train)"}


def evaluate_task(data: TaskData, seed: int = 1111, *,
                  l2_grid: Sequence[float] = DEFAULT_L2_GRID) -> ResultRecord:
    """Run the baseline on one loaded task; returns the result record (not written)."""
    spec = data.spec
    settings = resolve_settings(spec.classifier, task=spec.id)
    start = time.perf_counter()
    # one thread: these sparse problems are small, and OpenMP/BLAS threads on a busy machine
    # spin more than they compute (an lbfgs fit was measured 40x slower with them)
    with threadpool_limits(limits=1):
        if data.protocol == "cosine":
            outcome = _cosine_task(data)
        elif data.protocol == "relatedness":
            outcome = _relatedness_task(data)
        else:
            outcome = _classification_task(data, seed, l2_grid, settings.kfold,
                                           settings.validation_split)
    seconds = time.perf_counter() - start
    score = primary_score(spec.metric, outcome.test)
    log.info("baseline %s seed %d: %s %s (%.1fs)", spec.id, seed, spec.metric,
             "n/a" if score is None else f"{score:.2f}", seconds)
    return ResultRecord(
        kind="baseline", task=spec.id, suite=spec.suite, name=spec.name, group=spec.group,
        language=spec.language, layer=None, pooling=None, seed=int(seed),
        protocol=data.protocol, fallback=data.fallback,
        classifier=classifier_record(data, l2_grid), metric=spec.metric, score=score,
        l2=outcome.l2, dev=outcome.dev, test=outcome.test, sizes=data.sizes,
        epochs=outcome.epochs, seconds=round(seconds, 3), model=BASELINE_MODEL,
        revision=BASELINE_REVISION, cache=None, estratos_version=__version__,
        created=utc_now())


def _key(spec: TaskSpec, seed: int) -> Tuple[Any, ...]:
    return (spec.id, None, None, seed, CLASSIFIER_NAME, BASELINE_MODEL, BASELINE_REVISION)


def run_baseline(specs: Sequence[TaskSpec], data_dirs: Any,
                 out: Union[str, os.PathLike], *, seeds: Iterable[int] = (1111,),
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
        from estratos.tasks import load_task as loader
    store = ResultsStore(out)
    done = set() if overwrite else store.done_keys()
    written: List[ResultRecord] = []
    for spec in specs:
        todo = [s for s in seeds if _key(spec, s) not in done]
        if not todo:
            log.info("baseline %s: every seed already in %s; skipped", spec.id, out)
            continue
        data = loader(spec, data_dirs)
        for seed in todo:
            written += store.append([evaluate_task(data, seed)], skip_done=not overwrite)
    return written


def baseline_tasks(tasks: Optional[str], out: Union[str, os.PathLike], *,
                   data_dir: Sequence[str] = (), task_files: Sequence[str] = (),
                   seeds: Union[str, Sequence[int]] = "1111",
                   overwrite: bool = False) -> List[ResultRecord]:
    """``estratos baseline`` as a function: task ids / suites (plus ``--task-file`` specs)
    and data folders in their command-line forms, then :func:`run_baseline`."""
    from estratos.tasks import DataDirs, load_task_file, select_tasks

    extra = [load_task_file(p) for p in task_files]
    if tasks and str(tasks).strip():
        specs = select_tasks(str(tasks), extra=extra)
    elif extra:
        specs = extra
    else:
        raise OptionError("--tasks: give task ids, suites or suite:GROUP (or --task-file)")
    dirs = DataDirs.parse(list(data_dir))
    dirs.check(specs)
    return run_baseline(specs, dirs, out, seeds=parse_seeds(seeds),
                        overwrite=overwrite)
