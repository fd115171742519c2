"""Test-set statistics of report rows: bootstrap intervals and "not worse than the best".

Why here: a report row averages a cell's seeds, so its interval and its tests must resample
the test examples of every seed at once (:mod:`estratos.stats`); the predictions come from
the files beside each results file (:mod:`estratos.results.predictions`). Two questions get
two numbers: the spread over seeds (± std, training randomness) and the interval over test
examples ([lo, hi], how much the score would move on another test set of the same size).

Intervals are computed once: a one-seed cell whose results line recorded its ``ci`` with the
report's settings (resamples, level, seed) shows that one, without reading its predictions;
only a mean over several seeds (or other settings) is resampled here. A cell without usable
predictions and without such a ``ci`` gets no interval (a notice says which and why).

A cell whose records have ``information`` also gets an interval of its V-information
(:func:`pvi_interval`), from the per-example log2-probabilities stored with its predictions,
on the same resampled test sets as its score's; a conditional cell (``probe --given``) gets
one of its gain over the given features the same way, from ``log2p - given_log2p``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from estratos.report.aggregate import Aggregate, Row, row_of
from estratos.results import Located, Notice
from estratos.results.predictions import CellPredictions, PredictionsReader, sample_of
from estratos.stats import (
    BOOTSTRAP_SEED,
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    Interval,
    Sample,
    adjust,
    bootstrap_ci,
    compare_to,
    same_test_set,
)
from estratos.stats.bootstrap import CHUNK
from estratos.vocab import CONTROL_TASK

CellId = Tuple[Row, str]


@dataclass(frozen=True)
class RowSample:
    """The predictions of one (row, task) over its seeds, as one sample."""

    sample: Sample
    seeds: Tuple[int, ...]
    preds: CellPredictions
    #: every seed's predictions, in the order of ``seeds`` (``preds`` is the first)
    per_seed: Tuple[CellPredictions, ...] = ()


class Samples:
    """Looks up each (row, task)'s predictions (every seed), remembering why one is missing."""

    def __init__(self, records: Sequence[Located]) -> None:
        self.cells: Dict[CellId, List[Located]] = {}
        for loc in records:
            self.cells.setdefault((row_of(loc.record), loc.record.task), []).append(loc)
        self.reader = PredictionsReader()
        self.problems: Dict[CellId, str] = {}

    def get(self, row: Row, task: str, metric: Optional[str] = None) -> Optional[RowSample]:
        """The row's sample for ``task`` (seeds with an undefined score left out), or None
        with the reason in :attr:`problems`."""
        locs = [loc for loc in self.cells.get((row, task), []) if loc.record.score is not None]
        if not locs:
            return None
        found = []
        for loc in sorted(locs, key=lambda other: other.record.seed):
            hit = self.reader.find(loc.record, loc.path)
            if hit.preds is None:
                self.problems[(row, task)] = f"{loc.path}:{loc.line}: {hit.problem}"
                return None
            found.append((loc.record, hit.preds))
        record, first = found[0]
        samples = [sample_of(r, p, metric) for r, p in found]
        if not all(same_test_set(samples[0], s) for s in samples[1:]):
            self.problems[(row, task)] = (f"{task}: the seeds of {row.system.label} layer "
                                          f"{row.layer} were tested on different test sets")
            return None
        sample = sample_of(record, first, metric, seeds=[p for _, p in found])
        return RowSample(sample, tuple(r.seed for r, _ in found), first,
                         tuple(p for _, p in found))

    def recorded_interval(self, row: Row, task: str, resamples: int, level: float,
                          seed: int) -> Optional[Interval]:
        """The ``ci`` a one-seed cell's results line recorded, if made with these settings."""
        locs = [loc for loc in self.cells.get((row, task), []) if loc.record.score is not None]
        if len(locs) != 1 or not locs[0].record.ci:
            return None
        ci = locs[0].record.ci
        if (ci.get("resamples"), ci.get("level"), ci.get("seed")) != (resamples, level, seed) \
                or ci.get("lo") is None:
            return None
        return Interval(locs[0].record.score, ci["lo"], ci["hi"], ci.get("se"), level,
                        resamples, seed, 0)


def _problem_notice(problems: Dict[CellId, str], what: str) -> List[Notice]:
    if not problems:
        return []
    example = next(iter(problems.values()))
    return [Notice("report", None, f"{len(problems)} cell(s) have no usable predictions, so "
                   f"no {what} (e.g. {example})")]


def cell_intervals(agg: Aggregate, samples: Samples, *, resamples: int = DEFAULT_RESAMPLES,
                   level: float = DEFAULT_LEVEL, seed: int = BOOTSTRAP_SEED
                   ) -> Tuple[Dict[CellId, Interval], List[Notice]]:
    """The bootstrap interval of every (row, task) mean over its seeds."""
    out: Dict[CellId, Interval] = {}
    missing: Dict[CellId, str] = {}
    per_seed_labels = 0
    for (row, task) in agg.seeds:
        recorded = samples.recorded_interval(row, task, resamples, level, seed)
        if recorded is not None:  # computed by the probe from these predictions
            out[(row, task)] = recorded
            continue
        got = samples.get(row, task)
        if got is not None:
            out[(row, task)] = bootstrap_ci(got.sample, resamples=resamples, level=level,
                                            seed=seed)
        elif str(row.system.control or "").startswith(CONTROL_TASK) and \
                len(samples.cells.get((row, task), [])) > 1:
            per_seed_labels += 1  # by design, not a fault: see the notice below
        else:
            missing[(row, task)] = samples.problems.get((row, task), "no predictions")
    notices = _problem_notice(missing, "interval")
    if per_seed_labels:
        notices.append(Notice("report", None, (
            f"{per_seed_labels} control-task cell(s) have no interval over their seeds: "
            "each seed draws its own control labels, so the seeds are not tested on one "
            "set of labels (as intended); a one-seed report (--seeds in probe) gives each "
            "its interval")))
    return out, notices


def pvi_interval(pvi: np.ndarray, strata: Optional[np.ndarray] = None, *,
                 resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL,
                 seed: int = BOOTSTRAP_SEED) -> Interval:
    """Percentile bootstrap interval of a cell's V-information (bits) from its examples'
    pointwise V-information ``pvi`` ``(S, n)`` (one row per seed, :attr:`CellPredictions.pvi`).

    Each resample draws the test examples with replacement (within each stratum, keeping its
    size: the draws of :func:`estratos.stats.bootstrap_ci`, so with the same ``seed`` the
    score's interval and this one resample the same test sets), takes each seed's mean PVI
    and averages the seeds, as the score's interval averages its seeds' metrics. The
    estimate is the mean PVI itself: the cell's V-information, H(Y|0) - H(Y|X)."""
    values = np.atleast_2d(np.asarray(pvi, dtype=np.float64))
    n = values.shape[1]
    if strata is None:
        groups = [np.arange(n)]
    else:
        array = np.asarray(strata)
        groups = [np.flatnonzero(array == s) for s in np.unique(array)]
    rng = np.random.default_rng(seed)
    means: List[np.ndarray] = []
    done = 0
    while done < resamples:
        b = min(CHUNK, resamples - done)
        draws = np.concatenate([pos[rng.integers(0, len(pos), size=(b, len(pos)))]
                                for pos in groups], axis=1)
        means.append(np.mean([row[draws].mean(axis=1) for row in values], axis=0))
        done += b
    stats = np.concatenate(means)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    se = float(np.std(stats, ddof=1)) if len(stats) > 1 else 0.0
    return Interval(float(values.mean()), float(lo), float(hi), se, level, resamples, seed, n)


#: the bits measures with an interval -> the :class:`CellPredictions` attribute holding
#: their per-example values (whose mean over the test examples is the measure)
BITS_MEASURES: Dict[str, str] = {"v_information": "pvi", "gain": "gain"}


def information_intervals(agg: Aggregate, samples: Samples, *,
                          resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL,
                          seed: int = BOOTSTRAP_SEED
                          ) -> Tuple[Dict[Tuple[Row, str, str], Interval], List[Notice]]:
    """The bootstrap interval (:func:`pvi_interval`) of each bits measure of
    :data:`BITS_MEASURES` (the V-information; a conditional cell's gain) of every (row,
    task) whose records have it, over its seeds, from the per-example log2-probabilities
    stored with the predictions; keyed ``(row, task, measure)``. A cell without them
    (predictions stored before them, or none usable) gets none, and one notice says how
    many."""
    out: Dict[Tuple[Row, str, str], Interval] = {}
    without: Dict[CellId, str] = {}
    for (row, task, name) in agg.information:
        if name not in BITS_MEASURES:
            continue
        got = samples.get(row, task)
        if got is None:
            per_seed_labels = str(row.system.control or "").startswith(CONTROL_TASK) and \
                len(samples.cells.get((row, task), [])) > 1  # by design (see cell_intervals)
            if not per_seed_labels:
                without[(row, task)] = samples.problems.get((row, task), "no predictions")
            continue
        values = [getattr(p, BITS_MEASURES[name]) for p in got.per_seed or (got.preds,)]
        if any(v is None for v in values):
            without[(row, task)] = (f"{task}, {row.system.label} layer {row.layer}: its "
                                    "predictions were stored before the log2-probabilities")
            continue
        strata = got.preds.strata
        out[(row, task, name)] = pvi_interval(np.stack([v for v in values if v is not None]),
                                              None if strata is None else np.asarray(strata),
                                              resamples=resamples, level=level, seed=seed)
    notices = []
    if without:
        notices.append(Notice("report", None, (
            f"{len(without)} cell(s) have V-information but no stored per-example "
            f"log2-probabilities, so no V-information interval (e.g. "
            f"{next(iter(without.values()))})")))
    return out, notices


@dataclass(frozen=True)
class BestMark:
    """How a layer compares with the best layer of its system on one task."""

    best: bool
    p_value: Optional[float]
    p_adjusted: Optional[float]
    not_worse: bool


def best_layer_marks(agg: Aggregate, samples: Samples, *, correction: str = "holm",
                     alpha: float = 0.05, resamples: int = DEFAULT_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> Tuple[Dict[CellId, BestMark], List[Notice]]:
    """Per system and task: the best layer (highest mean) and, by paired bootstrap against
    it with ``correction`` over the system's other layers, those not significantly worse
    (adjusted p >= ``alpha``)."""
    marks: Dict[CellId, BestMark] = {}
    missing: Dict[CellId, str] = {}
    for system in agg.systems:
        if system.is_control:  # a reference, not a result: no best layer, no daggers
            continue
        rows = [r for r in agg.layers_of(system) if r.layer is not None]
        for ds in agg.datasets:
            means = {r: cell.mean for r in rows if (cell := agg.cell(r, ds.task)) is not None}
            present = list(means)
            if len(present) < 2:
                continue
            best = max(present, key=means.__getitem__)
            best_sample = samples.get(best, ds.task)
            if best_sample is None:
                missing[(best, ds.task)] = samples.problems.get((best, ds.task), "")
                continue
            others, other_rows = [], []
            for r in present:
                if r == best:
                    continue
                got = samples.get(r, ds.task)
                if got is None or not same_test_set(best_sample.sample, got.sample):
                    missing[(r, ds.task)] = samples.problems.get(
                        (r, ds.task), f"{ds.task}: layer {r.layer} has another test set "
                                      f"than layer {best.layer}")
                    continue
                others.append(got.sample)
                other_rows.append(r)
            marks[(best, ds.task)] = BestMark(True, None, None, True)
            if not others:
                continue
            diffs = compare_to(best_sample.sample, others, resamples=resamples, seed=seed)
            raw = [1.0 if d.p_value is None else d.p_value for d in diffs]
            adjusted = adjust(raw, correction)
            for r, p, q in zip(other_rows, raw, adjusted):
                marks[(r, ds.task)] = BestMark(False, p, float(q), bool(q >= alpha))
    return marks, _problem_notice(missing, "significance mark")


def correction_text(correction: str, alpha: float, resamples: int) -> str:
    """The caption sentence that states how the marks were decided."""
    how = {"holm": "Holm-corrected", "bonferroni": "Bonferroni-corrected",
           "none": "uncorrected"}[correction]
    return (f"† = not significantly worse than the system's best layer on this dataset "
            f"(paired bootstrap over test examples, {resamples} resamples, {how} over the "
            f"other layers, alpha = {alpha:g})")


@dataclass(frozen=True)
class StatsOptions:
    """What a report adds from the predictions: intervals (``ci``) and/or the marks of layers
    not significantly worse than the best (``significance``: a correction name, or None)."""

    ci: bool = False
    significance: Optional[str] = None
    alpha: float = 0.05
    level: float = DEFAULT_LEVEL
    resamples: int = DEFAULT_RESAMPLES
    seed: int = BOOTSTRAP_SEED

    def __post_init__(self) -> None:
        from estratos.errors import OptionError
        from estratos.registry import unknown_name
        from estratos.stats import CORRECTIONS

        if self.significance is not None and self.significance not in CORRECTIONS:
            raise unknown_name("correction", self.significance, CORRECTIONS, "--significance")
        if not 0.0 < self.alpha < 1.0:
            raise OptionError(f"--alpha: must be between 0 and 1, got {self.alpha!r}")
        if not 0.0 < self.level < 1.0:
            raise OptionError(f"--level: must be between 0 and 1, got {self.level!r}")
        if isinstance(self.resamples, bool) or not isinstance(self.resamples, int) \
                or self.resamples < 1:
            raise OptionError(f"--resamples: must be a positive integer, got "
                              f"{self.resamples!r}")

    @property
    def active(self) -> bool:
        return self.ci or self.significance is not None


@dataclass
class Applied:
    """What :func:`apply` computed: the score intervals, the marks, the V-information
    intervals (cells with ``information``), and the notices they raised."""

    intervals: Dict[CellId, Interval] = field(default_factory=dict)
    marks: Dict[CellId, BestMark] = field(default_factory=dict)
    information: Dict[Tuple[Row, str, str], Interval] = field(default_factory=dict)
    notices: List[Notice] = field(default_factory=list)


def apply(agg: Aggregate, records: Sequence[Located], options: StatsOptions) -> Applied:
    """Intervals and marks the options ask for, with the notices they raise."""
    samples = Samples(records)
    out = Applied()
    if options.ci:
        out.intervals, more = cell_intervals(agg, samples, resamples=options.resamples,
                                             level=options.level, seed=options.seed)
        out.notices += more
        if agg.information:
            out.information, more = information_intervals(
                agg, samples, resamples=options.resamples, level=options.level,
                seed=options.seed)
            out.notices += more
    if options.significance is not None:
        out.marks, more = best_layer_marks(agg, samples, correction=options.significance,
                                           alpha=options.alpha, resamples=options.resamples,
                                           seed=options.seed)
        out.notices += more
    return out
