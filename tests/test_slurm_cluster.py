"""`estratos slurm` under a real scheduler: slurmctld + slurmd on this machine
(tests/slurmcluster.py), skipped when SLURM is not installed.

The pipeline (encode array of 2 -> merge + verify -> probe array -> report) must give the
report the same commands give without SLURM; a killed encode array task must end the chain
(its dependents cancelled, nothing left in squeue), and resubmitting as its log says must
resume it and finish the chain. The jobs must not depend on the PATH they run with. A
chain with ``--features standardized --control control-task --mdl`` must give the cells of
``estratos probe`` run locally with those options.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Tuple

import pytest
from click.testing import CliRunner
from slurmcluster import LocalSlurm, missing_binaries

from estratos.cli import cli
from estratos.tasks.synthetic import build_synthetic_es

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


def slurm_args(w, out: Path, *extra: str, classifier: str = "lbfgs") -> List[str]:
    return ["slurm", str(w.model), "--tasks", TASKS, "--data-dir", w.data_dir, "--out", str(out),
            "--encode-array", "2", "--probe-array", PROBE_ARRAY, "--seeds", "1",
            "--classifier", classifier, "--cpus-per-task", "1", *extra]


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


#: probe options beyond the plain cells: standardized features, control-task cells (every
#: cell of the run is one) and MDL's online code lengths (MDL needs the senteval classifier)
CONTROL_MDL = ["--features", "standardized", "--control", "control-task", "--mdl"]
#: what a results line records about the run rather than the cell: timing, the clock, the
#: cache file it read (the chain's merged cache, not the local one), the machine
RUN_FIELDS = ("seconds", "created", "cache", "device")


def cells(paths) -> Dict[tuple, dict]:
    """Each cell of the results files (key -> its line, less :data:`RUN_FIELDS`)."""
    from estratos.results.reader import read_results

    out = {}
    for record in read_results(paths):
        line = record.to_json()
        for field in RUN_FIELDS:
            line.pop(field, None)
        out[record.key] = line
    return out


def test_a_chain_with_controls_and_mdl_gives_the_cells_of_the_local_run(slurm_env, workload,
                                                                        tmp_path):
    """``--features standardized --control control-task --mdl`` reach every probe array
    task: the chain's results hold the cells of ``estratos probe`` run here with the same
    options on the same model (its control cells, MDL code lengths included), with the same
    keys and the same scores."""
    local = tmp_path / "local.jsonl"
    invoke(["probe", "--cache", str(workload.root / "local.h5"), "--tasks", TASKS,
            "--data-dir", workload.data_dir, "--layers", "all", "--seeds", "1",
            "--classifier", "senteval", *CONTROL_MDL, "--out", str(local)])
    want = cells([local])
    assert {line["control"]["kind"] for line in want.values()} == {"control-task"}
    assert all(line.get("mdl") for line in want.values())
    assert {line["features"] for line in want.values()} == {"standardized"}

    out = tmp_path / "chain"
    printed = invoke(slurm_args(workload, out, *CONTROL_MDL, classifier="senteval"))
    ids = re.search(r"--jobs=([\d,]+)", printed).group(1).split(",")
    probe_script = (out / f"{workload.model.name}.probe.sbatch").read_text()
    for option in ("--features standardized", "--control control-task", "--mdl"):
        assert option in probe_script, probe_script
    slurm_env.wait_for(ids, finished(ids[-1], out))
    got = cells(sorted(out.glob("*.shard-*.jsonl")))
    assert sorted(got, key=repr) == sorted(want, key=repr)
    for key, line in want.items():
        assert got[key] == line, key


def ended(states: Dict[str, Tuple[str, str]]) -> bool:
    """Every job and array task listed has ended (nothing pending or running)."""
    return bool(states) and all(state in ENDED_BADLY | {"COMPLETED"}
                                for state, _ in states.values())


def test_a_failed_step_ends_the_chain_and_its_log_says_how_to_resume(slurm_env, workload,
                                                                    tmp_path, monkeypatch):
    """Submitted where `estratos` on PATH is broken (a venv not activated): the jobs still run
    the interpreter that wrote them. Encode array task 1 kills itself (SIGKILL) at its first
    batch: the merge, probe and report jobs are cancelled (the chain ends, squeue empties),
    the task's log says to resubmit with submit.sh, and doing so resumes the task and gives
    the report of the same pipeline run without SLURM."""
    out = tmp_path / "run"
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "estratos").write_text("#!/bin/sh\necho 'estratos: command not found' >&2\n"
                                     "exit 127\n")
    (broken / "estratos").chmod(0o755)
    monkeypatch.setenv("PATH", f"{broken}{os.pathsep}{os.environ['PATH']}")
    invoke(slurm_args(workload, out, "--dry-run"))
    slug = workload.model.name
    encode = out / f"{slug}.encode.sbatch"
    original = encode.read_text()
    encode.write_text(original.replace(
        "export HDF5_USE_FILE_LOCKING=FALSE\n",
        "export HDF5_USE_FILE_LOCKING=FALSE\n"
        'if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then export ESTRATOS_FAULT=batch; fi\n'))
    submitted = subprocess.run(["bash", str(out / "submit.sh")], env=slurm_env.env,
                               capture_output=True, text=True, check=True).stdout
    ids = re.search(r"--jobs=([\d,]+)", submitted).group(1).split(",")
    encode_id = ids[0]
    states = slurm_env.wait_for(ids, ended)
    assert states[f"{encode_id}_0"][0] == "COMPLETED", (states, job_logs(out))
    assert states[f"{encode_id}_1"][0] == "FAILED", (states, job_logs(out))
    after = {job: state for job, (state, _) in states.items() if job.split("_")[0] != encode_id}
    assert {job.split("_")[0] for job in after} == set(ids[1:]), states  # merge, probe, report
    assert set(after.values()) == {"CANCELLED"}, states
    pending = slurm_env.run("squeue", "--noheader", f"--jobs={','.join(ids)}").stdout
    assert pending.strip() == ""
    assert (out / f"{slug}.shard-1-of-2.h5.partial").exists()
    failed_log = (out / "logs" / f"estratos-encode-{slug}-{encode_id}_1.out").read_text()
    assert (f"estratos: array task 1 of job {encode_id} ({slug}.encode.sbatch) failed with exit "
            "code 137; the jobs waiting for it are cancelled.") in failed_log
    [resume] = re.findall(r"^    (bash .*)$", failed_log, re.M)

    encode.write_text(original)  # the cause is fixed; resubmit as the log says
    resubmitted = subprocess.run(shlex.split(resume), env=slurm_env.env, capture_output=True,
                                 text=True, check=True).stdout
    again = re.search(r"--jobs=([\d,]+)", resubmitted).group(1).split(",")
    slurm_env.wait_for(again, finished(again[-1], out))
    assert not (out / f"{slug}.shard-1-of-2.h5.partial").exists()
    resumed = (out / "logs" / f"estratos-encode-{slug}-{again[0]}_1.out").read_text()
    assert "shard 1/2" in resumed and "resumed" in resumed
    assert "already cached" in (out / "logs" / f"estratos-encode-{slug}-{again[0]}_0.out").read_text()
    assert_same_report(out / "report", workload.reference)


#: a SentEval-style batcher of three states that reads only the words (for ``--encoder``)
BATCHER = '''
import numpy as np

def batcher(params, batch):
    out = np.zeros((len(batch), 3, 5), dtype=np.float32)
    for i, words in enumerate(batch):
        codes = np.frombuffer(" ".join(words).encode("utf-8"), dtype=np.uint8).astype(np.float32)
        for state in range(3):
            out[i, state] = [codes.sum() % 89, len(words), codes[0] * state, codes[-1], state]
    return out
'''


@pytest.fixture(scope="module")
def other_sources(tmp_path_factory):
    """A tiny decoder-only model (GPT-2, no BOS) and a batcher file."""
    from test_encode_models import build_model, sentences
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("sources")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.train_from_iterator(sentences(300, seed=1), trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(root / "tokenizer.json"))
    decoder = build_model(root / "tokenizer.json", "gpt2", root / "gpt2")
    (root / "wordenc.py").write_text(BATCHER, encoding="utf-8")
    return SimpleNamespace(decoder=decoder, batcher=f"{root / 'wordenc.py'}:batcher")


@pytest.mark.parametrize("source", ["decoder", "batcher"])
def test_a_decoder_read_at_its_last_token_and_a_batcher_give_the_cells_of_the_local_run(
        slurm_env, workload, other_sources, tmp_path, source):
    """``estratos slurm DECODER --pooling last`` (the encode jobs store last, which the probe
    jobs read) and ``estratos slurm --encoder FILE:FUNC`` (the batcher runs as the model of
    every job) give the cells of encode + probe run here with the same options."""
    common = ["--tasks", TASKS, "--data-dir", workload.data_dir]
    if source == "decoder":
        model, chain_args = str(other_sources.decoder), [str(other_sources.decoder)]
        encode_args, probe_args = ["--model", model], ["--pooling", "last"]
    else:
        model, chain_args = other_sources.batcher, ["--encoder", other_sources.batcher]
        encode_args, probe_args = ["--encoder", model], []
    local = tmp_path / "local"
    invoke(["encode", *encode_args, *common, "--threads", "1", "--out", f"{local}.h5"])
    invoke(["probe", "--cache", f"{local}.h5", *common, "--seeds", "1", "--classifier",
            "lbfgs", *probe_args, "--out", f"{local}.jsonl"])
    want = cells([f"{local}.jsonl"])
    out = tmp_path / "chain"
    printed = invoke(["slurm", *chain_args, *common, "--out", str(out), "--encode-array", "2",
                      "--probe-array", "2", "--seeds", "1", "--classifier", "lbfgs",
                      "--cpus-per-task", "1", *probe_args])
    ids = re.search(r"--jobs=([\d,]+)", printed).group(1).split(",")
    slurm_env.wait_for(ids, finished(ids[-1], out))
    got = cells(sorted(out.glob("*.shard-*.jsonl")))
    assert want and sorted(got, key=repr) == sorted(want, key=repr)
    for key, line in want.items():
        assert got[key] == line, key
    if source == "decoder":
        assert {line["pooling"] for line in got.values()} == {"last"}
