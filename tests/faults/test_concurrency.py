"""Several processes on the same files: two probes sharing one results file, readers while
an encoder appends to another cache, and two encoders pointed at the same output."""

from __future__ import annotations

import _forkrun
import probekit
import pytest
from crashkit import make_sentences, wait_for

from estratos.cache import cache_info, open_cache, verify_cache
from estratos.encode import encode_sentences
from estratos.errors import CacheError
from estratos.probe.command import probe_tasks
from estratos.probe.config import ProbeConfig

ENCODE_KWARGS = {"batch_tokens": 2048, "threads": 1}


@pytest.fixture
def sentences_file(tmp_path):
    sentences = make_sentences(1500, seed=21)
    path = tmp_path / "sentences.txt"
    path.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return path, sentences


def test_two_probes_on_one_results_file(probe_grid, tmp_path, forkserver, figures):
    cache, files, ref, _ = probe_grid
    out = tmp_path / "shared.jsonl"
    figures.add("concurrency_scenarios")
    procs = [forkserver.Process(target=_forkrun.probe_files,
                                args=(str(cache), files, str(out), probekit.PROBE_KWARGS))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    assert probekit.outcome(out) == probekit.outcome(ref)  # each cell once, same numbers
    figures.add("concurrency_passed")
    figures.note(kind="concurrency", scenario="two probes, one results file", ok=True)


def test_readers_while_encode_appends_to_another_cache(probe_grid, sentences_file, tmp_path,
                                                      tiny_bert_dir, forkserver, figures):
    cache, files, ref, _ = probe_grid
    src, sentences = sentences_file
    other = tmp_path / "other.h5"
    figures.add("concurrency_scenarios")
    proc = forkserver.Process(target=_forkrun.encode,
                              args=(None, str(src), str(tiny_bert_dir), str(other), ENCODE_KWARGS))
    proc.start()
    partial = other.with_name(other.name + ".partial")
    assert wait_for(lambda: partial.exists() or not proc.is_alive())
    reads = info_ok = info_refused = 0
    while proc.is_alive():
        assert cache_info(cache)["complete"] is True
        out = tmp_path / f"r{reads}.jsonl"
        probe_tasks(cache, "", out, ProbeConfig.build(layers="2", seeds="1", threads=1),
                    task_files=files[:1])
        with open_cache(cache) as reader:
            assert reader.n_rows == 240
        reads += 1
        try:  # the file being written: described, or refused with a clear error
            info = cache_info(partial)
            # complete only in the instant between the last write and the rename
            assert info["complete"] is False or info["n_rows"] == len(sentences)
            info_ok += 1
        except CacheError as exc:
            assert "in use" in str(exc) or "no such" in str(exc)
            info_refused += 1
    proc.join()
    assert proc.exitcode == 0 and reads > 0
    assert verify_cache(other, sentences).ok
    want = {k: v for k, v in probekit.outcome(ref).items() if k.layer == 2 and k.seed == 1
            and k.task == "fault:Alpha"}
    assert probekit.outcome(tmp_path / "r0.jsonl") == want
    figures.add("concurrency_passed")
    figures.note(kind="concurrency", scenario="probe + cache info while encode appends "
                 "to another cache", reads=reads, partial_info_ok=info_ok,
                 partial_info_refused=info_refused)


def test_second_encoder_on_the_same_output_refuses(sentences_file, tmp_path, tiny_bert_dir,
                                                   forkserver, figures):
    src, sentences = sentences_file
    out = tmp_path / "c.h5"
    figures.add("concurrency_scenarios")
    proc = forkserver.Process(target=_forkrun.encode,
                              args=(None, str(src), str(tiny_bert_dir), str(out), ENCODE_KWARGS))
    proc.start()
    partial = out.with_name(out.name + ".partial")
    assert wait_for(lambda: partial.exists() or not proc.is_alive())
    assert proc.is_alive(), "the first encoder finished too fast to test"
    with pytest.raises(CacheError, match="in use by another process"):
        encode_sentences(sentences, str(tiny_bert_dir), out, threads=1, **{
            k: v for k, v in ENCODE_KWARGS.items() if k != "threads"})
    proc.join(300)
    assert proc.exitcode == 0
    assert verify_cache(out, sentences).ok
    with open_cache(out) as cache:
        assert cache.n_rows == len(set(sentences))
    figures.add("concurrency_passed")
    figures.note(kind="concurrency", scenario="second encoder while the first writes", ok=True)


def test_two_encoders_started_together(sentences_file, tmp_path, tiny_bert_dir, forkserver,
                                       figures):
    src, sentences = sentences_file
    out = tmp_path / "c.h5"
    figures.add("concurrency_scenarios")
    procs = [forkserver.Process(target=_forkrun.encode_or_refuse,
                                args=(str(src), str(tiny_bert_dir), str(out), ENCODE_KWARGS))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    codes = sorted(p.exitcode for p in procs)
    # one writes; the other refuses, or (if it started after the end) finds nothing to do
    assert codes in ([0, 0], [0, _forkrun.REFUSED]), codes
    assert verify_cache(out, sentences).ok
    assert not out.with_name(out.name + ".partial").exists()
    figures.add("concurrency_passed")
    figures.note(kind="concurrency", scenario="two encoders started together", codes=codes)
