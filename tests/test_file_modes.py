"""Files estratos writes get the permissions a plain open() would give them.

Every user-facing file written through a temporary name (report files and plots, the files of
`tasks build`) must respect the umask, and replacing a file must keep its mode; the results
file is appended to in place and must respect the umask too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator, List

import pytest
from click.testing import CliRunner

from estratos.files import create_beside, write_atomic
from estratos.cli import cli


@pytest.fixture
def umask() -> Iterator:
    """Set the process umask for one test (returns a setter) and restore it afterwards."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files_under(folder: Path) -> List[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def run(args: List[str]) -> str:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_build_baseline_and_report_files_respect_the_umask(tmp_path, umask, mask):
    umask(mask)
    expected = 0o666 & ~mask
    data, results, report = tmp_path / "syn", tmp_path / "res.jsonl", tmp_path / "rep"
    run(["tasks", "build", "synthetic-es", "--out", str(data), "--n-per-task", "200",
         "--task", "Tense"])
    run(["baseline", "--tasks", "synthetic-es:Tense", "--data-dir", f"synthetic-es={data}",
         "--out", str(results)])
    pytest.importorskip("matplotlib")
    run(["report", str(results), "--out", str(report), "--plot"])
    written = files_under(data) + [results] + files_under(report)
    assert any(p.suffix == ".png" for p in written)
    assert {p.name: oct(mode(p)) for p in written} == {p.name: oct(expected) for p in written}
    assert not [p for p in tmp_path.rglob(".*") if p.name.endswith(".tmp")]


def test_rewriting_keeps_an_existing_files_mode(tmp_path, umask):
    umask(0o022)
    data, results, report = tmp_path / "syn", tmp_path / "res.jsonl", tmp_path / "rep"
    run(["tasks", "build", "synthetic-es", "--out", str(data), "--n-per-task", "200",
         "--task", "Tense"])
    run(["baseline", "--tasks", "synthetic-es:Tense", "--data-dir", f"synthetic-es={data}",
         "--out", str(results)])
    run(["report", str(results), "--out", str(report), "--format", "md,csv"])
    shared = [data / "Tense.txt", report / "report.md"]
    for path in shared:
        path.chmod(0o664)  # a colleague's group may write
    (report / "groups.csv").chmod(0o600)  # someone made this one private
    run(["tasks", "build", "synthetic-es", "--out", str(data), "--n-per-task", "200",
         "--task", "Tense", "--seed", "7"])
    run(["report", str(results), "--out", str(report), "--format", "md,csv"])
    assert [oct(mode(p)) for p in shared] == [oct(0o664)] * 2
    assert oct(mode(report / "groups.csv")) == oct(0o600)
    assert oct(mode(data / "build_info.json")) == oct(0o644)


def test_create_beside_takes_the_mode_of_another_file(tmp_path, umask):
    umask(0o077)
    model = tmp_path / "complete.h5"
    model.write_bytes(b"x")
    model.chmod(0o640)
    fd, tmp = create_beside(tmp_path / "complete.h5.partial", mode_of=model)
    os.close(fd)
    assert tmp.parent == tmp_path and tmp.name.startswith(".complete.h5.partial.")
    assert oct(mode(tmp)) == oct(0o640)
    fd, fresh = create_beside(tmp_path / "new.txt")
    os.close(fd)
    assert oct(mode(fresh)) == oct(0o600)  # 0666 less umask 077
    assert fresh != tmp


def test_write_atomic_leaves_nothing_when_writing_fails(tmp_path, umask):
    umask(0o022)
    target = tmp_path / "out.md"
    target.write_text("old")
    with pytest.raises(TypeError):
        write_atomic(target, 12345)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.md"]
