"""SentEval's fit loop written the plain way: one ``torch.nn`` model, ``torch.optim.Adam``.

Why it exists: it is the yardstick for :class:`~estratos.probe.classifiers.SentEvalClassifier`.
The tests check that the batched trainer gives this loop's numbers, and
``bench/probe_speed.py --reference`` times it, since it is how SentEval itself trains one
(layer, L2) model at a time. It uses the same seeded initialization and pass permutations
as the batched trainer, so the two agree model for model. Not used to produce results.
"""

from __future__ import annotations

import copy
from typing import Optional, Tuple

import numpy as np
import torch

from estratos.probe.classifiers import pass_permutation


def reference_senteval_fit(x: np.ndarray, y: np.ndarray, x_dev: np.ndarray, y_dev: np.ndarray,
                           l2: float, *, seed: int, tenacity: int = 5, epoch_size: int = 4,
                           max_epoch: int = 200, batch_size: int = 64,
                           n_classes: Optional[int] = None
                           ) -> Tuple[float, int, torch.nn.Linear]:
    """Train one linear probe as SentEval does; returns (best dev accuracy, epochs, model).

    Early stopping as published: rounds of ``epoch_size`` passes, then dev accuracy; the
    non-improvement count is cumulative.
    """
    n_features = x.shape[1]
    if n_classes is None:
        n_classes = int(max(y.max(), y_dev.max()) + 1)
    gen = torch.Generator().manual_seed(int(seed))
    bound = 1 / np.sqrt(n_features)
    model = torch.nn.Linear(n_features, n_classes)
    with torch.no_grad():  # torch.nn.Linear's init, drawn from the seeded generator
        model.weight.copy_((torch.rand((n_classes, n_features), generator=gen) * 2 - 1) * bound)
        model.bias.copy_((torch.rand((n_classes,), generator=gen) * 2 - 1) * bound)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=l2)
    loss_fn = torch.nn.CrossEntropyLoss()
    X = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    Y = torch.from_numpy(np.asarray(y, dtype=np.int64))
    Xd = torch.from_numpy(np.ascontiguousarray(x_dev, dtype=np.float32))
    Yd = torch.from_numpy(np.asarray(y_dev, dtype=np.int64))
    nepoch, best, count, stop = 0, -1.0, 0, False
    best_model = copy.deepcopy(model)
    while not stop and nepoch <= max_epoch:
        for p in range(nepoch, nepoch + epoch_size):
            perm = torch.from_numpy(pass_permutation(len(X), seed, p))
            for i in range(0, len(X), batch_size):
                idx = perm[i:i + batch_size]
                loss = loss_fn(model(X[idx]), Y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        nepoch += epoch_size
        with torch.no_grad():
            acc = (model(Xd).argmax(1) == Yd).double().mean().item()
        if acc > best:
            best, best_model = acc, copy.deepcopy(model)
        else:
            if count >= tenacity:
                stop = True
            count += 1
    return best, nepoch, best_model
