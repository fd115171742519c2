"""SIGKILL the encoder at named crash points and after seeded random delays; rerun; the final
cache must equal an uninterrupted run's, be readable by plain h5py, and no ``.partial`` may
ever pass for a complete cache."""

from __future__ import annotations

import random
import time
from pathlib import Path

import h5py
import pytest

import _forkrun
from crashkit import compare_caches, make_sentences, run_child
from estratos.cache import open_cache, verify_cache
from estratos.encode import encode_sentences
from estratos.errors import CacheError

BATCH_TOKENS = 2048  # 10 batches of ~120 rows; blocks flush after batches 6, 9 and 10
N_TINY = 1200
#: (point, N): kill the N-th time the point is reached. Spread over model load, cache
#: creation, mid-batch, each step of a block flush, and the final mark + rename.
TINY_POINTS = ["model-load", "create", "batch:1", "batch:4", "batch:7", "batch:10",
               "append-write:1", "append-write:3", "append-flushed:1", "append-flushed:2",
               "append-done:1", "append-done:2", "finish-marked", "finish-renamed"]
#: plus kills after random delays (seeded), as fractions of an uninterrupted run's duration
RANDOM_KILLS = [round(random.Random(20261122 + i).uniform(0.05, 1.0), 3) for i in range(6)]


def _invariants_after_kill(out: Path) -> None:
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        with pytest.raises(CacheError):
            open_cache(partial)
    if out.exists():  # only after the rename: then it must be a whole, valid cache
        with open_cache(out) as cache:
            assert cache.n_rows > 0
        assert verify_cache(out).ok


@pytest.fixture(scope="module")
def tiny_run(tiny_bert_dir, tmp_path_factory, forkserver):
    """The sentences, an uninterrupted reference cache, and how long a child run takes."""
    root = tmp_path_factory.mktemp("crash-tiny")
    src = root / "sentences.txt"
    src.write_text("\n".join(make_sentences(N_TINY, seed=3)) + "\n", encoding="utf-8")
    ref = root / "reference.h5"
    t0 = time.monotonic()
    code = run_child(forkserver, _forkrun.encode,
                     (None, str(src), str(tiny_bert_dir), str(ref),
                      {"batch_tokens": BATCH_TOKENS, "threads": 1}))
    assert code == 0
    return src, ref, time.monotonic() - t0


def _kill_and_resume(figures, forkserver, model_dir, src, ref, out, *, fault=None, delay=None):
    figures.add("crash_points_tried")
    code = run_child(forkserver, _forkrun.encode,
                     (fault, str(src), str(model_dir), str(out),
                      {"batch_tokens": BATCH_TOKENS, "threads": 1}),
                     kill_after=delay)
    killed = code == -9
    if fault:
        assert killed, f"{fault}: the point was never reached (exit {code})"
    _invariants_after_kill(out)
    sentences = src.read_text(encoding="utf-8").splitlines()
    encode_sentences(sentences, str(model_dir), out, batch_tokens=BATCH_TOKENS, threads=1,
                     progress=False)
    assert out.exists() and not out.with_name(out.name + ".partial").exists()
    with h5py.File(out, "r") as f:  # plain h5py, no estratos code
        assert f.attrs["complete"] and f["vectors/cls"].shape[0] == f["keys"].shape[0]
    assert verify_cache(out).ok
    lost = compare_caches(out, ref)
    figures.add("rows_lost", lost)
    assert lost == 0
    figures.add("crash_points_survived")
    figures.note(kind="encode-kill", model="tiny-bert" if "tiny" in str(model_dir) else "minilm",
                 point=fault or f"after {delay:.2f}s", killed=killed)


@pytest.mark.parametrize("fault", TINY_POINTS)
def test_kill_at_named_point_then_rerun(fault, tiny_run, tiny_bert_dir, tmp_path, forkserver,
                                        figures):
    src, ref, _ = tiny_run
    _kill_and_resume(figures, forkserver, tiny_bert_dir, src, ref, tmp_path / "c.h5", fault=fault)


@pytest.mark.parametrize("fraction", RANDOM_KILLS)
def test_kill_after_random_delay_then_rerun(fraction, tiny_run, tiny_bert_dir, tmp_path,
                                            forkserver, figures):
    src, ref, seconds = tiny_run
    _kill_and_resume(figures, forkserver, tiny_bert_dir, src, ref, tmp_path / "c.h5",
                     delay=fraction * seconds)


#: kills while adding sentences to a complete cache: the old cache must stay valid throughout
EXTEND_POINTS = ["extend-copy", "append-done:1", "finish-marked"]


@pytest.mark.parametrize("fault", EXTEND_POINTS)
def test_kill_while_extending_keeps_the_old_cache(fault, tiny_run, tiny_bert_dir, tmp_path,
                                                  forkserver, figures):
    src, ref, _ = tiny_run
    sentences = src.read_text(encoding="utf-8").splitlines()
    half = tmp_path / "half.txt"
    half.write_text("\n".join(sentences[:600]) + "\n", encoding="utf-8")
    out = tmp_path / "c.h5"
    encode_sentences(sentences[:600], str(tiny_bert_dir), out, batch_tokens=BATCH_TOKENS,
                     threads=1, progress=False)
    figures.add("crash_points_tried")
    code = run_child(forkserver, _forkrun.encode,
                     (fault, str(src), str(tiny_bert_dir), str(out),
                      {"batch_tokens": BATCH_TOKENS, "threads": 1}))
    assert code == -9
    with open_cache(out) as cache:  # the old cache: still complete, still the first 600
        assert cache.n_rows in (600, 1200)
        assert cache.n_rows == 600 or fault == "finish-marked"
    encode_sentences(sentences, str(tiny_bert_dir), out, batch_tokens=BATCH_TOKENS,
                     threads=1, progress=False)
    assert not out.with_name(out.name + ".partial").exists()
    assert verify_cache(out, sentences).ok
    lost = compare_caches(out, ref)
    figures.add("rows_lost", lost)
    assert lost == 0
    figures.add("crash_points_survived")
    figures.note(kind="encode-kill", model="tiny-bert", point=f"extend {fault}", killed=True)


#: one real run, killed again and again on the way: each rerun is killed at the next point
#: (counts restart in every process), the last rerun finishes
MINILM_CHAIN = ["append-done:1", "append-flushed:1", "batch:2", "delay:0.5", "finish-marked"]
N_MINILM = 2000


def test_real_minilm_run_killed_five_times(minilm_dir, tmp_path, forkserver, figures):
    src = tmp_path / "sentences.txt"
    sentences = make_sentences(N_MINILM, seed=11, max_words=8)
    src.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    kwargs = {"batch_tokens": 4096, "threads": 1}
    ref = tmp_path / "reference.h5"
    t0 = time.monotonic()
    assert run_child(forkserver, _forkrun.encode, (None, str(src), str(minilm_dir), str(ref),
                                                   kwargs)) == 0
    seconds = time.monotonic() - t0
    out = tmp_path / "c.h5"
    for point in MINILM_CHAIN:
        figures.add("crash_points_tried")
        if point.startswith("delay:"):
            code = run_child(forkserver, _forkrun.encode,
                             (None, str(src), str(minilm_dir), str(out), kwargs),
                             kill_after=float(point[6:]) * seconds)
        else:
            code = run_child(forkserver, _forkrun.encode,
                             (point, str(src), str(minilm_dir), str(out), kwargs))
        assert code == -9, f"{point}: not killed (exit {code})"
        _invariants_after_kill(out)
        figures.note(kind="encode-kill", model="minilm", point=point, killed=True)
    summary = encode_sentences(sentences, str(minilm_dir), out, progress=False, **kwargs)
    assert summary.n_rows == N_MINILM
    assert verify_cache(out, sentences).ok
    lost = compare_caches(out, ref)
    figures.add("rows_lost", lost)
    assert lost == 0
    figures.add("crash_points_survived", len(MINILM_CHAIN))
