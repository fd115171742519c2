"""Say the cost before paying it and what a resumed run reports, all through the command
line.

- encode prints the cache's expected size before writing; it is within 2 % of the file;
- too little free space stops the run before anything is written, naming the size and the
  options that shrink the cache;
- a disk that fills mid-run is a clear error, the ``.partial`` is kept, ``probe`` on the
  unfinished cache says how to finish it, and the rerun resumes to the same cache an
  uninterrupted run writes, its summary counting the truncated rows of the whole cache.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from estratos.cache import cache_info, open_cache, schema
from estratos.cli import cli
from tests.test_encode import make_sentences, single_thread  # noqa: F401 (autouse)


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def encode(model: Path, out: Path, src: Path, *extra):
    return invoke("encode", "--model", model, "--out", out, "--sentences", src, "--threads", "1",
                  "--batch-tokens", "2000", *extra)


def sentence_file(tmp_path: Path, n: int) -> Path:
    src = tmp_path / "s.txt"
    src.write_text("\n".join(make_sentences(n, seed=21, max_words=30)) + "\n", encoding="utf-8")
    return src


def expected_bytes(output: str) -> int:
    found = re.search(r"expected cache size: [^(]*\(([\d,]+) bytes\)", output)
    assert found, output
    return int(found.group(1).replace(",", ""))


@pytest.mark.parametrize("extra", [(), ("--states", "last:1", "--dtype", "float32",
                                        "--pooling", "mean")])
def test_expected_size_is_printed_first_and_within_2_percent(tiny_bert_dir, tmp_path, extra):
    src = sentence_file(tmp_path, 4000)
    out = tmp_path / "c.h5"
    result = encode(tiny_bert_dir, out, src, *extra)
    assert result.exit_code == 0, result.output
    assert result.output.index("expected cache size") < result.output.index("cache: ")
    assert "states + avg" in result.output and "free in" in result.output
    size = out.stat().st_size
    assert abs(expected_bytes(result.output) - size) / size < 0.02, (expected_bytes(result.output),
                                                                     size)


def test_too_little_free_space_is_refused_before_writing(tiny_bert_dir, tmp_path, monkeypatch):
    import estratos.encode.space as space

    src = sentence_file(tmp_path, 300)
    monkeypatch.setattr(space.shutil, "disk_usage", lambda folder: type(
        "Usage", (), {"free": 10_000, "total": 10**9, "used": 0})())
    result = encode(tiny_bert_dir, tmp_path / "c.h5", src)
    assert result.exit_code == 1, result.output
    msg = " ".join(result.output.split())
    assert "10.0 kB free, but this encode needs about" in msg
    for option in ("--states", "--dtype", "--pooling", "--tasks"):
        assert option in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.txt"]  # nothing written


def test_disk_full_mid_run_keeps_a_partial_that_resumes(tiny_bert_dir, tmp_path, monkeypatch):
    src = sentence_file(tmp_path, 2500)
    out = tmp_path / "c.h5"
    ref = tmp_path / "ref.h5"
    assert encode(tiny_bert_dir, ref, src, "--max-length", "12").exit_code == 0

    # the third block's /vectors/mean write finds the disk full (keys, texts and cls of that
    # block are already in the file, beyond n_done: what a real ENOSPC leaves)
    real = h5py.Dataset.__setitem__
    calls = {"n": 0}

    def write(self, key, value):
        if self.name == "/vectors/mean":
            calls["n"] += 1
            if calls["n"] == 3:
                raise OSError(errno.ENOSPC, "Can't write data (file write failed: errno = 28, "
                                            "error message = 'No space left on device')")
        return real(self, key, value)

    monkeypatch.setattr(h5py.Dataset, "__setitem__", write)
    result = encode(tiny_bert_dir, out, src, "--max-length", "12")
    monkeypatch.setattr(h5py.Dataset, "__setitem__", real)
    assert result.exit_code == 1, result.output
    msg = " ".join(result.output.split())
    assert "the disk is full" in msg and "run the same command again to resume" in msg
    partial = schema.partial_path(out)
    assert partial.exists() and not out.exists()
    kept = cache_info(partial)["n_rows"]
    assert 0 < kept < 2000

    # probing the unfinished cache says what happened and how to finish it
    task = tmp_path / "toy.toml"
    (tmp_path / "t.tsv").write_text("a\tel perro come.\nb\tla casa.\n", encoding="utf-8")
    task.write_text('name = "Toy"\nsuite = "custom"\ngroup = "SC"\nlanguage = "es"\n'
                    'format = "tsv"\ncombiner = "single"\nprotocol = "split"\n[files]\n'
                    'train = "t.tsv"\ndev = "t.tsv"\ntest = "t.tsv"\n[columns]\nlabel = 0\n'
                    'sentences = [1]\nheader = false\n', encoding="utf-8")
    result = invoke("probe", "--cache", out, "--task-file", task, "--out", tmp_path / "r.jsonl")
    assert result.exit_code == 1, result.output
    msg = " ".join(result.output.split())
    assert f"only {partial} exists ({kept} rows)" in msg and "interrupted" in msg
    assert "estratos encode --model" in msg and f"--out {out}" in msg

    # space is free again: the same command resumes and ends with the uninterrupted cache
    result = encode(tiny_bert_dir, out, src, "--max-length", "12")
    assert result.exit_code == 0, result.output
    assert f"{kept} resumed" in result.output
    info = cache_info(out)
    assert info["n_truncated"] > 0
    # the summary counts the whole cache's truncated rows, not only this run's
    assert f"truncated at 12 tokens: {info['n_truncated']} in the cache" in result.output
    with open_cache(out) as c, open_cache(ref) as r:
        assert c.n_rows == r.n_rows
        rows = c.rows_for(r.sentences())
        for pooling in ("cls", "mean", "avg"):
            if pooling == "avg":
                np.testing.assert_array_equal(c.read(rows, "cls", ["avg"]),
                                              r.read(np.arange(r.n_rows), "cls", ["avg"]))
            else:
                np.testing.assert_array_equal(c.read(rows, pooling),
                                              r.read(np.arange(r.n_rows), pooling))

    # nothing left to do: the summary still gives the cache's total
    result = encode(tiny_bert_dir, out, src, "--max-length", "12")
    assert result.exit_code == 0, result.output
    assert f"truncated at 12 tokens: {info['n_truncated']} in the cache" in result.output
