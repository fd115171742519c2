"""Every dataset of the real Spanish SentEval / DiscoEval loads with the published sizes."""

from __future__ import annotations

import numpy as np
import pytest

from estratos.tasks import (COMBINER_SLOTS, DataDirs, describe_task, get_spec, load_task,
                            select_tasks)
from estratos.text import normalize_sentence

pytestmark = pytest.mark.realdata

#: (train, dev, test) example counts, from the files (fallback sizes: 10% of valid held out)
EXPECTED = {
    "es-senteval:TASS1": {"train": 4802, "dev": 2443, "test": 7260},
    "es-senteval:TASS2": {"train": 5886, "dev": 857, "test": 1665},
    "es-senteval:MC": {"all": 2623},
    "es-senteval:FAC": {"all": 5000},
    "es-senteval:SQC": {"train": 6071, "test": 675},
    "es-senteval:PAWS": {"all": 2000},
    "es-senteval:NLI": {"train": 5010, "dev": 2490, "test": 2490},
    "es-senteval:SICKEntailment": {"train": 4439, "dev": 495, "test": 4906},
    "es-senteval:SICKRelatedness": {"train": 4439, "dev": 495, "test": 4906},
    "es-senteval:STS14": {"news": 480, "wikipedia": 324},
    "es-senteval:STS15": {"newswire": 500, "wikipedia": 251},
    "es-senteval:STS17": {"track3.es-es": 250},
    "es-senteval:Length": {"train": 4498, "dev": 500, "test": 4998},
    "es-discoeval:SPthesis": {"train": 2525, "dev": 280, "test": 2805},
    "es-discoeval:SPnews": {"train": 3600, "dev": 400, "test": 4000},
    "es-discoeval:BSOthesis": {"train": 16838, "dev": 5610, "test": 5610},
    "es-discoeval:BSOwiki": {"train": 20000, "dev": 8000, "test": 8000},
    "es-discoeval:DCwiki": {"train": 3600, "dev": 400, "test": 4000},
    "es-discoeval:DCgdd": {"train": 6215, "dev": 306, "test": 128},
    "es-discoeval:SSPmlsum": {"train": 10000, "dev": 4000, "test": 4000},
    "es-discoeval:RST": {"train": 2189, "dev": 570, "test": 556},
}
for _name in ("WordContent", "Depth", "BigramShift", "Tense", "SubjNumber", "ObjNumber",
              "OddManOut", "CoordinationInversion"):
    EXPECTED[f"es-senteval:{_name}"] = {"train": 9000, "dev": 1000, "test": 10000}
# X-Probe's tree_depth va.txt is te.txt: the test file alone is split 70/10/20 instead
EXPECTED["es-senteval:Depth"] = {"train": 7000, "dev": 1000, "test": 2000}
for _name in ("SPwiki",):
    EXPECTED[f"es-discoeval:{_name}"] = {"train": 3600, "dev": 400, "test": 4000}
for _name in ("BSOnews",):
    EXPECTED[f"es-discoeval:{_name}"] = {"train": 20000, "dev": 8000, "test": 8000}
EXPECTED["es-discoeval:DCopus"] = {"train": 10000, "dev": 4000, "test": 4000}

FALLBACK_TASKS = {"es-senteval:PAWS", "es-discoeval:SPthesis", "es-discoeval:SPnews",
                  "es-discoeval:SPwiki", "es-discoeval:DCwiki"} | {
    f"es-senteval:{n}" for n in ("Length", "WordContent", "Depth", "BigramShift", "Tense",
                                 "SubjNumber", "ObjNumber", "OddManOut",
                                 "CoordinationInversion")}


@pytest.fixture(scope="module")
def es_dirs(es_data_dir):
    return DataDirs.parse([str(es_data_dir)])


@pytest.fixture(scope="module")
def loaded(es_dirs):
    return {spec.id: load_task(spec, es_dirs)
            for spec in select_tasks("es-senteval,es-discoeval")}


def test_all_32_spanish_datasets_are_registered():
    specs = select_tasks("es-senteval,es-discoeval")
    assert len(specs) == 32
    assert set(EXPECTED) == {s.id for s in specs}
    assert {s.group for s in specs} == {"SC", "SPC", "SS", "LPT", "SP", "BSO", "DC", "SSP",
                                        "DR"}


def test_every_dataset_loads_with_the_published_sizes(loaded):
    for task_id, sizes in EXPECTED.items():
        assert loaded[task_id].sizes == sizes, task_id


def test_fallbacks_are_applied_and_reported(loaded):
    for task_id, data in loaded.items():
        assert (data.fallback is not None) == (task_id in FALLBACK_TASKS), task_id
    paws = loaded["es-senteval:PAWS"]
    assert paws.protocol == "inner-kfold" and "paraphrase_train.txt" in paws.fallback
    sp = loaded["es-discoeval:SPwiki"]
    assert sp.protocol == "split" and "held-out 10%" in sp.fallback
    assert "X-Probe" in loaded["es-senteval:Tense"].fallback


def test_sentences_are_normalized_unique_and_referenced(loaded):
    for task_id, data in loaded.items():
        assert len(set(data.sentences)) == len(data.sentences), task_id
        assert all(s and normalize_sentence(s) == s for s in data.sentences), task_id
        used = np.zeros(len(data.sentences), dtype=bool)
        for split in data.splits.values():
            assert len(split.slots) == COMBINER_SLOTS[data.spec.combiner]
            for slot in split.slots:
                assert slot.indices.min() >= 0 and slot.indices.max() < len(data.sentences)
                used[slot.indices] = True
        assert used.all(), f"{task_id}: unreferenced sentences"


def test_labels_are_sorted_and_ids_in_range(loaded):
    for task_id, data in loaded.items():
        if data.protocol in ("cosine", "relatedness"):
            assert data.labels == ()
            for split in data.splits.values():
                assert split.labels.dtype == np.float64
            continue
        assert list(data.labels) == sorted(data.labels), task_id
        for split in data.splits.values():
            assert split.labels.dtype == np.int64
            assert 0 <= split.labels.min() and split.labels.max() < len(data.labels)


def test_rst_has_29_relations_and_averaged_subtrees(loaded):
    rst = loaded["es-discoeval:RST"]
    assert len(rst.labels) == 29
    train = rst.splits["train"]
    first_left = train.slots[0]
    # the first record's right subtree has one EDU; some subtrees have several
    assert not all(s.is_single for s in train.slots)
    assert rst.sentences[first_left.indices[0]].startswith("El artículo aborda")
    assert rst.labels[train.labels[0]] == "NS-Preparación"


def test_bso_pairs_give_both_orders(loaded):
    bso = loaded["es-discoeval:BSOwiki"]
    train = bso.splits["train"]
    assert len(train) == 20000
    first, second = train.slots
    ones = train.labels == bso.labels.index("1")
    assert ones.sum() == 10000
    pos = set(zip(first.indices[ones], second.indices[ones]))
    neg = set(zip(second.indices[~ones], first.indices[~ones]))
    assert pos == neg
    assert not (ones[:5000].all() or (~ones[:5000]).all()), "examples must be shuffled"


def test_sts_scores_and_sick_relatedness_range(loaded):
    sts = loaded["es-senteval:STS17"].splits["track3.es-es"]
    assert sts.labels[0] == pytest.approx(4.8)
    sick = loaded["es-senteval:SICKRelatedness"]
    for split in sick.splits.values():
        assert split.labels.min() >= 1.0 and split.labels.max() <= 5.0


def test_loading_is_deterministic(es_dirs, loaded):
    again = load_task(get_spec("es-discoeval:SPthesis"), es_dirs)
    before = loaded["es-discoeval:SPthesis"]
    assert again.sentences == before.sentences
    for name in ("train", "dev", "test"):
        np.testing.assert_array_equal(again.splits[name].labels, before.splits[name].labels)
        np.testing.assert_array_equal(again.splits[name].slots[0].indices,
                                      before.splits[name].slots[0].indices)


def test_held_out_dev_is_stratified_and_disjoint(loaded):
    data = loaded["es-senteval:Tense"]
    train, dev = data.splits["train"], data.splits["dev"]
    assert len(train) + len(dev) == 10000 and len(dev) == 1000
    # each class keeps its share (+-1) in the held-out part
    for cls in range(len(data.labels)):
        share = (dev.labels == cls).sum() / len(dev)
        total = ((dev.labels == cls).sum() + (train.labels == cls).sum()) / (len(dev) + len(train))
        assert abs(share - total) < 0.002


def test_describe_counts_match_loaded_sizes(es_dirs, loaded):
    for task_id in ("es-senteval:TASS1", "es-senteval:PAWS", "es-discoeval:BSOthesis",
                    "es-discoeval:SPthesis", "es-senteval:Length", "es-senteval:STS14",
                    "es-discoeval:RST", "es-senteval:MC", "es-senteval:Depth",
                    "es-senteval:Tense", "es-discoeval:SPwiki"):
        info = describe_task(get_spec(task_id), es_dirs, counts=True)
        assert info["present"], task_id
        sizes = {k: v for k, v in info["sizes"].items() if v is not None}
        expected = dict(loaded[task_id].sizes)
        if info["protocol"] == "cosine":
            expected["test"] = sum(expected.values())
        assert sizes == expected, task_id


def test_pool_that_is_the_test_set_is_never_trained_on(tmp_path):
    """A training pool identical to the test file (X-Probe tree_depth) -> split test instead."""
    folder = tmp_path / "senteval" / "Probing-xprobe" / "tree_depth"
    folder.mkdir(parents=True)
    lines = "".join(f"frase número {i} .\t{i % 3}\n" for i in range(100))
    (folder / "va.txt").write_text(lines, encoding="utf-8")
    (folder / "te.txt").write_text(lines, encoding="utf-8")
    data = load_task(select_tasks("es-senteval:Depth")[0], DataDirs.parse([str(tmp_path)]))
    assert data.sizes == {"train": 70, "dev": 10, "test": 20}
    assert "repeats 100% of the test file" in data.fallback
    ids = [set(data.splits[s].slots[0].indices.tolist()) for s in ("train", "dev", "test")]
    assert not (ids[0] & ids[2]) and not (ids[1] & ids[2]) and not (ids[0] & ids[1])
