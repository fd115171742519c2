"""The report's "Concept erasure" section: what the eraser left of the concept itself.

Why a section of its own: an erased system's scores (``probe --erase``, rows ``[erase
CONCEPT]``) sit in the per-layer tables beside the unerased ones; what says whether the
erasure did its work is the concept's own linear probe (:mod:`estratos.probe.erasure`),
trained on the erased training features and scored on the scored split: LEACE guarantees
that no linear classifier beats a constant one on the data the eraser was fitted on, so
on held-out examples it must sit at the concept's majority rate, within sampling. Per
erased system, datasets x layer specs: the concept probe's accuracy after erasure, before
it in parentheses, and the concept's majority rate; a random erasure (``random:RANK``) has
no concept to check and shows its rank.
"""

from __future__ import annotations

from typing import List

from estratos.report.aggregate import Aggregate, layer_label
from estratos.report.tables import Cell, Table, system_title

SECTION_TITLE = "Concept erasure"
INTRO = (
    "Rows [erase CONCEPT] are probed on features from which LEACE (Belrose et al. 2023) "
    "erased the concept, fitted on the training split only; their task scores are in the "
    "tables above. Here, for each erased layer, the concept's own linear probe (logistic "
    "regression on standardized features): its test accuracy after erasure, before it in "
    "parentheses, and the concept's majority rate. After erasure it must be at the "
    "majority rate, within sampling; a random erasure of the same rank (random:RANK) is "
    "the control for the damage itself.")
NOTE = ("Concept probe test accuracy after erasure (before), / the concept's majority rate "
        "on the test split, in %; random erasures: the rank removed")


def _text(record: object) -> str:
    if not isinstance(record, dict):
        return ""
    if record.get("concept_accuracy") is None:
        return f"rank {record.get('rank')}"
    return (f"{record['concept_accuracy']:.2f} ({record.get('concept_accuracy_before', 0):.2f})"
            f" / {record.get('concept_majority', 0):.2f}")


def erasure_tables(agg: Aggregate) -> List[Table]:
    """Per erased system: datasets x layer specs of :func:`_text` of its cells' ``erasure``
    (none when no cell of the report was erased)."""
    tables = []
    for system in agg.systems:
        if system.erase is None:
            continue
        rows = [r for r in agg.layers_of(system) if r.layer is not None]
        body = []
        for ds in agg.datasets:
            cells = [Cell(_text(dict(agg.erasure[(row, ds.task)])))
                     if (row, ds.task) in agg.erasure else Cell("") for row in rows]
            if any(c.text for c in cells):
                body.append([Cell(ds.group), Cell(ds.label)] + cells)
        if not body:
            continue
        header = ["Group", "Dataset"] + [layer_label(r.layer) for r in rows]
        tables.append(Table(f"erasure-{system.slug}",
                            f"Concept erasure: {agg.name(system)}{system_title(system)}",
                            header, [()] * len(header), body,
                            caption=f"{agg.name(system)}: {NOTE}"))
    return tables


__all__ = ["INTRO", "SECTION_TITLE", "erasure_tables"]
