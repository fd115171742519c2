"""``estratos compare``: is one cell really better than another on the same test set?

Two selections of result cells (e.g. ``layer=8`` and ``layer=9`` of one model, or
``model=X,layer=avg`` and ``model=Y,layer=avg``) on one task are compared on their stored
per-example predictions: the difference B - A of their metric (each averaged over its
seeds), its paired bootstrap interval and p-value over test examples, and for accuracy
McNemar's exact test per seed both sides share. Selections must name exactly one row
(system and layer); the two must share a test set.

A selected cell held by two files with different contents (e.g. a run and the demo's run of
the same task on other data) is refused, naming both copies and what differs: answering
from whichever file came last would silently change the result with the order of the
arguments. ``last_wins`` (``--last-wins``) takes the copy of the file given last, and says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from estratos.errors import OptionError, ResultsError
from estratos.registry import unknown_name
from estratos.report.aggregate import Row, layer_label, revision_tag, row_of, short_model_name
from estratos.report.intervals import RowSample, Samples
from estratos.results import LoadedResults, Located, ResultRecord, load_results
from estratos.results.record import CellKey
from estratos.stats import (
    BOOTSTRAP_SEED,
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    Difference,
    Interval,
    bootstrap_ci,
    mcnemar_exact,
    paired_bootstrap,
    same_test_set,
)
from estratos.vocab import CONTROL_TASK, METRICS, RANDOM_INIT_PREFIX

PathLike = Union[str, os.PathLike]
#: selector keys: every part of a cell's identity (:attr:`ResultRecord.identity`, the
#: fields of :class:`CellKey`) but the task (``--task``), and what produced it (``kind``)
SELECTOR_KEYS = CellKey.selector_keys()
#: how a selector names a missing value (a record's null)
NONE_VALUES = ("none", "null")


def parse_selector(text: str, option: str) -> Dict[str, str]:
    """``"model=X,layer=8"`` -> ``{"model": "X", "layer": "8"}``; bad forms name ``option``."""
    out: Dict[str, str] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise OptionError(f"{option}: {part!r} is not KEY=VALUE (e.g. {option} "
                              "\"layer=8\" or \"model=org/name,layer=avg\")")
        if key not in SELECTOR_KEYS:
            raise unknown_name("key", key, SELECTOR_KEYS, option)
        if key in out:
            raise OptionError(f"{option}: {key!r} given twice")
        out[key] = value
    if not out:
        raise OptionError(f"{option}: give a selection such as \"layer=8\"")
    return out


def _identity(record: ResultRecord) -> Dict[str, Any]:
    """The selectable parts of a record's identity, by selector key."""
    values = dict(record.identity)
    values.pop("task", None)
    values["kind"] = record.kind
    return values


def _text(value: Any) -> str:
    """How a selector writes an identity value (a null as ``none``)."""
    return "none" if value is None else str(value)


def _matches(loc: Located, selector: Dict[str, str]) -> bool:
    r = loc.record
    have = _identity(r)
    for key, value in selector.items():
        got = have.get(key)
        if key == "model":
            if not (r.model == value or r.model.endswith("/" + value.lstrip("/"))
                    or row_of(r).system.label == value or short_model_name(r.model) == value):
                return False
        elif got is None:
            if value.lower() not in NONE_VALUES:
                return False
        elif key == "revision":
            if value not in (got, revision_tag(got)[1:]):
                return False
        elif str(got) != value:
            return False
    return True


#: identity parts every description names (in this order, the layer last); the others are
#: named when set (a control kind, a random-init revision, any further part of the identity)
_DESCRIBED = ("model", "pooling", "classifier")


def _describe(record: ResultRecord) -> str:
    """A cell's row as selectors would write it: ``model=X,pooling=mean,...,layer=8``."""
    values = _identity(record)
    parts = [f"{key}={values[key]}" for key in _DESCRIBED if values.get(key) is not None]
    if values["kind"] != "probe":
        parts.append(f"kind={values['kind']}")
    revision = values.get("revision")
    if revision is not None and revision.startswith(RANDOM_INIT_PREFIX):
        parts.append(f"revision={revision}")
    for key, value in values.items():
        if key not in (*_DESCRIBED, "kind", "revision", "layer", "seed") and value is not None:
            parts.append(f"{key}={value}")
    parts.append(f"layer={layer_label(record.layer)}")
    return ",".join(parts)


def _values_present(records: Sequence[Located], selector: Dict[str, str]) -> str:
    """What the cells hold, per selector key: each key of ``selector`` first (the one that
    matched nothing is among them), then every other key whose value differs between cells;
    at most 8 values a key. Short where listing whole cells was not (8 long identities)."""
    values: Dict[str, List[str]] = {}
    for loc in records:
        for key, value in _identity(loc.record).items():
            if key == "seed":
                continue
            text = layer_label(value) if key == "layer" else _text(value)
            if text not in values.setdefault(key, []):
                values[key].append(text)
    keys = [k for k in selector if k in values] + [
        k for k in values if k not in selector and len(values[k]) > 1]
    parts = []
    for key in keys:
        shown = values[key][:8]
        more = f" (+{len(values[key]) - 8} more)" if len(values[key]) > 8 else ""
        parts.append(f"{key}: {', '.join(shown)}{more}")
    return "its cells have " + "; ".join(parts) if parts else "it has no cell"


def _row_id(record: ResultRecord) -> Tuple[Tuple[str, Any], ...]:
    """What one row of a selection is: the cell's identity apart from its seed."""
    return tuple((k, v) for k, v in _identity(record).items() if k != "seed")


def _select(records: Sequence[Located], task: str, selector: Dict[str, str], option: str,
            text: str) -> Tuple[Row, List[Located]]:
    hits = [loc for loc in records if _matches(loc, selector)]
    if not hits:
        raise OptionError(f"{option}: {text!r} matches no cell of {task}; "
                          f"{_values_present(records, selector)}")
    rows: Dict[Tuple[Tuple[str, Any], ...], List[Located]] = {}
    for loc in hits:
        rows.setdefault(_row_id(loc.record), []).append(loc)
    if len(rows) > 1:
        ids = [dict(r) for r in rows]
        differ = [k for k in ids[0] if len({_text(i[k]) for i in ids}) > 1]
        listed = "; ".join(",".join(f"{k}={_text(i[k])}" for k in differ) for i in ids[:8])
        more = " ..." if len(ids) > 8 else ""
        example = ",".join([text, *(f"{k}={_text(ids[0][k])}" for k in differ
                                    if k not in selector)])
        raise OptionError(f"{option}: {text!r} matches {len(rows)} rows of {task}, which "
                          f"differ in {', '.join(differ)} ({listed}{more}); add "
                          f"{' or '.join(differ)} to pick one, e.g. {option} {example!r}")
    [locs] = rows.values()
    return row_of(locs[0].record), locs


def _resolve_task(records: Sequence[Located], task: str) -> str:
    ids = sorted({loc.record.task for loc in records})
    if task in ids:
        return task
    by_name = sorted({loc.record.task for loc in records if loc.record.name == task})
    if len(by_name) == 1:
        return by_name[0]
    if len(by_name) > 1:
        raise OptionError(f"--task: {task!r} is the name of several tasks here "
                          f"({', '.join(by_name)}); give the full id")
    raise OptionError(f"--task: no results for task {task!r} (tasks present: "
                      f"{', '.join(ids) or 'none'})")


#: the smallest p-value written as a number; below it, "p < 0.0001" (never "p = 0.0000")
P_FLOOR = 1e-4


def p_text(p: float) -> str:
    """``= 0.0020`` or ``< 0.0001``: a p-value after its "p", four decimals."""
    return f"< {P_FLOOR:.4f}" if p < P_FLOOR else f"= {p:.4f}"


def _where(loc: Located) -> str:
    return f"{loc.path}:{loc.line}"


#: record fields named first (with their values) when two copies of a cell differ
_SHOWN = ("sizes", "data_digest", "encoding", "score", "created")


def _shown(record: ResultRecord, name: str) -> str:
    if name == "sizes":
        test = (record.sizes or {}).get("test")
        return "test size unknown" if test is None else f"{test} test examples"
    if name == "data_digest":
        return f"data digest {record.data_digest}"
    if name == "encoding":
        return "encoded with " + ", ".join(f"{k} {v}" for k, v in
                                           sorted((record.encoding or {}).items()))
    return f"{name} {getattr(record, name)}"


def _differences(a: ResultRecord, b: ResultRecord) -> Tuple[List[str], List[str]]:
    """The fields in which two copies of a cell differ: those of :data:`_SHOWN` (shown with
    their values) and the others (named only)."""
    ja, jb = a.to_json(), b.to_json()
    differ = [k for k in dict.fromkeys([*ja, *jb]) if ja.get(k) != jb.get(k)]
    return [k for k in _SHOWN if k in differ], [k for k in differ if k not in _SHOWN]


def _conflicts(loaded: LoadedResults, locs: Sequence[Located], last_wins: bool) -> List[str]:
    """Refuse (or, with ``last_wins``, note) selected cells whose copies in different files
    differ. Copies within one file are a rerun with ``--overwrite``: its last copy is meant."""
    found: List[Tuple[Located, Located, List[str], List[str]]] = []
    for loc in locs:
        per_file: Dict[str, Located] = {}
        for copy in loaded.copies.get(loc.record.key, ()):
            per_file[copy.path] = copy  # the last copy of each file
        kept = per_file.pop(loc.path, loc)
        for other in per_file.values():
            shown, named = _differences(other.record, kept.record)
            if shown or named:
                found.append((other, kept, shown, named))
    if not found:
        return []
    if last_wins:
        return [f"note: {_describe_cell(k.record)}: kept {_where(k)} (the file given last, "
                f"--last-wins) over {_where(o)}" for o, k, _, _ in found]
    other, kept, shown, named = found[0]
    values = "; ".join(f"{_where(loc)}: " + ", ".join(_shown(loc.record, k) for k in shown)
                       for loc in (other, kept)) if shown else ""
    differ = (f" ({values}" + (f"; also {', '.join(named)} differ" if named else "") + ")"
              if shown else f" (they differ in {', '.join(named)})")
    more = f"; {len(found) - 1} more selected cell(s) likewise" if len(found) > 1 else ""
    raise ResultsError(
        f"{_describe_cell(kept.record)} is in two results files with different results: "
        f"{_where(other)} and {_where(kept)}{differ}{more}. Which one to compare is "
        "ambiguous: pass only the file you mean, or --last-wins to use the copy of the "
        "file given last")


def _same_data(locs_a: Sequence[Located], locs_b: Sequence[Located], a: str, b: str) -> None:
    """Refuse sides computed on different builds of the task's data (their recorded data
    digests differ): a paired comparison needs the same examples, and a difference between
    builds is not a difference between the cells. Records without a digest are not checked."""
    sides = []
    for option, text, locs in (("--a", a, locs_a), ("--b", b, locs_b)):
        found: Dict[str, Located] = {}
        for loc in locs:
            if loc.record.data_digest:
                found.setdefault(loc.record.data_digest, loc)
        if len(found) > 1:
            where = "; ".join(f"{d} at {_where(loc)}" for d, loc in found.items())
            raise ResultsError(f"{option}: the seeds of {text!r} were computed on different "
                               f"builds of the task's data (data digests {where}); rerun "
                               "them on one build")
        sides.append(found)
    found_a, found_b = sides
    if found_a and found_b and set(found_a) != set(found_b):
        [(da, la)], [(db, lb)] = found_a.items(), found_b.items()
        raise ResultsError(
            f"A and B were computed on different builds of the task's data: A on data digest "
            f"{da} ({_where(la)}), B on {db} ({_where(lb)}); a paired comparison needs the "
            "same examples: rerun one side on the other's data")


def _describe_cell(record: ResultRecord) -> str:
    return f"cell {record.task} {_describe(record)} seed {record.seed}"


@dataclass
class Side:
    """One side of a comparison: its row, seeds, score and interval; ``label`` is the row
    as selectors write it."""

    row: Row
    seeds: Tuple[int, ...]
    interval: Interval
    label: str = ""


@dataclass
class Comparison:
    """What :func:`compare_cells` found (``describe()`` is what the CLI prints)."""

    task: str
    metric: str
    n: int
    a: Side
    b: Side
    difference: Difference
    mcnemar: List[Tuple[int, int, int, float]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def describe(self) -> str:
        def f(x: Optional[float], sign: bool = False) -> str:
            return "undefined" if x is None else (f"{x:+.2f}" if sign else f"{x:.2f}")

        d = self.difference
        level = f"{100 * d.level:g}%"
        lines = [f"task {self.task}: {self.metric} on {self.n} test examples "
                 "(paper's scale; each side averaged over its seeds)"]
        for name, side in (("A", self.a), ("B", self.b)):
            iv = side.interval
            seeds = ",".join(str(s) for s in side.seeds)
            lines.append(f"{name}: {side.label} (seeds {seeds}): "
                         f"{f(iv.estimate)} [{f(iv.lo)}, {f(iv.hi)}]")
        lines.append(f"B - A: {f(d.diff, True)}  {level} CI [{f(d.lo, True)}, "
                     f"{f(d.hi, True)}]  paired bootstrap p "
                     f"{'= undefined' if d.p_value is None else p_text(d.p_value)}  "
                     f"({d.resamples} resamples of the test set, seed {d.seed})")
        for seed, only_a, only_b, p in self.mcnemar:
            lines.append(f"McNemar exact, seed {seed}: only A right {only_a}, only B right "
                         f"{only_b}, p {p_text(p)}")
        lines += self.notes
        return "\n".join(lines)


def _require(samples: Samples, row: Row, task: str, metric: Optional[str],
             option: str, label: str) -> RowSample:
    got = samples.get(row, task, metric)
    if got is None:
        problem = samples.problems.get((row, task), "every score is undefined")
        raise ResultsError(f"{option}: cannot compare {task} {label}: {problem}")
    return got


def compare_cells(results: Sequence[PathLike], task: str, a: str, b: str, *,
                  metric: Optional[str] = None, resamples: int = DEFAULT_RESAMPLES,
                  level: float = DEFAULT_LEVEL, seed: int = BOOTSTRAP_SEED,
                  last_wins: bool = False) -> Comparison:
    """Compare selection ``b`` against ``a`` (e.g. ``"layer=8"``, ``"layer=9"``) on ``task``
    in ``results`` (paths or globs); ``metric`` defaults to the task's primary metric.
    A selected cell that two files hold with different contents raises
    :class:`ResultsError` unless ``last_wins`` (then the last file's copy, with a note)."""
    sel_a, sel_b = parse_selector(a, "--a"), parse_selector(b, "--b")
    if metric is not None and metric not in METRICS:
        raise unknown_name("metric", metric, METRICS, "--metric")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise OptionError(f"--resamples: must be a positive integer, got {resamples!r}")
    if not 0.0 < level < 1.0:
        raise OptionError(f"--level: must be between 0 and 1, got {level!r}")
    if not results:
        raise OptionError("give at least one RESULTS file")
    loaded = load_results(list(results))
    task_id = _resolve_task(loaded.records, task)
    records = [loc for loc in loaded.records if loc.record.task == task_id]
    row_a, locs_a = _select(records, task_id, sel_a, "--a", a)
    row_b, locs_b = _select(records, task_id, sel_b, "--b", b)
    if {loc.record.key for loc in locs_a} == {loc.record.key for loc in locs_b}:
        raise OptionError(f"--a {a!r} and --b {b!r} select the same cells")
    notes = _conflicts(loaded, locs_a + locs_b, last_wins)
    _same_data(locs_a, locs_b, a, b)
    label_a, label_b = _describe(locs_a[0].record), _describe(locs_b[0].record)
    # one lookup per side: each holds exactly its selected cells (seeds included), whatever
    # the report's row grouping makes of two sides of one row
    samples_a, samples_b = Samples(locs_a), Samples(locs_b)
    got_a = _require(samples_a, row_a, task_id, metric, "--a", label_a)
    got_b = _require(samples_b, row_b, task_id, metric, "--b", label_b)
    if not same_test_set(got_a.sample, got_b.sample):
        raise ResultsError(
            f"the test sets differ: A has {got_a.sample.n} test examples "
            f"({got_a.preds.test_digest()[:12]}), B has {got_b.sample.n} "
            f"({got_b.preds.test_digest()[:12]}); a paired comparison needs the same "
            "test examples (same task data, same fallback)")
    diff = paired_bootstrap(got_a.sample, got_b.sample, resamples=resamples, level=level,
                            seed=seed)
    side_a = Side(row_a, got_a.seeds, _interval(samples_a, row_a, task_id, got_a, resamples,
                                                level, seed), label_a)
    side_b = Side(row_b, got_b.seeds, _interval(samples_b, row_b, task_id, got_b, resamples,
                                                level, seed), label_b)
    out = Comparison(task_id, got_a.sample.metric, got_a.sample.n, side_a, side_b, diff,
                     notes=notes)
    controls = [label for label, locs in (("A", locs_a), ("B", locs_b))
                if any(loc.record.control_kind and str(loc.record.control_kind).startswith(
                    CONTROL_TASK) for loc in locs)]
    if controls:
        # a control task's test labels are drawn from its seed: they are not the task's
        # labels, nor the same from one seed to the next
        out.notes.append(
            f"{' and '.join(controls)} {'is a' if len(controls) == 1 else 'are'} "
            "control-task cell(s): their test labels are the control's, drawn anew for each "
            "seed, not the task's; B - A is then a selectivity (score - control score), and "
            "McNemar, which pairs right and wrong answers on one set of labels, is skipped")
    elif got_a.sample.metric == "accuracy":
        common = sorted(set(got_a.seeds) & set(got_b.seeds))
        gold = got_a.sample.gold
        for s in common:
            pa = got_a.sample.predicted[got_a.seeds.index(s)]
            pb = got_b.sample.predicted[got_b.seeds.index(s)]
            only_a, only_b, p = mcnemar_exact(pa == gold, pb == gold)
            out.mcnemar.append((s, only_a, only_b, p))
        if not common:
            out.notes.append("McNemar: skipped (no seed on both sides to pair predictions)")
    return out


def _interval(samples: Samples, row: Row, task: str, got: RowSample, resamples: int,
              level: float, seed: int) -> Interval:
    """A side's interval: the one its results line recorded (one seed, same settings and
    metric), else resampled from its predictions."""
    if got.sample.metric == samples.cells[(row, task)][0].record.metric:
        recorded = samples.recorded_interval(row, task, resamples, level, seed)
        if recorded is not None:
            return recorded
    return bootstrap_ci(got.sample, resamples=resamples, level=level, seed=seed)


__all__ = ["Comparison", "SELECTOR_KEYS", "compare_cells", "parse_selector"]
