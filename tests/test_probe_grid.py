"""The grid as work units: planning (every pending cell once, longest first), shards (the
union of N shards is the grid, no cell twice), the scheduler (every unit run once, in
processes), a failing unit, --resume-from, --device, and the CLI's --shard."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from probe_toys import spec, toy_classification, toy_split_task, write_cache, write_toml_task

from estratos.cli import cli
from estratos.errors import CacheError, OptionError
from estratos.probe.config import ProbeConfig
from estratos.probe.estimators.settings import resolve_classifier
from estratos.probe.grid.plan import (
    TaskShape,
    WorkUnit,
    cell_cost,
    makespan,
    plan_units,
    shard_cells,
    shard_path,
    unit_cost,
)
from estratos.probe.grid.runner import run_probe
from estratos.results import read_results

# ---- toy grid: three tasks of different sizes over one cache --------------------------------

SIZES = {"A": 240, "B": 120, "C": 60}


class GridLoader:
    """A picklable loader (for --jobs > 1): each task's data is rebuilt from its name."""

    def __call__(self, task_spec, data_dirs):
        return _task(task_spec.name)


def _task(name: str):
    n = SIZES[name]
    task, _, _ = toy_split_task(n, task_spec=spec(name))
    # each task uses its own sentences ("A 0", "A 1", ...): rebuild with prefixed texts
    sentences = tuple(f"{name} {s}" for s in task.sentences)
    return type(task)(task.spec, sentences, task.splits, task.labels, task.protocol)


def _grid_cache(path, nan_task=None):
    sentences, vectors = [], []
    for i, name in enumerate(SIZES):
        sents, vec, _ = toy_classification(SIZES[name], seed=i)
        sentences += [f"{name} {s}" for s in sents]
        vec = vec.copy()
        if name == nan_task:
            vec[3, :, 0] = np.nan  # every hidden state: every unit of the task fails
        vectors.append(vec)
    return write_cache(path, sentences, np.concatenate(vectors))


@pytest.fixture
def grid(tmp_path):
    return _grid_cache(tmp_path / "c.h5"), [spec(name) for name in SIZES]


def _run(cache, specs, out, resume_from=(), **kw):
    kw.setdefault("threads", 1)
    kw.setdefault("layers", "0,2,avg")
    kw.setdefault("seeds", (1, 2))
    return run_probe(cache, specs, None, out, ProbeConfig.build(**kw), loader=GridLoader(),
                     resume_from=resume_from)


def _numbers(records):
    keys = [r.key for r in records]
    assert len(keys) == len(set(keys)), "a cell was written twice"
    return {r.key: (r.score, r.l2, r.dev, r.test, r.epochs) for r in records}


# ---- planning -----------------------------------------------------------------------------

def test_units_cover_every_pending_cell_once_longest_first():
    pending = {"big": {1: [0, 1, 2, "avg"], 2: [0, 1, 2, "avg"], 3: [1, 2]},
               "small": {1: [0], 2: [0, 1], 3: []}}
    cost = {"big": 100.0, "small": 1.0}
    for jobs in (1, 2, 3, 8):
        units = plan_units(pending, cost, jobs)
        cells = [c for u in units for c in u.cells()]
        want = [(t, layer, s) for t, by in pending.items() for s, ls in by.items()
                for layer in ls]
        assert sorted(map(str, cells)) == sorted(map(str, want)) and len(cells) == len(want)
        assert [u.cost for u in units] == sorted((u.cost for u in units), reverse=True)
        assert [u.index for u in units] == list(range(len(units)))
        assert units == plan_units(pending, cost, jobs)  # deterministic
    # one process: one rectangle per (task, pending layer set); more: big units are cut
    assert len(plan_units(pending, cost, 1)) == 4
    cut = plan_units(pending, cost, 4, seeds_apart=True)
    whole = plan_units(pending, cost, 1, seeds_apart=True)
    assert makespan([u.cost for u in cut], 4) <= makespan([u.cost for u in whole], 4) / 2
    assert all(u.task == "big" for u in cut[:-3])


EIGHT = [0, 1, 2, 3, 4, 5, 6, "avg"]


@pytest.mark.parametrize("per_cell", [1.0, 1e6, 1e12])
def test_units_are_cut_only_where_cutting_pays(per_cell):
    """Cutting adds a program's overhead, so a grid is cut only where the
    estimated schedule gets shorter (whatever the scale of the costs). On the CPU seeds are
    cut apart first (no program added)."""
    two_seeds = {"t": {1: EIGHT, 2: EIGHT}}
    units = plan_units(two_seeds, {"t": per_cell}, 2, seeds_apart=True)
    assert [(u.layers, u.seeds) for u in units] == [(tuple(EIGHT), (1,)), (tuple(EIGHT), (2,))]
    assert [u.cost for u in units] == [unit_cost(per_cell, 8, 1, True)] * 2
    # one seed on two processes: halves pay (5 + 5 cells' worth in parallel against 9)
    units = plan_units({"t": {1: EIGHT}}, {"t": per_cell}, 2, seeds_apart=True)
    assert sorted(len(u.layers) for u in units) == [4, 4]
    # three equal tasks on three processes: nothing to gain, nothing cut
    three = {t: {1: EIGHT} for t in "abc"}
    assert len(plan_units(three, dict.fromkeys("abc", per_cell), 3, seeds_apart=True)) == 3
    # a long task beside a short one (SQC beside TASS1): seeds apart, layer specs kept
    mixed = {"long": {1: EIGHT, 2: EIGHT}, "short": {1: EIGHT, 2: EIGHT}}
    units = plan_units(mixed, {"long": 9 * per_cell, "short": per_cell}, 2, seeds_apart=True)
    assert all(len(u.layers) == 8 and len(u.seeds) == 1 for u in units)
    # two equal units on four processes: cutting one alone gains nothing, both pay
    thirteen = {"t": {1: EIGHT + [7, 8, 9, 10, 11], 2: EIGHT + [7, 8, 9, 10, 11]}}
    units = plan_units(thirteen, {"t": per_cell}, 4, seeds_apart=True)
    assert makespan([u.cost for u in units], 4) == unit_cost(per_cell, 7, 1, True)
    # three seeds on two processes: seeds apart, then one seed's layer specs halved
    three_seeds = {"t": {1: EIGHT, 2: EIGHT, 3: EIGHT}}
    units = plan_units(three_seeds, {"t": per_cell}, 2, seeds_apart=True)
    assert makespan([u.cost for u in units], 2) == unit_cost(per_cell, 8, 1, True) + \
        unit_cost(per_cell, 4, 1, True)
    # on a GPU (seeds share a program) layer specs are cut first
    units = plan_units(two_seeds, {"t": per_cell}, 2, seeds_apart=False)
    assert [(len(u.layers), u.seeds) for u in units] == [(4, (1, 2)), (4, (1, 2))]


def test_cost_grows_with_examples_classes_and_hidden_units():
    def params(**overrides):
        return resolve_classifier(overrides, classifier="senteval")

    senteval = params()
    mlp = params(nhid=2000, tenacity=8, epoch_size=15, l2_grid="noreg")
    base = TaskShape("t", "split", {"train": 1000, "dev": 100, "test": 100}, 2, 384)
    more = TaskShape("t", "split", {"train": 4000, "dev": 100, "test": 100}, 2, 384)
    classes = TaskShape("t", "split", {"train": 1000, "dev": 100, "test": 100}, 1000, 384)
    cost = lambda shape, p=senteval: cell_cost(  # noqa: E731
        shape, None if shape.protocol == "cosine" else p)
    assert cost(more) > 3 * cost(base)
    assert cost(classes) > 10 * cost(base)
    assert cost(base, mlp) > 50 * cost(base)
    assert cost(TaskShape("t", "inner-kfold", {"all": 1200}, 2, 384)) > 10 * cost(base)
    assert cost(TaskShape("t", "cosine", {"news": 1000}, 0, 768)) < cost(base) / 100
    lbfgs = resolve_classifier({}, classifier="lbfgs")
    assert 0 < cell_cost(base, lbfgs) < cost(base)


def test_shards_split_the_grid_stably_and_in_balance():
    tasks = ["t0", "t1", "t2", "t3", "t4"]
    cost = {"t0": 500.0, "t1": 40.0, "t2": 35.0, "t3": 3.0, "t4": 1.0}
    layers, seeds = (0, 1, 2, 3, "avg"), (1, 2, 3)
    grid = {(t, layer, s) for t in tasks for layer in layers for s in seeds}
    for n in (1, 2, 3, 4, 7):
        parts = [shard_cells(tasks, layers, seeds, cost, (i, n)) for i in range(n)]
        assert set().union(*parts) == grid
        assert sum(len(p) for p in parts) == len(grid)  # no cell twice
        assert parts == [shard_cells(tasks, layers, seeds, cost, (i, n)) for i in range(n)]
        loads = [sum(cost[t] for t, _, _ in p) for p in parts]
        assert max(loads) <= sum(loads) / n + max(cost.values())
    with pytest.raises(OptionError, match="shard"):
        shard_cells(tasks, layers, seeds, cost, (2, 2))


def test_shard_file_names(tmp_path):
    assert shard_path(tmp_path / "r.jsonl", None) == tmp_path / "r.jsonl"
    assert shard_path(tmp_path / "r.jsonl", (1, 4)) == tmp_path / "r.shard-1-of-4.jsonl"


# ---- runs ---------------------------------------------------------------------------------

def test_scheduler_runs_every_unit_once_in_processes(grid, tmp_path):
    cache, specs = grid
    one = _run(cache, specs, tmp_path / "one.jsonl")
    two = _run(cache, specs, tmp_path / "two.jsonl", jobs=2)
    assert two.processes == 2 and len(two) == 3 * 3 * 2
    indices = [s.unit.index for s in two.units]
    assert sorted(indices) == list(range(len(indices)))  # every unit once
    assert sum(s.written for s in two.units) == len(two)
    assert sorted(c for s in two.units for c in map(str, s.unit.cells())) == sorted(
        str((r.task, r.layer, r.seed)) for r in two)
    assert _numbers(read_results(tmp_path / "two.jsonl")) == _numbers(one)
    assert [(r.task, r.seed, r.layer) for r in two] == [
        (f"toy:{t}", s, layer) for t in SIZES for s in (1, 2) for layer in (0, 2, "avg")]
    assert all(r.device == "cpu" for r in two)
    assert "18 cell(s) in" in two.timing() and "on cpu, 2 process(es)" in two.timing()


def test_a_unit_over_the_memory_budget_trains_in_chunks_with_the_same_numbers(
        grid, tmp_path, monkeypatch):
    """What a chunk holds per layer spec (its cached vectors, features and the trainer's
    copy) is kept under the budget by training the layer specs in chunks; the numbers do not
    depend on it."""
    from estratos.probe.grid import units

    assert units.layer_bytes(100, 8, 50, 16) == 4 * (100 * 8 + 2 * 50 * 16)
    assert units._layer_chunks(["0", "1", "2", "avg"], units.FEATURE_BUDGET_BYTES // 2) == [
        ["0", "1"], ["2", "avg"]]
    cache, specs = grid
    whole = _run(cache, specs, tmp_path / "whole.jsonl")
    reads = []
    real = units.UnitRunner._vectors

    def counted(self, task_id, rows, layers, sentences):
        reads.append(list(layers))
        return real(self, task_id, rows, layers, sentences)

    monkeypatch.setattr(units, "FEATURE_BUDGET_BYTES", 1)  # one layer spec a chunk
    monkeypatch.setattr(units.UnitRunner, "_vectors", counted)
    chunked = _run(cache, specs, tmp_path / "chunked.jsonl")
    assert reads and all(len(layers) == 1 for layers in reads)
    assert _numbers(read_results(tmp_path / "chunked.jsonl")) == _numbers(whole)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_failing_unit_names_its_task_and_keeps_the_others(tmp_path, jobs):
    cache = _grid_cache(tmp_path / "nan.h5", nan_task="B")
    specs = [spec(name) for name in SIZES]
    out = tmp_path / "r.jsonl"
    with pytest.raises(CacheError, match=r"^toy:B: .*hold NaN"):
        _run(cache, specs, out, jobs=jobs)
    assert {r.task for r in read_results(out)} == {"toy:A", "toy:C"}
    assert len(read_results(out)) == 2 * 3 * 2


def test_shards_union_equals_the_unsharded_grid(grid, tmp_path):
    cache, specs = grid
    whole = _run(cache, specs, tmp_path / "all.jsonl")
    got = {}
    for i in range(3):
        run = _run(cache, specs, tmp_path / "r.jsonl", shard=f"{i}/3")
        assert run.out == tmp_path / f"r.shard-{i}-of-3.jsonl"
        assert _numbers(read_results(run.out)) == _numbers(run) and len(run) > 0
        overlap = set(got) & {r.key for r in run}
        assert not overlap
        got.update(_numbers(run))
    assert got == _numbers(whole)
    assert not (tmp_path / "r.jsonl").exists()
    # a shard run again has nothing to do; report reads the shards by a glob
    assert len(_run(cache, specs, tmp_path / "r.jsonl", shard="1/3")) == 0
    assert _numbers(read_results(str(tmp_path / "r.shard-*-of-3.jsonl"))) == got


def test_resume_from_other_files_skips_their_cells(grid, tmp_path):
    cache, specs = grid
    first = _run(cache, specs[:1], tmp_path / "a.jsonl")
    rest = _run(cache, specs, tmp_path / "b.jsonl", resume_from=[str(tmp_path / "a*.jsonl")])
    assert {r.task for r in rest} == {"toy:B", "toy:C"}
    assert rest.already_done == len(first)
    with pytest.raises(Exception, match="no results file matches"):
        _run(cache, specs, tmp_path / "c.jsonl", resume_from=[str(tmp_path / "zz*.jsonl")])


def test_cli_shard_from_slurm_variables_and_device(grid, tmp_path, monkeypatch):
    cache, _ = grid
    runner = CliRunner()
    base = ["probe", "--cache", str(cache), "--tasks", "es-senteval:TASS1",
            "--out", str(tmp_path / "r.jsonl")]
    res = runner.invoke(cli, base + ["--device", "cuda"])
    assert res.exit_code == 2 and "--device" in res.output and "Traceback" not in res.output
    res = runner.invoke(cli, base + ["--device", "tpu"])
    assert res.exit_code == 2 and "--device" in res.output
    res = runner.invoke(cli, base + ["--shard", "3/2"])
    assert res.exit_code == 2 and "--shard" in res.output
    res = runner.invoke(cli, base + ["--shard", "x"])
    assert res.exit_code == 2 and "--shard" in res.output
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    monkeypatch.delenv("SLURM_ARRAY_TASK_COUNT", raising=False)
    res = runner.invoke(cli, base)
    assert res.exit_code == 2 and "SLURM_ARRAY_TASK_COUNT" in res.output


def test_cli_shards_of_a_custom_task(tmp_path, monkeypatch):
    task_file, cache = write_toml_task(tmp_path, 200, (1, 2), 120, 40)
    base = ["probe", "--cache", str(cache), "--task-file", str(task_file),
            "--out", str(tmp_path / "r.jsonl"), "--layers", "all", "--seeds", "1,2"]
    runner = CliRunner()
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
    for task_id in ("1", "2"):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", task_id)
        res = runner.invoke(cli, base)
        assert res.exit_code == 0, res.output
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    shards = [read_results(tmp_path / f"r.shard-{i}-of-2.jsonl") for i in range(2)]
    assert all(shards) and sum(len(s) for s in shards) == 8
    res = runner.invoke(cli, base + ["--shard", "0/2"])
    assert res.exit_code == 0 and "nothing to do" in res.output
    res = runner.invoke(cli, ["report", str(tmp_path / "r.shard-*-of-2.jsonl"),
                              "--out", str(tmp_path / "rep"), "--format", "csv"])
    assert res.exit_code == 0, res.output


def test_units_of_one_task_share_nothing_but_the_results_file():
    unit = WorkUnit("t", (0, "avg"), (1, 2), 4.0)
    assert unit.n_cells == 4 and list(unit.cells())[1] == ("t", "avg", 1)
    assert unit.describe() == "t layers 0,avg seeds 1,2"


# ---- Ctrl-C through the CLI -----------------------------------------------------------------

def _custom_grid(root, n=600):
    """Two custom tasks over one cache, slow enough to interrupt (4 seeds x 4 layer specs
    each; a process writes each seed's 4 cells as they are done, so Ctrl-C after the first
    line falls mid-run)."""
    sentences, vec, y = toy_classification(n, n_states=3, dim=32, informative=(1, 2))
    names = ("neg", "pos")
    cut = {"train": range(int(0.6 * n)), "dev": range(int(0.6 * n), int(0.8 * n)),
           "test": range(int(0.8 * n), n)}
    files = []
    for task in ("Slow", "Slower"):
        folder = root / task
        folder.mkdir()
        for split, rows in cut.items():
            (folder / f"{split}.tsv").write_text(
                "".join(f"{names[y[i]]}\t{sentences[i]}\n" for i in rows), encoding="utf-8")
        (folder / "task.toml").write_text(
            f'name = "{task}"\nsuite = "custom"\ngroup = "SC"\nlanguage = "es"\n'
            'format = "tsv"\ncombiner = "single"\nprotocol = "split"\n[files]\n'
            'train = "train.tsv"\ndev = "dev.tsv"\ntest = "test.tsv"\n[columns]\nlabel = 0\n'
            'sentences = [1]\nheader = false\n[classifier]\ntenacity = 30\nmax_epoch = 400\n',
            encoding="utf-8")
        files.append(folder / "task.toml")
    return write_cache(root / "c.h5", sentences, vec), files


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_stops_every_worker_and_says_what_was_kept(tmp_path, jobs, child_env,
                                                           sigint_default):
    """Ctrl-C right after the first results line is appended: the fault point sends SIGINT
    to the run's process group there (what a terminal's Ctrl-C does), so the interrupt lands
    at the same place however loaded the machine is."""
    import os
    import subprocess
    import sys
    import time

    from estratos.faultpoints import interrupt_marker

    cache, task_files = _custom_grid(tmp_path)
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "estratos", "probe", "--cache", str(cache), "--task-file",
           str(task_files[0]), "--task-file", str(task_files[1]), "--out", str(out),
           "--layers", "all", "--seeds", "1,2,3,4", "--jobs", jobs, "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True, preexec_fn=sigint_default,
                            env=child_env(ESTRATOS_FAULT="results-appended:1:interrupt"))
    try:
        _, err = proc.communicate(timeout=600)
    finally:
        interrupt_marker(proc.pid).unlink(missing_ok=True)  # its own group: pgid == pid
    assert proc.returncode == 130, err
    assert "interrupted:" in err and str(out) in err and "run the same command" in err
    assert "Traceback" not in err and "Aborted!" not in err
    for _ in range(1200):  # every worker is gone (the bound only guards against a hang)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("worker processes survived Ctrl-C")
    kept = read_results(out)
    assert 0 < len(kept) < 32 and out.read_bytes().endswith(b"\n")
    assert f"{len(kept)} new cell(s)" in err
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=child_env())
    assert done.returncode == 0, done.stderr
    assert f"wrote {32 - len(kept)} cell(s)" in done.stdout
    assert len(_numbers(read_results(out, latest=False))) == 32


def test_cost_counts_each_protocols_fits():
    """The cost hook of each protocol counts its fits: one per L2 on train (split), k folds
    per L2 plus a refit (kfold), and that for each of k outer folds (inner-kfold)."""
    from estratos.protocols import get_protocol

    sizes = {"train": 100, "dev": 10, "test": 20, "all": 100}
    assert get_protocol("split").examples_trained(sizes, 4, 10) == 400
    assert get_protocol("kfold").examples_trained(sizes, 4, 10) == 4 * 10 * 90 + 100
    assert get_protocol("kfold").examples_trained(sizes, 4, 10, folds_together=True) == \
        4 * 90 + 100
    assert get_protocol("inner-kfold").examples_trained(sizes, 4, 10) == \
        10 * (4 * 10 * 81 + 90)
