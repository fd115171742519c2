"""Damage a cache (or a task, or a results file) after the fact: ``cache verify`` and
``probe`` must detect every injected fault and refuse with an estratos error, never read
fill values or give other numbers silently."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import probekit
import pytest
from click.testing import CliRunner
from crashkit import make_sentences

from estratos.cache import cache_info, merge_shards, open_cache, verify_cache
from estratos.cli import cli
from estratos.encode import encode_sentences
from estratos.errors import CacheError, EstratosError, MissingSentences, ResultsError
from estratos.probe.command import probe_tasks
from estratos.probe.config import ProbeConfig
from estratos.results import read_results

N_ROWS = 1100  # three 512-row chunks per hidden state
PROBE = {"layers": "0,2,avg", "seeds": "1", "threads": 1}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A clean cache with its tasks, and the results of probing it."""
    root = tmp_path_factory.mktemp("corruption")
    cache, files, sentences = probekit.build(root, n=N_ROWS)
    files = [str(f) for f in files[:1]]
    ref = root / "clean.jsonl"
    probe_tasks(cache, "", ref, ProbeConfig.build(**PROBE), task_files=files)
    return cache, files, sentences, probekit.outcome(ref)


def _copy(clean, tmp_path) -> Path:
    target = tmp_path / "damaged.h5"
    shutil.copyfile(clean[0], target)
    return target


def _flip(path: Path, offset: int, n: int = 8) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        data = bytearray(fh.read(n))
        fh.seek(offset)
        fh.write(bytes(b ^ 0x5A for b in data))


def _chunk_offset(path: Path, dataset: str, index: int) -> tuple:
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info(index)
        return info.byte_offset, info.size


def _must_refuse_or_match(figures, cache: Path, files, want) -> str:
    """Probe the damaged cache: an estratos error, or exactly the clean numbers."""
    out = cache.with_suffix(".jsonl")
    try:
        probe_tasks(cache, "", out, ProbeConfig.build(**PROBE), task_files=files)
    except EstratosError as exc:
        assert not out.exists() or not read_results(out), "refused, yet wrote results"
        return f"refused: {type(exc).__name__}"
    assert probekit.outcome(out) == want, "a damaged cache gave other numbers silently"
    return "same numbers"


def _cli_verify_fails(path: Path) -> None:
    res = CliRunner().invoke(cli, ["cache", "verify", str(path)])
    assert res.exit_code == 1, res.output
    assert ("Traceback" not in res.output and res.exception is None) or isinstance(
        res.exception, SystemExit)


#: (dataset, chunk index, offset inside the chunk as a fraction of its size)
FLIPS = [("vectors/cls", 0, 0.5), ("vectors/cls", 5, 0.1), ("vectors/cls", 11, 0.9),
         ("vectors/mean", 2, 0.5), ("keys", 0, 0.1), ("sentences", 0, 0.5)]


@pytest.mark.parametrize("dataset,chunk,where", FLIPS)
def test_flipped_bytes_are_detected(dataset, chunk, where, clean, tmp_path, figures):
    damaged = _copy(clean, tmp_path)
    offset, size = _chunk_offset(damaged, dataset, chunk)
    _flip(damaged, offset + int(where * (size - 8)))
    figures.add("corruptions_injected")
    report = verify_cache(damaged)
    assert not report.ok, f"verify missed a flip in {dataset} chunk {chunk}"
    _cli_verify_fails(damaged)
    outcome = _must_refuse_or_match(figures, damaged, clean[1], clean[3])
    if dataset == "vectors/cls" or dataset == "keys":  # what probe reads must be refused
        assert outcome.startswith("refused"), outcome
    figures.add("corruptions_detected")
    figures.note(kind="corruption", fault=f"flip {dataset} chunk {chunk}",
                 verify=report.problems[0][:100], probe=outcome)


@pytest.mark.parametrize("fraction", [0.999, 0.9, 0.5, 0.01])
def test_truncated_file_is_refused(fraction, clean, tmp_path, figures):
    damaged = _copy(clean, tmp_path)
    size = damaged.stat().st_size
    with open(damaged, "r+b") as fh:
        fh.truncate(int(size * fraction))
    figures.add("corruptions_injected")
    for check in (verify_cache, cache_info, open_cache):
        try:
            result = check(damaged)
        except CacheError:
            continue
        if check is verify_cache:
            assert not result.ok
        elif check is open_cache:
            result.close()
            raise AssertionError("open_cache accepted a truncated file")
    _cli_verify_fails(damaged)
    outcome = _must_refuse_or_match(figures, damaged, clean[1], clean[3])
    assert outcome.startswith("refused")
    figures.add("corruptions_detected")
    figures.note(kind="corruption", fault=f"truncated to {fraction:.1%}", probe=outcome)


def test_nan_rows_and_forged_attributes_are_refused(clean, tmp_path, figures):
    for fault in ("nan", "incomplete", "n_done"):
        damaged = _copy(clean, tmp_path)
        with h5py.File(damaged, "r+") as f:
            if fault == "nan":
                f["vectors/cls"][7, 2, 3] = np.nan
            elif fault == "incomplete":
                f.attrs["complete"] = False
            else:
                f.attrs["n_done"] = N_ROWS + 10
        figures.add("corruptions_injected")
        assert not verify_cache(damaged).ok
        assert _must_refuse_or_match(figures, damaged, clean[1], clean[3]).startswith("refused")
        figures.add("corruptions_detected")
        figures.note(kind="corruption", fault=fault, probe="refused")
        damaged.unlink()


def test_a_task_sentence_changed_after_encoding(clean, tmp_path, figures):
    cache, files, sentences, _ = clean
    folder = tmp_path / "task"
    shutil.copytree(Path(files[0]).parent, folder)
    test_tsv = folder / "test.tsv"
    lines = test_tsv.read_text(encoding="utf-8").splitlines()
    label, text = lines[3].split("\t")
    lines[3] = f"{label}\t{text} (editado)"
    test_tsv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    figures.add("corruptions_injected")
    out = tmp_path / "r.jsonl"
    with pytest.raises(MissingSentences, match="1 sentence"):
        probe_tasks(cache, "", out, ProbeConfig.build(**PROBE),
                    task_files=[str(folder / "task.toml")])
    assert not out.exists()
    edited = [line.split("\t")[1] for line in lines]
    report = verify_cache(cache, edited)
    assert not report.ok and report.missing == 1
    res = CliRunner().invoke(cli, ["probe", "--cache", str(cache), "--task-file",
                                   str(folder / "task.toml"), "--out", str(out)])
    assert res.exit_code == 1 and "estratos encode" in res.output
    figures.add("corruptions_detected")
    figures.note(kind="corruption", fault="task sentence edited after encoding",
                 probe="refused: MissingSentences")


def test_a_shard_deleted_behind_a_merged_cache(tiny_bert_dir, tmp_path, figures):
    sentences = make_sentences(120, seed=4)
    out = tmp_path / "c.h5"
    for i in range(3):
        encode_sentences(sentences, str(tiny_bert_dir), out, shard=(i, 3), threads=1,
                         progress=False)
    shards = sorted(tmp_path.glob("c.shard-*-of-3.h5"))
    merged = tmp_path / "merged.h5"
    merge_shards(merged, shards)
    shards[1].unlink()
    figures.add("corruptions_injected")
    # the merged cache holds its own copy of every row: still whole
    assert verify_cache(merged, sentences).ok
    # and merging again without the shard is refused, naming it
    with pytest.raises(CacheError, match="missing shard"):
        merge_shards(tmp_path / "again.h5", [shards[0], shards[2]])
    with pytest.raises(CacheError, match="no such shard"):
        merge_shards(tmp_path / "again.h5", shards)
    assert not (tmp_path / "again.h5").exists()
    assert not (tmp_path / "again.h5.partial").exists()
    figures.add("corruptions_detected")
    figures.note(kind="corruption", fault="shard deleted behind a merged cache",
                 probe="merged cache self-contained; re-merge refused")


def test_a_damaged_results_line_is_refused(probe_grid, tmp_path, figures):
    cache, files, ref, _ = probe_grid
    out = tmp_path / "r.jsonl"
    lines = ref.read_bytes().splitlines(keepends=True)
    lines[4] = lines[4][:20] + b"\x00garbage" + lines[4][28:]
    out.write_bytes(b"".join(lines))
    figures.add("corruptions_injected")
    with pytest.raises(ResultsError, match=r"r\.jsonl:5:"):
        read_results(out)
    with pytest.raises(ResultsError, match=r"r\.jsonl:5:"):
        probe_tasks(cache, "", out, ProbeConfig.build(**probekit.PROBE_KWARGS),
                    task_files=files)
    assert out.read_bytes() == b"".join(lines)  # nothing appended to a file it cannot read
    figures.add("corruptions_detected")
    figures.note(kind="corruption", fault="results line damaged", probe="refused: ResultsError")


def test_seeded_random_byte_flips_never_change_numbers_silently(clean, tmp_path, figures,
                                                               forkserver):
    """Flips anywhere in the file (metadata, heaps, free space): each one is detected by
    verify or probe, or leaves every number probe reads exactly as it was. verify runs in a
    child under a time limit: libhdf5 can loop forever on a corrupted string heap."""
    import json

    import _forkrun

    rng = np.random.default_rng(20261122)
    size = clean[0].stat().st_size
    outcomes = {"detected": 0, "harmless": 0, "verify_hung": 0}
    for offset in rng.integers(0, size - 8, size=12):
        damaged = _copy(clean, tmp_path)
        _flip(damaged, int(offset), 4)
        report = tmp_path / "verify.json"
        report.unlink(missing_ok=True)
        proc = forkserver.Process(target=_forkrun.verify_to_file, args=(str(damaged), str(report)))
        proc.start()
        proc.join(20)
        if proc.is_alive():
            proc.kill()
            proc.join()
            ok = None
        else:
            assert proc.exitcode == 0, "verify crashed instead of reporting"
            ok = json.loads(report.read_text())["ok"]
        outcome = _must_refuse_or_match(figures, damaged, clean[1], clean[3])
        if ok is None:
            outcomes["verify_hung"] += 1
        elif not ok or outcome.startswith("refused"):
            outcomes["detected"] += 1
        else:
            outcomes["harmless"] += 1
        damaged.unlink()
        damaged.with_suffix(".jsonl").unlink(missing_ok=True)
    figures.note(kind="random-flips", fault="12 seeded random 4-byte flips", **outcomes)
