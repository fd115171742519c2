"""The report's "Examples by pointwise V-information" section (``report --examples N``).

Why: a layer's V-information is a mean over test examples; the examples at its two ends are
what a researcher reads to find label noise and artifacts (Ethayarajh, Choi & Swayamdipta,
ICML 2022). The lowest pointwise V-information (PVI, ``log2p - prior_log2p`` in bits,
:attr:`~estratos.results.predictions.CellPredictions.pvi`) marks an example the probe finds
harder than the class prior does (often a mislabeled one); the highest, one it reads with
ease (sometimes through an artifact).

What is shown, per system (control rows left out: their labels are references) and task:
the best layer spec of the task by mean V-information over seeds (one layer, so the section
stays readable however many layers a report has; its table says which), its ``N`` lowest-
and ``N`` highest-PVI test examples with their PVI, gold and predicted class names and text.
Seeds: the PVI is averaged over the seeds tested on the same examples as the first seed
(same gold labels and texts); where another seed was tested on other examples, the first
seed's alone (the Seeds column says which). The predicted class is the most frequent over
those seeds (ties: the lowest class id), with the count when they disagree.

A cell whose predictions hold no texts or no log2-probabilities (or none at all) gets a
notice, never an error. Reading only what the predictions store, this module needs neither
the cache nor the data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from estratos.report.aggregate import Aggregate, Dataset, Row, System, layer_label, row_of
from estratos.report.tables import Cell, Table, system_title
from estratos.report.writers import Section
from estratos.results import Located, Notice
from estratos.results.predictions import CellPredictions, PredictionsReader

SECTION_TITLE = "Examples by pointwise V-information"
#: the longest text shown in a table cell (report.json keeps the stored text whole)
MAX_SHOWN = 200
INTRO = (
    "Per system and task, the test examples with the lowest and the highest pointwise "
    "V-information (PVI; Ethayarajh, Choi & Swayamdipta 2022): log2 p(gold | x) under the "
    "probe minus log2 p(gold) under the class prior, in bits. A low (negative) PVI: the probe "
    "finds the example harder than the label frequencies do (look for label noise); a high "
    "one: the probe reads its label with ease (look for artifacts). The layer shown is the "
    "task's best layer spec by mean V-information (column Layer). Control rows are left out. "
    "The whole list, texts uncut, is report.json's `examples`.")
#: the note under every examples table
NOTE = ("PVI in bits, averaged over the seeds in the Seeds column (those tested on the same "
        "examples as the first seed; \"1 (first)\" = the first seed alone, the others were "
        "tested on other examples). Predicted: the most frequent class over those seeds "
        "(k/n = the seeds that predicted it, when they disagree; a tie goes to the lowest "
        "class id). Test #: the example's "
        "position in the test split (0-based). Texts are cut at "
        f"{MAX_SHOWN} characters; a pair's sentences are joined by ‖")
HEADER = ["Dataset", "Layer", "Seeds", "Side", "Test #", "PVI", "Gold", "Predicted", "Text"]


@dataclass(frozen=True)
class Pick:
    """The PVI of one (row, task) over the seeds that share its test set."""

    pvi: np.ndarray
    seeds: Tuple[int, ...]
    #: the seeds left out (tested on other examples than the first seed)
    other_seeds: Tuple[int, ...]
    preds: Tuple[CellPredictions, ...]

    @property
    def first(self) -> CellPredictions:
        return self.preds[0]


def shown_text(text: str, limit: int = MAX_SHOWN) -> str:
    """A text as one table cell: line breaks as spaces, cut at ``limit`` characters (ending
    in "…"). The writers escape the rest (Markdown's ``|``, HTML's ``<&>``)."""
    one_line = re.sub(r"\s*[\r\n]+\s*", " ", text)
    return one_line if len(one_line) <= limit else one_line[:limit - 1] + "…"


def bits_text(value: float) -> str:
    text = f"{value:.2f}"
    return "0.00" if float(text) == 0 else text


def best_layer(agg: Aggregate, system: System, task: str) -> Optional[Row]:
    """The system's layer spec with the highest mean V-information on ``task`` (the first
    in layer order on a tie); None when no layer of it has any."""
    rows = [r for r in agg.layers_of(system) if r.layer is not None]
    means = {r: stat.mean for r in rows
             if (stat := agg.information_cell(r, task)) is not None and stat.mean is not None}
    return max(means, key=means.__getitem__) if means else None


def _same_test(a: CellPredictions, b: CellPredictions) -> bool:
    return a.n == b.n and np.array_equal(a.gold, b.gold) and a.texts == b.texts


class _Finder:
    """Each (row, task)'s predictions over its seeds, and why one cannot be shown."""

    def __init__(self, records: Sequence[Located]) -> None:
        self.cells: Dict[Tuple[Row, str], List[Located]] = {}
        for loc in records:
            self.cells.setdefault((row_of(loc.record), loc.record.task), []).append(loc)
        self.reader = PredictionsReader()
        #: kind ("predictions" | "log2p" | "texts") -> descriptions of the cells lacking it
        self.missing: Dict[str, List[str]] = {}

    def _lack(self, kind: str, what: str) -> None:
        self.missing.setdefault(kind, []).append(what)

    def pick(self, row: Row, task: str) -> Optional[Pick]:
        locs = sorted((loc for loc in self.cells.get((row, task), [])
                       if loc.record.score is not None), key=lambda loc: loc.record.seed)
        where = f"{task}, {row.system.label} layer {layer_label(row.layer)}"
        found: List[Tuple[int, CellPredictions]] = []
        for loc in locs:
            hit = self.reader.find(loc.record, loc.path)
            if hit.preds is None:
                if not found:  # the first seed's are needed; a later seed is only left out
                    self._lack("predictions", f"{loc.path}:{loc.line}: {hit.problem}")
                    return None
                continue
            found.append((loc.record.seed, hit.preds))
        if not found:
            return None
        first = found[0][1]
        if first.pvi is None:
            self._lack("log2p", where)
            return None
        if first.texts is None:
            self._lack("texts", where)
            return None
        kept = [(s, p) for s, p in found if p.pvi is not None and _same_test(first, p)]
        others = tuple(s for s, _ in found if s not in {k for k, _ in kept})
        pvi = np.mean(np.stack([p.pvi for _, p in kept if p.pvi is not None]), axis=0)
        return Pick(pvi, tuple(s for s, _ in kept), others, tuple(p for _, p in kept))


def _class_name(names: Sequence[str], label: Any) -> str:
    i = int(label)
    return names[i] if 0 <= i < len(names) else str(i)


def _predicted(pick: Pick, index: int) -> Tuple[Any, int]:
    """(most frequent predicted class id over the seeds (lowest id on a tie), its votes)."""
    votes = np.asarray([int(p.predicted[index]) for p in pick.preds])
    values, counts = np.unique(votes, return_counts=True)
    best = int(np.argmax(counts))  # np.unique sorts: a tie goes to the lowest id
    return int(values[best]), int(counts[best])


def _seeds_text(pick: Pick) -> str:
    text = ", ".join(str(s) for s in pick.seeds)
    return f"{text} (first)" if pick.other_seeds else text


def select(pvi: np.ndarray, n: int) -> Dict[str, List[int]]:
    """side -> test positions: the ``n`` lowest PVI ascending, the ``n`` highest descending
    (ties: the earlier example first)."""
    order = np.argsort(pvi, kind="stable")
    high = np.argsort(-pvi, kind="stable")
    return {"lowest": [int(i) for i in order[:n]], "highest": [int(i) for i in high[:n]]}


def example_section(agg: Aggregate, records: Sequence[Located], n: int
                    ) -> Tuple[Optional[Section], List[Dict[str, Any]], List[Notice]]:
    """The section (None when nothing can be shown), report.json's ``examples`` records,
    and the notices, for ``report --examples n``."""
    finder = _Finder(records)
    tables: List[Table] = []
    out: List[Dict[str, Any]] = []
    unnamed: List[str] = []
    for system in agg.systems:
        if system.is_control:
            continue
        name = agg.name(system)
        body: List[List[Cell]] = []
        for ds in agg.datasets:
            row = best_layer(agg, system, ds.task)
            if row is None:
                continue
            pick = finder.pick(row, ds.task)
            if pick is None:
                continue
            names = pick.first.label_names
            if not names:
                unnamed.append(f"{ds.task}, {system.label} layer {layer_label(row.layer)}")
            body += _rows(ds, row, pick, n, names, name, out)
        if body:
            model = f"Model: {system.identity}. " if name != system.identity else ""
            tables.append(Table(f"examples-{system.slug}",
                                f"Examples by PVI: {name}{system_title(system)}",
                                list(HEADER), [()] * len(HEADER), body,
                                caption=f"{model}{NOTE}"))
    notices = _notices(finder.missing, unnamed)
    if not agg.information:
        notices.append(Notice("report", None, (
            "--examples: no cell of these results records V-information (information), so "
            "no examples are listed (probe them again with this version of estratos)")))
    section = Section(SECTION_TITLE, tables, INTRO) if tables else None
    return section, out, notices


def _rows(ds: Dataset, row: Row, pick: Pick, n: int, names: Sequence[str], system_name: str,
          out: List[Dict[str, Any]]) -> List[List[Cell]]:
    preds = pick.first
    texts = preds.texts or ()
    body = []
    for side, positions in select(pick.pvi, n).items():
        for rank, i in enumerate(positions, start=1):
            label, votes = _predicted(pick, i)
            gold = _class_name(names, preds.gold[i])
            predicted = _class_name(names, label)
            shown = predicted if votes == len(pick.preds) else \
                f"{predicted} ({votes}/{len(pick.preds)})"
            body.append([Cell(ds.label), Cell(layer_label(row.layer)), Cell(_seeds_text(pick)),
                         Cell(side), Cell(str(i)), Cell(bits_text(float(pick.pvi[i]))),
                         Cell(gold), Cell(shown), Cell(shown_text(texts[i]))])
            out.append({"system": system_name, "model": row.system.model,
                        "revision": row.system.revision, "pooling": row.system.pooling,
                        "classifier": row.system.classifier, "features": row.system.features,
                        "task": ds.task, "layer": row.layer, "seeds": list(pick.seeds),
                        "seeds_left_out": list(pick.other_seeds), "side": side, "rank": rank,
                        "index": i, "pvi": round(float(pick.pvi[i]), 6), "gold": gold,
                        "predicted": predicted, "predicted_votes": votes, "text": texts[i]})
    return body


def _notices(missing: Dict[str, List[str]], unnamed: List[str]) -> List[Notice]:
    why = {"predictions": "have no usable predictions",
           "log2p": "have predictions stored before the per-example log2-probabilities",
           "texts": "have predictions stored without the test examples' texts"}
    notices = [Notice("report", None, f"{len(cells)} cell(s) {why[kind]}, so --examples lists "
                      f"none of their examples (e.g. {cells[0]})")
               for kind, cells in missing.items()]
    if unnamed:
        notices.append(Notice("report", None, (
            f"{len(unnamed)} cell(s) have predictions stored without class names: their "
            f"examples show class ids (e.g. {unnamed[0]})")))
    return notices
