"""Stage three: tables, figures and the ODESIA calibration, from results files alone.

Reads results through :mod:`estratos.results` and never imports training code, a cache or
torch. :func:`write_report` writes a report folder; :func:`build_report` computes it in
memory. Modules: ``aggregate`` (seeds -> mean +- std per row and dataset/group), ``tables``
(paper-style layouts), ``writers`` (md, LaTeX, CSV, JSON), ``plots`` (PNG, optional
matplotlib), ``odesia`` (baseline-calibrated Delta and the EN-ES gap). See docs/report.md.
"""

from estratos.report.build import FORMATS, ReportContent, build_report, parse_formats, write_report

__all__ = ["FORMATS", "ReportContent", "build_report", "parse_formats", "write_report"]
