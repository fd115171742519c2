"""A full disk and an unwritable --out, through the command line: whatever the free space
and whenever it runs out, one ``Error:`` line naming the folder and the bytes needed, a
non-zero exit, no traceback, nothing torn, and the same command completes once space is free.

The real cases run on small tmpfs mounts (root only; skipped elsewhere); the same failures are
also injected through the toolkit's checks (:mod:`estratos.files`), which runs everywhere.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import estratos.files as files
from estratos.cache import cache_info, open_cache, schema
from estratos.cli import cli
from estratos.results import read_results

from probe_toys import write_toml_task
from tests.test_encode import make_sentences, single_thread  # noqa: F401 (autouse)


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def error_lines(output: str):
    return [line for line in output.splitlines() if line.startswith("Error:")]


@pytest.fixture
def tmpfs(tmp_path):
    """``mount(size_kib)`` -> a fresh tmpfs of that size (unmounted afterwards)."""
    mounted = []

    def mount(size_kib: int, *options: str) -> Path:
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        opts = ",".join((f"size={size_kib}k",) + options)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def fill(folder: Path, leave_kib: int) -> Path:
    """Fill ``folder``'s file system until about ``leave_kib`` KiB stay free."""
    free = files.free_bytes(folder)
    filler = folder / "filler"
    with open(filler, "wb") as fh:
        size = max(0, free - leave_kib * 1024)
        if size:
            os.posix_fallocate(fh.fileno(), 0, size)
    return filler


def probe(task_file: Path, cache: Path, out: Path):
    return invoke("probe", "--cache", cache, "--task-file", task_file, "--out", out,
                  "--layers", "0,1,avg", "--seeds", "1,2", "--threads", "1")


def assert_whole(out: Path) -> int:
    """Every line of the results file is whole JSON; returns how many."""
    if not out.exists():
        return 0
    text = out.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), repr(text[-80:])
    for line in text.splitlines():
        json.loads(line)
    return len(text.splitlines())


@pytest.mark.parametrize("leave_kib", [0, 4, 8, 16, 24, 32])
def test_probe_on_a_nearly_full_disk_says_so_in_one_line_and_resumes(tmp_path, tmpfs,
                                                                      leave_kib):
    task_file, cache = write_toml_task(tmp_path, 240, informative=(1, 2), train=160, dev=40)
    disk = tmpfs(64)
    filler = fill(disk, leave_kib)
    out = disk / "r.jsonl"
    result = probe(task_file, cache, out)
    lines = assert_whole(out)
    if result.exit_code == 0:
        assert lines == 6
    else:
        assert result.exit_code == 1, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        [line] = error_lines(result.output)
        assert f"{disk}" in line and "the disk is full" in line and " needs " in line, line
        assert "Traceback" not in result.output and "ERROR" not in result.output
        assert not [p for p in (disk / "r.predictions").glob(".*")]  # no temporary left
    filler.unlink()
    again = probe(task_file, cache, out)
    assert again.exit_code == 0, again.output
    assert assert_whole(out) == 6
    assert len({r.key for r in read_results(out)}) == 6


def test_a_full_disk_injected_at_each_write_of_a_probe_fails_cleanly(tmp_path, monkeypatch):
    """The toolkit's preallocation refused at the 1st, 2nd... write: one line, nothing torn,
    and a rerun completes (the same as a real full disk, on any machine)."""
    task_file, cache = write_toml_task(tmp_path, 240, informative=(1, 2), train=160, dev=40)
    out = tmp_path / "r.jsonl"
    real = files.os.posix_fallocate
    for nth in range(1, 6):
        calls = {"n": 0}

        def refuse(fd, offset, length, nth=nth, calls=calls):
            calls["n"] += 1
            if calls["n"] >= nth:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, offset, length)

        monkeypatch.setattr(files.os, "posix_fallocate", refuse)
        result = probe(task_file, cache, out)
        monkeypatch.setattr(files.os, "posix_fallocate", real)
        assert_whole(out)
        if result.exit_code == 0:
            break
        [line] = error_lines(result.output)
        assert "the disk is full" in line and "needs" in line, result.output
    result = probe(task_file, cache, out)
    assert result.exit_code == 0, result.output
    assert assert_whole(out) == 6


def sentence_file(tmp_path: Path, n: int) -> Path:
    src = tmp_path / "s.txt"
    src.write_text("\n".join(make_sentences(n, seed=21, max_words=30)) + "\n", encoding="utf-8")
    return src


def encode(model: Path, out: Path, src: Path):
    return invoke("encode", "--model", model, "--out", out, "--sentences", src, "--threads",
                  "1", "--batch-tokens", "2000")


@pytest.mark.parametrize("size_kib", [16, 64, 512])
def test_encode_on_a_small_disk_is_refused_before_writing(tiny_bert_dir, tmp_path, tmpfs,
                                                          size_kib):
    src = sentence_file(tmp_path, 2000)
    disk = tmpfs(size_kib)
    result = encode(tiny_bert_dir, disk / "c.h5", src)
    assert result.exit_code == 1, result.output
    [line] = error_lines(result.output)
    assert line.startswith(f"Error: {disk}: ") and "needs about" in line
    assert sorted(p.name for p in disk.iterdir()) == []


def test_encode_holds_its_space_against_a_disk_that_others_fill(tiny_bert_dir, tmp_path,
                                                                tmpfs, monkeypatch):
    """Another process fills the disk after encode checked the free space (just after the
    cache is created): the space encode reserved is not theirs to take, so encode ends and
    the other writer meets the full disk."""
    src = sentence_file(tmp_path, 2500)
    disk = tmpfs(3072)
    from estratos.cache.writer import CacheWriter

    real_create = CacheWriter.create.__func__
    taken = {}

    def create_then_fill(cls, path, attrs, room=None):
        writer = real_create(cls, path, attrs, room)
        if not taken:
            taken["filler"] = fill(disk, 0)
        return writer

    monkeypatch.setattr(CacheWriter, "create", classmethod(create_then_fill))
    result = encode(tiny_bert_dir, disk / "c.h5", src)
    assert result.exit_code == 0, result.output
    assert cache_info(disk / "c.h5")["n_rows"] > 2000
    assert taken["filler"].stat().st_size > 512 * 1024  # the other writer filled the rest
    assert not files.reserve_path(schema.partial_path(disk / "c.h5")).exists()


def test_encode_stops_cleanly_when_the_disk_fills_mid_run_and_resumes(tiny_bert_dir, tmp_path,
                                                                      monkeypatch):
    """A disk that fills up beyond what encode could hold (the space check sees it after
    two blocks): one line, the .partial keeps the blocks written, and the rerun resumes to
    the cache an uninterrupted run writes."""
    src = sentence_file(tmp_path, 2500)
    ref, out = tmp_path / "ref.h5", tmp_path / "c.h5"
    assert encode(tiny_bert_dir, ref, src).exit_code == 0
    real = files.free_bytes
    calls = {"n": 0}

    def filling(folder):
        calls["n"] += 1
        return real(folder) if calls["n"] <= 3 else 1000

    monkeypatch.setattr(files, "free_bytes", filling)
    result = encode(tiny_bert_dir, out, src)
    monkeypatch.setattr(files, "free_bytes", real)
    assert result.exit_code == 1, result.output
    [line] = error_lines(" ".join(result.output.split()).replace(" Error:", "\nError:"))
    assert f"{tmp_path}: the disk is full" in line and "run the same command again" in line
    partial = schema.partial_path(out)
    kept = cache_info(partial)["n_rows"]
    assert 0 < kept < 2500 and not out.exists()
    assert not files.reserve_path(partial).exists()
    result = encode(tiny_bert_dir, out, src)
    assert result.exit_code == 0, result.output
    assert f"{kept} resumed" in result.output
    with open_cache(out) as c, open_cache(ref) as r:
        rows = c.rows_for(r.sentences())
        assert (c.read(rows, "mean") == r.read(range(r.n_rows), "mean")).all()


# --------------------------------------------------------------------------- --out

def test_an_out_under_a_file_is_refused_before_any_training(tmp_path, monkeypatch):
    task_file, cache = write_toml_task(tmp_path, 240, informative=(1, 2), train=160, dev=40)
    (tmp_path / "afile").write_text("x")
    import estratos.probe.grid.units as units

    def no_training(*args, **kwargs):
        raise AssertionError("trained before checking --out")

    monkeypatch.setattr(units, "evaluate_cells", no_training)
    result = probe(task_file, cache, tmp_path / "afile" / "sub" / "r.jsonl")
    assert result.exit_code == 2, result.output
    [line] = error_lines(result.output)
    assert "--out" in line and "Not a directory" in line and str(tmp_path / "afile") in line
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_an_unwritable_out_is_refused_before_any_training(tmp_path, tmpfs, monkeypatch):
    task_file, cache = write_toml_task(tmp_path, 240, informative=(1, 2), train=160, dev=40)
    readonly = tmpfs(64, "ro")
    import estratos.probe.grid.units as units

    monkeypatch.setattr(units, "evaluate_cells", lambda *a, **k: (_ for _ in ()).throw(
        AssertionError("trained before checking --out")))
    result = probe(task_file, cache, readonly / "r.jsonl")
    assert result.exit_code == 2, result.output
    [line] = error_lines(result.output)
    assert "--out" in line and "Read-only file system" in line, line
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_blocks_allocated_past_the_end_keep_the_size_and_cannot_be_taken(tmpfs):
    """What lets HDF5 write without meeting a full disk: the blocks past the file's end are
    its own (the size unchanged, the space gone from the disk), refused when not free, and
    given back by a truncation to the file's own size."""
    disk = tmpfs(256)
    path = disk / "f"
    path.write_bytes(b"x" * 1000)
    fd = os.open(path, os.O_WRONLY)
    try:
        free = files.free_bytes(disk)
        if not files.allocate_beyond_end(fd, 1000, 128 * 1024, folder=disk, what="a test"):
            pytest.skip("no fallocate(FALLOC_FL_KEEP_SIZE) here")
        assert path.stat().st_size == 1000
        assert files.free_bytes(disk) <= free - 128 * 1024
        with pytest.raises(files.DiskFull, match=f"{disk}: the disk is full: a test needs"):
            files.allocate_beyond_end(fd, 200_000, 512 * 1024, folder=disk, what="a test")
    finally:
        os.close(fd)
    files.drop_beyond_end(path)
    assert files.free_bytes(disk) >= free - 8 * 1024 and path.read_bytes() == b"x" * 1000
