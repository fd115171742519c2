"""estratos compare and report --ci / --significance on hand-made results with predictions."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from stats_toys import classification_cell, toy_run, write_cells

from estratos.cli import cli
from estratos.report import build_report
from estratos.report.intervals import StatsOptions
from estratos.results import ResultsStore
from estratos.results.predictions import predictions_dir, write_predictions
from estratos.vocab import CONTROL_KINDS


@pytest.fixture()
def run(tmp_path):
    path = tmp_path / "run.jsonl"
    toy_run(path, layers=(0, 1, 2, "avg"), seeds=(1111, 2))
    return path


def _invoke(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.output


def test_compare_two_layers(run):
    code, out = _invoke("compare", run, "--task", "toy:A", "--a", "layer=0", "--b", "layer=1")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("task toy:A: accuracy on 400 test examples")
    assert "layer=0 (seeds 2,1111)" in lines[1] and "layer=1 (seeds 2,1111)" in lines[2]
    assert lines[3].startswith("B - A: +") and "paired bootstrap p = 0.0020" in lines[3]
    assert "95% CI [+" in lines[3]
    assert [l.split(",")[0] for l in lines[4:]] == ["McNemar exact", "McNemar exact"]


def test_compare_close_layers_is_not_significant(run):
    code, out = _invoke("compare", run, "--task", "A", "--a", "layer=1", "--b", "layer=2")
    assert code == 0, out
    p = float(out.split("paired bootstrap p = ")[1].split()[0])
    assert p > 0.05


def test_compare_one_seed_each_and_a_correlation(run):
    code, out = _invoke("compare", run, "--task", "toy:STS", "--a", "layer=0,seed=2",
                        "--b", "layer=avg,seed=2", "--metric", "spearman")
    assert code == 0, out
    assert "spearman on 200 test examples" in out and "(seeds 2)" in out
    assert "McNemar" not in out  # accuracy only


def test_compare_two_models_on_the_same_task(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    toy_run(a, layers=("avg",), seeds=(1,), model="org/one", sts=False)
    toy_run(b, layers=("avg",), seeds=(1,), model="org/two", sts=False)
    code, out = _invoke("compare", a, b, "--task", "toy:A", "--a", "model=org/one,layer=avg",
                        "--b", "model=two,layer=avg")
    assert code == 0, out
    assert "model=org/one" in out and "model=org/two" in out


@pytest.mark.parametrize("args, message, exit_code", [
    (("--a", "layer=7", "--b", "layer=1"), "--a: 'layer=7' matches no cell of toy:A", 2),
    (("--a", "layer=0", "--b", "pooling=mean"), "--b: 'pooling=mean' matches 4 rows", 2),
    (("--a", "layer=0", "--b", "layer=0"), "select the same cells", 2),
    (("--a", "depth=3", "--b", "layer=0"), "--a: unknown key 'depth'", 2),
    (("--a", "layer", "--b", "layer=0"), "--a: 'layer' is not KEY=VALUE", 2),
    (("--a", "layer=0", "--b", "layer=1", "--metric", "bleu"), "--metric: unknown metric", 2),
    (("--a", "layer=0", "--b", "layer=1", "--resamples", "0"), "--resamples: must be", 2),
])
def test_compare_errors(run, args, message, exit_code):
    code, out = _invoke("compare", run, "--task", "toy:A", *args)
    assert code == exit_code and message in out, out


def _two_runs(path, *, n, created, layers=(0, 1)):
    """Cells at ``layers`` written to ``path`` as a probe (with ``--overwrite``) does."""
    cells = [classification_cell(layer, 1, n=n) for layer in layers]
    records = [r.replace(created=created, sizes={"train": 50, "test": n}) for r, _ in cells]
    records = write_predictions(path, records, [p for _, p in cells])
    return ResultsStore(path).append(records, skip_done=False)


def test_compare_refuses_one_cell_from_two_different_runs(tmp_path):
    # the step-by-step run and the demo's run of one task, other data
    a, b = tmp_path / "minilm.jsonl", tmp_path / "demo.jsonl"
    _two_runs(a, n=300, created="2026-11-23T09:00:00Z")
    _two_runs(b, n=99, created="2026-11-23T10:00:00Z")
    for first, second in ((a, b), (b, a)):
        code, out = _invoke("compare", first, second, "--task", "toy:A", "--a", "layer=0",
                            "--b", "layer=1")
        assert code == 1, out
        assert "Error: cell toy:A model=org/mini,pooling=mean,classifier=senteval,layer=0 " \
               "seed 1 is in two results files with different results" in out
        assert f"{first}:1" in out and f"{second}:1" in out
        assert "300 test examples" in out and "99 test examples" in out
        assert "created 2026-11-23T09:00:00Z" in out and "score " in out
        assert "1 more selected cell(s) likewise" in out
        assert "pass only the file you mean, or --last-wins" in out
    code, out = _invoke("compare", a, b, "--task", "toy:A", "--a", "layer=0", "--b", "layer=1",
                        "--last-wins")
    assert code == 0, out
    assert "accuracy on 99 test examples" in out
    assert f"kept {b}:1 (the file given last, --last-wins) over {a}:1" in out
    code, out = _invoke("compare", b, a, "--task", "toy:A", "--a", "layer=0", "--b", "layer=1",
                        "--last-wins")
    assert code == 0 and "accuracy on 300 test examples" in out, out


def test_compare_accepts_equal_copies_and_a_rerun_within_one_file(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _two_runs(a, n=200, created="2026-11-23T09:00:00Z")
    b.write_bytes(a.read_bytes())  # the same cells twice (a copy, or a merged file)
    shutil.copytree(predictions_dir(a), predictions_dir(b))
    code, out = _invoke("compare", a, b, "--task", "toy:A", "--a", "layer=0", "--b", "layer=1")
    assert code == 0 and "note:" not in out, out
    # a rerun with --overwrite appends a newer copy to the same file: the last one is meant
    _two_runs(a, n=200, created="2026-11-23T11:00:00Z", layers=(0,))
    code, out = _invoke("compare", a, "--task", "toy:A", "--a", "layer=0", "--b", "layer=1")
    assert code == 0 and "note:" not in out, out


def test_compare_unknown_task_lists_the_tasks(run):
    code, out = _invoke("compare", run, "--task", "toy:B", "--a", "layer=0", "--b", "layer=1")
    assert code == 2 and "no results for task 'toy:B' (tasks present: toy:A, toy:STS)" in out


def test_compare_refuses_different_test_sets(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_cells(a, [classification_cell(0, 1, model="org/one")])
    write_cells(b, [classification_cell(0, 1, model="org/two", gold_seed=8)])
    code, out = _invoke("compare", a, b, "--task", "toy:A", "--a", "model=org/one",
                        "--b", "model=org/two")
    assert code == 1 and "the test sets differ: A has 400 test examples" in out, out


def test_compare_without_predictions_says_so(tmp_path):
    path = tmp_path / "run.jsonl"
    toy_run(path, layers=(0, 1), seeds=(1,), sts=False)
    shutil.rmtree(predictions_dir(path))
    code, out = _invoke("compare", path, "--task", "toy:A", "--a", "layer=0", "--b", "layer=1")
    assert code == 1 and "no predictions file" in out and "run.predictions/" in out


def test_report_ci_and_significance(run, tmp_path):
    code, out = _invoke("report", run, "--out", tmp_path / "rep", "--ci", "--significance",
                        "--format", "md,json")
    assert code == 0, out
    md = (tmp_path / "rep" / "report.md").read_text()
    layer_row = [l for l in md.splitlines() if l.startswith("| SC | A |")][0]
    cells = [c.strip() for c in layer_row.strip("|").split("|")][2:]
    # layer 0 is far below the best (2); layer 1 is not significantly worse
    assert cells[0].startswith("55.") and "[" in cells[0] and "†" not in cells[0]
    assert cells[1].endswith("†") and cells[2].startswith("**")
    assert "Holm-corrected over the other layers, alpha = 0.05" in md
    assert "95% percentile bootstrap interval over test examples (1000 resamples)" in md
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    row = [r for r in doc["dataset_scores"] if r["task"] == "toy:A" and r["layer"] == 0][0]
    assert row["ci_lo"] < row["mean"] < row["ci_hi"] and row["ci_se"] > 0
    assert row["std"] > 0  # seed variance, reported apart from the test-set interval
    assert row["not_worse_than_best"] is False and row["p_vs_best_adjusted"] < 0.05


def test_report_ci_of_one_seed_equals_the_recorded_interval(tmp_path):
    path = tmp_path / "run.jsonl"
    [record] = write_cells(path, [classification_cell(1, 1)])
    content = build_report([path], stats=StatsOptions(ci=True))
    [interval] = content.intervals.values()
    assert (round(interval.lo, 2), round(interval.hi, 2)) == (record.ci["lo"], record.ci["hi"])
    shutil.rmtree(predictions_dir(path))  # the recorded interval still serves
    content = build_report([path], stats=StatsOptions(ci=True))
    [interval] = content.intervals.values()
    assert (interval.lo, interval.hi) == (record.ci["lo"], record.ci["hi"])


def test_report_reuses_the_intervals_the_probe_recorded(tmp_path, monkeypatch):
    """Intervals are computed once: a one-seed cell shows its line's ``ci``; only a mean
    over seeds is resampled by the report."""
    import estratos.report.intervals as intervals

    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    toy_run(one, layers=(0, 1), seeds=(1,), sts=False)
    toy_run(two, layers=(0, 1), seeds=(1, 2), sts=False)
    computed = []
    real = intervals.bootstrap_ci
    monkeypatch.setattr(intervals, "bootstrap_ci",
                        lambda *a, **k: computed.append(1) or real(*a, **k))
    assert len(build_report([one], stats=StatsOptions(ci=True)).intervals) == 2
    assert computed == []
    assert len(build_report([two], stats=StatsOptions(ci=True)).intervals) == 2
    assert len(computed) == 2


def test_compare_shows_the_recorded_interval_of_a_one_seed_side(tmp_path, monkeypatch):
    import estratos.report.compare as compare

    path = tmp_path / "run.jsonl"
    records = toy_run(path, layers=(0, 1), seeds=(1,), sts=False)
    monkeypatch.setattr(compare, "bootstrap_ci", None)  # must not be called
    code, out = _invoke("compare", path, "--task", "toy:A", "--a", "layer=0", "--b", "layer=1")
    assert code == 0, out
    ci = records[0].ci
    assert f"{records[0].score:.2f} [{ci['lo']:.2f}, {ci['hi']:.2f}]" in out.splitlines()[1]


def test_report_ci_without_predictions_gives_a_notice(tmp_path):
    path = tmp_path / "run.jsonl"
    toy_run(path, layers=(0, 1), seeds=(1, 2), sts=False)
    shutil.rmtree(predictions_dir(path))
    content = build_report([path], stats=StatsOptions(ci=True, significance="holm"))
    assert not content.intervals
    texts = [str(n) for n in content.notices]
    assert any("have no usable predictions, so no interval" in t for t in texts)
    assert any("no significance mark" in t for t in texts)


def test_report_options_are_checked(run, tmp_path):
    code, out = _invoke("report", run, "--out", tmp_path / "r", "--ci", "--alpha", "2")
    assert code == 2 and "--alpha: must be between 0 and 1" in out
    code, out = _invoke("report", run, "--out", tmp_path / "r", "--ci", "--resamples", "0")
    assert code == 2 and "--resamples: must be a positive integer" in out


#: a control kind results may carry (the first registered one)
CONTROL = CONTROL_KINDS[0]


def test_compare_selects_by_every_part_of_a_cells_identity(tmp_path):
    # the demo's results: each layer's cell, its label-shuffle control, and a random-init
    # model's cell, all under one model name
    path = tmp_path / "demo.jsonl"
    cells = []
    for layer in (0, 4):
        record, preds = classification_cell(layer, 1)
        cells.append((record, preds))
        cells.append((record.replace(control={"kind": CONTROL, "seed": 1}),
                      classification_cell(5, 1)[1]))
        cells.append((record.replace(revision="random-init:7", random_init=7),
                      classification_cell(6, 1)[1]))
    write_cells(path, cells)
    code, out = _invoke("compare", path, "--task", "toy:A", "--a", "layer=0", "--b", "layer=4")
    assert code == 2, out
    assert ("--a: 'layer=0' matches 3 rows of toy:A, which differ in revision, control "
            f"(revision=r1,control=none; revision=r1,control={CONTROL}; "
            "revision=random-init:7,control=none); add revision or control to pick one") in out
    code, out = _invoke("compare", path, "--task", "toy:A", "--a", "layer=0,control=none,"
                        "revision=r1", "--b", f"layer=0,control={CONTROL}")
    assert code == 0, out
    assert "A: model=org/mini,pooling=mean,classifier=senteval,layer=0 (seeds 1)" in out
    assert (f"B: model=org/mini,pooling=mean,classifier=senteval,control={CONTROL},"
            "layer=0 (seeds 1)") in out
    # a task cell against its control cell: the control's labels are its own, per seed
    assert "control-task cell(s): their test labels are the control's" in out, out
    assert "McNemar exact" not in out, out
    code, out = _invoke("compare", path, "--task", "toy:A", "--a", "layer=4,revision=r1,"
                        "control=null", "--b", "layer=4,revision=random-init:7")
    assert code == 0, out
    assert "B: model=org/mini,pooling=mean,classifier=senteval,revision=random-init:7," \
           "layer=4" in out
    code, out = _invoke("compare", path, "--task", "toy:A", "--a", "layer=0,control=x",
                        "--b", "layer=4")
    assert code == 2 and "--a: 'layer=0,control=x' matches no cell of toy:A" in out, out
    # what the cells hold, per key (the selection's keys first), not whole identities
    assert "its cells have layer: " in out and f"control: none, {CONTROL}" in out, out
    assert "model=org/mini,pooling=mean" not in out, out


def test_compare_selector_keys_are_the_identity_of_a_cell():
    from estratos.report.compare import SELECTOR_KEYS
    record, _ = classification_cell(0, 1)
    assert set(SELECTOR_KEYS) == (set(record.identity) - {"task"}) | {"kind"}


def test_compare_help_lists_every_selector_key():
    from estratos.report.compare import SELECTOR_KEYS

    res = CliRunner().invoke(cli, ["compare", "--help"])
    assert res.exit_code == 0, res.output
    listed = " ".join(res.output.split()).split("(keys: ")[1].split(")")[0]
    assert set(listed.split(", ")) == set(SELECTOR_KEYS)


def test_a_tiny_p_value_reads_below_its_floor():
    from estratos.report.compare import p_text

    assert p_text(0.002) == "= 0.0020" and p_text(0.0001) == "= 0.0001"
    assert p_text(3e-9) == "< 0.0001" and p_text(0.0) == "< 0.0001"


def test_cells_of_other_data_are_told_apart_by_compare_and_report(tmp_path):
    # the same task rebuilt between two runs: each cell records its data digest
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    write_cells(old, [(r.replace(data_digest="aaaaaaaaaaaaaaaa"), p)
                      for r, p in (classification_cell(0, 1), classification_cell(1, 1))])
    write_cells(new, [(r.replace(data_digest="bbbbbbbbbbbbbbbb", model="org/other"), p)
                      for r, p in (classification_cell(0, 1), classification_cell(1, 1))])
    code, out = _invoke("compare", old, new, "--task", "toy:A", "--a", "model=org/mini,layer=1",
                        "--b", "model=org/other,layer=1")
    assert code == 1, out
    assert ("A and B were computed on different builds of the task's data: A on data digest "
            f"aaaaaaaaaaaaaaaa ({old}:2), B on bbbbbbbbbbbbbbbb ({new}:2)") in out
    code, out = _invoke("compare", old, "--task", "toy:A", "--a", "layer=0", "--b", "layer=1")
    assert code == 0, out  # one build: compared as before
    code, out = _invoke("report", old, new, "--out", tmp_path / "rep", "--format", "md")
    assert code == 0, out
    md = (tmp_path / "rep" / "report.md").read_text()
    assert ("toy:A was computed on 2 different builds of its data (data digests "
            f"aaaaaaaaaaaaaaaa (2 cell(s), e.g. {old}:1); bbbbbbbbbbbbbbbb") in md
    # one cell, other data: not a "duplicate" of the first copy
    again = tmp_path / "again.jsonl"
    write_cells(again, [(r.replace(data_digest="cccccccccccccccc"), p)
                        for r, p in (classification_cell(0, 1),)])
    code, out = _invoke("report", old, again, "--out", tmp_path / "rep2", "--format", "md")
    assert code == 0, out
    md = (tmp_path / "rep2" / "report.md").read_text()
    assert "was computed on other data (data digest cccccccccccccccc) than at" in md
    assert "duplicate cell" not in md
    code, out = _invoke("compare", old, again, "--task", "toy:A", "--a", "layer=0",
                        "--b", "layer=1")
    assert code == 1 and "data digest aaaaaaaaaaaaaaaa" in out, out
