"""Conditional probing (issue 46, item 2): ``probe --given B`` trains the probe on B alone and
on [B; layer] and records what the layer adds in bits, H(Y|B) - H(Y|B,R), with an interval
from the stored per-example log2-probabilities. The reviewer's checks: a layer gains 0 over
itself, a layer given pure noise gains what it gains alone, B alone is the ordinary cell of
B, and each number matches its formula."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from probe_toys import assert_probe_refuses, toy_similarity_tasks, toy_split_task, write_cache

from estratos.errors import OptionError
from estratos.probe.baseline import fitted_matrix, given_features, split_matrix
from estratos.probe.conditional import given_layer, given_layers, group_given
from estratos.probe.config import ProbeConfig
from estratos.probe.estimators.classifiers import get_estimator
from estratos.probe.grid.runner import run_probe
from estratos.protocols.information import conditional, gold_log2p
from estratos.report.intervals import pvi_interval
from estratos.results import read_results
from estratos.results.predictions import PredictionsReader
from estratos.results.record import CellKey
from estratos.vocab import CONDITIONAL_L2_GRID


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A split task whose layers 1 and 2 carry the label and layer 0 is pure noise, and its
    cache."""
    folder = tmp_path_factory.mktemp("toy")
    task, sentences, vec = toy_split_task(400, informative=(1, 2))
    return task, write_cache(folder / "c.h5", sentences, vec)


def _run(toy, tmp_path, name, **options):
    task, cache = toy
    out = tmp_path / f"{name}.jsonl"
    run_probe(cache, [task.spec], None, out,
              ProbeConfig.build(classifier="lbfgs", threads=1, **options),
              loader=lambda s, d: task)
    reader = PredictionsReader()
    return {(r.layer, r.seed): (r, reader.find(r, out).preds) for r in read_results(out)}


def test_the_gain_is_the_difference_of_the_two_cross_entropies():
    log2p = np.log2(np.array([0.9, 0.6, 0.3, 0.8]))
    given = np.log2(np.array([0.5, 0.5, 0.4, 0.7]))
    got = conditional(log2p, given)
    assert got["cross_entropy"] == pytest.approx(-log2p.mean(), abs=1e-6)
    assert got["given_cross_entropy"] == pytest.approx(-given.mean(), abs=1e-6)
    assert got["gain"] == pytest.approx((log2p - given).mean(), abs=1e-6)


def test_a_layer_gains_nothing_over_itself_within_its_interval(toy, tmp_path):
    cells = _run(toy, tmp_path, "self", layers="1", seeds=(1, 2), given="1")
    gains = np.stack([preds.gain for _, preds in cells.values()])
    interval = pvi_interval(gains, resamples=1000)
    assert interval.lo <= 0.0 <= interval.hi, interval
    for record, preds in cells.values():
        assert record.given == "1" and record.conditional["given_layer"] == 1
        assert record.conditional["gain"] == pytest.approx(float(preds.gain.mean()), abs=1e-5)


def test_a_layer_given_pure_noise_gains_what_it_gains_alone(toy, tmp_path):
    alone = _run(toy, tmp_path, "alone", layers="1", seeds=(1,))
    given = _run(toy, tmp_path, "noise", layers="1", seeds=(1,), given="0")
    (record, preds), = given.values()
    (plain, _), = alone.values()
    interval = pvi_interval(preds.gain[None], resamples=1000)
    v_alone = plain.information["v_information"]
    assert v_alone > 0.3  # the layer carries the label
    assert interval.lo <= v_alone <= interval.hi, (v_alone, interval)


def test_b_alone_is_layer_b_probed_with_l2_chosen_on_dev_cross_entropy(toy, tmp_path):
    """The probe on B alone is layer B's own probe, its L2 chosen (as the probe on [B; R]
    chooses its own) by the dev examples' cross-entropy from the conditional grid: a
    reference from the split protocol's parts picks the same L2 and gives the same bits."""
    task, _ = toy
    given = _run(toy, tmp_path, "given", layers="1", seeds=(3,), given="2")
    (record, preds), = given.values()
    X = {s: toy_split_task(400, informative=(1, 2))[2][task.splits[s].slots[0].indices][:, 2]
         for s in ("train", "dev", "test")}
    y = {s: np.asarray(task.splits[s].labels) for s in X}
    est = get_estimator("lbfgs")(n_classes=2, seed=3).fit(
        X["train"][None], y["train"], X["dev"][None], y["dev"], list(CONDITIONAL_L2_GRID))
    dev_ce = -gold_log2p(est.gold_log_proba(X["dev"][None], y["dev"]))[0].mean(axis=-1)
    r = int(np.argmin(np.round(dev_ce, 6)))
    assert record.conditional["given_l2"] == CONDITIONAL_L2_GRID[r]
    assert record.conditional["selection"] == "cross-entropy"
    test_bits = gold_log2p(est.gold_log_proba(X["test"][None], y["test"]))[0, r]
    np.testing.assert_allclose(preds.given_log2p, test_bits, atol=1e-9)
    assert record.conditional["given_cross_entropy"] == pytest.approx(-test_bits.mean(),
                                                                      abs=1e-6)
    assert record.information["cross_entropy"] == record.conditional["cross_entropy"]
    assert "cross_entropy" in record.dev  # the [B; R] probe's own choice, recorded


def test_a_kfold_task_is_refused_for_given(toy, tmp_path):
    task, cache = toy
    kfold = dataclasses.replace(task, spec=dataclasses.replace(task.spec, protocol="kfold"),
                                protocol="kfold")
    with pytest.raises(OptionError, match="given: tasks with a dev split only"):
        run_probe(cache, [kfold.spec], None, tmp_path / "r.jsonl",
                  ProbeConfig.build(classifier="lbfgs", given="0"),
                  loader=lambda s, d: kfold)
    assert not (tmp_path / "r.jsonl").exists()


def test_prev_gives_each_layer_the_stored_state_below_it(toy, tmp_path):
    assert given_layer("prev", 3, (0, 2, 3, 6)) == 2
    assert given_layer("prev", 0, (0, 1)) is None and given_layer("prev", "avg", (0, 1)) is None
    assert group_given("prev", [1, 2], (0, 1, 2)) == ((0, 1), (0, 1))
    assert group_given("0", [1, 2, "avg"], (0, 1, 2)) == ((0,), (0, 0, 0))
    # --layers all leaves out what has nothing below; asking for it by name is an error
    assert given_layers("prev", (0, 1, 2, "avg"), "all", 3, (0, 1, 2)) == (1, 2)
    with pytest.raises(OptionError, match="given prev: layer spec"):
        given_layers("prev", (0, 2), "0,2", 3, (0, 1, 2))
    cells = _run(toy, tmp_path, "prev", layers="all", seeds=(1,), given="prev")
    assert sorted(layer for layer, _ in cells) == [1, 2]
    assert {r.conditional["given_layer"] for r, _ in cells.values()} == {0, 1}


def test_a_surface_baseline_is_given_as_its_dense_features(toy, tmp_path):
    task, _ = toy
    features = given_features(task, "length-tokens")("test")
    want = split_matrix(fitted_matrix(task, "length-tokens"), task.splits["test"], "single")
    np.testing.assert_array_equal(features[0], want.toarray().astype(np.float32))
    cells = _run(toy, tmp_path, "length", layers="1", seeds=(1,), given="length-tokens")
    (record, preds), = cells.values()
    assert "given_layer" not in record.conditional  # B is no layer
    # toy sentences' lengths say nothing of the label: the layer keeps what it has alone
    assert record.conditional["gain"] > 0.3


def test_given_is_part_of_the_cell_identity(toy, tmp_path):
    task, cache = toy
    out = tmp_path / "both.jsonl"
    for given in (None, "0"):
        run_probe(cache, [task.spec], None, out,
                  ProbeConfig.build(layers="1", seeds=(1,), classifier="lbfgs", threads=1,
                                    given=given), loader=lambda s, d: task)
    records = read_results(out)
    assert sorted(str(r.given) for r in records) == ["0", "None"]
    key = records[-1].key
    assert key.to_json()[-1] == ["given", "0"]
    assert CellKey.from_json(key.to_json()) == key
    both = CellKey(task="t", layer=1, pooling="cls", seed=1, classifier="lbfgs", model="m",
                   revision=None, control="control-task", prompt="{}", given="prev",
                   erase="length")
    assert CellKey.from_json(json.loads(json.dumps(both.to_json()))) == both


def test_a_correlation_task_is_refused_before_anything_is_written(tmp_path):
    sentences, vec, (sts, sick) = toy_similarity_tasks(60)
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    out = tmp_path / "r.jsonl"
    for flag, value in (("given", "0"), ("erase", "length")):
        with pytest.raises(OptionError, match=f"{flag}: classification tasks only; toy:SICKR"):
            run_probe(cache, [sick.spec], None, out,
                      ProbeConfig.build(classifier="lbfgs", **{flag: value}),
                      loader=lambda s, d: sick)
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--given", "7"], "--given: hidden state 7 is not in the cache"),
    (["--given", "0", "--control", "control-task"], "--given: 0: not with --control"),
    (["--given", "layer0"], "--given: unknown value 'layer0'"),
    (["--given", "prev", "--layers", "0,1"], "--given prev: layer spec(s) 0 have no stored"),
    (["--given", "0", "--erase", "length"], "--given: not with --erase"),
])
def test_bad_given_is_one_error_line_and_nothing_written(tmp_path, args, message):
    assert_probe_refuses(tmp_path, args, message)
