"""The report's "Controls" section: selectivity, MDL compression, control models.

Why a section of its own: a per-layer accuracy says how well a probe does, not how much of
it the layer knows. Three controls answer that, each read from results alone:

- control-task cells (``probe --control control-task``, rows marked ``[control-task]``):
  *selectivity* = the layer's score - its control task's score (Hewitt & Liang 2019), per
  (dataset, layer), the mean of the per-seed differences over the seeds both have; also
  over the majorities, (score - task majority) - (control - the control's own majority),
  and the control's score beside its own majority: a control below its majority (a probe
  that learnt less than the commonest control label) is flagged, never marked best.
  Label-shuffle cells (``[label-shuffle]``) are a majority-rate floor, shown as rows of
  their own and never turned into selectivity;
- MDL (``probe --mdl``): the compression over the uniform code and over the labels-only
  code (the floor), per (dataset, layer), mean +- std over seeds, three decimals;
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
from estratos.report.tables import Cell, Footnotes, Table, mark_cells, system_title
from estratos.results import Located
from estratos.results.record import control_identity
from estratos.stats import (
    BOOTSTRAP_SEED,
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    Sample,
    paired_bootstrap,
)
from estratos.stats.bootstrap import same_test_set
from estratos.vocab import CONTROL_L2_TASK, CONTROL_TASK

SELECTIVITY_INTRO = (
    "Selectivity = score - control-task score (Hewitt & Liang 2019): the control task gives "
    "each example a label that is a fixed random function of its words, with the task's "
    "label distribution, and the same probe, protocol and early stopping are trained and "
    "scored on it (probe --control control-task). A probe that reaches its control task well "
    "is memorising words; high selectivity says the score reflects the property. Mean ± "
    "sample std over the seeds both have. Label-shuffle rows are not used here: shuffled "
    "labels cap a probe at the majority rate whatever its capacity.")
MDL_INTRO = (
    "MDL: online code length of the training labels (Voita & Titov 2020; blocks of 0.1 ... "
    "100 % of the training data, each block model the cell's probe, on the cell's features, "
    "early-stopping on dev likelihood). Compression = uniform code / online code; over the "
    "floor = labels-only code / online code, where the labels-only code learns just the "
    "label frequencies block by block: about 1 = not above the floor (within about +/-0.005 "
    "of 1 is this block model's noise: a constant one-class input scores 1.002), below 1 = "
    "the probe codes the labels worse than the prior (flagged, never marked best). Best per "
    "row on the unrounded values. Compression depends on the block model: it is the online code of "
    "this probe, with its training and early stopping, not a property of the layer alone "
    "(another block model, e.g. scikit-learn's logistic regression, codes the same labels "
    "with other lengths).")
#: the MDL tables' note on a cell flagged ``(below floor)``
BELOW_FLOOR_NOTE = ("(below floor) = the online code is longer than the labels-only code (over "
                    "the floor < 1: the probe codes the labels worse than their frequencies "
                    "alone), never marked best; (below floor: k/n seeds) = k of the n seeds")
#: decimals of MDL compression cells (their differences between layers are small)
MDL_DECIMALS = 3
CONTROL_INTRO = (
    "Control model {control}: the same architecture and tokenizer with untrained weights "
    "(or another control given with --control). Difference = model - control per layer, "
    "with its {level:g}% paired bootstrap interval over test examples ({resamples} "
    "resamples, the seeds both have averaged) where both were tested on the same examples.")


def _paired_seeds(agg: Aggregate, a: Row, b: Row, task: str) -> List[Tuple[float, float]]:
    sa, sb = agg.seeds.get((a, task), {}), agg.seeds.get((b, task), {})
    return [(sa[s], sb[s]) for s in sorted(set(sa) & set(sb))]


def _layer_table(key: str, title: str, agg: Aggregate, system: System,
                 value: Callable[[Row, str], Cell], caption: str,
                 exact: bool = False) -> Optional[Table]:
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
    mark_cells(body, range(2, len(header)), by="row", exact=exact)
    return Table(key, title, header, [()] * len(header), body, caption=caption)


def selectivity_tables(agg: Aggregate) -> List[Table]:
    """Per system with control-task rows, datasets x layers: the selectivity (score -
    control score), the selectivity over the majorities ((score - the task's majority) -
    (control score - the control's own majority), per seed), and the control's score beside
    its own majority. A cell whose control scored below its own majority on some seed is
    flagged in the first two and never marked best: that much of the difference is the
    control's deficit, not what the layer holds."""
    tables = []
    own, fixed = CONTROL_TASK, control_identity(CONTROL_TASK, CONTROL_L2_TASK)
    pairs = [(system, twin) for system in agg.systems if system.control is None
             for kind in (own, fixed) for twin in agg.systems
             if twin.control == kind and twin.without_control() == system]
    for system, twin in pairs:
        by_layer = {r.layer: r for r in agg.layers_of(twin)}
        same_l2 = twin.control == fixed
        suffix = "-task-l2" if same_l2 else ""
        l2_title = " (control with the task's L2)" if same_l2 else ""
        l2_caption = ("; each control cell trained with the L2 its task cell chose"
                      if same_l2 else "")
        for key, what, over_majority, caption in (
                ("selectivity", "Selectivity", False,
                 f"score - control-task score, per layer{l2_caption}; {BELOW_MAJORITY_NOTE}"),
                ("selectivity-majority", "Selectivity over the majorities", True,
                 "(score - the task's majority rate) - (control-task score - the control "
                 f"task's own majority rate), per seed, per layer{l2_caption}; "
                 f"{BELOW_MAJORITY_NOTE}")):
            def value(row: Row, task: str, by_layer=by_layer,
                      over_majority: bool = over_majority) -> Cell:
                control = by_layer.get(row.layer)
                if control is None:
                    return Cell()
                seeds = _paired_majorities(agg, row, control, task, over_majority)
                if not seeds:
                    return Cell()
                # a difference with a one-class side is no selectivity: flagged, never best
                flagged = _one_class(agg, row, task) or _one_class(agg, control, task)
                return Cell(stat=Stat.of([d for d, _ in seeds]), degenerate=flagged,
                            below_majority=_below_majority(seeds))

            table = _layer_table(f"{key}-{system.slug}{suffix}",
                                 f"{what}: {agg.name(system)}{system_title(system)}{l2_title}",
                                 agg, system, value, caption)
            if table is not None:
                tables.append(table)
        table = _control_majority_table(agg, system, twin, suffix, l2_title)
        if table is not None:
            tables.append(table)
    return tables


#: the selectivity tables' note on a flagged cell
BELOW_MAJORITY_NOTE = ("(control below its majority) = the control task scored below the "
                       "majority rate of its own test labels on that many seeds, so part of "
                       "the difference is the control's deficit; never marked best")


def _paired_majorities(agg: Aggregate, row: Row, control: Row, task: str,
                       over_majority: bool) -> List[Tuple[float, bool]]:
    """Per seed both rows have: (score - control score, or with ``over_majority`` each side
    less its own majority rate; whether the control scored below its own majority). A seed
    without a recorded majority is left out of the second reading."""
    scores, controls = agg.seeds.get((row, task), {}), agg.seeds.get((control, task), {})
    own, theirs = agg.majority.get((row, task), {}), agg.majority.get((control, task), {})
    out = []
    for seed in sorted(set(scores) & set(controls)):
        below = seed in theirs and controls[seed] < theirs[seed]
        if over_majority:
            if seed not in own or seed not in theirs:
                continue
            diff = (scores[seed] - own[seed]) - (controls[seed] - theirs[seed])
        else:
            diff = scores[seed] - controls[seed]
        out.append((diff, below))
    return out


def _below_majority(seeds: Sequence[Tuple[float, bool]]) -> Optional[Tuple[int, int]]:
    k = sum(1 for _, below in seeds if below)
    return (k, len(seeds)) if k else None


def _control_majority_table(agg: Aggregate, system: System, twin: System, suffix: str,
                            l2_title: str) -> Optional[Table]:
    """Datasets x layers of the control task's score beside its own majority rate (mean
    over seeds of each): what the first selectivity reading subtracts, and the level it
    must be read against."""
    rows = [r for r in agg.layers_of(twin) if r.layer is not None]
    body = []
    for ds in agg.datasets:
        cells = []
        for row in rows:
            score, rate = agg.cell(row, ds.task), agg.majority.get((row, ds.task), {})
            if score is None or score.mean is None or not rate:
                cells.append(Cell(""))
                continue
            mean_rate = sum(rate.values()) / len(rate)
            cells.append(Cell(f"{score.mean:.1f} / {mean_rate:.1f}"
                              + (" (below)" if score.mean < mean_rate else "")))
        if any(c.text for c in cells):
            body.append([Cell(ds.group), Cell(ds.label)] + cells)
    if not body:
        return None
    header = ["Group", "Dataset"] + [layer_label(r.layer) for r in rows]
    return Table(f"control-majority-{system.slug}{suffix}",
                 f"Control task vs its own majority: {agg.name(system)}"
                 f"{system_title(system)}{l2_title}", header, [()] * len(header), body,
                 caption="control-task score / the majority rate of the control task's own "
                         "test labels (mean over seeds); (below) = the control scored below "
                         "it")


def mdl_tables(agg: Aggregate) -> List[Table]:
    """Per system with MDL: datasets x layers of the compression over the uniform code, then
    over the labels-only floor (three decimals, best on unrounded values). A cell with a seed
    below its floor or a one-class seed is flagged in both tables and never marked: its
    compression is no reading of the layer."""
    tables = []
    for system in agg.systems:
        for over_floor, key, what, caption in (
                (False, "mdl", "MDL compression",
                 f"uniform / online code length, per layer; {BELOW_FLOOR_NOTE}"),
                (True, "mdl-floor", "MDL compression over the floor",
                 "labels-only / online code length, per layer (1 = no information); "
                 f"{BELOW_FLOOR_NOTE}")):
            def value(row: Row, task: str, over_floor: bool = over_floor) -> Cell:
                return Cell(stat=agg.mdl_cell(row, task, over_floor), decimals=MDL_DECIMALS,
                            degenerate=_one_class(agg, row, task),
                            below_floor=_below_floor(agg, row, task))

            table = _layer_table(f"{key}-{system.slug}",
                                 f"{what}: {agg.name(system)}{system_title(system)}", agg,
                                 system, value, caption, exact=True)
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
                    (system.pooling, system.classifier, system.features, system.control) != \
                    (control.pooling, control.classifier, control.features, control.control):
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


def _below_floor(agg: Aggregate, row: Row, task: str) -> Optional[Tuple[int, int]]:
    """(seeds whose online code is longer than the labels-only code, seeds with a floor)
    when the first is > 0."""
    values = agg.floor_compression.get((row, task)) or {}
    k = sum(1 for v in values.values() if v < 1.0)
    return (k, len(values)) if k else None


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
