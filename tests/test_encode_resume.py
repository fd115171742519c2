"""Crash safety: SIGKILL the encoder mid-run, rerun, and get exactly an uninterrupted run's cache."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

from estratos.cache import open_cache
from estratos.encode import encode_sentences
from tests.test_encode import make_sentences, single_thread  # noqa: F401 (autouse)

BATCH_TOKENS = 256


def encode_cmd(model_dir, out, sentences_file):
    return [sys.executable, "-m", "estratos", "-vv", "encode", "--model", str(model_dir),
            "--out", str(out), "--sentences", str(sentences_file),
            "--batch-tokens", str(BATCH_TOKENS), "--no-progress"]


def kill_after_first_flush(cmd, cwd, env) -> int:
    """Start ``cmd``, SIGKILL it once it has flushed rows; return the n_done it reported."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    try:
        for line in proc.stderr:
            m = re.search(r"n_done=(\d+)", line)
            if m:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
                return int(m.group(1))
        pytest.fail(f"encoder ended (rc={proc.wait()}) before writing any block")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    raise AssertionError("unreachable")


def rows(path):
    with h5py.File(path, "r") as f:
        return {name: f[name][:] for name in ("keys", "n_tokens", "truncated",
                                              "vectors/cls", "vectors/mean")}, dict(f.attrs)


def assert_same_rows(a, b):
    ra, _ = rows(a)
    rb, _ = rows(b)
    for name in ra:
        np.testing.assert_array_equal(ra[name], rb[name], err_msg=name)


def test_sigkill_then_rerun_equals_uninterrupted_run(tiny_bert_dir, tmp_path, child_env):
    sentences = make_sentences(3000, seed=7, max_words=20)
    src = tmp_path / "s.txt"
    src.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    out = tmp_path / "killed.h5"

    reported = kill_after_first_flush(encode_cmd(tiny_bert_dir, out, src), tmp_path, child_env())
    partial = tmp_path / "killed.h5.partial"
    assert partial.exists() and not out.exists()
    with h5py.File(partial, "r") as f:
        n_done = int(f.attrs["n_done"])
        assert not f.attrs["complete"]
    assert 0 < reported <= n_done < len(set(sentences))

    resumed = encode_sentences(sentences, str(tiny_bert_dir), out, batch_tokens=BATCH_TOKENS)
    assert resumed.n_resumed == n_done
    assert resumed.n_encoded == len(set(sentences)) - n_done
    assert out.exists() and not partial.exists()

    clean = tmp_path / "clean.h5"
    encode_sentences(sentences, str(tiny_bert_dir), clean, batch_tokens=BATCH_TOKENS)
    assert_same_rows(out, clean)
    with open_cache(out) as c:
        assert c.n_rows == len(set(sentences))


def test_sigkill_while_adding_keeps_the_old_cache_valid(tiny_bert_dir, tmp_path, child_env):
    first = make_sentences(50, seed=8)
    more = make_sentences(3000, seed=9, max_words=20)
    out = tmp_path / "c.h5"
    encode_sentences(first, str(tiny_bert_dir), out, batch_tokens=BATCH_TOKENS)
    before = out.read_bytes()
    src = tmp_path / "s.txt"
    src.write_text("\n".join(first + more) + "\n", encoding="utf-8")

    kill_after_first_flush(encode_cmd(tiny_bert_dir, out, src), tmp_path, child_env())
    assert out.read_bytes() == before  # the complete cache is untouched until the final rename
    with open_cache(out) as c:
        assert c.n_rows == len(set(first))
    assert (tmp_path / "c.h5.partial").exists()

    done = encode_sentences(first + more, str(tiny_bert_dir), out, batch_tokens=BATCH_TOKENS)
    assert done.n_resumed > 0 and done.n_rows == len(set(first) | set(more))
    clean = tmp_path / "clean.h5"
    encode_sentences(first, str(tiny_bert_dir), clean, batch_tokens=BATCH_TOKENS)
    encode_sentences(first + more, str(tiny_bert_dir), clean, batch_tokens=BATCH_TOKENS)
    assert_same_rows(out, clean)
