"""Probe controls (``--control control-task|label-shuffle``), MDL (``--mdl``) and one-class
cells, on toy tasks and through the CLI."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
from click.testing import CliRunner
from probe_toys import (
    MemoryLoader,
    single_task,
    spec,
    toy_classification,
    toy_similarity_tasks,
    write_cache,
    write_toml_task,
)

from estratos.cli import cli
from estratos.errors import OptionError
from estratos.probe.config import ProbeConfig
from estratos.probe.controls import DEV_PART, ShuffledLabels, permuted
from estratos.probe.estimators.classifiers import SentEvalClassifier
from estratos.probe.grid.runner import run_probe
from estratos.probe.mdl import BLOCK_FRACTIONS, block_ends, code_order, online_code, online_codes
from estratos.results import read_results


def blobs(n, groups, informative, seed=0, dim=6):
    """Two classes; the features of group g carry the label only if g is in informative."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    x = rng.normal(size=(groups, n, dim)).astype(np.float32)
    for g in informative:
        x[g, :, 0] += np.where(y == 1, 3.0, -3.0)
    return x, y


# ---- control labels --------------------------------------------------------------------

def test_permutation_is_per_seed_and_keeps_the_class_counts():
    y = np.arange(50) % 3
    a, b = permuted(y, 1), permuted(y, 2)
    assert np.array_equal(a, permuted(y, 1)) and not np.array_equal(a, b)
    assert np.array_equal(np.bincount(a), np.bincount(y))


def test_control_wrapper_trains_on_permuted_labels_only():
    x, y = blobs(300, 1, (0,))
    make = lambda: SentEvalClassifier(seed=3, max_epoch=20)  # noqa: E731
    control = ShuffledLabels(make, 5).fit(x[:, :200], y[:200], x[:, 200:], y[200:], [1e-4])
    alone = make().fit(x[:, :200], permuted(y[:200], 5), x[:, 200:],
                       permuted(y[200:], 5, DEV_PART), [1e-4])
    np.testing.assert_array_equal(control.predict(x[:, 200:]), alone.predict(x[:, 200:]))
    assert control.dev_score_[0, 0] == alone.dev_score_[0, 0]


def _toy(tmp_path, n=600, majority_share=0.5, constant_states=()):
    """A split task whose layer 1 separates the classes (a small shift on every dimension,
    as in real embeddings, not one giant feature); class 1 has ``majority_share``."""
    sentences, vec, _ = toy_classification(n, informative=())
    rng = np.random.default_rng(1)
    y = (rng.uniform(size=n) < majority_share).astype(np.int64)
    vec[:, 1, :] += np.where(y == 1, 0.6, -0.6)[:, None]
    for state in constant_states:  # a state that says nothing: one vector for every sentence
        vec[:, state, :] = 1.0
    ids = np.arange(n)
    a, b = int(0.6 * n), int(0.8 * n)
    task = single_task(spec(), sentences, {"train": (ids[:a], y[:a]), "dev": (ids[a:b], y[a:b]),
                                           "test": (ids[b:], y[b:])}, ("neg", "pos"))
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    return task, cache, MemoryLoader({task.spec.id: task})


@pytest.mark.parametrize("share", [0.5, 0.75])
def test_control_labels_sit_at_the_majority_rate(tmp_path, share):
    """Over 8 seeds the control's mean accuracy is the majority rate within 6 points (one
    control seed alone varies a lot: measured 33 to 65 on the balanced toy), while the
    ordinary probe scores 88 or more."""
    seeds = tuple(range(1, 9))
    task, cache, loader = _toy(tmp_path, majority_share=share)
    out = tmp_path / "r.jsonl"
    normal = run_probe(cache, [task.spec], None, out,
                       ProbeConfig.build(layers="1", seeds=seeds, threads=1), loader=loader)
    shuffled = ProbeConfig.build(layers="1", seeds=seeds, threads=1, control="label-shuffle")
    control = run_probe(cache, [task.spec], None, out, shuffled, loader=loader)
    assert len(control) == 8 and len(read_results(out)) == 16  # both kinds kept
    assert [r.control for r in control] == [{"kind": "label-shuffle", "seed": s}
                                            for s in seeds]
    majority = control[0].chance["majority"]
    mean_control = np.mean([r.score for r in control])
    assert abs(mean_control - majority) < 6.0, (mean_control, majority)
    assert min(r.score for r in normal) >= 88
    again = run_probe(cache, [task.spec], None, out, shuffled, loader=loader)
    assert len(again) == 0  # done: control cells resume like any other


def test_control_labels_leave_out_untrained_tasks(tmp_path):
    sentences, vec, (sts, sick) = toy_similarity_tasks(120)
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    loader = MemoryLoader({sts.spec.id: sts, sick.spec.id: sick})
    config = ProbeConfig.build(layers="1", threads=1, control="label-shuffle")
    records = run_probe(cache, [sts.spec, sick.spec], None, tmp_path / "r.jsonl", config,
                        loader=loader)
    assert {r.task for r in records} == {sick.spec.id}
    with pytest.raises(OptionError, match="control: no selected task trains"):
        run_probe(cache, [sts.spec], None, tmp_path / "r2.jsonl", config, loader=loader)


# ---- MDL ---------------------------------------------------------------------------------

def test_block_ends_follow_the_standard_fractions():
    assert block_ends(10000) == [10, 20, 40, 80, 160, 320, 625, 1250, 2500, 5000, 10000]
    assert len(BLOCK_FRACTIONS) == 11
    assert block_ends(10) == [1, 2, 5, 10]
    assert block_ends(1) == [1]


def test_online_code_equals_a_hand_computation():
    """Blocks of 2, 4 and 8 examples of 4 classes: the first 2 labels cost 2 bits each, the
    next 2 are coded with p = 1/2 and 1/4 (1 + 2 bits), the last 4 with p = 1 (0 bits)."""
    code = online_code([2, 4, 8], 4, [1.0 + 2.0, 0.0])
    assert code["online_bits"] == 7.0 and code["uniform_bits"] == 16.0
    assert code["compression"] == round(16 / 7, 4)
    assert code["block_bits"] == [4.0, 3.0, 0.0]


def test_label_code_equals_a_hand_computation():
    """The floor: 2 classes, blocks ending at 1, 2 and 4; labels 0, 0, 1, 0. The first label
    costs 1 bit; the second is sent with add-one counts after (0): p(0) = 2/3; the third and
    fourth after (0, 0): p(1) = 1/4, p(0) = 3/4."""
    from estratos.probe.mdl import label_code_bits

    bits = label_code_bits([0, 0, 1, 0], [1, 2, 4], 2)
    expected = 1.0 - math.log2(2 / 3) - math.log2(1 / 4) - math.log2(3 / 4)
    assert bits == pytest.approx(expected)
    code = online_code([1, 2, 4], 2, [0.5, 1.0], floor_bits=bits)
    assert code["floor_compression"] == round(bits / 2.5, 4)


def test_online_codes_equal_a_straightforward_implementation():
    """The online code of a toy problem computed the plain way (each block model trained
    alone on its prefix, its next block's labels coded with its probabilities) equals the
    batched implementation's, for a layer that carries the labels and one that does not;
    the informative layer beats its floor, the uninformative one does not."""
    from estratos.probe.mdl import label_code_bits

    x, y = blobs(400, 2, (0,), seed=8)
    x_dev, y_dev = blobs(100, 2, (0,), seed=9)
    seed, l2 = 5, 1e-4
    template = SentEvalClassifier()
    codes = online_codes(template, (x, y), (x_dev, y_dev), [l2, l2], seed, 2)
    ends, order = block_ends(len(y)), code_order(len(y), seed)
    for g in range(2):
        bits = ends[0] * 1.0
        for start, stop in zip(ends[:-1], ends[1:]):
            model = template.fresh(seed=seed, n_classes=2).fit_subsets(
                x[g:g + 1], y, x_dev[g:g + 1], y_dev, np.array([[l2]]), [order[:start]],
                stop_on="likelihood")
            log_p = model.log_proba(x[g:g + 1][:, order[start:stop]])[0, 0]
            bits -= float(log_p[np.arange(stop - start), y[order[start:stop]]].sum()) / math.log(2)
        assert codes[g]["online_bits"] == pytest.approx(bits, rel=1e-4)
        assert codes[g]["floor_bits"] == pytest.approx(label_code_bits(y[order], ends, 2),
                                                       abs=1e-3)
    assert codes[0]["floor_compression"] > 1.2
    assert codes[1]["floor_compression"] < 1.05


@pytest.mark.parametrize("nhid,dropout", [(0, 0.0), (16, 0.3)])
def test_subset_streams_equal_each_subset_trained_alone(nhid, dropout):
    """Block models as streams of one program: each has the epochs, predictions and
    log-probabilities of the model trained alone on its subset (``fit``, SentEval's loop):
    a stream's short last batch is its own forward/backward of exactly that size."""
    x, y = blobs(330, 2, (0,), seed=4)
    x, y, xd, yd = x[:, :250], y[:250], x[:, 250:], y[250:]
    order = np.random.default_rng(0).permutation(250)
    subsets = [order[:e] for e in (250, 120, 70, 64, 5, 1)]
    kw = dict(nhid=nhid, dropout=dropout, tenacity=1, epoch_size=2, max_epoch=30, seed=3)
    grid = np.array([[1e-5], [1e-1]])
    together = SentEvalClassifier(**kw).fit_subsets(x, y, xd, yd, grid, subsets)
    log_p = together.log_proba(xd)
    for i, sub in enumerate(subsets):
        alone = SentEvalClassifier(**kw).fit(x[:, sub], y[sub], xd, yd, grid)
        rows = slice(2 * i, 2 * i + 2)
        np.testing.assert_array_equal(alone.epochs_, together.epochs_[rows])
        np.testing.assert_array_equal(alone.predict(xd), together.predict(xd)[rows])
        np.testing.assert_array_equal(alone.log_proba(xd), log_p[rows])


def test_online_codes_match_block_models_trained_alone():
    """The batched block models give the code of training each block model alone on its
    prefix and summing -log2 p of the next block by hand (to float rounding)."""
    x, y = blobs(400, 2, (0,), seed=2)
    xt, yt, xd, yd = x[:, :300], y[:300], x[:, 300:], y[300:]
    template = SentEvalClassifier(n_classes=2, seed=7, max_epoch=12, tenacity=2)
    codes = online_codes(template, (xt, yt), (xd, yd), [1e-4, 1e-3], 7, 2)
    ends = block_ends(300)
    order = code_order(300, 7)
    for g, l2 in enumerate([1e-4, 1e-3]):
        bits = [ends[0] * 1.0]
        for start, stop in zip(ends[:-1], ends[1:]):
            alone = SentEvalClassifier(n_classes=2, seed=7, max_epoch=12, tenacity=2)
            alone.fit_subsets(xt[g], yt, xd[g], yd, [l2], [order[:start]],
                              stop_on="likelihood")
            logp = alone.log_proba(xt[g][order[start:stop]])[0, 0]
            bits.append(-logp[np.arange(stop - start), yt[order[start:stop]]].sum()
                        / math.log(2))
        assert codes[g]["online_bits"] == pytest.approx(sum(bits), rel=1e-5)
        assert codes[g]["blocks"] == ends and codes[g]["order_seed"] == 7


def test_mdl_separable_is_far_below_uniform_and_random_labels_near_it():
    """Measured: 151 bits against 600 (compression 3.97); noise features 0.94; the
    separable features with shuffled labels 0.91."""
    x, y = blobs(700, 2, (0,), seed=3, dim=32)
    xt, yt, xd, yd = x[:, :600], y[:600], x[:, 600:], y[600:]
    template = SentEvalClassifier(n_classes=2, seed=1)
    codes = online_codes(template, (xt, yt), (xd, yd), [1e-4, 1e-4], 1, 2)
    assert codes[0]["online_bits"] < 0.3 * codes[0]["uniform_bits"]  # layer that knows it
    assert 0.8 < codes[1]["compression"] < 1.1  # noise features: about the uniform code
    shuffled = np.random.default_rng(0).permutation(yt)
    random = online_codes(template, (xt, shuffled), (xd, yd), [1e-4, 1e-4], 1, 2)
    assert 0.8 < random[0]["compression"] < 1.1


def test_probe_mdl_records_and_cli(tmp_path):
    task, cache, loader = _toy(tmp_path)
    out = tmp_path / "r.jsonl"
    records = run_probe(cache, [task.spec], None, out,
                        ProbeConfig.build(layers="0,1", seeds=(1,), threads=1, mdl=True),
                        loader=loader)
    code = {r.layer: r.mdl for r in records}
    assert code[1]["compression"] > 3 > code[0]["compression"]
    assert code[1]["uniform_bits"] == pytest.approx(360.0)  # 360 training labels, 1 bit
    assert read_results(out) == list(records)
    with pytest.raises(OptionError, match="mdl: the lbfgs classifier"):
        run_probe(cache, [task.spec], None, tmp_path / "x.jsonl",
                  ProbeConfig.build(classifier="lbfgs", mdl=True), loader=loader)
    assert not (tmp_path / "x.jsonl").exists()


# ---- degenerate cells --------------------------------------------------------------------

def test_a_cell_that_predicts_one_class_is_marked(tmp_path):
    """Layer 0 is one vector for every sentence: the probe never leaves the majority."""
    task, cache, loader = _toy(tmp_path, majority_share=0.9, constant_states=(0,))
    records = run_probe(cache, [task.spec], None, tmp_path / "r.jsonl",
                        ProbeConfig.build(layers="0,1", threads=1), loader=loader)
    by_layer = {r.layer: r for r in records}
    assert by_layer[0].degenerate == {"class": "pos", "share": 1.0}
    assert by_layer[0].score == by_layer[0].chance["majority"]
    assert by_layer[1].degenerate is None


def test_cli_control_labels_and_mdl(tmp_path):
    task_file, cache = write_toml_task(tmp_path, 300, (1,), 180, 60)
    out = tmp_path / "r.jsonl"
    base = ["probe", "--cache", str(cache), "--task-file", str(task_file),
            "--out", str(out), "--threads", "1", "--layers", "1"]
    runner = CliRunner()
    res = runner.invoke(cli, base + ["--mdl"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, base + ["--control", "label-shuffle", "--mdl"])
    assert res.exit_code == 0, res.output
    normal, control = read_results(out)
    assert normal.control is None and control.control["kind"] == "label-shuffle"
    assert normal.mdl["compression"] > 2 * control.mdl["compression"]
    res = runner.invoke(cli, base + ["--mdl", "--classifier", "lbfgs"])
    assert res.exit_code == 2 and "--mdl: the lbfgs classifier" in res.output
    # the control task and the standardized reading, each cells of their own
    res = runner.invoke(cli, base + ["--control", "control-task", "--features",
                                     "standardized", "--mdl"])
    assert res.exit_code == 0, res.output
    task_cell = read_results(out)[-1]
    assert task_cell.control["kind"] == "control-task" and task_cell.features == "standardized"
    assert {"floor_bits", "floor_compression"} <= set(task_cell.mdl)
    assert normal.mdl["floor_compression"] > 1.5  # layer 1 carries the labels


# ---- report side -------------------------------------------------------------------------

def test_report_shows_controls_selectivity_mdl_and_one_class_cells(tmp_path):
    """Probe, control-task, label-shuffle and MDL cells in one file, a control model (a
    cache of other vectors with revision random-init:7) in another: `estratos report
    --control` keeps the control rows apart (never ranked), shows selectivity against the
    control task only, compression over the uniform code and over the floor, the control
    model per layer with a paired interval, and marks the one-class cells."""
    task, cache, loader = _toy(tmp_path, majority_share=0.75, constant_states=(0,))
    out = tmp_path / "r.jsonl"
    kw = dict(layers="0,1", seeds=(1, 2), threads=1)
    run_probe(cache, [task.spec], None, out, ProbeConfig.build(mdl=True, **kw), loader=loader)
    run_probe(cache, [task.spec], None, out, ProbeConfig.build(control="label-shuffle", **kw),
              loader=loader)
    run_probe(cache, [task.spec], None, out, ProbeConfig.build(control="control-task", **kw),
              loader=loader)
    sentences = list(task.sentences)
    noise = np.random.default_rng(5).normal(size=(len(sentences), 3, 8)).astype(np.float32)
    noise[:, 0] = 1.0  # layer 0 says nothing: every prediction is one class
    random_cache = write_cache(tmp_path / "random.h5", sentences, noise)
    import h5py

    with h5py.File(random_cache, "r+") as f:  # what encode --random-init 7 records
        f.attrs["revision"] = "random-init:7"
    control_out = tmp_path / "random.jsonl"
    run_probe(random_cache, [task.spec], None, control_out, ProbeConfig.build(**kw),
              loader=loader)
    report = tmp_path / "report"
    plot = ["--plot"] if importlib.util.find_spec("matplotlib") else []  # the plot extra
    res = CliRunner().invoke(cli, ["report", str(out), "--out", str(report), "--control",
                                   str(control_out), "--format", "md,html,csv,json"] + plot)
    assert res.exit_code == 0, res.output
    if plot:  # the MDL curve, and the one-class cells hatched in the heatmaps
        plots = sorted(p.name for p in (report / "plots").iterdir())
        assert any(name.startswith("mdl-compression_") for name in plots)
    md = (report / "report.md").read_text()
    assert "[label-shuffle]" in md and "[control-task]" in md  # apart from the model's
    assert "## Controls: selectivity" in md and "## Controls: MDL compression" in md
    assert "score - control-task score" in md
    selectivity = md.split("## Controls: selectivity")[1].split("\n## ")[0]
    assert "(one class" in selectivity  # layer 0's sides predict one class
    assert "Selectivity over the majorities" in selectivity
    assert "Control task vs its own majority" in selectivity
    assert "MDL compression over the floor" in md
    for line in md.splitlines():  # control rows are references: never marked best
        if "[label-shuffle]" in line or "[control-task]" in line:
            assert "**" not in line, line
    assert "## Controls: control model" in md
    assert "(one class)" in md  # layer 0 of the random model never leaves one class
    section = md.split("## Controls: control model")[1]
    assert "[" in section and "]" in section  # paired interval on the shared test set
    html = (report / "report.html").read_text()
    assert "Controls: selectivity" in html and "font-style:italic" in html
    csv_text = (report / "datasets.csv").read_text()
    assert "control" in csv_text.splitlines()[0] and "compression_mean" in csv_text
    # a control file that matches nothing is an option error, nothing written
    other = tmp_path / "other.jsonl"
    other.write_text(read_results(out)[0].replace(pooling="mean").to_json().__repr__()
                     .replace("'", '"').replace("None", "null").replace("True", "true")
                     .replace("False", "false") + "\n")
    res = CliRunner().invoke(cli, ["report", str(out), "--out", str(tmp_path / "r2"),
                                   "--control", str(other)])
    assert res.exit_code == 2 and "--control: no cell of" in res.output
    assert not (tmp_path / "r2").exists()
    assert "holds no random-init control model" not in md
    # a control file of another model, not a random-init one: the report says so
    plain = write_cache(tmp_path / "plain.h5", sentences, noise, model="org/other")
    plain_out = tmp_path / "plain.jsonl"
    run_probe(plain, [task.spec], None, plain_out, ProbeConfig.build(**kw), loader=loader)
    res = CliRunner().invoke(cli, ["report", str(out), "--out", str(tmp_path / "r3"),
                                   "--control", str(plain_out), "--format", "md"])
    assert res.exit_code == 0, res.output  # (the warning goes to the log, on stderr)
    assert "holds no random-init control model" in (tmp_path / "r3" / "report.md").read_text()


# ---- the control task ----------------------------------------------------------------------

def test_control_task_is_a_fixed_function_of_the_words_with_the_task_distribution(tmp_path):
    """Same words -> same control label (word order and case do not matter), the training
    split keeps the task's class shares, dev and test follow the same cut points, and the
    labels change with the seed; the record keeps the source task's data digest."""
    from estratos.probe.controls import control_task

    task, cache, loader = _toy(tmp_path, majority_share=0.75)
    a, b = control_task(task, 1), control_task(task, 2)
    assert np.array_equal(a.splits["train"].labels, control_task(task, 1).splits["train"].labels)
    assert not np.array_equal(a.splits["train"].labels, b.splits["train"].labels)
    true_counts = np.bincount(task.splits["train"].labels, minlength=2)
    ctrl_counts = np.bincount(a.splits["train"].labels, minlength=2)
    assert abs(int(ctrl_counts[0]) - int(true_counts[0])) <= 1
    assert a.sentences == task.sentences and a.sizes == task.sizes
    # a function of the bag of words: a reordered, upper-cased copy gets the same label
    from estratos.probe.controls import example_scores, word_scores

    sums, counts = word_scores(["el perro come", "COME el Perro", "la casa"], seed=3)
    assert sums[0] == pytest.approx(sums[1]) and counts[0] == counts[1] == 3
    out = tmp_path / "r.jsonl"
    control = ProbeConfig.build(layers="1", seeds=(1,), threads=1, control="control-task")
    records = run_probe(cache, [task.spec], None, out, control, loader=loader)
    normal = run_probe(cache, [task.spec], None, out,
                       ProbeConfig.build(layers="1", seeds=(1,), threads=1), loader=loader)
    assert records[0].control == {"kind": "control-task", "seed": 1}
    assert records[0].data_digest == normal[0].data_digest == task.digest
    # resuming the control run finds its cells done (not refused as other data)
    assert len(run_probe(cache, [task.spec], None, out, control, loader=loader)) == 0
    del example_scores


def test_the_control_score_carries_no_length():
    """Sentences of a frequent word repeated 1 to 30 times, each with one rare word: without
    the centring and the word-count bands, the frequent word's drawn value times the square
    root of the length makes the score a length feature; the control task's score has
    |r| < 0.05 with the word count over the task's examples and over the training split,
    and its labels keep the training class shares."""
    from estratos.probe.controls import control_scores, control_task, example_scores, word_scores

    n = 1200
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 31, size=n)
    sentences = [" ".join(["de"] * int(k) + [f"palabra{i}"]) for i, k in enumerate(lengths)]
    y = (rng.uniform(size=n) < 0.3).astype(np.int64)
    ids = np.arange(n)
    task = single_task(spec(), sentences, {"train": (ids[:800], y[:800]),
                                           "dev": (ids[800:1000], y[800:1000]),
                                           "test": (ids[1000:], y[1000:])}, ("neg", "pos"))
    words = lengths + 1.0
    sums, counts = word_scores(task.sentences, 1)
    raw = example_scores(task.splits["train"], sums, counts)
    assert abs(np.corrcoef(raw, words[:800])[0, 1]) > 0.5  # what the centring removes
    scores = control_scores(task, 1)
    every = np.concatenate([scores["train"], scores["dev"], scores["test"]])
    assert abs(np.corrcoef(every, words)[0, 1]) < 0.05
    assert abs(np.corrcoef(scores["train"], words[:800])[0, 1]) < 0.05
    labels = control_task(task, 1).splits["train"].labels
    assert abs(np.mean(labels == 1) - np.mean(y[:800] == 1)) < 0.01


def test_standardized_features_read_what_raw_ones_miss(tmp_path):
    """Layer 1's vectors vary little around a large mean (as a mean-trained encoder's [CLS]
    does): SentEval's probe on raw features stays at one class (flagged, with the hint), the
    same probe on standardized features reads the classes; both readings are cells of one
    results file, told apart by ``features``."""
    task, cache, loader = _toy(tmp_path, majority_share=0.75)
    import h5py

    with h5py.File(cache, "r+") as f:
        for name in f["vectors"]:
            v = f["vectors"][name][...].astype(np.float32)
            v[:, 1, :] = 100.0 + 0.01 * v[:, 1, :]
            f["vectors"][name][...] = v
    out = tmp_path / "r.jsonl"
    kw = dict(layers="1", seeds=(1, 2), threads=1)
    raw = run_probe(cache, [task.spec], None, out, ProbeConfig.build(**kw), loader=loader)
    std = run_probe(cache, [task.spec], None, out,
                    ProbeConfig.build(features="standardized", **kw), loader=loader)
    assert {r.features for r in raw} == {"raw"} and {r.features for r in std} == {"standardized"}
    assert len(read_results(out)) == 4
    assert min(r.score for r in std) > max(r.score for r in raw) + 10
    assert all(r.degenerate for r in raw) and not any(r.degenerate for r in std)
    assert "--features standardized" in raw.describe()
    assert "--features standardized" not in std.describe()


def test_cli_features_and_control_options(tmp_path):
    """--features and --control through the CLI: an unknown value is an option error (exit 2)
    naming the option, before anything is written."""
    runner = CliRunner()
    for option, value in (("--features", "whitened"), ("--control", "permuted-labels")):
        res = runner.invoke(cli, ["probe", "--cache", str(tmp_path / "none.h5"), "--tasks",
                                  "x", "--out", str(tmp_path / "r.jsonl"), option, value])
        assert res.exit_code == 2 and option in res.output, res.output
        assert not (tmp_path / "r.jsonl").exists()


def test_a_decoder_cache_read_raw_is_told_to_read_standardized_too(tmp_path, caplog):
    import logging

    import h5py

    from estratos.cache.architecture import DECODER

    task, cache, loader = _toy(tmp_path)
    with h5py.File(cache, "r+") as f:
        f.attrs["architecture"] = DECODER
    kw = dict(layers="1", pooling="mean", threads=1)
    with caplog.at_level(logging.WARNING, logger="estratos"):
        run_probe(cache, [task.spec], None, tmp_path / "r.jsonl", ProbeConfig.build(**kw),
                  loader=loader)
    assert "decoder-only model's cache" in caplog.text and "--features standardized" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="estratos"):
        run_probe(cache, [task.spec], None, tmp_path / "r.jsonl",
                  ProbeConfig.build(features="standardized", **kw), loader=loader)
    assert "decoder-only model's cache" not in caplog.text


def test_cli_summary_gives_the_standardized_command_for_one_class_raw_cells(tmp_path):
    import shlex

    import h5py

    task_file, cache = write_toml_task(tmp_path, 300, (1,), 180, 60)
    with h5py.File(cache, "r+") as f:  # layer 0: one vector for every sentence
        for name in f["vectors"]:
            v = f["vectors"][name][...]
            v[:, 0, :] = 1.0
            f["vectors"][name][...] = v
    out = tmp_path / "r.jsonl"
    args = ["probe", "--cache", str(cache), "--task-file", str(task_file), "--out", str(out),
            "--threads", "1", "--layers", "0,1"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "one class at layer 0" in res.output
    hint = res.output.splitlines()[res.output.splitlines().index(next(
        line for line in res.output.splitlines() if "could not read" in line)) + 1].strip()
    words = shlex.split(hint)
    assert words[:2] == ["estratos", "probe"] and words[-2:] == ["--features", "standardized"]
    assert words[words.index("--out") + 1] == str(out)
    assert words[words.index("--layers") + 1] == "0,1"
    # the hinted command runs and adds the standardized reading beside the raw one
    res = CliRunner().invoke(cli, words[1:])
    assert res.exit_code == 0, res.output
    assert {r.features for r in read_results(out)} == {"raw", "standardized"}


def test_compare_pairs_the_raw_and_standardized_readings_of_a_cell(tmp_path):
    task, cache, loader = _toy(tmp_path, majority_share=0.75)
    out = tmp_path / "r.jsonl"
    kw = dict(layers="1", seeds=(1, 2), threads=1)
    run_probe(cache, [task.spec], None, out, ProbeConfig.build(**kw), loader=loader)
    run_probe(cache, [task.spec], None, out, ProbeConfig.build(features="standardized", **kw),
              loader=loader)
    runner = CliRunner()
    res = runner.invoke(cli, ["compare", str(out), "--task", task.spec.id, "--a", "layer=1"
                              ",features=raw", "--b", "layer=1,features=standardized"])
    assert res.exit_code == 0, res.output
    assert "features=standardized" in res.output
    res = runner.invoke(cli, ["compare", str(out), "--task", task.spec.id, "--a", "layer=1",
                              "--b", "layer=1,features=standardized"])
    assert res.exit_code == 2 and "features" in res.output  # two readings: name one


def test_a_prompted_cache_gives_cells_of_their_own(tmp_path):
    """The same model encoded with and without a prompt (encode --prompt): the cells of both
    live in one results file, and the report shows them as rows of their own."""
    import shutil

    import h5py

    task, cache, loader = _toy(tmp_path)
    prompted = tmp_path / "prompted.h5"
    shutil.copy(cache, prompted)
    template = 'This sentence : "{}" means in one word:"'
    with h5py.File(prompted, "r+") as f:
        f.attrs["prompt"] = template
        f.attrs["prompt_kind"] = "text"
    out = tmp_path / "r.jsonl"
    config = ProbeConfig.build(layers="1", seeds=(1,), threads=1)
    plain = run_probe(cache, [task.spec], None, out, config, loader=loader)
    with_prompt = run_probe(prompted, [task.spec], None, out, config, loader=loader)
    assert len(plain) == len(with_prompt) == 1  # not taken for the plain cell
    assert plain[0].prompt is None and with_prompt[0].prompt == template
    assert read_results(out)[1].key.prompt == template
    res = CliRunner().invoke(cli, ["report", str(out), "--out", str(tmp_path / "rep"),
                                   "--format", "md"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "(prompt " in md and "means in one word" in md


def test_control_l2_task_reuses_each_task_cells_l2_and_is_a_cell_of_its_own(tmp_path):
    """``--control-l2 task``: each control cell trains with the L2 its task cell chose (one
    value, so no choice of its own), records ``"l2": "task"`` in its control object and is
    a cell apart from the own-L2 control (both kept in one file); without the task cells in
    --out it is one Error line naming the command, nothing written; the report gives it a
    selectivity table of its own."""
    task_file, cache = write_toml_task(tmp_path, 300, (1,), 180, 60)
    out = tmp_path / "r.jsonl"
    base = ["probe", "--cache", str(cache), "--task-file", str(task_file),
            "--out", str(out), "--threads", "1", "--layers", "0,1", "--seeds", "1,2"]
    runner = CliRunner()
    fixed = base + ["--control", "control-task", "--control-l2", "task"]
    res = runner.invoke(cli, fixed)
    assert res.exit_code == 2, res.output
    assert "--control-l2 task: 4 control cell(s) have no task cell" in res.output
    assert "without --control and --control-l2 first" in res.output and not out.exists()
    res = runner.invoke(cli, base + ["--control-l2", "task"])
    assert res.exit_code == 2 and "only with --control" in res.output
    for args in (base, base + ["--control", "control-task"], fixed):
        res = runner.invoke(cli, args)
        assert res.exit_code == 0, res.output
    cells = read_results(out)
    assert len(cells) == 12
    task_l2 = {(c.layer, c.seed): c.l2 for c in cells if c.control is None}
    same = [c for c in cells if c.control and c.control.get("l2") == "task"]
    own = [c for c in cells if c.control and "l2" not in c.control]
    assert len(same) == 4 and len(own) == 4
    for c in same:
        assert c.l2 == task_l2[(c.layer, c.seed)]
        assert c.control == {"kind": "control-task", "seed": c.seed, "l2": "task"}
    assert {c.key for c in same}.isdisjoint({c.key for c in own})
    res = runner.invoke(cli, fixed)  # resumes: nothing left to do
    assert res.exit_code == 0 and len(read_results(out)) == 12, res.output
    res = runner.invoke(cli, ["report", str(out), "--out", str(tmp_path / "rep"), "--format",
                              "md"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    assert "(control with the task's L2)" in md and "Selectivity:" in md


def test_control_task_cells_under_ci_are_explained_not_reported_as_faults(tmp_path):
    """`report --ci` with control-task cells over several seeds: no interval over seeds (each
    seed has its own control labels), said as intended, not as cells without usable
    predictions."""
    task_file, cache = write_toml_task(tmp_path, 300, (1,), 180, 60)
    out = tmp_path / "r.jsonl"
    base = ["probe", "--cache", str(cache), "--task-file", str(task_file), "--out", str(out),
            "--threads", "1", "--layers", "0,1", "--seeds", "1,2"]
    runner = CliRunner()
    for args in (base, base + ["--control", "control-task"]):
        assert runner.invoke(cli, args).exit_code == 0
    res = runner.invoke(cli, ["report", str(out), "--out", str(tmp_path / "rep"), "--ci",
                              "--format", "md"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    assert "2 control-task cell(s) have no interval over their seeds" in md
    assert "as intended" in md and "no usable predictions" not in md


def test_control_labels_are_one_function_of_the_words_with_the_training_shares_everywhere():
    """A test split whose new sentences share a frequent word sits apart from the training
    scores. Cut at the training quantiles with one draw of word values, its control shares
    drifted (seed 1: class c 40 % of test, 20 % of train); cut at the test split's own
    quantiles, test copies of training sentences got other labels than their originals
    (seed 1: 31 of 100). Here each split's shares stay within 3 binomial standard errors of
    the training split's, and every copy keeps its original's label."""
    from estratos.probe.controls import control_task

    rng = np.random.default_rng(1)
    plain = [" ".join(f"w{j}" for j in rng.integers(0, 300, size=8)) + f" u{i}"
             for i in range(1200)]
    # as long as the others (one word-count band), but three of their words are one word
    shared = [" ".join(f"w{j}" for j in rng.integers(0, 300, size=5))
              + f" común común común v{i}" for i in range(200)]
    y = np.array(([0] * 5 + [1] * 3 + [2] * 2) * 150)
    ids = np.arange(1200)
    copies = ids[:100]  # test examples that are training sentences again
    task = single_task(spec(), plain + shared,
                       {"train": (ids[:1000], y[:1000]), "dev": (ids[1000:1200], y[1000:1200]),
                        "test": (np.concatenate([copies, np.arange(1200, 1400)]), y[:300])},
                       ("a", "b", "c"))
    for seed in (1, 2, 3):
        control = control_task(task, seed)
        train = np.bincount(control.splits["train"].labels, minlength=3) / 1000
        assert np.abs(train - [0.5, 0.3, 0.2]).max() <= 0.001
        for name, size in (("dev", 200), ("test", 300)):
            shares = np.bincount(control.splits[name].labels, minlength=3) / size
            z = np.abs(shares - train) / np.sqrt(train * (1 - train) / size)
            assert z.max() < 3.0, (seed, name, shares, train)
        np.testing.assert_array_equal(control.splits["test"].labels[:100],
                                      control.splits["train"].labels[:100])


def test_a_control_below_its_own_majority_is_flagged_and_read_over_the_majorities(tmp_path):
    """RST's shape (docs/controls.md): the control task scores 12.5 while its own test
    labels' majority is 28.0; the task scores 33.6 against its majority of 20.7. Selectivity
    (21.1) is flagged, never marked best, and the reading over the majorities subtracts
    each side's majority: (33.6 - 20.7) - (12.5 - 28.0) = 28.4."""
    from report_toys import record, write_lines

    from estratos.report.build import build_report
    from estratos.report.writers import to_markdown

    lines = []
    for layer, (score, control) in {1: (33.6, 12.5), 2: (30.0, 29.0)}.items():
        plain = record("es-discoeval:RST", "DR", layer, 1, score)
        plain["chance"] = {"n_classes": 29, "majority": 20.7}
        ctrl = record("es-discoeval:RST", "DR", layer, 1, control)
        ctrl["chance"] = {"n_classes": 29, "majority": 28.0}
        ctrl["control"] = {"kind": "control-task", "seed": 1}
        lines += [plain, ctrl]
    path = write_lines(tmp_path / "r.jsonl", lines)
    content = build_report([path])
    md = to_markdown(content)
    section = md.split("## Controls: selectivity")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| DR")]
    plain_row, majority_row, control_row = rows
    assert "21.1 (control below its majority)" in plain_row and "**21.1" not in plain_row
    assert "28.4 (control below its majority)" in majority_row
    assert "12.5 / 28.0 (below)" in control_row and "29.0 / 28.0 |" in control_row
    # the dataset's own majority stays the task's, not the control task's
    assert content.agg.datasets[0].chance is None or "28.0" not in str(
        content.agg.datasets[0].chance)
