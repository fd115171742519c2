"""Errors keep their data across processes: an exception raised in a probe
worker reaches the caller as itself, with its fields, not rebuilt from a class name."""

from __future__ import annotations

import os
import pickle

import pytest
from probe_toys import WorkerFailingLoader, spec, toy_split_task, write_cache

from estratos import errors
from estratos.probe.config import ProbeConfig
from estratos.probe.grid.runner import run_probe

EXAMPLES = [
    errors.InputError("bad label 'x'", "train.tsv", 3),
    errors.InputError("no such file", "data/dev.tsv"),
    errors.MissingSentences("3 sentences are not in the cache", missing=3),
    errors.ResultsFileError("not JSON", "r.jsonl", 7),
    errors.OptionError("--jobs: must be a positive integer, got 0"),
    errors.SelectionError("unknown task 'x'"),
    errors.Interrupted("interrupted: 2 cells kept"),
    errors.SettingsMismatch("model differs"),
]


@pytest.mark.parametrize("exc", EXAMPLES, ids=lambda e: type(e).__name__)
def test_every_error_pickles_as_itself_with_its_fields(exc):
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc)
    assert vars(back) == vars(exc)
    assert back.exit_code == exc.exit_code


def test_a_context_keeps_the_fields_and_goes_first():
    exc = errors.InputError("bad label 'x'", "train.tsv", 3).in_context("toy:B", "(also: C)")
    assert str(exc) == "toy:B: train.tsv:3: bad label 'x' (also: C)"
    assert (exc.path, exc.line, exc.message) == ("train.tsv", 3, "bad label 'x'")
    back = pickle.loads(pickle.dumps(exc))
    assert str(back) == str(exc) and back.line == 3


@pytest.mark.parametrize("error", [errors.InputError("bad label 'x'", "train.tsv", 3),
                                   errors.MissingSentences("gone", missing=11)],
                         ids=lambda e: type(e).__name__)
def test_an_error_raised_in_a_worker_arrives_with_its_fields(tmp_path, error):
    _, sents, vec = toy_split_task(160)
    cache = write_cache(tmp_path / "c.h5", sents, vec)
    specs = [spec("A"), spec("B")]
    marker = tmp_path / "worker-reached-B"
    loader = WorkerFailingLoader("toy:B", error, os.getpid(), marker)
    with pytest.raises(type(error)) as caught:
        run_probe(cache, specs, None, tmp_path / "r.jsonl",
                  ProbeConfig.build(layers="0", jobs=2, threads=1), loader=loader)
    got = caught.value
    assert type(got) is type(error)
    assert str(got) == f"toy:B: {error}"
    for field in ("path", "line", "message", "missing"):
        assert getattr(got, field, None) == getattr(error, field, None), field
    assert marker.exists()  # the worker's error, not the parent's
    assert not (tmp_path / "r.jsonl").exists()
