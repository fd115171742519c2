"""ODESIA measures: Delta (baseline-calibrated contribution), Ind (EN-ES gap), pairs files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.errors import InputError, OptionError, ResultsError
from estratos.report import odesia
from estratos.report.odesia import (
    calibrate, delta, ind, load_pairs, match_dataset, parse_reference, reference_point)
from estratos.report import build_report, write_report
from estratos.report.aggregate import Dataset

from report_toys import baseline_records, record, write_lines


# ------------------------------------------------------------------------------ Delta

def test_high_baseline_uses_the_upper_bound():
    # b = 60 >= 50 (midpoint of 0..100) -> r = 100: (80 - 60) / 40 * 100
    assert delta(80.0, 60.0, "accuracy") == pytest.approx(50.0)
    assert calibrate(60.0, "accuracy").reference == 100.0


def test_low_baseline_uses_the_lower_bound():
    # b = 20 < 50 -> r = 0: (30 - 20) / 20 * 100
    assert delta(30.0, 20.0, "accuracy") == pytest.approx(50.0)
    assert calibrate(20.0, "accuracy").reference == 0.0


def test_midpoint_counts_as_high():
    assert calibrate(50.0, "accuracy").reference == 100.0


def test_system_below_baseline_is_negative():
    assert delta(55.0, 60.0, "accuracy") == pytest.approx(-12.5)
    assert delta(60.0, 60.0, "accuracy") == 0.0


def test_correlation_range_is_symmetric():
    # Pearson x100 lives in [-100, 100]: midpoint 0
    assert calibrate(-10.0, "pearson").reference == -100.0
    assert delta(10.0, -10.0, "pearson") == pytest.approx(20.0 / 90.0 * 100.0)
    assert delta(70.0, 40.0, "pearson") == pytest.approx(50.0)


def test_baseline_equal_to_reference_is_undefined_not_an_error():
    cal = calibrate(100.0, "accuracy")
    assert cal.delta(100.0) is None
    assert "b = r = 100" in cal.undefined
    assert delta(10.0, 0.0, "accuracy", reference="lower") is None
    assert delta(10.0, 5.0, "accuracy", reference=5.0) is None


def test_unbounded_metric_needs_an_explicit_reference():
    cal = calibrate(3.0, "mse")
    assert cal.delta(2.0) is None and "unbounded" in cal.undefined
    assert delta(2.0, 3.0, bounds=(0.0, math.inf), reference="upper") is None
    assert delta(2.0, 3.0, bounds=(0.0, math.inf), reference="lower") == pytest.approx(
        -100.0 / 3.0)
    assert delta(2.0, 3.0, "mse", reference=0.0) == pytest.approx(-100.0 / 3.0)


def test_explicit_rules_override_the_midpoint_rule():
    assert delta(80.0, 60.0, "accuracy", reference="lower") == pytest.approx(100.0 / 3.0)
    assert delta(30.0, 20.0, "accuracy", reference="upper") == pytest.approx(12.5)
    assert reference_point(20.0, (0.0, 100.0), 90.0) == (90.0, None)


@pytest.mark.parametrize("text, expected", [("auto", "auto"), ("UPPER", "upper"),
                                            (" lower ", "lower"), ("75", 75.0), (0, 0.0)])
def test_parse_reference(text, expected):
    assert parse_reference(text) == expected


@pytest.mark.parametrize("text", ["middle", "nan", "inf", ""])
def test_parse_reference_rejects_bad_values(text):
    with pytest.raises(OptionError, match="reference"):
        parse_reference(text)


def test_ind():
    assert ind(40.0, 25.0) == pytest.approx(15.0)
    assert ind(10.0, 30.0) == pytest.approx(-20.0)
    assert ind(None, 3.0) is None and ind(3.0, None) is None


# ------------------------------------------------------------------------------ pairs

def test_default_pairs_file_ships_the_obvious_pairs():
    pairs = load_pairs()
    names = {p.name for p in pairs}
    assert {"STS17", "SICK-R", "SPwiki", "DCwiki", "RST"} <= names
    assert odesia.default_pairs_path().name == "pairs.toml"
    assert all(p.line is not None for p in pairs)


def test_pairs_errors_name_file_and_line(tmp_path: Path):
    path = tmp_path / "pairs.toml"
    path.write_text('[[pair]]\nname = "A"\nen = "x"\nes = "y"\n\n[[pair]]\nname = "B"\n'
                    'en = "x"\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"pairs\.toml:6: \[\[pair\]\] needs a non-empty "
                                         r"string 'es'"):
        load_pairs(path)
    path.write_text('[[pair]]\nname = "A"\nen = "x"\nes = "y"\nlang = "fr"\n')
    with pytest.raises(InputError, match=r"pairs\.toml:1: unknown key\(s\) lang"):
        load_pairs(path)
    path.write_text('[[pair]]\nname = "A"\nen = "x"\nes = "y"\n[[pair]]\nname = "A"\n'
                    'en = "x"\nes = "y"\n')
    with pytest.raises(InputError, match=r"pairs\.toml:5: duplicate pair name 'A'"):
        load_pairs(path)
    path.write_text('[[pair]]\nname = "A"\nen = \n')
    with pytest.raises(InputError, match=r"pairs\.toml:3: not valid TOML"):
        load_pairs(path)
    path.write_text('title = "x"\n')
    with pytest.raises(InputError, match="unknown top-level key"):
        load_pairs(path)
    with pytest.raises(InputError, match="pairs file not found"):
        load_pairs(tmp_path / "missing.toml")


def _ds(task: str) -> Dataset:
    name = task.split(":")[1]
    return Dataset(task, name, "SS", "pearson", name)


def test_match_dataset_by_folded_name_or_task_id():
    datasets = [_ds("es-discoeval:SPwiki"), _ds("es-senteval:STS17")]
    assert match_dataset("SP-wiki", datasets).task == "es-discoeval:SPwiki"
    assert match_dataset("sts17", datasets).task == "es-senteval:STS17"
    assert match_dataset("es-senteval:STS17", datasets).name == "STS17"
    assert match_dataset("es-senteval:sts17", datasets) is None
    assert match_dataset("RST", datasets) is None
    with pytest.raises(ResultsError, match="matches several tasks"):
        match_dataset("STS17", datasets + [_ds("other:STS17")])


# ------------------------------------------------------------------------------ in reports

def _lang_records(lang: str, scores):
    """Two tasks per language; model m at layers 0 and 1; a baseline per task."""
    out = []
    for layer, (sts, sp) in enumerate(scores):
        out.append(record(f"{lang}-senteval:STS17", "SS", layer, 1, sts, metric="pearson",
                          model="org/m"))
        out.append(record(f"{lang}-discoeval:SPwiki", "SP", layer, 1, sp, model="org/m"))
    out.append(record(f"{lang}-senteval:STS17", "SS", None, 1, 40.0, metric="pearson",
                      model="baseline:tfidf", kind="baseline", pooling=None))
    out.append(record(f"{lang}-discoeval:SPwiki", "SP", None, 1, 20.0, model="baseline:tfidf",
                      kind="baseline", pooling=None))
    return out


def test_gap_report(tmp_path: Path):
    en = write_lines(tmp_path / "en.jsonl", _lang_records("en", [(70.0, 30.0), (85.0, 34.0)]))
    es = write_lines(tmp_path / "es.jsonl", _lang_records("es", [(55.0, 30.0), (70.0, 40.0)]))
    pairs = tmp_path / "pairs.toml"
    pairs.write_text('[[pair]]\nname = "STS17"\nen = "STS17"\nes = "STS17"\n'
                     '[[pair]]\nname = "SPwiki"\nen = "SP_wiki"\nes = "es-discoeval:SPwiki"\n'
                     '[[pair]]\nname = "RST"\nen = "RST"\nes = "RST"\n')
    content = build_report(gap=(en, es), pairs=pairs)
    gap = content.gap
    row0, row1 = gap.rows
    # STS17: b = 40 >= 0 -> r = 100; layer 0: EN (70-40)/60 = 50, ES (55-40)/60 = 25
    c = gap.cells[(row0, "STS17")]
    assert (c.delta_en, c.delta_es, c.ind) == pytest.approx((50.0, 25.0, 25.0))
    # SPwiki: b = 20 < 50 -> r = 0; layer 1: EN (34-20)/20 = 70, ES (40-20)/20 = 100
    c = gap.cells[(row1, "SPwiki")]
    assert (c.delta_en, c.delta_es, c.ind) == pytest.approx((70.0, 100.0, -30.0))
    best = gap.cells[(None, "STS17")]  # best of each language: layer 1 on both sides
    assert (best.delta_en, best.delta_es) == pytest.approx((75.0, 50.0))
    assert "layer 1" in best.source_en
    assert any(n.startswith("RST: no EN results") for n in gap.notes)
    out = tmp_path / "out"
    write_report([], out, gap=(en, es), pairs=pairs, formats="md,csv,json")
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## EN-ES gap (ODESIA Ind)" in md
    assert "| best of each language |  |  | 1 | 25.0 | -30.0 | — |" in md
    gap_csv = (out / "gap.csv").read_text(encoding="utf-8").splitlines()
    assert gap_csv[0].startswith("pair,en_task,es_task,kind,model")
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert len(doc["gap"]["cells"]) == 6


def test_gap_without_baselines_is_a_clear_error(tmp_path: Path):
    recs = [r for r in _lang_records("en", [(70.0, 30.0)]) if r["kind"] == "probe"]
    en = write_lines(tmp_path / "en.jsonl", recs)
    es = write_lines(tmp_path / "es.jsonl", _lang_records("es", [(55.0, 30.0)]))
    with pytest.raises(ResultsError, match="--gap: no baseline results for the EN datasets"):
        build_report(gap=(en, es))


def test_delta_tables_mark_undefined_cells(tmp_path: Path):
    probes = write_lines(tmp_path / "r.jsonl", [
        record("s:A", "SC", 0, 1, 90.0), record("s:B", "SC", 0, 1, 70.0),
        record("s:C", "SC", 0, 1, 65.0)])
    base = write_lines(tmp_path / "b.jsonl", [
        record("s:A", "SC", None, 1, 100.0, model="baseline:tfidf", kind="baseline",
               pooling=None),
        record("s:B", "SC", None, 1, 60.0, model="baseline:tfidf", kind="baseline",
               pooling=None)])
    content = build_report([probes], baseline=[base])
    assert content.calib["s:A"].undefined and content.calib["s:B"].reference == 100.0
    row = content.delta.rows[0]
    assert content.delta.cell(row, "s:B").mean == pytest.approx(25.0)
    assert content.delta.cell(row, "s:A") is None and content.delta.cell(row, "s:C") is None
    group = content.delta.group_cell(row, "SC")
    assert group.partial and group.mean == pytest.approx(25.0)
    from estratos.report.writers import to_markdown
    md = to_markdown(content)
    assert "undef. [1]" in md
    assert "[1] s:A: Delta undefined: the baseline equals the reference point" in md
    assert "[2] s:C: no baseline result, so no Delta" in md


def test_report_with_explicit_reference(tmp_path: Path):
    probes = write_lines(tmp_path / "r.jsonl", [record("s:A", "SC", 0, 1, 80.0)])
    base = write_lines(tmp_path / "b.jsonl", [record(
        "s:A", "SC", None, 1, 60.0, model="baseline:tfidf", kind="baseline", pooling=None)])
    content = build_report([probes], baseline=[base], reference="lower")
    assert content.delta.cell(content.delta.rows[0], "s:A").mean == pytest.approx(100 / 3)


def test_baseline_option_without_baselines(tmp_path: Path):
    probes = write_lines(tmp_path / "r.jsonl", [record("s:A", "SC", 0, 1, 80.0)])
    empty = tmp_path / "b.jsonl"
    empty.write_text("")
    with pytest.raises(ResultsError, match="--baseline: no baseline results"):
        build_report([probes], baseline=[empty])


def test_two_baselines_for_one_task_are_ambiguous(tmp_path: Path):
    recs = baseline_records()[:1]
    other = dict(recs[0], revision="tfidf-v2")
    base = write_lines(tmp_path / "b.jsonl", recs + [other])
    with pytest.raises(ResultsError, match="two different baselines"):
        build_report([base], baseline=[base])


def test_cli_gap_and_bad_reference(tmp_path: Path):
    en = write_lines(tmp_path / "en.jsonl", _lang_records("en", [(70.0, 30.0)]))
    es = write_lines(tmp_path / "es.jsonl", _lang_records("es", [(55.0, 30.0)]))
    runner = CliRunner()
    result = runner.invoke(cli, ["report", "--gap", str(en), str(es), "--out",
                                 str(tmp_path / "o"), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "o" / "gap.csv").exists()
    result = runner.invoke(cli, ["report", str(en), "--baseline", str(en), "--out",
                                 str(tmp_path / "o2"), "--reference", "top"])
    assert result.exit_code == 2 and "--reference" in result.output
