"""--data-dir folders that are missing or one level off are named with the folder that would
work, before any work; ``~`` is expanded in every form of the option."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
from click.testing import CliRunner

from estratos.cli import cli


def fake_benchmark(root: Path) -> Path:
    """``root/data/es`` laid out like the Spanish data (only the MC task's two files)."""
    es = root / "data" / "es"
    (es / "senteval" / "MC").mkdir(parents=True)
    for name in ("muchocine.neg", "muchocine.pos"):
        (es / "senteval" / "MC" / name).write_text("una frase\n", encoding="utf-8")
    return es


def invoke(args: List[str], **env):
    return CliRunner().invoke(cli, args, env=env or None)


@pytest.fixture
def es(tmp_path) -> Path:
    return fake_benchmark(tmp_path)


def test_list_with_a_missing_folder_fails_naming_it(tmp_path):
    result = invoke(["tasks", "list", "--data-dir", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert f"--data-dir {tmp_path / 'nope'}: no such folder" in result.output
    assert "es-senteval:MC" not in result.output  # no table of "missing" rows


def test_list_one_level_too_high_names_the_folder_that_works(es):
    result = invoke(["tasks", "list", "--data-dir", str(es.parent)])
    assert result.exit_code == 2
    assert "one level too high" in result.output
    assert f"--data-dir {es} would work" in result.output


def test_list_one_level_too_low_names_the_folder_that_works(es):
    result = invoke(["tasks", "list", "es-senteval", "--data-dir", str(es / "senteval")])
    assert result.exit_code == 2
    assert "one level too low" in result.output and f"--data-dir {es} would work" in result.output


def test_list_of_a_folder_with_nothing_known_says_what_it_should_hold(tmp_path):
    result = invoke(["tasks", "list", "es-senteval", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "no es-senteval data here (expected e.g. senteval/" in result.output


def test_list_still_works_when_only_another_suites_folder_is_wrong(es, tmp_path, caplog):
    with caplog.at_level("WARNING"):
        result = invoke(["tasks", "list", "--data-dir", str(es),
                         "--data-dir", f"synthetic-es={tmp_path / 'nope'}"])
    assert result.exit_code == 0, result.output
    assert "es-senteval:MC" in result.output
    assert f"synthetic-es={tmp_path / 'nope'}: no such folder" in caplog.text


def test_show_and_check_fail_before_reading(es):
    show = invoke(["tasks", "show", "es-senteval:MC", "--data-dir", str(es.parent)])
    assert show.exit_code == 2 and f"--data-dir {es} would work" in show.output
    check = invoke(["tasks", "check", "es-senteval:MC", "--data-dir", str(es / "senteval")])
    assert check.exit_code == 2 and "one level too low" in check.output
    survey = invoke(["tasks", "check", "--data-dir", str(es.parent)])
    assert survey.exit_code == 2 and f"--data-dir {es} would work" in survey.output


def test_a_suite_folder_is_checked_against_its_suite(es, tmp_path):
    result = invoke(["tasks", "show", "es-senteval:MC",
                     "--data-dir", f"es-senteval={es.parent}"])
    assert result.exit_code == 2
    assert f"--data-dir es-senteval={es} would work" in result.output


def test_baseline_probe_and_encode_fail_before_any_work(es, tmp_path):
    out = tmp_path / "results.jsonl"
    base = invoke(["baseline", "--tasks", "es-senteval:MC", "--data-dir", str(es.parent),
                   "--out", str(out)])
    assert base.exit_code == 2 and "one level too high" in base.output
    # the cache does not exist: the data folder is named first, before the cache is opened
    probe = invoke(["probe", "--cache", str(tmp_path / "none.h5"), "--tasks", "es-senteval:MC",
                    "--data-dir", str(es / "senteval"), "--out", str(out)])
    assert probe.exit_code == 2 and "one level too low" in probe.output
    cache = tmp_path / "c.h5"
    encode = invoke(["encode", "--model", str(tmp_path / "no-model"), "--out", str(cache),
                     "--tasks", "es-senteval:MC", "--data-dir", str(tmp_path / "nope")])
    assert encode.exit_code == 2 and "no such folder" in encode.output
    assert not out.exists() and not list(tmp_path.glob("c.h5*"))


def test_a_bare_folder_missing_a_selected_suite_says_how_to_name_it(es):
    result = invoke(["tasks", "show", "synthetic-es:Tense", "--data-dir", str(es)])
    assert result.exit_code == 2
    assert "no synthetic-es data here (expected e.g. Tense.txt)" in result.output
    assert "--data-dir synthetic-es=DIR" in result.output


def test_environment_folder_is_named_as_such(es):
    result = invoke(["tasks", "list", "es-senteval"], ESTRATOS_DATA=str(es.parent))
    assert result.exit_code == 2
    assert f"$ESTRATOS_DATA {es.parent}: no es-senteval data here" in result.output
    assert f"ESTRATOS_DATA={es} would work" in result.output


@pytest.mark.parametrize("form", ["--data-dir=~/data/es", "--data-dir=es-senteval=~/data/es",
                                  "env"])
def test_tilde_is_expanded(es, tmp_path, form):
    args = ["tasks", "list", "es-senteval:MC"]
    env = {"HOME": str(tmp_path)}
    if form == "env":
        env["ESTRATOS_DATA"] = "~/data/es"
    else:
        args.append(form)
    result = invoke(args, **env)
    assert result.exit_code == 0, result.output
    assert "present" in result.output.splitlines()[1]


def test_the_real_data_one_level_off(es_data_dir):
    high = invoke(["tasks", "list", "--data-dir", str(es_data_dir.parent)])
    assert high.exit_code == 2 and f"--data-dir {es_data_dir} would work" in high.output
    low = invoke(["tasks", "list", "--data-dir", str(es_data_dir / "senteval")])
    assert low.exit_code == 2 and f"--data-dir {es_data_dir} would work" in low.output
