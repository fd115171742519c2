"""report.html: one self-contained page (tables + embedded figures) that a browser renders;
deterministic cells shown as one number in every display format."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.report import build_report, write_report
from estratos.report.html import to_html
from report_toys import record, write_lines

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def _sts_constant(tmp_path: Path) -> Path:
    """STS by cosine: three seeds, the same number each time (no training)."""
    lines = [record("es-senteval:STS17", "SS", layer, seed, 64.1 + layer, metric="pearson",
                    test={"pearson": (64.1 + layer) / 100})
             for layer in (0, 1) for seed in (1, 2, 3)]
    lines += [record("es-senteval:TASS1", "SC", layer, seed, 50.0 + layer + seed / 10)
              for layer in (0, 1) for seed in (1, 2, 3)]
    return write_lines(tmp_path / "sts.jsonl", lines)


# ------------------------------------------------------------------ deterministic cells

def test_deterministic_cells_show_one_number_in_md_latex_and_html(tmp_path):
    path = _sts_constant(tmp_path)
    summary = write_report([path], tmp_path / "out", formats="md,latex,html,csv")
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    tex = (tmp_path / "out" / "report.tex").read_text(encoding="utf-8")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    for text in (md, tex, page):
        assert "64.1" in text and "65.1" in text
        assert "0.0" not in text.replace("50.0", "").replace("100.0", ""), \
            "a deterministic cell shows a zero std"
    # TASS1 really varies over seeds: its std stays
    assert "51.2 ± 0.1" in md and r"51.2 $\pm$ 0.1" in tex and "51.2 ± 0.1" in page
    # csv keeps the seed count and a std of exactly 0
    with open(tmp_path / "out" / "datasets.csv", encoding="utf-8") as fh:
        sts = [r for r in csv.DictReader(fh) if r["name"] == "STS17"]
    assert [(r["n_seeds"], r["std"]) for r in sts] == [("3", "0.0"), ("3", "0.0")]
    assert summary.files


def test_group_of_deterministic_cells_is_exactly_constant(tmp_path):
    content = build_report([_sts_constant(tmp_path)])
    row = content.agg.rows[0]
    stat = content.agg.group_cell(row, "SS")
    assert stat.std == 0.0 and stat.constant and stat.n == 3
    assert not content.agg.group_cell(row, "SC").constant


# ------------------------------------------------------------------ the page

def _external_references(page: str) -> list:
    """Every src/href/url() that would load something from outside the file."""
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", page)
    refs += re.findall(r"url\(([^)]*)\)", page)
    refs += re.findall(r"@import", page)
    return [r for r in refs if not (r.startswith("data:") or r.startswith("#"))]


def test_html_holds_every_table_and_nothing_external(fixture_dir):
    write_report(["results.jsonl"], "out", formats="md,html", baseline=["baseline.jsonl"])
    page = (fixture_dir / "out" / "report.html").read_text(encoding="utf-8")
    md = (fixture_dir / "out" / "report.md").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert _external_references(page) == []
    assert "<script" not in page
    # as many tables as the Markdown report, with the same marks
    assert page.count("<table>") == md.count("| Model |") + md.count("| Group |")
    assert page.count('class="num best"') == md.count("**") // 2
    # without --plot: no figure, and the page says how to get them
    assert "data:image/png" not in page and "--plot" in page
    assert "es-senteval:PAWS: k-fold on the test file" in page


def test_html_embeds_the_figures_with_plot(fixture_dir):
    pytest.importorskip("matplotlib")
    summary = write_report(["results.jsonl"], "out", formats="html", plot=True)
    page = (fixture_dir / "out" / "report.html").read_text(encoding="utf-8")
    pngs = [p for p in summary.files if p.suffix == ".png"]
    assert page.count('src="data:image/png;base64,') == len(pngs) == 8
    assert _external_references(page) == []
    for png in pngs:
        assert f"plots/{png.name}" in page


def test_html_escapes_what_the_results_say(tmp_path):
    lines = [record("es-senteval:TASS1", "SC", 0, 1, 50.0, model="<script>alert(1)</script>")]
    content = build_report([write_lines(tmp_path / "r.jsonl", lines)])
    page = to_html(content)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_cli_default_formats_include_html(fixture_dir):
    result = CliRunner().invoke(cli, ["report", "results.jsonl", "--out", "out"])
    assert result.exit_code == 0, result.output
    assert "wrote out/report.html" in result.output
    result = CliRunner().invoke(cli, ["report", "results.jsonl", "--out", "only",
                                      "--format", "html"])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(fixture_dir / "only")) == ["report.html"]
    result = CliRunner().invoke(cli, ["report", "results.jsonl", "--out", "bad",
                                      "--format", "htm"])
    assert result.exit_code == 2 and "--format" in result.output and "html" in result.output
    assert not (fixture_dir / "bad").exists()


# ------------------------------------------------------------------ a real browser

def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no headless browser: install Debian's chromium (apt-get install chromium) "
                "to check that report.html renders")


@pytest.mark.slow  # starts a browser
def test_html_renders_in_a_headless_browser(fixture_dir):
    """Screenshot the page in headless chromium: the page must paint, tables and figures."""
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    browser = _browser()
    write_report(["results.jsonl"], "out", formats="html", plot=True,
                 baseline=["baseline.jsonl"])
    shot = fixture_dir / "shot.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={fixture_dir / 'profile'}", "--window-size=1280,2000",
           f"--screenshot={shot}", (fixture_dir / "out" / "report.html").as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert shot.exists(), f"no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (2000, 1280)
    assert float(pixels.var()) > 1e-3, "the page rendered blank"
    # text was painted (dark pixels), and so were the embedded figures: the heatmaps'
    # saturated colours appear nowhere else on the page
    assert (pixels.max(axis=2) < 0.3).mean() > 0.005
    saturation = pixels.max(axis=2) - pixels.min(axis=2)
    assert (saturation > 0.4).mean() > 0.01, "no figure was drawn"


def test_report_command_with_plot_and_html_does_not_import_torch(fixture_dir, child_env):
    """`estratos report --plot` (figures + the HTML page) stays a torch-free stage."""
    pytest.importorskip("matplotlib")
    import sys

    code = ("import sys; from estratos.cli import cli; "
            "cli.main(['report', 'results.jsonl', '--out', 'out', '--plot', '--format', "
            "'md,html'], standalone_mode=False); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=fixture_dir, capture_output=True,
                          text=True, env=child_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (fixture_dir / "out" / "report.html").is_file()
