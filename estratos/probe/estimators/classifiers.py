"""The probe estimators: SentEval's classifier, a fast L-BFGS alternative and the SICK-R
regressor, registered by name (:mod:`estratos.probe.estimators.registry`).

Why this module holds parameters and not training code: the CLI imports it to list and check
``--classifier`` (importing it loads numpy only), while the batched trainer
(:mod:`estratos.probe.estimators.training`, torch) is imported when a model is first fitted. Every
hyper-parameter is a constructor parameter with SentEval's default written once, here;
everything else (task overrides, cost estimates, results) reads ``get_params()``.

Also here: :func:`score_distribution` (Tai et al.'s SICK-R target); the regressor's dev
score is :func:`estratos.stats.metrics.pearson_rows`. Torch's process switches live in
:mod:`estratos.probe.estimators.runtime`, the batched trainer in
:mod:`estratos.probe.estimators.training`.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

import numpy as np

from estratos.errors import OptionError
from estratos.probe.estimators.registry import (
    DEFAULT_CLASSIFIER,
    RecordedEstimator,
    check_features,
    estimator_names,
    get_estimator,
    register_estimator,
)
from estratos.probe.estimators.scaling import scaled, scaler_for
from estratos.stats.metrics import pearson_rows
from estratos.vocab import (
    DEFAULT_KFOLD,
    DEFAULT_L2_GRID,
    DEFAULT_SEED,
    RAW_FEATURES,
    STANDARDIZED_FEATURES,
    VALIDATION_SPLIT,
    Role,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: fixed per-example, per-model cost of one training step beyond its arithmetic (the
#: gather, activation and optimizer overheads that dominate tiny linear probes)
STEP_OVERHEAD = 4000.0
#: L-BFGS iterations assumed by the estimate (they stop well before the 1000 allowed)
LBFGS_ITERATIONS = 100

def l2_table(l2: Sequence[float] | np.ndarray, n_groups: int) -> np.ndarray:
    """``l2`` as (G, R): a 1-d grid is shared by every group."""
    table = np.asarray(l2, dtype=np.float64)
    if table.ndim == 0:
        table = table.reshape(1, 1)
    if table.ndim == 1:
        table = np.tile(table[None, :], (n_groups, 1))
    if table.shape[0] != n_groups or table.ndim != 2:
        raise ValueError(f"l2 must be (R,) or (G={n_groups}, R), got shape {table.shape}")
    return table


def _groups_array(x: Any) -> np.ndarray:
    """Features as a float32 numpy stack ``(G, n, F)`` (a 2-d matrix is one group)."""
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    a = np.ascontiguousarray(x, dtype=np.float32)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise ValueError(f"features must be (G, n, F) or (n, F), got shape {a.shape}")
    return a


def _sgd_cost(passes: int, width: int) -> float:
    """Per-example cost of minibatch training: a forward and backward pass (about 6 flops
    per weight) plus the fixed step overhead, for every pass."""
    return float(passes * (6.0 * width + STEP_OVERHEAD))


def _sgd_passes(est: Any) -> int:
    """Passes over the training examples a SentEval-style early-stopped fit makes, as the
    cost models assume: ``tenacity + 2`` rounds of ``epoch_size`` passes, at most
    ``max_epoch``."""
    return min(int(est.max_epoch), int(est.epoch_size) * (int(est.tenacity) + 2))


def _sgd_step_work(est: Any, width: int) -> Tuple[float, float]:
    """``(optimizer steps, flops)`` per training example of one minibatch fit (see
    :meth:`RecordedEstimator.step_work`)."""
    passes = _sgd_passes(est)
    return passes / max(1, int(est.batch_size)), passes * 6.0 * width


#: device types on which :meth:`SentEvalClassifier.fit_folds` trains the folds as one
#: program (elsewhere one after the other; its docstring says why)
FOLDS_AT_ONCE_DEVICES = ("cuda",)

#: what :meth:`SentEvalClassifier.fit_subsets` may early-stop on
STOP_ON = ("accuracy", "likelihood")


@register_estimator
class SentEvalClassifier(RecordedEstimator):
    """SentEval's PyTorch MLP/logistic probe, batched over G feature groups x R L2 values
    (x S seeds).

    ``fit(X, y, X_dev, y_dev, l2)`` with ``X (G, n, F)`` (or ``(n, F)``), int labels and
    ``l2`` a grid ``(R,)`` shared by all groups or a table ``(G, R)``; then ``predict(X)`` ->
    ``(G', R, n)`` labels from each model's best (dev-selected) weights. ``dev_score_`` holds
    the best dev accuracy (fraction) and ``epochs_`` the epochs run, both ``(G', R)``.
    ``seed`` is one seed (G' = G) or a sequence of S seeds trained together on the same data
    (G' = S x G, seed-major: group ``s * G + g``), each model exactly as trained alone.

    Every hyper-parameter is a constructor parameter (SentEval's defaults): the network
    (``nhid``, ``dropout``), the optimiser and schedule (``optim``, ``lr``, ``batch_size``,
    ``tenacity``, ``epoch_size``, ``max_epoch``) and what the protocols read from it
    (``l2_grid``, ``kfold``, ``validation_split``). ``n_classes`` None: from the labels.
    ``device``: where the tensor program runs (``cpu``, ``cuda:N``). ``features``: ``raw``
    (SentEval's protocol) or ``standardized`` with the statistics of the data ``fit`` gets
    (:mod:`estratos.probe.estimators.scaling`).
    """

    name = "senteval"
    summary = "SentEval's classifier, faithful to the published numbers"
    _recorded = ("nhid", "optim", "batch_size", "tenacity", "epoch_size", "max_epoch",
                 "dropout", "l2_grid")
    dev_score_: np.ndarray
    epochs_: np.ndarray
    l2_: np.ndarray

    def __init__(self, n_classes: Optional[int] = None, nhid: int = 0, dropout: float = 0.0,
                 optim: str = "adam", batch_size: int = 64, tenacity: int = 5,
                 epoch_size: int = 4, max_epoch: int = 200,
                 l2_grid: Sequence[float] = DEFAULT_L2_GRID, kfold: int = DEFAULT_KFOLD,
                 validation_split: float = VALIDATION_SPLIT,
                 seed: Union[int, Sequence[int]] = DEFAULT_SEED, lr: float = 1e-3,
                 device: Union[str, "torch.device"] = "cpu",
                 features: str = RAW_FEATURES) -> None:
        self.n_classes = n_classes
        self.nhid = nhid
        self.dropout = dropout
        self.optim = optim
        self.batch_size = batch_size
        self.tenacity = tenacity
        self.epoch_size = epoch_size
        self.max_epoch = max_epoch
        self.l2_grid = l2_grid
        self.kfold = kfold
        self.validation_split = validation_split
        self.seed = seed
        self.lr = lr
        self.device = device
        self.features = features
        #: after fit_folds: the fold order of the trained rows, or each fold's own fit
        self._folds: Any = None

    def _width(self, n_features: int, n_classes: int) -> int:
        hidden = int(self.nhid)
        return n_features * hidden + hidden * n_classes if hidden else n_features * n_classes

    def cost_per_example(self, n_features: int, n_classes: int) -> float:
        return _sgd_cost(_sgd_passes(self), self._width(n_features, n_classes))

    def step_work(self, n_features: int, n_classes: int) -> Tuple[float, float]:
        return _sgd_step_work(self, self._width(n_features, n_classes))

    def fit(self, X, y, X_dev, y_dev, l2) -> "SentEvalClassifier":
        from estratos.probe.estimators.training import seed_list

        return self._fit(X, y, X_dev, y_dev, l2, seed_list(self.seed), "accuracy")

    def fit_subsets(self, X, y, X_dev, y_dev, l2, subsets: Sequence[np.ndarray],
                    stop_on: str = "accuracy") -> "SentEvalClassifier":
        """Train, for each of the index arrays ``subsets`` (longest first), every (group, L2)
        model on those training examples only, all as one program (streams, subset-major:
        group ``s * G + g``), each as if trained alone on its subset with this ``seed``
        (same init, that subset's own example order, batch means and Adam steps). Why: MDL's
        block models (:mod:`estratos.probe.mdl`) are independent models on nested subsets.
        ``stop_on``: what early stopping keeps the best of, dev ``"accuracy"`` (SentEval)
        or dev ``"likelihood"`` (mean log-probability of the dev labels: what a code
        length needs, see :mod:`estratos.probe.mdl`); ``dev_score_`` holds it."""
        from estratos.probe.estimators.training import seed_list

        seeds = seed_list(self.seed)
        if len(seeds) != 1:
            raise ValueError("fit_subsets trains one seed")
        lengths = [len(s) for s in subsets]
        if not lengths or min(lengths) < 1 or lengths != sorted(lengths, reverse=True):
            raise ValueError("subsets must be non-empty and sorted longest first")
        if stop_on not in STOP_ON:
            raise ValueError(f"stop_on must be one of {', '.join(STOP_ON)}")
        return self._fit(X, y, X_dev, y_dev, l2, seeds * len(subsets), stop_on,
                         [np.asarray(s, dtype=np.int64) for s in subsets])

    def fit_folds(self, X, y, folds: Sequence[Tuple[np.ndarray, np.ndarray]], l2,
                  at_once: Optional[bool] = None) -> "SentEvalClassifier":
        """k-fold cross-validation's fits: for each ``(train, held_out)`` index pair of
        ``folds``, every (group, L2) model trained on ``X``'s ``train`` rows and
        early-stopping on its ``held_out`` rows; ``dev_score_``/``epochs_`` ``(K * G, R)``,
        fold-major in the order of ``folds`` (group ``k * G + g``; with S seeds, ``k * S * G
        + s * G + g``), each as when that fold is fitted alone with :meth:`fit` (at once:
        tested equal on the CPU; on CUDA a kernel may round a fold's products by how many
        folds share the program, so there it is equal to float rounding).

        ``at_once`` (None: on the devices of :data:`FOLDS_AT_ONCE_DEVICES`): the K folds'
        models are independent and start alike (same seed), so on raw features they can
        train as streams of one program (:meth:`fit_subsets`'s machinery, each stream on its
        own fold and its own held-out part), K times fewer steps. That pays where a step
        costs its launches (a GPU). On the CPU a fold's step already runs from the cache and
        K folds' batches at once spill it: on a 2-class, 8-layer-spec, 10-fold set of 1,800
        examples, 4.5 s fold after fold against 5.6 s at once (``bench/kfold_fits.py``).
        Standardized features are scaled with each fold's own training statistics, so there
        folds are always fitted one after the other."""
        from estratos.probe.estimators.training import seed_list, torch_device

        if not folds:
            raise ValueError("cross-validation needs at least one fold")
        x, y = _groups_array(X), np.asarray(y)
        if at_once is None:
            at_once = torch_device(self.device).type in FOLDS_AT_ONCE_DEVICES
        if (not at_once or len(seed_list(self.seed)) != 1
                or check_features(self.features, "features") != RAW_FEATURES):
            fits = [cast(SentEvalClassifier, self.fresh()).fit(x[:, tr], y[tr], x[:, te],
                                                              y[te], l2)
                    for tr, te in folds]
            self.dev_score_ = np.concatenate([f.dev_score_ for f in fits])
            self.epochs_ = np.concatenate([f.epochs_ for f in fits])
            self._folds = fits
            return self
        # the trainer takes subsets longest first; folds come back in their own order
        order = sorted(range(len(folds)), key=lambda i: -len(folds[i][0]))
        self._fit(x, y, x, y, l2, seed_list(self.seed) * len(folds), "accuracy",
                  [np.asarray(folds[i][0], dtype=np.int64) for i in order],
                  [np.asarray(folds[i][1], dtype=np.int64) for i in order])
        G = x.shape[0]
        back = np.concatenate([np.arange(G) + G * order.index(k) for k in range(len(folds))])
        self.dev_score_ = self.dev_score_[back]
        self.epochs_ = self.epochs_[back]
        self.l2_ = self.l2_[back]
        self._folds = back
        return self

    def _fit(self, X, y, X_dev, y_dev, l2, seeds: List[int], stop_on: str,
             subsets: Optional[List[np.ndarray]] = None,
             dev_subsets: Optional[List[np.ndarray]] = None) -> "SentEvalClassifier":
        import torch

        from estratos.probe.estimators.training import (
            StackedNet,
            cross_entropy_grad,
            torch_device,
            train_stacked,
        )

        x, x_dev = _fit_inputs(self, X, X_dev)
        self._folds = None
        device = torch_device(self.device)
        y = np.asarray(y, dtype=np.int64)
        y_dev_t = torch.from_numpy(np.asarray(y_dev, dtype=np.int64)).to(device)
        n_classes = self.n_classes or int(max(y.max(initial=0), y_dev_t.max().item()) + 1)
        table = np.tile(l2_table(l2, x.shape[0]), (len(seeds), 1))
        if len(y_dev_t) == 0:
            raise ValueError("early stopping needs at least one dev example")
        net = StackedNet(x.shape[0], table.shape[1], x.shape[2], n_classes, self.nhid,
                         self.dropout, seeds, device)
        onehot = torch.nn.functional.one_hot(torch.from_numpy(y), n_classes).to(torch.float32)

        def score(logits: torch.Tensor, rows: Optional[np.ndarray]) -> np.ndarray:
            labels = y_dev_t if rows is None else y_dev_t[torch.as_tensor(rows, device=device)]
            if stop_on == "likelihood":
                logp = torch.log_softmax(logits.to(torch.float64), dim=-1)
                index = labels[None, :, None, None].expand(*logp.shape[:3], 1)
                return logp.gather(-1, index)[..., 0].mean(dim=1).cpu().numpy()
            hits = logits.argmax(dim=-1) == labels[None, :, None]
            return hits.to(torch.float64).mean(dim=1).cpu().numpy()

        state = train_stacked(net, x, onehot, x_dev, table, grad_fn=cross_entropy_grad,
                       score_fn=score, batch_size=self.batch_size, epoch_size=self.epoch_size,
                       max_epoch=self.max_epoch, tenacity=self.tenacity, lr=self.lr,
                       subsets=subsets, dev_subsets=dev_subsets,
                       first_best=-math.inf if stop_on == "likelihood" else -1.0)
        self._state = state
        self.dev_score_ = state.dev
        self.epochs_ = state.epochs
        self.l2_ = table
        return self

    def predict(self, X) -> np.ndarray:
        """Labels ``(G', R, n)`` of every model's best weights (the argmax is taken chunk by
        chunk, so the logits of every row are never held at once)."""
        if isinstance(self._folds, list):  # fitted fold by fold (fit_folds)
            return np.concatenate([f.predict(X) for f in self._folds])
        labels = _best_logits(self, X, lambda z: z.argmax(dim=-1)).transpose(1, 2)
        return self._in_fold_order(labels.cpu().numpy())

    def log_proba(self, X) -> np.ndarray:
        """Natural-log class probabilities ``(G', R, n, C)`` of every model's best weights
        (log-softmax in float64: finite even where a probability underflows)."""
        import torch

        if isinstance(self._folds, list):
            return np.concatenate([f.log_proba(X) for f in self._folds])
        logits = _best_logits(self, X).to(torch.float64)
        return self._in_fold_order(torch.log_softmax(logits, dim=-1).transpose(1, 2).cpu()
                                   .numpy())

    def gold_log_proba(self, X, y) -> np.ndarray:
        """Natural-log probability ``(G', R, n)`` that every model's best weights give each
        row's label ``y`` (log-softmax in float64, chunk by chunk: the class probabilities of
        every row are never held at once; a label beyond the classes has probability 0)."""
        import torch

        if isinstance(self._folds, list):
            return np.concatenate([f.gold_log_proba(X, y) for f in self._folds])
        labels = torch.as_tensor(np.asarray(y, dtype=np.int64))
        start = [0]

        def gold(z: "torch.Tensor") -> "torch.Tensor":
            n = z.shape[1]
            rows = labels[start[0]:start[0] + n].to(z.device)
            start[0] += n
            lp = torch.log_softmax(z.to(torch.float64), dim=-1)  # (Ga, n, R, C)
            known = rows < lp.shape[-1]
            index = rows.clamp(max=lp.shape[-1] - 1).view(1, n, 1, 1)
            picked = lp.gather(-1, index.expand(lp.shape[0], n, lp.shape[2], 1))[..., 0]
            return torch.where(known.view(1, n, 1), picked, torch.full_like(picked, -np.inf))

        out = _best_logits(self, X, gold)  # (Ga, n, R)
        return self._in_fold_order(out.transpose(1, 2).cpu().numpy())

    def _in_fold_order(self, rows: np.ndarray) -> np.ndarray:
        """Per-model rows of a :meth:`fit_folds` fit in the order of its folds (the trainer
        ran them longest first); other fits' rows as they are."""
        return rows if self._folds is None else rows[self._folds]

    def score(self, X, y) -> np.ndarray:
        """Accuracy (fraction) ``(G', R)`` of every model."""
        return (self.predict(X) == np.asarray(y)[None, None, :]).mean(axis=-1)


@register_estimator
class RelatednessRegressor(RecordedEstimator):
    """Tai et al.'s SICK-R probe (as in SentEval), batched over G feature groups.

    A score ``y`` in [1, K] becomes a distribution over K classes (:func:`score_distribution`);
    ``Linear(F, K)`` + softmax is trained with MSE against it (Adam, batch 64, no L2); every
    ``epoch_size`` (50) passes the dev Pearson of the expected score picks the best model;
    stop after ``tenacity`` (3) non-improving rounds (cumulative count, checked as in the
    classifier) or ``max_epoch`` (1000) passes. ``predict(X)`` -> expected scores ``(G, n)``.
    Results record it under the ``--classifier`` name asked for (the run's cells belong to
    that classifier), with its fixed facts: linear, Adam, no dropout, no L2. ``features``:
    as for :class:`SentEvalClassifier`.
    """

    name = "senteval-relatedness"
    role = Role.REGRESSOR
    summary = "Tai et al.'s SICK-R regressor, as SentEval trains it"
    _recorded = ("nhid", "optim", "batch_size", "tenacity", "epoch_size", "max_epoch",
                 "dropout", "l2_grid")
    _facts: Mapping[str, Any] = {"nhid": 0, "optim": "adam", "dropout": 0.0, "l2_grid": (0.0,)}

    def __init__(self, n_classes: int = 5, batch_size: int = 64, tenacity: int = 3,
                 epoch_size: int = 50, max_epoch: int = 1000,
                 seed: Union[int, Sequence[int]] = DEFAULT_SEED, lr: float = 1e-3,
                 device: Union[str, "torch.device"] = "cpu",
                 features: str = RAW_FEATURES) -> None:
        self.n_classes = n_classes
        self.batch_size = batch_size
        self.tenacity = tenacity
        self.epoch_size = epoch_size
        self.max_epoch = max_epoch
        self.seed = seed
        self.lr = lr
        self.device = device
        self.features = features

    def cost_per_example(self, n_features: int, n_classes: int) -> float:
        return _sgd_cost(_sgd_passes(self), n_features * int(self.n_classes))

    def step_work(self, n_features: int, n_classes: int) -> Tuple[float, float]:
        return _sgd_step_work(self, n_features * int(self.n_classes))

    def fits_per_cell(self):
        return 1, 1  # no L2 grid, no folds

    def fit(self, X, scores, X_dev, dev_scores) -> "RelatednessRegressor":
        import torch

        from estratos.probe.estimators.training import (
            StackedNet,
            seed_list,
            soft_mse_grad,
            torch_device,
            train_stacked,
        )

        x, x_dev = _fit_inputs(self, X, X_dev)
        device = torch_device(self.device)
        seeds = seed_list(self.seed)
        target = torch.from_numpy(score_distribution(scores, self.n_classes).astype(np.float32))
        dev = np.asarray(dev_scores, dtype=np.float64)
        net = StackedNet(x.shape[0], 1, x.shape[2], self.n_classes, 0, 0.0, seeds, device)
        levels = torch.arange(1, self.n_classes + 1, dtype=torch.float64, device=device)

        def score(logits: torch.Tensor, rows: Optional[np.ndarray]) -> np.ndarray:
            target = dev if rows is None else dev[rows]
            yhat = torch.softmax(logits.to(torch.float64), dim=-1) @ levels  # (Ga, n, 1)
            r = pearson_rows(yhat.transpose(1, 2).cpu().numpy(), target)
            # early stopping compares these: an undefined dev correlation (constant
            # predictions) counts as no correlation
            return np.where(np.isnan(r), 0.0, r)

        state = train_stacked(net, x, target, x_dev, np.zeros((len(seeds) * x.shape[0], 1)),
                       grad_fn=soft_mse_grad, score_fn=score, batch_size=self.batch_size,
                       epoch_size=self.epoch_size, max_epoch=self.max_epoch,
                       tenacity=self.tenacity, lr=self.lr)
        self._state = state
        self.dev_score_ = state.dev[:, 0]
        self.epochs_ = state.epochs[:, 0]
        return self

    def predict(self, X) -> np.ndarray:
        """Expected scores ``(G', n)`` (G' = S x G with S seeds, seed-major)."""
        import torch

        logits = _best_logits(self, X)[:, :, 0]
        levels = torch.arange(1, self.n_classes + 1, dtype=torch.float64,
                              device=self._state.net.device)
        return (torch.softmax(logits.to(torch.float64), dim=-1) @ levels).cpu().numpy()


def _fit_inputs(estimator: Any, X: Any, X_dev: Any) -> "tuple[torch.Tensor, torch.Tensor]":
    """Fit ``estimator``'s feature scaling on ``X`` (its ``scale_``, from its ``features``
    mode) and give both parts as scaled feature groups ``(G, n, F)``: what every
    batch-trained estimator here starts a fit from."""
    from estratos.probe.estimators.training import as_groups

    estimator.scale_ = scaler_for(estimator.features, X)
    return as_groups(scaled(X, estimator.scale_)), as_groups(scaled(X_dev, estimator.scale_))


def _best_logits(estimator: Any, X: Any,
                 reduce: Optional[Callable[["torch.Tensor"], "torch.Tensor"]] = None
                 ) -> "torch.Tensor":
    """Eval-mode logits of every fitted model's best weights on ``X``, scaled as the fit
    scaled its data (``reduce``: see
    :meth:`~estratos.probe.estimators.training.StackedNet.logits`)."""
    from estratos.probe.estimators.training import as_groups

    net = estimator._state.net
    groups = None if len(net.seeds) == 1 else net.stream_group
    return net.logits(as_groups(scaled(X, estimator.scale_)), estimator._state.best, groups,
                      reduce)


def score_distribution(scores: Sequence[float], n_classes: int = 5) -> np.ndarray:
    """Tai et al.'s target: score y in [1, K] -> p with p[floor(y)] = y - floor(y) and
    p[floor(y)-1] = floor(y) - y + 1 (1-indexed classes), so an integer y is one-hot."""
    y = np.asarray(scores, dtype=np.float64)
    if y.size and (y.min() < 1 or y.max() > n_classes):
        raise ValueError(f"relatedness scores must lie in [1, {n_classes}]")
    out = np.zeros((len(y), n_classes), dtype=np.float64)
    fl = np.floor(y).astype(np.int64)
    rows = np.arange(len(y))
    frac = y - fl
    upper = fl < n_classes  # y == K has no class above it
    out[rows[upper], fl[upper]] = frac[upper]
    out[rows, fl - 1] = 1.0 - frac
    return out


class LogisticGrid(RecordedEstimator):
    """Logistic regressions (scikit-learn) over an L2 grid, with the interface the protocols
    expect: the one place an L2 value becomes scikit-learn's ``C``.

    ``fit(X, y, X_dev, y_dev, l2)``: ``X`` is G feature groups (a dense ``(G, n, F)`` stack,
    or a list of G matrices, sparse ones included), ``l2`` a grid ``(R,)`` or table
    ``(G, R)``; one model per (group, L2). The objective is mean cross-entropy +
    ``l2/2 * ||W||^2``, i.e. ``C = 1 / (l2 * n)`` (scikit-learn sums the loss over examples
    where SentEval's weight decay applies to the mean). Dev data only chooses L2 afterwards
    (no early stopping); ``dev_score_`` (G, R) is dev accuracy (fraction), ``epochs_`` the
    solver's iterations, ``capped_`` the fits that stopped at ``max_iter`` (results record
    it, see :func:`estratos.protocols.base.capped_at`). A training part holding one class (a
    tiny fold) predicts it.
    Subclasses fix the ``solver`` and their parameters (``n_classes``, ``max_iter``, ``tol``,
    ``seed``...).
    """

    #: scikit-learn's solver
    solver = "lbfgs"
    #: ``raw``, or ``standardized`` (dense features only) with the training part's mean and
    #: standard deviation (:mod:`estratos.probe.estimators.scaling`); subclasses may take it
    #: as a parameter
    features = RAW_FEATURES
    #: fit the L2 values from the strongest to the weakest, each from the previous solution
    warm_path = False
    # set by the subclasses' constructors
    max_iter: int
    tol: float
    seed: int

    def _blas_limit(self) -> Any:
        """The BLAS threads the fits may use (the caller's setting by default)."""
        return contextlib.nullcontext()

    @staticmethod
    def _groups(X: Any) -> Any:
        """A list of matrices stays one (sparse features); anything else is a dense stack."""
        return list(X) if isinstance(X, list) else _groups_array(X)

    def fit(self, X, y, X_dev, y_dev, l2) -> "LogisticGrid":
        import warnings

        from sklearn.linear_model import LogisticRegression

        x, x_dev = self._groups(X), self._groups(X_dev)
        y = np.asarray(y, dtype=np.int64)
        y_dev = np.asarray(y_dev, dtype=np.int64)
        table = l2_table(l2, len(x))
        G, R = table.shape
        self.models_: List[List[Any]] = [[None] * R for _ in range(G)]
        self.dev_score_ = np.zeros((G, R))
        self.epochs_ = np.zeros((G, R), dtype=np.int64)
        self.capped_ = np.zeros((G, R), dtype=bool)
        self._constant = None
        classes = np.unique(y)
        if len(classes) < 2:  # a degenerate fold: every prediction is the one class
            self._constant = int(classes[0]) if len(classes) else 0
            self.dev_score_[:] = (y_dev == self._constant).mean() if len(y_dev) else 0.0
            return self
        self.scale_ = [scaler_for(self.features, x[g]) for g in range(G)]
        with self._blas_limit():
            for g in range(G):
                xg = scaled(x[g], self.scale_[g], np.float64)
                xg_dev = scaled(x_dev[g], self.scale_[g], np.float64) if len(y_dev) else None
                order = (sorted(range(R), key=lambda r: -table[g, r]) if self.warm_path
                         else range(R))
                start: Any = None
                for r in order:
                    c = 1.0 / (max(table[g, r], 1e-12) * len(y))
                    clf = LogisticRegression(C=c, max_iter=self.max_iter, tol=self.tol,
                                             solver=self.solver, random_state=self.seed,
                                             warm_start=self.warm_path)
                    if start is not None:
                        clf.coef_, clf.intercept_ = start.coef_.copy(), start.intercept_.copy()
                    with warnings.catch_warnings(record=True):
                        warnings.simplefilter("always")
                        clf.fit(xg, y)
                    start = clf if self.warm_path else None
                    self.models_[g][r] = clf
                    self.epochs_[g, r] = int(np.max(clf.n_iter_))
                    self.capped_[g, r] = self.epochs_[g, r] >= self.max_iter
                    if self.capped_[g, r]:
                        log.info("%s: logistic regression (C=%.3g) stopped at %d iterations "
                                 "before converging", self.name, c, self.max_iter)
                    if xg_dev is not None:
                        self.dev_score_[g, r] = float((clf.predict(xg_dev) == y_dev).mean())
        return self

    def predict(self, X) -> np.ndarray:
        x = self._groups(X)
        G, R = self.dev_score_.shape
        if self._constant is not None:
            return np.full((G, R, x[0].shape[0]), self._constant, dtype=np.int64)
        return np.stack([np.stack([self.models_[g][r].predict(
            scaled(x[g], self.scale_[g], np.float64))
                                   for r in range(R)])
                         for g in range(G)]).astype(np.int64)

    def gold_log_proba(self, X, y) -> np.ndarray:
        """Natural-log probability ``(G, R, n)`` that every model gives each row's label
        ``y`` (0 probability, -inf, for a class the fit never saw)."""
        y = np.asarray(y, dtype=np.int64)
        x = self._groups(X)
        G, R = self.dev_score_.shape
        out = np.full((G, R, len(y)), -np.inf)
        if self._constant is not None:
            out[..., y == self._constant] = 0.0
            return out
        for g in range(G):  # one model's (n, classes) at a time, never (G, R, n, C)
            xg = scaled(x[g], self.scale_[g], np.float64)
            for r in range(R):
                model = self.models_[g][r]
                column = {int(c): i for i, c in enumerate(model.classes_)}
                seen = np.array([label in column for label in y.tolist()], dtype=bool)
                with np.errstate(divide="ignore"):
                    lp = model.predict_log_proba(xg)
                cols = np.array([column[int(label)] for label in y[seen]], dtype=np.int64)
                out[g, r, seen] = lp[np.flatnonzero(seen), cols]
        return out

    def log_proba(self, X) -> np.ndarray:
        """Natural-log class probabilities ``(G, R, n, C)`` of every model, columns in class
        order (``C``: ``n_classes``, or the largest class seen + 1); a class the fit never
        saw has probability 0 (-inf), as has every class but the one a one-class fit
        predicts."""
        x = self._groups(X)
        G, R = self.dev_score_.shape
        n = x[0].shape[0]
        if self._constant is not None:
            C = max(int(getattr(self, "n_classes", None) or 0), self._constant + 1)
            out = np.full((G, R, n, C), -np.inf)
            out[..., self._constant] = 0.0
            return out
        seen = self.models_[0][0].classes_
        C = max(int(getattr(self, "n_classes", None) or 0), int(seen.max()) + 1)
        out = np.full((G, R, n, C), -np.inf)
        for g in range(G):
            xg = scaled(x[g], self.scale_[g], np.float64)
            for r in range(R):
                model = self.models_[g][r]
                with np.errstate(divide="ignore"):
                    out[g, r][:, model.classes_] = model.predict_log_proba(xg)
        return out

    def score(self, X, y) -> np.ndarray:
        return (self.predict(X) == np.asarray(y)[None, None, :]).mean(axis=-1)


#: L-BFGS stops when the largest gradient component of the mean objective is below this.
#: Dev accuracy moves in steps of 1/n_dev (0.18 points on RST's 570 dev examples); on
#: standardized features, fits stopped at 1e-3 chose dev scores within 1.7 points of fits
#: run to 1e-7 on a collinear toy (and 5-20x fewer iterations), see docs/probe.md
LBFGS_TOL = 1e-3
#: the iteration cap; a fit that reaches it is flagged in its result (``capped``)
LBFGS_MAX_ITER = 1000


@register_estimator
class LBFGSClassifier(LogisticGrid):
    """Full-batch multinomial logistic regression (L-BFGS), same interface as SentEval's.

    For fast exploration, not for comparison with published numbers (:class:`LogisticGrid`).
    The objective is mean
    cross-entropy + ``l2/2 * ||W||^2`` (scikit-learn with ``C = 1 / (l2 * n)``) on features
    standardized with the training part's mean and standard deviation; dev data is only used
    to choose L2 afterwards (no early stopping). ``epochs_`` = L-BFGS iterations; ``capped_``
    marks fits that stopped at ``max_iter``. A task's network and schedule overrides
    (``nhid``, ``tenacity``...) do not apply.

    Why standardized, warm-started and at ``tol`` 1e-3: sentence vectors' features are nearly
    collinear and far from centred, so raw L-BFGS would crawl to its cap for every L2 value
    (684 s for 4 RST cells, measured). Standardizing makes the problem well conditioned; the L2
    values are fitted from the strongest to the weakest, each starting from the previous
    solution (a path: the next optimum is close); and the tolerance matches the precision of the
    dev accuracy that picks L2, not float precision.
    """

    name = "lbfgs"
    summary = "full-batch logistic regression, for fast exploration"
    solver = "lbfgs"
    warm_path = True
    #: ``optim`` lbfgs makes it ``deterministic``: L-BFGS from a zero start on the same data
    #: gives the same model whatever the seed (scikit-learn's lbfgs solver draws no random
    #: numbers; :data:`estratos.vocab.SEED_FREE_OPTIMIZERS`)
    _recorded = ("nhid", "optim", "max_iter", "tol", "l2_grid", "path")
    _facts: Mapping[str, Any] = {"nhid": 0, "optim": "lbfgs",
                                 "path": "warm-start, strongest L2 first"}

    def __init__(self, n_classes: Optional[int] = None, max_iter: int = LBFGS_MAX_ITER,
                 tol: float = LBFGS_TOL, l2_grid: Sequence[float] = DEFAULT_L2_GRID,
                 kfold: int = DEFAULT_KFOLD, validation_split: float = VALIDATION_SPLIT,
                 seed: int = DEFAULT_SEED, features: str = STANDARDIZED_FEATURES) -> None:
        self.n_classes = n_classes
        self.max_iter = max_iter
        self.tol = tol
        self.l2_grid = l2_grid
        self.kfold = kfold
        self.validation_split = validation_split
        self.seed = seed
        self.features = features

    def cost_per_example(self, n_features: int, n_classes: int) -> float:
        return 2.0 * n_features * n_classes * LBFGS_ITERATIONS  # full-batch BLAS: no step cost

    def _blas_limit(self) -> Any:
        """As many BLAS threads as torch's (the run's ``--threads``, pinned by
        :func:`~estratos.probe.estimators.runtime.torch_runtime`): more, on shared cores, spin
        more than they compute (as for the baseline)."""
        import torch
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=torch.get_num_threads())


def seeds_cannot_differ(classifier: Optional[str], protocol: Optional[str]) -> bool:
    """Whether cells of ``classifier`` (a registered name) under ``protocol`` are the same
    for every seed: :func:`estratos.protocols.seeds_cannot_differ` of its
    :attr:`RecordedEstimator.deterministic`. An unknown name (another version's) may differ."""
    from estratos.protocols import seeds_cannot_differ as protocol_rule

    try:
        cls = get_estimator(str(classifier))
    except OptionError:
        return False
    return protocol_rule(cls.deterministic, protocol)


__all__ = ["DEFAULT_CLASSIFIER", "LBFGSClassifier", "LogisticGrid", "RecordedEstimator",
           "RelatednessRegressor", "SentEvalClassifier", "estimator_names", "get_estimator",
           "l2_table", "register_estimator", "score_distribution", "seeds_cannot_differ"]
