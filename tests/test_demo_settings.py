"""`estratos demo` into a folder holding a demo made with other settings names each setting
that differs, before any work, through the CLI on a tiny model."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Dict, List

import pytest
from click.testing import CliRunner

from estratos.cli import cli


def snapshot(folder: Path) -> Dict[str, str]:
    """Every file under ``folder`` with a digest of its bytes (to show nothing was touched)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def demo(out: Path, model: str, *extra: str):
    args: List[str] = ["demo", "--out", str(out), "--model", model, "--no-progress",
                       "--seeds", "1", "--n-per-task", "200", *extra]
    return CliRunner().invoke(cli, args)


@pytest.fixture(scope="module")
def made(tiny_bert_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo-settings") / "run"
    result = demo(out, str(tiny_bert_dir))
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("extra, needle", [
    (["--n-per-task", "300"], "--n-per-task 200 (data/build_info.json), not 300"),
    (["--seeds", "7"], "--seeds 1 (results.jsonl), not 7"),
])
def test_other_settings_are_named_before_any_work(made, tiny_bert_dir, extra, needle):
    before = snapshot(made)
    result = demo(made, str(tiny_bert_dir), *extra)
    assert result.exit_code == 2, result.output
    assert f"{made} holds a demo made with other settings" in result.output
    assert needle in result.output
    assert "[1/5]" not in result.output  # no step started
    assert snapshot(made) == before


def test_another_model_is_named(made, tiny_bert_dir, tmp_path):
    other = tmp_path / "other-model"
    other.mkdir()
    before = snapshot(made)
    result = demo(made, str(other), "--n-per-task", "300")
    assert result.exit_code == 2, result.output
    assert f"--model {tiny_bert_dir.resolve()} (cache.h5 / results.jsonl), not {other}" in \
        result.output
    assert "--n-per-task 200" in result.output  # every difference, not just the first
    assert snapshot(made) == before


def test_more_seeds_or_the_same_settings_resume(made, tiny_bert_dir):
    results = made / "results.jsonl"
    before = results.read_bytes()
    same = demo(made, str(tiny_bert_dir))
    assert same.exit_code == 0, same.output
    assert results.read_bytes() == before  # every cell was already there
    more = demo(made, str(tiny_bert_dir), "--seeds", "1,2")
    assert more.exit_code == 0, more.output
    seeds = {json.loads(line)["seed"] for line in results.read_text().splitlines()}
    assert seeds == {1, 2}


def test_an_interrupted_cache_is_judged_too(made, tiny_bert_dir, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    shutil.copyfile(made / "cache.h5", out / "cache.h5.partial")  # no results yet
    result = demo(out, str(tmp_path))
    assert result.exit_code == 2 and f"--model {tiny_bert_dir.resolve()}" in result.output


def test_data_of_an_older_generator_is_named(made, tiny_bert_dir, tmp_path):
    """A demo folder made before the task generator changed holds other sentences: its cache
    and results must not be reused as if they were this version's."""
    from estratos.tasks.synthetic import GENERATOR_VERSION

    out = tmp_path / "old"
    shutil.copytree(made, out)
    info_path = out / "data" / "build_info.json"
    info = json.loads(info_path.read_text())
    info["generator_version"] = GENERATOR_VERSION - 1
    info_path.write_text(json.dumps(info))
    before = snapshot(out)
    result = demo(out, str(tiny_bert_dir))
    assert result.exit_code == 2, result.output
    assert f"generator version {GENERATOR_VERSION - 1} (data/build_info.json)" in result.output
    assert snapshot(out) == before
