"""Concept erasure (issue 46, item 3): ``probe --erase CONCEPT`` erases a concept from each
layer spec's features with LEACE, fitted on the training split only, and probes the task as
usual. The reviewer's checks: after ``--erase labels`` the task's own probe is at its
majority class on every layer, after ``--erase length`` a linear probe of the length bins is
at its majority, the eraser sees no dev or test example, and each measure matches a plain
reference written from its definition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from probe_toys import assert_probe_refuses, toy_split_task, write_cache

from estratos.probe.config import ProbeConfig
from estratos.probe.erasure import (
    LENGTH_BINS,
    Concept,
    ErasedFeatures,
    concept_of,
    fit_erasure,
    random_projection,
)
from estratos.probe.grid.runner import run_probe
from estratos.results import read_results


def _tolerance(p: float, n: int) -> float:
    """Two and a half binomial standard errors (percent) of a rate ``p`` on ``n`` examples:
    how far above its majority a probe of an erased concept may land by chance."""
    return 250.0 * math.sqrt(p * (1 - p) / n)


@pytest.fixture(scope="module")
def length_toy(tmp_path_factory):
    """A split task whose layers 1 and 2 carry the label AND each example's token count
    (dimension 1 of every state grows with it), in a cache whose token counts vary."""
    folder = tmp_path_factory.mktemp("length")
    task, sentences, vec = toy_split_task(600, informative=(1, 2))
    rng = np.random.default_rng(5)
    tokens = rng.integers(4, 40, size=len(sentences))
    vec[:, 1:, 1] += 0.5 * tokens[:, None]
    return task, write_cache(folder / "c.h5", sentences, vec, n_tokens=tokens.tolist()), tokens


def _run(toy, tmp_path, name, **options):
    task, cache = toy[:2]
    out = tmp_path / f"{name}.jsonl"
    run_probe(cache, [task.spec], None, out,
              ProbeConfig.build(classifier="lbfgs", threads=1, seeds=(1,), **options),
              loader=lambda s, d: task)
    return {r.layer: r for r in read_results(out)}


def test_erasing_the_labels_leaves_the_task_at_its_majority_on_every_layer(length_toy,
                                                                           tmp_path):
    plain = _run(length_toy, tmp_path, "plain", layers="all")
    erased = _run(length_toy, tmp_path, "labels", layers="all", erase="labels")
    n = len(length_toy[0].splits["test"])
    for layer, record in erased.items():
        majority = record.chance["majority"]
        assert record.score <= majority + _tolerance(majority / 100, n), (layer, record.score)
        assert record.erasure["concept"] == "labels" and record.erasure["rank"] == 1
        assert record.erasure["concept_accuracy"] <= majority + _tolerance(majority / 100, n)
        assert record.erase == "labels" and record.key.to_json()[-1] == ["erase", "labels"]
    assert plain[1].score > 90 and erased[1].score < 60  # the label was there, and is gone


def test_erasing_length_leaves_a_probe_of_its_bins_at_their_majority(length_toy, tmp_path):
    erased = _run(length_toy, tmp_path, "length", layers="1,2", erase="length")
    n = len(length_toy[0].splits["test"])
    for layer, record in erased.items():
        info = record.erasure
        assert info["concept"] == "length" and len(info["bins"]) == LENGTH_BINS - 1
        assert info["concept_accuracy_before"] > info["concept_majority"] + 20  # it was there
        share = info["concept_majority"] / 100
        assert info["concept_accuracy"] <= info["concept_majority"] + _tolerance(share, n)
        assert record.score > 85  # the label is not length: it survives


def test_the_length_concept_is_the_examples_token_count_in_equal_frequency_bins(length_toy):
    task, _, tokens = length_toy
    concept = concept_of(task, "length", tokens)
    train_ids = task.splits["train"].slots[0].indices
    want = np.searchsorted(np.unique(np.quantile(tokens[train_ids].astype(float),
                                                 np.linspace(0, 1, LENGTH_BINS + 1)[1:-1])),
                           tokens[train_ids], side="right")
    np.testing.assert_array_equal(concept.labels["train"], want)
    assert np.bincount(concept.labels["train"]).max() < 0.3 * len(train_ids)  # ~equal shares


def test_leace_equalizes_the_class_means_of_the_training_features():
    """LEACE's guarantee, from its definition: after erasure every class of the concept has
    the same mean on the data the eraser was fitted on (so no linear classifier beats a
    constant one there)."""
    rng = np.random.default_rng(0)
    z = rng.integers(0, 3, size=500)
    X = rng.normal(size=(500, 12)) + np.eye(3, 12)[z] * 3.0
    erased = fit_erasure(Concept("labels", {"train": z}), X.astype(np.float32), z)
    out = erased.apply(X.astype(np.float32)).astype(np.float64)
    means = np.stack([out[z == k].mean(axis=0) for k in range(3)])
    assert np.abs(means - means.mean(axis=0)).max() < 1e-4
    assert erased.rank == 2  # k - 1 directions for k classes


def test_the_eraser_sees_no_dev_or_test_example():
    """Fitted on train alone and compared: the edited dev and test features are what an
    eraser fitted on the training features alone makes of them, whatever dev and test hold."""
    rng = np.random.default_rng(1)
    X = {s: rng.normal(size=(1, n, 6)).astype(np.float32)
         for s, n in (("train", 200), ("dev", 50), ("test", 60))}
    z = {s: rng.integers(0, 2, size=x.shape[1]) for s, x in X.items()}
    task, _, _ = toy_split_task(40)
    concept = Concept("labels", z)
    erased = ErasedFeatures(task, concept, lambda split: X[split])
    alone = fit_erasure(concept, X["train"][0], z["train"])
    np.testing.assert_allclose(erased("test")[0], alone.apply(X["test"][0]), rtol=1e-6)
    moved = {**X, "test": X["test"] * 100.0, "dev": X["dev"] + 7.0}
    again = ErasedFeatures(task, concept, lambda split: moved[split])
    np.testing.assert_allclose(again("train"), erased("train"), rtol=1e-6)


def test_a_random_erasure_removes_a_subspace_of_its_rank(length_toy, tmp_path):
    basis = random_projection(10, 3)
    np.testing.assert_allclose(basis.T @ basis, np.eye(3), atol=1e-12)
    X = np.random.default_rng(2).normal(size=(80, 10)).astype(np.float32)
    erased = fit_erasure(Concept("random:3", None, rank=3), X)
    assert np.linalg.matrix_rank((X - erased.apply(X)).astype(np.float64), tol=1e-4) == 3
    cells = _run(length_toy, tmp_path, "random", layers="1", erase="random:3")
    assert cells[1].erasure == {"concept": "random:3", "rank": 3}
    assert cells[1].score > 85  # three random directions of 8 keep the label


@pytest.mark.parametrize("args, message", [
    (["--erase", "length"], "--erase length: custom:Toy's training examples all fall in one"),
    (["--erase", "labels", "--control", "label-shuffle"], "--erase: labels: not with --control"),
    (["--erase", "random:0"], "--erase: 'random:0': random erasure takes a rank"),
    (["--erase", "size"], "--erase: unknown concept 'size'"),
])
def test_bad_erase_is_one_error_line_and_nothing_written(tmp_path, args, message):
    assert_probe_refuses(tmp_path, args, message)


def test_the_report_shows_the_concept_probe_after_erasure_beside_its_majority(length_toy,
                                                                              tmp_path):
    from estratos.report.build import build_report
    from estratos.report.writers import to_markdown

    erased = _run(length_toy, tmp_path, "shown", layers="1", erase="labels")
    _run(length_toy, tmp_path, "shown", layers="1")  # the unerased cell, same file
    md = to_markdown(build_report([tmp_path / "shown.jsonl"]))
    section = md[md.index("## Concept erasure"):]
    info = erased[1].erasure
    assert (f"{info['concept_accuracy']:.2f} ({info['concept_accuracy_before']:.2f}) / "
            f"{info['concept_majority']:.2f}") in section
    assert "[erase labels]" in section and section.count("| SC |") == 1  # the erased row only


def test_a_feature_constant_on_train_stays_exactly_constant():
    """LEACE leaves a constant feature as rounding noise that follows the concept; erased
    features keep it constant, so no standardizing probe can scale the noise up."""
    rng = np.random.default_rng(4)
    z = rng.integers(0, 4, size=3000)
    X = rng.normal(size=(3000, 16)) * 0.1 + np.eye(4, 16)[z] * 0.5
    X[:, 5] = 0.3070427  # constant, as three of MiniLM's layer-6 features are
    X[:, 9] = -1.25
    erased = fit_erasure(Concept("length", {"train": z}), X.astype(np.float32), z)
    out = erased.apply(X.astype(np.float32))
    assert np.all(out[:, 5] == out[0, 5]) and np.all(out[:, 9] == out[0, 9])
    assert out[0, 5] == pytest.approx(0.3070427, abs=1e-6)
    from estratos.probe.erasure import check_probe

    majority = 100.0 * np.bincount(z).max() / len(z)
    assert check_probe(out[:2000], z[:2000], out[2000:], z[2000:]) <= majority + _tolerance(
        majority / 100, 1000)
