"""estratos report: the best surface baseline beside each task's best layer; Delta with
several baselines in one file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.errors import ResultsError
from estratos.report import build_report
from report_toys import baseline_records, fixture_records, record, write_lines

#: extra surface baselines of the toy tasks: MC's best is char-ngrams (70.5), TASS1's stays
#: TF-IDF (45.0, the others below it)
SURFACE = {"length-tokens": {"es-senteval:MC": 40.0, "es-senteval:TASS1": 35.0},
           "char-ngrams": {"es-senteval:MC": 70.5, "es-senteval:TASS1": 44.0}}


def _surface_records() -> List[Dict]:
    out = baseline_records()
    for name, scores in SURFACE.items():
        for task, score in scores.items():
            out.append(record(task, "SC", None, 1111, score, model=f"baseline:{name}",
                              revision=f"{name}-v1", kind="baseline", pooling=None,
                              classifier=name))
    return out


def _surface_rows(md: str, title: str) -> Dict[str, List[str]]:
    """The rows of a surface table by dataset (a section's lone table has no heading)."""
    heading = f"### {title}" if f"### {title}" in md else "## Surface baselines"
    block = next(b for b in md.split(heading)[1].split("\n\n") if b.startswith("| Group"))
    rows = {}
    for line in block.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[1]] = cells
    return rows


def test_cli_report_shows_the_best_surface_baseline_beside_the_best_layer(tmp_path: Path):
    results = write_lines(tmp_path / "r.jsonl", fixture_records())
    base = write_lines(tmp_path / "b.jsonl", _surface_records())
    out = tmp_path / "rep"
    result = CliRunner().invoke(cli, ["report", str(results), "--baseline", str(base), "--out",
                                      str(out), "--format", "md,json"])
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Surface baselines" in md
    rows = _surface_rows(md, "Best layer vs best surface baseline: org/mini, cls pooling, "
                             "senteval")
    # org/mini, one seed: MC avg = 70 + 3.0 - 0.3 = 72.7 vs char-ngrams 70.5
    assert rows["MC"] == ["SC", "MC", "avg", "baseline:char-ngrams", "—", "72.7", "70.5", "2.2"]
    assert rows["TASS1"] == ["SC", "TASS1", "avg", "baseline:tfidf", "—", "53.0", "45.0", "8.0"]
    assert rows["STS17"][3] == "baseline:tfidf" and rows["STS17"][4] == "0.0"
    # Delta is calibrated by TF-IDF alone, whatever other baselines the file holds
    assert "against the baseline baseline:tfidf@tfidf-v1;" in md
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert doc["delta"]["calibration"]["es-senteval:MC"]["baseline"] == 62.0


def test_one_class_layers_are_never_the_best_layer(tmp_path: Path):
    recs = [r for r in fixture_records() if r["model"] == "org/mini"]
    for r in recs:
        if r["layer"] == "avg" and r["task"] == "es-senteval:TASS1":
            r["degenerate"] = {"class": "pos"}
    results = write_lines(tmp_path / "r.jsonl", recs)
    base = write_lines(tmp_path / "b.jsonl", baseline_records())
    content = build_report([results, base])
    section = next(s for s in content.sections if s.title == "Surface baselines")
    (table,) = section.tables
    tass1 = next(row for row in table.rows if row[1].text == "TASS1")
    assert tass1[2].text == "1" and tass1[5].stat.mean == pytest.approx(51.5)


def test_no_surface_section_without_baselines_or_layers(tmp_path: Path):
    results = write_lines(tmp_path / "r.jsonl", fixture_records())
    assert all(s.title != "Surface baselines" for s in build_report([results]).sections)
    base = write_lines(tmp_path / "b.jsonl", _surface_records())
    assert all(s.title != "Surface baselines" for s in build_report([base]).sections)


def test_several_baselines_without_tfidf_make_delta_ambiguous(tmp_path: Path):
    recs = [r for r in _surface_records() if r["model"] != "baseline:tfidf"]
    base = write_lines(tmp_path / "b.jsonl", recs)
    results = write_lines(tmp_path / "r.jsonl", fixture_records())
    with pytest.raises(ResultsError, match="two different baselines for es-senteval:MC"):
        build_report([results], baseline=[base])


def test_a_dataset_whose_every_layer_is_one_class_shows_no_best_layer(tmp_path: Path):
    recs = [r for r in fixture_records() if r["model"] == "org/mini"]
    for r in recs:
        if r["task"] == "es-senteval:TASS1":
            r["degenerate"] = {"class": "pos"}
    results = write_lines(tmp_path / "r.jsonl", recs)
    base = write_lines(tmp_path / "b.jsonl", baseline_records())
    out = tmp_path / "rep"
    result = CliRunner().invoke(cli, ["report", str(results), str(base), "--out", str(out),
                                      "--format", "md"])
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text(encoding="utf-8")
    rows = _surface_rows(md, "Best layer vs best surface baseline: org/mini, cls pooling, "
                             "senteval")
    assert rows["TASS1"] == ["SC", "TASS1", "none", "baseline:tfidf", "—", "—", "45.0", "—"]
    assert "none: every layer predicted one class" in md
