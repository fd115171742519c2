"""`estratos slurm` under a real scheduler: slurmctld + slurmd on this machine
(tests/slurmcluster.py), skipped when SLURM is not installed.

The pipeline (encode array of 2 -> merge + verify -> probe array -> report) must give the
report the same commands give without SLURM, and a killed encode array task, resubmitted
alone with ``sbatch --array=K``, must resume and let the dependency chain finish.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Tuple

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.tasks.synthetic import build_synthetic_es
from slurmcluster import LocalSlurm, missing_binaries

pytestmark = pytest.mark.slurm

TASKS = "synthetic-es:Tense,synthetic-es:Depth"
PROBE_ARRAY = "2"
ENDED_BADLY = {"FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
               "DEADLINE", "PREEMPTED"}


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A one-node cluster for the whole session (started once, stopped by pid at the end)."""
    missing = missing_binaries()
    if missing:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} not found): "
                    "apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("the one-node test cluster runs slurmd as root (SlurmdUser=root)")
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except RuntimeError:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch) -> LocalSlurm:
    """This process's sbatch/squeue talk to the test cluster; the jobs inherit the variable."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    for name in [n for n in os.environ if n.startswith("SLURM_") and n != "SLURM_CONF"]:
        monkeypatch.delenv(name)
    return slurm_cluster


def invoke(args: List[str]) -> str:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, f"estratos {' '.join(args)}\n{res.output}\n{res.exception!r}"
    return res.output


@pytest.fixture(scope="module")
def workload(tmp_path_factory, tiny_bert_dir):
    """Two small tasks, the tiny model, and the report of the same pipeline without SLURM."""
    root = tmp_path_factory.mktemp("slurm-work")
    build_synthetic_es(root / "synth", n_per_task=200, tasks=["Tense", "Depth"])
    data_dir = f"synthetic-es={root / 'synth'}"
    common = ["--tasks", TASKS, "--data-dir", data_dir]
    invoke(["encode", "--model", str(tiny_bert_dir), *common, "--threads", "1",
            "--out", str(root / "local.h5")])
    invoke(["probe", "--cache", str(root / "local.h5"), *common, "--layers", "all",
            "--pooling", "cls", "--seeds", "1", "--classifier", "lbfgs",
            "--out", str(root / "local.jsonl")])
    invoke(["report", str(root / "local.jsonl"), "--out", str(root / "local-report")])
    return SimpleNamespace(root=root, model=tiny_bert_dir, data_dir=data_dir,
                           reference=root / "local-report")


def slurm_args(w, out: Path, *extra: str) -> List[str]:
    return ["slurm", str(w.model), "--tasks", TASKS, "--data-dir", w.data_dir, "--out", str(out),
            "--encode-array", "2", "--probe-array", PROBE_ARRAY, "--seeds", "1",
            "--classifier", "lbfgs", "--cpus-per-task", "1", *extra]


def assert_same_report(got: Path, want: Path) -> None:
    """Equal tables; only the list of results files read differs."""
    for name in ("groups.csv", "datasets.csv"):
        assert (got / name).read_text() == (want / name).read_text(), name
    md = [re.sub(r"^Results: .*$", "Results: -", (d / "report.md").read_text(), flags=re.M)
          for d in (got, want)]
    assert md[0] == md[1]
    docs = [json.loads((d / "report.json").read_text()) for d in (got, want)]
    for doc in docs:
        doc.pop("sources")
    assert docs[0] == docs[1]


def job_logs(out: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                     for p in sorted((out / "logs").glob("*.out")))


def finished(job_id: str, out: Path, allowed_failures=()):
    """``done`` for :meth:`LocalSlurm.wait_for`: ``job_id`` completed; any other job that
    ended badly (except ``allowed_failures``) fails the test with the job logs."""
    def done(states: Dict[str, Tuple[str, str]]) -> bool:
        for job, (state, reason) in states.items():
            if job in allowed_failures:
                continue
            if state in ENDED_BADLY or reason == "DependencyNeverSatisfied":
                raise AssertionError(f"job {job}: {state} ({reason})\n{states}\n{job_logs(out)}")
        return states.get(job_id, ("", ""))[0] == "COMPLETED"
    return done


def test_the_cluster_runs_an_array(slurm_cluster, tmp_path):
    script = tmp_path / "array.sbatch"
    script.write_text("#!/bin/bash\n"
                      f"#SBATCH --output={tmp_path}/task-%a.out\n"
                      "echo $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT\n")
    slurm_cluster.run("sbatch", "--wait", "--array=0-2", str(script))
    assert sorted(p.read_text() for p in tmp_path.glob("task-*.out")) == ["0/3\n", "1/3\n", "2/3\n"]


def test_pipeline_report_equals_the_run_without_slurm(slurm_env, workload, tmp_path):
    out = tmp_path / "run dir"  # a blank in the path: every script must quote it
    printed = invoke(slurm_args(workload, out, "--sbatch-arg=--comment=estratos test"))
    progress = re.search(r"^progress: (squeue .*)$", printed, re.M).group(1)
    ids = re.search(r"--jobs=([\d,]+)", progress).group(1).split(",")
    assert len(ids) == 4, printed  # encode array, merge, probe array, report
    slurm_env.wait_for(ids, finished(ids[-1], out))
    states = slurm_env.job_states(ids)
    assert {j for j in states if j.startswith(f"{ids[0]}_")} == {f"{ids[0]}_0", f"{ids[0]}_1"}
    caches = [p.name for p in out.glob("*.shard-*.h5") if not p.name.endswith(".predictions.h5")]
    assert sorted(caches) == [
        f"{workload.model.name}.shard-0-of-2.h5", f"{workload.model.name}.shard-1-of-2.h5"]
    assert sorted(p.name for p in out.glob("*.jsonl")) == [
        f"{workload.model.name}.shard-{i}-of-{PROBE_ARRAY}.jsonl" for i in range(int(PROBE_ARRAY))]
    assert_same_report(out / "report", workload.reference)
    # the printed progress command works as printed and lists every job
    shown = subprocess.run(progress.split(), env=slurm_env.env, capture_output=True,
                           text=True, check=True).stdout
    assert all(job_id in shown for job_id in ids)


def test_a_killed_array_task_resubmitted_alone_completes_the_chain(slurm_env, workload,
                                                                    tmp_path):
    out = tmp_path / "run"
    invoke(slurm_args(workload, out, "--dry-run"))
    slug = workload.model.name
    encode = out / f"{slug}.encode.sbatch"
    original = encode.read_text()
    # array task 1 kills itself (SIGKILL) at its first batch: a .partial is left behind
    encode.write_text(original.replace(
        "export HDF5_USE_FILE_LOCKING=FALSE\n",
        "export HDF5_USE_FILE_LOCKING=FALSE\n"
        'if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then export ESTRATOS_FAULT=batch; fi\n'))
    submitted = subprocess.run(["bash", str(out / "submit.sh")], env=slurm_env.env,
                               capture_output=True, text=True, check=True).stdout
    ids = re.search(r"--jobs=([\d,]+)", submitted).group(1).split(",")
    encode_id, merge_id, report_id = ids[0], ids[1], ids[-1]

    def merge_stuck(states):
        return (states.get(f"{encode_id}_1", ("",))[0] == "FAILED"
                and states.get(merge_id, ("", ""))[1] == "DependencyNeverSatisfied")
    slurm_env.wait_for(ids, merge_stuck)
    assert (out / f"{slug}.shard-1-of-2.h5.partial").exists()

    encode.write_text(original)  # the cause is fixed; rerun task 1 alone, as docs/cluster.md says
    rerun = slurm_env.run("sbatch", "--parsable", "--array=1", str(encode)).stdout.strip()
    slurm_env.run("scontrol", "update", f"JobId={merge_id}", f"Dependency=afterok:{rerun}")
    slurm_env.wait_for(ids + [rerun], finished(report_id, out, allowed_failures={f"{encode_id}_1"}))
    assert not (out / f"{slug}.shard-1-of-2.h5.partial").exists()
    assert "shard 1/2" in (out / "logs" / f"estratos-encode-{slug}-{rerun}_1.out").read_text()
    assert_same_report(out / "report", workload.reference)
