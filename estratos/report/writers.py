"""Writing a report's content as Markdown, LaTeX, CSV and JSON.

Markdown and LaTeX render the same display tables (:mod:`estratos.report.tables`), so
they always agree; CSV and JSON are long, machine-readable forms of the aggregate with more
digits and the extra metrics (F1, Spearman, Delta and its baseline/reference). Every writer
returns text; :func:`estratos.files.write_atomic` puts it on disk so an interrupted report
never leaves a half-written file.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from estratos.report.aggregate import (
    CONDITIONAL_FIELDS,
    EXTRA_METRICS,
    INFORMATION_FIELDS,
    Aggregate,
    Row,
    Stat,
)
from estratos.report.odesia import Calibration, Gap
from estratos.report.tables import DECIMALS, Cell, Footnotes, Table
from estratos.results import Notice

MISSING = "—"
UNDEFINED = "undef."
#: shown after a degenerate cell's number (every test prediction one class)
ONE_CLASS = "(one class)"
#: shown after an MDL cell whose online code is longer than the labels-only code
BELOW_FLOOR = "(below floor)"
#: what follows a selectivity cell whose control task scored below its own majority rate
BELOW_MAJORITY = "(control below its majority)"
#: shown after a cell whose seeds could not differ (no spread was measured)
DETERMINISTIC = "(deterministic)"
LEGEND = ("Scores on the paper's scale: accuracy and F1 in %, correlations (SS) Pearson x100. "
          "Each number is the mean ± sample std over the seeds present (std omitted for one "
          "seed, or when every seed gave the same number, e.g. STS cosine; "
          "(deterministic) = the seeds could not differ, e.g. --classifier lbfgs on a split "
          "task trains one model for every seed, so no spread was measured); the Seeds column "
          "gives their number. Best per column in bold, runner-up underlined; {missing} = no "
          "result; * = mean over fewer datasets than the group has in this report.")
#: the note under a table holding degenerate cells
ONE_CLASS_NOTE = ("(one class) = the probe predicted one class for at least 99 % of the test "
                  "examples (the number is about that class's rate, not something the layer "
                  "encodes; never marked best); (one class: k/n seeds) = so did k of the n "
                  "seeds; a group cell says in how many of its datasets. On raw features this "
                  "usually means the probe could not read the features, not that the layer "
                  "is empty: run the same `estratos probe` command with --features "
                  "standardized (same --out: both readings are kept) before concluding.")
DELTA_LEGEND = ("Delta = (s - b) / |b - r| x 100 against the baseline {baseline}; r is the "
                "metric's {rule}. {undefined} = undefined (b = r or unbounded metric).")


@dataclass
class Section:
    """A titled part of the report. ``in_score_files``: its numbers are in groups.csv,
    datasets.csv or gap.csv (and report.json's score lists) with every seed statistic, so
    the csv writer adds no file of its own for it."""

    title: str
    tables: List[Table]
    intro: str = ""
    in_score_files: bool = False


@dataclass
class ReportContent:
    """Everything the writers need; built by :func:`estratos.report.build_report`."""

    sources: List[str]
    notices: List[Notice]
    agg: Aggregate
    sections: List[Section]
    footnotes: Footnotes
    delta: Optional[Aggregate] = None
    calib: Mapping[str, Calibration] = field(default_factory=dict)
    gap: Optional[Gap] = None
    reference: Any = "auto"
    #: figures drawn in memory with ``--plot`` (:class:`estratos.report.plots.RenderedFigure`)
    figures: List[Any] = field(default_factory=list)
    #: (row, task) -> bootstrap interval / mark vs the best layer (report --ci, --significance)
    intervals: Mapping[Any, Any] = field(default_factory=dict)
    marks: Mapping[Any, Any] = field(default_factory=dict)
    #: (row, task, measure) -> bootstrap interval of a bits measure (report --ci; measure:
    #: ``v_information`` of cells with ``information``, ``gain`` of conditional cells; both
    #: from stored log2-probabilities)
    information_intervals: Mapping[Any, Any] = field(default_factory=dict)
    #: similarity and geometry records (``report --similarity``; None: none given)
    maps: Optional[List[Any]] = None
    #: the examples listed by ``report --examples N`` (:mod:`estratos.report.examples`);
    #: None without the option (report.json then has no ``examples`` key)
    examples: Optional[List[Dict[str, Any]]] = None


# --------------------------------------------------------------------------- cell text

def _num(x: float, decimals: int = DECIMALS) -> str:
    text = f"{x:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def value_text(cell: Cell, pm: str) -> str:
    """The number(s) of a value cell without marks: '54.1 ± 0.3', '—', 'undef.'; a cell
    whose seeds all gave the same number shows it alone (no '± 0.0'), and one whose seeds
    could not differ says so: '54.1 (deterministic)'."""
    if cell.undefined:
        return UNDEFINED
    if cell.stat is None:
        return MISSING
    d = cell.decimals
    text = _num(cell.stat.mean, d)
    if cell.stat.std is not None and not cell.stat.constant:
        text += f"{pm}{_num(cell.stat.std, d)}"
    elif getattr(cell.stat, "deterministic", False):
        text += f" {DETERMINISTIC}"
    if cell.ci is not None:
        text += f" [{_num(cell.ci[0], d)}, {_num(cell.ci[1], d)}]"
    return text + ("*" if cell.partial else "") + degenerate_text(cell)


def degenerate_text(cell: Cell) -> str:
    """What follows a cell some of whose seeds predicted (nearly) one class: ' (one class)'
    or ' (one class: 2/3 seeds)'; a group cell: ' (one class in 1/5 datasets)'; an MDL cell
    whose code is longer than the labels-only code: ' (below floor)' likewise, and a
    selectivity whose control scored below its own majority."""
    if cell.one_class_datasets is not None:
        k, n = cell.one_class_datasets
        return f" {ONE_CLASS[:-1]} in {k}/{n} datasets)"
    text = ""
    for mark, seeds in ((ONE_CLASS, cell.degenerate), (BELOW_FLOOR, cell.below_floor),
                        (BELOW_MAJORITY, cell.below_majority)):
        if seeds is not None:
            k, n = seeds
            text += f" {mark}" if k == n else f" {mark[:-1]}: {k}/{n} seeds)"
    return text


def has_one_class(table: Table) -> bool:
    """Whether a table shows a degenerate cell (its note is then added below it)."""
    return any(c.one_class for row in table.rows for c in row)


def _table_notes(table: Table) -> List[int]:
    used = {n for notes in table.header_notes for n in notes}
    used |= {n for row in table.rows for cell in row for n in cell.notes}
    return sorted(used)


# --------------------------------------------------------------------------- markdown

def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _md_cell(cell: Cell) -> str:
    if not cell.is_value:
        return _md_escape(cell.text or "")
    text = value_text(cell, " ± ")
    if cell.mark == "best":
        text = f"**{text}**"
    elif cell.mark == "second":
        text = f"<u>{text}</u>"
    if cell.not_worse:
        text += " †"
    return text + "".join(f" [{n}]" for n in cell.notes)


def markdown_table(table: Table, footnotes: Footnotes) -> str:
    header = [_md_escape(h) + "".join(f" [{n}]" for n in notes)
              for h, notes in zip(table.header, table.header_notes)]
    first_value = next((i for i, c in enumerate(table.rows[0]) if c.is_value), len(header)) \
        if table.rows else len(header)
    align = ["---" if i < first_value else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    if not table.rows:
        lines.append("| " + " | ".join([MISSING] * len(header)) + " |")
    texts = dict(footnotes.items())
    extra = []
    if table.caption:
        extra.append(f"{_md_escape(table.caption)}.")
    extra += [f"[{n}] {_md_escape(texts[n])}" for n in _table_notes(table)]
    if any(c.partial for row in table.rows for c in row):
        extra.append("\\* mean over the datasets this row has (fewer than the group has here).")
    if has_one_class(table):
        extra.append(ONE_CLASS_NOTE)
    return "\n".join(lines) + ("\n\n" + "  \n".join(extra) if extra else "") + "\n"


def to_markdown(content: ReportContent) -> str:
    out = ["# estratos report", ""]
    out.append("Results: " + ", ".join(f"`{s}`" for s in content.sources) + ".")
    out.append("")
    out.append(LEGEND.format(missing=MISSING))
    for section in content.sections:
        out += ["", f"## {section.title}", ""]
        if section.intro:
            out += [section.intro, ""]
        for table in section.tables:
            if len(section.tables) > 1:
                out += [f"### {table.title}", ""]
            out.append(markdown_table(table, content.footnotes).rstrip("\n"))
            out.append("")
        if out[-1] == "":
            out.pop()
    if content.notices:
        out += ["", "## Notices", ""]
        out += [f"- {_md_escape(str(n))}" for n in content.notices]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- latex

_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "—": "---", "±": r"$\pm$", "†": r"$^\dagger$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _tex_notes(notes: Sequence[int]) -> str:
    return f"$^{{{','.join(str(n) for n in notes)}}}$" if notes else ""


def _tex_cell(cell: Cell) -> str:
    if not cell.is_value:
        return latex_escape(cell.text or "")
    text = value_text(cell, r" $\pm$ ").replace(MISSING, "---")
    if cell.mark == "best":
        text = rf"\textbf{{{text}}}"
    elif cell.mark == "second":
        text = rf"\underline{{{text}}}"
    if cell.not_worse:
        text += r"$^\dagger$"
    return text + _tex_notes(cell.notes)


def latex_table(table: Table, footnotes: Footnotes) -> str:
    n_labels = next((i for i, c in enumerate(table.rows[0]) if c.is_value), len(table.header)) \
        if table.rows else len(table.header)
    spec = "l" * n_labels + "r" * (len(table.header) - n_labels)
    header = [latex_escape(h) + _tex_notes(n) for h, n in zip(table.header, table.header_notes)]
    lines = [r"\begin{table}[ht]", r"\centering", r"\small",
             rf"\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(header) + r" \\",
             r"\midrule"]
    lines += [" & ".join(_tex_cell(c) for c in row) + r" \\" for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    texts = dict(footnotes.items())
    notes = [rf"$^{{{n}}}${latex_escape(texts[n])}" for n in _table_notes(table)]
    if any(c.partial for row in table.rows for c in row):
        notes.append(r"* mean over the datasets this row has (fewer than the group has here).")
    if has_one_class(table):
        notes.append(latex_escape(ONE_CLASS_NOTE))
    if notes:
        lines += [r"\par\smallskip\footnotesize", " \\\\\n".join(notes)]
    caption = latex_escape(table.title + (f" ({table.caption})" if table.caption else ""))
    lines += [rf"\caption{{{caption}}}", rf"\label{{tab:{_label(table.key)}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _label(key: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-:." else "-" for ch in key)


def to_latex(content: ReportContent) -> str:
    out = ["% estratos report: tables for \\input{}; needs \\usepackage{booktabs}",
           "% " + latex_escape(LEGEND.format(missing="---")), ""]
    for section in content.sections:
        out.append(f"% {section.title}")
        for table in section.tables:
            out.append(latex_table(table, content.footnotes))
    return "\n".join(out)


# --------------------------------------------------------------------------- csv / json

def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 4)


def _row_fields(row: Row) -> Dict[str, Any]:
    s = row.system
    return {"kind": s.kind, "model": s.model, "revision": s.revision, "pooling": s.pooling,
            "classifier": s.classifier, "features": s.features, "prompt": s.prompt,
            "layer": row.layer}


def _stat_fields(prefix: str, stat: Optional[Stat]) -> Dict[str, Any]:
    return {f"{prefix}mean": _r(stat.mean) if stat else None,
            f"{prefix}std": _r(stat.std) if stat else None,
            f"{prefix}n_seeds": stat.n if stat else None}


def _control_fields(agg: Aggregate, row: Row, task: str) -> Dict[str, Any]:
    """Columns present only in reports whose results have them (so reports of other
    results keep their layout): the control kind, the seeds that predicted one class, the
    MDL compression over the uniform code and over the labels-only floor."""
    out: Dict[str, Any] = {}
    if any(r.system.control for r in agg.rows):
        out["control"] = row.system.control
    if agg.degenerate:
        out["one_class_seeds"] = agg.degenerate_seeds(row, task)[0]
    if agg.compression:
        out |= _stat_fields("compression_", agg.mdl_cell(row, task))
    if agg.floor_compression:
        out |= _stat_fields("floor_compression_", agg.mdl_cell(row, task, True))
    return out


def _information_fields(content: ReportContent, row: Row, task: str) -> Dict[str, Any]:
    """The bits columns, present only in reports whose results record ``information``
    (null for the cells without it): ``v_information_*``, ``cross_entropy_*``,
    ``prior_cross_entropy_*`` (mean, std, n_seeds), and with ``--ci``
    ``v_information_ci_lo``/``_hi``/``_se``; in reports with conditional cells
    (``probe --given``) also ``gain_*`` and ``given_cross_entropy_*`` (and ``gain_ci_*``)."""
    agg = content.agg
    if not agg.information:
        return {}
    conditional = any(name in CONDITIONAL_FIELDS for (_, _, name) in agg.information)
    names = INFORMATION_FIELDS + (CONDITIONAL_FIELDS if conditional else ())
    out: Dict[str, Any] = {}
    for name in names:
        out |= _stat_fields(f"{name}_", agg.information_cell(row, task, name))
    if content.intervals or content.information_intervals:  # the report has --ci
        for measure in ("v_information", "gain") if conditional else ("v_information",):
            ci = content.information_intervals.get((row, task, measure))
            out |= {f"{measure}_ci_lo": _r(ci.lo) if ci else None,
                    f"{measure}_ci_hi": _r(ci.hi) if ci else None,
                    f"{measure}_ci_se": _r(ci.se) if ci else None}
    return out


def group_records(content: ReportContent) -> List[Dict[str, Any]]:
    """One flat record per (row, group) with a value."""
    agg, out = content.agg, []
    for row in agg.rows:
        for group in agg.groups:
            stat = agg.group_cell(row, group)
            if stat is None:
                continue
            rec = _row_fields(row) | {"group": group} | _stat_fields("", stat)
            rec |= {"n_datasets": stat.n_datasets, "n_datasets_group": stat.n_total}
            if content.delta is not None:
                rec |= _stat_fields("delta_", content.delta.group_cell(row, group))
            out.append(rec)
    return out


def dataset_records(content: ReportContent) -> List[Dict[str, Any]]:
    """One flat record per (row, dataset) with a result (a null mean: undefined score)."""
    agg, out = content.agg, []
    for row in agg.rows:
        for ds in agg.datasets:
            stat = agg.cell(row, ds.task)
            if stat is None and not agg.is_undefined(row, ds.task):
                continue  # an undefined score stays, with a null mean (never 0)
            rec = _row_fields(row) | {"group": ds.group, "task": ds.task, "name": ds.name,
                                      "metric": ds.metric} | _stat_fields("", stat)
            for metric in EXTRA_METRICS:
                rec |= _stat_fields(f"{metric}_", agg.extra(row, ds.task, metric))
            rec |= _information_fields(content, row, ds.task)
            if content.intervals:
                ci = content.intervals.get((row, ds.task))
                rec |= {"ci_lo": _r(ci.lo) if ci else None, "ci_hi": _r(ci.hi) if ci else None,
                        "ci_se": _r(ci.se) if ci else None}
            if content.marks:
                mark = content.marks.get((row, ds.task))
                rec |= {"best_layer": mark.best if mark else None,
                        "p_vs_best": _r(mark.p_value) if mark else None,
                        "p_vs_best_adjusted": _r(mark.p_adjusted) if mark else None,
                        "not_worse_than_best": mark.not_worse if mark else None}
            rec["fallback"] = "; ".join(ds.fallbacks) or None
            rec |= _control_fields(agg, row, ds.task)
            if content.delta is not None:
                cal = content.calib.get(ds.task)
                rec |= _stat_fields("delta_", content.delta.cell(row, ds.task))
                rec |= {"baseline": _r(cal.baseline) if cal else None,
                        "reference": _r(cal.reference) if cal else None,
                        "delta_undefined": cal.undefined if cal else "no baseline"}
            out.append(rec)
    return out


def gap_records(gap: Gap) -> List[Dict[str, Any]]:
    """One flat record per (row, pair) with Delta on both sides and Ind."""
    out = []
    for pair in gap.pairs:
        ds_en, ds_es = gap.resolved[pair.name]
        for row in list(gap.rows) + [None]:
            cell = gap.cells.get((row, pair.name))
            if cell is None:
                continue
            fields = _row_fields(row) if row is not None else {
                "kind": "best", "model": None, "revision": None, "pooling": None,
                "classifier": None, "layer": None}
            out.append({"pair": pair.name, "en_task": ds_en.task if ds_en else None,
                        "es_task": ds_es.task if ds_es else None} | fields | {
                "delta_en": _r(cell.delta_en), "delta_es": _r(cell.delta_es),
                "ind": _r(cell.ind), "n_seeds_en": cell.n_en, "n_seeds_es": cell.n_es,
                "best_en": cell.source_en, "best_es": cell.source_es})
    return out


def _csv(records: List[Dict[str, Any]], columns: Optional[List[str]] = None) -> str:
    buf = io.StringIO()
    cols = columns or (list(records[0]) if records else [])
    writer = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    writer.writeheader()
    for rec in records:
        writer.writerow({k: "" if v is None else v for k, v in rec.items()})
    return buf.getvalue()


def cell_record(cell: Cell) -> Dict[str, Any]:
    """One displayed cell as data: its text, or its statistic (mean, std, seeds) with every
    mark the tables show (best/second, one class, below the floor, undefined, interval,
    footnotes); what md, LaTeX and HTML render, without the rendering."""
    if cell.text is not None:
        return {"text": cell.text}
    out: Dict[str, Any] = {}
    if cell.stat is not None:
        out.update(mean=_r(cell.stat.mean), std=_r(cell.stat.std), seeds=cell.stat.n)
    for name, value in (("mark", cell.mark), ("partial", cell.partial or None),
                        ("undefined", cell.undefined or None), ("ci", cell.ci),
                        ("not_worse", cell.not_worse or None),
                        ("one_class", list(cell.degenerate) if cell.degenerate else None),
                        ("one_class_datasets", list(cell.one_class_datasets)
                         if cell.one_class_datasets else None),
                        ("below_floor", list(cell.below_floor) if cell.below_floor else None),
                        ("control_below_majority", list(cell.below_majority)
                         if cell.below_majority else None),
                        ("notes", list(cell.notes) or None)):
        if value is not None:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


def table_records(table: Table) -> List[Dict[str, Any]]:
    """A table's rows as flat records for CSV: each column's text or mean, and beside a
    statistic its ``std``, ``seeds`` and marks as ``<column> <field>`` columns."""
    rows = []
    for row in table.rows:
        record: Dict[str, Any] = {}
        for head, cell in zip(table.header, row):
            data = cell_record(cell)
            record[head] = data.pop("text", data.pop("mean", None))
            for field_name, value in data.items():
                record[f"{head} {field_name}"] = (
                    " ".join(map(str, value)) if isinstance(value, list) else value)
        rows.append(record)
    return rows


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def section_records(content: ReportContent) -> List[Dict[str, Any]]:
    """Every section of the report as data (title, intro, tables with their header and
    cell records): what report.json carries so that no section reaches only md/tex/html."""
    return [{"title": section.title, "intro": section.intro,
             "tables": [{"key": t.key, "title": t.title, "caption": t.caption,
                         "header": list(t.header),
                         "rows": [[cell_record(c) for c in row] for row in t.rows]}
                        for t in section.tables]}
            for section in content.sections]


def _flat_columns(records: List[Dict[str, Any]]) -> List[str]:
    cols: List[str] = []
    for r in records:
        cols += [k for k in r if k not in cols]
    return cols


def to_csv(content: ReportContent) -> Dict[str, str]:
    """File name -> CSV text: groups.csv, datasets.csv, (with a gap) gap.csv, and one
    ``<section>--<table>.csv`` for each table of every other section (per layer, surface
    baselines, selectivity, MDL, control model, similarity...)."""
    files = {"groups.csv": _csv(group_records(content)),
             "datasets.csv": _csv(dataset_records(content))}
    if content.gap is not None:
        files["gap.csv"] = _csv(gap_records(content.gap))
    for section in content.sections:
        if section.in_score_files:
            continue
        for table in section.tables:
            records = table_records(table)
            name = f"{_slug(section.title)}--{_slug(table.key or table.title)}.csv"
            files[name] = _csv(records, _flat_columns(records))
    return files


def to_json(content: ReportContent) -> str:
    doc = {
        "estratos_report": 1,
        "sources": content.sources,
        "notices": [str(n) for n in content.notices],
        "notes": {str(n): text for n, text in content.footnotes.items()},
        "groups": content.agg.groups,
        "datasets": [{"task": d.task, "name": d.name, "group": d.group, "metric": d.metric,
                      "fallbacks": list(d.fallbacks)} for d in content.agg.datasets],
        "group_scores": group_records(content),
        "dataset_scores": dataset_records(content),
        "delta": None if content.delta is None else {
            "reference": content.reference,
            "calibration": {task: {"baseline": _r(c.baseline), "reference": _r(c.reference),
                                   "undefined": c.undefined}
                            for task, c in sorted(content.calib.items())}},
        "gap": None if content.gap is None else {
            "pairs": [{"name": p.name, "en": p.en, "es": p.es} for p in content.gap.pairs],
            "notes": content.gap.notes, "cells": gap_records(content.gap)},
        "sections": section_records(content),
    }
    if content.examples is not None:  # report --examples N
        doc["examples"] = content.examples
    return json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=False) + "\n"


# --------------------------------------------------------------------------- files

#: format name -> function(content) -> {file name: text}
WRITERS: Mapping[str, Callable[[ReportContent], Dict[str, str]]] = {
    "md": lambda c: {"report.md": to_markdown(c)},
    "latex": lambda c: {"report.tex": to_latex(c)},
    "csv": to_csv,
    "json": lambda c: {"report.json": to_json(c)},
}
