"""Protocols on small fixtures: split, kfold, inner-kfold, cosine, relatedness, one-at-a-time,
and the registry (split handling, what tasks may ask without naming a protocol)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from estratos.errors import TaskError
import estratos.protocols as P
from estratos.probe.estimators.classifiers import LBFGSClassifier, RelatednessRegressor, SentEvalClassifier
from estratos.probe.estimators.runtime import torch_runtime


@pytest.fixture(autouse=True)
def _one_thread():
    with torch_runtime(1):
        yield


def data(n=200, groups=2, seed=0, noise=1.0):
    """Two informative groups: group 0 easy, group 1 pure noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = rng.normal(size=(groups, n, 6)).astype(np.float32) * noise
    x[0, :, 0] += np.where(y == 1, 3.0, -3.0)
    return x, y


class Recorder:
    """An estimator that records what the protocol gave it and predicts the majority label."""

    calls = []

    def fit(self, X, y, X_dev, y_dev, l2):
        table = np.asarray(l2, dtype=float)
        Recorder.calls.append((len(y), len(y_dev), table.shape))
        G = X.shape[0]
        R = table.shape[-1]
        # dev score: prefer the largest L2 for group 0, the smallest for group 1
        self.dev_score_ = np.tile(np.linspace(0.5, 0.6, R), (G, 1))
        self.dev_score_[1:] = self.dev_score_[1:, ::-1]
        self.epochs_ = np.full((G, R), 7)
        self.majority = int(np.bincount(y).argmax())
        self.R = R
        return self

    def predict(self, X):
        return np.full((X.shape[0], self.R, X.shape[1]), self.majority)


def test_split_protocol_picks_l2_on_dev_and_reports_test():
    # enough examples for Adam (lr 1e-3) to move far from the initial weights
    x, y = data(1500)
    out = P.split_protocol(lambda: SentEvalClassifier(seed=1, max_epoch=40),
                           (x[:, :1000], y[:1000]), (x[:, 1000:1200], y[1000:1200]),
                           (x[:, 1200:], y[1200:]), [1e-5, 1e-2], positive=1)
    assert len(out) == 2
    assert out[0].test["accuracy"] >= 95 and out[0].test["f1"] >= 95
    assert out[1].test["accuracy"] < 80
    assert out[0].l2 in (1e-5, 1e-2) and out[0].epochs >= 4
    assert set(out[0].dev) == {"accuracy"}


def test_split_protocol_uses_dev_scores_with_first_max_on_ties():
    Recorder.calls = []
    x, y = data(40)
    out = P.split_protocol(Recorder, (x, y), (x, y), (x, y), [1e-5, 1e-4, 1e-3])
    assert [o.l2 for o in out] == [1e-3, 1e-5]
    assert out[0].dev == {"accuracy": 60.0}


def test_kfold_protocol_folds_then_refits_with_a_held_out_share():
    Recorder.calls = []
    x, y = data(100)
    out = P.kfold_protocol(Recorder, (x, y), (x[:, :30], y[:30]), [1e-5, 1e-2], k=5, seed=3)
    fold_calls, refit = Recorder.calls[:-1], Recorder.calls[-1]
    assert len(fold_calls) == 5
    assert all(c == (80, 20, (2,)) for c in fold_calls)
    assert refit == (95, 5, (2, 1))  # 5% held out for early stopping, one L2 per group
    assert out[0].l2 == 1e-2 and out[1].l2 == 1e-5
    assert out[0].epochs == 7


def test_inner_kfold_protocol_nests_folds():
    Recorder.calls = []
    x, y = data(60)
    out = P.inner_kfold_protocol(Recorder, (x, y), [1e-5, 1e-2], k=3, seed=9)
    # per outer fold: 3 inner fits + 1 refit
    assert len(Recorder.calls) == 3 * (3 + 1)
    assert Recorder.calls[0] == (26, 14, (2,)) or Recorder.calls[0][0] + Recorder.calls[0][1] == 40
    assert out[0].extra["l2_per_fold"] == [1e-2] * 3
    assert out[0].dev == {"accuracy": 60.0}


def test_inner_kfold_with_a_real_classifier():
    x, y = data(300)
    # small batches: enough Adam steps to leave the initial weights on this small pool
    out = P.inner_kfold_protocol(lambda: SentEvalClassifier(seed=1, batch_size=8), (x, y),
                                 [1e-4, 1e-2], k=3, positive=1)
    assert out[0].test["accuracy"] >= 95 and out[0].test["f1"] >= 95
    assert out[1].test["accuracy"] < 85


def test_inner_kfold_folds_ignore_the_run_seed_like_senteval():
    y = np.arange(50) % 2
    a = P.stratified_folds(y, 5, P.INNER_KFOLD_SEED)
    b = P.stratified_folds(y, 5, P.INNER_KFOLD_SEED)
    assert all((p[1] == q[1]).all() for p, q in zip(a, b))
    for tr, te in a:
        assert abs(y[te].mean() - 0.5) < 0.11  # stratified


def test_holdout_split_is_seeded_and_disjoint():
    tr, dv = P.holdout_split(100, 0.05, 3)
    assert len(dv) == 5 and len(tr) == 95
    assert not set(tr) & set(dv)
    assert (P.holdout_split(100, 0.05, 3)[1] == dv).all()
    assert not (P.holdout_split(100, 0.05, 4)[1] == dv).all()


def test_cosine_protocol_matches_a_hand_computation():
    rng = np.random.default_rng(0)
    subsets = {}
    hand = {}
    for name, n in (("news", 30), ("wiki", 10)):
        u = rng.normal(size=(1, n, 5))
        v = u + rng.normal(size=(1, n, 5))
        gold = rng.uniform(0, 5, size=n)
        subsets[name] = (P.row_cosine(u[0], v[0])[None], gold)
        cos = np.array([a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
                        for a, b in zip(u[0], v[0])])
        hand[name] = (pearsonr(cos, gold)[0], spearmanr(cos, gold)[0])
    out = P.cosine_protocol(subsets)[0]
    t = out.test
    for name in ("news", "wiki"):
        assert t["subsets"][name]["pearson"] == pytest.approx(hand[name][0], abs=1e-10)
        assert t["subsets"][name]["spearman"] == pytest.approx(hand[name][1], abs=1e-10)
    assert t["pearson_mean"] == pytest.approx((hand["news"][0] + hand["wiki"][0]) / 2)
    assert t["pearson_wmean"] == pytest.approx((30 * hand["news"][0] + 10 * hand["wiki"][0]) / 40)
    assert t["pearson"] == t["pearson_wmean"]
    assert out.l2 is None and out.dev is None


def test_cosine_protocol_reports_an_undefined_correlation_as_none():
    """Identical vectors for every sentence (layer-0 [CLS]) give constant cosines: the
    correlation is undefined and must not be recorded as 0."""
    rng = np.random.default_rng(1)
    same = np.ones((1, 12, 4))
    gold = rng.uniform(0, 5, size=12)
    u = rng.normal(size=(1, 12, 4))
    sims = {"a": P.row_cosine(same[0], same[0])[None], "b": P.row_cosine(u[0], u[0] + 0.1)[None]}
    out = P.cosine_protocol({k: (v, gold) for k, v in sims.items()})[0].test
    assert out["subsets"]["a"]["pearson"] is None and out["subsets"]["a"]["spearman"] is None
    assert out["subsets"]["b"]["pearson"] is not None
    assert out["pearson"] is None and out["pearson_mean"] is None
    from estratos.results import primary_score
    assert primary_score("pearson", out) is None
    assert primary_score("pearson", {"pearson": 0.5}) == 50.0


def test_cosine_similarity_of_a_zero_vector_is_zero():
    sims = P.row_cosine(np.array([[0.0, 0.0], [1.0, 0.0]]),
                               np.array([[1.0, 1.0], [2.0, 0.0]]))
    np.testing.assert_allclose(sims, [0.0, 1.0])


def test_relatedness_protocol_reports_pearson_spearman_mse():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 400, 6)).astype(np.float32)
    raw = x[0] @ rng.normal(size=6)
    score = 1 + 4 * (raw - raw.min()) / np.ptp(raw)
    out = P.relatedness_protocol(lambda: RelatednessRegressor(seed=1, epoch_size=5,
                                                              max_epoch=40),
                                 (x[:, :250], score[:250]), (x[:, 250:320], score[250:320]),
                                 (x[:, 320:], score[320:]))[0]
    assert set(out.test) == {"pearson", "spearman", "mse"}
    assert out.test["pearson"] > 0.9 and out.test["spearman"] > 0.85
    assert out.test["mse"] < 0.5
    assert out.dev["pearson"] > 0.9


def test_one_at_a_time_equals_batched_through_a_protocol():
    x, y = data(160, noise=2.0)
    make = lambda: SentEvalClassifier(seed=2, max_epoch=20)  # noqa: E731
    args = ((x[:, :100], y[:100]), (x[:, 100:130], y[100:130]), (x[:, 130:], y[130:]),
            [1e-5, 1e-3])
    batched = P.split_protocol(make, *args)
    alone = P.split_protocol(lambda: P.OneAtATime(make), *args)
    assert [(o.l2, o.dev, o.test, o.epochs) for o in batched] == \
        [(o.l2, o.dev, o.test, o.epochs) for o in alone]


def test_lbfgs_through_kfold():
    x, y = data(120)
    out = P.kfold_protocol(lambda: LBFGSClassifier(), (x[:, :90], y[:90]), (x[:, 90:], y[90:]),
                           [1e-5, 1e-1], k=3)
    assert out[0].test["accuracy"] >= 95


def test_f1_of_the_positive_class():
    assert P.f1_positive(np.array([1, 1, 0, 0]), np.array([1, 0, 1, 0]), 1) == pytest.approx(50)
    assert P.f1_positive(np.array([0, 0]), np.array([0, 0]), 1) == 0.0


# ---- per-example predictions ---------------------------------------------------------------

def test_split_and_kfold_predict_every_test_example_in_order():
    Recorder.calls = []
    x, y = data(60)
    out = P.split_protocol(Recorder, (x, y), (x, y), (x[:, :25], y[:25]), [1e-5, 1e-2])
    assert out[0].predicted == ("test",) and out[0].predictions.shape == (25,)
    out = P.kfold_protocol(Recorder, (x, y), (x[:, :20], y[:20]), [1e-5], k=3)
    assert out[1].predicted == ("test",) and out[1].predictions.shape == (20,)


def test_inner_kfold_predicts_every_example_once_by_its_outer_fold():
    x, y = data(90)
    out = P.inner_kfold_protocol(lambda: LBFGSClassifier(), (x, y), [1e-3], k=3)
    o = out[0]
    assert o.predicted == ("all",) and o.predictions.shape == (90,)
    assert sorted(np.bincount(o.folds).tolist()) == [30, 30, 30]
    # the recorded accuracy is the mean of the per-fold accuracies of these predictions
    per_fold = [100 * np.mean(o.predictions[o.folds == f] == y[o.folds == f]) for f in range(3)]
    assert o.test["accuracy"] == pytest.approx(np.mean(np.round(per_fold, 2)), abs=0.01)


def test_cosine_predictions_are_the_cosines_concatenated_in_subset_order():
    rng = np.random.default_rng(2)
    sims = {"b": rng.uniform(size=(2, 5)), "a": rng.uniform(size=(2, 3))}
    out = P.cosine_protocol({k: (v, rng.uniform(size=v.shape[1])) for k, v in sims.items()})
    assert out[1].predicted == ("a", "b")
    np.testing.assert_array_equal(out[1].predictions, np.concatenate([sims["a"][1],
                                                                      sims["b"][1]]))


def test_relatedness_predictions_are_on_the_task_scale():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 120, 4)).astype(np.float32)
    score = rng.uniform(0, 4, size=120)  # a 0..4 task shifted onto 1..5 for the regressor
    out = P.relatedness_protocol(lambda: RelatednessRegressor(seed=1, epoch_size=2,
                                                              max_epoch=4),
                                 (x[:, :80], score[:80]), (x[:, 80:100], score[80:100]),
                                 (x[:, 100:], score[100:]), offset=1.0)[0]
    assert out.predicted == ("test",) and out.predictions.shape == (20,)
    assert out.test["mse"] == pytest.approx(np.mean((out.predictions - score[100:]) ** 2))


# ---- the registry ------------------------------------------------------------------------

def test_registry_names_and_what_tasks_may_ask():
    assert P.protocol_names() == ("split", "kfold", "inner-kfold", "cosine", "relatedness")
    assert [p for p in P.protocol_names() if P.get_protocol(p).scores] == ["cosine",
                                                                           "relatedness"]
    assert P.get_protocol("relatedness").trains == "regressor"
    assert P.get_protocol("cosine").trains is None
    assert P.get_protocol("inner-kfold").train_split == "all"
    assert P.get_protocol("split").seeds_share_data and not P.get_protocol("kfold").seeds_share_data
    with pytest.raises(TaskError, match="unknown protocol 'loo'.*split"):
        P.get_protocol("loo")


def _names(source):
    return {"train": "tr.txt", "dev": "va.txt", "test": "te.txt"}.get(source, "none given")


@pytest.mark.parametrize("protocol", ["split", "relatedness"])
def test_train_dev_test_plans_and_fallbacks(protocol):
    p = P.get_protocol(protocol)
    pub = ("train", "dev", "test")
    full = p.plan(pub, set(pub), _names, 0.1)
    assert full.reads == (("train", "train"), ("dev", "dev"), ("test", "test"))
    assert full.fallback is None and not full.missing
    no_train = p.plan(pub, {"dev", "test"}, _names, 0.1)
    assert no_train.reads == (("dev", P.POOL), ("test", "test"))
    assert no_train.holdout_from == P.POOL and no_train.splits == pub
    assert no_train.fallback == ("no train file (tr.txt): train on va.txt minus a held-out "
                                 "10% (fixed seed) that is the dev split; test on te.txt")
    no_dev = p.plan(pub, {"train", "test"}, _names, 0.1)
    assert no_dev.reads[0] == ("train", P.POOL) and "no dev file (va.txt)" in no_dev.fallback
    assert p.plan(pub, {"train", "dev"}, _names, 0.1).missing == ("test", "train", "dev")


def test_kfold_without_train_falls_back_to_nested_kfold_on_test():
    plan = P.get_protocol("kfold").plan(("train", "test"), {"test"}, _names, 0.1)
    assert plan.protocol == "inner-kfold" and plan.reads == (("test", "all"),)
    assert plan.splits == ("all",) and plan.fallback.startswith("no train file (tr.txt)")


def test_cosine_and_inner_kfold_need_every_published_source():
    cos = P.get_protocol("cosine")
    assert cos.plan(("news", "wiki"), {"news", "wiki"}, _names, 0.1).splits == ("news", "wiki")
    assert cos.plan(("news", "wiki"), {"news"}, _names, 0.1).missing == ("news", "wiki")
    ik = P.get_protocol("inner-kfold").plan(("pos", "neg"), {"pos", "neg"}, _names, 0.1)
    assert ik.reads == (("pos", "all"), ("neg", "all")) and ik.splits == ("all",)


def test_no_protocol_name_is_switched_on_outside_the_registry():
    """Protocol names may be named (task specs name one) but never compared."""
    import re
    from pathlib import Path

    import estratos

    root = Path(estratos.__file__).parent
    names = "|".join(re.escape(n) for n in P.protocol_names())
    compare = re.compile(rf"(==|!=|\bin\b)\s*\(?[^\n#]*[\"']({names})[\"']")
    offenders = []
    for path in root.rglob("*.py"):
        if "protocols" in path.relative_to(root).parts[:1]:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "protocol" in line and compare.search(line):
                offenders.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert not offenders, offenders
