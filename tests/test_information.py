"""Usable information in bits (issue 46, item 1): every classification cell records its
probe's held-out cross-entropy, the class prior's and their difference, and stores each test
example's gold-label log2-probabilities; each measure is checked against a plain reference
written from its formula."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from probe_toys import MODEL, toy_split_task, write_cache

from estratos.errors import ResultsError
from estratos.probe.config import ProbeConfig
from estratos.probe.estimators.classifiers import get_estimator
from estratos.probe.grid.runner import run_probe
from estratos.protocols.classification import split_protocol
from estratos.protocols.information import (
    LOG2_FLOOR,
    gold_log2p,
    information,
    prior_log2p,
)
from estratos.results import read_results
from estratos.results.predictions import PredictionsReader


def test_v_information_is_log2_k_minus_the_cross_entropy_under_a_uniform_prior():
    k = 4
    train = np.repeat(np.arange(k), 25)  # balanced: the add-one prior is uniform
    test = np.array([0, 1, 2, 3, 3, 2])
    prior = prior_log2p(train, test, k)
    np.testing.assert_allclose(prior, -math.log2(k))
    log2p = np.log2(np.array([0.9, 0.5, 0.25, 0.7, 0.1, 0.6]))
    info = information(log2p, prior)
    cross_entropy = -log2p.mean()
    assert info["cross_entropy"] == pytest.approx(cross_entropy, abs=1e-6)
    assert info["prior_cross_entropy"] == pytest.approx(math.log2(k), abs=1e-6)
    assert info["v_information"] == pytest.approx(math.log2(k) - cross_entropy, abs=1e-6)


def test_the_prior_is_the_add_one_smoothed_training_shares():
    train = np.array([0, 0, 0, 1])  # class 2 never seen: it keeps a finite probability
    got = prior_log2p(train, np.array([0, 1, 2]), 3)
    want = np.log2(np.array([4 / 7, 2 / 7, 1 / 7]))
    np.testing.assert_allclose(got, want)


def test_a_probe_worse_than_the_prior_has_negative_information_not_clipped():
    prior = np.full(4, -1.0)  # a balanced binary prior
    log2p = np.log2(np.array([0.1, 0.2, 0.3, 0.4]))
    assert information(log2p, prior)["v_information"] < -0.5


def test_a_zero_probability_is_floored_not_infinite():
    got = gold_log2p(np.array([-np.inf, math.log(0.5)]))
    assert got[0] == LOG2_FLOOR and got[1] == pytest.approx(-1.0)


@pytest.mark.parametrize("classifier", ["lbfgs", "senteval"])
def test_gold_log_proba_is_the_gold_column_of_the_class_probabilities(classifier):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 120, 4))
    y = (X[0, :, 0] > 0).astype(int) + (X[0, :, 1] > 1).astype(int)
    est = get_estimator(classifier)(n_classes=4).fit(X, y, X[:, :40], y[:40], [1e-4, 1e-2])
    lp = est.log_proba(X)
    gold = est.gold_log_proba(X, np.minimum(y, 3))
    np.testing.assert_allclose(gold, np.take_along_axis(lp, y[None, None, :, None],
                                                        axis=-1)[..., 0], rtol=1e-12)
    beyond = est.gold_log_proba(X, np.full(120, 7))  # a label the model has no class for
    assert np.isneginf(beyond).all()


def test_the_split_protocol_matches_a_reference_from_the_formula():
    """H(Y|X) = -mean log2 p(y|x) of the model that dev chose (scikit-learn's own
    probabilities), H(Y|0) from the training counts by hand."""
    rng = np.random.default_rng(3)
    n, d = 300, 6
    y = rng.integers(0, 3, size=n)
    X = rng.normal(size=(1, n, d)) + y[None, :, None] * np.array([1.0, 0.5, 0, 0, 0, 0])
    tr, dv, te = np.arange(180), np.arange(180, 240), np.arange(240, n)
    make = lambda: get_estimator("lbfgs")(n_classes=3)  # noqa: E731
    grid = [1e-4, 1e-2, 1.0]
    (outcome,) = split_protocol(make, (X[:, tr], y[tr]), (X[:, dv], y[dv]),
                                (X[:, te], y[te]), grid)
    r = grid.index(outcome.l2)
    est = make().fit(X[:, tr], y[tr], X[:, dv], y[dv], grid)
    model, scale = est.models_[0][r], est.scale_[0]
    from estratos.probe.estimators.scaling import scaled

    proba = model.predict_proba(scaled(X[0, te], scale, np.float64))
    ref_ce = -np.mean(np.log2(proba[np.arange(len(te)), y[te]]))
    counts = np.bincount(y[tr], minlength=3) + 1.0
    ref_prior = -np.mean(np.log2(counts / counts.sum())[y[te]])
    info = information(outcome.gold_log2p, outcome.prior_log2p)
    assert info["cross_entropy"] == pytest.approx(ref_ce, abs=1e-6)
    assert info["prior_cross_entropy"] == pytest.approx(ref_prior, abs=1e-6)
    assert info["v_information"] == pytest.approx(ref_prior - ref_ce, abs=1e-6)


@pytest.mark.parametrize("classifier", ["lbfgs", "senteval"])
def test_every_classification_cell_records_bits_and_stores_them_per_example(tmp_path,
                                                                              classifier):
    task, sentences, vec = toy_split_task(240)
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    out = tmp_path / "r.jsonl"
    records = run_probe(cache, [task.spec], None, out,
                        ProbeConfig.build(layers="0,1", seeds=(1,), classifier=classifier,
                                          threads=1), loader=lambda s, d: task)
    reader = PredictionsReader()
    by_layer = {}
    for record in read_results(out):
        info = record.information
        assert set(info) == {"cross_entropy", "prior_cross_entropy", "v_information"}
        preds = reader.find(record, out).preds
        assert preds is not None and preds.log2p is not None
        # the examples themselves are stored with the test set, for a report to show
        assert preds.texts[:2] == (sentences[192], sentences[193])
        assert preds.label_names == ("neg", "pos")
        assert info["v_information"] == pytest.approx(float(preds.pvi.mean()), abs=1e-5)
        assert info["prior_cross_entropy"] == pytest.approx(1.0, abs=0.02)  # ~balanced
        by_layer[record.layer] = info["v_information"]
    assert len(records) == 2
    # layer 1 carries the label (informative), layer 0 is noise
    assert by_layer[1] > 0.3 and by_layer[0] < 0.15 and by_layer[1] > by_layer[0] + 0.25


def test_a_results_line_with_non_finite_information_is_refused(tmp_path):
    task, sentences, vec = toy_split_task(240)
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    out = tmp_path / "r.jsonl"
    run_probe(cache, [task.spec], None, out,
              ProbeConfig.build(layers="1", seeds=(1,), classifier="lbfgs", threads=1),
              loader=lambda s, d: task)
    line = json.loads(out.read_text().splitlines()[0])
    assert line["model"] == MODEL
    line["information"]["v_information"] = "NaN"
    out.write_text(json.dumps(line) + "\n")
    with pytest.raises(ResultsError, match="information"):
        read_results(out)
