"""Versioned formats: files written by the previous release (tests/fixtures/v1: cache format
1, predictions format 1) are read through each format's one migration, are extended into the
current version, and the current version stores None as an absent attribute, never as ""."""

from __future__ import annotations

import gzip
import math
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from estratos.cache import open_cache, schema
from estratos.cache.writer import CacheWriter
from estratos.cli import cli
from estratos.errors import CacheError, ResultsError
from estratos.results import read_results
from estratos.results import predictions as store
from estratos.results.predictions import (CellPredictions, PredictionsReader, check_metric,
                                          predictions_dir, write_predictions)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v1"


def unpack(name: str, dest: Path) -> Path:
    """A gzipped fixture cache, unpacked into ``dest``."""
    out = dest / name[:-3]
    with gzip.open(FIXTURES / name, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def stored_version(path: Path) -> int:
    with h5py.File(path, "r") as f:
        return int(f.attrs["schema_version"])


# --------------------------------------------------------------------------- caches

def test_a_version_1_cache_reads_as_the_current_version(tmp_path):
    cache = unpack("cache.h5.gz", tmp_path)
    assert stored_version(cache) == 1
    with open_cache(cache) as c:
        assert c.attrs["schema_version"] == schema.SCHEMA_VERSION == 2
        assert c.n_rows == 60 and c.states == (0, 1, 2) and c.has_avg
        assert c.attrs["model_dtype"] == "float32" and "unrecorded" not in c.attrs
        vectors = c.read(range(60), "mean", [0, 2, "avg"])
        assert vectors.shape == (60, 3, 16) and np.isfinite(vectors).all()
        sentences = c.sentences()
    assert stored_version(cache) == 1  # reading never rewrites a file


def test_the_version_1_migration_fills_what_older_caches_lack(tmp_path):
    """A version-1 cache may lack the states list, the stored avg and the weights' dtype,
    and stored None as "": the migration gives every state, no avg, the dtype unrecorded
    (matching any) and None."""
    cache = unpack("cache.h5.gz", tmp_path)
    with h5py.File(cache, "r+") as f:
        for name in ("states", "stored_avg", "model_dtype"):
            del f.attrs[name]
        f.attrs["random_init"] = ""
    with h5py.File(cache, "r") as f:
        attrs = schema.read_attrs(f)
    assert attrs["states"] == (0, 1, 2) and attrs["stored_avg"] is False
    assert attrs["unrecorded"] == ("model_dtype",) and "random_init" not in attrs
    want = {**attrs, "model_dtype": "bfloat16"}
    del want["unrecorded"]
    assert schema.settings_diff(attrs, want) == {}  # an unrecorded setting matches any
    with open_cache(cache) as c:
        assert not c.has_avg
        with pytest.raises(IndexError, match="does not store the avg"):
            c.read([0], "mean", ["avg"])


@pytest.mark.parametrize("model_type, skips_bos, architecture, first_token", [
    ("llama", True, "decoder", "skip"), ("qwen2", False, "decoder", "keep"),
    ("bert", None, "encoder", None)])
def test_the_version_1_migration_reads_the_older_decoder_attributes(
        tmp_path, model_type, skips_bos, architecture, first_token):
    """Version-1 caches written before ``architecture`` and ``mean_first_token`` recorded
    them: the migration tells the architecture from ``model_type`` and turns
    ``mean_skips_bos`` into ``mean_first_token``, so readers (the probe's cls refusal, a
    cell's ``encoding``, the settings a resume compares) see only the current attributes;
    extending such a cache writes them."""
    from estratos.cache.architecture import cache_is_decoder

    cache = unpack("cache.h5.gz", tmp_path)
    with h5py.File(cache, "r+") as f:
        del f.attrs["architecture"]
        f.attrs["model_type"] = model_type
        if skips_bos is not None:
            f.attrs["mean_skips_bos"] = skips_bos
    with open_cache(cache) as c:
        assert c.attrs["architecture"] == architecture and "mean_skips_bos" not in c.attrs
        assert cache_is_decoder(c.attrs) == (architecture == "decoder")
        assert c.attrs.get("mean_first_token") == first_token
        assert c.identity()["encoding"].get("mean_first_token") == first_token
        want = {**c.attrs, "mean_first_token": first_token}
        assert schema.settings_diff(c.attrs, want) == {}
    writer = CacheWriter.extend_copy(cache, schema.partial_path(cache))
    writer.finish(cache)
    with h5py.File(cache, "r") as f:
        assert "mean_skips_bos" not in f.attrs and f.attrs["architecture"] == architecture
        assert schema.to_python(f.attrs.get("mean_first_token")) == first_token


def test_a_cache_of_a_newer_version_is_refused_by_name(tmp_path):
    cache = unpack("cache.h5.gz", tmp_path)
    with h5py.File(cache, "r+") as f:
        f.attrs["schema_version"] = 9
    with pytest.raises(CacheError, match=r"cache\.h5: cache format version 9; .*reads 1 to 2"):
        with open_cache(cache):
            pass


def test_a_killed_version_1_partial_resumes_into_the_current_version(tmp_path):
    partial = unpack("killed.h5.partial.gz", tmp_path)
    complete = unpack("cache.h5.gz", tmp_path)
    with CacheWriter.reopen(partial) as writer:
        assert writer.n_done == 60
        writer.finish(tmp_path / "resumed.h5")
    assert stored_version(tmp_path / "resumed.h5") == 2
    with open_cache(tmp_path / "resumed.h5") as a, open_cache(complete) as b:
        assert a.attrs["states"] == b.attrs["states"] and a.has_avg
        np.testing.assert_array_equal(a.read(range(60), "mean", [0, 1, 2, "avg"]),
                                      b.read(range(60), "mean", [0, 1, 2, "avg"]))


def test_extending_a_version_1_cache_writes_the_current_version(tmp_path):
    complete = unpack("cache.h5.gz", tmp_path)
    with open_cache(complete) as c:
        before = c.read(range(60), "mean")
        vectors = c.read([0, 1], "mean")
        avg = c.read([0, 1], "mean", ["avg"])[:, 0]
    writer = CacheWriter.extend_copy(complete, schema.partial_path(complete))
    from estratos.text import sentence_key

    texts = ["una frase nueva", "otra frase nueva"]
    writer.append([sentence_key(t) for t in texts], texts, [4, 4], [False, False],
                  {"mean": vectors}, {"mean": avg})
    writer.finish(complete)
    assert stored_version(complete) == 2
    with h5py.File(complete, "r") as f:
        assert all(v != "" for v in f.attrs.values() if isinstance(v, str))
    with open_cache(complete) as c:
        assert c.n_rows == 62
        np.testing.assert_array_equal(c.read(range(60), "mean"), before)


def test_none_is_an_absent_cache_attribute(tmp_path):
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        schema.write_attrs(f, {"revision": None, "model": "m"})
        assert "revision" not in f.attrs
        f.attrs["random_init"] = 3
        schema.write_attrs(f, {"random_init": None})
        assert "random_init" not in f.attrs


def test_probe_on_a_version_1_cache(tmp_path):
    cache = unpack("cache.h5.gz", tmp_path)
    shutil.copytree(FIXTURES / "task", tmp_path / "task")
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(cli, ["probe", "--cache", str(cache), "--task-file",
                                      str(tmp_path / "task" / "toy.toml"), "--out", str(out),
                                      "--layers", "0,avg", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert len(read_results(out)) == 2
    reader = PredictionsReader()
    for record in read_results(out):
        assert reader.find(record, out).preds is not None


# --------------------------------------------------------------------------- predictions

def copy_results(name: str, dest: Path) -> Path:
    shutil.copy(FIXTURES / f"{name}.jsonl", dest / f"{name}.jsonl")
    shutil.copytree(FIXTURES / f"{name}.predictions", dest / f"{name}.predictions")
    return dest / f"{name}.jsonl"


@pytest.mark.parametrize("name", ["results", "toys"])
def test_version_1_predictions_reproduce_their_results_lines(tmp_path, name):
    results = copy_results(name, tmp_path)
    reader = PredictionsReader()
    records = read_results(results)
    assert len(records) == {"results": 6, "toys": 4}[name]
    for record in records:
        found = reader.find(record, results)
        assert found.preds is not None, found.problem
        if record.score is not None:
            assert check_metric(record, found.preds) == pytest.approx(record.score, abs=0.01)


def test_version_1_empty_strings_nan_and_minus_one_read_as_none(tmp_path):
    results = copy_results("toys", tmp_path)
    [record] = [r for r in read_results(results) if r.score is None]
    assert record.created is None and record.protocol is None
    preds = PredictionsReader().find(record, results).preds
    assert preds.positive == 1
    [kfold] = [r for r in read_results(results) if r.protocol == "inner-kfold"]
    assert PredictionsReader().find(kfold, results).preds.positive is None


def test_new_cells_beside_version_1_files_are_version_2_without_empty_strings(tmp_path):
    results = copy_results("toys", tmp_path)
    old = read_results(results)
    [none] = [r for r in old if r.score is None]
    gold = np.arange(10) % 2
    again = none.replace(layer=3)
    write_predictions(results, [again], [CellPredictions(gold, gold)], with_ci=False)
    newest = sorted(predictions_dir(results).glob("cells-*.h5"))[-1]
    with h5py.File(newest, "r") as f:
        assert int(f.attrs["version"]) == store.VERSION == 2
        [cell] = f["cells"].values()
        assert set(cell.attrs) == {"key", "test", "metric"}  # None is absent, not ""/NaN/-1
    reader = PredictionsReader()
    found = reader.find(again, results)
    assert found.preds is not None and found.preds.positive is None
    for record in old:  # the version-1 files still serve their lines
        assert reader.find(record, results).preds is not None


def test_a_predictions_file_of_a_newer_version_is_refused_by_name(tmp_path):
    results = copy_results("results", tmp_path)
    newest = sorted(predictions_dir(results).glob("cells-*.h5"))[-1]
    with h5py.File(newest, "r+") as f:
        f.attrs["version"] = 7
    with pytest.raises(ResultsError, match=r"cells-000002\.h5.*version 7 .*reads 1 to 2"):
        PredictionsReader().find(read_results(results)[0], results)



def test_unreadable_root_attributes_are_a_damaged_cache(tmp_path, monkeypatch):
    """A cache whose attribute heap is damaged: verify reports it, readers refuse it, both
    naming the file (never a raw HDF5 error)."""
    from estratos.cache import verify_cache
    from estratos.errors import DamagedCache

    cache = unpack("cache.h5.gz", tmp_path)

    def unreadable(self):
        raise OSError("Can't synchronously read data (bad heap pointer)")

    monkeypatch.setattr(h5py.AttributeManager, "items", unreadable)
    report = verify_cache(cache)
    assert not report.ok and "root attributes cannot be read" in report.problems[0]
    with pytest.raises(DamagedCache, match=r"cache\.h5: its root attributes cannot be read"):
        with open_cache(cache):
            pass
