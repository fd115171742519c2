"""The report's "Controls" section: selectivity, MDL compression, control models.

Why a section of its own: a per-layer accuracy says how well a probe does, not how much of
it the layer knows. Three controls answer that, each read from results alone:

- control-label cells (``probe --control-labels``, rows marked ``[permuted-labels]``):
  *selectivity* = the layer's score - its control's score, per (dataset, layer), the mean of
  the per-seed differences over the seeds both have;
- MDL (``probe --mdl``): the compression (uniform / online code length) per (dataset,
  layer), mean +- std over seeds;
- a control model (``report --control CONTROL.jsonl``, e.g. ``encode --random-init``): per
  layer, the model's score, the control's, and the difference model - control with its
  paired bootstrap interval over test examples (:func:`estratos.stats.paired_bootstrap` on
  the stored predictions) where both were tested on the same examples.

Every number comes from :class:`~estratos.report.aggregate.Aggregate` or the predictions
files; nothing is retrained.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from estratos.report.aggregate import Aggregate, Row, Stat, System, layer_label, row_of
from estratos.report.intervals import RowSample, Samples
from estratos.report.tables import Cell, Footnotes, Table, mark_cells
from estratos.results import Located
from estratos.stats import (DEFAULT_LEVEL, DEFAULT_RESAMPLES, BOOTSTRAP_SEED, Sample,
                            paired_bootstrap)
from estratos.stats.bootstrap import same_test_set

SELECTIVITY_INTRO = (
    "Selectivity = score - control score: the control is the same probe, protocol and early "
    "stopping trained on permuted training and dev labels and tested on the true test labels "
    "(probe --control-labels); it is the part of the score the layer, not the probe's "
    "capacity or the label prior, accounts for. Mean ± sample std over the seeds both have.")
MDL_INTRO = (
    "MDL compression = uniform code length / online code length of the training labels "
    "(Voita & Titov 2020; blocks of 0.1 ... 100 % of the training data, each block model the "
    "cell's probe early-stopping on dev likelihood). 1 = the labels are no cheaper to send "
    "given the layer than without it; higher = fewer examples suffice.")
CONTROL_INTRO = (
    "Control model {control}: the same architecture and tokenizer with untrained weights "
    "(or another control given with --control). Difference = model - control per layer, "
    "with its {level:g}% paired bootstrap interval over test examples ({resamples} "
    "resamples, the seeds both have averaged) where both were tested on the same examples.")


def _paired_seeds(agg: Aggregate, a: Row, b: Row, task: str) -> List[Tuple[float, float]]:
    sa, sb = agg.seeds.get((a, task), {}), agg.seeds.get((b, task), {})
    return [(sa[s], sb[s]) for s in sorted(set(sa) & set(sb))]


def _layer_table(key: str, title: str, agg: Aggregate, system: System,
                 value: Callable[[Row, str], Cell], caption: str) -> Optional[Table]:
    rows = [r for r in agg.layers_of(system) if r.layer is not None]
    body = []
    for ds in agg.datasets:
        cells = [value(r, ds.task) for r in rows]
        if all(c.stat is None for c in cells):
            continue
        body.append([Cell(ds.group), Cell(ds.label)] + cells)
    if not body:
        return None
    header = ["Group", "Dataset"] + [layer_label(r.layer) for r in rows]
    mark_cells(body, range(2, len(header)), by="row")
    return Table(key, title, header, [()] * len(header), body, caption=caption)


def selectivity_tables(agg: Aggregate) -> List[Table]:
    """Per system with control-label rows: datasets x layers of score - control score."""
    tables = []
    for system in agg.systems:
        if system.control is not None:
            continue
        twin = next((s for s in agg.systems if s.control is not None
                     and s.without_control() == system), None)
        if twin is None:
            continue
        by_layer = {r.layer: r for r in agg.layers_of(twin)}

        def value(row: Row, task: str, by_layer=by_layer) -> Cell:
            control = by_layer.get(row.layer)
            pairs = _paired_seeds(agg, row, control, task) if control else []
            if not pairs:
                return Cell()
            return Cell(stat=Stat.of([a - b for a, b in pairs]))

        table = _layer_table(f"selectivity-{system.slug}", f"Selectivity: {agg.name(system)}",
                             agg, system, value, "score - permuted-label control, per layer")
        if table is not None:
            tables.append(table)
    return tables


def mdl_tables(agg: Aggregate) -> List[Table]:
    """Per system with MDL: datasets x layers of the compression."""
    tables = []
    for system in agg.systems:
        def value(row: Row, task: str) -> Cell:
            return Cell(stat=agg.mdl_cell(row, task))

        table = _layer_table(f"mdl-{system.slug}", f"MDL compression: {agg.name(system)}", agg,
                             system, value, "uniform / online code length, per layer")
        if table is not None:
            tables.append(table)
    return tables


def control_model_tables(agg: Aggregate, records: Sequence[Located],
                         control_paths: Sequence[str], notes: Footnotes, *,
                         resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL,
                         seed: int = BOOTSTRAP_SEED) -> List[Table]:
    """Per (model system, control system) pair: the model's and the control's score per layer
    and their difference with a paired bootstrap interval. A control system is one whose
    records come from ``control_paths``; it pairs with the other systems of the same
    pooling and classifier (and control kind)."""
    wanted = {os.path.realpath(p) for p in control_paths}
    control_systems = []
    for loc in records:
        if os.path.realpath(loc.path) in wanted:
            system = row_of(loc.record).system
            if system not in control_systems:
                control_systems.append(system)
    samples = Samples(records)
    tables = []
    for control in control_systems:
        for system in agg.systems:
            if system in control_systems or system.kind != control.kind or \
                    (system.pooling, system.classifier, system.control) != \
                    (control.pooling, control.classifier, control.control):
                continue
            table = _control_table(agg, system, control, samples, notes, resamples, level, seed)
            if table is not None:
                tables.append(table)
    return tables


def _control_table(agg: Aggregate, system: System, control: System, samples: Samples,
                   notes: Footnotes, resamples: int, level: float, seed: int
                   ) -> Optional[Table]:
    rows = {r.layer: r for r in agg.layers_of(system) if r.layer is not None}
    crows = {r.layer: r for r in agg.layers_of(control) if r.layer is not None}
    layers = [layer for layer in rows if layer in crows]
    body = []
    for ds in agg.datasets:
        for layer in layers:
            a, b = rows[layer], crows[layer]
            ours, theirs = agg.cell(a, ds.task), agg.cell(b, ds.task)
            if ours is None or theirs is None:
                continue
            pairs = _paired_seeds(agg, a, b, ds.task)
            diff = Cell(stat=Stat.of([x - y for x, y in pairs])) if pairs else Cell()
            ci, p = _difference(samples, a, b, ds.task, resamples, level, seed)
            if ci is None:
                why = notes.number(f"{ds.task}: no paired interval (the predictions of both "
                                   "sides on one test set are needed)")
                diff = Cell(stat=diff.stat, notes=(why,))
            else:
                diff = Cell(stat=diff.stat, ci=ci)
            body.append([Cell(ds.group), Cell(ds.label), Cell(layer_label(layer)),
                         Cell(stat=ours, degenerate=_one_class(agg, a, ds.task)),
                         Cell(stat=theirs, degenerate=_one_class(agg, b, ds.task)), diff,
                         Cell("—" if p is None else f"{p:.3f}")])
    if not body:
        return None
    header = ["Group", "Dataset", "Layer", agg.name(system), agg.name(control), "Difference",
              "p"]
    return Table(f"control-{system.slug}-vs-{control.slug}",
                 f"Control model: {agg.name(system)} vs {agg.name(control)}", header,
                 [()] * len(header), body,
                 caption="Difference = model - control (mean over seeds both have ± std; "
                         "[lo, hi] paired bootstrap interval over test examples)")


def _one_class(agg: Aggregate, row: Row, task: str) -> Optional[Tuple[int, int]]:
    k, n = agg.degenerate_seeds(row, task)
    return (k, n) if k else None


def _difference(samples: Samples, a: Row, b: Row, task: str, resamples: int, level: float,
                seed: int) -> Tuple[Optional[Tuple[float, float]], Optional[float]]:
    """Paired bootstrap of model (a) - control (b) on the seeds both have, or (None, None)
    when predictions are missing or the test sets differ."""
    sa, sb = samples.get(a, task), samples.get(b, task)
    if sa is None or sb is None:
        return None, None
    common = sorted(set(sa.seeds) & set(sb.seeds))
    if not common:
        return None, None
    xa, xb = _only(sa, common), _only(sb, common)
    if not same_test_set(xa, xb):
        return None, None
    d = paired_bootstrap(xb, xa, resamples=resamples, level=level, seed=seed)  # a - b
    if d.lo is None or d.hi is None:
        return None, None
    return (d.lo, d.hi), d.p_value


def _only(row_sample: RowSample, seeds: Sequence[int]) -> Sample:
    """The row's sample restricted to ``seeds`` (same order on both sides)."""
    keep = [row_sample.seeds.index(s) for s in seeds]
    sample = row_sample.sample
    return dataclasses.replace(sample, predicted=np.asarray(sample.predicted)[keep])
