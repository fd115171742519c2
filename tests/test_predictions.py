"""The predictions store beside a results file: layout, read back == results line, CIs,
sharded names, concurrent writers, a mismatch is reported."""

from __future__ import annotations

import multiprocessing
import os
import stat

import numpy as np
import pytest

from estratos.errors import ResultsError
from estratos.results import read_results
from estratos.results import predictions as store
from estratos.results.predictions import (CellPredictions, PredictionsReader, check_metric,
                                          predictions_dir, predictions_path, write_predictions)

from stats_toys import classification_cell, sts_cell, toy_run, write_cells
from stats_toys import reproduced as _reproduced


def test_file_name_derives_from_the_results_file(tmp_path):
    assert predictions_dir(tmp_path / "run.jsonl") == tmp_path / "run.predictions"
    assert predictions_dir(tmp_path / "run.shard-1-of-4.jsonl").name == \
        "run.shard-1-of-4.predictions"
    assert predictions_dir("res").name == "res.predictions"
    # the single file of earlier versions (still read)
    assert predictions_path(tmp_path / "run.jsonl") == tmp_path / "run.predictions.h5"
    assert predictions_path(tmp_path / "run.shard-1-of-4.jsonl").name == \
        "run.shard-1-of-4.predictions.h5"
    assert predictions_path("res").name == "res.predictions.h5"


def test_read_back_reproduces_every_results_line(tmp_path):
    results = tmp_path / "run.jsonl"
    cells = [classification_cell(layer, seed) for layer in (0, 1) for seed in (1, 2)]
    cells += [classification_cell(1, 1, task="toy:MC", protocol="inner-kfold", folds=5)]
    cells += [sts_cell(layer, 1) for layer in (0, "avg")]
    write_cells(results, cells)
    records = _reproduced(results)
    assert len(records) == 7
    reader = PredictionsReader()
    sts = [r for r in records if r.task == "toy:STS"][0]
    assert reader.find(sts, results).preds.strata_names == ("sub0", "sub1")


def test_results_lines_carry_a_bootstrap_interval(tmp_path):
    records = toy_run(tmp_path / "run.jsonl", layers=(0,), seeds=(1,), sts=True)
    for r in records:
        assert r.ci["lo"] < r.score < r.ci["hi"]
        assert r.ci["resamples"] == 1000 and r.ci["level"] == 0.95
        assert r.ci["method"] == "percentile bootstrap over test examples"
    # the JSON keeps it; a line without predictions has no "ci" key
    line = (tmp_path / "run.jsonl").read_text().splitlines()[0]
    assert '"ci": {"lo":' in line
    write_cells(tmp_path / "plain.jsonl", [classification_cell(0, 1)], predictions=False)
    assert '"ci"' not in (tmp_path / "plain.jsonl").read_text()


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def test_test_sets_are_stored_once(tmp_path):
    import h5py

    toy_run(tmp_path / "run.jsonl", layers=(0, 1, 2), seeds=(1, 2), sts=True)
    folder = predictions_dir(tmp_path / "run.jsonl")
    names = _files(folder)
    tests = [n for n in names if n.startswith("tests-")]
    assert len(tests) == 2  # the classification and the STS test sets
    assert names == sorted(tests + ["cells-000001.h5"])  # one write, one cells file
    with h5py.File(folder / "cells-000001.h5", "r") as h5:
        assert len(h5["cells"]) == 12 and "tests" not in h5
        assert h5.attrs["format"] == "estratos-predictions"
    for name in tests:
        with h5py.File(folder / name, "r") as h5:
            assert list(h5["tests"]) == [name[len("tests-"):-len(".h5")]] and "cells" not in h5


def test_each_write_adds_files_and_never_rewrites_one(tmp_path):
    results = tmp_path / "run.jsonl"
    folder = predictions_dir(results)
    write_cells(results, [classification_cell(0, 1), sts_cell(0, 1)])
    before = {n: (folder / n).read_bytes() for n in _files(folder)}
    for layer in (1, 2):
        write_cells(results, [classification_cell(layer, 1), sts_cell(layer, 1)])
    assert {n: (folder / n).read_bytes() for n in before} == before
    assert sorted(set(_files(folder)) - set(before)) == ["cells-000002.h5", "cells-000003.h5"]
    assert len(_reproduced(results)) == 6


def test_a_file_of_the_earlier_single_file_layout_still_loads(tmp_path):
    """Earlier versions kept everything in ``run.predictions.h5`` (/tests and /cells): it is
    read first; cells written since go to the folder, and a newer copy of a cell wins."""
    import h5py
    import shutil

    results = tmp_path / "run.jsonl"
    write_cells(results, [classification_cell(layer, 1) for layer in (0, 1)] +
                [sts_cell(0, 1)])
    folder = predictions_dir(results)
    with h5py.File(predictions_path(results), "w") as single:  # the old layout
        single.attrs["format"], single.attrs["version"] = "estratos-predictions", 1
        for name in _files(folder):
            with h5py.File(folder / name, "r") as part:
                for group in part:
                    for item in part[group]:
                        part.copy(part[group][item], single.require_group(group), name=item)
    shutil.rmtree(folder)
    store._NEXT.clear()  # a new process
    record, preds = classification_cell(0, 1, accuracy={0: 90.0})
    [rerun] = write_predictions(results, [record.replace(created="2026-11-23T10:00:00Z")],
                                [preds])
    from estratos.results import ResultsStore
    ResultsStore(results).append([rerun], skip_done=False)
    # the single file is only read: the folder stores the test set again for its own cells
    assert [n.split("-")[0] for n in _files(folder)] == ["cells", "tests"]
    records = _reproduced(results)
    assert len(records) == 3
    assert [r.score for r in records if r.layer == 0 and r.task == "toy:A"] == [rerun.score]


def test_a_killed_writers_temporary_file_is_removed_by_the_next_writer(tmp_path):
    results = tmp_path / "run.jsonl"
    write_cells(results, [classification_cell(0, 1)])
    folder = predictions_dir(results)
    leftover = folder / ".cells-000002.h5.0badc0de.tmp"
    leftover.write_bytes(b"half an HDF5 file")
    assert PredictionsReader().find(read_results(results)[0], results).problem is None
    store._NEXT.clear()  # the next run is a new process
    write_cells(results, [classification_cell(1, 1)])
    assert not leftover.exists() and "cells-000002.h5" in _files(folder)


def test_overwrite_replaces_a_cell(tmp_path):
    results = tmp_path / "run.jsonl"
    write_cells(results, [classification_cell(0, 1)])
    record, preds = classification_cell(0, 1, accuracy={0: 90.0})
    record = record.replace(created="2026-11-23T10:00:00Z")
    [written] = write_predictions(results, [record], [preds])
    from estratos.results import ResultsStore
    ResultsStore(results).append([written], skip_done=False)
    [latest] = read_results(results)
    found = PredictionsReader().find(latest, results)
    assert found.problem is None and round(check_metric(latest, found.preds), 2) == latest.score


def test_predictions_of_another_run_are_reported_not_used(tmp_path):
    results = tmp_path / "run.jsonl"
    record, preds = classification_cell(0, 1, accuracy={0: 90.0})
    # a run that stored its predictions but was killed before its line was written...
    write_predictions(results, [record.replace(created="2026-11-23T11:00:00Z")], [preds])
    # ...and a line of this cell whose own predictions are not stored
    write_cells(results, [classification_cell(0, 1)], predictions=False)
    [line] = read_results(results)
    found = PredictionsReader().find(line, results)
    assert found.preds is None and "another run of this cell" in found.problem


def test_a_line_keeps_its_own_predictions_when_another_run_wrote_later(tmp_path):
    """Two runs of one cell with --overwrite: whichever line is last finds its own copy."""
    results = tmp_path / "run.jsonl"
    write_cells(results, [classification_cell(0, 1)])
    record, preds = classification_cell(0, 1, accuracy={0: 90.0})
    write_predictions(results, [record.replace(created="2026-11-23T11:00:00Z")], [preds])
    [line] = read_results(results)  # still the first run's line
    found = PredictionsReader().find(line, results)
    assert found.problem is None and round(check_metric(line, found.preds), 2) == line.score


def test_missing_predictions_are_a_problem_not_an_error(tmp_path):
    results = tmp_path / "run.jsonl"
    write_cells(results, [classification_cell(0, 1)], predictions=False)
    [line] = read_results(results)
    found = PredictionsReader().find(line, results)
    assert found.preds is None and "no predictions file" in found.problem


def test_a_damaged_predictions_file_names_itself(tmp_path):
    results = tmp_path / "run.jsonl"
    write_cells(results, [classification_cell(0, 1)], predictions=False)
    predictions_path(results).write_bytes(b"not hdf5 at all")
    [line] = read_results(results)
    with pytest.raises(ResultsError, match="run.predictions.h5: not a readable.*move it away"):
        PredictionsReader().find(line, results)
    # writing never touches the old single file: new cells go to the folder
    write_cells(results, [classification_cell(1, 1)])
    assert predictions_path(results).read_bytes() == b"not hdf5 at all"
    predictions_path(results).unlink()
    record = [r for r in read_results(results) if r.layer == 1][0]
    assert PredictionsReader().find(record, results).problem is None
    part = predictions_dir(results) / "cells-000001.h5"
    part.write_bytes(part.read_bytes()[:100])  # truncated behind our back
    with pytest.raises(ResultsError, match="cells-000001.h5: not a readable"):
        PredictionsReader().find(record, results)
    assert [p.name for p in predictions_dir(results).iterdir() if p.name.endswith(".tmp")] == []


def test_a_file_where_the_folder_belongs_is_refused(tmp_path):
    results = tmp_path / "run.jsonl"
    predictions_dir(results).write_text("in the way")
    record, preds = classification_cell(0, 1)
    with pytest.raises(ResultsError, match="run.predictions: exists and is not a folder"):
        write_predictions(results, [record], [preds])
    with pytest.raises(ResultsError, match="run.predictions: exists and is not a folder"):
        PredictionsReader().find(record, results)


def test_file_mode_respects_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        toy_run(tmp_path / "run.jsonl", layers=(0,), seeds=(1,), sts=False)
    finally:
        os.umask(old)
    folder = predictions_dir(tmp_path / "run.jsonl")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="same length"):
        CellPredictions(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="one stratum per test example"):
        CellPredictions(np.zeros(3), np.zeros(3), strata=np.zeros(2))


def _writer(args):
    path, layer = args
    write_cells(path, [classification_cell(layer, seed) for seed in (1, 2)])
    return layer


def test_concurrent_writers_keep_every_cell(tmp_path):
    results = tmp_path / "run.jsonl"
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        assert sorted(pool.map(_writer, [(results, layer) for layer in range(8)])) == \
            list(range(8))
    assert len(_reproduced(results)) == 16


def test_from_splits_makes_strata_of_subsets_or_folds():
    sts = CellPredictions.from_splits(np.arange(5.0), [("news", np.ones(3)), ("wiki", np.ones(2))])
    assert sts.strata.tolist() == [0, 0, 0, 1, 1] and sts.strata_names == ("news", "wiki")
    folds = CellPredictions.from_splits(np.zeros(4, int), [("all", np.zeros(4, int))],
                                        folds=np.array([1, 0, 1, 0]), positive=1)
    assert folds.strata.tolist() == [1, 0, 1, 0] and folds.strata_names == ("0", "1")
    assert folds.positive == 1
    plain = CellPredictions.from_splits(np.zeros(3, int), [("test", np.zeros(3, int))])
    assert plain.strata is None and plain.strata_names == ()
