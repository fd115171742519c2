"""The batched probe trainers: accuracy, batched == alone, determinism, SentEval parity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from estratos.probe.estimators.classifiers import (
    LBFGSClassifier,
    RelatednessRegressor,
    SentEvalClassifier,
    score_distribution,
)
from estratos.probe.estimators.runtime import torch_runtime
from estratos.stats.metrics import pearson_rows
from estratos.testing.reference import reference_senteval_fit


def blobs(n: int, n_features: int = 12, n_classes: int = 3, spread: float = 1.0,
          seed: int = 0, groups: int = 1):
    """Gaussian blobs; group g scales the features by (g+1) (same labels)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(n_classes, n_features)) * 3.0
    y = np.arange(n) % n_classes
    x = centers[y] + rng.normal(size=(n, n_features)) * spread
    return np.stack([x * (g + 1) for g in range(groups)]).astype(np.float32), y


@pytest.fixture(autouse=True)
def _one_thread():
    with torch_runtime(1):
        yield


def test_linear_probe_separates_separable_blobs():
    x_all, y_all = blobs(480, seed=5)
    x, y = x_all[:, :300], y_all[:300]
    xd, yd = x_all[:, 300:390], y_all[300:390]
    xt, yt = x_all[:, 390:], y_all[390:]
    clf = SentEvalClassifier(seed=3).fit(x, y, xd, yd, [1e-4])
    assert clf.score(xt, yt)[0, 0] >= 0.97
    assert clf.dev_score_[0, 0] >= 0.97
    assert clf.epochs_[0, 0] % 4 == 0 and clf.epochs_[0, 0] >= 4


def test_mlp_probe_learns_xor_that_a_linear_probe_cannot():
    rng = np.random.default_rng(0)
    x = rng.uniform(-4, 4, size=(800, 2)).astype(np.float32)
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(np.int64)
    tr, dv, te = slice(0, 500), slice(500, 650), slice(650, 800)
    mlp = SentEvalClassifier(nhid=32, seed=1, epoch_size=16).fit(
        x[tr], y[tr], x[dv], y[dv], [1e-5])
    lin = SentEvalClassifier(seed=1).fit(x[tr], y[tr], x[dv], y[dv], [1e-5])
    assert mlp.score(x[te], y[te])[0, 0] >= 0.9
    assert lin.score(x[te], y[te])[0, 0] <= 0.75


@pytest.mark.parametrize("nhid,dropout", [(0, 0.0), (16, 0.2)])
def test_batched_models_equal_models_trained_alone(nhid, dropout):
    x_all, y_all = blobs(400, spread=4.0, groups=3, seed=7)
    x, y, xd, yd = x_all[:, :300], y_all[:300], x_all[:, 300:], y_all[300:]
    grid = [1e-5, 1e-3, 1e-1]
    batched = SentEvalClassifier(nhid=nhid, dropout=dropout, seed=11, tenacity=2,
                                 max_epoch=40).fit(x, y, xd, yd, grid)
    pred = batched.predict(xd)
    for g in range(3):
        for r, l2 in enumerate(grid):
            alone = SentEvalClassifier(nhid=nhid, dropout=dropout, seed=11, tenacity=2,
                                       max_epoch=40).fit(x[g], y, xd[g], yd, [l2])
            assert alone.dev_score_[0, 0] == batched.dev_score_[g, r]
            assert alone.epochs_[0, 0] == batched.epochs_[g, r]
            np.testing.assert_array_equal(alone.predict(xd[g])[0, 0], pred[g, r])


def test_same_seed_same_numbers_other_seed_other_numbers():
    x_all, y_all = blobs(300, spread=5.0, groups=2, seed=3)
    args = (x_all[:, :200], y_all[:200], x_all[:, 200:], y_all[200:], [1e-5, 1e-2])

    def run(seed):
        clf = SentEvalClassifier(nhid=8, dropout=0.1, seed=seed, max_epoch=20).fit(*args)
        return clf.dev_score_, clf._state.best[0].numpy().copy()

    a, b, c = run(5), run(5), run(6)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c[1])


def test_matches_a_plain_torch_senteval_loop():
    x_all, y_all = blobs(350, spread=6.0, seed=9)
    x, y, xd, yd = x_all[0, :250], y_all[:250], x_all[0, 250:], y_all[250:]
    ref_acc, ref_epochs, ref_model = reference_senteval_fit(x, y, xd, yd, 1e-3, seed=4,
                                                            tenacity=2, epoch_size=2,
                                                            max_epoch=30)
    ours = SentEvalClassifier(seed=4, tenacity=2, epoch_size=2, max_epoch=30).fit(
        x, y, xd, yd, [1e-3])
    assert ours.dev_score_[0, 0] == pytest.approx(ref_acc, abs=1e-12)
    assert ours.epochs_[0, 0] == ref_epochs
    w = ours._state.best[0][0].numpy()  # (C, F), as torch.nn.Linear keeps it
    np.testing.assert_allclose(w, ref_model.weight.detach().numpy(), atol=1e-4)


def test_cumulative_tenacity_stops_after_tenacity_plus_one_stalls():
    # constant features: dev accuracy never improves after the first round
    x = np.zeros((64, 3), dtype=np.float32)
    y = np.arange(64) % 2
    clf = SentEvalClassifier(seed=1, tenacity=3, epoch_size=1, max_epoch=100).fit(
        x, y, x, y, [0.0])
    # round 1 improves (from -1); rounds 2..5 stall; the 5th sees count == 3 and stops
    assert clf.epochs_[0, 0] == 5


def test_max_epoch_bounds_training():
    x_all, y_all = blobs(200, spread=8.0, seed=2)
    clf = SentEvalClassifier(seed=1, tenacity=1000, epoch_size=3, max_epoch=7).fit(
        x_all[0, :150], y_all[:150], x_all[0, 150:], y_all[150:], [1e-5])
    # rounds run while nepoch <= max_epoch: 0, 3, 6 -> stops at 9
    assert clf.epochs_[0, 0] == 9


def test_l2_table_per_group_and_bad_shapes():
    x_all, y_all = blobs(120, groups=2)
    x, y = x_all[:, :80], y_all[:80]
    xd, yd = x_all[:, 80:], y_all[80:]
    clf = SentEvalClassifier(seed=1, max_epoch=4).fit(x, y, xd, yd, np.array([[1e-5], [1e-2]]))
    assert clf.dev_score_.shape == (2, 1)
    with pytest.raises(ValueError):
        SentEvalClassifier(seed=1).fit(x, y, xd, yd, np.zeros((3, 1)))


def test_score_distribution_follows_tai_et_al():
    p = score_distribution([1.0, 2.5, 4.2, 5.0, 3.0])
    expected = np.zeros((5, 5))
    expected[0, 0] = 1.0
    expected[1, 1], expected[1, 2] = 0.5, 0.5      # y=2.5: classes 2 and 3 (1-indexed)
    expected[2, 3], expected[2, 4] = 0.8, 0.2      # y=4.2: p[4] = 1 - 0.2, p[5] = 0.2
    expected[3, 4] = 1.0
    expected[4, 2] = 1.0
    np.testing.assert_allclose(p, expected, atol=1e-12)
    np.testing.assert_allclose(p @ np.arange(1, 6), [1.0, 2.5, 4.2, 5.0, 3.0])
    with pytest.raises(ValueError):
        score_distribution([0.5])


def test_relatedness_regressor_tracks_a_linear_score():
    rng = np.random.default_rng(0)
    w = rng.normal(size=6)
    x = rng.normal(size=(500, 6)).astype(np.float32)
    raw = x @ w
    score = 1 + 4 * (raw - raw.min()) / (raw.max() - raw.min())
    reg = RelatednessRegressor(seed=1, epoch_size=5, max_epoch=60).fit(
        x[:300], score[:300], x[300:400], score[300:400])
    pred = reg.predict(x[400:])
    assert pred.shape == (1, 100)
    assert pearson_rows(pred, score[400:])[0] > 0.9
    assert reg.dev_score_[0] > 0.9


def test_lbfgs_classifier_accuracy_and_interface():
    x_all, y_all = blobs(400, groups=2, seed=5)
    clf = LBFGSClassifier(seed=1).fit(x_all[:, :300], y_all[:300], x_all[:, 300:],
                                      y_all[300:], [1e-5, 1e-2])
    assert clf.predict(x_all[:, 300:]).shape == (2, 2, 100)
    assert (clf.score(x_all[:, 300:], y_all[300:]) >= 0.95).all()
    assert (clf.epochs_ > 0).all()


def test_torch_runtime_restores_global_switches():
    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    with torch_runtime(1):
        assert torch.are_deterministic_algorithms_enabled()
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == before


@pytest.mark.parametrize("nhid,dropout", [(0, 0.0), (16, 0.3)])
def test_batched_seeds_equal_each_seed_alone(nhid, dropout):
    """Seeds trained together keep their own init, example order and dropout masks: every
    (seed, group, L2) model's dev scores, epochs and predictions equal training that seed
    alone exactly; seeds stop at different times (tenacity 1), so streams leave the program
    one by one. Weights agree to float rounding: torch's fused Adam kernel treats the last
    few elements of a tensor (the part shorter than a SIMD vector) in scalar code, and which
    elements those are depends on the stack's size (measured: at most 1 ulp)."""
    x_all, y_all = blobs(330, spread=2.0, groups=2, seed=4)
    x, y, xd, yd = x_all[:, :250], y_all[:250], x_all[:, 250:], y_all[250:]
    grid = [1e-5, 1e-1]
    seeds = (3, 11, 5)
    kw = dict(nhid=nhid, dropout=dropout, tenacity=1, epoch_size=2, max_epoch=30)
    together = SentEvalClassifier(seed=seeds, **kw).fit(x, y, xd, yd, grid)
    pred = together.predict(xd)
    assert together.dev_score_.shape == (6, 2) and pred.shape == (6, 2, 80)
    assert len(set(together.epochs_.ravel().tolist())) > 1  # not all stopped together
    for s, seed in enumerate(seeds):
        alone = SentEvalClassifier(seed=seed, **kw).fit(x, y, xd, yd, grid)
        rows = slice(s * 2, (s + 1) * 2)
        np.testing.assert_array_equal(alone.dev_score_, together.dev_score_[rows])
        np.testing.assert_array_equal(alone.epochs_, together.epochs_[rows])
        np.testing.assert_array_equal(alone.predict(xd), pred[rows])
        for a, b in zip(alone._state.best, together._state.best):
            np.testing.assert_allclose(a.numpy(), b[rows].numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("nhid,dropout,features,mode", [
    (0, 0.0, "raw", True), (16, 0.3, "raw", True), (0, 0.0, "standardized", True),
    (0, 0.0, "raw", None)])  # None: as the device says (the CPU: fold after fold)
def test_folds_fitted_at_once_equal_each_fold_fitted_alone(nhid, dropout, features, mode):
    """``fit_folds`` (k-fold cross-validation's fits as one program, as on a GPU) gives every
    fold's models the dev scores, epochs and predictions of fitting that fold alone; folds
    of unequal sizes (103 examples in 4 folds) take different numbers of steps and last
    batch sizes, and stop at different times (tenacity 1)."""
    from estratos.protocols.folds import stratified_folds

    x_all, y_all = blobs(143, spread=3.0, groups=2, seed=9)
    x, y, xt = x_all[:, :103], y_all[:103], x_all[:, 103:]
    folds = stratified_folds(y, 4, 1111)
    assert len({len(tr) for tr, _ in folds}) > 1
    kw = dict(nhid=nhid, dropout=dropout, tenacity=1, epoch_size=2, max_epoch=30, seed=5,
              batch_size=16, features=features)
    grid = [1e-5, 1e-2]
    at_once = SentEvalClassifier(**kw).fit_folds(x, y, folds, grid, at_once=mode)
    pred = at_once.predict(xt)
    assert at_once.dev_score_.shape == (8, 2) and pred.shape == (8, 2, 40)
    assert isinstance(at_once._folds, list) == (features == "standardized" or mode is None)
    assert len(set(at_once.epochs_.ravel().tolist())) > 1
    for k, (tr, te) in enumerate(folds):
        alone = SentEvalClassifier(**kw).fit(x[:, tr], y[tr], x[:, te], y[te], grid)
        rows = slice(2 * k, 2 * k + 2)
        np.testing.assert_array_equal(alone.dev_score_, at_once.dev_score_[rows])
        np.testing.assert_array_equal(alone.epochs_, at_once.epochs_[rows])
        np.testing.assert_array_equal(alone.predict(xt), pred[rows])


def test_fit_folds_of_several_seeds_fits_fold_by_fold_and_refuses_no_folds():
    x, y = blobs(60, groups=2)
    folds = [(np.arange(40), np.arange(40, 60)), (np.arange(20, 60), np.arange(20))]
    kw = dict(max_epoch=8, tenacity=1, epoch_size=2)
    both = SentEvalClassifier(seed=[1, 2], **kw).fit_folds(x, y, folds, [1e-3], at_once=True)
    assert both.dev_score_.shape == (8, 1)  # fold-major, then seed-major
    for k, (tr, te) in enumerate(folds):
        alone = SentEvalClassifier(seed=[1, 2], **kw).fit(x[:, tr], y[tr], x[:, te], y[te],
                                                         [1e-3])
        np.testing.assert_array_equal(alone.dev_score_, both.dev_score_[4 * k:4 * k + 4])
    with pytest.raises(ValueError, match="at least one fold"):
        SentEvalClassifier().fit_folds(x, y, [], [1e-3])


def test_batched_seeds_of_the_relatedness_regressor_match_each_seed_alone():
    """The regressor's seeds trained together stop at the same epochs and predict the same
    scores as each seed alone, up to float rounding: with 5 classes and few features, MKL's
    small batched GEMM rounds a stream differently depending on where it sits in memory,
    which is why CPU runs train seeds one after the other (estratos.probe.cells)."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 200, 5)).astype(np.float32)
    score = 1 + 4 / (1 + np.exp(-x[0] @ rng.normal(size=5)))
    kw = dict(epoch_size=2, max_epoch=12, tenacity=1)
    args = (x[:, :150], score[:150], x[:, 150:], score[150:])
    together = RelatednessRegressor(seed=[7, 1], **kw).fit(*args)
    both = together.predict(x[:, 150:])
    for s, seed in enumerate((7, 1)):
        alone = RelatednessRegressor(seed=seed, **kw).fit(*args)
        rows = slice(2 * s, 2 * s + 2)
        np.testing.assert_array_equal(alone.epochs_, together.epochs_[rows])
        np.testing.assert_allclose(alone.dev_score_, together.dev_score_[rows], atol=1e-7)
        np.testing.assert_allclose(alone.predict(x[:, 150:]), both[rows], atol=1e-6)


def collinear_toy(n=600, n_dev=200, rank=8, width=192, classes=5, seed=0):
    """Features that are nearly collinear and far from centred (a few latent factors seen
    through many correlated, offset columns), as sentence vectors are."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(rank, width))
    w = rng.normal(size=(rank, classes))

    def draw(m):
        z = rng.normal(size=(m, rank))
        x = z @ mix + 0.01 * rng.normal(size=(m, width)) + 3.0
        y = np.argmax(z @ w + rng.gumbel(size=(m, classes)), axis=1)
        return np.hstack([x, x * 0.5 + x[::-1] * 0.5]).astype(np.float32), y

    (x, y), (xd, yd) = draw(n), draw(n_dev)
    return x[None], y, xd[None], yd


def test_lbfgs_converges_fast_on_nearly_collinear_features():
    """Raw L-BFGS crawls to its cap on such features. Standardized and warm
    started along the L2 path, every fit converges in a few dozen iterations (no fit is
    capped) and the probe is as accurate as a fit run to float precision."""
    from sklearn.linear_model import LogisticRegression

    x, y, xd, yd = collinear_toy()
    clf = LBFGSClassifier().fit(x, y, xd, yd, [1e-5, 1e-4, 1e-3, 1e-2])
    assert not clf.capped_.any()
    assert clf.epochs_.max() < 100
    tight = LogisticRegression(C=1.0 / (1e-3 * len(y)), max_iter=5000, tol=1e-8)
    mean, std = x[0].mean(0), x[0].std(0)
    tight.fit((x[0] - mean) / std, y)
    exact = (tight.predict((xd[0] - mean) / std) == yd).mean()
    assert abs(clf.dev_score_[0, 2] - exact) <= 0.03


def test_a_fit_stopped_at_the_cap_is_recorded_in_the_result():
    from estratos.probe.records import CellSource, cell_record
    from estratos.protocols.classification import split_protocol

    x, y, xd, yd = collinear_toy()
    out = split_protocol(lambda: LBFGSClassifier(max_iter=2), (x, y), (xd, yd), (xd, yd),
                         [1e-3])
    assert out[0].capped == 2 and out[0].epochs == 2
    done = split_protocol(lambda: LBFGSClassifier(), (x, y), (xd, yd), (xd, yd), [1e-3])
    assert done[0].capped is None
    from estratos.protocols.estimators import OneAtATime

    alone = split_protocol(lambda: OneAtATime(lambda: LBFGSClassifier(max_iter=2)), (x, y),
                           (xd, yd), (xd, yd), [1e-3])
    assert alone[0].capped == 2
    # the results line says so, and reads back
    from estratos.results import ResultRecord
    from probe_toys import toy_split_task

    task = toy_split_task(40)[0]
    system = CellSource(kind="probe", model="m", revision=None)
    line = cell_record(task, out[0], system, layer=0, pooling="cls", features="standardized",
                       seed=1, classifier={"name": "lbfgs"}, seconds=1.0)
    assert line.to_json()["capped"] == {"max_iter": 2}
    assert ResultRecord.from_json(line.to_json()).capped == {"max_iter": 2}
    assert "capped" not in cell_record(task, done[0], system, layer=0, pooling="cls",
                                       features="standardized", seed=1,
                                       classifier={"name": "lbfgs"}, seconds=1.0).to_json()


@pytest.mark.parametrize("seeds", [(7,), (3, 11, 5)])
def test_masks_drawn_a_pass_ahead_equal_masks_drawn_per_step(monkeypatch, seeds):
    """The accelerator's dropout masks (a whole pass drawn ahead in a thread from each
    seed's generator, cut per step) are the masks drawn step by step: the same models, the
    same numbers, one seed or several stopping at different times. Run on the CPU by
    declaring it a pass-mask device."""
    from estratos.probe.estimators import training

    x_all, y_all = blobs(330, spread=2.0, groups=2, seed=4)
    x, y, xd, yd = x_all[:, :250], y_all[:250], x_all[:, 250:], y_all[250:]
    kw = dict(nhid=16, dropout=0.3, tenacity=1, epoch_size=2, max_epoch=30, seed=seeds)
    per_step = SentEvalClassifier(**kw).fit(x, y, xd, yd, [1e-5, 1e-1])
    monkeypatch.setattr(training, "PASS_MASK_DEVICES", ("cuda", "cpu"))
    drawn = []
    real = training.StackedNet.pass_masks

    def spy(self, live, n):
        drawn.append(len(live))
        return real(self, live, n)

    monkeypatch.setattr(training.StackedNet, "pass_masks", spy)
    by_pass = SentEvalClassifier(**kw).fit(x, y, xd, yd, [1e-5, 1e-1])
    assert drawn  # the pass-wise path ran
    np.testing.assert_array_equal(per_step.dev_score_, by_pass.dev_score_)
    np.testing.assert_array_equal(per_step.epochs_, by_pass.epochs_)
    np.testing.assert_array_equal(per_step.predict(xd), by_pass.predict(xd))
    for a, b in zip(per_step._state.best, by_pass._state.best):
        assert torch.equal(a, b)


def test_a_classifier_is_deterministic_exactly_when_its_record_says_its_fit_is_seed_free():
    """Reports decide that a cell's seeds could not differ from its results line
    (``results.record.seed_free_fit``: the recorded ``optim``), probe from the estimator
    registry (``deterministic``): the two agree for every registered estimator."""
    from estratos.probe.estimators.registry import ROLES, estimator_names, get_estimator
    from estratos.results.record import seed_free_fit

    checked = {}
    for role in ROLES:
        for name in estimator_names(role):
            cls = get_estimator(name, role)
            checked[name] = cls.deterministic
            assert cls.deterministic == seed_free_fit(cls().record()), name
    assert checked["lbfgs"] and not checked["senteval"]


@pytest.mark.parametrize("nhid", [0, 16])
def test_weight_gradients_written_into_one_workspace_equal_fresh_ones(monkeypatch, nhid):
    """The first layer's weight gradient is written into one tensor kept across a fit's
    steps (a fresh one per step costs page faults at DC's size): the same models and
    numbers as a fresh tensor per step, and one allocation per shape of the program (a new
    one only after streams leave it)."""
    from estratos.probe.estimators import training

    x_all, y_all = blobs(330, spread=2.0, groups=3, seed=6)
    x, y, xd, yd = x_all[:, :250], y_all[:250], x_all[:, 250:], y_all[250:]
    kw = dict(nhid=nhid, dropout=0.2 if nhid else 0.0, tenacity=1, epoch_size=2,
              max_epoch=40, seed=(2, 9))
    taken = []
    real_take = training.GradWorkspace.take

    def spy(self, shape, like):
        out = real_take(self, shape, like)
        taken.append((tuple(shape), out))  # held: a fresh tensor cannot reuse its memory
        return out

    monkeypatch.setattr(training.GradWorkspace, "take", spy)
    reused = SentEvalClassifier(**kw).fit(x, y, xd, yd, [1e-5, 1e-1])
    monkeypatch.setattr(training, "_weight_grad", lambda dt, x, workspace: torch.bmm(dt, x))
    fresh = SentEvalClassifier(**kw).fit(x, y, xd, yd, [1e-5, 1e-1])
    np.testing.assert_array_equal(reused.dev_score_, fresh.dev_score_)
    np.testing.assert_array_equal(reused.epochs_, fresh.epochs_)
    for a, b in zip(reused._state.best, fresh._state.best):
        assert torch.equal(a, b)
    shapes = [s for s, _ in taken]
    assert len(taken) > 20 and len(set(shapes)) > 1  # many steps; streams left the program
    for shape in set(shapes):
        assert len({out.data_ptr() for s, out in taken if s == shape}) == 1, shape


def test_a_shared_l2_value_applied_by_the_fused_kernel_gives_the_same_models(monkeypatch):
    """Where every model of a stack has one L2 value (SentEval's noreg: DC, NLI, SSP, RST),
    the fused Adam kernel applies it (when this build rounds it as the gradient's addcmul
    does, checked at import): the same models and numbers as adding it to the gradient; a
    grid of L2 values keeps the decay in the gradient."""
    from estratos.probe.estimators import adam

    x_all, y_all = blobs(330, spread=2.0, groups=2, seed=8)
    x, y, xd, yd = x_all[:, :250], y_all[:250], x_all[:, 250:], y_all[250:]
    kw = dict(nhid=16, dropout=0.1, tenacity=1, epoch_size=2, max_epoch=30, seed=(4, 1))
    made = []
    real_init = adam.StackedAdam.__init__

    def spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self.kernel_decay)

    monkeypatch.setattr(adam.StackedAdam, "__init__", spy)
    in_kernel = SentEvalClassifier(**kw).fit(x, y, xd, yd, [1e-2])
    SentEvalClassifier(**kw).fit(x, y, xd, yd, [1e-5, 1e-2])
    assert made == ([np.float32(1e-2)] if adam._DECAY_IN_KERNEL else [None]) + [None]
    monkeypatch.setattr(adam, "_DECAY_IN_KERNEL", False)
    in_gradient = SentEvalClassifier(**kw).fit(x, y, xd, yd, [1e-2])
    assert made[-1] is None
    np.testing.assert_array_equal(in_kernel.dev_score_, in_gradient.dev_score_)
    np.testing.assert_array_equal(in_kernel.epochs_, in_gradient.epochs_)
    for a, b in zip(in_kernel._state.best, in_gradient._state.best):
        assert torch.equal(a, b)
