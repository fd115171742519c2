"""The results store: append, resume keys, torn last lines, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from estratos.errors import ResultsError
from estratos.probe.results import ResultsStore, cell_key, read_results


def rec(layer, seed=1111, score=50.0, task="toy:A", classifier="senteval"):
    return {"schema": 1, "kind": "probe", "task": task, "layer": layer, "pooling": "cls",
            "seed": seed, "classifier": {"name": classifier}, "model": "m", "revision": "r",
            "score": score}


def test_append_and_read_back(tmp_path):
    store = ResultsStore(tmp_path / "sub" / "r.jsonl")
    written = store.append([rec(0), rec("avg")])
    assert len(written) == 2
    lines = (tmp_path / "sub" / "r.jsonl").read_text().splitlines()
    assert [json.loads(line)["layer"] for line in lines] == [0, "avg"]
    assert store.done_keys() == {cell_key(rec(0)), cell_key(rec("avg"))}


def test_cell_identity_includes_classifier_model_and_seed():
    assert cell_key(rec(0)) != cell_key(rec(0, seed=1))
    assert cell_key(rec(0)) != cell_key(rec(0, classifier="lbfgs"))
    other = dict(rec(0), revision="r2")
    assert cell_key(rec(0)) != cell_key(other)


def test_done_cells_are_not_written_twice_unless_overwriting(tmp_path):
    store = ResultsStore(tmp_path / "r.jsonl")
    store.append([rec(0, score=1.0)])
    assert store.append([rec(0, score=2.0), rec(1)]) == [rec(1)]
    assert len(read_results(store.path, latest=False)) == 2
    store.append([rec(0, score=3.0)], skip_done=False)
    latest = read_results(store.path)
    assert [r["score"] for r in latest if r["layer"] == 0] == [3.0]
    assert len(read_results(store.path, latest=False)) == 3


def test_a_torn_last_line_is_ignored_then_cut_before_the_next_append(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    good = json.dumps(rec(0)) + "\n"
    torn = json.dumps(rec(1))[:25]
    path.write_text(good + torn)
    with caplog.at_level("WARNING"):
        assert [r["layer"] for r in read_results(path)] == [0]
    assert "incomplete last line" in caplog.text
    store = ResultsStore(path)
    assert store.done_keys() == {cell_key(rec(0))}
    store.append([rec(1)])
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
    assert [json.loads(line)["layer"] for line in lines] == [0, 1]


def test_a_bad_line_in_the_middle_names_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(rec(0)) + "\n{oops\n" + json.dumps(rec(1)) + "\n")
    with pytest.raises(ResultsError, match=r"r\.jsonl:2: not a results record"):
        read_results(path)


def test_unknown_schema_and_missing_file(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(dict(rec(0), schema=9)) + "\n")
    with pytest.raises(ResultsError, match=r"r\.jsonl:1: unsupported results schema"):
        read_results(path)
    with pytest.raises(ResultsError, match="not found"):
        read_results(tmp_path / "none.jsonl")


def test_kind_filter(tmp_path):
    store = ResultsStore(tmp_path / "r.jsonl")
    store.append([rec(0), dict(rec(None), kind="baseline")])
    assert [r["kind"] for r in read_results(store.path, kind="baseline")] == ["baseline"]


def _writer(path: str, worker: int, n: int) -> None:
    store = ResultsStore(path)
    for i in range(n):
        # a long payload makes a torn or interleaved write visible
        store.append([dict(rec(i, seed=worker), pad="x" * 5000)])


def test_two_processes_appending_lose_no_line(tmp_path):
    path = tmp_path / "r.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 60)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    records = read_results(path, latest=False)
    assert len(records) == 120
    assert sorted((r["seed"], r["layer"]) for r in records) == \
        sorted((w, i) for w in (1, 2) for i in range(60))
    assert path.read_bytes().endswith(b"\n")


def test_two_processes_writing_the_same_cells_do_not_duplicate(tmp_path):
    path = tmp_path / "r.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), 7, 40)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    records = read_results(path, latest=False)
    assert sorted(r["layer"] for r in records) == list(range(40))


def test_unwritable_results_path(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ResultsError, match="cannot open"):
        ResultsStore(Path(tmp_path / "f" / "r.jsonl")).append([rec(0)])
