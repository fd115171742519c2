"""The report's "V-information" section: usable information in bits per task and layer.

Why a section of its own: accuracy says that a probe can read a property from a layer, not
how much of the label it reads. A classification cell's ``information``
(:mod:`estratos.protocols.information`) says that in bits: the V-information
``H(Y|0) - H(Y|X)`` (Xu et al. 2020; Pimentel et al. 2020), the cross-entropy of the class
prior of the training labels minus the probe's held-out cross-entropy on the test examples.
Per system (as the per-layer score tables), datasets x layer specs, mean ± std over seeds, with
``--ci`` its bootstrap interval over test examples (:func:`~estratos.report.intervals.pvi_interval`
on the stored pointwise V-information). A negative number (the probe predicts the test
labels worse than the prior does) is shown as it is, never clipped to 0.

Conditional cells (``probe --given B``) add their own tables: what each layer adds over B in
bits, ``H(Y|B) - H(Y|B,R)`` (Hewitt et al. 2021), with its interval from the same stored
log2-probabilities (:func:`conditional_tables`).

Present only when some cell has ``information``: a report of results written before it
existed is unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping

from estratos.report.aggregate import Aggregate, layer_label
from estratos.report.tables import Cell, Table, mark_cells, system_title

#: decimals of V-information cells (bits: differences between layers are tenths or less)
BITS_DECIMALS = 3
SECTION_TITLE = "V-information (bits)"
INTRO = (
    "Usable information in bits (V-information; Xu et al. 2020, Pimentel et al. 2020): "
    "H(Y|0) - H(Y|X), the cross-entropy of the class prior (the training labels' class "
    "shares, add-one smoothed) minus the probe's held-out cross-entropy on the test "
    "examples, both in bits per example. 0 = the layer lets the probe predict the labels no "
    "better than their frequencies; the most it can be is H(Y|0) (log2 k for k balanced "
    "classes). It depends on the probe family and its training (another probe reads other "
    "bits from the same layer) and, like accuracy, on the size of the test set. "
    "cross_entropy and prior_cross_entropy are in datasets.csv and report.json.")
#: the note under every V-information table
NOTE = ("V-information in bits per test example: the class prior's cross-entropy H(Y|0) "
        "minus the probe's held-out cross-entropy H(Y|X), mean ± std over seeds; negative = "
        "the probe predicts the test labels worse than the class prior (shown as is, never "
        "clipped). Best per row on the unrounded values")


CONDITIONAL_TITLE = "Conditional information (bits)"
CONDITIONAL_INTRO = (
    "What each layer adds over given features B (probe --given; Hewitt, Ethayarajh, Liang & "
    "Manning 2021): the same probe family trained on B alone and on [B; layer], both with "
    "their L2 chosen on dev; the gain H(Y|B) - H(Y|B,R) in bits per test example. A layer "
    "that holds the label but only what B already holds gains about 0; the V-information "
    "section shows the probe on [B; layer] itself (its rows say [given B]). Like "
    "V-information it depends on the probe family and the test set's size.")
#: the note under every conditional-information table
CONDITIONAL_NOTE = (
    "What the layer adds over the given features B in bits per test example: H(Y|B) - "
    "H(Y|B,R), the held-out cross-entropy of the probe on B alone minus that of the same "
    "probe family on [B; layer] (conditional probing, Hewitt et al. 2021), mean ± std over "
    "seeds; about 0 = the layer adds nothing the probe can use beyond B; negative = the "
    "probe on [B; layer] predicts worse than on B alone (shown as is). Best per row on the "
    "unrounded values")


def information_tables(agg: Aggregate, intervals: Mapping[Any, Any], ci_caption: str = ""
                       ) -> List[Table]:
    """Per system with ``information``: datasets x layer specs of the V-information (bits),
    each cell with its bootstrap interval from ``intervals`` ((row, task, measure) ->
    Interval) when there is one. Best / runner-up per row on the unrounded values; control
    systems and one-class cells are never marked (as in the per-layer score tables)."""
    return _bits_tables(agg, intervals, "v_information", "vinfo", "V-information (bits)",
                        NOTE, ci_caption)


def conditional_tables(agg: Aggregate, intervals: Mapping[Any, Any], ci_caption: str = ""
                       ) -> List[Table]:
    """Per conditional system (``probe --given``): datasets x layer specs of what the layer
    adds over the given features (bits), with its bootstrap interval from ``intervals``
    when there is one; marked as :func:`information_tables` marks."""
    return _bits_tables(agg, intervals, "gain", "gain", "Gain over the given features (bits)",
                        CONDITIONAL_NOTE, ci_caption)


def _bits_tables(agg: Aggregate, intervals: Mapping[Any, Any], measure: str, slug: str,
                 title: str, note: str, ci_caption: str) -> List[Table]:
    tables = []
    for system in agg.systems:
        rows = [r for r in agg.layers_of(system) if r.layer is not None]
        body = []
        for ds in agg.datasets:
            cells = []
            for row in rows:
                k, n = agg.degenerate_seeds(row, ds.task)
                cell = Cell(stat=agg.information_cell(row, ds.task, measure),
                            decimals=BITS_DECIMALS, degenerate=(k, n) if k else None)
                ci = intervals.get((row, ds.task, measure))
                if cell.stat is not None and ci is not None and ci.lo is not None:
                    cell = dataclasses.replace(cell, ci=(ci.lo, ci.hi))
                cells.append(cell)
            if all(c.stat is None for c in cells):
                continue
            body.append([Cell(ds.group), Cell(ds.label)] + cells)
        if not body:
            continue
        header = ["Group", "Dataset"] + [layer_label(r.layer) for r in rows]
        if not system.is_control:  # a control's layers are references, not results
            mark_cells(body, range(2, len(header)), by="row", exact=True)
        name = agg.name(system)
        model = f"Model: {system.identity}. " if name != system.identity else ""
        caption = f"{model}{note}" + (f". {ci_caption}" if ci_caption else "")
        tables.append(Table(f"{slug}-{system.slug}", f"{title}: {name}{system_title(system)}",
                            header, [()] * len(header), body, caption=caption))
    return tables
