"""Bad input: one clear InputError naming file and line, and `tasks check` lists them all."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.errors import InputError
from estratos.tasks import DataDirs, check_tasks, get_spec, load_task
from estratos.tasks.safe_pickle import load_pickle


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def load(task_id: str, root: Path):
    return load_task(get_spec(task_id), DataDirs.parse([str(root)]))


def tass(root: Path, train: str) -> Path:
    folder = root / "senteval" / "TASS" / "task1"
    write(folder / "dev.txt", "bien\t1\n")
    write(folder / "test.txt", "mal\t0\n")
    return write(folder / "train.txt", train)


def expect(task_id: str, root: Path, path: Path, line, match: str) -> InputError:
    with pytest.raises(InputError, match=match) as info:
        load(task_id, root)
    assert Path(info.value.path) == path
    assert info.value.line == line
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert str(info.value).startswith(where)
    return info.value


def test_wrong_column_count(tmp_path):
    path = tass(tmp_path, "hola\t1\nadiós\t2\textra\n")
    expect("es-senteval:TASS1", tmp_path, path, 2, "expected 2 TAB-separated columns, found 3")


def test_missing_label(tmp_path):
    path = tass(tmp_path, "hola\t1\nadiós\t \n")
    expect("es-senteval:TASS1", tmp_path, path, 2, "missing label")


def test_label_outside_the_label_set(tmp_path):
    path = tass(tmp_path, "hola\t1\nadiós\t7\n")
    expect("es-senteval:TASS1", tmp_path, path, 2, "label '7' is not in the label set")


def test_invalid_utf8(tmp_path):
    path = tass(tmp_path, b"hola\t1\nadi\xf3s\t2\n")
    expect("es-senteval:TASS1", tmp_path, path, 2, "invalid utf-8")


def test_empty_file(tmp_path):
    path = tass(tmp_path, "")
    expect("es-senteval:TASS1", tmp_path, path, None, "empty file")
    path = tass(tmp_path, "\n  \n")
    expect("es-senteval:TASS1", tmp_path, path, None, "empty file")


def test_empty_sentence_after_normalization(tmp_path):
    path = tass(tmp_path, "hola\t1\n \u3000 \t2\n")
    expect("es-senteval:TASS1", tmp_path, path, 2, "empty sentence")


def test_missing_required_file(tmp_path):
    folder = tmp_path / "senteval" / "TASS" / "task1"
    write(folder / "train.txt", "hola\t1\n")
    write(folder / "dev.txt", "bien\t1\n")
    expect("es-senteval:TASS1", tmp_path, folder / "test.txt", None, "missing required file")


def sick(root: Path, row: str) -> Path:
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgement\n"
    folder = root / "senteval" / "SICK"
    for name in ("SICK_trial.txt", "SICK_test.txt"):
        write(folder / name, header + "1\tA\tB\t3.0\tNEUTRAL\n")
    return write(folder / "SICK_train.txt", header + "1\tA\tB\t3.0\tNEUTRAL\n" + row)


def test_non_numeric_and_out_of_range_score(tmp_path):
    path = sick(tmp_path, "2\tC\tD\talto\tNEUTRAL\n")
    expect("es-senteval:SICKRelatedness", tmp_path, path, 3, "score is not a number: 'alto'")
    path = sick(tmp_path, "2\tC\tD\t7.5\tNEUTRAL\n")
    expect("es-senteval:SICKRelatedness", tmp_path, path, 3, r"outside \[1, 5\]")
    path = sick(tmp_path, "2\tC\tD\t3\tMAYBE\n")
    expect("es-senteval:SICKEntailment", tmp_path, path, 3, "'MAYBE' is not in the label set")


def test_sts_gold_and_input_must_align(tmp_path):
    folder = tmp_path / "senteval" / "STS" / "STS17-es-test"
    write(folder / "STS.input.track3.es-es.txt", "a\tb\nc\td\n")
    gold = write(folder / "STS.gs.track3.es-es.txt", "4.0\n")
    expect("es-senteval:STS17", tmp_path, gold, None, "1 gold scores for 2 sentence pairs")
    write(gold, "4.0\nnada\n")
    expect("es-senteval:STS17", tmp_path, gold, 2, "gold score is not a number")


def test_nli_files_must_have_the_same_length(tmp_path):
    folder = tmp_path / "senteval" / "NLI"
    for split in ("train", "dev", "test"):
        write(folder / f"s1.{split}", "uno\ndos\n")
        write(folder / f"s2.{split}", "tres\ncuatro\n")
        write(folder / f"labels.{split}", "neutral\nentailment\n")
    write(folder / "s2.dev", "tres\n")
    with pytest.raises(InputError, match="aligned files differ in length") as info:
        load("es-senteval:NLI", tmp_path)
    assert Path(info.value.path) == folder / "s2.dev" and info.value.line == 2


def test_sqc_label_without_coarse_class(tmp_path):
    folder = tmp_path / "senteval" / "SQC"
    write(folder / "test.txt", "NUM:count ¿ Cuántos ?\n")
    path = write(folder / "train.txt", "HUM:ind ¿ Quién ?\nsin etiqueta\n")
    expect("es-senteval:SQC", tmp_path, path, 2, "expected 'COARSE:fine question'")


def test_probing_unknown_split_token(tmp_path):
    path = write(tmp_path / "senteval" / "Probing" / "past_present.txt",
                 "tr\tPast\tCorrió .\nxx\tPres\tCorre .\n")
    expect("es-senteval:Tense", tmp_path, path, 2, "unknown split 'xx'")


def test_bso_wrong_columns(tmp_path):
    folder = tmp_path / "discoeval" / "BSO" / "wiki"
    write(folder / "valid.txt", "a\tb\n")
    write(folder / "test.txt", "a\tb\n")
    path = write(folder / "train.txt", "a\tb\nsolo una\n")
    expect("es-discoeval:BSOwiki", tmp_path, path, 2, "expected 2 TAB-separated columns")


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned-by-pickle",))


def rst_files(root: Path, train: bytes) -> Path:
    folder = root / "discoeval" / "RST"
    good = pickle.dumps([["NS-Causa", ["a"], ["b"]]])
    write(folder / "RST_DEV.pkl", good)
    write(folder / "RST_TEST.pkl", good)
    return write(folder / "RST_TRAIN.pkl", train)


def test_pickle_naming_a_global_is_refused_without_running_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = rst_files(tmp_path, pickle.dumps([["NS-Causa", ["a"], [_Evil()]]]))
    err = expect("es-discoeval:RST", tmp_path, path, None, "refusing to unpickle")
    assert "system" in str(err)
    assert not (tmp_path / "pwned-by-pickle").exists()


def test_malformed_pickles(tmp_path):
    path = rst_files(tmp_path, b"\x80\x04garbage")
    expect("es-discoeval:RST", tmp_path, path, None, "not a readable pickle")
    path = rst_files(tmp_path, pickle.dumps([["NS-Causa", ["a"]]]))
    expect("es-discoeval:RST", tmp_path, path, None, "record 1: expected")
    path = rst_files(tmp_path, pickle.dumps([["NS-Causa", ["a"], [""]]]))
    expect("es-discoeval:RST", tmp_path, path, None, "record 1: empty right EDU")
    path = rst_files(tmp_path, pickle.dumps({"not": "a list"}))
    expect("es-discoeval:RST", tmp_path, path, None, "expected a list of records")


def test_restricted_unpickler_allows_plain_data(tmp_path):
    data = [("rel", ("x",), ["y", "z"]), {"k": 1.5}, None, True, b"raw"]
    assert load_pickle(write(tmp_path / "ok.pkl", pickle.dumps(data))) == data


def test_check_reports_every_problem_and_the_cli_exits_1(tmp_path):
    path = tass(tmp_path, "hola\t1\nmal formada\nadiós\t9\nbien\t2\n\t1\n")
    problems = check_tasks([get_spec("es-senteval:TASS1")], DataDirs.parse([str(tmp_path)]))
    assert [p.split(": ")[0] for p in problems] == [f"{path}:2", f"{path}:3", f"{path}:5"]
    result = CliRunner().invoke(cli, ["tasks", "check", "es-senteval:TASS1",
                                      "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert f"{path}:3: label '9' is not in the label set" in result.output
    assert "3 problems in 1 tasks" in result.output


def test_cli_reports_bad_input_as_one_line_without_traceback(tmp_path):
    path = tass(tmp_path, "hola\t1\nadiós\n")
    result = CliRunner().invoke(cli, ["tasks", "show", "es-senteval:TASS1",
                                      "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip() == (f"Error: {path}:2: expected 2 TAB-separated columns, "
                                     "found 1")
    assert "Traceback" not in result.output


def test_unknown_task_and_bad_data_dir_options():
    runner = CliRunner()
    result = runner.invoke(cli, ["tasks", "show", "TAS1"])
    assert result.exit_code == 2 and "closest: TASS1" in result.output
    result = runner.invoke(cli, ["tasks", "list", "--data-dir", "es-sentevl=/x"])
    assert result.exit_code == 2 and "--data-dir" in result.output
