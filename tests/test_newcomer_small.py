"""What a newcomer met in the first hour: the small ones, each through the command line."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from estratos.cli import cli
from estratos.encode.summary import EncodeSummary
from estratos.tasks.synthetic import build_synthetic_es

REPO = Path(__file__).resolve().parents[1]


def _invoke(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.output


def test_a_bare_group_points_to_its_suite():
    code, out = _invoke("tasks", "list", "SC")
    assert code == 2, out
    assert "unknown task 'SC': SC is a group; select it with its suite: es-senteval:SC" in out
    assert "SQC" not in out
    code, out = _invoke("tasks", "list", "lpt")
    assert code == 2, out
    assert "'lpt': LPT is a group; select it with its suite: es-senteval:LPT, en-senteval:LPT " \
           "or synthetic-es:LPT" in out


def test_a_missing_task_says_why(monkeypatch, tmp_path):
    monkeypatch.delenv("ESTRATOS_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out = _invoke("tasks", "list", "TASS1,MC")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[1].endswith("missing *1") and lines[2].endswith("missing *1")
    assert "*1 --data-dir: no data folder for suite 'es-senteval'; pass --data-dir DIR" in out


def test_the_slurm_hint_quotes_a_path_with_a_space(tmp_path):
    synth = tmp_path / "synth"
    build_synthetic_es(synth, n_per_task=200, tasks=["Tense"])
    out = tmp_path / "my runs"
    code, text = _invoke("slurm", "org/model-a", "--tasks", "synthetic-es:Tense", "--data-dir",
                         f"synthetic-es={synth}", "--out", out, "--dry-run")
    assert code == 0, text
    assert f"submit them with: bash {shlex.quote(str(out / 'submit.sh'))}" in text
    assert "'" in shlex.quote(str(out / "submit.sh"))


def test_bench_tasks_takes_help_and_names_a_wrong_folder(tmp_path):
    script = str(REPO / "bench" / "bench_tasks.py")
    done = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                          check=False,
                          timeout=120)
    assert done.returncode == 0 and "usage: bench_tasks.py" in done.stdout, done.stderr
    done = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True,
                          check=False,
                          text=True, timeout=120)
    assert done.returncode == 2 and "no senteval/ folder here" in done.stderr


def test_a_control_on_one_cosine_task_reads_well(tmp_path):
    from estratos.errors import OptionError
    from estratos.probe.grid.runner import _trained_only
    from estratos.tasks import get_spec

    try:
        _trained_only([get_spec("es-senteval:STS14")], "--control", "has no control")
    except OptionError as exc:
        assert ("--control: no selected task trains a probe (es-senteval:STS14: scored by an "
                "untrained cosine, which has no control)") in exc.cli_text()
    else:
        raise AssertionError("a cosine task alone has no control")


def test_encode_rate_leaves_out_the_model_load():
    summary = EncodeSummary("c.h5", 100, 100, 100, 0, 0, 100, 0, 100, 128, 20.0,
                            encode_seconds=4.0)
    assert summary.sentences_per_second == 25.0
    assert "100 encoded in 20.0s (25.0 sentences/s over 4.0s of encoding" \
        in summary.describe()
    nothing = EncodeSummary("c.h5", 100, 100, 100, 100, 0, 0, 0, 100, 128, 3.0)
    assert nothing.sentences_per_second is None and "sentences/s" not in nothing.describe()


FAST_BATCHER = '''
import numpy as np

def batcher(params, batch):
    out = np.zeros((len(batch), 3, 4), dtype=np.float32)
    for i, words in enumerate(batch):
        out[i, :, 0] = len(words)
    return out
'''


def test_encode_takes_the_tasks_and_the_task_file(tmp_path):
    # --task-file "also" encodes its task's sentences when --tasks names another
    from estratos.cache import open_cache
    from estratos.tasks import DataDirs, load_task, load_task_file, select_tasks

    (tmp_path / "fast.py").write_text(FAST_BATCHER, encoding="utf-8")
    synth = tmp_path / "synth"
    build_synthetic_es(synth, n_per_task=200, tasks=["Tense"])
    from probe_toys import write_toy_task

    rows = [("pos" if i % 2 else "neg", f"una frase propia número {i}") for i in range(40)]
    toml = write_toy_task(tmp_path / "custom", {"train": rows[:24], "dev": rows[24:32],
                                                "test": rows[32:]})
    cache = tmp_path / "c.h5"
    code, out = _invoke("encode", "--encoder", f"{tmp_path / 'fast.py'}:batcher", "--tasks",
                        "synthetic-es:Tense", "--data-dir", f"synthetic-es={synth}",
                        "--task-file", toml, "--out", cache)
    assert code == 0, out
    custom = load_task(load_task_file(toml), DataDirs.parse([]))
    tense = load_task(select_tasks("synthetic-es:Tense")[0],
                      DataDirs.parse([f"synthetic-es={synth}"]))
    with open_cache(cache) as reader:
        assert reader.n_rows == len(set(custom.sentences) | set(tense.sentences))


def test_python_api_errors_name_the_parameter_and_the_cli_names_the_option(tmp_path):
    """The same bad value: a Python caller reads the function's parameter (``jobs``,
    ``n_per_task``), the command line the option it typed (``--jobs``, ``--n-per-task``)."""
    import pytest
    from click.testing import CliRunner

    from estratos.cli import cli
    from estratos.errors import OptionError
    from estratos.probe.config import ProbeConfig
    from estratos.tasks.synthetic import build_synthetic_es

    with pytest.raises(OptionError) as info:
        ProbeConfig.build(jobs=0)
    assert str(info.value).startswith("jobs: ") and "--jobs" not in str(info.value)
    assert info.value.cli_text().startswith("--jobs: ")
    with pytest.raises(OptionError, match=r"^n_per_task"):
        build_synthetic_es(tmp_path / "s", n_per_task=10)
    res = CliRunner().invoke(cli, ["probe", "--cache", str(tmp_path / "c.h5"), "--tasks", "x",
                                   "--out", str(tmp_path / "r.jsonl"), "--jobs", "0"])
    assert res.exit_code == 2 and "Error: --jobs: " in res.output
    res = CliRunner().invoke(cli, ["tasks", "build", "synthetic-es", "--out", str(tmp_path / "t"),
                                   "--n-per-task", "10"])
    assert res.exit_code == 2 and "--n-per-task" in res.output
