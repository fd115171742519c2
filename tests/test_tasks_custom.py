"""Custom tasks: TOML spec + TSV or JSON-lines files, loadable with --task-file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.errors import InputError
from estratos.tasks import DataDirs, load_task, load_task_file, select_tasks

TSV_SPEC = """
name = "Polarity"
group = "SC"
language = "es"
format = "tsv"
combiner = "single"
protocol = "split"
labels = ["neg", "pos"]
data_dir = "data"

[files]
train = "train.tsv"
dev = "dev.tsv"
test = "test.tsv"

[columns]
sentences = [1]
label = 0
header = true

[classifier]
max_epoch = 15
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture()
def tsv_task(tmp_path) -> Path:
    for split in ("train", "dev", "test"):
        write(tmp_path / "data" / f"{split}.tsv",
              f"label\ttext\npos\tMe encanta ({split})\nneg\tLo odio ({split})\n")
    return write(tmp_path / "polarity.toml", TSV_SPEC)


def test_tsv_custom_task_loads(tsv_task):
    spec = load_task_file(tsv_task)
    assert spec.id == "custom:Polarity" and spec.classifier == {"max_epoch": 15}
    data = load_task(spec, DataDirs.parse([], env={}))
    assert data.sizes == {"train": 2, "dev": 2, "test": 2}
    assert data.labels == ("neg", "pos")
    np.testing.assert_array_equal(data.splits["train"].labels, [1, 0])
    assert select_tasks("custom", extra=[spec]) == [spec]
    assert select_tasks("Polarity,es-senteval:MC", extra=[spec])[-1] == spec


def test_jsonl_custom_task_with_scores(tmp_path):
    rows = [{"sentences": ["a", "b"], "score": 4.0}, {"sentences": ["c", "d"], "score": 1}]
    write(tmp_path / "sim.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    spec_path = write(tmp_path / "sim.toml", """
name = "Sim"
suite = "mine"
group = "SS"
format = "jsonl"
combiner = "pair"
protocol = "cosine"
score_range = [0, 5]
[files]
set1 = "sim.jsonl"
""")
    spec = load_task_file(spec_path)
    assert spec.metric == "pearson"
    data = load_task(spec, DataDirs())
    assert data.protocol == "cosine" and data.sizes == {"set1": 2}
    np.testing.assert_allclose(data.splits["set1"].labels, [4.0, 1.0])


def test_jsonl_bad_lines(tmp_path):
    write(tmp_path / "d.jsonl", '{"sentence": "hola", "label": "x"}\n{"sentence": "adiós"\n')
    spec = load_task_file(write(tmp_path / "t.toml", """
name = "T"
group = "SC"
format = "jsonl"
combiner = "single"
protocol = "kfold"
[files]
train = "d.jsonl"
test = "d.jsonl"
"""))
    with pytest.raises(InputError, match="invalid JSON") as info:
        load_task(spec, DataDirs())
    assert info.value.line == 2


@pytest.mark.parametrize("text, match, line", [
    ("name = \n", "invalid TOML", 1),
    ("name = 'x'\n", "missing required keys: group, format", None),
    ("colour = 'red'\n" + TSV_SPEC, "unknown keys: colour", None),
    (TSV_SPEC.replace('combiner = "single"', 'combiner = "triple"'), "unknown combiner", None),
    (TSV_SPEC.replace('protocol = "split"', 'protocol = "magic"'), "unknown protocol", None),
    (TSV_SPEC.replace("sentences = [1]", "sentences = [1, 2]"), "takes 1 sentences", None),
    (TSV_SPEC.replace("max_epoch = 15", "epochs = 15"), "unknown classifier keys: epochs",
     None),
    (TSV_SPEC.replace('name = "Polarity"', 'name = "a b"'), "may only hold", None),
])
def test_bad_task_files_name_the_file(tmp_path, text, match, line):
    path = write(tmp_path / "bad.toml", text)
    with pytest.raises(InputError, match=match) as info:
        load_task_file(path)
    assert Path(info.value.path) == path and info.value.line == line


def test_missing_task_file(tmp_path):
    with pytest.raises(InputError, match="missing task file"):
        load_task_file(tmp_path / "nope.toml")


def test_cli_with_task_file(tsv_task):
    runner = CliRunner()
    result = runner.invoke(cli, ["tasks", "show", "custom:Polarity", "--task-file", str(tsv_task)])
    assert result.exit_code == 0, result.output
    assert "train: 2 examples" in result.output
    result = runner.invoke(cli, ["tasks", "check", "custom", "--task-file", str(tsv_task)])
    assert result.exit_code == 0 and "no problems" in result.output
    write(tsv_task.parent / "data" / "dev.tsv", "label\ttext\nmeh\tasí así\n")
    result = runner.invoke(cli, ["tasks", "check", "custom", "--task-file", str(tsv_task)])
    assert result.exit_code == 1 and "dev.tsv:2: label 'meh' is not in the label set" in \
        result.output


def test_custom_task_without_train_gets_the_held_out_fallback(tmp_path):
    rows = "".join(f"{'pos' if i % 3 else 'neg'}\tfrase {i}\n" for i in range(40))
    write(tmp_path / "data" / "dev.tsv", "label\ttext\n" + rows)
    write(tmp_path / "data" / "test.tsv", "label\ttext\npos\totra\n")
    spec_path = write(tmp_path / "t.toml", TSV_SPEC.replace('train = "train.tsv"\n', ""))
    data = load_task(load_task_file(spec_path), DataDirs())
    assert data.sizes == {"train": 36, "dev": 4, "test": 1}
    assert "no train file" in data.fallback and "held-out 10%" in data.fallback
    dev = data.splits["dev"].labels
    assert sorted(dev.tolist()) == [0, 1, 1, 1]  # 13 neg / 27 pos -> 1 and 3 held out


def test_custom_task_cannot_shadow_a_builtin(tmp_path, tsv_task):
    from estratos.errors import TaskError
    text = tsv_task.read_text().replace('name = "Polarity"',
                                        'name = "TASS1"\nsuite = "es-senteval"')
    spec = load_task_file(write(tmp_path / "shadow.toml", text))
    with pytest.raises(TaskError, match="id of a built-in task"):
        select_tasks("TASS1", extra=[spec])
