"""estratos report: loading results, aggregation, tables, writers (golden files) and the CLI."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estratos.cli import cli
from estratos.errors import EstratosError, InputError, OptionError, ResultsError
from estratos.report import build_report, parse_formats, write_report
from estratos.results import load_results
from estratos.report.aggregate import Aggregate, Stat, aggregate, natural_key
from estratos.report.tables import Cell, mark_cells
from estratos.report.writers import to_markdown
from report_toys import record, write_lines

GOLDEN = Path(__file__).parent / "golden" / "report"
#: set ESTRATOS_UPDATE_GOLDEN=1 to rewrite the golden files after a deliberate change
UPDATE = os.environ.get("ESTRATOS_UPDATE_GOLDEN") == "1"


# ------------------------------------------------------------------------------ golden files

#: the files every report writes; the golden folder also holds one csv per table of the
#: other sections (per layer, surface baselines)
GOLDEN_FILES = ("report.md", "report.tex", "groups.csv", "datasets.csv", "report.json",
                "report.html")


def test_golden_files(fixture_dir: Path):
    summary = write_report(["results.jsonl"], "out", baseline=["baseline.jsonl"])
    produced = sorted(p.name for p in summary.files)
    assert set(GOLDEN_FILES) <= set(produced)
    assert any(n.startswith("per-layer--") for n in produced)
    assert any(n.startswith("surface-baselines--") for n in produced)
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for old in GOLDEN.iterdir():
            old.unlink()
        for name in produced:
            (GOLDEN / name).write_text((fixture_dir / "out" / name).read_text(encoding="utf-8"),
                                       encoding="utf-8")
    assert produced == sorted(p.name for p in GOLDEN.iterdir())
    for name in produced:
        text = (fixture_dir / "out" / name).read_text(encoding="utf-8")
        assert text == (GOLDEN / name).read_text(encoding="utf-8"), f"{name} differs from golden"


def test_golden_group_table_reads_as_the_paper(fixture_dir: Path):
    write_report(["results.jsonl"], "out", formats="md")
    md = (fixture_dir / "out" / "report.md").read_text(encoding="utf-8")
    header = next(line for line in md.splitlines() if line.startswith("| Model"))
    # groups in the paper's order, only those present, fallbacks footnoted on their group
    # and each group that lacks some of the benchmark's datasets marked as such
    assert header.endswith("| SC [1] | SPC [2] [3] | SS [4] | SP [5] [6] |")
    assert "[2] es-senteval:PAWS: k-fold on the test file" in md
    assert "[5] es-discoeval:SPwiki: trained on valid" in md
    assert ("[1] SC: 2 of the benchmark's 5 datasets (MC, TASS1; not here: TASS2, FAC, SQC); "
            "the column averages only those present, so it is not the paper's group score"
            ) in md
    assert "Datasets averaged per group: SC 2 of 5, SPC 1 of 3, SS 1 of 4, SP 1 of 3." in md
    rows = [line for line in md.split("## Per dataset")[0].splitlines()
            if line.startswith("| org/")]
    # sorted by model, then layer 0, 1, avg; two seeds -> mean ± std, one seed -> mean only
    assert [r.split(" | ")[2] for r in rows] == ["0", "1", "avg"] * 2
    assert " ± " in rows[0] and " ± " not in rows[3]
    assert rows[0].split(" | ")[3] == "2" and rows[3].split(" | ")[3] == "1"
    # MiniLM layer 1 has no MC: its SC cell is a partial mean, its MC cell a dash
    assert rows[4].split(" | ")[4].endswith("*")
    sc_table = md.split("### Datasets: SC")[1].split("###")[0]
    mini_l1 = next(line for line in sc_table.splitlines() if "org/mini" in line
                   and line.split(" | ")[2] == "1")
    assert "| — |" in mini_l1 and "| 0.0 " not in mini_l1
    # best per column bold, runner-up underlined
    assert "**" in rows[2] and "<u>" in rows[1]


def test_csv_and_json_carry_f1_and_spearman(fixture_dir: Path):
    write_report(["results.jsonl"], "out", formats="csv,json")
    with open(fixture_dir / "out" / "datasets.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    paws = next(r for r in rows if r["name"] == "PAWS" and r["model"] == "org/mini"
                and r["layer"] == "0")
    assert float(paws["mean"]) == pytest.approx(59.4)
    assert float(paws["f1_mean"]) == pytest.approx(59.4 - 5.25)
    assert paws["fallback"] == "k-fold on the test file"
    sts = next(r for r in rows if r["name"] == "STS17" and r["model"] == "org/mini"
               and r["layer"] == "0")
    assert float(sts["spearman_mean"]) == pytest.approx(float(sts["mean"]) - 2)
    doc = json.loads((fixture_dir / "out" / "report.json").read_text(encoding="utf-8"))
    assert doc["groups"] == ["SC", "SPC", "SS", "SP"]
    assert doc["delta"] is None and doc["gap"] is None
    beto0 = [g for g in doc["group_scores"] if g["model"] == "org/beto" and g["layer"] == 0]
    assert [g["n_seeds"] for g in beto0] == [2, 2, 2, 2]


# ------------------------------------------------------------------------------ aggregation

def _agg(tmp_path: Path, records) -> Aggregate:
    return aggregate(load_results([write_lines(tmp_path / "r.jsonl", records)]).records)


def test_mean_and_sample_std_over_seeds(tmp_path):
    agg = _agg(tmp_path, [record("s:A", "SC", 0, seed, score) for seed, score in
                ((1, 50.0), (2, 52.0), (3, 57.0))])
    stat = agg.cell(agg.rows[0], "s:A")
    assert stat.mean == pytest.approx(53.0)
    assert stat.std == pytest.approx(3.605551, rel=1e-6)  # ddof=1
    assert stat.n == 3
    single = _agg(tmp_path, [record("s:A", "SC", 0, 1, 50.0)])
    assert single.cell(single.rows[0], "s:A").std is None


def test_group_cell_mean_of_dataset_means_and_per_seed_std(tmp_path):
    agg = _agg(tmp_path, [record("s:A", "SC", 0, 1, 50.0), record("s:A", "SC", 0, 2, 54.0),
                record("s:B", "SC", 0, 1, 70.0), record("s:B", "SC", 0, 2, 70.0)])
    g = agg.group_cell(agg.rows[0], "SC")
    assert g.mean == pytest.approx(61.0)
    # per-seed group means: 60, 62 -> sample std sqrt(2)
    assert g.std == pytest.approx(2 ** 0.5)
    assert (g.n, g.n_datasets, g.n_total, g.partial) == (2, 2, 2, False)


def test_rows_sorted_numerically_then_avg_and_datasets_naturally(tmp_path):
    recs = [record("s:STS17", "SS", layer, 1, 60.0, metric="pearson")
            for layer in ("avg", 10, 2, 0)]
    recs += [record("s:STS9", "SS", 0, 1, 1.0, metric="pearson"),
             record("s:X", "SC", 0, 1, 1.0, model="a/first")]
    agg = _agg(tmp_path, recs)
    assert [(r.system.model, r.layer) for r in agg.rows] == [
        ("a/first", 0), ("org/beto", 0), ("org/beto", 2), ("org/beto", 10),
        ("org/beto", "avg")]
    assert [d.name for d in agg.datasets] == ["X", "STS9", "STS17"]
    assert natural_key("STS9") < natural_key("STS14")


def test_same_name_in_two_suites_is_labelled_by_task_id(tmp_path):
    agg = _agg(tmp_path, [record("en-senteval:STS17", "SS", 0, 1, 1.0, metric="pearson"),
                record("es-senteval:STS17", "SS", 0, 1, 1.0, metric="pearson")])
    assert {d.label for d in agg.datasets} == {"en-senteval:STS17", "es-senteval:STS17"}


def test_several_languages_split_the_group_columns(tmp_path):
    agg = _agg(tmp_path, [
        record("en-senteval:STS17", "SS", 0, 1, 80.0, metric="pearson", language="en"),
        record("es-senteval:STS17", "SS", 0, 1, 60.0, metric="pearson"),
        record("es-senteval:TASS1", "SC", 0, 1, 50.0)])
    assert agg.groups == ["SC es", "SS en", "SS es"]
    assert agg.group_cell(agg.rows[0], "SS en").mean == 80.0
    assert agg.group_cell(agg.rows[0], "SS es").mean == 60.0


def test_pooling_and_classifier_make_separate_rows(tmp_path):
    agg = _agg(tmp_path, [record("s:A", "SC", 0, 1, 50.0, pooling="cls"),
                record("s:A", "SC", 0, 1, 60.0, pooling="mean"),
                record("s:A", "SC", 0, 1, 70.0, pooling="mean", classifier="lbfgs")])
    assert len(agg.rows) == 3
    assert all(s.n == 1 for s in (agg.cell(r, "s:A") for r in agg.rows))


def test_marks_best_and_runner_up_with_ties():
    cells = [[Cell(stat=Stat(v, None, 1))] for v in (70.04, 70.0, 69.0, 10.0)] + [[Cell()]]
    mark_cells(cells, [0])
    assert [row[0].mark for row in cells] == ["best", "best", "second", None, None]


def test_inconsistent_task_metadata_is_an_error(tmp_path):
    path = write_lines(tmp_path / "r.jsonl", [record("s:A", "SC", 0, 1, 1.0),
                                              record("s:A", "SPC", 1, 1, 1.0)])
    with pytest.raises(ResultsError, match=r"r\.jsonl:2: task s:A has group 'SPC'"):
        aggregate(load_results([path]).records)


# ------------------------------------------------------------------------------ bad input

def test_truncated_last_line_is_reported_and_skipped(tmp_path):
    path = write_lines(tmp_path / "r.jsonl", [record("s:A", "SC", 0, 1, 50.0)],
                       tail='{"schema": 1, "kind": "probe", "task": "s:A", "sco')
    loaded = load_results([path])
    assert len(loaded.records) == 1
    assert len(loaded.notices) == 1
    assert str(loaded.notices[0]).startswith(f"{path}:2: truncated")
    out = tmp_path / "out"
    summary = write_report([path], out, formats="md")
    assert summary.notices == loaded.notices
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Notices" in md and f"{path}:2: truncated" in md


def test_broken_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record("s:A", "SC", 0, 1, 1.0)) + "\n{oops\n"
                    + json.dumps(record("s:A", "SC", 1, 1, 1.0)) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"r\.jsonl:2: not a JSON line"):
        load_results([path])


def test_older_schema_lines_are_read_beside_current_ones(tmp_path):
    """A resumed run appends current lines to a file of an older version: both are read
    (the older ones migrated)."""
    a = write_lines(tmp_path / "a.jsonl", [record("s:A", "SC", 0, 1, 1.0)])
    b = write_lines(tmp_path / "b.jsonl", [record("s:A", "SC", 1, 1, 1.0),
                                           record("s:A", "SC", 2, 1, 1.0, schema=2)])
    assert len(load_results([a, b]).records) == 3


def test_unsupported_schema_version(tmp_path):
    path = write_lines(tmp_path / "r.jsonl", [record("s:A", "SC", 0, 1, 1.0, schema=7)])
    with pytest.raises(ResultsError, match=r"r\.jsonl:1: unsupported results schema "
                                           r"version 7 \(this estratos reads versions 1, 2\)"):
        load_results([path])


def test_duplicate_cells_last_wins_and_is_reported(tmp_path):
    a = write_lines(tmp_path / "a.jsonl", [record("s:A", "SC", 0, 1, 10.0),
                                           record("s:A", "SC", 0, 1, 20.0)])
    b = write_lines(tmp_path / "b.jsonl", [record("s:A", "SC", 0, 1, 30.0)])
    loaded = load_results([a, b])
    assert [loc.record.score for loc in loaded.records] == [30.0]
    assert [n.line for n in loaded.notices] == [2, 1]
    assert f"(also at {a}:1)" in loaded.notices[0].message
    assert f"(also at {a}:2)" in loaded.notices[1].message
    assert "last one is kept" in loaded.notices[1].message


def test_mdl_tables_flag_cells_below_the_floor_and_one_class_cells(tmp_path):
    # the audit's readings: label-shuffle cells at 0.959 and 0.935 over the floor had one
    # underlined as runner-up, and a one-class layer was bold best; neither is a reading
    def line(layer, seed, floor, one_class=False):
        rec = record("s:A", "SC", layer, seed, 50.0, schema=2) | {"mdl": {
            "online_bits": 100.0, "uniform_bits": 100.0 * 1.1 * floor, "compression":
            round(1.1 * floor, 4), "floor_bits": 100.0 * floor, "floor_compression": floor}}
        return rec | ({"degenerate": {"class": "pos", "share": 1.0}} if one_class else {})

    floors = {0: (1.5, 1.5), 1: (1.2, 1.21), 2: (0.959, 0.96), 3: (1.05, 0.935), 4: (1.1, 1.1)}
    lines = [line(layer, seed, f, one_class=layer == 0) for layer, pair in floors.items()
             for seed, f in zip((1, 2), pair)]
    results = write_lines(tmp_path / "r.jsonl", lines)
    res = CliRunner().invoke(cli, ["report", str(results), "--out", str(tmp_path / "rep"),
                                   "--format", "md"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    for title in ("MDL compression over the floor:", "MDL compression:"):
        table = md.split(title)[1].split("\n\n")[1]
        [row] = [r for r in table.splitlines() if r.startswith("| SC")]
        cells = [c.strip() for c in row.strip("|").split("|")][2:]
        assert "(one class)" in cells[0] and "**" not in cells[0], cells
        assert "(below floor)" in cells[2] and "<u>" not in cells[2], cells
        assert "(below floor: 1/2 seeds)" in cells[3] and "<u>" not in cells[3], cells
        assert cells[1].startswith("**") and cells[4].startswith("<u>"), cells
    assert "(below floor) = the online code is longer than the labels-only code" in md
    assert "Compression depends on the block model" in md


def test_report_refuses_one_cell_from_caches_of_other_encode_settings(tmp_path):
    # the case: the same cells probed from a --max-length 512 cache into a.jsonl and
    # from a --max-length 8 one into b.jsonl; one report row would show whichever file came
    # last. Older lines (no ``encoding``) read theirs from their ``cache`` object.
    def line(score, max_length, **extra):
        return record("s:A", "SC", 0, 1, score, schema=2) | {
            "cache": {"dtype": "float16", "max_length": max_length}} | extra

    a = write_lines(tmp_path / "a.jsonl", [line(70.0, 512)])
    b = write_lines(tmp_path / "b.jsonl", [line(50.0, 8, encoding={
        "dtype": "float16", "max_length": 8, "model_dtype": "float32"})])
    [loc] = load_results([a]).records
    assert loc.record.encoding == {"dtype": "float16", "max_length": 512}  # migrated
    out = tmp_path / "rep"
    for files in ([a, b], [b, a]):
        res = CliRunner().invoke(cli, ["report", *map(str, files), "--out", str(out)])
        assert res.exit_code == 1, res.output
        assert res.output.count("Error:") == 1 and "Traceback" not in res.output
        first, last = files
        assert (f"cell s:A layer 0 seed 1 of org/beto is in two results files, probed on "
                f"vectors made with other encode settings: max_length "
                f"{512 if first == a else 8} at {first}:1, {8 if first == a else 512} at "
                f"{last}:1 (--max-length)") in res.output
        assert not out.exists()
    # a rerun with --overwrite within one file is meant to replace the old copy
    one = write_lines(tmp_path / "one.jsonl", [line(70.0, 512), line(50.0, 8)])
    res = CliRunner().invoke(cli, ["report", str(one), "--out", str(out), "--format", "csv"])
    assert res.exit_code == 0, res.output
    # copies whose settings agree are copies, whatever else they do not record
    c = write_lines(tmp_path / "c.jsonl", [line(70.0, 512, encoding={"max_length": 512})])
    res = CliRunner().invoke(cli, ["report", str(a), str(c), "--out", str(out),
                                   "--format", "csv"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("change, message", [
    ({"score": "high"}, "field 'score' must be a number"),
    ({"layer": -1}, "field 'layer' must be a hidden-state index"),
    ({"layer": None}, "a probe result needs a layer"),
    ({"kind": "other"}, "unknown kind 'other'"),
    ({"seed": "1"}, "field 'seed' must be int"),
    ({"task": None}, "field 'task' must be str"),
])
def test_malformed_records_name_file_and_line(tmp_path, change, message):
    bad = record("s:A", "SC", 0, 1, 1.0) | change
    path = write_lines(tmp_path / "r.jsonl", [record("s:A", "SC", 1, 1, 1.0), bad])
    with pytest.raises(InputError) as err:
        load_results([path])
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value)


def test_missing_field_and_non_object(tmp_path):
    rec = record("s:A", "SC", 0, 1, 1.0)
    del rec["model"]
    path = write_lines(tmp_path / "r.jsonl", [rec])
    with pytest.raises(InputError, match=r"r\.jsonl:1: missing field 'model'"):
        load_results([path])
    path.write_text("[1, 2]\n" + json.dumps(record("s:A", "SC", 0, 1, 1.0)) + "\n")
    with pytest.raises(InputError, match=r"r\.jsonl:1: a results line must be a JSON object"):
        load_results([path])


def test_a_null_score_is_shown_as_undefined_never_as_zero(tmp_path):
    path = write_lines(tmp_path / "r.jsonl", [
        record("s:A", "SS", 0, 1, None, metric="pearson", test={"pearson": None}),
        record("s:A", "SS", 0, 2, None, metric="pearson", test={"pearson": None}),
        record("s:A", "SS", 1, 1, 30.0, metric="pearson"),
        record("s:A", "SS", 1, 2, 32.0, metric="pearson")])
    loaded = load_results([path])
    assert len(loaded.records) == 4 and not loaded.notices
    content = build_report([path])
    md = to_markdown(content)
    layer_table = md[md.index("Per layer"):]
    assert "| SS | A | undef. | 31.0 ± 1.4 |" in layer_table
    rows = {r["layer"]: r for r in __import__("estratos.report.writers", fromlist=["x"])
            .dataset_records(content)}
    assert rows[0]["mean"] is None and rows[1]["mean"] == 31.0


def test_missing_results_file(tmp_path):
    with pytest.raises(InputError, match="results file not found"):
        load_results([tmp_path / "nope.jsonl"])


def test_unknown_format_names_the_option(fixture_dir):
    with pytest.raises(OptionError, match="format: unknown format 'pdf'"):
        write_report(["results.jsonl"], "out", formats="md,pdf")
    assert not (fixture_dir / "out").exists()
    assert parse_formats("md, LaTeX,md") == ("md", "latex")


def test_baseline_file_must_hold_baselines(fixture_dir):
    with pytest.raises(ResultsError, match=r"results\.jsonl:1: --baseline files may hold "
                                           r"only baseline results"):
        build_report(["results.jsonl"], baseline=["results.jsonl"])


def test_out_must_be_a_folder(fixture_dir):
    (fixture_dir / "afile").write_text("x")
    with pytest.raises(OptionError, match="out"):
        write_report(["results.jsonl"], "afile")


def test_error_leaves_nothing_written(fixture_dir):
    write_lines(fixture_dir / "v2.jsonl", [record("s:A", "SC", 0, 1, 1.0, schema=9)])
    with pytest.raises(ResultsError):
        write_report(["results.jsonl", "v2.jsonl"], "out")
    assert not (fixture_dir / "out").exists()


def test_markdown_shows_dash_for_missing_never_zero(tmp_path):
    path = write_lines(tmp_path / "r.jsonl", [
        record("s:A", "SC", 0, 1, 50.0), record("s:B", "SC", 0, 1, 60.0),
        record("s:A", "SC", 1, 1, 52.0)])
    md = to_markdown(build_report([path]))
    layer1 = next(line for line in md.split("### Datasets")[0].splitlines()
                  if line.startswith("| org/beto") and line.split(" | ")[2] == "1")
    assert layer1.endswith("| 52.0* |")  # partial group mean: flagged, never "best"
    table = md.split("## Per layer")[1]
    assert "| SC | B | 60.0 | — |" in table


# ------------------------------------------------------------------------------ CLI

def test_cli_report_writes_and_exits_zero(fixture_dir):
    result = CliRunner().invoke(cli, ["report", "results.jsonl", "--out", "out",
                                      "--format", "md,csv", "--baseline", "baseline.jsonl"])
    assert result.exit_code == 0, result.output
    assert "wrote out/report.md" in result.output
    assert (fixture_dir / "out" / "groups.csv").exists()
    assert not (fixture_dir / "out" / "report.tex").exists()


def test_cli_bad_format_exits_2_with_option_name(fixture_dir):
    result = CliRunner().invoke(cli, ["report", "results.jsonl", "--out", "out",
                                      "--format", "docx"])
    assert result.exit_code == 2
    assert "--format: unknown format 'docx'" in result.output


def test_cli_mixed_schema_exits_nonzero(fixture_dir):
    write_lines(fixture_dir / "v2.jsonl", [record("s:A", "SC", 0, 1, 1.0, schema=9)])
    result = CliRunner().invoke(cli, ["report", "results.jsonl", "v2.jsonl", "--out", "out"])
    assert result.exit_code == 1
    assert "v2.jsonl:1: unsupported results schema version 9" in result.output
    assert not (fixture_dir / "out").exists()


def test_cli_needs_some_results(fixture_dir):
    result = CliRunner().invoke(cli, ["report", "--out", "out"])
    assert result.exit_code == 2 and "RESULTS" in result.output


def test_report_does_not_import_torch(fixture_dir, child_env):
    """Reports are rebuilt from results alone: no torch import on the way."""
    import subprocess
    import sys

    code = ("import sys; from estratos.report import write_report; "
            "write_report(['results.jsonl'], 'out', baseline=['baseline.jsonl']); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=fixture_dir, capture_output=True,
                          text=True, env=child_env())
    assert proc.returncode == 0, proc.stderr


def test_latex_escapes_special_characters(tmp_path):
    from estratos.report.writers import to_latex

    path = write_lines(tmp_path / "r.jsonl", [
        record("s:A_1", "SC", 0, 1, 50.0, model="org/my_model#1", fallback="50% held out & more"),
        record("s:A_1", "SC", 0, 2, 52.0, model="org/my_model#1", fallback="50% held out & more")])
    tex = to_latex(build_report([path]))
    # one row only: nothing to be best against, so no bold
    assert r"org/my\_model\#1 & cls & 0 & 2 & \textbf{51.0 $\pm$ 1.4}" not in tex
    assert r"org/my\_model\#1 & cls & 0 & 2 & 51.0 $\pm$ 1.4 \\" in tex
    assert r"A\_1$^{1}$" in tex
    assert r"$^{1}$s:A\_1: 50\% held out \& more" in tex
    assert "my_model" not in tex.replace(r"my\_model", "")


def test_empty_results_file_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(ResultsError, match="no results to report"):
        build_report([path])


def test_a_folder_is_not_a_results_file(tmp_path):
    with pytest.raises(InputError, match="cannot read results file"):
        load_results([tmp_path])


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4), max_leaves=8)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=st.dictionaries(st.sampled_from(sorted(record("s:A", "SC", 0, 1, 1.0))),
                                _json_values, max_size=3),
       tail=st.binary(max_size=20))
def test_any_malformed_input_raises_only_estratos_errors(tmp_path, mutation, tail):
    """Whatever a results file holds, the report fails with a user error or succeeds."""
    path = tmp_path / "fuzz.jsonl"
    good = json.dumps(record("s:A", "SC", 1, 1, 1.0))
    bad = json.dumps(record("s:A", "SC", 0, 1, 1.0) | mutation)
    path.write_bytes((good + "\n" + bad + "\n").encode() + tail)
    try:
        content = build_report([path])
    except EstratosError:
        return
    to_markdown(content)


def test_cli_group_columns_say_how_many_datasets_they_average(tmp_path):
    lines = [record("es-senteval:TASS1", "SC", 0, 1, 52.0)]
    lines += [record(f"es-discoeval:{name}", "SP", 0, 1, 40.0)
              for name in ("SPthesis", "SPnews", "SPwiki")]
    path = write_lines(tmp_path / "r.jsonl", lines)
    result = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "rep"),
                                      "--format", "md,csv"])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    header = next(line for line in md.splitlines() if line.startswith("| Model"))
    assert header.endswith("| SC [1] | SP |"), header  # SP is whole: no mark
    assert "[1] SC: 1 of the benchmark's 5 datasets (TASS1; not here: TASS2, MC, FAC, SQC)" \
        in md
    assert "Datasets averaged per group: SC 1 of 5, SP 3." in md


def test_json_and_csv_carry_every_section_the_markdown_has(tmp_path):
    """report.json holds every section (title, tables, each cell's numbers and marks) and
    the csv files one file per table beyond the group and dataset scores: per layer and MDL
    here, marks included (a one-class cell, a cell below its floor), so nothing reaches only
    md, LaTeX or HTML."""
    def line(layer, seed, floor, one_class=False):
        rec = record("s:A", "SC", layer, seed, 50.0 + layer, schema=2) | {"mdl": {
            "online_bits": 100.0, "uniform_bits": 100.0 * 1.1 * floor, "compression":
            round(1.1 * floor, 4), "floor_bits": 100.0 * floor, "floor_compression": floor}}
        return rec | ({"degenerate": {"class": "pos", "share": 1.0}} if one_class else {})

    lines = [line(layer, seed, f, one_class=layer == 0)
             for layer, f in ((0, 1.5), (1, 1.2), (2, 0.95)) for seed in (1, 2)]
    results = write_lines(tmp_path / "r.jsonl", lines)
    res = CliRunner().invoke(cli, ["report", str(results), "--out", str(tmp_path / "rep"),
                                   "--format", "md,csv,json"])
    assert res.exit_code == 0, res.output
    rep = tmp_path / "rep"
    md = (rep / "report.md").read_text(encoding="utf-8")
    doc = json.loads((rep / "report.json").read_text(encoding="utf-8"))
    titles = [s["title"] for s in doc["sections"]]
    assert "Group averages" in titles and any("MDL" in t for t in titles), titles
    for title in titles:
        assert f"## {title}" in md, title
    cells = [c for s in doc["sections"] if "MDL" in s["title"] for t in s["tables"]
             for row in t["rows"] for c in row]
    assert any(c.get("one_class") for c in cells), cells
    assert any(c.get("below_floor") for c in cells), cells
    csvs = sorted(p.name for p in rep.glob("*.csv"))
    extra = [n for n in csvs if n not in ("groups.csv", "datasets.csv")]
    assert any(n.startswith("controls-mdl") for n in extra), csvs
    for name in extra:
        rows = list(csv.DictReader((rep / name).open(encoding="utf-8")))
        assert rows, name
    mdl = next(n for n in extra if n.startswith("controls-mdl"))
    text = (rep / mdl).read_text(encoding="utf-8")
    assert "one_class" in text and "below_floor" in text, text


def test_many_copies_in_one_file_are_one_notice(tmp_path):
    """After ``probe --overwrite`` the file holds two copies of every cell: one summary
    line, not one notice per cell; the last copy of each is kept."""
    lines = [record("s:A", "SC", layer, 1, 10.0) for layer in range(6)]
    lines += [record("s:A", "SC", layer, 1, 20.0) for layer in range(6)]
    path = write_lines(tmp_path / "r.jsonl", lines)
    loaded = load_results([path])
    assert [loc.record.score for loc in loaded.records] == [20.0] * 6
    [notice] = loaded.notices
    assert notice.line == 7 and "6 duplicate cells from line 7 on" in notice.message
    assert "the last copy of each is kept" in notice.message
    res = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "rep"),
                                   "--format", "md"])
    assert res.exit_code == 0 and res.output.count("duplicate") <= 1, res.output
