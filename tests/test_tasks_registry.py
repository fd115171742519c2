"""Registry, selection expressions, data folders, spec immutability and cheap listing."""

from __future__ import annotations

import builtins
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.errors import OptionError, TaskError
from estratos.tasks import (SYNTHETIC_ES_DEFAULT_DIR, DataDirs, all_specs, describe_task,
                            get_spec, list_tasks, select_tasks)
from estratos.tasks.formats import format_names


def ids(specs):
    return [s.id for s in specs]


def test_suites_and_counts():
    suites = {}
    for spec in all_specs():
        suites[spec.suite] = suites.get(spec.suite, 0) + 1
    assert suites["es-senteval"] == 21 and suites["es-discoeval"] == 11
    assert suites["synthetic-es"] == 9
    assert suites["en-discoeval"] >= 12 and suites["en-senteval"] >= 20
    assert all(spec.format in format_names() for spec in all_specs())


def test_selection_forms():
    assert ids(select_tasks("es-senteval:TASS1")) == ["es-senteval:TASS1"]
    assert len(select_tasks("es-discoeval")) == 11
    assert ids(select_tasks("es-discoeval:SP")) == ["es-discoeval:SPthesis",
                                                    "es-discoeval:SPnews", "es-discoeval:SPwiki"]
    assert ids(select_tasks("TASS2")) == ["es-senteval:TASS2"]
    # registry order, no duplicates, whatever the order asked
    assert ids(select_tasks("es-senteval:SQC, TASS1 ,es-senteval:TASS1")) == [
        "es-senteval:TASS1", "es-senteval:SQC"]
    assert len(select_tasks("es-senteval:LPT")) == 9


def test_selection_errors_suggest_close_matches():
    with pytest.raises(TaskError, match=r"unknown task 'TAS1' \(closest: TASS1"):
        select_tasks("TAS1")
    with pytest.raises(TaskError, match="ambiguous; say which: es-discoeval:RST, "
                                        "en-discoeval:RST"):
        select_tasks("RST")
    with pytest.raises(TaskError, match="closest: es-discoeval"):
        select_tasks("es-discoevl:SP")
    with pytest.raises(TaskError, match="closest: SP"):
        select_tasks("es-discoeval:SPP")
    with pytest.raises(TaskError, match="empty task selection"):
        select_tasks(" , ")
    assert get_spec("es-senteval:MC").name == "MC"
    with pytest.raises(TaskError):
        get_spec("RST")


def test_spec_settings_are_read_only_and_per_task():
    dc, ssp = get_spec("es-discoeval:DCopus"), get_spec("es-discoeval:SSPmlsum")
    with pytest.raises(TypeError):
        dc.classifier["nhid"] = 0  # type: ignore[index]
    assert dc.classifier["nhid"] == 2000 and "nhid" not in ssp.classifier
    assert get_spec("es-senteval:WordContent").classifier == {"nhid": 0}
    assert get_spec("es-senteval:NLI").classifier == {"max_epoch": 15, "epoch_size": 1,
                                                      "l2_grid": "noreg"}
    assert get_spec("es-senteval:PAWS").extra_metrics == ("f1",)
    assert get_spec("es-senteval:SICKRelatedness").score_range == (1.0, 5.0)
    tense = get_spec("synthetic-es:Tense")
    assert (tense.group, tense.language, tense.protocol, tense.combiner) == (
        "LPT", "es", "split", "single")


def test_data_dirs_parsing(tmp_path):
    dirs = DataDirs.parse([str(tmp_path), "en-senteval=/data/senteval"])
    assert dirs.for_suite("es-senteval") == tmp_path
    assert dirs.for_suite("en-senteval") == Path("/data/senteval")
    assert DataDirs.parse([], env={"ESTRATOS_DATA": str(tmp_path)}).for_suite(
        "es-discoeval") == tmp_path
    none = DataDirs.parse([], env={})
    assert none.for_suite("synthetic-es") == SYNTHETIC_ES_DEFAULT_DIR
    with pytest.raises(OptionError, match="--data-dir"):
        none.for_suite("es-senteval")
    with pytest.raises(OptionError, match="unknown suite 'es-sentval'"):
        DataDirs.parse(["es-sentval=/x"])
    with pytest.raises(OptionError, match="more than one folder"):
        DataDirs.parse(["/a", "/b"])
    # a folder whose name holds '=' is still a folder
    assert DataDirs.parse(["/data/run=3"]).default == Path("/data/run=3")


def test_listing_reads_no_data(es_data_dir, monkeypatch):
    # but the tasks whose dev split is held out of a training pool: whether that pool is
    # used depends on its contents (see test_listing_says_what_probe_does_with_a_pool)
    from estratos.tasks.loading import plan_task

    dirs = DataDirs.parse([str(es_data_dir)])
    specs = [s for s in all_specs() if plan_task(s, dirs).holdout_from is None]
    real_open = builtins.open
    data_root = str(es_data_dir)

    def guarded_open(file, *args, **kwargs):
        if str(file).startswith(data_root):
            raise AssertionError(f"listing must not read data files ({file})")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)
    rows = list_tasks(specs, dirs)
    by_id = {r["id"]: r for r in rows}
    assert by_id["es-senteval:TASS1"]["present"] is True
    assert by_id["es-senteval:PAWS"]["protocol"] == "inner-kfold"
    assert by_id["en-senteval:MR"]["present"] is False
    assert "es-discoeval:DCwiki" not in by_id and "es-senteval:Depth" not in by_id


def test_listing_says_what_probe_does_with_a_pool(tmp_path):
    # X-Probe's tree_depth va.txt repeats its te.txt: the test file alone is split, and
    # `tasks list` says so with the sizes probe uses, as `tasks show` does
    folder = tmp_path / "senteval" / "Probing-xprobe"
    rows = "".join(f"frase {i} con {'palabras ' * (i % 5)}.\t{3 + i % 5}\n" for i in range(500))
    for name, va in (("tree_depth", rows), ("past_present", rows[:len(rows) // 2])):
        (folder / name).mkdir(parents=True)
        (folder / name / "te.txt").write_text(rows, encoding="utf-8")
        other = "".join(f"otra {i}.\t{3 + i % 5}\n" for i in range(300))
        (folder / name / "va.txt").write_text(va if name == "tree_depth" else other,
                                              encoding="utf-8")
    result = CliRunner().invoke(cli, ["tasks", "list", "es-senteval:Depth,es-senteval:Tense",
                                      "--sizes", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    depth = next(x for x in result.output.splitlines() if x.startswith("es-senteval:Depth"))
    tense = next(x for x in result.output.splitlines() if x.startswith("es-senteval:Tense"))
    assert depth.split()[-5:-2] == ["350", "50", "100"], depth
    assert tense.split()[-5:-2] == ["270", "30", "500"], tense
    assert "repeats 100% of the test file" in result.output
    assert "so the test file alone is split" in result.output
    shown = CliRunner().invoke(cli, ["tasks", "show", "es-senteval:Depth", "--data-dir",
                                     str(tmp_path)])
    assert "train: 350 examples" in shown.output and "test: 100 examples" in shown.output


def test_describe_without_data_dir_is_not_an_error():
    info = describe_task(get_spec("es-senteval:TASS1"), DataDirs.parse([], env={}))
    assert info["present"] is False and "--data-dir" in info["missing"][0]


def test_cli_list_json_keys(es_data_dir):
    result = CliRunner().invoke(cli, ["tasks", "list", "es-senteval:TASS1,PAWS", "--format",
                                      "json", "--sizes", "--data-dir", str(es_data_dir)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["id"] for r in rows] == ["es-senteval:TASS1", "es-senteval:PAWS"]
    for row in rows:
        assert {"id", "group", "language", "sizes", "n_classes", "protocol", "metric",
                "present", "fallback"} <= set(row)
        assert {"train", "dev", "test"} <= set(row["sizes"])
    assert rows[0]["sizes"] == {"train": 4802, "dev": 2443, "test": 7260}
    assert rows[1]["fallback"] and rows[1]["sizes"]["all"] == 2000


def test_cli_list_table_and_show(es_data_dir):
    runner = CliRunner()
    result = runner.invoke(cli, ["tasks", "list", "es-discoeval", "--data-dir",
                                 str(es_data_dir)])
    assert result.exit_code == 0
    assert "es-discoeval:SPwiki" in result.output and "present *" in result.output
    assert "*1 no train file" in result.output
    result = runner.invoke(cli, ["tasks", "show", "es-senteval:STS14", "--data-dir",
                                 str(es_data_dir)])
    assert result.exit_code == 0, result.output
    assert "news: 480 examples" in result.output and "cosine" in result.output
    result = runner.invoke(cli, ["tasks", "show", "es-senteval:TASS1", "--format", "json",
                                 "--data-dir", str(es_data_dir)])
    info = json.loads(result.output)
    assert info["splits"]["train"]["size"] == 4802 and info["n_classes"] == 3


def test_cli_check_real_data_passes(es_data_dir):
    result = CliRunner().invoke(cli, ["tasks", "check", "es-senteval:TASS1,es-discoeval:RST",
                                      "--data-dir", str(es_data_dir)])
    assert result.exit_code == 0, result.output
    assert "checked 2 tasks: no problems" in result.output


def test_check_without_any_data_is_an_option_error(tmp_path):
    result = CliRunner().invoke(cli, ["tasks", "check", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "no data of any of" in result.output


def test_check_collects_missing_files_and_bad_lines_across_files(tmp_path):
    folder = tmp_path / "discoeval" / "SP" / "wiki"
    folder.mkdir(parents=True)
    (folder / "valid.txt").write_bytes(b"0\ta\tb\tc\td\te\n9\ta\tb\tc\td\te\n\xff\n")
    result = CliRunner().invoke(cli, ["tasks", "check", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    out = result.output
    assert f"{folder / 'test.txt'}: missing required file" in out
    assert "checked 1 tasks" in out and "tasks without any data file were skipped" in out
    (folder / "test.txt").write_text("1\tf\tg\th\ti\tj\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["tasks", "check", "es-discoeval:SPwiki", "--data-dir",
                                      str(tmp_path)])
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{folder / 'valid.txt'}:2: label '9' is not in the label set")
    assert lines[1].startswith(f"{folder / 'valid.txt'}:3: invalid utf-8")


@pytest.mark.parametrize("args, needle", [
    (["tasks", "show", "tense"], "unknown task 'tense'; say which: es-senteval:Tense, "
                                 "en-senteval:Tense, synthetic-es:Tense"),
    (["tasks", "show", "tenze"], "(closest: es-senteval:Tense, en-senteval:Tense, "
                                 "synthetic-es:Tense)"),
])
def test_a_name_several_suites_share_is_suggested_as_their_ids(args, needle):
    """The hint never suggests a bare name that is itself ambiguous (``tense`` once said
    "closest: Tense", which then failed as ambiguous)."""
    from click.testing import CliRunner

    from estratos.cli import cli

    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2, res.output
    assert needle in res.output, res.output
