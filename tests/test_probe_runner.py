"""run_probe end to end on tiny caches and hand-made tasks: records, resume, protocols,
bad input (each with a clear message and nothing written), and the CLI."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from probe_toys import (
    MODEL,
    MemoryLoader,
    WorkerFailingLoader,
    single_task,
    spec,
    toy_classification,
    toy_similarity_tasks,
    toy_split_task,
    write_cache,
    write_toy_task,
)

from estratos.cli import cli
from estratos.errors import CacheError, MissingSentences, OptionError, SettingsMismatch
from estratos.probe.config import ProbeConfig
from estratos.probe.grid.runner import run_probe
from estratos.results import read_results

CONTRACT_KEYS = {"schema", "kind", "task", "suite", "name", "group", "language", "layer",
                 "pooling", "features", "seed", "protocol", "fallback", "classifier", "metric", "score",
                 "l2", "dev", "test", "ci", "sizes", "chance", "epochs", "seconds", "model", "revision",
                 "cache", "estratos_version", "created", "device", "data_digest", "encoding",
                 "information"}


@pytest.fixture
def toy(tmp_path):
    task, sentences, vec = toy_split_task(240)
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    return task, cache, MemoryLoader({task.spec.id: task})


def run(cache, task, loader, out, **kw):
    kw.setdefault("threads", 1)
    return run_probe(cache, [task.spec], None, out, ProbeConfig.build(**kw), loader=loader)


def test_records_follow_the_contract(toy, tmp_path):
    task, cache, loader = toy
    out = tmp_path / "r.jsonl"
    records = run(cache, task, loader, out, layers="1,avg", seeds=(1, 2))
    assert [(r.layer, r.seed) for r in records] == [(1, 1), ("avg", 1), (1, 2), ("avg", 2)]
    assert read_results(out) == records
    r = records[0]
    assert set(r.to_json()) == CONTRACT_KEYS
    assert r.task == "toy:Toy" and r.model == MODEL and r.revision == "rev-1"
    assert r.classifier["name"] == "senteval" and r.classifier["l2_grid"] == [
        1e-5, 1e-4, 1e-3, 1e-2]
    assert r.sizes == {"train": 144, "dev": 48, "test": 48}
    test_labels = task.splits["test"].labels
    majority = 100 * np.bincount(test_labels).max() / len(test_labels)
    assert r.chance == {"n_classes": len(task.labels), "majority": round(majority, 2)}
    assert r.score == r.test["accuracy"] and r.metric == "accuracy"
    assert r.cache["n_states"] == 3 and r.cache["dim"] == 8
    assert r.protocol == "split" and r.fallback is None


def test_informative_layers_score_higher_than_noise(tmp_path):
    sentences, vec, y = toy_classification(1200, informative=(2,))
    ids = np.arange(1200)
    task = single_task(spec(), sentences, {"train": (ids[:800], y[:800]),
                                           "dev": (ids[800:1000], y[800:1000]),
                                           "test": (ids[1000:], y[1000:])}, ("a", "b"))
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    records = run(cache, task, MemoryLoader({task.spec.id: task}), tmp_path / "r.jsonl",
                  layers="0,2")
    score = {r.layer: r.score for r in records}
    assert score[2] > 95 and score[0] < 70


def test_resume_skips_done_cells_and_overwrite_redoes_them(toy, tmp_path):
    task, cache, loader = toy
    out = tmp_path / "r.jsonl"
    first = run(cache, task, loader, out, layers="0,1")
    assert len(first) == 2
    assert run(cache, task, loader, out, layers="0,1") == []
    more = run(cache, task, loader, out, layers="0,1,2")
    assert [r.layer for r in more] == [2]
    again = run(cache, task, loader, out, layers="0", overwrite=True)
    assert [r.layer for r in again] == [0]
    assert len(read_results(out, latest=False)) == 4
    assert len(read_results(out)) == 3
    # other classifier and seed are other cells
    assert len(run(cache, task, loader, out, layers="0", classifier="lbfgs")) == 1


def test_batched_equals_sequential_and_runs_are_deterministic(toy, tmp_path):
    task, cache, loader = toy
    a = run(cache, task, loader, tmp_path / "a.jsonl", layers="all")
    b = run(cache, task, loader, tmp_path / "b.jsonl", layers="all", sequential=True)
    c = run(cache, task, loader, tmp_path / "c.jsonl", layers="all")

    def pick(rs):
        return [(r.layer, r.l2, r.dev, r.test, r.epochs) for r in rs]

    assert pick(a) == pick(b) == pick(c)


def test_jobs_run_tasks_in_processes(tmp_path):
    tasks, sentences, vectors = {}, [], []
    for name, offset in (("A", 0), ("B", 1)):
        task, sents, vec = toy_split_task(160, seed=offset, task_spec=spec(name))
        tasks[task.spec.id] = task
        sentences += list(sents)
        vectors.append(vec)
    # both toy tasks share sentence texts: keep one row per sentence
    cache = write_cache(tmp_path / "c.h5", sentences[:160], vectors[0])
    loader = MemoryLoaderPickle(sorted(tasks))
    records = run_probe(cache, [t.spec for t in tasks.values()], None, tmp_path / "r.jsonl",
                        ProbeConfig.build(layers="0,avg", jobs=2, threads=1), loader=loader)
    assert sorted((r.task, str(r.layer)) for r in records) == [
        ("toy:A", "0"), ("toy:A", "avg"), ("toy:B", "0"), ("toy:B", "avg")]
    assert len(read_results(tmp_path / "r.jsonl")) == 4


SPAWN_WATCH = """
import sys
import estratos.probe.grid.pool as scheduler
original = scheduler.WorkerPool.__init__
def watched(self, *args, **kwargs):
    print("PARENT HAD TORCH AT SPAWN", "torch" in sys.modules, flush=True)
    original(self, *args, **kwargs)
scheduler.WorkerPool.__init__ = watched
from estratos.cli import main
main(sys.argv[1:])
"""


def test_workers_start_before_the_parent_imports_torch_and_log_like_it(tmp_path, child_env):
    """A worker's imports overlap the parent's (it is spawned before the
    parent imports torch), and with -v its log lines reach stderr as the parent's do."""
    import subprocess
    import sys

    from probe_toys import write_toml_task

    task_file, cache = write_toml_task(tmp_path, 240, informative=(1, 2), train=160, dev=40)
    argv = ["-v", "probe", "--cache", str(cache), "--task-file", str(task_file),
            "--layers", "all", "--seeds", "1,2", "--jobs", "2", "--out", str(tmp_path / "r.jsonl")]
    done = subprocess.run([sys.executable, "-c", SPAWN_WATCH, *argv], capture_output=True,
                          text=True, timeout=300, env=child_env())
    assert done.returncode == 0, done.stderr
    assert "PARENT HAD TORCH AT SPAWN False" in done.stdout, done.stdout
    units = [line for line in done.stderr.splitlines()
             if "estratos.probe.grid.units" in line and " cell(s) in " in line]
    assert len(units) == 2, done.stderr  # one unit per seed, one of them in the worker
    assert len(read_results(tmp_path / "r.jsonl")) == 2 * 4


BRACE_LOGGING = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="{levelname}|{name}|{message}", style="{")
from estratos.probe.config import ProbeConfig
from estratos.probe.grid.runner import run_probe
from estratos.tasks import load_task_file
cache, task_file, out = sys.argv[1:]
run = run_probe(cache, [load_task_file(task_file)], None, out,
                ProbeConfig.build(layers="all", seeds=(1, 2), jobs=2, threads=1))
print("CELLS", len(run), run.processes)
"""


def test_workers_take_the_callers_logging_whatever_its_format_style(tmp_path, child_env):
    """A library caller's own logging ({}-style format) reaches the workers as it is, and
    they start (a %-style rebuild of it made every worker die while starting)."""
    import subprocess
    import sys

    from probe_toys import write_toml_task

    task_file, cache = write_toml_task(tmp_path, 240, informative=(1, 2), train=160, dev=40)
    done = subprocess.run([sys.executable, "-c", BRACE_LOGGING, str(cache), str(task_file),
                           str(tmp_path / "r.jsonl")], capture_output=True, text=True,
                          timeout=300, env=child_env())
    assert done.returncode == 0, done.stderr
    assert "CELLS 8 2" in done.stdout, done.stdout + done.stderr
    units = [line for line in done.stderr.splitlines()
             if line.startswith("INFO|estratos.probe.grid.units|") and " cell(s) in " in line]
    assert len(units) == 2, done.stderr  # the worker's line too, in the caller's format


def test_a_loader_that_cannot_go_to_the_workers_fails_before_any_training(tmp_path, toy):
    task, cache, _ = toy

    def local_loader(spec_, dirs):  # a local function does not pickle
        return task

    with pytest.raises(Exception, match="pickle"):
        run_probe(cache, [task.spec], None, tmp_path / "r.jsonl",
                  ProbeConfig.build(layers="0,1", seeds=(1, 2), jobs=2, threads=1),
                  loader=local_loader)
    assert not (tmp_path / "r.jsonl").exists()


class MemoryLoaderPickle:
    """A picklable loader (TaskData holds read-only mappings, which do not pickle)."""

    def __init__(self, ids):
        self.ids = list(ids)

    def __call__(self, task_spec, data_dirs):
        seed = 0 if task_spec.name == "A" else 1
        return toy_split_task(160, seed=seed, task_spec=task_spec)[0]


# ---- other protocols through the runner ----------------------------------------------------

def test_cosine_and_relatedness_tasks(tmp_path):
    sentences, vec, (sts, sick) = toy_similarity_tasks()
    sts_spec, sick_spec = sts.spec, sick.spec
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    loader = MemoryLoader({sts_spec.id: sts, sick_spec.id: sick})
    records = run_probe(cache, [sts_spec, sick_spec], None, tmp_path / "r.jsonl",
                        ProbeConfig.build(layers="1", threads=1), loader=loader)
    by = {r.task: r for r in records}
    s = by["toy:STS"]
    assert s.l2 is None and s.dev is None and s.epochs is None
    assert set(s.test["subsets"]) == {"news", "wiki"}
    assert s.score == round(100 * s.test["pearson_wmean"], 2) and s.score > 50
    r = by["toy:SICKR"]
    assert set(r.test) == {"pearson", "spearman", "mse"} and set(r.dev) == {"pearson"}
    assert r.score == round(100 * r.test["pearson"], 2)
    assert r.classifier["epoch_size"] == 50
    assert s.chance is None and r.chance is None and "chance" not in s.to_json()


def test_kfold_inner_kfold_and_f1(tmp_path):
    sentences, vec, y = toy_classification(200, n_states=2, informative=(1,))
    ids = np.arange(200)
    kf_spec = spec("KF", protocol="kfold", classifier={"kfold": 3, "max_epoch": 8},
                   extra_metrics=("f1",))
    kf = single_task(kf_spec, sentences, {"train": (ids[:150], y[:150]),
                                          "test": (ids[150:], y[150:])}, ("0", "1"))
    ik_spec = spec("IK", protocol="inner-kfold", classifier={"kfold": 3, "max_epoch": 4})
    ik = single_task(ik_spec, sentences, {"all": (ids, y)}, ("neg", "pos"))
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    records = run_probe(cache, [kf_spec, ik_spec], None, tmp_path / "r.jsonl",
                        ProbeConfig.build(layers="1", threads=1),
                        loader=MemoryLoader({kf_spec.id: kf, ik_spec.id: ik}))
    by = {r.task: r for r in records}
    assert set(by["toy:KF"].test) == {"accuracy", "f1"}
    assert by["toy:KF"].protocol == "kfold" and "accuracy" in by["toy:KF"].dev
    assert set(by["toy:IK"].test) == {"accuracy"}
    assert by["toy:IK"].sizes == {"all": 200}
    # inner-kfold scores every example: its majority rate is the whole pool's
    assert by["toy:IK"].chance == {"n_classes": 2,
                                   "majority": round(100 * np.bincount(y).max() / 200, 2)}


# ---- bad input -----------------------------------------------------------------------------

def test_missing_sentences_name_the_count_and_the_encode_command(toy, tmp_path):
    task, _, loader = toy
    cache = write_cache(tmp_path / "small.h5", task.sentences[:200],
                        np.zeros((200, 3, 8), dtype=np.float32))
    out = tmp_path / "r.jsonl"
    with pytest.raises(MissingSentences) as info:
        run(cache, task, loader, out)
    msg = str(info.value)
    assert "40 sentence(s)" in msg and info.value.missing == 40
    assert (f"estratos encode --model {MODEL} --dtype float32 --max-length 128 --tasks toy:Toy "
            f"--data-dir DIR --out {cache}") in msg
    assert not out.exists()


def test_incomplete_cache_is_refused(toy, tmp_path):
    task, _, loader = toy
    _, sentences, vec = toy_split_task(240)
    cache = write_cache(tmp_path / "inc.h5", sentences, vec, complete=False)
    with pytest.raises(CacheError, match="incomplete"):
        run(cache, task, loader, tmp_path / "r.jsonl")
    assert not (tmp_path / "r.jsonl").exists()


def test_cache_from_another_model_than_expected(toy, tmp_path):
    task, cache, loader = toy
    with pytest.raises(SettingsMismatch, match="other/model") as info:
        run(cache, task, loader, tmp_path / "r.jsonl", expect_model="other/model")
    assert MODEL in str(info.value)


def test_nan_rows_are_a_clear_error_before_training(toy, tmp_path):
    task, _, loader = toy
    _, sentences, vec = toy_split_task(240)
    vec = vec.copy()
    vec[17, 1, 3] = np.nan
    cache = write_cache(tmp_path / "nan.h5", sentences, vec)
    with pytest.raises(CacheError, match=r"1 row\(s\) needed by toy:Toy hold NaN") as info:
        run(cache, task, loader, tmp_path / "r.jsonl")
    assert sentences[17] in str(info.value)
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("layers,needle", [("0,first", "unknown layer spec"),
                                           ("0,3", "out of range"), ("9", "out of range")])
def test_bad_layer_specs(toy, tmp_path, layers, needle):
    task, cache, loader = toy
    with pytest.raises(OptionError, match=needle) as info:
        run(cache, task, loader, tmp_path / "r.jsonl", layers=layers)
    assert "layers" in str(info.value)


@pytest.mark.parametrize("kw,needle", [({"pooling": "max"}, "pooling"),
                                       ({"seeds": ()}, "seeds"),
                                       ({"seeds": ("x",)}, "seeds"),
                                       ({"jobs": 0}, "jobs"),
                                       ({"classifier": "svm"}, "classifier")])
def test_bad_options(toy, tmp_path, kw, needle):
    task, cache, loader = toy
    with pytest.raises(OptionError, match=needle):
        run(cache, task, loader, tmp_path / "r.jsonl", **kw)


def test_missing_cache_file(toy, tmp_path):
    task, _, loader = toy
    with pytest.raises(CacheError, match="no such cache"):
        run(tmp_path / "none.h5", task, loader, tmp_path / "r.jsonl")


# ---- CLI -----------------------------------------------------------------------------------

def test_cli_reports_user_errors_without_traceback(toy, tmp_path):
    task, cache, _ = toy
    runner = CliRunner()
    res = runner.invoke(cli, ["probe", "--cache", str(tmp_path / "none.h5"), "--tasks",
                              "es-senteval:TASS1", "--out", str(tmp_path / "r.jsonl")])
    assert res.exit_code == 1 and "no such cache" in res.output
    assert "Traceback" not in res.output
    res = runner.invoke(cli, ["probe", "--cache", str(cache), "--tasks", "nosuchtask",
                              "--out", str(tmp_path / "r.jsonl")])
    assert res.exit_code != 0 and "nosuchtask" in res.output
    res = runner.invoke(cli, ["probe", "--cache", str(cache), "--task-file", "/nonexistent.toml",
                              "--out", str(tmp_path / "r.jsonl")])
    assert res.exit_code != 0 and "Traceback" not in res.output


@pytest.fixture
def toml_task(tmp_path):
    """A custom task (TOML + TSV files) over toy sentences, and a cache holding them."""
    sentences, vec, y = toy_classification(300, informative=(1, 2))
    names = ("neg", "pos")
    parts = {"train": range(180), "dev": range(180, 240), "test": range(240, 300)}
    task_file = write_toy_task(tmp_path, {split: [(names[y[i]], sentences[i]) for i in rows]
                                          for split, rows in parts.items()})
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    return task_file, cache


def test_cli_end_to_end_with_a_custom_task(toml_task, tmp_path):
    task_file, cache = toml_task
    out = tmp_path / "r.jsonl"
    base = ["probe", "--cache", str(cache), "--task-file", str(task_file), "--out", str(out),
            "--threads", "1"]
    runner = CliRunner()
    res = runner.invoke(cli, base + ["--layers", "1,avg", "--seeds", "1,2"])
    assert res.exit_code == 0, res.output
    assert "wrote 4 cell(s)" in res.output and "custom:Toy" in res.output
    assert {(r.layer, r.seed) for r in read_results(out)} == {
        (1, 1), (1, 2), ("avg", 1), ("avg", 2)}
    res = runner.invoke(cli, base + ["--layers", "1,avg", "--seeds", "1,2"])
    assert res.exit_code == 0 and "nothing to do" in res.output
    res = runner.invoke(cli, base + ["--layers", "7"])
    assert res.exit_code == 2 and "--layers" in res.output
    res = runner.invoke(cli, base + ["--layers", "top"])
    assert res.exit_code == 2 and "unknown layer spec" in res.output
    res = runner.invoke(cli, base + ["--expect-model", "someone/else"])
    assert res.exit_code == 1 and "someone/else" in res.output
    res = runner.invoke(cli, base + ["--seeds", "1,x"])
    assert res.exit_code == 2 and "--seeds" in res.output
    assert len(read_results(out)) == 4


def test_a_user_error_in_a_worker_reaches_the_caller(tmp_path):
    """Task data that fails to load in a worker (the survey) stops the run before any
    training, naming the task and the file line; nothing is written."""
    import os

    from estratos.errors import InputError

    task, sents, vec = toy_split_task(160)
    cache = write_cache(tmp_path / "c.h5", sents, vec)
    specs = [spec("A"), spec("B")]
    marker = tmp_path / "worker-reached-B"
    with pytest.raises(InputError, match=r"^toy:B: train\.tsv:3: bad label"):
        run_probe(cache, specs, None, tmp_path / "r.jsonl",
                  ProbeConfig.build(layers="0", jobs=2, threads=1),
                  loader=WorkerFailingLoader("toy:B", InputError("bad label 'x'", "train.tsv", 3),
                                             os.getpid(), marker))
    assert marker.exists()  # the worker's error, not the parent's
    assert not (tmp_path / "r.jsonl").exists()


def test_probe_tasks_and_summarize(toml_task, tmp_path):
    from estratos.probe.command import probe_tasks
    from estratos.probe.grid.outcome import summarize

    task_file, cache = toml_task
    out = tmp_path / "r.jsonl"
    records = probe_tasks(cache, "", out, ProbeConfig.build(layers="2", seeds="3, 4", threads=1),
                          task_files=[str(task_file)])
    assert [r.seed for r in records] == [3, 4]
    text = summarize(records, out)
    assert "wrote 2 cell(s)" in text and "custom:Toy: best layer 2" in text
    assert "nothing to do" in summarize([], out)
    with pytest.raises(OptionError, match="tasks"):
        probe_tasks(cache, "", out, ProbeConfig.build())


def test_probe_cli_survives_an_undefined_score(tmp_path):
    """Layer 0 [CLS] is the same vector for every sentence, so an STS correlation there is
    undefined: the cell is written with a null score and the summary says so (this used to
    end in a TypeError after the results were written)."""
    from click.testing import CliRunner

    from estratos.cli import cli

    rng = np.random.default_rng(0)
    n = 40
    sentences = [f"frase {i}" for i in range(2 * n)]
    vec = rng.normal(size=(2 * n, 2, 8)).astype(np.float32)
    vec[:, 0, :] = 1.0  # layer 0: constant, as a [CLS] embedding is
    gold = rng.uniform(0, 5, size=n)
    (tmp_path / "test.tsv").write_text("".join(
        f"{gold[i]:.2f}\t{sentences[2 * i]}\t{sentences[2 * i + 1]}\n" for i in range(n)),
        encoding="utf-8")
    (tmp_path / "sts.toml").write_text('''
name = "STSToy"
group = "SS"
language = "es"
format = "tsv"
combiner = "pair"
protocol = "cosine"
score_range = [0, 5]

[files]
news = "test.tsv"

[columns]
score = 0
sentences = [1, 2]
header = false
''', encoding="utf-8")
    cache = write_cache(tmp_path / "c.h5", sentences, vec)
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(cli, ["probe", "--cache", str(cache), "--task-file",
                                      str(tmp_path / "sts.toml"), "--layers", "all",
                                      "--seeds", "1,2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote 6 cell(s)" in result.output
    assert "custom:STSToy: best layer" in result.output
    assert "undefined at layer 0" in result.output
    scores = {(r.layer, r.seed): r.score for r in read_results(out)}
    assert scores[(0, 1)] is None and scores[(0, 2)] is None and scores[(1, 1)] is not None
    report = CliRunner().invoke(cli, ["report", str(out), "--out", str(tmp_path / "rep"),
                                      "--format", "md"])
    assert report.exit_code == 0, report.output
    assert "undef." in (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")


def test_resume_refuses_cells_computed_on_other_data(toml_task, tmp_path):
    # the task's files are rebuilt in place (here: other labels for the same sentences):
    # the cells already in --out were computed on other data and are not kept silently
    task_file, cache = toml_task
    out = tmp_path / "r.jsonl"
    base = ["probe", "--cache", str(cache), "--task-file", str(task_file), "--out", str(out),
            "--threads", "1", "--layers", "1", "--seeds", "1"]
    runner = CliRunner()
    res = runner.invoke(cli, base)
    assert res.exit_code == 0, res.output
    [first] = read_results(out)
    assert first.data_digest and len(first.data_digest) == 16
    test_file = tmp_path / "test.tsv"
    rows = test_file.read_text(encoding="utf-8").splitlines()
    flipped = [("pos" if y == "neg" else "neg") + "\t" + x
               for y, x in (r.split("\t", 1) for r in rows[:10])]
    test_file.write_text("\n".join(flipped + rows[10:]) + "\n", encoding="utf-8")
    res = runner.invoke(cli, base)
    assert res.exit_code == 1, res.output
    assert res.output.count("Error:") == 1 and "Traceback" not in res.output
    assert (f"{out}:1: 1 cell(s) of custom:Toy already in the results were computed on "
            f"other data (data digest {first.data_digest})") in res.output
    assert "--overwrite" in res.output and "nothing to do" not in res.output
    res = runner.invoke(cli, base + ["--overwrite"])
    assert res.exit_code == 0 and "wrote 1 cell(s)" in res.output, res.output
    [second] = read_results(out)
    assert second.data_digest != first.data_digest
    res = runner.invoke(cli, base)  # the same data again: resumed as before
    assert res.exit_code == 0 and "nothing to do" in res.output, res.output


@pytest.mark.parametrize("setting, value, shown", [
    ("max_length", 8, "max_length 128 there, 8 here (--max-length)"),
    ("dtype", "float16", "dtype float32 there, float16 here (--dtype)"),
    ("model_dtype", "bfloat16", "model_dtype float32 there, bfloat16 here (--model-dtype)"),
    ("lowercase", True, "lowercase false there, true here (--lowercase)"),
    ("mean_first_token", "keep", "mean_first_token skip there, keep here (--mean-first-token)"),
])
def test_resume_refuses_cells_of_a_cache_with_other_encode_settings(tmp_path, setting, value,
                                                                    shown):
    # the same sentences, model and revision encoded with another setting: the cells already
    # in --out hold other vectors' scores and are never kept as this cache's
    sentences, vec, y = toy_classification(300, informative=(1, 2))
    names = ("neg", "pos")
    parts = {"train": range(180), "dev": range(180, 240), "test": range(240, 300)}
    task_file = write_toy_task(tmp_path, {split: [(names[y[i]], sentences[i]) for i in rows]
                                          for split, rows in parts.items()})
    first = {"model_dtype": "float32", "mean_first_token": "skip"}
    a = write_cache(tmp_path / "a.h5", sentences, vec, **first)
    b = write_cache(tmp_path / "b.h5", sentences, vec, **{**first, setting: value})
    out = tmp_path / "r.jsonl"
    runner = CliRunner()

    def probe(cache, *extra):
        return runner.invoke(cli, ["probe", "--cache", str(cache), "--task-file",
                                   str(task_file), "--out", str(out), "--threads", "1",
                                   "--layers", "1,avg", "--seeds", "1", *extra])

    res = probe(a)
    assert res.exit_code == 0, res.output
    recorded = {**write_defaults, **first}[setting]
    assert {r.layer: r.encoding.get(setting) for r in read_results(out)} == {
        1: recorded, "avg": recorded}
    res = probe(b)
    assert res.exit_code == 1, res.output
    assert res.output.count("Error:") == 1 and "Traceback" not in res.output
    assert (f"{out}:1: 2 cell(s) already in the results were probed on vectors made with "
            f"other encode settings than the cache {b} ({shown})") in res.output
    assert "--overwrite" in res.output and "nothing to do" not in res.output
    assert len(read_results(out, latest=False)) == 2  # nothing written
    res = probe(b, "--overwrite")
    assert res.exit_code == 0 and "wrote 2 cell(s)" in res.output, res.output
    assert {r.encoding[setting] for r in read_results(out)} == {value}
    res = probe(b)  # the same settings again: resumed as before
    assert res.exit_code == 0 and "nothing to do" in res.output, res.output


#: the settings :func:`probe_toys.write_cache` writes unless told otherwise
write_defaults = {"max_length": 128, "dtype": "float32", "lowercase": False}


def test_an_avg_cell_records_what_its_mean_averaged(tmp_path):
    # a cache without the stored mean over every state: the probe averages the states it
    # stores, so a cache of other --states holds another avg vector, and only the avg cell
    # says so (layer 1's vector is the same whatever else is stored)
    from estratos.cache import open_cache
    from estratos.results.provenance import cell_encoding, encoding_diff

    sentences, vec, y = toy_classification(60, informative=(1, 2))
    cache = write_cache(tmp_path / "a.h5", sentences, vec)
    with open_cache(cache) as reader:
        settings = reader.identity()["encoding"]
    assert settings["avg"] == [0, 1, 2] and settings["max_length"] == 128
    assert "avg" not in cell_encoding(settings, 1)
    assert cell_encoding(settings, "avg")["avg"] == [0, 1, 2]
    some = {**settings, "avg": [0, 2]}
    assert encoding_diff(cell_encoding(settings, 1), cell_encoding(some, 1)) == {}
    assert encoding_diff(cell_encoding(settings, "avg"), cell_encoding(some, "avg")) == {
        "avg": ([0, 1, 2], [0, 2])}
    stored = {**settings, "avg": "all"}  # a cache that stores the mean over every state
    assert encoding_diff(cell_encoding(stored, "avg"), cell_encoding(settings, "avg"))
    assert encoding_diff({"dtype": "float16"}, {"max_length": 8}) == {}  # unknown: any


@pytest.mark.parametrize("make_out, needle", [
    (lambda tmp: tmp / "afile" / "r.jsonl", "Not a directory"),
    (lambda tmp: tmp / "afile" / "deeper" / "r.jsonl", "Not a directory"),
    (lambda tmp: tmp, "is a folder"),
])
def test_an_unusable_out_is_refused_before_any_training(toml_task, tmp_path, make_out,
                                                         needle):
    task_file, cache = toml_task
    (tmp_path / "afile").write_text("x")
    out = make_out(tmp_path)
    res = CliRunner().invoke(cli, ["probe", "--cache", str(cache), "--task-file",
                                   str(task_file), "--out", str(out), "--layers", "1",
                                   "--threads", "1"])
    assert res.exit_code == 2, res.output
    assert res.output.count("Error:") == 1 and f"Error: --out {out}: {needle}" in res.output
    assert "ERROR" not in res.output and "Traceback" not in res.output
    assert not list(tmp_path.glob("**/*.predictions"))


def test_an_unwritable_out_folder_is_refused_before_any_training(toml_task, tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    task_file, cache = toml_task
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        res = CliRunner().invoke(cli, ["probe", "--cache", str(cache), "--task-file",
                                       str(task_file), "--out", str(locked / "r.jsonl")])
    finally:
        locked.chmod(0o700)
    assert res.exit_code == 2 and "Permission denied" in res.output, res.output


def test_tasks_and_task_file_run_both(toml_task, tmp_path):
    # --task-file "also" probes its task when --tasks names others
    task_file, cache = toml_task
    other = tmp_path / "toy2.toml"
    other.write_text(task_file.read_text(encoding="utf-8").replace('name = "Toy"',
                                                                   'name = "Toy2"'),
                     encoding="utf-8")
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(cli, ["probe", "--cache", str(cache), "--tasks", "custom:Toy",
                                   "--task-file", str(task_file), "--task-file", str(other),
                                   "--layers", "1", "--threads", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert {r.task for r in read_results(out)} == {"custom:Toy", "custom:Toy2"}


def test_progress_lines_off_a_terminal(toml_task, tmp_path):
    # stderr is a pipe here, as under nohup or in a SLURM log: lines, not silence; -v and
    # -q are taken after the subcommand too
    import subprocess
    import sys

    task_file, cache = toml_task
    base = [sys.executable, "-m", "estratos", "probe", "--cache", str(cache), "--task-file",
            str(task_file), "--layers", "1,2", "--seeds", "1", "--threads", "1"]
    done = subprocess.run(base + ["--out", str(tmp_path / "a.jsonl"), "-v"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [l for l in done.stderr.splitlines() if l.startswith("probe: ")]
    assert lines[0] == "probe: 2 cell(s) in 1 unit(s) on 1 process(es)", done.stderr
    assert lines[-1].startswith("probe: 2/2 cells (100%), 0:") and " elapsed" in lines[-1]
    assert "INFO estratos" in done.stderr  # -v after the subcommand
    quiet = subprocess.run(base + ["--out", str(tmp_path / "b.jsonl"), "-q"],
                           capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0 and "probe: " not in quiet.stderr, quiet.stderr
    both = subprocess.run(base + ["--out", str(tmp_path / "c.jsonl"), "-q", "-v"],
                          capture_output=True, text=True, timeout=300)
    assert both.returncode == 2 and "exclude each other" in both.stderr


def test_progress_lines_come_every_interval():
    import io

    from estratos.probe.grid.plan import WorkUnit
    from estratos.probe.grid.progress import GridProgress

    now = [0.0]
    units = [WorkUnit("t:A", (0, 1), (1,), 2.0, 0), WorkUnit("t:B", (0,), (1,), 1.0, 1)]
    out = io.StringIO()
    bar = GridProgress(units, 1, False, lambda: now[0], lines=True, every=60, stream=out)
    bar.started(units[0])
    now[0] = 30.0
    bar.update(units[0], 1)  # 30 s after the first line: nothing yet
    now[0] = 61.0
    bar.update(units[0], 1)
    now[0] = 70.0
    bar.finished(units[0], 70.0)
    bar.close()
    assert out.getvalue().splitlines() == [
        "probe: 3 cell(s) in 2 unit(s) on 1 process(es)",
        "probe: 2/3 cells (67%), 1:01 elapsed, ETA 0:30",
        "probe: 2/3 cells (67%), 1:10 elapsed, ETA 0:35"]
