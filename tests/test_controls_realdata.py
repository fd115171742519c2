"""The control task on real data: a slice of TASS1 encoded with the real MiniLM-L6.

What Hewitt & Liang's control tasks are for: a more expressive probe memorises more of a
task whose labels are a random function of the words, so its control accuracy rises; with
shuffled labels it could not (they cap any probe at the majority rate)."""

from __future__ import annotations

import numpy as np
import pytest
from test_probe_realdata import SliceLoader, encoded_tass_slice

pytestmark = [pytest.mark.realdata, pytest.mark.slow]


@pytest.fixture(scope="module")
def tass(es_data_dir, minilm_dir, tmp_path_factory):
    task, cache, _ = encoded_tass_slice(es_data_dir, minilm_dir, tmp_path_factory,
                                        {"train": 1500, "dev": 300, "test": 500})
    return task, cache


def test_both_probes_read_their_task_better_than_its_control(tass, tmp_path):
    """A control task is a floor the probe must clear: for a linear probe and a 256-unit MLP
    the task accuracy is above the control's (positive selectivity), and the control sits at
    or above the majority rate less 5 points (its labels keep the task's class shares).

    Not asserted: that the MLP memorises more of the control than the linear probe (Hewitt &
    Liang's capacity effect). On this 1,500-sentence slice, with the control's length signal
    removed, both stay within about 2.5 points of the majority rate (measured: linear 46.3,
    MLP 45.9, majority 44.0), so the order of the two is noise."""
    from estratos.probe.config import ProbeConfig
    from estratos.probe.estimators.classifiers import SentEvalClassifier
    from estratos.probe.grid.runner import run_probe

    task, cache = tass
    for nhid in (0, 256):
        kw = dict(layers="6", pooling="mean", seeds=(1, 2, 3),
                  classifier=SentEvalClassifier(nhid=nhid), features="standardized",
                  threads=1)
        out = tmp_path / f"r{nhid}.jsonl"
        control = run_probe(cache, [task.spec], None, out,
                            ProbeConfig.build(control="control-task", **kw),
                            loader=SliceLoader(task))
        assert all(r.control["kind"] == "control-task" for r in control)
        real = run_probe(cache, [task.spec], None, out, ProbeConfig.build(**kw),
                         loader=SliceLoader(task))
        c, t = np.mean([r.score for r in control]), np.mean([r.score for r in real])
        majority = control[0].chance["majority"]
        assert t > c > majority - 5, (nhid, t, c, majority)


def test_the_control_score_is_free_of_length_on_every_real_task(es_data_dir):
    """The audit's finding: the control score grew with the word count (|r| up to 0.47 at
    DCwiki, seed 1111). Centred word values and word-count bands leave |r| < 0.05 over each
    real task's examples, for three seeds, with the draw of word values the control keeps
    (measured: at most 0.02, RST)."""
    from estratos.probe.controls import (
        Vocabulary,
        control_labels,
        control_scores,
        example_words,
    )
    from estratos.protocols import get_protocol
    from estratos.tasks import DataDirs, all_specs, load_task

    dirs = DataDirs.parse([str(es_data_dir)])
    worst = {}
    for spec in all_specs():
        if spec.suite not in ("es-senteval", "es-discoeval") or not get_protocol(
                spec.protocol).trains:
            continue
        task = load_task(spec, dirs)
        vocabulary = Vocabulary.of(task.sentences)
        for seed in (1111, 1, 2):
            draw = control_labels(task, seed).draw
            sums, counts = vocabulary.scores(seed, draw)
            n = np.concatenate([example_words(split, sums, counts)[1]
                                for split in task.splits.values()])
            scores = np.concatenate(list(control_scores(task, seed, draw, vocabulary).values()))
            r = abs(float(np.corrcoef(scores, n)[0, 1]))
            worst[spec.id] = max(worst.get(spec.id, 0.0), r)
    assert len(worst) >= 25, sorted(worst)  # every trained task of both suites was read
    assert max(worst.values()) < 0.05, {k: round(v, 3) for k, v in worst.items() if v >= 0.05}


def test_control_labels_keep_their_shares_and_their_words_on_every_real_task(es_data_dir):
    """Issue 48: cut once at the training quantiles, the test split's control shares
    drifted (RST: control majority 22.7 % on train, 28-31 % on test; TASS2 seed 1111: 49.1 %
    against 39.8 %). On every trained task of both suites, for three seeds, each other
    split's control class counts pass a chi-square test of homogeneity with the training
    split's (p >= 0.05), and an example whose bag of words appears on several splits has one
    control label on all of them (measured with each split cut at its own quantiles
    instead: 45-61 of RST's 436 such examples relabelled, for the same three seeds)."""
    from scipy.stats import chi2_contingency

    from estratos.probe.controls import _sentence_words, _training_splits, control_labels
    from estratos.protocols import get_protocol
    from estratos.tasks import DataDirs, all_specs, load_task

    dirs = DataDirs.parse([str(es_data_dir)])
    drift, relabelled = {}, {}
    read = 0
    for spec in all_specs():
        protocol = get_protocol(spec.protocol)
        if spec.suite not in ("es-senteval", "es-discoeval") or not protocol.trains \
                or protocol.scores:
            continue
        task = load_task(spec, dirs)
        read += 1
        words = _sentence_words(task.sentences)
        bags = {name: [tuple(sorted(w for refs in split.slots
                                    for i in refs.indices[refs.offsets[e]:refs.offsets[e + 1]]
                                    for w in words[i]))
                       for e in range(len(split))]
                for name, split in task.splits.items()}
        train = _training_splits(task)
        k = len(task.labels)
        for seed in (1111, 1, 2):
            drawn = control_labels(task, seed)
            reference = np.bincount(np.concatenate([drawn.labels[n] for n in train]),
                                    minlength=k)
            for name, labels in drawn.labels.items():
                if name in train:
                    continue
                table = np.array([reference, np.bincount(labels, minlength=k)])
                table = table[:, table.sum(axis=0) > 0]
                p = chi2_contingency(table, correction=False).pvalue
                if p < 0.05:
                    drift[(spec.id, seed, name)] = round(float(p), 4)
            seen = {}
            for name, labels in drawn.labels.items():
                for bag, label in zip(bags[name], labels):
                    if seen.setdefault(bag, label) != label:
                        relabelled[(spec.id, seed)] = relabelled.get((spec.id, seed), 0) + 1
    assert read >= 25
    assert not drift, drift
    assert not relabelled, relabelled
