"""Laying an aggregate out as the paper's tables, with marks and footnotes.

The ``*_table`` functions turn an :class:`~estratos.report.aggregate.Aggregate` into
:class:`Table` objects (cells plus best / runner-up marks and footnote numbers) that
:mod:`~estratos.report.writers` renders as Markdown or LaTeX, so both formats always
show the same numbers. Best / runner-up are decided on the values as displayed (one
decimal; tables of finer quantities, e.g. MDL compression, on the unrounded values), ties
share a mark, a lone value takes none, and partial group means take none (they average other
datasets); neither do one-class cells (the probe barely left one class: no reading of the
layer) nor control rows (a reference for another row, not a result).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Collection, Dict, List, Optional, Sequence, Tuple

from estratos.report.aggregate import Aggregate, Dataset, Row, Stat, System, layer_label

#: decimals shown in md/LaTeX (csv/json keep 4)
DECIMALS = 1


@dataclass(frozen=True)
class Cell:
    """One displayed cell: a text label, or a statistic with its marks."""

    text: Optional[str] = None
    stat: Optional[Stat] = None
    mark: Optional[str] = None       # "best" | "second" | None
    partial: bool = False            # a group mean over fewer datasets than the group has
    undefined: bool = False          # the value cannot exist (e.g. Delta with b = r)
    notes: Tuple[int, ...] = ()      # footnote numbers attached to this cell
    ci: Optional[Tuple[float, float]] = None  # bootstrap interval over test examples
    not_worse: bool = False          # not significantly worse than the best layer (†)
    #: (seeds whose test predictions were (nearly) one class, seeds) when the first is > 0
    degenerate: Optional[Tuple[int, int]] = None
    #: a group cell: (its datasets with a one-class seed, its datasets) when the first is > 0
    one_class_datasets: Optional[Tuple[int, int]] = None
    #: an MDL cell: (seeds whose online code is longer than the labels-only code, seeds)
    #: when the first is > 0: the probe codes the labels worse than their frequencies alone
    below_floor: Optional[Tuple[int, int]] = None
    #: a selectivity cell: (seeds whose control task scored below its own majority rate,
    #: seeds) when the first is > 0: part of that selectivity is the control's deficit
    below_majority: Optional[Tuple[int, int]] = None
    #: decimals the number is shown with
    decimals: int = DECIMALS

    @property
    def all_degenerate(self) -> bool:
        """Every seed predicted one class: the number is a class rate, not a score."""
        return self.degenerate is not None and self.degenerate[0] == self.degenerate[1]

    @property
    def one_class(self) -> bool:
        """Some seed (or, for a group, some dataset) predicted one class: never ranked."""
        return self.degenerate is not None or self.one_class_datasets is not None

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


def _rounded(stat: Optional[Stat], decimals: Optional[int] = DECIMALS) -> Optional[float]:
    if stat is None:
        return None
    return stat.mean if decimals is None else round(stat.mean, decimals)


def value_cell(agg: Aggregate, row: Row, task: str) -> Cell:
    """A dataset cell: mean +- std over seeds, or undefined (a null score, e.g. a
    correlation of constant predictions), or missing."""
    k, n = agg.degenerate_seeds(row, task)
    return Cell(stat=agg.cell(row, task), undefined=agg.is_undefined(row, task),
                degenerate=(k, n) if k else None)


def mark_cells(cells: List[List[Cell]], columns: Sequence[int], by: str = "column", *,
               exclude_rows: Collection[int] = (), exact: bool = False) -> None:
    """Set best / runner-up marks per column (``by="column"``) or per row, in place.
    ``exclude_rows``: rows never marked nor compared (control rows); ``exact``: compare
    the unrounded values (else the values as displayed)."""
    lines: List[List[Tuple[int, int]]]
    ranked = [r for r in range(len(cells)) if r not in set(exclude_rows)]
    if by == "column":
        lines = [[(r, c) for r in ranked] for c in columns]
    else:
        lines = [[(r, c) for c in columns] for r in ranked]
    decimals = None if exact else DECIMALS
    for line in lines:
        # partial means, one-class cells and codes below the labels-only floor are not
        # comparable scores
        line = [(r, c) for r, c in line if not cells[r][c].partial
                and not cells[r][c].one_class and cells[r][c].below_floor is None
                and cells[r][c].below_majority is None]
        present = [v for r, c in line
                   if (v := _rounded(cells[r][c].stat, decimals)) is not None]
        if len(present) < 2:  # a lone value is not "best" of anything
            continue
        values = sorted(set(present), reverse=True)
        for r, c in line:
            v = _rounded(cells[r][c].stat, decimals)
            if v is None:
                continue
            mark = "best" if v == values[0] else "second" if len(values) > 1 and \
                v == values[1] else None
            if mark:
                old = cells[r][c]
                cells[r][c] = dataclasses.replace(old, mark=mark)


def _row_label_header(agg: Aggregate) -> Tuple[List[str], bool]:
    show_clf = len({r.system.classifier for r in agg.rows}) > 1
    header = (["Model", "Pooling"] + (["Classifier"] if show_clf else [])
              + (["Features"] if agg.mixed_features else []) + ["Layer", "Seeds"])
    return header, show_clf


def _row_label_cells(agg: Aggregate, row: Row, show_clf: bool) -> List[Cell]:
    counts = agg.row_seed_counts(row) or [0]
    seeds = str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
    cells = [Cell(agg.name(row.system)), Cell(row.system.pooling or "n/a")]
    if show_clf:
        cells.append(Cell(row.system.classifier or "n/a"))
    if agg.mixed_features:
        cells.append(Cell(row.system.features or "n/a"))
    return cells + [Cell(layer_label(row.layer)), Cell(seeds)]


def control_rows(rows: Sequence[Row]) -> List[int]:
    """Indices of the control rows among ``rows`` (never ranked)."""
    return [i for i, row in enumerate(rows) if row.system.is_control]


def system_title(system: "System") -> str:
    """What a system's per-layer tables say after its name: ', cls pooling, standardized
    features' (the pooling and features that tell its tables apart)."""
    parts = []
    if system.pooling:
        parts.append(f"{system.pooling} pooling")
    if system.features:
        parts.append(f"{system.features} features")
    return "".join(f", {p}" for p in parts)


def dataset_notes(ds: Dataset, notes: Footnotes) -> Tuple[int, ...]:
    return tuple(notes.number(f"{ds.task}: {fb}") for fb in ds.fallbacks)


def group_composition(agg: Aggregate, group: str) -> Tuple[List[str], List[str]]:
    """(datasets present, datasets of the benchmark's group missing here) of a group column:
    the benchmark's group is every registered task of the same suite and group as a dataset
    present (custom tasks count as present only)."""
    from estratos.tasks.registry import all_specs

    present = agg.group_datasets(group)
    ids = {ds.task for ds in present}
    kinds = {(ds.task.split(":")[0], ds.group.split(" ")[0]) for ds in present}
    missing = [spec.name for spec in all_specs()
               if (spec.suite, spec.group) in kinds and spec.id not in ids]
    return [ds.name for ds in present], missing


def group_note(agg: Aggregate, group: str) -> Optional[str]:
    """The footnote of an incomplete group column (None when every dataset is present)."""
    present, missing = group_composition(agg, group)
    if not missing:
        return None
    total = len(present) + len(missing)
    return (f"{group}: {len(present)} of the benchmark's {total} datasets "
            f"({', '.join(present)}; not here: {', '.join(missing)}); the column averages "
            "only those present, so it is not the paper's group score")


def group_table(agg: Aggregate, notes: Footnotes, *,
                cell_fn: Optional[Callable[[Row, str], Cell]] = None, key: str = "groups",
                title: str = "Group averages") -> Table:
    """The paper's Table 1: a row per (system, layer), a column per group present.

    ``cell_fn(row, group) -> Cell`` replaces the plain group mean (used for Delta tables).
    """
    header, show_clf = _row_label_header(agg)
    n_labels = len(header)
    header_notes: List[Tuple[int, ...]] = [()] * n_labels
    sizes = []
    for group in agg.groups:
        header.append(group)
        incomplete = group_note(agg, group)
        header_notes.append(tuple(sorted({n for ds in agg.group_datasets(group)
                                          for n in dataset_notes(ds, notes)}))
                            + ((notes.number(incomplete),) if incomplete else ()))
        present, missing = group_composition(agg, group)
        sizes.append(f"{group} {len(present)}" + (f" of {len(present) + len(missing)}"
                                                  if missing else ""))
    rows: List[List[Cell]] = []
    for row in agg.rows:
        cells = _row_label_cells(agg, row, show_clf)
        for group in agg.groups:
            if cell_fn is not None:
                cells.append(cell_fn(row, group))
            else:
                stat = agg.group_cell(row, group)
                flagged = (stat.one_class, stat.n_datasets) if stat and stat.one_class else None
                cells.append(Cell(stat=stat, partial=bool(stat and stat.partial),
                                  one_class_datasets=flagged))
        rows.append(cells)
    mark_cells(rows, range(n_labels, len(header)), exclude_rows=control_rows(agg.rows))
    models = agg.identities()
    composition = "Datasets averaged per group: " + ", ".join(sizes) + "."
    return Table(key, title, header, header_notes, rows,
                 caption=composition + (f" Models: {models}" if models else ""))


#: adds test-set statistics to a dataset cell: decorate(row, task, cell) -> cell
Decorate = Callable[[Row, str, Cell], Cell]


def _plain(row: Row, task: str, cell: Cell) -> Cell:
    return cell


def dataset_tables(agg: Aggregate, notes: Footnotes, *,
                   cell_fn: Optional[Callable[[Row, Dataset], Cell]] = None,
                   key: str = "datasets", title: str = "Datasets",
                   decorate: Decorate = _plain, caption: str = "") -> List[Table]:
    """Tables 3-5 of the paper: one table per group, a column per dataset of the group.

    Rows without any value in a group are left out of that group's table. ``decorate``
    adds intervals / marks to value cells; ``caption`` is appended to each caption.
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
        shown: List[Row] = []
        for row in agg.rows:
            if not any(agg.has_cell(row, ds.task) for ds in members):
                continue
            cells = _row_label_cells(agg, row, show_clf)
            for ds in members:
                cells.append(cell_fn(row, ds) if cell_fn is not None
                             else decorate(row, ds.task, value_cell(agg, row, ds.task)))
            rows.append(cells)
            shown.append(row)
        mark_cells(rows, range(n_labels, len(header)), exclude_rows=control_rows(shown))
        metrics = ", ".join(f"{d.label} {d.metric}" for d in members)
        tables.append(Table(f"{key}-{group}", f"{title}: {group}", header, header_notes, rows,
                            caption=f"Metrics: {metrics}" + (f". {caption}" if caption else "")))
    return tables


def layer_tables(agg: Aggregate, notes: Footnotes, *, decorate: Decorate = _plain,
                 caption: str = "") -> List[Table]:
    """Per-layer view: for each probed system, datasets x layer specs (best layer in bold).
    ``decorate`` and ``caption`` as for :func:`dataset_tables`."""
    tables = []
    for system in agg.systems:
        rows = [r for r in agg.layers_of(system) if r.layer is not None]
        if not rows:
            continue
        header = ["Group", "Dataset"] + [layer_label(r.layer) for r in rows]
        header_notes: List[Tuple[int, ...]] = [()] * len(header)
        body = []
        for ds in agg.datasets:
            if not any(agg.has_cell(r, ds.task) for r in rows):
                continue
            cells = [Cell(ds.group), Cell(ds.label)]
            body.append(cells + [decorate(r, ds.task, value_cell(agg, r, ds.task))
                                 for r in rows])
        if not system.is_control:  # a control's layers are references, not results
            mark_cells(body, range(2, len(header)), by="row")
        name = agg.name(system)
        model = f"Model: {system.identity}. " if name != system.identity else ""
        tables.append(Table(f"layers-{system.slug}", f"Per layer: {name}{system_title(system)}",
                            header, header_notes, body,
                            caption=f"{model}Rows: datasets; columns: layer spec (0 = embedding "
                                    "output, avg = mean of all hidden states)"
                                    + (f". {caption}" if caption else "")))
    return tables
