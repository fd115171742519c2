"""Classifier settings (overrides never leak) and feature combiners / layer specs."""

from __future__ import annotations

import numpy as np
import pytest

from estratos.errors import OptionError, TaskError
from estratos.options import parse_layers
from estratos.probe.features import AVG, build_features, combine, layer_matrix, slot_vectors
from estratos.probe.estimators.classifiers import LBFGSClassifier, RelatednessRegressor, SentEvalClassifier
from estratos.probe.estimators.settings import DEFAULT_L2_GRID, NOREG_GRID, resolve_classifier
from estratos.tasks.types import SlotRefs, Split

from probe_toys import spec


# ---- settings ------------------------------------------------------------------------------

def test_dc_override_does_not_leak_into_the_next_task():
    dc = spec("DC", combiner="dc", group="DC",
              classifier={"nhid": 2000, "tenacity": 8, "epoch_size": 15, "l2_grid": "noreg"})
    sc = spec("TASS1")
    first = resolve_classifier(dc.classifier, task=dc.id)
    second = resolve_classifier(sc.classifier, task=sc.id)
    assert (first.nhid, first.tenacity, first.epoch_size, first.l2_grid) == (2000, 8, 15,
                                                                            NOREG_GRID)
    assert second.get_params() == SentEvalClassifier().get_params()
    assert (second.nhid, second.tenacity, second.epoch_size, second.max_epoch) == (0, 5, 4, 200)
    assert second.l2_grid == DEFAULT_L2_GRID
    # a fresh estimator per call: changing one changes neither the next nor the defaults
    first.set_params(nhid=7)
    assert resolve_classifier(dc.classifier, task=dc.id).nhid == 2000
    assert SentEvalClassifier().nhid == 0
    with pytest.raises(TypeError):
        dc.classifier["nhid"] = 1  # the spec's overrides are read-only


def test_record_is_built_from_get_params():
    s = resolve_classifier({"max_epoch": 15, "epoch_size": 1, "l2_grid": "noreg"},
                           classifier="lbfgs")
    # a linear full-batch model: network and schedule overrides do not apply to it
    assert s.get_params()["l2_grid"] == (1e-9,) and "max_epoch" not in s.get_params()
    assert s.record() == {"name": "lbfgs", "nhid": 0, "optim": "lbfgs", "max_iter": 1000,
                          "tol": 1e-3, "l2_grid": [1e-9],
                          "path": "warm-start, strongest L2 first"}
    assert s.get_params()["features"] == "standardized"
    clf = resolve_classifier({"max_epoch": 15})
    assert clf.record() == {
        "name": "senteval", "nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5,
        "epoch_size": 4, "max_epoch": 15, "dropout": 0.0,
        "l2_grid": [1e-5, 1e-4, 1e-3, 1e-2]}
    clf.set_params(tenacity=9, nhid=50)
    assert clf.record()["tenacity"] == 9 and clf.record()["nhid"] == 50
    assert RelatednessRegressor().record(name="lbfgs") == {
        "name": "lbfgs", "nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 3,
        "epoch_size": 50, "max_epoch": 1000, "dropout": 0.0, "l2_grid": [0.0]}


def test_every_hyper_parameter_is_a_constructor_parameter():
    params = SentEvalClassifier().get_params()
    for key in ("nhid", "dropout", "optim", "batch_size", "tenacity", "epoch_size",
                "max_epoch", "l2_grid", "kfold", "validation_split", "lr", "seed"):
        assert key in params
    assert {"batch_size", "tenacity", "epoch_size", "max_epoch", "lr"} <= set(
        RelatednessRegressor().get_params())
    assert {"max_iter", "tol", "l2_grid", "kfold"} <= set(LBFGSClassifier().get_params())


@pytest.mark.parametrize("overrides,needle", [
    ({"nhidden": 3}, "unknown classifier override"),
    ({"nhid": -1}, "nhid"),
    ({"dropout": 1.5}, "dropout"),
    ({"l2_grid": "lots"}, "l2_grid"),
    ({"l2_grid": []}, "l2_grid"),
    ({"optim": "sgd,lr=0.1"}, "optim"),
    ({"tenacity": 2.5}, "tenacity"),
])
def test_bad_overrides_name_the_task_and_key(overrides, needle):
    with pytest.raises(TaskError, match=needle) as info:
        resolve_classifier(overrides, task="toy:Bad")
    assert "toy:Bad" in str(info.value)


def test_unknown_classifier_names_the_option():
    with pytest.raises(OptionError, match="classifier"):
        resolve_classifier({}, classifier="svm")


# ---- layer specs ---------------------------------------------------------------------------

def test_parse_layers():
    assert parse_layers("all", 4) == (0, 1, 2, 3, AVG)
    assert parse_layers("0,3,avg", 7) == (0, 3, AVG)
    assert parse_layers(" 2 , 2, AVG", 7) == (2, AVG)
    assert parse_layers([1, "avg"], 3) == (1, AVG)


@pytest.mark.parametrize("expr,needle", [("top", "unknown layer spec"), ("0,7", "out of range"),
                                         ("-1", "out of range"), ("1.5", "unknown layer spec"),
                                         ("", "unknown layer spec")])
def test_bad_layer_specs_name_the_option(expr, needle):
    with pytest.raises(OptionError, match=needle) as info:
        parse_layers(expr, 7)
    assert "layers" in str(info.value)


def test_avg_is_the_mean_over_all_hidden_states():
    v = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_allclose(layer_matrix(v, AVG), v.mean(axis=1))
    np.testing.assert_array_equal(layer_matrix(v, 1), v[:, 1])


# ---- combiners -----------------------------------------------------------------------------

def test_combiners_by_hand():
    x = [np.array([[1.0, -2.0]]), np.array([[3.0, 4.0]]), np.array([[0.5, 0.5]]),
         np.array([[1.0, 1.0]]), np.array([[2.0, 0.0]]), np.array([[9.0, 9.0]])]
    a, b = x[0][0], x[1][0]
    np.testing.assert_allclose(combine("single", x[:1])[0], a)
    np.testing.assert_allclose(combine("pair", x[:2])[0], [2, 6, 3, -8])
    np.testing.assert_allclose(combine("pair4", x[:2])[0], [1, -2, 3, 4, 3, -8, 2, 6])
    np.testing.assert_allclose(combine("rst", x[:2])[0], [1, -2, 3, 4, 3, -8, 2, 6])
    np.testing.assert_allclose(combine("bso", x[:2])[0], np.concatenate([a, b, a - b]))
    np.testing.assert_allclose(combine("sp", x[:5])[0],
                               np.concatenate([a] + [a - x[i][0] for i in range(1, 5)]))
    np.testing.assert_allclose(combine("dc", x)[0], np.concatenate([v[0] for v in x]))
    with pytest.raises(ValueError):
        combine("pair", x[:3])


def test_ragged_slots_average_their_sentences():
    vecs = np.array([[1.0, 0.0], [3.0, 2.0], [5.0, 4.0], [7.0, 8.0]], dtype=np.float32)
    refs = SlotRefs.ragged([[0, 1], [2], [1, 2, 3]])
    np.testing.assert_allclose(slot_vectors(vecs, refs), [[2, 1], [5, 4], [5, 14 / 3]],
                               rtol=1e-6)
    single = SlotRefs.single([3, 0])
    np.testing.assert_array_equal(slot_vectors(vecs, single), vecs[[3, 0]])


def test_build_features_stacks_layer_specs():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(5, 3, 4)).astype(np.float32)
    split = Split("train", (SlotRefs.single([0, 1]), SlotRefs.single([2, 3])), np.array([0, 1]))
    feats = build_features(v, [2, AVG], split, "pair")
    assert feats.shape == (2, 2, 8)
    u, w = v[[0, 1], 2], v[[2, 3], 2]
    np.testing.assert_allclose(feats[0], np.concatenate([np.abs(u - w), u * w], axis=1))
    m = v.mean(axis=1)
    np.testing.assert_allclose(feats[1, :, 4:], m[[0, 1]] * m[[2, 3]], rtol=1e-5)
