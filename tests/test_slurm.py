"""`estratos slurm` without a scheduler: the scripts it writes, their quoting, the dependency
chain of submit.sh and of :func:`estratos.slurm.submit`, and every option error.

The same scripts run under a real slurmctld in tests/test_slurm_cluster.py.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.errors import OptionError
from estratos.slurm import model_slugs, plan_pipeline, submit, write_scripts
from estratos.slurm.plan import Resources
from estratos.tasks.synthetic import build_synthetic_es

TASKS = "synthetic-es:Tense,synthetic-es:Depth"


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    build_synthetic_es(out, n_per_task=200, tasks=["Tense", "Depth"])
    return out


def run_cli(args):
    return CliRunner().invoke(cli, ["slurm", *args])


def base_args(synth, out, *models):
    return [*(models or ("org/model-a",)), "--tasks", TASKS, "--data-dir",
            f"synthetic-es={synth}", "--out", str(out)]


def test_dry_run_writes_readable_scripts_and_submit_sh(synth, tmp_path):
    out = tmp_path / "run"
    res = run_cli(base_args(synth, out, "org/model-a", "other/model-b") + [
        "--encode-array", "4", "--probe-array", "3", "--gpus-per-task", "1",
        "--cpus-per-task", "8", "--time", "02:00:00", "--partition", "gpu",
        "--sbatch-arg=--account=proj", "--sbatch-arg=--comment=my run", "--seeds", "1111,1", "--layers", "0,2,avg",
        "--pooling", "mean", "--classifier", "lbfgs", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert f"bash {out / 'submit.sh'}" in res.output
    names = sorted(p.name for p in out.iterdir())
    assert names == ["logs", "model-a.encode.sbatch", "model-a.merge.sbatch",
                     "model-a.probe.sbatch", "model-b.encode.sbatch", "model-b.merge.sbatch",
                     "model-b.probe.sbatch", "report.sbatch", "submit.sh"]
    for name in names[1:]:
        mode = (out / name).stat().st_mode
        assert mode & stat.S_IXUSR, name
        subprocess.run(["bash", "-n", str(out / name)], check=True)  # valid bash
    encode = (out / "model-a.encode.sbatch").read_text()
    for line in ["#SBATCH --array=0-3", "#SBATCH --gres=gpu:1", "#SBATCH --cpus-per-task=8",
                 "#SBATCH --time=02:00:00", "#SBATCH --partition=gpu",
                 "#SBATCH --account=proj", '#SBATCH --comment="my run"',
                 "#SBATCH --job-name=estratos-encode-model-a",
                 f"#SBATCH --output={out}/logs/%x-%A_%a.out",
                 "export HDF5_USE_FILE_LOCKING=FALSE", "    --model org/model-a \\",
                 '    --shard "$SLURM_ARRAY_TASK_ID/4" \\', "    --threads 8 \\",
                 f"    --out {out}/model-a.h5"]:
        assert line in encode.splitlines(), line
    merge = (out / "model-a.merge.sbatch").read_text()
    assert "--gres" not in merge and "--array" not in merge and "--account=proj" in merge
    assert (f"cache merge \\\n      {out}/model-a.shard-*-of-4.h5 \\\n"
            f"      --out {out}/model-a.h5\n") in merge
    probe = (out / "model-b.probe.sbatch").read_text()
    for line in ["#SBATCH --array=0-2", '    --shard "$SLURM_ARRAY_TASK_ID/3" \\',
                 "    --layers 0,2,avg \\", "    --pooling mean \\", "    --seeds 1111,1 \\",
                 "    --classifier lbfgs \\", "    --jobs 8 \\", f"    --out {out}/model-b.jsonl"]:
        assert line in probe.splitlines(), line
    assert "--gres" not in probe
    report = (out / "report.sbatch").read_text()
    assert (f"    {out}/model-a.shard-*-of-3.jsonl \\\n    {out}/model-b.shard-*-of-3.jsonl \\\n"
            f"    --out {out}/report\n") in report
    submit_sh = (out / "submit.sh").read_text()
    assert f"job2=$(submit --dependency=afterok:$job1 {out}/model-a.merge.sbatch)" in submit_sh
    assert f"job3=$(submit --dependency=afterok:$job2 {out}/model-a.probe.sbatch)" in submit_sh
    assert f"job7=$(submit --dependency=afterok:$job3:$job6 {out}/report.sbatch)" in submit_sh


def test_single_jobs_write_the_final_files_directly(synth, tmp_path):
    plan = plan_pipeline(["m"], TASKS, [f"synthetic-es={synth}"], tmp_path)
    encode, merge, probe, report = (j.text for j in plan.jobs)
    assert "--array" not in encode + merge + probe and "--shard" not in encode + probe
    assert "cache merge" not in merge and f"cache verify \\\n    {tmp_path}/m.h5" in merge
    assert f"--out {tmp_path}/m.jsonl" in probe and f"    {tmp_path}/m.jsonl \\" in report


def echo_python(folder: Path):
    """A stand-in for the interpreter (in a folder with a blank) that logs its arguments,
    one list per line."""
    log = folder / "calls.txt"
    fake = folder / "bin dir" / "python"
    fake.parent.mkdir()
    code = f"import sys, json; open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')"
    fake.write_text(f"#!/bin/bash\nexec {shlex.quote(sys.executable)} -c {shlex.quote(code)} \"$@\"\n")
    fake.chmod(0o755)
    return fake, log


def broken_estratos(folder: Path) -> str:
    """A PATH whose first folder holds an `estratos` that fails: the scripts must not call it."""
    bin_dir = folder / "path-bin"
    bin_dir.mkdir()
    (bin_dir / "estratos").write_text("#!/bin/sh\necho 'estratos: command not found' >&2\nexit 127\n")
    (bin_dir / "estratos").chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_paths_and_values_are_quoted_for_bash(synth, tmp_path):
    """Every word reaches estratos intact: blanks, quotes and $ in folders and values; the
    scripts run the interpreter they were written with, whatever `estratos` PATH finds."""
    import json

    odd = tmp_path / "it's a $HOME (run)"
    data = tmp_path / "da ta"
    data.symlink_to(synth)
    model = tmp_path / "my model"
    model.mkdir()
    python, log = echo_python(tmp_path)
    plan = plan_pipeline([str(model)], TASKS, [f"synthetic-es={data}"], odd,
                         resources=Resources.build(encode_array=2, probe_array=2),
                         python=str(python))
    write_scripts(plan)
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="1", PATH=broken_estratos(tmp_path))
    for job in plan.jobs:
        assert not any(line.lstrip().startswith("estratos ") for line in job.text.splitlines())
        subprocess.run(["bash", str(plan.path(job.name))], env=env, check=True)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(call[:2] == ["-m", "estratos"] for call in calls)
    calls = [call[2:] for call in calls]
    assert calls[0] == ["encode", "--model", str(model), "--tasks", TASKS, "--data-dir",
                        f"synthetic-es={data}", "--shard", "1/2", "--out",
                        str(odd / "my-model.h5")]
    assert calls[1] == ["cache", "merge", str(odd / "my-model.shard-*-of-2.h5"),  # glob kept:
                        "--out", str(odd / "my-model.h5")]  # no shard files
    assert calls[2][:2] == ["cache", "verify"] and calls[3][0] == "probe"
    assert calls[3][calls[3].index("--shard") + 1] == "1/2"
    assert calls[4] == ["report", str(odd / "my-model.shard-*-of-2.jsonl"), "--out",
                        str(odd / "report")]


def test_the_python_must_be_an_absolute_path(synth, tmp_path):
    with pytest.raises(OptionError, match="python: 'python3' is not an absolute path"):
        plan_pipeline(["m"], TASKS, [f"synthetic-es={synth}"], tmp_path / "o", python="python3")
    plan = plan_pipeline(["m"], TASKS, [f"synthetic-es={synth}"], tmp_path / "o")
    assert f"PY={shlex.quote(sys.executable)}  #" in plan.jobs[0].text


@pytest.mark.parametrize("step, array", [("encode", True), ("merge", False)])
def test_a_failing_step_says_how_to_resubmit_and_the_rest_is_cancelled(synth, tmp_path, step,
                                                                         array):
    """The jobs after a failed one end (``--kill-on-invalid-dep=yes`` on every job that
    waits), and the failed job's log says which task failed and the command that resumes."""
    out = tmp_path / "o"
    plan = plan_pipeline(["m"], TASKS, [f"synthetic-es={synth}"], out,
                         resources=Resources.build(encode_array=2),
                         python=str(tmp_path / "no-such-python"))
    write_scripts(plan)
    for job in plan.jobs:
        assert ("#SBATCH --kill-on-invalid-dep=yes" in job.text.splitlines()) == bool(job.after)
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_JOB_ID="41", SLURM_JOB_ID="42")
    done = subprocess.run(["bash", str(out / f"m.{step}.sbatch")], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 127
    who = "array task 1 of job 41" if array else "job 42"
    assert (f"estratos: {who} (m.{step}.sbatch) failed with exit code 127; the jobs waiting "
            "for it are cancelled.\nFix the cause, then resubmit the chain (every step skips "
            f"the work already done):\n    bash {out}/submit.sh\n") in done.stderr


def test_model_slugs_are_file_names_and_unique():
    assert model_slugs(["dccuchile/bert-base-spanish-wwm-cased", "/data/m/", "a/m", "b/m",
                        "x/report", "..."]) == {
        "bert-base-spanish-wwm-cased": "dccuchile/bert-base-spanish-wwm-cased",
        "m": "/data/m/", "m-2": "a/m", "m-3": "b/m", "report-2": "x/report", "model": "..."}


@pytest.mark.parametrize("args, message", [
    ([], "MODEL: give at least one model"),
    (["--encode-array", "0"], "--encode-array: the array needs at least 1 task, got 0"),
    (["--probe-array", "-1"], "--probe-array: the array needs at least 1 task, got -1"),
    (["--gpus-per-task", "-1"], "--gpus-per-task: must be >= 0"),
    (["--cpus-per-task", "0"], "--cpus-per-task: must be >= 1"),
    (["--seeds", "x"], "--seeds: 'x' is not an integer seed"),
    (["--layers", "top"], "--layers: unknown layer spec 'top'"),
    (["--pooling", "max"], "'--pooling': 'max' is not one of 'cls', 'mean', 'last'"),
    (["--sbatch-arg", "account=x"], "--sbatch-arg: 'account=x' is not one sbatch option"),
    (["--sbatch-arg", '--comment=a "b"'], "--sbatch-arg: 'a \"b\"': an sbatch directive cannot"),
])
def test_bad_options_are_option_errors(synth, tmp_path, args, message):
    models = [] if not args else ["org/m"]
    rest = args if args else []
    res = run_cli([*models, "--tasks", TASKS, "--data-dir", f"synthetic-es={synth}",
                   "--out", str(tmp_path / "o"), "--dry-run", *rest])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert not (tmp_path / "o").exists()  # nothing written


def test_unknown_task_and_missing_data_are_named(synth, tmp_path):
    res = run_cli(["m", "--tasks", "synthetic-es:Nope", "--data-dir", f"synthetic-es={synth}",
                   "--out", str(tmp_path / "o"), "--dry-run"])
    assert res.exit_code == 2 and "Nope" in res.output
    res = run_cli(["m", "--tasks", TASKS, "--data-dir", f"synthetic-es={tmp_path / 'none'}",
                   "--out", str(tmp_path / "o"), "--dry-run"])
    assert res.exit_code == 2 and "--data-dir" in res.output and "no such folder" in res.output
    assert not (tmp_path / "o").exists()


def test_a_double_quote_in_the_folder_is_refused(synth, tmp_path):
    res = run_cli(base_args(synth, tmp_path / 'say "hi"') + ["--dry-run"])
    assert res.exit_code == 2 and "--out" in res.output and "double quote" in res.output


def test_without_sbatch_submitting_is_an_option_error(synth, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    res = run_cli(base_args(synth, tmp_path / "o"))
    assert res.exit_code == 2
    assert "sbatch" in res.output and "--dry-run" in res.output
    assert not (tmp_path / "o").exists()


def fake_scheduler(tmp_path: Path, refuse_call: int) -> Path:
    """sbatch that hands out ids 101, 102... and refuses its ``refuse_call``-th script;
    scancel that records what it was asked to cancel."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        "#!/bin/bash\n"
        f'echo "$@" >> {tmp_path}/sbatch.log\n'
        f"n=$(wc -l < {tmp_path}/sbatch.log)\n"
        f'if [ "$n" = {refuse_call} ]; then echo "sbatch: error: invalid partition" >&2; '
        "exit 1; fi\n"
        'echo "$((100 + n));cluster"\n')
    (bin_dir / "scancel").write_text(f'#!/bin/bash\necho "$@" >> {tmp_path}/scancel.log\n')
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    return bin_dir


def test_submit_chains_afterok_and_prints_progress(synth, tmp_path, monkeypatch):
    bin_dir = fake_scheduler(tmp_path, refuse_call=0)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    res = run_cli(base_args(synth, tmp_path / "o", "a/m1", "b/m2") + ["--encode-array", "2"])
    assert res.exit_code == 0, res.output
    calls = (tmp_path / "sbatch.log").read_text().splitlines()
    o = tmp_path / "o"
    assert calls == [f"--parsable {o}/m1.encode.sbatch",
                     f"--parsable --dependency=afterok:101 {o}/m1.merge.sbatch",
                     f"--parsable --dependency=afterok:102 {o}/m1.probe.sbatch",
                     f"--parsable {o}/m2.encode.sbatch",
                     f"--parsable --dependency=afterok:104 {o}/m2.merge.sbatch",
                     f"--parsable --dependency=afterok:105 {o}/m2.probe.sbatch",
                     f"--parsable --dependency=afterok:103:106 {o}/report.sbatch"]
    assert "progress: squeue --states=all --jobs=101,102,103,104,105,106,107" in res.output


def test_submit_sh_chains_the_same_way(synth, tmp_path):
    bin_dir = fake_scheduler(tmp_path, refuse_call=0)
    plan = plan_pipeline(["a/m1"], TASKS, [f"synthetic-es={synth}"], tmp_path / "o")
    write_scripts(plan)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", str(tmp_path / "o" / "submit.sh")], env=env,
                          capture_output=True, text=True, check=True)
    assert "progress: squeue --states=all --jobs=101,102,103,104" in done.stdout
    calls = (tmp_path / "sbatch.log").read_text().splitlines()
    assert calls[3] == f"--parsable --dependency=afterok:103 {tmp_path}/o/report.sbatch"


def test_a_refused_script_cancels_the_jobs_already_submitted(synth, tmp_path, monkeypatch):
    bin_dir = fake_scheduler(tmp_path, refuse_call=3)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    res = run_cli(base_args(synth, tmp_path / "o"))
    assert res.exit_code == 1
    assert "model-a.probe.sbatch: sbatch refused it: sbatch: error: invalid partition" in res.output
    assert "cancelled jobs 101, 102" in res.output
    assert (tmp_path / "scancel.log").read_text().split() == ["101", "102"]


def test_submit_needs_the_scripts_written(synth, tmp_path, monkeypatch):
    bin_dir = fake_scheduler(tmp_path, refuse_call=0)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    plan = plan_pipeline(["m"], TASKS, [f"synthetic-es={synth}"], tmp_path / "o")
    with pytest.raises(OptionError, match="write_scripts"):
        submit(plan)


def docs_examples() -> dict:
    """The fenced blocks of docs/cluster.md under ``<!-- cluster-example: NAME -->``."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "cluster.md").read_text()
    return {m.group(1): m.group(2) for m in re.finditer(
        r"<!-- cluster-example: (\S+) -->\n```bash\n(.*?)```\n", text, re.S)}


#: the interpreter the docs' scripts show (this test's own stands in for it)
DOCS_PYTHON = "/home/me/venv/bin/python"


def test_the_docs_show_what_the_command_writes(synth, tmp_path, monkeypatch):
    examples = docs_examples()
    command = shlex.split(examples.pop("command"))
    assert command[:2] == ["estratos", "slurm"] and "--dry-run" in command
    assert len(examples) == 5
    monkeypatch.setenv("HOME", str(tmp_path))  # the docs' ~ is /home/me
    tasks = "synthetic-es:Tense,synthetic-es:Depth"
    args = command[2:]
    args[args.index("--tasks") + 1] = tasks
    args[args.index("--data-dir") + 1] = f"synthetic-es={synth}"
    res = run_cli(args)
    assert res.exit_code == 0, res.output
    for name, shown in examples.items():
        written = (tmp_path / "runs" / "beto" / name).read_text()
        written = written.replace(f"--tasks {tasks}", "--tasks es-senteval,es-discoeval")
        written = written.replace(f"--data-dir synthetic-es={synth}", "--data-dir /home/me/data/es")
        written = written.replace(f"PY={shlex.quote(sys.executable)}", f"PY={DOCS_PYTHON}")
        assert written.replace(str(tmp_path), "/home/me") == shown, name


def test_scripts_are_executable_within_the_umask(synth, tmp_path):
    old = os.umask(0o027)
    try:
        write_scripts(plan_pipeline(["m"], TASKS, [f"synthetic-es={synth}"], tmp_path / "o"))
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "o").iterdir()
             if p.is_file()}
    assert set(modes.values()) == {0o750}, modes


def test_every_probe_and_encode_option_reaches_its_jobs(synth, tmp_path):
    """--features, --control, --mdl, --device reach the probe jobs (written by
    ProbeConfig.to_argv), --states and --prompt the encode jobs; the probe job's options,
    parsed by the probe command, give back the configuration the slurm command was given."""
    from estratos.cli import probe_command
    from estratos.probe.config import ProbeConfig

    out = tmp_path / "o"
    res = run_cli([*base_args(synth, out), "--dry-run", "--layers", "0,avg", "--seeds", "1,2",
                   "--features", "standardized", "--control", "control-task", "--mdl",
                   "--device", "cpu", "--states", "0,1", "--prompt", 'Dice: "{}"'])
    assert res.exit_code == 0, res.output
    encode = (out / "model-a.encode.sbatch").read_text()
    assert "--states 0,1" in encode and "--prompt 'Dice: \"{}\"'" in encode
    probe = (out / "model-a.probe.sbatch").read_text()
    words = shlex.split(probe.split('"$PY" -m estratos probe', 1)[1].replace("\\\n", " "))
    ctx = probe_command.make_context("probe", words)
    p = ctx.params
    got = ProbeConfig.build(layers=p["layers"], pooling=p["pooling"], seeds=p["seeds"],
                            classifier=p["classifier"], features=p["features"],
                            control=p["control"], mdl=p["mdl"], device=p["device"], jobs=1)
    want = ProbeConfig.build(layers="0,avg", seeds="1,2", features="standardized",
                             control="control-task", mdl=True, device="cpu", jobs=1)
    assert got == want
    assert got.to_argv() == want.to_argv()


def test_every_encode_option_reaches_the_encode_jobs(synth, tmp_path):
    """The options on what a cache holds reach the encode jobs (written by
    EncodeConfig.to_options); the job's words, parsed by the encode command, build the
    configuration the slurm command was given, for its model."""
    from estratos.cli import encode_command
    from estratos.encode.config import EncodeConfig

    out = tmp_path / "o"
    asked = {"dtype": "bfloat16", "max_length": 64, "batch_tokens": 4096, "lowercase": True,
             "model_dtype": "float32", "random_init": 3, "states": "every:2",
             "prompt": 'Dice: "{}"', "chat_template": True, "mean_first_token": "keep"}
    res = run_cli([*base_args(synth, out), "--dry-run", "--dtype", "bfloat16",
                   "--max-length", "64", "--batch-tokens", "4096", "--lowercase",
                   "--model-dtype", "float32", "--random-init", "3", "--states", "every:2",
                   "--prompt", 'Dice: "{}"', "--chat-template", "--mean-first-token", "keep"])
    assert res.exit_code == 0, res.output
    script = (out / "model-a.encode.sbatch").read_text()
    words = shlex.split(script.split('"$PY" -m estratos encode', 1)[1].replace("\\\n", " "))
    p = encode_command.make_context("encode", words).params
    got = EncodeConfig.build(model=p["model"], **{k: p[k] for k in asked})
    assert got == EncodeConfig.build(model=p["model"], **asked)
    assert got.to_argv()[2:] == EncodeConfig.build(model="x", **asked).to_argv()[2:]


@pytest.mark.parametrize("args, message", [
    (["--features", "scaled"], "'--features': 'scaled' is not one of"),
    (["--states", "every:0"], "--states"),
    (["--prompt", "no placeholder"], "--prompt"),
    (["--mdl", "--classifier", "lbfgs"], "--mdl: the lbfgs classifier cannot"),
    (["--device", "gpu"], "--device"),
    (["--max-length", "1"], "--max-length: must be an integer >= 2"),
    (["--batch-tokens", "0"], "--batch-tokens"),
])
def test_bad_probe_and_encode_options_are_refused_before_writing(synth, tmp_path, args,
                                                                  message):
    res = run_cli([*base_args(synth, tmp_path / "o"), "--dry-run", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert not (tmp_path / "o").exists()
