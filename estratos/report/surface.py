"""The report's "Surface baselines" section: each task's best layer beside its best surface
baseline.

Why: a layer's score says what a probe reads from it, not what the layer adds to what the
text's surface already gives. ``estratos baseline`` (:mod:`estratos.probe.baseline`) scores
each task from the text alone (TF-IDF, length in tokens or characters, character n-grams,
word bigrams, word at each position); a layer that does no better than the best of them shows
nothing the surface did not. One table per probed system (model, pooling, classifier): per
dataset, the best layer, the best surface baseline, the floor (majority-class rate, or 0 for
correlations), their scores and best layer - best baseline.

"Best" is the highest mean over seeds, unrounded; a cell whose every seed predicted one class
is never best (its number is a class rate). Control rows (``[control-task]``,
``[label-shuffle]``) are not probed systems here. Every number comes from
:class:`~estratos.report.aggregate.Aggregate`.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from estratos.report.aggregate import Aggregate, Row, Stat, System, layer_label
from estratos.report.tables import Cell, Table

SURFACE_INTRO = (
    "Each dataset's best layer beside its best surface baseline (`estratos baseline "
    "--baseline all`: TF-IDF, length in tokens or characters, character n-grams, word "
    "bigrams, word at each position; what the text alone gives). Best = highest mean over "
    "seeds (cells whose every seed predicted one class are never best); Difference = best "
    "layer - best baseline: what the layer adds beyond the surface. Floor = majority-class "
    "rate of the test examples (0 for correlations).")
#: the best-layer cell of a dataset none of whose layers can be best
NO_LAYER = "none"


def _best(agg: Aggregate, rows: Sequence[Row], task: str) -> Optional[Row]:
    """The row with the highest mean score on ``task`` (first on ties), one-class cells and
    missing ones left out."""
    best, best_mean = None, None
    for row in rows:
        stat = agg.cell(row, task)
        k, n = agg.degenerate_seeds(row, task)
        if stat is None or (n and k == n):
            continue
        if best_mean is None or stat.mean > best_mean:
            best, best_mean = row, stat.mean
    return best


def _probed_systems(agg: Aggregate) -> List[System]:
    return [s for s in agg.systems if s.kind != "baseline" and s.control is None
            and any(r.layer is not None for r in agg.layers_of(s))]


def surface_tables(agg: Aggregate) -> List[Table]:
    """Per probed system: datasets x (best layer, best surface baseline, floor, their scores,
    difference); none when the report has no baseline or no probed layer."""
    baselines = [r for r in agg.rows if r.system.kind == "baseline"]
    if not baselines:
        return []
    tables = []
    for system in _probed_systems(agg):
        layers = [r for r in agg.layers_of(system) if r.layer is not None]
        body = []
        one_class = False
        for ds in agg.datasets:
            base = _best(agg, baselines, ds.task)
            if base is None or not any(agg.has_cell(r, ds.task) for r in layers):
                continue
            layer = _best(agg, layers, ds.task)
            b = agg.cell(base, ds.task)
            floor = Cell(stat=Stat(ds.chance[0], None, 1)) if ds.chance else Cell()
            if layer is None:  # every layer one class (or undefined): no layer to show
                one_class = True
                layer_cells = [Cell(NO_LAYER), Cell(agg.name(base.system)), floor, Cell(),
                               Cell(stat=b), Cell()]
            else:
                a = agg.cell(layer, ds.task)
                assert a is not None and b is not None  # _best picks cells with a score
                layer_cells = [Cell(layer_label(layer.layer)), Cell(agg.name(base.system)),
                               floor, Cell(stat=a), Cell(stat=b),
                               Cell(stat=Stat(a.mean - b.mean, None, min(a.n, b.n)))]
            body.append([Cell(ds.group), Cell(ds.label)] + layer_cells)
        if not body:
            continue
        caption = "Scores: mean ± std over seeds; Difference: of the means"
        if one_class:
            caption += f"; {NO_LAYER}: every layer predicted one class (or has no score)"
        header = ["Group", "Dataset", "Best layer", "Best surface baseline", "Floor",
                  "Layer score", "Baseline score", "Difference"]
        pooling = f", {system.pooling} pooling" if system.pooling else ""
        classifier = f", {system.classifier}" if system.classifier else ""
        tables.append(Table(f"surface-{system.slug}",
                            f"Best layer vs best surface baseline: {agg.name(system)}{pooling}"
                            f"{classifier}", header, [()] * len(header), body,
                            caption=caption))
    return tables


__all__ = ["SURFACE_INTRO", "surface_tables"]
