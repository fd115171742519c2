"""SentEval's fit loop written the plain way: one ``torch.nn`` model, ``torch.optim.Adam``.

The model is SentEval's: ``Linear(F, C)``, or with ``nhid`` hidden units
``Linear(F, H), Dropout(0), Sigmoid, Linear(H, C)`` (DiscoEval's DC probe); dropout above 0
is not reproduced (its masks are drawn from other streams). SentEval's SICK-R regressor
(``Linear`` + softmax, MSE, early stopping on dev Pearson) is
:func:`reference_relatedness_fit`; both share one early-stopped Adam loop.

Why it exists: it is the yardstick for
:class:`~estratos.probe.estimators.classifiers.SentEvalClassifier`. The tests check that the
batched trainer gives this loop's numbers, and
``bench/probe_speed.py --reference`` times it, since it is how SentEval itself trains one
(layer, L2) model at a time. It uses the same seeded initialization and pass permutations
as the batched trainer, so the two agree model for model. Not used to produce results.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from estratos.probe.estimators.classifiers import RelatednessRegressor, SentEvalClassifier
from estratos.probe.estimators.training import pass_permutation

#: SentEval's schedule, as the batched classifier's constructor defines it (written once)
_SENTEVAL = SentEvalClassifier().get_params()
#: SentEval's SICK-R schedule, as the regressor's constructor defines it
_RELATEDNESS = RelatednessRegressor().get_params()


def reference_senteval_fit(x: np.ndarray, y: np.ndarray, x_dev: np.ndarray, y_dev: np.ndarray,
                           l2: float, *, seed: int, tenacity: int = _SENTEVAL["tenacity"],
                           epoch_size: int = _SENTEVAL["epoch_size"],
                           max_epoch: int = _SENTEVAL["max_epoch"],
                           batch_size: int = _SENTEVAL["batch_size"],
                           n_classes: Optional[int] = None, nhid: int = 0
                           ) -> Tuple[float, int, torch.nn.Module]:
    """Train one probe as SentEval does; returns (best dev accuracy, epochs, model).

    Early stopping as published: rounds of ``epoch_size`` passes, then dev accuracy; the
    non-improvement count is cumulative. The initial weights are our trainer's draws
    (``torch.nn.Linear``'s distribution, each layer's weight then bias from one generator
    seeded by ``seed``).
    """
    if n_classes is None:
        n_classes = int(max(y.max(), y_dev.max()) + 1)
    gen = torch.Generator().manual_seed(int(seed))
    model = _senteval_model(x.shape[1], n_classes, nhid)
    for layer in _linears(model):
        _draw_init(layer, gen)
    return _early_stopped_adam(model, x, y, x_dev, y_dev, l2, tenacity=tenacity,
                               epoch_size=epoch_size, max_epoch=max_epoch,
                               batch_size=batch_size,
                               permutation=lambda p: pass_permutation(len(x), seed, p))


def senteval_streams_fit(x: np.ndarray, y: np.ndarray, x_dev: np.ndarray, y_dev: np.ndarray,
                         l2: float, *, seed: int, tenacity: int = _SENTEVAL["tenacity"],
                         epoch_size: int = _SENTEVAL["epoch_size"],
                         max_epoch: int = _SENTEVAL["max_epoch"],
                         batch_size: int = _SENTEVAL["batch_size"],
                         n_classes: Optional[int] = None, nhid: int = 0
                         ) -> Tuple[float, int, torch.nn.Module]:
    """The same loop with SentEval's own random streams: ``torch.manual_seed(seed)`` before
    ``nn.Linear``'s default initialisation and ``np.random.seed(seed)`` before one
    ``np.random.permutation`` per pass (here as private generators, so no global state is
    touched). Our trainer draws the same distributions from other streams, so its cells and
    these are two samples of one distribution over seeds (``bench/parity.py``)."""
    if n_classes is None:
        n_classes = int(max(y.max(), y_dev.max()) + 1)
    gen = torch.Generator().manual_seed(int(seed))
    model = _senteval_model(x.shape[1], n_classes, nhid)
    with torch.no_grad():  # kaiming_uniform_(a=sqrt(5)) of nn.Linear, and its bias
        for layer in _linears(model):
            bound = 1 / np.sqrt(layer.in_features)
            layer.weight.uniform_(-bound, bound, generator=gen)
            layer.bias.uniform_(-bound, bound, generator=gen)
    numpy_stream = np.random.RandomState(int(seed))
    return _early_stopped_adam(model, x, y, x_dev, y_dev, l2, tenacity=tenacity,
                               epoch_size=epoch_size, max_epoch=max_epoch,
                               batch_size=batch_size,
                               permutation=lambda _: numpy_stream.permutation(len(x)))


def _senteval_model(n_features: int, n_classes: int, nhid: int) -> torch.nn.Module:
    """SentEval's probe: logistic regression, or its one-hidden-layer MLP (dropout 0)."""
    if nhid == 0:
        return torch.nn.Linear(n_features, n_classes)
    return torch.nn.Sequential(torch.nn.Linear(n_features, nhid), torch.nn.Dropout(0.0),
                               torch.nn.Sigmoid(), torch.nn.Linear(nhid, n_classes))


def _linears(model: torch.nn.Module) -> List[torch.nn.Linear]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def _draw_init(layer: torch.nn.Linear, gen: torch.Generator) -> None:
    """Our trainer's initial weights for one layer: ``torch.nn.Linear``'s distribution,
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the weight then the bias drawn from ``gen``."""
    bound = 1 / np.sqrt(layer.in_features)
    with torch.no_grad():
        layer.weight.copy_((torch.rand(layer.weight.shape, generator=gen) * 2 - 1) * bound)
        layer.bias.copy_((torch.rand(layer.bias.shape, generator=gen) * 2 - 1) * bound)


def _early_stopped_adam(model: torch.nn.Module, x: np.ndarray, y: np.ndarray,
                        x_dev: np.ndarray, y_dev: np.ndarray, l2: float, *, tenacity: int,
                        epoch_size: int, max_epoch: int, batch_size: int,
                        permutation: Callable[[int], np.ndarray]
                        ) -> Tuple[float, int, torch.nn.Module]:
    """SentEval's classification loop (cross-entropy, dev accuracy): :func:`_early_stopped`."""
    targets = torch.from_numpy(np.asarray(y, dtype=np.int64))
    gold = torch.from_numpy(np.asarray(y_dev, dtype=np.int64))
    return _early_stopped(model, x, targets, x_dev,
                          lambda out: (out.argmax(1) == gold).double().mean().item(), l2,
                          loss_fn=torch.nn.CrossEntropyLoss(), tenacity=tenacity,
                          epoch_size=epoch_size, max_epoch=max_epoch, batch_size=batch_size,
                          permutation=permutation)


def _early_stopped(model: torch.nn.Module, x: np.ndarray, targets: torch.Tensor,
                   x_dev: np.ndarray, dev_score: Callable[[torch.Tensor], float], l2: float, *,
                   loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                   tenacity: int, epoch_size: int, max_epoch: int, batch_size: int,
                   permutation: Callable[[int], np.ndarray]
                   ) -> Tuple[float, int, torch.nn.Module]:
    """SentEval's loop: Adam (lr 1e-3, weight decay ``l2``) on ``loss_fn``, rounds of
    ``epoch_size`` passes in the order ``permutation(pass_index)`` gives, then
    ``dev_score`` of the dev outputs (higher is better); the cumulative non-improvement
    count stops it after ``tenacity``. Returns (best dev score, epochs, best model)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=l2)
    X = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    Xd = torch.from_numpy(np.ascontiguousarray(x_dev, dtype=np.float32))
    nepoch, best, count, stop = 0, -1.0, 0, False
    best_model = copy.deepcopy(model)
    while not stop and nepoch <= max_epoch:
        for p in range(nepoch, nepoch + epoch_size):
            perm = torch.from_numpy(np.asarray(permutation(p)))
            for i in range(0, len(X), batch_size):
                idx = perm[i:i + batch_size]
                loss = loss_fn(model(X[idx]), targets[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        nepoch += epoch_size
        with torch.no_grad():
            score = dev_score(model(Xd))
        if score > best:
            best, best_model = score, copy.deepcopy(model)
        else:
            if count >= tenacity:
                stop = True
            count += 1
    return best, nepoch, best_model


def reference_relatedness_fit(x: np.ndarray, scores: Sequence[float], x_dev: np.ndarray,
                              dev_scores: Sequence[float], *, seed: int,
                              tenacity: int = _RELATEDNESS["tenacity"],
                              epoch_size: int = _RELATEDNESS["epoch_size"],
                              max_epoch: int = _RELATEDNESS["max_epoch"],
                              batch_size: int = _RELATEDNESS["batch_size"],
                              n_classes: int = _RELATEDNESS["n_classes"]
                              ) -> Tuple[float, int, torch.nn.Module]:
    """SentEval's SICK-R regressor the plain way: ``Linear(F, K)`` + softmax trained with MSE
    against Tai et al.'s score distribution (Adam, no L2), early stopping on the dev Pearson
    of the expected score (an undefined correlation counts as 0, as published); our
    trainer's initial weights and example order. Returns (best dev Pearson, epochs, model)."""
    from scipy.stats import pearsonr

    from estratos.probe.estimators.classifiers import score_distribution

    gen = torch.Generator().manual_seed(int(seed))
    linear = torch.nn.Linear(x.shape[1], n_classes)
    _draw_init(linear, gen)
    levels = np.arange(1, n_classes + 1)

    def dev_pearson(out: torch.Tensor) -> float:
        r = float(pearsonr(out.numpy() @ levels, dev_scores)[0])
        return 0.0 if r != r else r

    targets = torch.from_numpy(score_distribution(scores, n_classes).astype(np.float32))
    return _early_stopped(torch.nn.Sequential(linear, torch.nn.Softmax(dim=-1)), x, targets,
                          x_dev, dev_pearson, 0.0, loss_fn=torch.nn.MSELoss(),
                          tenacity=tenacity, epoch_size=epoch_size, max_epoch=max_epoch,
                          batch_size=batch_size,
                          permutation=lambda p: pass_permutation(len(x), seed, p))


class ReferenceEstimator:
    """The protocols' estimator interface over the plain loop, one (layer, L2) model at a
    time: ``fit(X, y, X_dev, y_dev, l2)`` with ``X`` ``(G, n, F)`` and ``l2`` a grid ``(R,)``
    or table ``(G, R)``; ``dev_score_``/``epochs_`` ``(G, R)``; ``predict(X) -> (G, R, n)``.
    ``streams``: ``"senteval"`` (:func:`senteval_streams_fit`) or ``"estratos"``
    (:func:`reference_senteval_fit`, our trainer's streams). ``nhid``: hidden units (0: the
    linear probe), without dropout."""

    def __init__(self, n_classes: int, seed: int, *, tenacity: int = _SENTEVAL["tenacity"],
                 epoch_size: int = _SENTEVAL["epoch_size"],
                 max_epoch: int = _SENTEVAL["max_epoch"],
                 batch_size: int = _SENTEVAL["batch_size"], streams: str = "senteval",
                 nhid: int = 0) -> None:
        if streams not in ("senteval", "estratos"):
            raise ValueError(f"unknown streams {streams!r}")
        self.nhid = int(nhid)
        self.n_classes, self.seed, self.streams = n_classes, seed, streams
        self.tenacity, self.epoch_size = tenacity, epoch_size
        self.max_epoch, self.batch_size = max_epoch, batch_size

    def get_params(self, deep: bool = True) -> dict:
        return {"n_classes": self.n_classes, "seed": self.seed, "tenacity": self.tenacity,
                "epoch_size": self.epoch_size, "max_epoch": self.max_epoch,
                "batch_size": self.batch_size, "streams": self.streams, "nhid": self.nhid}

    def fit(self, X, y, X_dev, y_dev, l2) -> "ReferenceEstimator":
        fit_one = senteval_streams_fit if self.streams == "senteval" else reference_senteval_fit
        X, X_dev = np.asarray(X), np.asarray(X_dev)
        table = np.asarray(l2, dtype=np.float64)
        if table.ndim == 1:
            table = np.tile(table[None, :], (X.shape[0], 1))
        G, R = table.shape
        self.dev_score_ = np.zeros((G, R))
        self.epochs_ = np.zeros((G, R), dtype=np.int64)
        self.models_: List[List[Any]] = [[None] * R for _ in range(G)]
        for g in range(G):
            for r in range(R):
                best, epochs, model = fit_one(
                    X[g], y, X_dev[g], y_dev, float(table[g, r]), seed=self.seed,
                    tenacity=self.tenacity, epoch_size=self.epoch_size,
                    max_epoch=self.max_epoch, batch_size=self.batch_size,
                    n_classes=self.n_classes, nhid=self.nhid)
                self.dev_score_[g, r], self.epochs_[g, r] = best, epochs
                self.models_[g][r] = model
        return self

    def predict(self, X) -> np.ndarray:
        X = np.asarray(X)
        with torch.no_grad():
            return np.stack([np.stack([
                m(torch.from_numpy(np.ascontiguousarray(X[g], dtype=np.float32))).argmax(1)
                .numpy() for m in row]) for g, row in enumerate(self.models_)])
