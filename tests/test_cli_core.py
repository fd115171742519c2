"""One task selection for every command, one exit-code convention, and option errors that
answer before torch is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from estratos.cli import cli

from probe_toys import toy_classification, write_cache, write_toy_task

REPO = Path(__file__).resolve().parents[1]


def _task(folder: Path, name: str = "Toy", suite: str = "custom", n: int = 120) -> Path:
    sentences, _, y = toy_classification(n, informative=(1, 2))
    labels = ("neg", "pos")
    parts = {"train": range(0, n * 6 // 10), "dev": range(n * 6 // 10, n * 8 // 10),
             "test": range(n * 8 // 10, n)}
    return write_toy_task(folder, {split: [(labels[y[i]], sentences[i]) for i in rows]
                                   for split, rows in parts.items()},
                          name=name, suite=suite, file_name=f"{name}.toml")


@pytest.fixture
def toy(tmp_path):
    """A custom task file and a cache holding its sentences."""
    sentences, vec, _ = toy_classification(120, informative=(1, 2))
    return _task(tmp_path / "toy"), write_cache(tmp_path / "c.h5", sentences, vec)


def _run(args):
    return CliRunner().invoke(cli, [str(a) for a in args])


# ---- every command accepts --task-file ------------------------------------------------------

def test_tasks_commands_accept_a_task_file(toy):
    task, _ = toy
    listed = _run(["tasks", "list", "--task-file", task, "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert "custom:Toy" in listed.output
    shown = _run(["tasks", "show", "custom:Toy", "--task-file", task])
    assert shown.exit_code == 0 and "custom:Toy" in shown.output, shown.output
    checked = _run(["tasks", "check", "custom:Toy", "--task-file", task])
    assert checked.exit_code == 0 and "no problems" in checked.output, checked.output


def test_probe_and_baseline_accept_a_task_file(toy, tmp_path):
    task, cache = toy
    out = tmp_path / "r.jsonl"
    probed = _run(["probe", "--cache", cache, "--task-file", task, "--layers", "1",
                   "--out", out])
    assert probed.exit_code == 0, probed.output
    assert [json.loads(line)["task"] for line in out.read_text().splitlines()] == ["custom:Toy"]
    base = tmp_path / "b.jsonl"
    ran = _run(["baseline", "--task-file", task, "--out", base])
    assert ran.exit_code == 0, ran.output
    assert json.loads(base.read_text().splitlines()[0])["task"] == "custom:Toy"


def test_encode_and_cache_verify_accept_a_task_file(tiny_bert_dir, tmp_path):
    task = _task(tmp_path / "toy", n=40)
    cache = tmp_path / "c.h5"
    made = _run(["encode", "--model", tiny_bert_dir, "--task-file", task, "--out", cache,
                 "--device", "cpu"])
    assert made.exit_code == 0, made.output
    verified = _run(["cache", "verify", cache, "--task-file", task])
    assert verified.exit_code == 0, verified.output
    both = _run(["encode", "--model", tiny_bert_dir, "--task-file", task, "--out", cache,
                 "--sentences", task])
    assert both.exit_code == 2 and "exactly one of --sentences" in both.output


def test_slurm_scripts_pass_the_task_file_on(toy, tmp_path):
    task, _ = toy
    ran = _run(["slurm", "org/model", "--task-file", task, "--out", tmp_path / "run",
                "--dry-run"])
    assert ran.exit_code == 0, ran.output
    for script in ("model.encode.sbatch", "model.merge.sbatch", "model.probe.sbatch"):
        text = (tmp_path / "run" / script).read_text()
        assert f"--task-file {task.resolve()}" in text, script


def test_probe_hint_for_missing_sentences_is_an_encode_command_that_works(tmp_path):
    """The hint names the task file, so encode (which takes --task-file) can resolve it."""
    task = _task(tmp_path / "toy")
    other = write_cache(tmp_path / "other.h5", ["una frase", "otra frase"],
                        toy_classification(2)[1])
    ran = _run(["probe", "--cache", other, "--task-file", task, "--out", tmp_path / "r.jsonl"])
    assert ran.exit_code == 1, ran.output
    assert f"--tasks custom:Toy --task-file {task.resolve()}" in ran.output
    assert "--data-dir" not in ran.output.split("add them with:")[1]


def test_the_missing_sentences_hint_repeats_the_caches_settings_and_works(tmp_path,
                                                                         tiny_bert_dir):
    """A cache made with non-default settings (--max-length, --dtype, --states, --pooling,
    --lowercase) and only some of a task's sentences: probe's hint is an encode command with
    those settings, which adds the rest (encode refuses other settings), and probe then
    runs."""
    import shlex

    task = _task(tmp_path / "toy")
    some = tmp_path / "some.txt"
    some.write_text("\n".join(toy_classification(120, informative=(1, 2))[0][:30]) + "\n",
                    encoding="utf-8")
    cache = tmp_path / "c.h5"
    made = _run(["encode", "--model", tiny_bert_dir, "--sentences", some, "--out", cache,
                 "--max-length", "16", "--dtype", "float32", "--states", "0,2",
                 "--pooling", "mean", "--lowercase", "--threads", "1"])
    assert made.exit_code == 0, made.output
    out = tmp_path / "r.jsonl"
    refused = _run(["probe", "--cache", cache, "--task-file", task, "--out", out])
    assert refused.exit_code == 1, refused.output
    hint = refused.output.split("add them with: ", 1)[1].split("\n")[0]
    words = shlex.split(hint)
    assert words[:2] == ["estratos", "encode"]
    for option in ("--max-length 16", "--dtype float32", "--states 0,2", "--pooling mean",
                   "--lowercase"):
        assert option in hint, hint
    added = _run([*words[1:], "--threads", "1"])
    assert added.exit_code == 0, added.output
    probed = _run(["probe", "--cache", cache, "--task-file", task, "--out", out])
    assert probed.exit_code == 0, probed.output


# ---- the same errors everywhere -------------------------------------------------------------

COMMANDS = {
    "encode": lambda out: ["encode", "--model", "m", "--out", out / "c.h5"],
    "probe": lambda out: ["probe", "--cache", out / "c.h5", "--out", out / "r.jsonl"],
    "baseline": lambda out: ["baseline", "--out", out / "b.jsonl"],
    "tasks list": lambda out: ["tasks", "list"],
    "tasks check": lambda out: ["tasks", "check"],
    "cache verify": lambda out: ["cache", "verify", out / "c.h5"],
    "slurm": lambda out: ["slurm", "org/model", "--out", out / "run", "--dry-run"],
    "demo": lambda out: ["demo", "--out", out / "demo"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_task_file_clashing_with_a_built_in_task_is_the_same_usage_error(command, tmp_path):
    clash = _task(tmp_path / "clash", name="TASS1", suite="es-senteval")
    ran = _run(COMMANDS[command](tmp_path) + ["--task-file", clash])
    assert ran.exit_code == 2, ran.output
    assert "custom task es-senteval:TASS1 has the id of a built-in task" in ran.output
    assert not (tmp_path / "demo").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_two_task_files_with_one_id_are_the_same_usage_error(command, tmp_path):
    first = _task(tmp_path / "a")
    second = _task(tmp_path / "b")
    ran = _run(COMMANDS[command](tmp_path) + ["--task-file", first, "--task-file", second])
    assert ran.exit_code == 2, ran.output
    assert "both define the task custom:Toy" in ran.output


@pytest.mark.parametrize("command", ["encode", "probe", "baseline", "tasks list", "slurm"])
def test_an_unknown_task_is_a_usage_error_like_any_option(command, tmp_path):
    """One convention (docs/contracts.md): option and selection errors exit 2."""
    ran = _run(COMMANDS[command](tmp_path) + (
        ["nosuchtask"] if command == "tasks list" else ["--tasks", "nosuchtask"]))
    assert ran.exit_code == 2, ran.output
    assert "unknown task 'nosuchtask'" in ran.output


def test_task_names_match_without_case_and_hints_stay_in_the_asked_suite():
    listed = _run(["tasks", "list", "tass1", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert [row["id"] for row in json.loads(listed.output)] == ["es-senteval:TASS1"]
    ran = _run(["tasks", "list", "es-senteval:TASS1,STS1"])
    assert ran.exit_code == 2
    assert "unknown task 'STS1' in es-senteval" in ran.output
    hint = ran.output.split("closest:")[1]
    assert "STS17" in hint and "STS16" not in hint  # STS16 is en-senteval's


# ---- option errors before torch -------------------------------------------------------------

#: (arguments, exit code, text of the error, whether the answer needs neither numpy nor the
#: tasks package: every option error that is a matter of syntax)
FAST = [
    (["probe", "--jobs", "0"], 2, "--jobs", True),
    (["probe", "--threads", "0"], 2, "--threads", True),
    (["probe", "--seeds", "x"], 2, "--seeds", True),
    (["probe", "--layers", "top"], 2, "--layers", True),
    (["probe", "--device", "gpu"], 2, "--device", True),
    (["probe", "--device", "mps"], 2, "use auto, cpu, cuda, cuda:N)", True),
    (["probe", "--classifier", "nope"], 2, "choose from senteval", False),
    (["probe", "--tasks", "nosuchtask"], 2, "unknown task", False),
    (["probe"], 1, "no such cache file", False),
    (["encode", "--device", "gpu"], 2, "--device", True),
    (["encode", "--threads", "0"], 2, "--threads", True),
    (["encode", "--batch-tokens", "0"], 2, "--batch-tokens", True),
    (["encode"], 2, "is not a model folder", True),  # the base's --model names no folder
    (["baseline", "--seeds", "-1"], 2, "--seeds", True),
    (["--help"], 0, "", True),
]


@pytest.mark.parametrize("args,code,needle,light", FAST,
                         ids=[" ".join(a) for a, _, _, _ in FAST])
def test_option_errors_answer_without_importing_torch(args, code, needle, light, tmp_path,
                                                     child_env):
    """The options are checked before torch or transformers is imported, and a syntax error
    (or ``--help``) before numpy and the tasks package too (checked on sys.modules in a fresh
    interpreter, not by timing)."""
    base = {"probe": ["--cache", tmp_path / "missing.h5", "--out", tmp_path / "r.jsonl",
                      "--tasks", "synthetic-es:Tense"],
            "encode": ["--model", tmp_path / "no-model", "--out", tmp_path / "c.h5",
                       "--sentences", tmp_path / "s.txt"],
            "baseline": ["--tasks", "synthetic-es:Tense", "--out", tmp_path / "b.jsonl"],
            "--help": []}
    (tmp_path / "s.txt").write_text("una frase\n", encoding="utf-8")
    argv = [str(a) for a in base[args[0]] + args[1:]]
    argv = [args[0]] + argv
    if "--tasks" in args[1:]:  # the case's own --tasks replaces the default one
        i = argv.index("--tasks")
        del argv[i:i + 2]
    code_text = ("import sys\nfrom estratos.cli import main\n"
                 "try:\n    main(sys.argv[1:])\nexcept SystemExit as exc:\n"
                 "    print('EXIT', exc.code)\n"
                 "print('HEAVY', sorted(m for m in ('torch', 'transformers') "
                 "if m in sys.modules))\n"
                 "print('NUMPY', sorted(m for m in ('numpy', 'estratos.tasks') "
                 "if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code_text, *argv], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120, env=child_env())
    assert f"EXIT {code}" in done.stdout, done.stdout + done.stderr
    assert needle in done.stderr, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout
    if light:
        assert "NUMPY []" in done.stdout, done.stdout
