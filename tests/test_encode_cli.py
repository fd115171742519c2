"""What a new user hit with `estratos encode`, each checked through the command line:
file modes, a second run on the same output without HDF5's lock, Ctrl-C, a model folder without
config.json, a cache that already holds everything, transformers' own progress bar, help."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from click.testing import CliRunner

from estratos.cache import open_cache
from estratos.cli import cli

REPO = Path(__file__).resolve().parents[1]
WORDS = "el la perro gato casa niño come corre lee grande muy con sin para".split()


def sentences_file(folder: Path, n: int, name: str = "s.txt") -> Path:
    import random

    rng = random.Random(n)
    path = folder / name
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14)))
                              + f" {i}." for i in range(n)) + "\n", encoding="utf-8")
    return path


def encode_args(model: Path, out: Path, src: Path, *extra: str) -> list:
    return ["encode", "--model", str(model), "--out", str(out), "--sentences", str(src),
            "--threads", "1", *extra]


@pytest.fixture
def umask():
    """Set the process umask for one test (restored after)."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda value: os.umask(value)
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- 1. permissions ----------------------------------------------------------------------
@pytest.mark.parametrize("mask,want", [(0o022, 0o644), (0o002, 0o664)])
def test_new_cache_respects_the_umask(tiny_bert_dir, tmp_path, umask, mask, want):
    umask(mask)
    out = tmp_path / "c.h5"
    res = CliRunner().invoke(cli, encode_args(tiny_bert_dir, out, sentences_file(tmp_path, 5)))
    assert res.exit_code == 0, res.output
    assert mode(out) == want


@pytest.mark.parametrize("keep", [0o644, 0o640])
def test_extended_cache_keeps_its_mode(tiny_bert_dir, tmp_path, umask, keep):
    umask(0o077)  # a stricter umask than the file's mode: the file's own mode still wins
    out = tmp_path / "c.h5"
    runner = CliRunner()
    assert runner.invoke(cli, encode_args(tiny_bert_dir, out, sentences_file(tmp_path, 5))
                         ).exit_code == 0
    os.chmod(out, keep)
    more = sentences_file(tmp_path, 9, "more.txt")
    res = runner.invoke(cli, encode_args(tiny_bert_dir, out, more))
    assert res.exit_code == 0, res.output
    with open_cache(out) as cache:
        assert cache.n_rows > 5
    assert mode(out) == keep


def test_resumed_partial_keeps_its_mode(tiny_bert_dir, tmp_path, umask):
    from estratos.cache.writer import CacheWriter

    umask(0o022)
    out = tmp_path / "c.h5"
    runner = CliRunner()
    assert runner.invoke(cli, encode_args(tiny_bert_dir, out, sentences_file(tmp_path, 5))
                         ).exit_code == 0
    os.chmod(out, 0o664)
    CacheWriter.extend_copy(out, tmp_path / "c.h5.partial").close()  # as a killed run leaves it
    assert mode(tmp_path / "c.h5.partial") == 0o664
    res = runner.invoke(cli, encode_args(tiny_bert_dir, out, sentences_file(tmp_path, 8, "m.txt")))
    assert res.exit_code == 0, res.output
    assert mode(out) == 0o664


# -- 2. a second run on the same output, HDF5's file lock off -------------------------------
HOLDER = """
import sys, time
from estratos.cache.session import open_for_writing
with open_for_writing(sys.argv[1]):
    print('ready', flush=True)
    time.sleep(120)
"""


def test_second_encode_on_the_same_output_fails_fast_without_hdf5_locking(tiny_bert_dir,
                                                                          tmp_path, child_env):
    out = tmp_path / "c.h5"
    src = sentences_file(tmp_path, 20)
    env = child_env(HDF5_USE_FILE_LOCKING="FALSE")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "ready"
        # the lock answers before the model loads: the run never reaches model-load (where
        # this fault point would kill it), whatever the machine's load
        res = subprocess.run([sys.executable, "-m", "estratos", *encode_args(tiny_bert_dir, out, src)],
                             capture_output=True, text=True, timeout=300,
                             env={**env, "ESTRATOS_FAULT": "model-load"})
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert res.returncode == 1, res.stderr
    assert "in use by another process" in res.stderr and f"pid {holder.pid}" in res.stderr
    assert "c.h5.lock" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists() and not (tmp_path / "c.h5.partial").exists()
    # the holder was killed: its lock went with it, the leftover file does not block
    assert (tmp_path / "c.h5.lock").exists()
    again = subprocess.run([sys.executable, "-m", "estratos", *encode_args(tiny_bert_dir, out, src)],
                           capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in tmp_path.glob("c.h5*")) == ["c.h5"]


# -- 3. Ctrl-C --------------------------------------------------------------------------
def test_ctrl_c_says_what_was_kept_and_how_to_resume(tiny_bert_dir, tmp_path, child_env,
                                                      sigint_default):
    from estratos.faultpoints import interrupt_marker

    out = tmp_path / "c.h5"
    src = sentences_file(tmp_path, 3000)
    cmd = [sys.executable, "-m", "estratos", "-vv",
           *encode_args(tiny_bert_dir, out, src, "--batch-tokens", "256", "--no-progress")]
    # a terminal's Ctrl-C (SIGINT to the process group) right after the second append's
    # n_done update: the same moment on a busy machine as on an idle one (a signal sent
    # when the parent reads a log line can arrive after the last batch)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=sigint_default,
                            env=child_env(ESTRATOS_FAULT="append-done:2:interrupt"))
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        interrupt_marker(proc.pid).unlink(missing_ok=True)  # its own group: pgid == pid
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "Aborted!" not in err
    m = re.search(r"Error: interrupted: (\S+) keeps (\d+) rows.*run the same command again",
                  err)
    assert m, err[-2000:]
    partial = Path(m.group(1))
    assert partial == tmp_path / "c.h5.partial" and partial.exists() and not out.exists()
    with h5py.File(partial, "r") as f:
        assert int(f.attrs["n_done"]) == int(m.group(2)) > 0
    res = CliRunner().invoke(cli, encode_args(tiny_bert_dir, out, src, "--batch-tokens", "256"))
    assert res.exit_code == 0, res.output
    assert f"{m.group(2)} resumed" in res.output
    assert sorted(p.name for p in tmp_path.glob("c.h5*")) == ["c.h5"]


# -- 6. a model folder without config.json --------------------------------------------------
def test_model_folder_without_config_json(tiny_bert_dir, tmp_path):
    import shutil

    parent = tmp_path / "models"
    (parent / "bert").mkdir(parents=True)
    for f in tiny_bert_dir.iterdir():
        shutil.copy(f, parent / "bert" / f.name)
    (parent / "vocab.txt").write_text("[PAD]\n[UNK]\n", encoding="utf-8")
    src = sentences_file(tmp_path, 3)
    runner = CliRunner()
    res = runner.invoke(cli, encode_args(parent, tmp_path / "c.h5", src))
    assert res.exit_code == 2
    assert f"{parent} has no config.json" in res.output
    assert f"inside it: {parent / 'bert'}" in res.output
    assert "sentencepiece" not in res.output.lower()
    (parent / "bert" / "config.json").unlink()
    res = runner.invoke(cli, encode_args(parent / "bert", tmp_path / "c.h5", src))
    assert res.exit_code == 2 and f"{parent / 'bert'} has no config.json" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "s.txt"]


# -- 9. nothing to encode: the model is not loaded ----------------------------------------
def test_all_cached_does_not_load_the_model(tiny_bert_dir, tmp_path, monkeypatch):
    import transformers

    out = tmp_path / "c.h5"
    src = sentences_file(tmp_path, 6)
    runner = CliRunner()
    assert runner.invoke(cli, encode_args(tiny_bert_dir, out, src)).exit_code == 0
    before = out.read_bytes()

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", refuse)
    res = runner.invoke(cli, encode_args(tiny_bert_dir, out, src))
    assert res.exit_code == 0, res.output
    assert "all 6 sentences already cached" in res.output
    assert out.read_bytes() == before
    # with something left to do, the model is loaded (so the check above can fail)
    res = runner.invoke(cli, encode_args(tiny_bert_dir, out, sentences_file(tmp_path, 7, "m.txt")))
    assert res.exit_code == 1 and "the model was loaded" in str(res.exception)


# -- 10. transformers' own progress bar follows --progress/--no-progress --------------------
@pytest.mark.parametrize("flag,shown", [("--no-progress", False), ("--progress", True)])
def test_transformers_progress_bar_follows_ours(tiny_bert_dir, tmp_path, flag, shown,
                                                child_env):
    res = subprocess.run([sys.executable, "-m", "estratos",
                          *encode_args(tiny_bert_dir, tmp_path / "c.h5",
                                       sentences_file(tmp_path, 4), flag)],
                         capture_output=True, text=True, env=child_env(), timeout=300)
    assert res.returncode == 0, res.stderr
    assert ("Loading weights" in res.stderr) == shown, res.stderr
    assert ("encode:" in res.stderr) == shown  # estratos's own bar


# -- 11. help ----------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["encode"], ["cache", "verify"]])
def test_help_names_the_data_dir_default(command):
    res = CliRunner().invoke(cli, [*command, "--help"])
    assert res.exit_code == 0 and "$ESTRATOS_DATA" in res.output


def test_task_inputs_read_beside_the_imports_fail_first_and_as_themselves(tmp_path,
                                                                          monkeypatch):
    """Task data is read in a helper process while encode imports the model's code: a
    wrong --data-dir still comes first (before the wrong --model), as one Error line with
    exit code 2, and nothing is written; a good one gives the same sentences as reading
    them in this process."""
    from estratos.encode import inputs

    monkeypatch.setattr("estratos.devices.available_cores", lambda: 4)
    out = tmp_path / "c.h5"
    result = CliRunner().invoke(cli, ["encode", "--model", str(tmp_path / "no-model"),
                                      "--tasks", "es-senteval:TASS1", "--data-dir",
                                      str(tmp_path / "nowhere"), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Error:" in result.output and "nowhere" in result.output
    assert "no-model" not in result.output and "Traceback" not in result.output
    assert not out.exists() and not list(tmp_path.glob("c.h5*"))
    build = CliRunner().invoke(cli, ["tasks", "build", "synthetic-es", "--out",
                                     str(tmp_path / "synth"), "--n-per-task", "200"])
    assert build.exit_code == 0, build.output
    alone = inputs.gather_sentences(None, "synthetic-es", [f"synthetic-es={tmp_path / 'synth'}"])
    for cores in (4, 16):  # three helper processes; nine, one per task
        monkeypatch.setattr("estratos.devices.available_cores", lambda cores=cores: cores)
        steps = []
        both = inputs.gather_sentences_meanwhile(
            [lambda: steps.append(1)], None, "synthetic-es",
            [f"synthetic-es={tmp_path / 'synth'}"])
        assert steps == [1]
        assert both == alone  # the same sentences in the same order
