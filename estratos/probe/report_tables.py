"""Aggregating result cells over seeds, and laying them out as the paper's tables.

:class:`Aggregate` turns validated records into mean +- std over seeds per (row, dataset)
and per (row, group); a row is one system (model, revision, pooling, classifier) at one layer
spec. The ``*_table`` functions lay an aggregate out as :class:`Table` objects (cells plus
best / runner-up marks and footnotes) that the writers of ``report_writers`` render as
Markdown or LaTeX, so both formats always show the same numbers.

Choices written down here because the paper does not fix them:
- std is the sample standard deviation (ddof=1) over seeds, omitted for one seed;
- a group cell is the mean of the row's dataset means; its std is taken over the per-seed
  group averages of the seeds every dataset of the cell has; when the row lacks some of the
  group's datasets the mean covers those present and is flagged (``partial``);
- dataset columns are sorted by group (paper order), then by name in natural order;
- best / runner-up are decided on the values as displayed (one decimal), ties share a mark;
  partial group means take no mark (they average other datasets).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from estratos.errors import ResultsError
from estratos.probe.report_load import Layer, Record, classifier_name
from estratos.tasks.types import GROUPS

#: extra per-dataset metrics the csv/json outputs carry beside ``score``, read from a
#: record's ``test`` (PAWS F1, STS/SICK-R Spearman); correlations are stored in [-1, 1]
#: there and shown x100 like ``score``
EXTRA_METRICS: Mapping[str, float] = {"f1": 1.0, "spearman": 100.0}
DECIMALS = 1


@dataclass(frozen=True)
class System:
    """What produced a result, apart from the layer: the row label of the report."""

    kind: str
    model: str
    revision: Optional[str]
    pooling: Optional[str]
    classifier: Optional[str]

    @property
    def label(self) -> str:
        """Short display name: a local model folder shows its last two path parts, a
        revision its first 8 characters (after any ``sha256:`` prefix); csv/json keep both
        in full."""
        model = self.model
        if model.startswith(("/", "./", "../", "~")) or "\\" in model:
            model = "/".join(re.split(r"[\\/]+", model.rstrip("/\\"))[-2:])
        rev = f"@{self.revision.split(':')[-1][:8]}" if self.revision else ""
        return f"{model}{rev}"

    @property
    def slug(self) -> str:
        """A file-name-safe identifier (for plot files)."""
        parts = [self.label, self.pooling or "", self.classifier or ""]
        text = "_".join(p for p in parts if p)
        return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[:120] or "system"

    def sort_key(self) -> Tuple[str, ...]:
        return (self.model, self.revision or "", self.pooling or "", self.classifier or "",
                self.kind)


@dataclass(frozen=True)
class Row:
    """One row of the tables: a system at one layer spec (``None`` for baselines)."""

    system: System
    layer: Layer

    def sort_key(self) -> Tuple[Any, ...]:
        return self.system.sort_key() + layer_order(self.layer)


def layer_order(layer: Layer) -> Tuple[int, int]:
    """Sort key of a layer spec: 0..L, then ``avg``, then no layer (baselines)."""
    if isinstance(layer, int):
        return (0, layer)
    return (1, 0) if layer == "avg" else (2, 0)


def layer_label(layer: Layer) -> str:
    return "n/a" if layer is None else str(layer)


@dataclass(frozen=True)
class Dataset:
    """A task column: identity and display facts gathered from its records. ``group`` is
    the group column it belongs to (with the language appended when a report holds several
    languages)."""

    task: str
    name: str
    group: str
    metric: str
    label: str
    fallbacks: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Stat:
    """mean +- std over ``n`` seeds (``std`` None for one seed)."""

    mean: float
    std: Optional[float]
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Stat":
        arr = np.asarray(values, dtype=np.float64)
        std = float(arr.std(ddof=1)) if len(arr) > 1 else None
        return cls(float(arr.mean()), std, len(arr))


@dataclass(frozen=True)
class GroupStat(Stat):
    """A group cell: ``n_datasets`` of the group's ``n_total`` datasets were present."""

    n_datasets: int = 0
    n_total: int = 0

    @property
    def partial(self) -> bool:
        return self.n_datasets < self.n_total


def group_order(group: str) -> Tuple[int, str, str]:
    """The paper's group order (SC, SPC, SS, LPT, SP, BSO, DC, SSP, DR), others after;
    a column key ``"SS en"`` (several languages in one report) sorts by group, then language."""
    base, _, language = group.partition(" ")
    return ((GROUPS.index(base), "", language) if base in GROUPS
            else (len(GROUPS), base, language))


def natural_key(text: str) -> Tuple[Any, ...]:
    """'STS9' < 'STS14': digits compare as numbers."""
    return tuple(int(p) if p.isdigit() else p.casefold() for p in re.split(r"(\d+)", text))


@dataclass
class Aggregate:
    """Seed-level scores of every (row, dataset), with the sorted rows/datasets/groups."""

    rows: List[Row]
    datasets: List[Dataset]
    groups: List[str]
    seeds: Dict[Tuple[Row, str], Dict[int, float]]
    extras: Dict[Tuple[Row, str, str], Dict[int, float]] = field(default_factory=dict)

    @property
    def systems(self) -> List[System]:
        return list(dict.fromkeys(r.system for r in self.rows))

    def group_datasets(self, group: str) -> List[Dataset]:
        return [d for d in self.datasets if d.group == group]

    def cell(self, row: Row, task: str) -> Optional[Stat]:
        values = self.seeds.get((row, task))
        return Stat.of([values[s] for s in sorted(values)]) if values else None

    def extra(self, row: Row, task: str, metric: str) -> Optional[Stat]:
        values = self.extras.get((row, task, metric))
        return Stat.of([values[s] for s in sorted(values)]) if values else None

    def group_cell(self, row: Row, group: str) -> Optional[GroupStat]:
        members = self.group_datasets(group)
        present = [self.seeds[(row, d.task)] for d in members if (row, d.task) in self.seeds]
        if not present:
            return None
        mean = float(np.mean([np.mean(list(v.values())) for v in present]))
        common = sorted(set.intersection(*(set(v) for v in present)))
        std = None
        if len(common) > 1:
            per_seed = [np.mean([v[s] for v in present]) for s in common]
            std = float(np.std(per_seed, ddof=1))
        n = len(common) if common else min(len(v) for v in present)
        return GroupStat(mean, std, n, n_datasets=len(present), n_total=len(members))

    def row_seed_counts(self, row: Row) -> List[int]:
        return [len(v) for (r, _), v in self.seeds.items() if r == row]

    def layers_of(self, system: System) -> List[Row]:
        return [r for r in self.rows if r.system == system]


def aggregate(records: Iterable[Record]) -> Aggregate:
    """Group records into rows x datasets with their per-seed scores (and extra metrics)."""
    seeds: Dict[Tuple[Row, str], Dict[int, float]] = {}
    extras: Dict[Tuple[Row, str, str], Dict[int, float]] = {}
    facts: Dict[str, Dict[str, Any]] = {}
    fallbacks: Dict[str, Dict[str, None]] = {}
    for rec in records:
        d = rec.data
        system = System(d["kind"], d["model"], d.get("revision"), d.get("pooling"),
                        classifier_name(d))
        row = Row(system, d["layer"])
        task = d["task"]
        seen = facts.setdefault(task, {"name": d["name"], "group": d["group"],
                                       "metric": d["metric"], "language": d.get("language"),
                                       "where": rec})
        for key in ("name", "group", "metric"):
            if seen[key] != d[key]:
                first = seen["where"]
                raise ResultsError(
                    f"{rec.path}:{rec.line}: task {task} has {key} {d[key]!r} here but "
                    f"{seen[key]!r} at {first.path}:{first.line}; results of different task "
                    "definitions cannot share a report")
        seeds.setdefault((row, task), {})[d["seed"]] = float(d["score"])
        if d.get("fallback"):
            fallbacks.setdefault(task, {})[str(d["fallback"])] = None
        test = d.get("test") or {}
        for metric, factor in EXTRA_METRICS.items():
            value = test.get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and math.isfinite(value):
                extras.setdefault((row, task, metric), {})[d["seed"]] = float(value) * factor
    names = [f["name"] for f in facts.values()]
    # a group average over datasets of two languages would mean nothing: with several
    # languages in one report, every group column is split by language ("SS en", "SS es")
    several = len({f["language"] for f in facts.values()}) > 1
    datasets = [
        Dataset(task, f["name"],
                f"{f['group']} {f['language'] or '?'}" if several else f["group"], f["metric"],
                f["name"] if names.count(f["name"]) == 1 else task,
                tuple(sorted(fallbacks.get(task, {}))))
        for task, f in facts.items()]
    datasets.sort(key=lambda ds: (group_order(ds.group), natural_key(ds.label), ds.task))
    groups = sorted({ds.group for ds in datasets}, key=group_order)
    rows = sorted({row for row, _ in seeds}, key=Row.sort_key)
    return Aggregate(rows, datasets, groups, seeds, extras)


# --------------------------------------------------------------------------- display tables

@dataclass(frozen=True)
class Cell:
    """One displayed cell: a text label, or a statistic with its marks."""

    text: Optional[str] = None
    stat: Optional[Stat] = None
    mark: Optional[str] = None       # "best" | "second" | None
    partial: bool = False            # a group mean over fewer datasets than the group has
    undefined: bool = False          # the value cannot exist (e.g. Delta with b = r)
    notes: Tuple[int, ...] = ()      # footnote numbers attached to this cell

    @property
    def is_value(self) -> bool:
        return self.text is None


@dataclass
class Table:
    """A display table: header labels (with footnote numbers), rows of cells, notes."""

    key: str
    title: str
    header: List[str]
    header_notes: List[Tuple[int, ...]]
    rows: List[List[Cell]]
    caption: str = ""


class Footnotes:
    """Numbers distinct footnote texts in order of first use, across all tables."""

    def __init__(self) -> None:
        self._texts: Dict[str, int] = {}

    def number(self, text: str) -> int:
        return self._texts.setdefault(text, len(self._texts) + 1)

    def items(self) -> List[Tuple[int, str]]:
        return [(n, t) for t, n in self._texts.items()]


def _rounded(stat: Optional[Stat]) -> Optional[float]:
    return None if stat is None else round(stat.mean, DECIMALS)


def mark_cells(cells: List[List[Cell]], columns: Sequence[int], by: str = "column") -> None:
    """Set best / runner-up marks per column (``by="column"``) or per row, in place."""
    lines: List[List[Tuple[int, int]]]
    if by == "column":
        lines = [[(r, c) for r in range(len(cells))] for c in columns]
    else:
        lines = [[(r, c) for c in columns] for r in range(len(cells))]
    for line in lines:
        line = [(r, c) for r, c in line if not cells[r][c].partial]  # not comparable
        present = [v for r, c in line if (v := _rounded(cells[r][c].stat)) is not None]
        if len(present) < 2:  # a lone value is not "best" of anything
            continue
        values = sorted(set(present), reverse=True)
        for r, c in line:
            v = _rounded(cells[r][c].stat)
            if v is None:
                continue
            mark = "best" if v == values[0] else "second" if len(values) > 1 and \
                v == values[1] else None
            if mark:
                old = cells[r][c]
                cells[r][c] = dataclasses.replace(old, mark=mark)


def _row_label_header(agg: Aggregate) -> Tuple[List[str], bool]:
    show_clf = len({r.system.classifier for r in agg.rows}) > 1
    header = ["Model", "Pooling"] + (["Classifier"] if show_clf else []) + ["Layer", "Seeds"]
    return header, show_clf


def _row_label_cells(agg: Aggregate, row: Row, show_clf: bool) -> List[Cell]:
    counts = agg.row_seed_counts(row) or [0]
    seeds = str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
    cells = [Cell(row.system.label), Cell(row.system.pooling or "n/a")]
    if show_clf:
        cells.append(Cell(row.system.classifier or "n/a"))
    return cells + [Cell(layer_label(row.layer)), Cell(seeds)]


def dataset_notes(ds: Dataset, notes: Footnotes) -> Tuple[int, ...]:
    return tuple(notes.number(f"{ds.task}: {fb}") for fb in ds.fallbacks)


def group_table(agg: Aggregate, notes: Footnotes, *,
                cell_fn: Optional[Callable[[Row, str], Cell]] = None, key: str = "groups",
                title: str = "Group averages") -> Table:
    """The paper's Table 1: a row per (system, layer), a column per group present.

    ``cell_fn(row, group) -> Cell`` replaces the plain group mean (used for Delta tables).
    """
    header, show_clf = _row_label_header(agg)
    n_labels = len(header)
    header_notes: List[Tuple[int, ...]] = [()] * n_labels
    for group in agg.groups:
        header.append(group)
        header_notes.append(tuple(sorted({n for ds in agg.group_datasets(group)
                                          for n in dataset_notes(ds, notes)})))
    rows: List[List[Cell]] = []
    for row in agg.rows:
        cells = _row_label_cells(agg, row, show_clf)
        for group in agg.groups:
            if cell_fn is not None:
                cells.append(cell_fn(row, group))
            else:
                stat = agg.group_cell(row, group)
                cells.append(Cell(stat=stat, partial=bool(stat and stat.partial)))
        rows.append(cells)
    mark_cells(rows, range(n_labels, len(header)))
    return Table(key, title, header, header_notes, rows)


def dataset_tables(agg: Aggregate, notes: Footnotes, *,
                   cell_fn: Optional[Callable[[Row, Dataset], Cell]] = None,
                   key: str = "datasets", title: str = "Datasets") -> List[Table]:
    """Tables 3-5 of the paper: one table per group, a column per dataset of the group.

    Rows without any value in a group are left out of that group's table.
    """
    tables = []
    for group in agg.groups:
        members = agg.group_datasets(group)
        header, show_clf = _row_label_header(agg)
        n_labels = len(header)
        header_notes: List[Tuple[int, ...]] = [()] * n_labels
        for ds in members:
            header.append(ds.label)
            header_notes.append(dataset_notes(ds, notes))
        rows = []
        for row in agg.rows:
            if not any((row, ds.task) in agg.seeds for ds in members):
                continue
            cells = _row_label_cells(agg, row, show_clf)
            for ds in members:
                cells.append(cell_fn(row, ds) if cell_fn is not None
                             else Cell(stat=agg.cell(row, ds.task)))
            rows.append(cells)
        mark_cells(rows, range(n_labels, len(header)))
        metrics = ", ".join(f"{d.label} {d.metric}" for d in members)
        tables.append(Table(f"{key}-{group}", f"{title}: {group}", header, header_notes, rows,
                            caption=f"Metrics: {metrics}"))
    return tables


def layer_tables(agg: Aggregate, notes: Footnotes) -> List[Table]:
    """Per-layer view: for each probed system, datasets x layer specs (best layer in bold)."""
    tables = []
    for system in agg.systems:
        rows = [r for r in agg.layers_of(system) if r.layer is not None]
        if not rows:
            continue
        header = ["Group", "Dataset"] + [layer_label(r.layer) for r in rows]
        header_notes: List[Tuple[int, ...]] = [()] * len(header)
        body = []
        for ds in agg.datasets:
            if not any((r, ds.task) in agg.seeds for r in rows):
                continue
            cells = [Cell(ds.group), Cell(ds.label)]
            body.append(cells + [Cell(stat=agg.cell(r, ds.task)) for r in rows])
        mark_cells(body, range(2, len(header)), by="row")
        pooling = f", {system.pooling} pooling" if system.pooling else ""
        tables.append(Table(f"layers-{system.slug}", f"Per layer: {system.label}{pooling}",
                            header, header_notes, body,
                            caption="Rows: datasets; columns: layer spec (0 = embedding output, "
                                    "avg = mean of all hidden states)"))
    return tables
