"""Regenerate the measured tables of docs/*.md from the results files that back them.

    python bench/docs_tables.py            # rewrite each table between its markers
    python bench/docs_tables.py --check    # change nothing; exit 1 naming each table that differs
    python bench/docs_tables.py --list     # each table: its doc and its results files

A table in a doc sits between two marker lines:

    <!-- table: NAME -->
    | ... |
    <!-- /table -->

and ``TABLES`` below says, for each NAME, which doc holds it, which results files (under
``docs/measurements/<run>/``, as ``estratos probe`` / ``baseline`` wrote them) it is made from,
and how it is laid out (similarity and geometry records, as ``estratos similarity`` and
``geometry`` wrote them, are read with the report's reader and laid out per layer). Every
probe number goes through the functions ``estratos report`` uses
(``estratos.report.build_report``: the aggregate over seeds, the per-layer, selectivity and
MDL tables, the bootstrap intervals and significance marks; ``writers.value_text`` and
``writers.markdown_table`` for the text; ``compare_cells`` for ``estratos compare``), so a
doc table reads what ``estratos report`` prints for the same files, only laid out for the
page (e.g. one column per pooling and reading). The commands that made each results file
are in its folder's README.md and next to the table in the doc.

``--check`` exits 1 with one line per table that differs (``docs/FILE.md: table NAME ...``)
and a diff; a marker without an entry in ``TABLES``, or an entry without its markers, is an
error too. tests/test_docs_tables.py runs it, so a doc and its results cannot drift apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from estratos.errors import EstratosError  # noqa: E402
from estratos.report import build_report  # noqa: E402
from estratos.report.compare import compare_cells, p_text  # noqa: E402
from estratos.report.intervals import StatsOptions  # noqa: E402
from estratos.report.tables import Cell, Table  # noqa: E402
from estratos.report.writers import ReportContent, markdown_table, value_text  # noqa: E402
from estratos.results.similarity import MapRecord, most_similar, read_maps  # noqa: E402

DOCS = REPO / "docs"
MEASUREMENTS = DOCS / "measurements"
MARKER = re.compile(r"^<!-- table: (?P<name>[A-Za-z0-9_.-]+) -->\s*$")
END = "<!-- /table -->"


class DocTableError(Exception):
    """A table that cannot be made: a results file, a system or a cell that is not there."""


# --------------------------------------------------------------------------- reading

@cache
def report(files: Tuple[str, ...], ci: bool = False,
           significance: Optional[str] = None) -> ReportContent:
    """``estratos report FILES [--ci] [--significance holm]``, in memory (cached)."""
    paths = [MEASUREMENTS / f for f in files]
    missing = [str(p.relative_to(REPO)) for p in paths if not p.is_file()]
    if missing:
        raise DocTableError(f"results file(s) not found: {', '.join(missing)}")
    stats = StatsOptions(ci=ci, significance=significance) if ci or significance else None
    return build_report([str(p) for p in paths], stats=stats)


@cache
def examples_report(files: Tuple[str, ...], n: int) -> ReportContent:
    """``estratos report FILES --examples N``, in memory (cached)."""
    return build_report([str(MEASUREMENTS / f) for f in files], examples=n)


def examples_table(files: Tuple[str, ...], n: int, task_name: str, **want: Optional[str]) -> str:
    """The report's ``--examples N`` rows of one task (what ``estratos report`` writes)."""
    content = examples_report(files, n)
    want.setdefault("control", None)
    key = f"examples-{system_slug(content, kind='probe', **want)}"
    tables = _tables(content)
    if key not in tables:
        raise DocTableError(f"the report of {', '.join(files)} has no table {key!r}")
    table = tables[key]
    rows = [row for row in table.rows if row and row[0].text == task_name]
    return markdown_table(dataclasses.replace(table, rows=rows, caption=""), content.footnotes)


def _tables(content: ReportContent) -> Dict[str, Table]:
    return {t.key: t for section in content.sections for t in section.tables}


def system_slug(content: ReportContent, **want: Optional[str]) -> str:
    """The slug of the one system of the report whose attributes (``pooling``, ``features``,
    ``control``, ``kind``) are ``want``; an error naming them when none or several match."""
    found = [s for s in content.agg.systems
             if all(getattr(s, k) == v for k, v in want.items())]
    if len(found) != 1:
        what = ", ".join(f"{k}={v}" for k, v in want.items())
        raise DocTableError(f"{len(found)} systems match {what} in "
                            f"{', '.join(content.sources)} (need exactly one)")
    return found[0].slug


def dataset_label(content: ReportContent, task: str) -> str:
    for ds in content.agg.datasets:
        if ds.task == task:
            return ds.label
    raise DocTableError(f"no dataset {task} in {', '.join(content.sources)}")


def layer_cells(content: ReportContent, key: str, task: str) -> Dict[str, Cell]:
    """Layer label -> cell of the report's table ``key`` (a per-layer, selectivity or MDL
    table: rows are datasets, columns layer specs) in the row of ``task``."""
    tables = _tables(content)
    if key not in tables:
        raise DocTableError(f"the report of {', '.join(content.sources)} has no table {key!r}")
    table = tables[key]
    label = dataset_label(content, task)
    for row in table.rows:
        if row[1].text == label:
            return dict(zip(table.header[2:], row[2:]))
    raise DocTableError(f"table {key!r} has no row {label!r}")


def cell_text(cell: Optional[Cell]) -> str:
    """A cell as the report writes it, without its best / runner-up marks (they rank the
    report's own rows, not this layout's columns); a missing cell is '-'."""
    if cell is None:
        return "-"
    return cell.text if cell.text and cell.stat is None else value_text(cell, " ± ")


# --------------------------------------------------------------------------- layouts

#: a column of a layer-by-layer table: header, report (files), table kind, system, task.
#: kind: "layers" (scores), "selectivity", "selectivity-majority", "control-majority",
#: "mdl", "mdl-floor"
@dataclass(frozen=True)
class Column:
    header: str
    files: Tuple[str, ...]
    kind: str
    task: str
    pooling: Optional[str] = None
    features: Optional[str] = None
    control: Optional[str] = None


def layer_rows(columns: Sequence[Column], first: str = "layer") -> str:
    """Rows = layer specs (every layer any column has, in the report's order), one column
    per ``Column``: the cells of the report's tables, laid out side by side."""
    per_column: List[Dict[str, Cell]] = []
    layers: List[str] = []
    for col in columns:
        content = report(col.files)
        slug = system_slug(content, kind="probe", pooling=col.pooling, features=col.features,
                           control=col.control)
        cells = layer_cells(content, f"{col.kind}-{slug}", col.task)
        per_column.append(cells)
        layers += [lab for lab in cells if lab not in layers]
    order = sorted(layers, key=lambda x: (1, 0) if x == "avg" else (0, int(x)))
    lines = ["| " + " | ".join([first] + [c.header for c in columns]) + " |",
             "| --- |" + " ---: |" * len(columns)]
    for layer in order:
        lines.append("| " + " | ".join([layer] + [cell_text(cells.get(layer))
                                                  for cells in per_column]) + " |")
    return "\n".join(lines) + "\n"


def baseline_rows(files: Tuple[str, ...], tasks: Sequence[str],
                  columns: Sequence[Tuple[str, str]],
                  by_construction: Sequence[Tuple[str, str]] = ()) -> str:
    """Rows = tasks, a column per baseline (``(header, baseline name)``), beside the task's
    majority rate: the scores of ``estratos baseline`` as the report aggregates them. A
    (task, baseline) of ``by_construction`` is bold: a score the data is built to hold at
    the majority rate (bold only while it is)."""
    from estratos.report.tables import value_cell

    content = report(files)
    agg = content.agg
    rows = {r.system.classifier: r for r in agg.rows if r.system.kind == "baseline"}
    lines = ["| task | majority | " + " | ".join(h for h, _ in columns) + " |",
             "|---|---:|" + "---:|" * len(columns)]
    for task in tasks:
        ds = next((d for d in agg.datasets if d.task == task), None)
        if ds is None:
            raise DocTableError(f"no dataset {task} in {', '.join(files)}")
        texts = [f"{ds.chance[0]:.3g}" if ds.chance else "-"]
        for _, name in columns:
            if name not in rows:
                raise DocTableError(f"no baseline {name!r} in {', '.join(files)}")
            cell = value_cell(agg, rows[name], task)
            text = cell_text(cell)
            if (ds.name, name) in by_construction and ds.chance and cell.stat is not None \
                    and round(cell.stat.mean, 1) == round(ds.chance[0], 1):
                text = f"**{text}**"
            texts.append(text)
        lines.append(f"| {ds.name} | " + " | ".join(texts) + " |")
    return "\n".join(lines) + "\n"


def report_table(files: Tuple[str, ...], key_prefix: str, *, ci: bool = False,
                 significance: Optional[str] = None, **want: Optional[str]) -> str:
    """One of the report's own tables, exactly as ``estratos report`` writes it in
    report.md (marks, caption and notes included)."""
    content = report(files, ci, significance)
    want.setdefault("control", None)
    key = f"{key_prefix}-{system_slug(content, kind='probe', **want)}"
    tables = _tables(content)
    if key not in tables:
        raise DocTableError(f"the report of {', '.join(files)} has no table {key!r}")
    return markdown_table(tables[key], content.footnotes)


def comparisons(files: Tuple[str, ...], pairs: Sequence[Tuple[str, str, str]]) -> str:
    """``estratos compare FILES --task T --a A --b B`` for each (T, A, B), one row each."""
    paths = [str(MEASUREMENTS / f) for f in files]
    lines = ["| task | A | B | A [95% CI] | B [95% CI] | B - A [95% CI] | paired bootstrap p "
             "| McNemar p per seed |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for task, a, b in pairs:
        c = compare_cells(paths, task, a, b)
        d = c.difference

        def side(iv) -> str:
            return f"{iv.estimate:.2f} [{iv.lo:.2f}, {iv.hi:.2f}]"

        def pv(p: float) -> str:
            return p_text(p).removeprefix("= ")

        mcnemar = ", ".join(f"{seed}: {pv(p)}" for seed, _, _, p in c.mcnemar) or "-"
        p = "-" if d.p_value is None else pv(d.p_value)
        lines.append(f"| {task} | `{a}` | `{b}` | {side(c.a.interval)} | {side(c.b.interval)} "
                     f"| {d.diff:+.2f} [{d.lo:+.2f}, {d.hi:+.2f}] | {p} | {mcnemar} |")
    return "\n".join(lines) + "\n"


@cache
def maps(files: Tuple[str, ...]) -> Tuple[MapRecord, ...]:
    """The similarity / geometry records of ``files`` as the report reads them (the last copy
    of a record wins)."""
    paths = [MEASUREMENTS / f for f in files]
    missing = [str(p.relative_to(REPO)) for p in paths if not p.is_file()]
    if missing:
        raise DocTableError(f"records file(s) not found: {', '.join(missing)}")
    return tuple(read_maps([str(p) for p in paths]))


def _stem(part: Optional[Dict]) -> Optional[str]:
    return None if not part else Path(part["path"]).stem


def _map_values(files: Tuple[str, ...], a: str, b: Optional[str], features: str,
                residualize: Optional[str] = None
                ) -> Dict[Tuple[str, str, str], Optional[float]]:
    """(measure, layer a, layer b) -> value of the map of cache ``a`` with ``b`` (caches named
    by their file's stem), mean pooling, under ``features``, with ``residualize`` (None:
    the map of the vectors as they are)."""
    out = {(r.measure, str(r.layer_a), str(r.layer_b)): r.value for r in maps(files)
           if r.kind == "similarity" and _stem(r.a) == a and _stem(r.b) == (b or a)
           and r.pooling == "mean" and r.features == features
           and r.settings.get("residualize") == residualize}
    if not out:
        raise DocTableError(f"no similarity records of {a} with {b or a} ({features})")
    return out


def _ordered(layers: Sequence[str]) -> List[str]:
    return sorted(set(layers), key=lambda t: (not t.isdigit(), int(t) if t.isdigit() else 0))


def _v(value: Optional[float], digits: int = 2) -> str:
    return "undef." if value is None else f"{value:.{digits}f}"


def same_layer_rows(files: Tuple[str, ...], a: str, b: str, features: str) -> str:
    """Rows = layer specs both caches have: each measure of layer i of ``a`` with layer i of
    ``b`` (a model against its own control: the same architecture)."""
    values = _map_values(files, a, b, features)
    header = ["linear-cka", "debiased-cka", "rsa", "procrustes", "mutual-knn"]
    layers = _ordered([la for (_, la, lb) in values if la == lb])
    lines = ["| layer | linear CKA | debiased CKA | RSA | Procrustes (rad) | mutual k-NN |",
             "| --- |" + " ---: |" * len(header)]
    for la in layers:
        lines.append(f"| {la} | " + " | ".join(_v(values.get((m, la, la))) for m in header)
                     + " |")
    return "\n".join(lines) + "\n"


def _map_records(files: Tuple[str, ...], a: str, b: str, measure: str, features: str,
                 residualize: Optional[str] = None) -> Dict[Tuple[str, str], MapRecord]:
    """(layer a, layer b) -> record of one measure of the map of cache ``a`` with ``b``
    (with ``residualize``: of that map)."""
    out = {(str(r.layer_a), str(r.layer_b)): r for r in maps(files)
           if r.kind == "similarity" and _stem(r.a) == a and _stem(r.b) == b
           and r.pooling == "mean" and r.features == features and r.measure == measure
           and r.settings.get("residualize") == residualize}
    if not out:
        raise DocTableError(f"no {measure} records of {a} with {b} ({features})")
    return out


def best_layer_rows(files: Tuple[str, ...], a: str, b: str,
                    columns: Sequence[Tuple[str, str]], residualize: Optional[str] = None
                    ) -> str:
    """Rows = layer specs of ``a``: per column (measure, features), the most similar layer of
    ``b`` and its value (the report's rule, ``most_similar``: the largest value, the
    smallest Procrustes angle); where the record holds a bootstrap, its interval and the
    layers tied with it (``~ L``: their paired difference's interval reaches 0);
    ``residualize``: the map made with it."""
    per = {(m, f): _map_records(files, a, b, m, f, residualize) for m, f in columns}
    layers = _ordered([la for found in per.values() for (la, _) in found])
    lines = ["| layer of " + a + " | " + " | ".join(f"{m}, {f}" for m, f in columns) + " |",
             "| --- |" + " ---: |" * len(columns)]
    for la in layers:
        texts = []
        for m, f in columns:
            row = {lb: r for (aa, lb), r in per[(m, f)].items() if aa == la}
            pick = most_similar([(lb, r.value) for lb, r in row.items()], m)
            if pick is None:
                texts.append("undef.")
                continue
            text = f"{pick[0]} ({pick[1]:.2f}"
            boot = row[str(pick[0])].detail.get("bootstrap") or {}
            if boot.get("lo") is not None:
                text += f" [{boot['lo']:.2f}, {boot['hi']:.2f}]"
            text += ")"
            tied = [lb for lb, r in row.items() if (r.detail.get("bootstrap") or {}).get("tie")]
            if tied:
                text += " ~ " + ", ".join(_ordered(tied))
            texts.append(text)
        lines.append(f"| {la} | " + " | ".join(texts) + " |")
    return "\n".join(lines) + "\n"


def length_rows(files: Tuple[str, ...], a: str, b: str, features: str) -> str:
    """Rows = layer specs both caches have: each measure of layer i of ``a`` with layer i of
    ``b`` as they are and with length regressed out (``--residualize length``), and the
    share of each side's variance length explained."""
    plain = _map_values(files, a, b, features)
    out = _map_values(files, a, b, features, "length")
    shares = {str(r.layer_a): r.detail.get("residualized", {}) for r in maps(files)
              if r.kind == "similarity" and _stem(r.a) == a and _stem(r.b) == b
              and r.settings.get("residualize") == "length" and r.features == features
              and r.measure == "linear-cka" and r.layer_a == r.layer_b}
    header = ["linear-cka", "debiased-cka", "rsa", "mutual-knn"]
    lines = [f"| layer | length's share of the variance: {a}, {b} | linear CKA | debiased CKA "
             "| RSA | mutual k-NN |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for la in _ordered([la for (_, la, lb) in out if la == lb]):
        share = shares.get(la, {})
        cells = [f"{_v(plain.get((m, la, la)))} -> {_v(out.get((m, la, la)))}" for m in header]
        lines.append(f"| {la} | {_share(share.get('explained_a'))}, "
                     f"{_share(share.get('explained_b'))} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _geometry_records(files: Tuple[str, ...], cache_name: str, pooling: str,
                      features: Optional[str] = None) -> Dict[Tuple[str, str, str], Any]:
    """One cache's geometry records of ``pooling`` (of ``features`` only, when given) by
    (measure, features, layer); a :class:`DocTableError` when there are none."""
    by = {(r.measure, r.features, str(r.layer_a)): r for r in maps(files)
          if r.kind == "geometry" and _stem(r.a) == cache_name and r.pooling == pooling
          and features in (None, r.features)}
    if not by:
        raise DocTableError(f"no geometry records of {cache_name} ({pooling})")
    return by


def geometry_rows(files: Tuple[str, ...], cache_name: str, pooling: str = "mean") -> str:
    """Rows = layer specs of one cache: its geometry, raw beside standardized where they
    differ (anisotropy and its top dimensions with their shares of the anisotropy and of
    the variance, the dimension of largest variance share, max / median activation,
    effective rank)."""
    by = _geometry_records(files, cache_name, pooling)
    lines = ["| layer | anisotropy | top dims (share of anisotropy; of variance) "
             "| top variance dim (share of variance; of Gram) | max \\|a\\| (dim) "
             "| max / median | effective rank, raw | effective rank, standardized | TwoNN |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for la in _ordered([k[2] for k in by]):
        aniso, act = by[("anisotropy", RAW, la)], by[("max-abs", RAW, la)]
        tops = ", ".join(f"{t['dim']} ({_v(t.get('share'))}; {_v(t.get('variance_share'))})"
                         for t in aniso.detail.get("top_dims", [])[:2])
        spread = [f"{t['dim']} ({_v(t.get('variance_share'))}; {_v(t.get('gram_share'))})"
                  for t in aniso.detail.get("top_variance_dims", [])[:1]]
        ratio = act.detail.get("ratio")
        lines.append(f"| {la} | {_v(aniso.value)} | {tops or '-'} | "
                     f"{spread[0] if spread else '-'} | "
                     f"{_v(act.value, 0)} ({act.detail.get('dim')}) | "
                     f"{_v(ratio, 0) if isinstance(ratio, (int, float)) else 'undef.'} | "
                     f"{_v(by[('effective-rank', RAW, la)].value, 1)} | "
                     f"{_v(by[('effective-rank', STD, la)].value, 1)} | "
                     f"{_v(by[('twonn', RAW, la)].value, 1)} |")
    return "\n".join(lines) + "\n"


def _share(value: Optional[float]) -> str:
    """A share as a percentage: one decimal, two below 1 %."""
    if value is None:
        return "undef."
    return f"{100 * value:.2f} %" if value < 0.01 else f"{100 * value:.1f} %"


def geometry_shares_rows(files: Tuple[str, ...], cache_name: str, pooling: str) -> str:
    """Rows = layer specs of one cache (raw features): the anisotropy and its top dimension
    with that dimension's share of the anisotropy, of the variance and of the centred Gram;
    the dimension of largest variance share with its two shares; the largest activation's
    dimension, its max / median ratio and its share of the variance (an offset carries
    anisotropy and a large activation, and no variance)."""
    by = _geometry_records(files, cache_name, pooling, RAW)
    lines = ["| layer | anisotropy | top dim: share of anisotropy, of variance, of Gram "
             "| top variance dim: share of variance, of Gram | max / median (dim): its "
             "share of variance |",
             "| --- | ---: | --- | --- | --- |"]
    for la in _ordered([k[2] for k in by]):
        aniso, act = by[("anisotropy", RAW, la)], by[("max-abs", RAW, la)]
        tops = aniso.detail.get("top_dims") or []
        spread = aniso.detail.get("top_variance_dims") or []
        first = (f"{tops[0]['dim']}: {_share(tops[0].get('share'))}, "
                 f"{_share(tops[0].get('variance_share'))}, "
                 f"{_share(tops[0].get('gram_share'))}") if tops else "-"
        most = (f"{spread[0]['dim']}: {_share(spread[0].get('variance_share'))}, "
                f"{_share(spread[0].get('gram_share'))}") if spread else "-"
        ratio = act.detail.get("ratio")
        lines.append(f"| {la} | {_v(aniso.value, 3)} | {first} | {most} | "
                     f"{_v(ratio, 0) if isinstance(ratio, (int, float)) else 'undef.'} "
                     f"({act.detail.get('dim')}): {_share(act.detail.get('variance_share'))} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the tables

MINILM = ("minilm-controls/minilm.jsonl",)
STATS = ("minilm-statistics/stats.jsonl",)
DEMO = ("demo/results.jsonl",)
SURFACE = ("demo/surface.jsonl",)
INFORMATION = ("minilm-information/probing.jsonl", "minilm-information/downstream.jsonl")
CONDITIONAL = ("minilm-information/conditional.jsonl",
               "minilm-information/downstream-conditional.jsonl")
ERASURE = ("minilm-information/probing.jsonl", "minilm-information/erasure.jsonl")
SIMILARITY = ("similarity-es5k/similarity.jsonl",)
GEOMETRY = ("similarity-es5k/geometry.jsonl",)
TASS1, SICKE, RST = "es-senteval:TASS1", "es-senteval:SICKEntailment", "es-discoeval:RST"
RAW, STD = "raw", "standardized"


def _readings(task: str) -> str:
    """docs/probe.md: raw against standardized, [CLS] and mean pooling."""
    return layer_rows([
        Column("[CLS] raw", MINILM, "layers", task, "cls", RAW),
        Column("[CLS] standardized", MINILM, "layers", task, "cls", STD),
        Column("mean raw", MINILM, "layers", task, "mean", RAW),
        Column("mean standardized", MINILM, "layers", task, "mean", STD)])


def _controls(task: str) -> str:
    """docs/controls.md: accuracy beside its controls, standardized features."""
    return layer_rows([
        Column("[CLS] accuracy", MINILM, "layers", task, "cls", STD),
        Column("[CLS] control task", MINILM, "layers", task, "cls", STD, "control-task"),
        Column("[CLS] control / its majority", MINILM, "control-majority", task, "cls", STD),
        Column("[CLS] label shuffle", MINILM, "layers", task, "cls", STD, "label-shuffle"),
        Column("mean accuracy", MINILM, "layers", task, "mean", STD),
        Column("mean control task", MINILM, "layers", task, "mean", STD, "control-task"),
        Column("mean control / its majority", MINILM, "control-majority", task, "mean", STD)])


def _selectivity(task: str) -> str:
    return layer_rows([
        Column("[CLS] raw", MINILM, "selectivity", task, "cls", RAW),
        Column("[CLS] standardized", MINILM, "selectivity", task, "cls", STD),
        Column("mean standardized", MINILM, "selectivity", task, "mean", STD),
        Column("[CLS] std., over majorities", MINILM, "selectivity-majority", task, "cls",
               STD),
        Column("mean std., over majorities", MINILM, "selectivity-majority", task, "mean",
               STD)])


def _mdl(task: str) -> str:
    return layer_rows([
        Column("raw: compression", MINILM, "mdl", task, "cls", RAW),
        Column("raw: over floor", MINILM, "mdl-floor", task, "cls", RAW),
        Column("standardized: compression", MINILM, "mdl", task, "cls", STD),
        Column("standardized: over floor", MINILM, "mdl-floor", task, "cls", STD)])


@dataclass(frozen=True)
class DocTable:
    name: str
    doc: str
    files: Tuple[str, ...]
    render: Callable[[], str]


def _tables_list() -> List[DocTable]:
    out: List[DocTable] = []
    for short, task in (("tass1", TASS1), ("sicke", SICKE), ("rst", RST)):
        out += [DocTable(f"probe-features-{short}", "probe.md", MINILM,
                         lambda t=task: _readings(t)),
                DocTable(f"controls-{short}", "controls.md", MINILM,
                         lambda t=task: _controls(t)),
                DocTable(f"controls-selectivity-{short}", "controls.md", MINILM,
                         lambda t=task: _selectivity(t)),
                DocTable(f"controls-mdl-{short}", "controls.md", MINILM,
                         lambda t=task: _mdl(t))]
    out.append(DocTable("models-minilm", "models.md", MINILM, lambda: layer_rows([
        Column("TASS1 MiniLM cls", MINILM, "layers", TASS1, "cls", RAW),
        Column("RST MiniLM cls", MINILM, "layers", RST, "cls", RAW),
        Column("TASS1 MiniLM mean", MINILM, "layers", TASS1, "mean", RAW),
        Column("RST MiniLM mean", MINILM, "layers", RST, "mean", RAW)])))
    out.append(DocTable("statistics-layers", "statistics.md", STATS, lambda: report_table(
        STATS, "layers", ci=True, significance="holm", pooling="mean", features=RAW)))
    out.append(DocTable("statistics-compare", "statistics.md", STATS, lambda: comparisons(
        STATS, [(TASS1, "layer=5", "layer=avg"), (TASS1, "layer=5", "layer=6"),
                ("es-senteval:STS14", "layer=5", "layer=6")])))
    synth = [f"synthetic-es:{n}" for n in (
        "Tense", "SubjNumber", "ObjNumber", "Length", "BigramShift", "CoordinationInversion",
        "OddManOut", "Depth", "WordContent")]
    surface = [("TF-IDF", "tfidf"), ("word counts", "word-counts"),
               ("length, tokens", "length-tokens"), ("length, characters", "length-chars"),
               ("character 1-4-grams", "char-ngrams"), ("word bigrams", "word-bigrams"),
               ("word at position", "word-position"), ("first and last word", "first-last-word"),
               ("function words", "function-words")]
    order_blind = ("tfidf", "word-counts", "length-tokens", "length-chars", "first-last-word",
                   "function-words")
    bold = [(t, b) for t in ("BigramShift", "CoordinationInversion", "OddManOut")
            for b in order_blind]
    bold += [(t, b) for t in ("SubjNumber", "ObjNumber", "Depth")
             for b in ("length-tokens", "length-chars")]
    out.append(DocTable("tasks-surface", "tasks.md", SURFACE, lambda: baseline_rows(
        SURFACE, synth, surface, bold)))
    out.append(DocTable("tasks-demo-vs-surface", "tasks.md", DEMO + SURFACE, lambda: report_table(
        DEMO + SURFACE, "surface", pooling="mean", features=RAW)))
    out.append(DocTable("demo-layers", "demo.md", DEMO, lambda: report_table(
        DEMO, "layers", pooling="mean", features=RAW)))
    out.append(DocTable("demo-selectivity", "demo.md", DEMO, lambda: report_table(
        DEMO, "selectivity", pooling="mean", features=RAW)))
    out.append(DocTable("similarity-minilm-control", "similarity.md", SIMILARITY,
                        lambda: same_layer_rows(SIMILARITY, "minilm", "minilm-random", RAW)))
    out.append(DocTable("similarity-minilm-e5", "similarity.md", SIMILARITY,
                        lambda: best_layer_rows(SIMILARITY, "minilm", "e5", [
                            ("linear-cka", RAW), ("linear-cka", STD), ("rsa", RAW)])))
    out.append(DocTable("similarity-minilm-control-length", "similarity.md", SIMILARITY,
                        lambda: length_rows(SIMILARITY, "minilm", "minilm-random", RAW)))
    out.append(DocTable("similarity-minilm-e5-length", "similarity.md", SIMILARITY,
                        lambda: best_layer_rows(SIMILARITY, "minilm", "e5", [
                            ("linear-cka", RAW), ("linear-cka", STD), ("rsa", RAW)],
                            residualize="length")))
    out.append(DocTable("similarity-smollm2-minilm", "similarity.md", SIMILARITY,
                        lambda: best_layer_rows(SIMILARITY, "smollm2", "minilm", [
                            ("linear-cka", RAW), ("linear-cka", STD), ("rsa", RAW),
                            ("rsa", STD)])))
    out.append(DocTable("information-accuracy", "information.md", INFORMATION,
                        lambda: report_table(INFORMATION, "layers", pooling="mean",
                                             features=STD)))
    out.append(DocTable("information-vinfo", "information.md", INFORMATION,
                        lambda: report_table(INFORMATION, "vinfo", ci=True, pooling="mean",
                                             features=STD)))
    out.append(DocTable("information-examples-tass1", "information.md", INFORMATION[1:],
                        lambda: examples_table(INFORMATION[1:], 5, "TASS1", pooling="mean",
                                               features=STD)))
    for given, name in (("0", "information-gain-layer0"),
                        ("length-tokens", "information-gain-length")):
        out.append(DocTable(name, "information.md", CONDITIONAL,
                            lambda given=given: report_table(
                                CONDITIONAL, "gain", ci=True, pooling="mean", features=STD,
                                given=given)))
    for erase, key, name in (("length", "layers", "information-erased-length"),
                             ("length", "erasure", "information-erasure-check"),
                             ("random:5", "layers", "information-erased-random")):
        out.append(DocTable(name, "information.md", ERASURE,
                            lambda erase=erase, key=key: report_table(
                                ERASURE, key, pooling="mean", features=STD, erase=erase)))
    out.append(DocTable("geometry-smollm2", "similarity.md", GEOMETRY,
                        lambda: geometry_rows(GEOMETRY, "smollm2")))
    for name, cache_name, pooling in (("geometry-minilm-cls", "minilm", "cls"),
                                      ("geometry-e5", "e5", "mean")):
        out.append(DocTable(name, "similarity.md", GEOMETRY,
                            lambda c=cache_name, p=pooling: geometry_shares_rows(
                                GEOMETRY, c, p)))
    return out


TABLES: List[DocTable] = _tables_list()


# --------------------------------------------------------------------------- the docs

def blocks(text: str, doc: str) -> Dict[str, Tuple[int, int]]:
    """Marker name -> (first line of its body, line of its end marker), 0-based."""
    lines = text.split("\n")
    found: Dict[str, Tuple[int, int]] = {}
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            name = m.group("name")
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == END
                        or MARKER.match(lines[j])), None)
            if end is None or lines[end].strip() != END:
                raise DocTableError(f"docs/{doc}:{i + 1}: table {name} has no {END} line")
            if name in found:
                raise DocTableError(f"docs/{doc}:{i + 1}: table {name} appears twice")
            found[name] = (i + 1, end)
            i = end
        i += 1
    return found


def render_doc(doc: str, text: str, tables: Sequence[DocTable]) -> Tuple[str, List[str]]:
    """The doc with each of its tables rendered again, and the names of those that changed.
    A marker with no entry, or an entry with no marker, is an error."""
    found = blocks(text, doc)
    known = {t.name for t in tables}
    unknown = sorted(set(found) - known)
    if unknown:
        raise DocTableError(f"docs/{doc}: table marker(s) with no entry in "
                            f"bench/docs_tables.py: {', '.join(unknown)}")
    absent = sorted(known - set(found))
    if absent:
        raise DocTableError(f"docs/{doc}: no marker for table(s) {', '.join(absent)} "
                            f"(add '<!-- table: NAME -->' ... '{END}')")
    lines = text.split("\n")
    changed = []
    # from the last block up, so earlier line numbers stay valid
    for table in sorted(tables, key=lambda t: -found[t.name][0]):
        start, end = found[table.name]
        new = table.render().rstrip("\n").split("\n")
        if lines[start:end] != new:
            changed.append(table.name)
            lines[start:end] = new
    return "\n".join(lines), sorted(changed)


def _say(text: str, out: TextIO) -> None:
    out.write(text + "\n")


def run(check: bool, only: Sequence[str] = (), out: TextIO = sys.stdout) -> int:
    by_doc: Dict[str, List[DocTable]] = {}
    for t in TABLES:
        by_doc.setdefault(t.doc, []).append(t)
    status = 0
    for doc, tables in by_doc.items():
        if only and doc not in only and f"docs/{doc}" not in only:
            continue
        path = DOCS / doc
        text = path.read_text(encoding="utf-8")
        try:
            new, changed = render_doc(doc, text, tables)
        except (DocTableError, EstratosError) as exc:
            text = str(exc)
            _say("error: " + (text if text.startswith("docs/") else f"docs/{doc}: {text}"), out)
            status = 1
            continue
        for name in changed:
            files = ", ".join(next(t.files for t in tables if t.name == name))
            _say(f"docs/{doc}: table {name} " + (f"differs from its results file(s) ({files})"
                                                 if check else "rewritten"), out)
        if changed and check:
            diff = difflib.unified_diff(text.split("\n"), new.split("\n"), f"docs/{doc}",
                                        f"docs/{doc} (from its results)", lineterm="", n=0)
            _say("\n".join(diff), out)
            status = 1
        elif changed:
            path.write_text(new, encoding="utf-8")
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 naming each table that differs")
    parser.add_argument("--list", action="store_true", help="list the tables and their files")
    parser.add_argument("docs", nargs="*", help="only these docs (e.g. docs/probe.md)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.list:
        for t in TABLES:
            _say(f"docs/{t.doc}: {t.name}: "
                 + ", ".join(f"docs/measurements/{f}" for f in t.files), sys.stdout)
        return 0
    try:
        return run(args.check, args.docs)
    except (DocTableError, EstratosError) as exc:
        _say(f"error: {exc}", sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
