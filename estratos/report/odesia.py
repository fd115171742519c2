"""ODESIA measures: baseline-calibrated contribution (Delta) and the EN-ES gap (Ind).

A raw score says little across datasets (70 % is poor on a 2-class task, good on a 6-class
one). ODESIA calibrates it by a baseline with no linguistic knowledge (``estratos baseline``)::

    Delta = (s - b) / |b - r| * 100

s = system score, b = baseline score, r = reference point: the metric's upper bound when the
baseline is high (rule ``auto``: b >= the midpoint of the metric's range), else its lower
bound. Delta is the share of the room between the baseline and the reference that the system
covers (negative when s < b). ``reference`` may force ``upper``, ``lower`` or a number.
Delta is *undefined* (None, with a reason) when b == r, or when the metric has no finite
bound for the rule to use; it is never a division error.

Ind(EN, ES) = Delta_EN - Delta_ES compares one system (or the best of each language) on
paired datasets; the pairs come from a TOML file (default: ``estratos/data/pairs.toml``).

Scores are on the paper's scale (docs/contracts.md): accuracy/F1 in [0, 100], correlations
x100 in [-100, 100].
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from estratos.errors import InputError, OptionError, ResultsError
from estratos.report.aggregate import Aggregate, Dataset, Row, Stat
from estratos.vocab import BASELINE_MODEL_PREFIX, DEFAULT_BASELINE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

#: range of each metric on the paper's scale; metrics not listed are unbounded
METRIC_RANGES: Mapping[str, Tuple[float, float]] = {
    "accuracy": (0.0, 100.0), "f1": (0.0, 100.0),
    "pearson": (-100.0, 100.0), "spearman": (-100.0, 100.0),
}
REFERENCE_RULES = ("auto", "upper", "lower")
Reference = Union[str, float]


def parse_reference(text: Union[str, float]) -> Reference:
    """``auto`` | ``upper`` | ``lower`` | a number (OptionError naming ``--reference``)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        word = str(text).strip().lower()
        if word in REFERENCE_RULES:
            return word
        try:
            value = float(word)
        except ValueError:
            raise OptionError(f"--reference: expected auto, upper, lower or a number, "
                              f"got {text!r}") from None
    if not math.isfinite(value):
        raise OptionError(f"--reference: the reference point must be finite, got {text!r}")
    return value


def metric_bounds(metric: Optional[str]) -> Tuple[float, float]:
    """(low, high) of a metric on the paper's scale; (-inf, inf) when unknown/unbounded."""
    return METRIC_RANGES.get(metric or "", (-math.inf, math.inf))


def reference_point(baseline: float, bounds: Tuple[float, float],
                    reference: Reference = "auto") -> Tuple[Optional[float], Optional[str]]:
    """(r, None), or (None, why) when the rule cannot give a finite reference point."""
    low, high = bounds
    if not isinstance(reference, str):
        return float(reference), None
    if reference == "upper":
        return (high, None) if math.isfinite(high) else (None, "the metric has no upper bound")
    if reference == "lower":
        return (low, None) if math.isfinite(low) else (None, "the metric has no lower bound")
    if reference != "auto":
        raise OptionError(f"--reference: unknown rule {reference!r}")
    if not (math.isfinite(low) and math.isfinite(high)):
        return None, "the metric is unbounded, so the midpoint rule cannot pick r " \
                     "(give --reference)"
    return (high if baseline >= (low + high) / 2 else low), None


@dataclass(frozen=True)
class Calibration:
    """What Delta needs for one dataset: b, r, and why Delta is undefined (if it is)."""

    baseline: float
    reference: Optional[float]
    undefined: Optional[str] = None

    def delta(self, system: float) -> Optional[float]:
        if self.undefined is not None or self.reference is None:
            return None
        return (system - self.baseline) / abs(self.baseline - self.reference) * 100.0


def calibrate(baseline: float, metric: Optional[str] = None, *,
              reference: Reference = "auto",
              bounds: Optional[Tuple[float, float]] = None) -> Calibration:
    """The calibration of a dataset from its baseline score and metric."""
    r, why = reference_point(baseline, bounds or metric_bounds(metric), reference)
    if why is None and r == baseline:
        why = f"the baseline equals the reference point (b = r = {r:g})"
    return Calibration(baseline, r, why)


def delta(system: float, baseline: float, metric: Optional[str] = None, *,
          reference: Reference = "auto",
          bounds: Optional[Tuple[float, float]] = None) -> Optional[float]:
    """Delta = (s - b) / |b - r| * 100, or None when undefined (see module docstring)."""
    return calibrate(baseline, metric, reference=reference, bounds=bounds).delta(system)


def ind(delta_en: Optional[float], delta_es: Optional[float]) -> Optional[float]:
    """Ind(EN, ES) = Delta_EN - Delta_ES; None when either side is undefined."""
    if delta_en is None or delta_es is None:
        return None
    return delta_en - delta_es


# --------------------------------------------------------------------------- aggregates

def delta_baselines(agg: Aggregate) -> Dict[str, Row]:
    """The baseline row that calibrates each task's Delta. ODESIA's baseline is a bag of
    words, so where a task has several baselines (``estratos baseline --baseline all``) the
    TF-IDF one (model ``baseline:tfidf``) calibrates it; a task with several baselines and
    none of them TF-IDF is a :class:`ResultsError`, as Delta would depend on which one."""
    tfidf = BASELINE_MODEL_PREFIX + DEFAULT_BASELINE
    found: Dict[str, List[Row]] = {}
    for row, task in agg.seeds:
        if row.system.kind == "baseline" and row not in found.get(task, []):
            found.setdefault(task, []).append(row)
    chosen: Dict[str, Row] = {}
    for task, rows in found.items():
        if len(rows) > 1:
            rows = [r for r in rows if r.system.model == tfidf] or rows
        if len(rows) > 1:
            a, b = rows[:2]
            raise ResultsError(f"two different baselines for {task} ({a.system.label} "
                               f"and {b.system.label}); give results of one baseline only")
        chosen[task] = rows[0]
    return chosen


def baseline_scores(agg: Aggregate) -> Dict[str, float]:
    """Mean score over seeds of the baseline that calibrates each task
    (:func:`delta_baselines`)."""
    out = {}
    for task, row in delta_baselines(agg).items():
        values = agg.seeds[(row, task)]
        out[task] = sum(values.values()) / len(values)
    return out


def calibrations(agg: Aggregate, baselines: Mapping[str, float],
                 reference: Reference = "auto") -> Dict[str, Calibration]:
    """Calibration of every dataset of ``agg`` that has a baseline."""
    return {ds.task: calibrate(baselines[ds.task], ds.metric, reference=reference)
            for ds in agg.datasets if ds.task in baselines}


def delta_aggregate(agg: Aggregate, calib: Mapping[str, Calibration]) -> Aggregate:
    """The same rows and datasets with every seed's score replaced by its Delta.

    Baseline rows are left out (their Delta is 0 by definition), and so are control rows
    (a reference for another row, not a result); cells whose Delta is undefined, or whose
    dataset has no baseline, are absent (shown as missing).
    """
    seeds: Dict[Tuple[Row, str], Dict[int, float]] = {}
    for (row, task), values in agg.seeds.items():
        cal = calib.get(task)
        if row.system.kind == "baseline" or row.system.is_control or cal is None \
                or cal.undefined:
            continue
        # defined for every seed: a calibration without a reference point is undefined
        seeds[(row, task)] = {s: d for s, v in values.items() if (d := cal.delta(v)) is not None}
    rows = [r for r in agg.rows if r.system.kind != "baseline" and not r.system.is_control]
    return Aggregate(rows, list(agg.datasets), list(agg.groups), seeds)


# --------------------------------------------------------------------------- pairs

@dataclass(frozen=True)
class Pair:
    """Two datasets that measure the same thing in English and Spanish."""

    name: str
    en: str
    es: str
    line: Optional[int] = None


def default_pairs_path() -> Path:
    """The pairs file shipped with estratos (package data)."""
    return Path(str(resources.files("estratos") / "data" / "pairs.toml"))


def _toml_error_line(exc: Exception) -> Optional[int]:
    found = re.search(r"line (\d+)", str(exc))
    return int(found.group(1)) if found else None


def load_pairs(path: Optional[Union[str, os.PathLike]] = None) -> List[Pair]:
    """Read a pairs TOML file: ``[[pair]]`` tables with string keys ``name``, ``en``, ``es``.

    ``en``/``es`` select a dataset: a full task id when they contain ``:``, else a dataset
    name compared without case and punctuation (``SP-wiki`` matches ``SPwiki``).
    """
    p = Path(path) if path is not None else default_pairs_path()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("pairs file not found", p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read pairs file ({exc})", p) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", p, _toml_error_line(exc)) from None
    header_lines = [i + 1 for i, line in enumerate(text.splitlines())
                    if line.strip().replace(" ", "") == "[[pair]]"]
    unknown = sorted(set(doc) - {"pair"})
    if unknown:
        raise InputError(f"unknown top-level key(s) {', '.join(unknown)} "
                         "(expected [[pair]] tables)", p)
    entries = doc.get("pair")
    if not isinstance(entries, list) or not entries:
        raise InputError("no [[pair]] tables", p)
    pairs: List[Pair] = []
    for i, entry in enumerate(entries):
        line = header_lines[i] if i < len(header_lines) else None
        extra = sorted(set(entry) - {"name", "en", "es"})
        if extra:
            raise InputError(f"unknown key(s) {', '.join(extra)} in [[pair]] "
                             "(expected name, en, es)", p, line)
        for key in ("name", "en", "es"):
            value = entry.get(key)
            if not isinstance(value, str) or not value.strip():
                raise InputError(f"[[pair]] needs a non-empty string {key!r}", p, line)
        if any(q.name == entry["name"] for q in pairs):
            raise InputError(f"duplicate pair name {entry['name']!r}", p, line)
        pairs.append(Pair(entry["name"].strip(), entry["en"].strip(), entry["es"].strip(),
                          line))
    return pairs


def _fold(name: str) -> str:
    return re.sub(r"[\W_]+", "", name.casefold())


def match_dataset(selector: str, datasets: Sequence[Dataset]) -> Optional[Dataset]:
    """The dataset a pair selector names (None if absent; ResultsError if ambiguous)."""
    if ":" in selector:
        hits = [d for d in datasets if d.task == selector]
    else:
        hits = [d for d in datasets if _fold(d.name) == _fold(selector)]
    if len(hits) > 1:
        raise ResultsError(f"pair selector {selector!r} matches several tasks "
                           f"({', '.join(d.task for d in hits)}); use a full task id")
    return hits[0] if hits else None


@dataclass(frozen=True)
class GapCell:
    """Delta on each side and their difference for one row and pair."""

    delta_en: Optional[float]
    delta_es: Optional[float]
    ind: Optional[float]
    n_en: int = 0
    n_es: int = 0
    source_en: Optional[str] = None  # only for the "best" row: which row gave the maximum
    source_es: Optional[str] = None


@dataclass
class Gap:
    """Ind for every row present in both languages, plus a ``best`` row, per pair."""

    pairs: List[Pair]
    resolved: Dict[str, Tuple[Optional[Dataset], Optional[Dataset]]]
    rows: List[Row]
    cells: Dict[Tuple[Optional[Row], str], GapCell]
    notes: List[str]


def compute_gap(en: Aggregate, es: Aggregate, pairs: Sequence[Pair],
                calib_en: Mapping[str, Calibration],
                calib_es: Mapping[str, Calibration]) -> Gap:
    """Ind(EN, ES) per (row, pair); the ``None`` row holds the best Delta of each side."""
    d_en, d_es = delta_aggregate(en, calib_en), delta_aggregate(es, calib_es)
    es_rows = set(d_es.rows)
    rows = [r for r in d_en.rows if r in es_rows]
    resolved: Dict[str, Tuple[Optional[Dataset], Optional[Dataset]]] = {}
    cells: Dict[Tuple[Optional[Row], str], GapCell] = {}
    notes: List[str] = []
    for pair in pairs:
        ds_en, ds_es = match_dataset(pair.en, en.datasets), match_dataset(pair.es, es.datasets)
        resolved[pair.name] = (ds_en, ds_es)
        for side, sel, ds, calib in (("EN", pair.en, ds_en, calib_en),
                                     ("ES", pair.es, ds_es, calib_es)):
            if ds is None:
                notes.append(f"{pair.name}: no {side} results for {sel!r}")
            elif ds.task not in calib:
                notes.append(f"{pair.name}: no baseline for {ds.task}")
            elif calib[ds.task].undefined:
                notes.append(f"{pair.name}: Delta undefined for {ds.task}: "
                             f"{calib[ds.task].undefined}")
        if ds_en is None or ds_es is None:
            continue
        for row in rows:
            a, b = d_en.cell(row, ds_en.task), d_es.cell(row, ds_es.task)
            if a is None or b is None:
                continue
            cells[(row, pair.name)] = GapCell(a.mean, b.mean, ind(a.mean, b.mean), a.n, b.n)
        best_en = _best(d_en, ds_en.task)
        best_es = _best(d_es, ds_es.task)
        if best_en and best_es:
            cells[(None, pair.name)] = GapCell(
                best_en[1].mean, best_es[1].mean, ind(best_en[1].mean, best_es[1].mean),
                best_en[1].n, best_es[1].n, _row_text(best_en[0]), _row_text(best_es[0]))
    return Gap(list(pairs), resolved, rows, cells, notes)


def _best(agg: Aggregate, task: str) -> Optional[Tuple[Row, Stat]]:
    found = [(row, stat) for row in agg.ranked_rows if (stat := agg.cell(row, task)) is not None]
    return max(found, key=lambda rs: rs[1].mean) if found else None


def _row_text(row: Row) -> str:
    pooling = f" {row.system.pooling}" if row.system.pooling else ""
    return f"{row.system.label}{pooling} layer {row.layer}"
