"""The plain-loop estimator of bench/parity.py follows the protocols' estimator interface."""

import numpy as np

import estratos.protocols as P
from estratos.probe.estimators.classifiers import SentEvalClassifier
from estratos.probe.estimators.runtime import torch_runtime
from estratos.testing.reference import ReferenceEstimator


def _data(seed, n=240, f=6, classes=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    centers = rng.normal(size=(classes, f))
    x = 3 * centers[y] + rng.normal(scale=1.0, size=(n, f))
    return np.stack([x, x * 0.5]).astype(np.float32), y  # two "layers"


def test_our_streams_give_the_batched_trainer_numbers():
    X, y = _data(0)
    tr, dv, te = slice(0, 160), slice(160, 200), slice(200, 240)
    with torch_runtime(1):
        ours = P.split_protocol(lambda: SentEvalClassifier(n_classes=3, seed=5, max_epoch=12),
                                (X[:, tr], y[tr]), (X[:, dv], y[dv]), (X[:, te], y[te]),
                                [1e-5, 1e-2])
        plain = P.split_protocol(
            lambda: ReferenceEstimator(3, 5, max_epoch=12, streams="estratos"),
            (X[:, tr], y[tr]), (X[:, dv], y[dv]), (X[:, te], y[te]), [1e-5, 1e-2])
    assert [o.test for o in ours] == [o.test for o in plain]
    assert [o.l2 for o in ours] == [o.l2 for o in plain]


def test_senteval_streams_are_another_draw_of_the_same_training():
    X, y = _data(1)
    tr, dv, te = slice(0, 160), slice(160, 200), slice(200, 240)
    with torch_runtime(1):
        runs = [P.split_protocol(lambda: ReferenceEstimator(3, seed, max_epoch=12), (X[:, tr], y[tr]),
                                 (X[:, dv], y[dv]), (X[:, te], y[te]), [1e-5])
                for seed in (1, 2)]
    est = ReferenceEstimator(3, 1)
    assert est.get_params()["streams"] == "senteval"
    accs = [r[0].test["accuracy"] for r in runs]
    assert all(45 <= a <= 100 for a in accs)  # it learns (chance is ~33%)


def test_sentevals_size_average_flag_leaves_the_batch_mean_we_train_with():
    """SentEval sets ``loss_fn.size_average = False`` after building its CrossEntropyLoss;
    PyTorch >= 0.4 reads ``reduction`` instead, so the published code trains on the batch
    mean, as our trainer does (docs/statistics.md, "Parity"). If a PyTorch release ever
    honoured the attribute again, this fails and the parity claim must be revisited."""
    import torch

    loss = torch.nn.CrossEntropyLoss()
    loss.size_average = False
    z = torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
    y = torch.arange(64) % 3
    assert torch.allclose(loss(z, y), torch.nn.functional.cross_entropy(z, y))
    assert not torch.allclose(loss(z, y),
                              torch.nn.functional.cross_entropy(z, y, reduction="sum"))


def test_the_mlp_probe_follows_the_plain_torch_mlp():
    """DiscoEval's DC probe is SentEval's MLP (Linear, Dropout(0), Sigmoid, Linear): our
    hand-written forward, backward and stacked Adam follow torch.nn + torch.optim.Adam from
    the same initial weights and example order, model for model."""
    X, y = _data(2)
    tr, dv, te = slice(0, 160), slice(160, 200), slice(200, 240)
    kw = dict(max_epoch=12, tenacity=2, epoch_size=2)
    with torch_runtime(1):
        ours = P.split_protocol(
            lambda: SentEvalClassifier(n_classes=3, seed=7, nhid=16, **kw),
            (X[:, tr], y[tr]), (X[:, dv], y[dv]), (X[:, te], y[te]), [1e-5, 1e-2])
        plain = P.split_protocol(
            lambda: ReferenceEstimator(3, 7, streams="estratos", nhid=16, **kw),
            (X[:, tr], y[tr]), (X[:, dv], y[dv]), (X[:, te], y[te]), [1e-5, 1e-2])
    assert [o.dev for o in ours] == [o.dev for o in plain]
    assert [o.epochs for o in ours] == [o.epochs for o in plain]
    assert [o.test for o in ours] == [o.test for o in plain]
    assert ReferenceEstimator(3, 7, nhid=16).get_params()["nhid"] == 16


def test_the_relatedness_regressor_follows_the_plain_torch_loop():
    """SentEval's SICK-R regressor (Linear + Softmax, MSE against Tai et al.'s score
    distribution, Adam, early stopping on dev Pearson every ``epoch_size`` passes) written
    with torch.nn and torch.optim (:func:`reference_relatedness_fit`), from our initial
    weights and example order: our hand-written gradient and stacked Adam give its dev
    Pearson and epochs."""
    import torch

    from estratos.probe.estimators.classifiers import RelatednessRegressor
    from estratos.testing.reference import reference_relatedness_fit

    rng = np.random.default_rng(3)
    n, f, seed, size, cap = 300, 8, 13, 3, 30
    x = rng.normal(size=(n + 100, f)).astype(np.float32)
    score = np.clip(3 + x[:, :3].sum(axis=1) * 0.6 + rng.normal(scale=0.4, size=n + 100), 1, 5)
    xtr, ytr, xdv, ydv = x[:n], score[:n], x[n:], score[n:]
    with torch_runtime(1):
        ours = RelatednessRegressor(seed=seed, epoch_size=size, max_epoch=cap, tenacity=2).fit(
            xtr, ytr, xdv, ydv)
        best, nepoch, best_model = reference_relatedness_fit(
            xtr, ytr, xdv, ydv, seed=seed, tenacity=2, epoch_size=size, max_epoch=cap)
        with torch.no_grad():
            plain_test = best_model(torch.from_numpy(xdv)).numpy() @ np.arange(1, 6)
    assert ours.epochs_[0] == nepoch
    assert abs(ours.dev_score_[0] - best) < 1e-6
    assert np.allclose(ours.predict(xdv)[0], plain_test, atol=1e-5)
