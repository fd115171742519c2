"""estratos.stats: metrics from predictions, bootstrap intervals, McNemar, Holm."""

import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from estratos.stats import (Sample, adjust, bootstrap_ci, bootstrap_cis, holm, mcnemar_exact, metric_value,
                            paired_bootstrap)
from estratos.stats.significance import mcnemar_p


def _binomial(n=1000, correct=700):
    gold = np.zeros(n, dtype=int)
    pred = np.zeros(n, dtype=int)
    pred[correct:] = 1  # the last n - correct are wrong
    return Sample("accuracy", pred, gold)


def test_intervals_of_many_cells_equal_each_cell_alone():
    """bootstrap_cis draws the resamples once per test-set layout; every interval is the
    one its sample gets alone (several layouts, strata, seeds and an undefined one)."""
    rng = np.random.default_rng(5)
    gold = rng.integers(0, 3, 400)
    strata = np.repeat([0, 1], 200)
    samples = [Sample("accuracy", np.where(rng.random(400) < p, gold, (gold + 1) % 3), gold)
               for p in (0.5, 0.7, 0.9)]
    samples.append(Sample("accuracy", np.stack([gold, (gold + 1) % 3]), gold, strata))
    samples.append(Sample("accuracy", gold[:150], gold[:150]))
    scores = rng.normal(size=300)
    samples.append(Sample("pearson", np.zeros(300), scores))  # undefined: constant side
    samples.append(Sample("pearson", scores + rng.normal(size=300), scores))
    together = bootstrap_cis(samples, resamples=200, seed=7)
    alone = [bootstrap_cis([s], resamples=200, seed=7)[0] for s in samples]
    assert together == alone
    assert together[5].estimate is None and together[6].lo is not None
    assert len({(i.lo, i.hi) for i in together[:3]}) == 3


def test_bootstrap_ci_of_a_binomial_covers_the_analytic_interval():
    sample = _binomial()
    ci = bootstrap_ci(sample)
    half = 1.959964 * math.sqrt(0.7 * 0.3 / 1000) * 100  # Wald: 70 +- 2.84
    assert ci.estimate == pytest.approx(70.0)
    assert ci.lo == pytest.approx(70.0 - half, abs=0.5)
    assert ci.hi == pytest.approx(70.0 + half, abs=0.5)
    assert ci.se == pytest.approx(math.sqrt(0.21 / 1000) * 100, rel=0.1)
    assert (ci.resamples, ci.level, ci.n) == (1000, 0.95, 1000)


def test_bootstrap_is_seeded():
    sample = _binomial()
    assert bootstrap_ci(sample, seed=3) == bootstrap_ci(sample, seed=3)
    assert bootstrap_ci(sample, seed=3) != bootstrap_ci(sample, seed=4)
    narrow = bootstrap_ci(sample, level=0.5)
    wide = bootstrap_ci(sample, level=0.99)
    assert wide.lo < narrow.lo < narrow.hi < wide.hi


def test_pearson_interval_agrees_with_fisher_z():
    rng = np.random.default_rng(0)
    x = rng.normal(size=800)
    y = 0.6 * x + 0.8 * rng.normal(size=800)
    r = pearsonr(x, y)[0]
    z, se = np.arctanh(r), 1 / math.sqrt(800 - 3)
    lo, hi = np.tanh(z - 1.96 * se) * 100, np.tanh(z + 1.96 * se) * 100
    ci = bootstrap_ci(Sample("pearson", x, y))
    assert ci.estimate == pytest.approx(100 * r)
    assert ci.lo == pytest.approx(lo, abs=1.0) and ci.hi == pytest.approx(hi, abs=1.0)


def test_one_pearson_and_one_rule_for_an_undefined_correlation():
    """The recorded correlations, the bootstrap and the regressor's dev score share
    pearson_rows: it matches scipy, and an undefined value is NaN in arrays and None in
    records, never 0, including a constant row whose mean does not round back to its value."""
    from estratos.protocols.metrics import correlations
    from estratos.stats.metrics import pearson_rows, spearman_rows

    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 50))
    y = np.round(x[0] + rng.normal(size=50), 1)
    assert pearson_rows(x, y) == pytest.approx([pearsonr(row, y)[0] for row in x])
    assert spearman_rows(x, y) == pytest.approx([spearmanr(row, y).correlation for row in x])
    assert correlations(x[0], y) == pytest.approx((pearsonr(x[0], y)[0],
                                                   spearmanr(x[0], y).correlation))
    constant = np.full(3, 0.1)  # its float mean is 0.10000000000000002
    assert constant.mean() != 0.1
    assert np.isnan(pearson_rows(constant, np.array([1.0, 2.0, 4.0])))
    assert np.isnan(pearson_rows(np.array([[1.0, 2.0, 3.0]]), constant)).all()
    assert np.isnan(pearson_rows(np.array([1.0]), np.array([2.0])))
    assert correlations(constant, [1.0, 2.0, 4.0]) == (None, None)
    assert correlations([1.0], [2.0]) == (None, None)
    assert math.isnan(metric_value("pearson", constant, [1.0, 2.0, 4.0]))


def test_metrics_match_scipy_and_sklearn():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(1)
    x = rng.normal(size=300)
    y = np.round(x + rng.normal(size=300), 1)  # ties in gold
    assert metric_value("pearson", x, y) == pytest.approx(100 * pearsonr(x, y)[0])
    assert metric_value("spearman", x, y) == pytest.approx(100 * spearmanr(x, y).correlation)
    pred = rng.integers(0, 2, size=300)
    gold = rng.integers(0, 2, size=300)
    assert metric_value("f1", pred, gold, positive=1) == pytest.approx(
        100 * f1_score(gold, pred))
    assert metric_value("f1", np.zeros(5, int), np.zeros(5, int), positive=1) == 0.0
    assert math.isnan(metric_value("pearson", np.ones(5), np.arange(5.0)))


def test_strata_combine_as_the_protocols_do():
    gold = np.zeros(30, dtype=int)
    pred = np.r_[np.zeros(10, int), np.ones(20, int)]  # fold 0 all right, rest wrong...
    pred[10:15] = 0                                     # ...but 5 of fold 1 right
    strata = np.repeat([0, 1, 2], 10)
    folds = metric_value("accuracy", pred, gold, strata=strata)  # mean of 100, 50, 0
    sized = metric_value("accuracy", pred, gold, strata=np.r_[np.zeros(10, int),
                                                              np.ones(20, int)],
                         weighting="size")  # 1/3 * 100 + 2/3 * 25
    assert folds == pytest.approx(50.0)
    assert sized == pytest.approx(100 / 3 + 2 / 3 * 25)


def test_seeds_are_averaged():
    gold = np.zeros(10, dtype=int)
    two = np.stack([np.zeros(10, int), np.r_[np.zeros(5, int), np.ones(5, int)]])
    sample = Sample("accuracy", two, gold)
    assert sample.per_seed().tolist() == [100.0, 50.0]
    assert sample.value() == 75.0


def test_paired_bootstrap_identical_and_large_difference():
    rng = np.random.default_rng(2)
    gold = rng.integers(0, 3, size=500)
    noisy = np.where(rng.random(500) < 0.6, gold, (gold + 1) % 3)
    a = Sample("accuracy", noisy, gold)
    same = paired_bootstrap(a, Sample("accuracy", noisy.copy(), gold))
    assert same.diff == 0.0 and same.p_value == pytest.approx(1.0)
    assert same.lo == 0.0 and same.hi == 0.0
    better = paired_bootstrap(a, Sample("accuracy", gold.copy(), gold))
    assert better.diff == pytest.approx(100.0 - a.value())
    assert better.p_value < 0.01 and better.lo > 0
    worse = paired_bootstrap(Sample("accuracy", gold.copy(), gold), a)
    assert worse.diff < 0 and worse.hi < 0 and worse.p_value < 0.01


def test_paired_bootstrap_small_difference_is_not_significant():
    rng = np.random.default_rng(3)
    gold = rng.integers(0, 2, size=400)
    a = np.where(rng.random(400) < 0.7, gold, 1 - gold)
    b = a.copy()
    b[:3] = gold[:3]  # at most 3 more right
    d = paired_bootstrap(Sample("accuracy", a, gold), Sample("accuracy", b, gold))
    assert d.p_value > 0.05 and d.lo <= 0 <= d.hi


def test_paired_bootstrap_refuses_other_test_sets():
    a = Sample("accuracy", np.zeros(5, int), np.zeros(5, int))
    with pytest.raises(ValueError, match="same test set"):
        paired_bootstrap(a, Sample("accuracy", np.zeros(6, int), np.zeros(6, int)))
    with pytest.raises(ValueError, match="same test set"):
        paired_bootstrap(a, Sample("accuracy", np.zeros(5, int), np.ones(5, int)))


def test_mcnemar_on_a_hand_made_table():
    # 2x2 table: both right 50, only A right 10, only B right 2, both wrong 8
    correct_a = np.r_[np.ones(50), np.ones(10), np.zeros(2), np.zeros(8)].astype(bool)
    correct_b = np.r_[np.ones(50), np.zeros(10), np.ones(2), np.zeros(8)].astype(bool)
    b, c, p = mcnemar_exact(correct_a, correct_b)
    assert (b, c) == (10, 2)
    assert p == pytest.approx(2 * (1 + 12 + 66) / 2 ** 12)  # 0.0386
    assert mcnemar_p(5, 5) == 1.0 and mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(0, 6) == pytest.approx(2 / 64)


def test_holm_and_other_corrections():
    p = [0.01, 0.04, 0.03, 0.2]
    assert holm(p).tolist() == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert adjust(p, "bonferroni").tolist() == pytest.approx([0.04, 0.16, 0.12, 0.8])
    assert adjust(p, "none").tolist() == p
    assert holm([0.5, 0.9]).tolist() == [1.0, 1.0]
    assert holm([0.02, 0.9]).tolist() == [0.04, 0.9]
    with pytest.raises(ValueError, match="unknown correction"):
        adjust(p, "sidak")


def test_compare_to_many_equals_one_by_one():
    from estratos.stats import compare_to

    rng = np.random.default_rng(4)
    gold = rng.integers(0, 2, size=300)
    samples = [Sample("accuracy", np.where(rng.random(300) < q, gold, 1 - gold), gold)
               for q in (0.6, 0.7, 0.8)]
    many = compare_to(samples[0], samples[1:], seed=5)
    assert many == [paired_bootstrap(samples[0], s, seed=5) for s in samples[1:]]


# ---- differences of means over seeds (estratos.stats.seeds) ---------------------------------

def test_seed_difference_is_welchs_interval():
    from scipy import stats as sps

    from estratos.stats.seeds import mean_difference

    a = [49.1, 50.3, 48.7, 49.9, 50.0]
    b = [51.2, 50.8, 52.9, 51.7]
    d = mean_difference(a, b)
    ref = sps.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert d.diff == pytest.approx(np.mean(b) - np.mean(a))
    assert (d.lo, d.hi) == (pytest.approx(ref.low), pytest.approx(ref.high))
    assert not d.contains(0.0)
    wider = mean_difference(a, b, level=0.999)
    assert wider.lo < d.lo and wider.hi > d.hi


def test_seed_difference_of_deterministic_runs_is_exact():
    from estratos.stats.seeds import mean_difference

    d = mean_difference([71.25], [71.255])
    assert d.lo == d.hi == pytest.approx(0.005)
    assert not d.contains(0.0)
    assert d.contains(0.0, tolerance=0.01)
    with pytest.raises(ValueError, match="at least one score"):
        mean_difference([], [1.0])


def test_seed_difference_refuses_undefined_scores():
    from estratos.stats.seeds import mean_difference

    with pytest.raises(ValueError, match="finite"):
        mean_difference([float("nan"), 1.0], [2.0, 3.0])
