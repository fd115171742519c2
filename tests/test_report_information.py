"""estratos report shows V-information (issue 46, item 1, report side): the table per task x
layer (mean over seeds, negatives as they are), its columns in datasets.csv / report.json,
the --ci interval over test examples from the stored pointwise V-information, the heatmap,
and reports of older results left exactly as they were."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.report import build_report, write_report
from estratos.report.intervals import StatsOptions, pvi_interval
from estratos.results import ResultRecord, ResultsStore
from estratos.results.predictions import CellPredictions, write_predictions
from report_toys import fixture_records, write_lines
from stats_toys import classification_cell

#: V-information each layer of the toy task is built to have, in bits (layer 2 below the prior)
TARGET = {0: 0.05, 1: 0.40, 2: -0.30, "avg": 0.25}


def _bits_cell(layer, seed: int, *, n: int = 400, with_bits: bool = True,
               shift: float = 0.0, model: str = "org/mini"
               ) -> Tuple[ResultRecord, CellPredictions]:
    """A 3-class toy cell whose predictions hold per-example log2-probabilities: the prior is
    uniform (log2 1/3 for every example) and the probe's gold-label log2p is drawn so that
    the mean PVI is about TARGET[layer] + shift; ``information`` is computed from them by
    the formula (as the probe does)."""
    record, preds = classification_cell(layer, seed, n=n, model=model, accuracy={
        0: 55.0, 1: 70.0, 2: 40.0, "avg": 65.0})
    rng = np.random.default_rng([seed, 17, n])
    prior = np.full(preds.n, math.log2(1 / 3))
    target = prior + TARGET[layer] + shift + rng.normal(0.0, 0.6, preds.n)
    log2p = np.minimum(target, -1e-3)  # a log-probability is <= 0
    info = {"cross_entropy": round(-float(log2p.mean()), 6),
            "prior_cross_entropy": round(-float(prior.mean()), 6),
            "v_information": round(float(log2p.mean() - prior.mean()), 6)}
    record = record.replace(information=info)
    if with_bits:
        preds = CellPredictions(preds.predicted, preds.gold, preds.strata, preds.strata_names,
                                log2p=log2p, prior_log2p=prior)
    return record, preds


def _write(path: Path, cells, *, predictions: bool = True):
    cells = list(cells)
    records = [r for r, _ in cells]
    if predictions:
        records = write_predictions(path, records, [p for _, p in cells])
    return ResultsStore(path).append(records)


def _run(path: Path, *, seeds=(1, 2), layers=(0, 1, 2, "avg"), n: int = 400,
         with_bits: bool = True):
    return _write(path, [_bits_cell(layer, seed, n=n, with_bits=with_bits,
                                    shift=0.02 * i)
                         for layer in layers for i, seed in enumerate(seeds)])


def _table(md: str, title: str = "## V-information (bits)") -> Dict[str, str]:
    """layer label -> cell text of the one dataset row of the first table under ``title``."""
    block = md.split(title)[1]
    lines = [line for line in block.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    return dict(zip(header[2:], cells[2:]))


def _number(text: str) -> float:
    return float(text.replace("*", "").replace("<u>", "").split()[0])


def test_the_table_shows_the_mean_over_seeds_of_v_information(tmp_path):
    path = tmp_path / "run.jsonl"
    records = _run(path)
    summary = write_report([path], tmp_path / "rep", formats="md,csv,json,html")
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    assert "## V-information (bits)" in md
    cells = _table(md)
    for layer in (0, 1, 2, "avg"):
        values = [r.information["v_information"] for r in records if r.layer == layer]
        text = cells[str(layer)]
        assert _number(text.strip("*")) == pytest.approx(np.mean(values), abs=5e-4), text
        assert f"± {np.std(values, ddof=1):.3f}" in text
    # layer 1 carries the most bits: best of its row, on the unrounded values
    assert cells["1"].startswith("**") and cells["avg"].startswith("<u>")
    # the note under the table says what the number is
    assert "class prior's cross-entropy H(Y\\|0) minus the probe's held-out cross-entropy" \
        in md
    assert "negative = the probe predicts the test labels worse than the class prior" in md
    # the HTML page is built from the same sections
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert "V-information (bits)" in page and cells["0"].split(" ±")[0] in page
    assert any(p.name.startswith("v-information-bits--") for p in summary.files)


def test_a_negative_v_information_is_shown_negative_never_clipped(tmp_path):
    path = tmp_path / "run.jsonl"
    records = _run(path)
    content = build_report([path])
    md = (tmp_path / "rep.md")
    from estratos.report.writers import to_markdown

    md.write_text(to_markdown(content), encoding="utf-8")
    cells = _table(md.read_text(encoding="utf-8"))
    mean2 = np.mean([r.information["v_information"] for r in records if r.layer == 2])
    assert mean2 < -0.2
    assert cells["2"].startswith(f"{mean2:.3f}"), cells["2"]
    assert "**" not in cells["2"] and "<u>" not in cells["2"]


def test_csv_and_json_carry_the_bits_beside_the_score(tmp_path):
    path = tmp_path / "run.jsonl"
    records = _run(path)
    write_report([path], tmp_path / "rep", formats="csv,json")
    doc = json.loads((tmp_path / "rep" / "report.json").read_text(encoding="utf-8"))
    with open(tmp_path / "rep" / "datasets.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for layer in (0, 2):
        mine = [r for r in records if r.layer == layer]
        [row] = [r for r in doc["dataset_scores"] if r["layer"] == layer]
        [line] = [r for r in rows if r["layer"] == str(layer)]
        for name in ("v_information", "cross_entropy", "prior_cross_entropy"):
            expected = np.mean([r.information[name] for r in mine])
            assert row[f"{name}_mean"] == pytest.approx(expected, abs=1e-4)
            assert float(line[f"{name}_mean"]) == pytest.approx(expected, abs=1e-4)
            assert row[f"{name}_n_seeds"] == 2 and row[f"{name}_std"] is not None
        assert row["mean"] == pytest.approx(np.mean([r.score for r in mine]), abs=1e-4)
        assert "v_information_ci_lo" not in row  # no --ci, no interval columns
    # cross-entropies: H(Y|0) - H(Y|X) is the V-information
    row = doc["dataset_scores"][0]
    assert row["prior_cross_entropy_mean"] - row["cross_entropy_mean"] == pytest.approx(
        row["v_information_mean"], abs=2e-4)
    # the section reaches report.json like every section
    assert any(s["title"] == "V-information (bits)" for s in doc["sections"])
    text = (tmp_path / "rep" / "report.json").read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text


def _reference_interval(pvi: np.ndarray, resamples: int, level: float, seed: int
                        ) -> Tuple[float, float]:
    """A plain numpy percentile bootstrap of the mean over seeds of each seed's mean PVI,
    with draws of its own (not the report's)."""
    rng = np.random.default_rng(seed + 12345)
    n = pvi.shape[1]
    means = np.empty(resamples)
    for b in range(resamples):
        idx = rng.integers(0, n, n)
        means[b] = pvi[:, idx].mean(axis=1).mean()
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def test_ci_interval_of_v_information_matches_a_plain_bootstrap(tmp_path):
    path = tmp_path / "run.jsonl"
    seeds = (1, 2, 3)
    cells = [_bits_cell(1, seed, shift=0.02 * i) for i, seed in enumerate(seeds)]
    _write(path, cells)
    stats = StatsOptions(ci=True, resamples=2000)
    content = build_report([path], stats=stats)
    [(key, interval)] = content.information_intervals.items()
    pvi = np.stack([p.pvi for _, p in cells])
    point = content.agg.information_cell(*key).mean
    assert point == pytest.approx(pvi.mean(), abs=1e-5)
    assert interval.lo <= point <= interval.hi
    lo, hi = _reference_interval(pvi, 2000, stats.level, stats.seed)
    width = hi - lo
    assert interval.lo == pytest.approx(lo, abs=0.1 * width)
    assert interval.hi == pytest.approx(hi, abs=0.1 * width)
    # seeded: the same numbers again
    again = build_report([path], stats=stats).information_intervals[key]
    assert (again.lo, again.hi) == (interval.lo, interval.hi)
    # shown as "v [lo, hi]" in the table, and in the csv/json columns
    from estratos.report.writers import dataset_records, to_markdown

    cell = _table(to_markdown(content))["1"]
    assert f"[{interval.lo:.3f}, {interval.hi:.3f}]" in cell, cell
    [row] = dataset_records(content)
    assert row["v_information_ci_lo"] == pytest.approx(interval.lo, abs=1e-4)
    assert row["v_information_ci_hi"] == pytest.approx(interval.hi, abs=1e-4)


def test_the_interval_resamples_within_strata_and_shrinks_with_more_examples():
    rng = np.random.default_rng(0)
    small = rng.normal(0.3, 1.0, (2, 200))
    large = rng.normal(0.3, 1.0, (2, 5000))
    a, b = pvi_interval(small), pvi_interval(large)
    assert a.lo <= a.estimate <= a.hi and b.lo <= b.estimate <= b.hi
    assert (b.hi - b.lo) < 0.4 * (a.hi - a.lo)
    # strata (inner-kfold folds): resampled within each, keeping their sizes, so a stratum
    # of constant PVI adds no spread and the mean stays the plain mean of the examples
    strata = np.repeat([0, 1], [100, 300])
    values = np.concatenate([np.full(100, 0.5), rng.normal(0.1, 1.0, 300)])[None]
    got = pvi_interval(values, strata, resamples=500)
    assert got.estimate == pytest.approx(values.mean())
    assert got.lo <= got.estimate <= got.hi


def test_cells_without_stored_log2p_get_no_interval_and_no_error(tmp_path):
    path = tmp_path / "run.jsonl"
    _run(path, layers=(0, 1), with_bits=False)
    content = build_report([path], stats=StatsOptions(ci=True, resamples=200))
    assert content.information_intervals == {}
    assert len(content.intervals) == 2  # the score still has its interval
    assert any("no V-information interval" in str(n) for n in content.notices)
    from estratos.report.writers import dataset_records, to_markdown

    md = to_markdown(content)
    cells = _table(md)
    assert "[" not in cells["0"] and "[" not in cells["1"]
    assert all(r["v_information_ci_lo"] is None for r in dataset_records(content))


def test_ci_option_through_the_cli_and_the_heatmap(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "run.jsonl"
    _run(path, layers=(0, 1, 2))
    out = tmp_path / "rep"
    res = CliRunner().invoke(cli, ["report", str(path), "--out", str(out), "--ci",
                                   "--resamples", "200", "--plot", "--format", "md,html"])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text(encoding="utf-8")
    cells = _table(md)
    for layer in ("0", "1", "2"):
        text = cells[layer].replace("**", "").replace("<u>", "").replace("</u>", "")
        lo, hi = (float(x) for x in text.split("[")[1].rstrip("]").split(","))
        assert lo <= _number(text) <= hi
    plots = sorted(p.name for p in (out / "plots").iterdir())
    [heat] = [p for p in plots if p.startswith("heatmap-vinfo_")]
    from matplotlib.image import imread

    image = imread(out / "plots" / heat)
    assert image.shape[0] > 100 and float(np.std(image)) > 0.01
    assert heat in (out / "report.html").read_text(encoding="utf-8")


def test_the_heatmap_writes_negative_values_negative(tmp_path):
    pytest.importorskip("matplotlib")
    from estratos.report.plots import information_heatmap, information_matrix

    path = tmp_path / "run.jsonl"
    _run(path, layers=(0, 1, 2))
    agg = build_report([path]).agg
    [system] = agg.systems
    _, layers, matrix = information_matrix(agg, system)
    assert layers == ["0", "1", "2"] and matrix[0, 2] < -0.2
    fig = information_heatmap(agg, system)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert f"{matrix[0, 2]:.2f}" in texts and matrix[0, 2] < 0


def _report_files(results: Path, out: Path, *, stats: Optional[StatsOptions] = None
                  ) -> Dict[str, str]:
    summary = write_report([results], out, formats="md,latex,csv,json,html", stats=stats)
    return {p.name: p.read_text(encoding="utf-8") for p in summary.files}


def test_results_without_information_give_the_report_they_gave_before(tmp_path,
                                                                       monkeypatch):
    """No V-information section, column, figure or notice: the same files, byte for byte,
    as a report that knows nothing of ``information``."""
    path = write_lines(tmp_path / "old.jsonl", fixture_records())
    now = _report_files(path, tmp_path / "now")
    assert not any("information" in text.lower() for text in now.values())
    assert not any("vinfo" in name or "v-information" in name for name in now)
    # the same report with the V-information code paths switched off
    import estratos.report.build as build
    import estratos.report.writers as writers

    monkeypatch.setattr(build, "information_tables", lambda *a, **k: [])
    monkeypatch.setattr(writers, "_information_fields", lambda *a, **k: {})
    before = _report_files(path, tmp_path / "before")
    assert now.keys() == before.keys()
    for name in now:
        assert now[name].replace("/now", "/before") == before[name], name


def test_old_toy_results_with_predictions_and_ci_have_no_bits_columns(tmp_path):
    path = tmp_path / "old.jsonl"
    _write(path, [classification_cell(layer, seed) for layer in (0, 1) for seed in (1, 2)])
    content = build_report([path], stats=StatsOptions(ci=True, resamples=100))
    from estratos.report.writers import dataset_records, to_markdown

    assert content.agg.information == {} and content.information_intervals == {}
    assert "V-information" not in to_markdown(content)
    assert not any(k.startswith(("v_information", "cross_entropy", "prior_cross"))
                   for r in dataset_records(content) for k in r)


def test_the_interval_draws_the_same_resampled_test_sets_as_the_score_interval():
    """Percent-correct as 'PVI' gives the accuracy interval exactly: the two intervals of a
    cell resample the same examples (same seed, same strata)."""
    from estratos.stats import Sample, bootstrap_ci

    rng = np.random.default_rng(3)
    gold = rng.integers(0, 3, 300)
    pred = np.where(rng.random((2, 300)) < 0.7, gold, (gold + 1) % 3)
    strata = np.arange(300) % 5
    score = bootstrap_ci(Sample("accuracy", pred, gold, strata, "size"), resamples=300)
    bits = pvi_interval(100.0 * (pred == gold), strata, resamples=300)
    assert (bits.lo, bits.hi) == pytest.approx((score.lo, score.hi), abs=1e-9)


def test_one_seed_cells_whose_predictions_are_gone_get_a_notice_not_an_error(tmp_path):
    import shutil

    from estratos.results.predictions import predictions_dir

    path = tmp_path / "run.jsonl"
    _run(path, seeds=(1,), layers=(0, 1))
    shutil.rmtree(predictions_dir(path))
    content = build_report([path], stats=StatsOptions(ci=True))  # the recorded settings
    assert len(content.intervals) == 2  # the scores' recorded intervals still serve
    assert content.information_intervals == {}
    [notice] = [n for n in content.notices if "V-information" in str(n)]
    assert str(notice).count("2 cell(s)") == 1
