"""The results contract: the record type, append, resume keys, torn last lines, concurrent
writers, globs."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
from pathlib import Path

import pytest

from estratos.errors import InputError, ResultsError
from estratos.results import CellKey, ResultRecord, ResultsStore, load_results, read_results


def rec(layer, seed=1111, score=50.0, task="toy:A", classifier="senteval", kind="probe",
        name="A"):
    return ResultRecord(kind=kind, task=task, name=name, group="SC", metric="accuracy",
                        layer=layer, pooling="cls", seed=seed,
                        classifier={"name": classifier}, model="m", revision="r", score=score)


def cell_key(record):
    return record.key


def test_append_and_read_back(tmp_path):
    store = ResultsStore(tmp_path / "sub" / "r.jsonl")
    written = store.append([rec(0), rec("avg")])
    assert len(written) == 2
    lines = (tmp_path / "sub" / "r.jsonl").read_text().splitlines()
    assert [json.loads(line)["layer"] for line in lines] == [0, "avg"]
    assert read_results(tmp_path / "sub" / "r.jsonl") == written
    assert store.done_keys() == {cell_key(rec(0)), cell_key(rec("avg"))}


def test_cell_identity_includes_classifier_model_and_seed():
    assert cell_key(rec(0)) != cell_key(rec(0, seed=1))
    assert cell_key(rec(0)) != cell_key(rec(0, classifier="lbfgs"))
    other = rec(0).replace(revision="r2")
    assert cell_key(rec(0)) != cell_key(other)


def test_done_cells_are_not_written_twice_unless_overwriting(tmp_path):
    store = ResultsStore(tmp_path / "r.jsonl")
    store.append([rec(0, score=1.0)])
    assert store.append([rec(0, score=2.0), rec(1)]) == [rec(1)]
    assert len(read_results(store.path, latest=False)) == 2
    store.append([rec(0, score=3.0)], skip_done=False)
    latest = read_results(store.path)
    assert [r.score for r in latest if r.layer == 0] == [3.0]
    assert len(read_results(store.path, latest=False)) == 3


def test_a_torn_last_line_is_ignored_then_cut_before_the_next_append(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    good = json.dumps(rec(0).to_json()) + "\n"
    torn = json.dumps(rec(1).to_json())[:25]
    path.write_text(good + torn)
    with caplog.at_level("WARNING"):
        assert [r.layer for r in read_results(path)] == [0]
    assert "incomplete last line" in caplog.text
    store = ResultsStore(path)
    assert store.done_keys() == {cell_key(rec(0))}
    store.append([rec(1)])
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
    assert [json.loads(line)["layer"] for line in lines] == [0, 1]


def test_a_bad_line_in_the_middle_names_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(rec(0).to_json()) + "\n{oops\n" + json.dumps(rec(1).to_json())
                    + "\n")
    with pytest.raises(InputError, match=r"r\.jsonl:2: not a JSON line"):
        read_results(path)


def test_unknown_schema_and_missing_file(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(rec(0).replace(schema=9).to_json()) + "\n")
    with pytest.raises(ResultsError, match=r"r\.jsonl:1: unsupported results schema"):
        read_results(path)
    with pytest.raises(InputError, match="not found"):
        read_results(tmp_path / "none.jsonl")


def _line(record):
    return json.dumps(record.to_json()) + "\n"


def test_an_append_reads_only_what_others_appended_since(tmp_path, monkeypatch):
    """The store keeps what it read (offset, keys): the next append reads the new lines
    only, still sees the cells others wrote meanwhile, and still cuts their torn line."""
    import estratos.results.store as store_module

    path = tmp_path / "r.jsonl"
    ResultsStore(path).append([rec(i) for i in range(50)])
    parsed = []
    real = store_module.parse_results
    monkeypatch.setattr(store_module, "parse_results",
                        lambda p, data, *a, **k: parsed.append(len(data)) or
                        real(p, data, *a, **k))
    with open(path, "a") as fh:  # another process appends a cell, then dies mid-line
        fh.write(_line(rec(60)) + _line(rec(61))[:30])
    written = ResultsStore(path).append([rec(60), rec(62)])  # a new store object, same process
    assert written == [rec(62)]  # rec(60) was written by the other process
    assert parsed == [len(_line(rec(60))) + 30]  # not the 50 lines read before
    assert [r.layer for r in read_results(path, latest=False)] == [*range(50), 60, 62]
    with open(path, "a") as fh:
        fh.write("{oops\n" + _line(rec(64)))
    with pytest.raises(InputError, match=r"r\.jsonl:53: not a JSON line"):
        ResultsStore(path).append([rec(63)])


def test_a_results_file_replaced_behind_the_store_is_read_again(tmp_path):
    path = tmp_path / "r.jsonl"
    ResultsStore(path).append([rec(i) for i in range(5)])
    path.write_text(_line(rec(7)) * 1 + _line(rec(0, score=9.0)) * 3)  # same size or more
    assert ResultsStore(path).append([rec(0), rec(7), rec(8)]) == [rec(8)]
    other = tmp_path / "other.jsonl"
    other.write_text(_line(rec(9)))
    other.replace(path)  # another file moved over it
    assert ResultsStore(path).append([rec(9), rec(0)]) == [rec(0)]


def test_kind_filter(tmp_path):
    store = ResultsStore(tmp_path / "r.jsonl")
    store.append([rec(0), rec(None, kind="baseline")])
    assert [r.kind for r in read_results(store.path, kind="baseline")] == ["baseline"]


def _writer(path: str, worker: int, n: int) -> None:
    store = ResultsStore(path)
    for i in range(n):
        # a long payload makes a torn or interleaved write visible
        store.append([rec(i, seed=worker, name="x" * 5000)])


def _run_writers(path: Path, jobs) -> None:
    """Run one spawned ``_writer(path, worker, n)`` process per (worker, n), all at once."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, n)) for w, n in jobs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0


def test_two_processes_appending_lose_no_line(tmp_path):
    path = tmp_path / "r.jsonl"
    _run_writers(path, [(1, 60), (2, 60)])
    records = read_results(path, latest=False)
    assert len(records) == 120
    assert sorted((r.seed, r.layer) for r in records) == \
        sorted((w, i) for w in (1, 2) for i in range(60))
    assert path.read_bytes().endswith(b"\n")


def test_two_processes_writing_the_same_cells_do_not_duplicate(tmp_path):
    path = tmp_path / "r.jsonl"
    _run_writers(path, [(7, 40), (7, 40)])
    records = read_results(path, latest=False)
    assert sorted(r.layer for r in records) == list(range(40))


def test_unwritable_results_path(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ResultsError, match="cannot open"):
        ResultsStore(Path(tmp_path / "f" / "r.jsonl")).append([rec(0)])


def test_a_record_round_trips_through_json_in_schema_order():
    r = rec("avg", score=None).replace(test={"pearson": None}, device="cpu")
    obj = r.to_json()
    assert list(obj)[:3] == ["schema", "kind", "task"] and obj["device"] == "cpu"
    assert ResultRecord.from_json(json.loads(json.dumps(obj))) == r
    assert "device" not in rec(0).to_json()  # optional fields are left out when unset


def test_primary_score_rounds_once_for_probe_and_baseline():
    from estratos.results import primary_score

    assert primary_score("accuracy", {"accuracy": 54.12345}) == 54.12
    assert primary_score("pearson", {"pearson": 0.123456}) == 12.35
    assert primary_score("pearson", {"pearson": None}) is None
    assert primary_score("spearman", {"spearman": float("nan")}) is None


def test_a_file_that_is_not_json_lines_is_named_as_such(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("task,layer,score\n")
    with pytest.raises(InputError, match=r"table\.csv:1: not a results file"):
        read_results(path)
    with pytest.raises(InputError, match=r"table\.csv:1: not a results file"):
        load_results([path])


def test_globs_read_shard_files_in_order(tmp_path):
    ResultsStore(tmp_path / "run.shard-0-of-2.jsonl").append([rec(0)])
    ResultsStore(tmp_path / "run.shard-1-of-2.jsonl").append([rec(1)])
    assert [r.layer for r in read_results(tmp_path / "run.shard-*-of-2.jsonl")] == [0, 1]
    with pytest.raises(InputError, match="no results file matches"):
        read_results(tmp_path / "other.shard-*.jsonl")


def test_new_results_files_respect_the_umask(tmp_path):
    import os

    old = os.umask(0o002)
    try:
        ResultsStore(tmp_path / "r.jsonl").append([rec(0)])
    finally:
        os.umask(old)
    assert (tmp_path / "r.jsonl").stat().st_mode & 0o777 == 0o664


# ---- control cells, features, MDL, one-class cells --------------------------------------------

def test_a_control_cell_coexists_with_its_ordinary_cell(tmp_path):
    control = rec(0).replace(control={"kind": "label-shuffle", "seed": 1111})
    assert cell_key(control) != cell_key(rec(0))
    assert cell_key(rec(0)) == CellKey(task="toy:A", layer=0, pooling="cls", seed=1111,
                                       classifier="senteval", model="m", revision="r")
    store = ResultsStore(tmp_path / "r.jsonl")
    assert len(store.append([rec(0), control])) == 2
    assert store.append([control]) == []  # done: the control's identity includes its kind
    back = read_results(tmp_path / "r.jsonl")
    assert [r.control_kind for r in back] == [None, "label-shuffle"]


def test_new_fields_round_trip_and_are_left_out_when_unset():
    mdl = {"online_bits": 10.5, "uniform_bits": 100.0, "compression": 9.52,
           "blocks": [1, 2], "block_bits": [1.0, 9.5], "order_seed": 1111}
    r = rec(0).replace(mdl=mdl, degenerate={"class": "pos"},
                       control={"kind": "label-shuffle", "seed": 7})
    obj = json.loads(json.dumps(r.to_json()))
    assert ResultRecord.from_json(obj) == r
    plain = rec(0).to_json()
    assert not {"control", "mdl", "degenerate"} & set(plain)


def test_a_results_line_written_before_the_new_fields_loads(tmp_path):
    """A schema-1 line without the optional fields: a raw-features probe cell."""
    old = {"schema": 1, "kind": "probe", "task": "es-senteval:TASS1", "suite": "es-senteval",
           "name": "TASS1", "group": "SC", "language": "es", "layer": 3, "pooling": "cls",
           "seed": 1111, "protocol": "split", "fallback": None,
           "classifier": {"name": "senteval", "nhid": 0}, "metric": "accuracy",
           "score": 54.1, "l2": 0.0001, "dev": {"accuracy": 55.3},
           "test": {"accuracy": 54.1}, "sizes": {"train": 10}, "epochs": 24,
           "seconds": 1.7, "model": "m", "revision": "r", "cache": {},
           "estratos_version": "0.1.0", "created": "2026-11-22T10:00:00Z"}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (r,) = read_results(path)
    assert r.control is None and r.mdl is None and r.degenerate is None
    assert r.features == "raw"
    assert r.key == CellKey(task="es-senteval:TASS1", layer=3, pooling="cls", seed=1111,
                            classifier="senteval", features="raw", model="m", revision="r")
    # its predictions were filed under version 1's key form (no features)
    assert r.predictions_key == ["es-senteval:TASS1", 3, "cls", 1111, "senteval", "m", "r"]


def test_schema_1_lines_are_migrated(tmp_path):
    """lbfgs recorded its standardized features in its classifier object; the label-shuffle
    control was called permuted-labels; a one-class mark meant every prediction. A resumed
    run appends current lines after them in the same file."""
    base = rec(0).to_json()
    base["schema"] = 1
    del base["features"]
    lbfgs = {**base, "classifier": {"name": "lbfgs", "features": "standardized"}}
    shuffled = {**base, "control": {"kind": "permuted-labels", "seed": 3},
                "degenerate": {"class": "pos"}}
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in (lbfgs, shuffled)))
    ResultsStore(path).append([rec(1).replace(features="standardized")])
    a, b, c = read_results(path)
    assert (a.features, a.schema) == ("standardized", 1)
    assert b.control == {"kind": "label-shuffle", "seed": 3}
    assert b.degenerate == {"class": "pos", "share": 1.0}
    assert b.predictions_key[-1] == "permuted-labels"  # where its predictions were filed
    assert (c.features, c.schema) == ("standardized", 2)


def test_where_predictions_are_filed_comes_from_the_migration_alone():
    """Only a version-1 line's migration says its predictions sit under another key; a
    current line's ``filed_under`` (never written) is ignored, and the key is never
    written back."""
    current = rec(0).to_json()
    assert "filed_under" not in current
    forged = ResultRecord.from_json({**current, "filed_under": ["elsewhere"]})
    assert forged.key == rec(0).key
    assert forged.predictions_key == forged.key.to_json() == rec(0).key.to_json()
    old = {**current, "schema": 1, "control": {"kind": "permuted-labels", "seed": 3}}
    del old["features"]
    migrated = ResultRecord.from_json(old)
    k = migrated.key
    assert migrated.predictions_key == [k.task, k.layer, k.pooling, k.seed, k.classifier,
                                        k.model, k.revision, "permuted-labels"]
    assert migrated.replace(ci=None).predictions_key == migrated.predictions_key
    assert "filed_under" not in migrated.to_json() and migrated == migrated.replace(
        filed_under=None)


@pytest.mark.parametrize("field, value, message", [
    ("control", {"kind": "shuffled"}, "'control': unknown control 'shuffled' .*; choose from "
                                      "control-task, label-shuffle"),
    ("control", "yes", "'control' must be an object"),
    ("mdl", {"online_bits": 1.0, "uniform_bits": 2.0}, "'compression' must be a finite"),
    ("mdl", {"online_bits": 1.0, "uniform_bits": 2.0, "compression": "inf"},
     "'compression' must be a finite"),
    ("degenerate", True, "'degenerate' must be an object"),
    ("features", "whitened", "'features': unknown features 'whitened'; choose from raw, "
                             "standardized"),
])
def test_bad_new_fields_name_file_and_line(tmp_path, field, value, message):
    obj = rec(0).to_json()
    obj[field] = value
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(obj) + "\n")
    with pytest.raises(InputError, match=rf"r\.jsonl:1: .*{message}"):
        read_results(path)


# ---- a cell's identity: one record with named fields --------------------------------------

PROMPTED_CONTROL = {"task": "toy:A", "layer": 0, "pooling": "cls", "seed": 1111,
                    "classifier": "senteval", "features": "raw", "model": "org/m",
                    "revision": "r", "control": "control-task/task-l2", "prompt": "Q: {}"}
BASELINE = {"task": "toy:A", "layer": None, "pooling": None, "seed": 1111,
            "classifier": "tfidf", "model": "baseline:tfidf", "revision": "tfidf-v1"}


@pytest.mark.parametrize("fields, text, digest", [
    (PROMPTED_CONTROL,
     '["toy:A", 0, "cls", 1111, "senteval", "raw", "org/m", "r", "control-task/task-l2", '
     '["prompt", "Q: {}"]]', "1b866ccbc49a571fbef35709d6b7e23538d843ef"),
    (BASELINE, '["toy:A", null, null, 1111, "tfidf", null, "baseline:tfidf", "tfidf-v1"]',
     "99e297739a20371cffcfb9887f5853d438797890"),
])
def test_a_cell_key_round_trips_through_its_json_form_unchanged_on_disk(fields, text, digest):
    """The JSON form (a predictions file's ``key`` attribute, what its cell id hashes) is
    the one earlier versions wrote, byte for byte: stored predictions are still found."""
    from estratos.results.predictions import cell_id
    key = CellKey(**fields)
    assert json.dumps(key.to_json()) == text
    assert cell_id(key.to_json()) == digest
    assert CellKey.from_json(json.loads(text)) == key
    assert hash(CellKey.from_json(json.loads(text))) == hash(key)
    for only in ({"control": None}, {"prompt": None}, {"control": None, "prompt": None}):
        other = dataclasses.replace(key, **only)
        assert CellKey.from_json(json.loads(json.dumps(other.to_json()))) == other


@pytest.mark.parametrize("bad", [["toy:A"], "toy:A", ["a", 0, "cls", 1, "s", None, "m", "r",
                                                     ["tag", "x"]],
                                 ["a", 0, "cls", 1, "s", None, "m", "r", "c", ["prompt", "x"],
                                  "more"]])
def test_anything_but_a_keys_json_form_is_refused(bad):
    with pytest.raises(ValueError, match="not a cell key"):
        CellKey.from_json(bad)


def test_the_key_a_record_gives_is_the_key_built_by_field_names():
    from estratos.probe.records import CellSource
    record = rec(0).replace(model="org/m", features="raw", prompt="Q: {}",
                            control={"kind": "control-task", "seed": 3, "l2": "task"})
    assert record.key == CellKey(**PROMPTED_CONTROL)
    assert record.identity == CellKey(**PROMPTED_CONTROL).as_dict()
    system = CellSource(kind="probe", model="org/m", revision="r", prompt="Q: {}")
    assert system.key(task="toy:A", layer=0, pooling="cls", seed=1111, classifier="senteval",
                      features="raw", control="control-task/task-l2") == record.key
    baseline = rec(None, kind="baseline", classifier="tfidf").replace(
        pooling=None, model="baseline:tfidf", revision="tfidf-v1")
    assert baseline.key == CellKey(**BASELINE)


def test_no_caller_relies_on_a_keys_positional_order():
    """A key is built by field name and read by field name: it takes no positional
    argument and is no sequence, so a caller that indexed or unpacked one would fail."""
    with pytest.raises(TypeError):
        CellKey("toy:A", 0, "cls", 1111, "senteval", None, "m", "r")
    key = CellKey(**BASELINE)
    assert not isinstance(key, tuple)
    with pytest.raises(TypeError):
        key[0]
    with pytest.raises(TypeError):
        tuple(key)
