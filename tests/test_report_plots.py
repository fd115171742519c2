"""estratos report --plot: PNG figures when matplotlib is installed, a clear message when not."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.errors import EstratosError
from estratos.report import write_report
from estratos.report.plots import standardize_rows



def _hide_matplotlib(monkeypatch) -> None:
    """Make every matplotlib import fail as if the extra were not installed."""
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends",
                 "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)


def test_heatmaps_and_line_plots_are_written_and_not_blank(fixture_dir):  # noqa: F811
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    summary = write_report(["results.jsonl"], "out", formats="md", plot=True,
                           baseline=["baseline.jsonl"])
    plots = sorted(p.name for p in summary.files if p.suffix == ".png")
    assert plots == ["heatmap_org-beto-r1-cls-senteval.png",
                     "heatmap_org-beto-r1-cls-senteval_z.png",
                     "heatmap_org-mini-r2-cls-senteval.png",
                     "heatmap_org-mini-r2-cls-senteval_z.png",
                     "layers_SC.png", "layers_SP.png", "layers_SPC.png", "layers_SS.png"]
    for name in plots:
        pixels = imread(fixture_dir / "out" / "plots" / name)
        assert pixels.ndim == 3 and pixels.shape[0] > 100
        assert float(pixels[..., :3].var()) > 1e-3, f"{name} looks blank"


def test_missing_matplotlib_gives_the_install_hint_and_writes_nothing(fixture_dir,  # noqa: F811
                                                                      monkeypatch):
    _hide_matplotlib(monkeypatch)
    with pytest.raises(EstratosError, match=r'pip install "estratos\[plot\]"'):
        write_report(["results.jsonl"], "out", plot=True)
    assert not (fixture_dir / "out").exists()


def test_cli_missing_matplotlib_exits_nonzero(fixture_dir, monkeypatch):  # noqa: F811
    _hide_matplotlib(monkeypatch)
    result = CliRunner().invoke(cli, ["report", "results.jsonl", "--out", "out", "--plot"])
    assert result.exit_code == 1
    assert '--plot needs matplotlib' in result.output
    assert 'pip install "estratos[plot]"' in result.output


def test_without_plot_matplotlib_is_not_needed(fixture_dir, monkeypatch):  # noqa: F811
    _hide_matplotlib(monkeypatch)
    summary = write_report(["results.jsonl"], "out", formats="md")
    assert [p.name for p in summary.files] == ["report.md"]


def test_standardize_rows_is_a_z_score_per_task_and_keeps_missing():
    m = np.array([[1.0, 2.0, 3.0], [5.0, 5.0, np.nan]])
    z = standardize_rows(m)
    assert z[0] == pytest.approx([-1.2247449, 0.0, 1.2247449])
    assert z[1, :2] == pytest.approx([0.0, 0.0]) and np.isnan(z[1, 2])
