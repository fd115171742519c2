"""The cache: reader lookups and block reads, shard merge, verify, info, and their commands."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from estratos.cache import cache_info, merge_shards, open_cache, verify_cache
from estratos.cache.writer import CacheWriter
from estratos.cli import cli
from estratos.encode import encode_sentences
from estratos.errors import CacheError, MissingSentences, SettingsMismatch
from tests.test_encode import make_sentences, single_thread  # noqa: F401 (autouse)

pytestmark = pytest.mark.usefixtures("hub_offline")

# a fast deterministic encoder: 4 "layers" of 6 dims derived from the words' characters
BATCHER = '''
import numpy as np

def batcher(params, batch):
    out = np.zeros((len(batch), 4, 6), dtype=np.float32)
    for i, words in enumerate(batch):
        codes = np.frombuffer(" ".join(words).encode("utf-8"), dtype=np.uint8).astype(np.float32)
        for layer in range(4):
            out[i, layer] = [codes.sum() % 97, len(codes), layer, codes[0], codes[-1], i % 3]
    return out
'''


@pytest.fixture(scope="module")
def batcher_target(tmp_path_factory):
    folder = tmp_path_factory.mktemp("enc")
    (folder / "fastenc.py").write_text(BATCHER, encoding="utf-8")
    return f"{folder / 'fastenc.py'}:batcher"


@pytest.fixture(scope="module")
def big_cache(tmp_path_factory, batcher_target):
    """About 1500 rows (several chunks), float32, made with the fast encoder."""
    path = tmp_path_factory.mktemp("big") / "big.h5"
    sentences = make_sentences(1600, seed=11, max_words=15)
    encode_sentences(sentences, None, path, encoder=batcher_target, dtype="float32")
    return path


# -- reader ---------------------------------------------------------------------------------
def test_open_cache_refuses_missing_partial_incomplete_and_foreign(tmp_path, big_cache):
    with pytest.raises(CacheError, match="no such cache"):
        open_cache(tmp_path / "nope.h5")
    w = CacheWriter.create(tmp_path / "c.h5.partial", {"dtype": "float16", "poolings": ["cls"]})
    w.close()
    with pytest.raises(CacheError, match=r"\.partial"):
        open_cache(tmp_path / "c.h5.partial")
    os.replace(tmp_path / "c.h5.partial", tmp_path / "renamed.h5")
    with pytest.raises(CacheError, match="incomplete"):
        open_cache(tmp_path / "renamed.h5")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = 1
    with pytest.raises(CacheError, match="not an estratos cache"):
        open_cache(tmp_path / "other.h5")
    (tmp_path / "text.h5").write_text("hello", encoding="utf-8")
    with pytest.raises(CacheError, match="text.h5"):
        open_cache(tmp_path / "text.h5")


def test_open_cache_checks_expected_settings(big_cache, batcher_target):
    with open_cache(big_cache, expect={"model": batcher_target, "dtype": "float32",
                                       "pooling": "encoder"}) as c:
        ident = c.identity()
        assert set(ident) == {"model", "revision", "tokenizer", "max_length", "dtype", "path",
                              "n_rows", "n_states", "dim", "random_init", "prompt", "encoding"}
        # the settings that change a vector without being a cell's identity
        assert ident["encoding"]["dtype"] == "float32" and "model" not in ident["encoding"]
        assert ident["random_init"] is None  # trained weights (a control model: its seed)
        assert (ident["n_states"], ident["dim"], ident["dtype"]) == (4, 6, "float32")
    with pytest.raises(SettingsMismatch) as err:
        open_cache(big_cache, expect={"model": "bert-base", "dtype": "float16"})
    msg = str(err.value)
    assert "bert-base" in msg and batcher_target in msg and "float16" in msg and "float32" in msg
    with pytest.raises(SettingsMismatch, match="pooling 'cls'"):
        open_cache(big_cache, expect={"pooling": "cls"})


def test_rows_for_and_missing_sentences(big_cache):
    with open_cache(big_cache) as c:
        texts = c.sentences()
        rows = c.rows_for([texts[7], texts[3], " " + texts[7] + "\n"])
        assert rows.tolist() == [7, 3, 7] and rows.dtype == np.int64
        assert c.contains([texts[0], "no está"]).tolist() == [True, False]
        with pytest.raises(MissingSentences) as err:
            c.rows_for([texts[0], "no está", "tampoco", "no está"])
        assert err.value.missing == 2 and "no está" in str(err.value)


def test_read_matches_direct_dataset_access(big_cache):
    with h5py.File(big_cache, "r") as f:
        full = f["vectors/encoder"][:]
    with open_cache(big_cache) as c:
        rows = np.array([1400, 3, 3, 0, 900, 1401, 2, c.n_rows - 1])
        np.testing.assert_array_equal(c.read(rows, "encoder"), full[rows])
        np.testing.assert_array_equal(c.read(rows, "encoder", [2]), full[rows][:, [2]])
        np.testing.assert_array_equal(c.read(rows, "encoder", [3, 0]), full[rows][:, [3, 0]])
        assert c.read([], "encoder").shape == (0, 4, 6)
        assert c.read(rows, "encoder").dtype == np.float32
        with pytest.raises(SettingsMismatch):
            c.read(rows, "cls")
        with pytest.raises(IndexError):
            c.read([c.n_rows], "encoder")


@settings(max_examples=25, deadline=None)
@given(rows=st.lists(st.integers(0, 1400), max_size=60),
       states=st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True))
def test_read_any_rows_and_states(big_cache, rows, states):
    with h5py.File(big_cache, "r") as f:
        expected = f["vectors/encoder"][:][rows][:, states] if rows else np.zeros((0, len(states), 6))
    with open_cache(big_cache) as c:
        np.testing.assert_array_equal(c.read(rows, "encoder", states), expected)


# -- merge ----------------------------------------------------------------------------------
def by_key(path, pooling):
    with open_cache(path) as c:
        return dict(zip(c.sentences(), c.read(np.arange(c.n_rows), pooling)))


def test_three_shards_merged_equal_one_run(tiny_bert_dir, tmp_path):
    sentences = make_sentences(300, seed=12, max_words=25)
    one = tmp_path / "one.h5"
    encode_sentences(sentences, str(tiny_bert_dir), one, dtype="float32")
    out = tmp_path / "c.h5"
    shards = []
    for i in range(3):
        s = encode_sentences(sentences, str(tiny_bert_dir), out, dtype="float32", shard=f"{i}/3")
        shards.append(s.path)
        assert s.path.endswith(f"c.shard-{i}-of-3.h5") and 0 < s.n_selected < s.n_unique
    assert not out.exists()
    result = merge_shards(tmp_path / "merged.h5", list(reversed(shards)))
    assert result["n_rows"] == len(set(sentences))
    assert verify_cache(tmp_path / "merged.h5", sentences).ok
    for pooling in ("cls", "mean"):
        a, b = by_key(one, pooling), by_key(tmp_path / "merged.h5", pooling)
        assert a.keys() == b.keys()
        for s in a:
            np.testing.assert_allclose(a[s], b[s], atol=1e-5, rtol=1e-5)
    info = cache_info(tmp_path / "merged.h5")
    assert "shard_index" not in info and info["merged_from"] == 3 and info["complete"] is True


def test_merge_refuses_missing_duplicate_mismatched_and_incomplete(tmp_path, batcher_target):
    sentences = make_sentences(60, seed=13)
    out = tmp_path / "c.h5"
    paths = [encode_sentences(sentences, None, out, encoder=batcher_target, shard=(i, 3)).path
             for i in range(3)]
    with pytest.raises(CacheError, match=r"missing shard\(s\) 1 of 3"):
        merge_shards(tmp_path / "m.h5", [paths[0], paths[2]])
    with pytest.raises(CacheError, match="given twice"):
        merge_shards(tmp_path / "m.h5", [paths[0], paths[1], paths[2], paths[1]])
    other = encode_sentences(sentences, None, tmp_path / "d.h5", encoder=batcher_target,
                             shard=(1, 3), dtype="float32").path
    with pytest.raises(SettingsMismatch, match="dtype"):
        merge_shards(tmp_path / "m.h5", [paths[0], other, paths[2]])
    other_input = encode_sentences(sentences[:30], None, tmp_path / "e.h5",
                                   encoder=batcher_target, shard=(1, 3)).path
    with pytest.raises(SettingsMismatch, match="input_digest"):
        merge_shards(tmp_path / "m.h5", [paths[0], other_input, paths[2]])
    whole = encode_sentences(sentences, None, tmp_path / "whole.h5", encoder=batcher_target).path
    with pytest.raises(CacheError, match="not a shard"):
        merge_shards(tmp_path / "m.h5", [whole])
    (tmp_path / "exists.h5").write_text("x", encoding="utf-8")
    with pytest.raises(CacheError, match="refusing to overwrite"):
        merge_shards(tmp_path / "exists.h5", paths)
    assert not (tmp_path / "m.h5").exists() and not (tmp_path / "m.h5.partial").exists()
    merged = merge_shards(tmp_path / "m.h5", paths)
    assert merged["n_rows"] == len(set(sentences))


@pytest.mark.parametrize("model", ["tiny", "batcher"])
def test_merge_with_empty_shards(tmp_path, tiny_bert_dir, batcher_target, model):
    kwargs = ({"encoder": batcher_target} if model == "batcher" else {})
    name = None if model == "batcher" else str(tiny_bert_dir)
    sentences = ["uno.", "dos."]
    summaries = [encode_sentences(sentences, name, tmp_path / "c.h5", shard=(i, 6), **kwargs)
                 for i in range(6)]
    assert sorted(s.n_selected for s in summaries)[:4] == [0, 0, 0, 0]
    if model == "tiny":
        empty = next(s.path for s in summaries if s.n_selected == 0)
        assert verify_cache(empty).ok
    merge_shards(tmp_path / "m.h5", [s.path for s in summaries])
    with open_cache(tmp_path / "m.h5") as c:
        assert sorted(c.sentences()) == sorted(sentences)


# -- verify ---------------------------------------------------------------------------------
def small_cache(tmp_path, batcher_target, name="v.h5"):
    sentences = make_sentences(700, seed=14)
    path = tmp_path / name
    encode_sentences(sentences, None, path, encoder=batcher_target)
    return path, sentences


def test_verify_ok_and_missing_row(tmp_path, batcher_target):
    path, sentences = small_cache(tmp_path, batcher_target)
    report = verify_cache(path, sentences)
    assert report.ok and report.checked_sentences == len(set(sentences)), report.summary()
    report = verify_cache(path, sentences + ["una frase que no está."])
    assert not report.ok and report.missing == 1
    assert "una frase que no está." in report.summary()


def test_verify_catches_a_corrupted_chunk(tmp_path, batcher_target):
    path, _ = small_cache(tmp_path, batcher_target)
    with h5py.File(path, "r") as f:
        info = f["vectors/encoder"].id.get_chunk_info(1)  # a chunk of rows 0..511
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        byte = fh.read(1)
        fh.seek(info.byte_offset + info.size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    report = verify_cache(path)
    assert not report.ok
    assert any("checksum" in p and "/vectors/encoder" in p for p in report.problems), report.problems


def test_verify_catches_nan_bad_key_and_incomplete(tmp_path, batcher_target):
    path, _ = small_cache(tmp_path, batcher_target)
    with h5py.File(path, "r+") as f:
        f["vectors/encoder"][5, 2, 1] = np.nan
        f["sentences"][9] = "otro texto"
    problems = verify_cache(path).problems
    assert any("NaN" in p for p in problems) and any("does not match" in p for p in problems)
    partial_path, _ = small_cache(tmp_path, batcher_target, "p.h5")
    with h5py.File(partial_path, "r+") as f:
        f.attrs["complete"] = False
    assert any("incomplete" in p for p in verify_cache(partial_path).problems)


# -- info and commands ----------------------------------------------------------------------
def test_cache_info(big_cache, batcher_target):
    info = cache_info(big_cache)
    assert info["n_rows"] == len(set(make_sentences(1600, seed=11, max_words=15))) > 1024
    assert (info["n_states"], info["dim"], info["poolings"]) == (4, 6, ["encoder"])
    assert info["size_bytes"] == big_cache.stat().st_size and info["model"] == batcher_target
    assert info["vectors"]["encoder"]["chunks"] == [512, 1, 6]
    assert info["vectors"]["encoder"]["fletcher32"] is True
    for key in ("schema_version", "estratos_version", "library_versions", "created", "revision"):
        assert key in info


def test_cache_commands(tmp_path, batcher_target):
    runner = CliRunner()
    path, sentences = small_cache(tmp_path, batcher_target)
    res = runner.invoke(cli, ["cache", "info", str(path)])
    assert res.exit_code == 0 and "n_rows: " in res.output and "dim: 6" in res.output
    res = runner.invoke(cli, ["cache", "info", "--json", str(path)])
    assert json.loads(res.output)["dim"] == 6
    listed = tmp_path / "need.txt"
    listed.write_text("\n".join(sentences[:5]) + "\n", encoding="utf-8")
    res = runner.invoke(cli, ["cache", "verify", str(path), "--sentences", str(listed)])
    assert res.exit_code == 0 and "OK" in res.output
    listed.write_text("no está en la cache\n", encoding="utf-8")
    res = runner.invoke(cli, ["cache", "verify", str(path), "--sentences", str(listed)])
    assert res.exit_code == 1 and "FAILED" in res.output and "1 required sentence" in res.output
    res = runner.invoke(cli, ["cache", "verify", str(tmp_path / "none.h5")])
    assert res.exit_code == 1 and "no such cache" in res.output
    res = runner.invoke(cli, ["cache", "merge", "--out", str(tmp_path / "m.h5"), str(path)])
    assert res.exit_code == 1 and "not a shard" in res.output
    shards = [encode_sentences(sentences, None, tmp_path / "s.h5", encoder=batcher_target,
                               shard=(i, 2)).path for i in range(2)]
    res = runner.invoke(cli, ["cache", "merge", str(tmp_path / "m.h5"), *shards])
    assert res.exit_code == 2, res.output  # the merged file is given with --out
    assert "Missing option '--out'" in res.output
    assert f"estratos cache merge --out {tmp_path / 'm.h5'} {shards[0]}" in res.output
    assert not (tmp_path / "m.h5").exists()
    res = runner.invoke(cli, ["cache", "merge", "--out", str(tmp_path / "m.h5"), *shards])
    assert res.exit_code == 0 and "merged 2 shards" in res.output


def test_a_corrupted_avg_chunk_is_named_as_avg_by_verify_and_by_the_reader(tmp_path,
                                                                          batcher_target):
    """Damage in /avg is reported as /avg (not /vectors, and without a "state" /avg does not
    have) by `cache verify` and by a probe's read."""
    path, sentences = small_cache(tmp_path, batcher_target)
    with h5py.File(path, "r") as f:
        info = f["avg/encoder"].id.get_chunk_info(0)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        byte = fh.read(1)
        fh.seek(info.byte_offset + info.size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    problems = verify_cache(path).problems
    damaged = [p for p in problems if "checksum" in p]
    assert damaged and all("/avg/encoder" in p and "state" not in p for p in damaged), problems
    with open_cache(path) as cache:
        with pytest.raises(CacheError, match=r"/avg/encoder rows \d+\.\.\d+ are unreadable"):
            cache.read(cache.rows_for(sentences[:3]), "encoder", ["avg"])
        cache.read(cache.rows_for(sentences[:3]), "encoder", [0])  # the states are whole


def test_cache_info_reads_a_partial_that_a_running_encode_holds(tmp_path, batcher_target):
    """docs/cache.md: `cache info` shows how far a run got, while the run (another process)
    holds the `.partial` open for writing with HDF5's lock: read without the lock, exit 0."""
    import subprocess
    import sys

    path, _ = small_cache(tmp_path, batcher_target)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(path.read_bytes())
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time, h5py\n"
         "f = h5py.File(sys.argv[1], 'r+'); f.attrs['complete'] = False; f.flush()\n"
         "print('ready', flush=True); time.sleep(60)", str(partial)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        locked = subprocess.run([sys.executable, "-c", "import sys, h5py\n"
                                 "h5py.File(sys.argv[1], 'r')", str(partial)],
                                capture_output=True, text=True)
        assert locked.returncode != 0  # a plain read is refused while the run holds it
        res = CliRunner().invoke(cli, ["cache", "info", str(partial)])
        assert res.exit_code == 0, res.output
        assert "n_rows" in res.output, res.output
    finally:
        holder.kill()
        holder.wait()
