"""Evaluating the cells of one task: (feature groups x seeds) through the task's protocol.

Why one pipeline: the grid runner calls :func:`evaluate_cells` with a task, its cached
sentence vectors and the layer specs wanted; the surface baselines
(:mod:`estratos.probe.baseline`) call :func:`evaluate_groups` with their own sparse features
and estimators. Both then go through the same steps: the task's overrides on a new
estimator, the protocol object (:mod:`estratos.protocols`) deciding what is trained and
measured, the estimators (:mod:`estratos.probe.estimators.classifiers`) how, and
:func:`classifier_record` saying what a result records. Nothing here switches on protocol
names. Torch is imported only to place programs on a device (not by the baseline).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from estratos.devices import PROBE_DEVICES, resolve_device
from estratos.probe.conditional import GivenFeatures, add_given
from estratos.probe.config import Classifier, ProbeConfig
from estratos.probe.controls import DEV_PART, permuted, shuffled_labels_factory
from estratos.probe.erasure import Concept, ErasedFeatures, attach_erasure
from estratos.probe.estimators.registry import RecordedEstimator
from estratos.probe.estimators.settings import resolve_classifier, resolve_regressor
from estratos.probe.features import AVG, build_features, layer_matrix, slot_vectors
from estratos.probe.mdl import online_codes
from estratos.protocols import CellOutcome, Inputs, OneAtATime, get_protocol, positive_class
from estratos.tasks.types import TaskData
from estratos.vocab import (
    CONDITIONAL_L2_GRID,
    LABEL_SHUFFLE,
    SELECT_ACCURACY,
    SELECT_CROSS_ENTROPY,
    Role,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

log = logging.getLogger(__name__)

#: a position in the task's vectors ``(S, n_states_read, D)``, or "avg" (mean of all states)
StatePosition = Union[int, str]

#: device types on which the seeds of a protocol whose seeds share the data train as one
#: program (on the CPU they run one after the other: exact, and little to gain there)
FUSED_SEED_DEVICES = ("cuda",)
#: device types that ``--device auto`` uses together with the CPU cores, each task placed on
#: the faster (:mod:`estratos.probe.grid.placement`)
ACCELERATOR_DEVICES = ("cuda",)


def resolve_probe_device(text: Union[str, "torch.device", None]) -> "torch.device":
    """``--device`` for probes: :func:`estratos.devices.resolve_device` on the devices probes
    train on (:data:`~estratos.devices.PROBE_DEVICES`)."""
    device = resolve_device(text, kinds=PROBE_DEVICES)
    if device.type == "cuda":
        # cuBLAS is deterministic only with a fixed workspace (torch refuses otherwise under
        # deterministic algorithms); it must be set before the first CUDA call
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return device


#: ``on_seed(seed, outcomes, seconds)``: hears a seed's final outcomes (one per layer spec)
#: and the seconds they took (fused seeds: an equal share of their program's)
SeedSink = Callable[[int, List[CellOutcome], float], None]

def _classifier(task: TaskData, classifier: Classifier, **params: Any) -> RecordedEstimator:
    spec = task.spec
    return resolve_classifier(spec.classifier, classifier=classifier, task=spec.id,
                              n_classes=max(1, len(task.labels)), **params)


def classifier_record(task: TaskData, classifier: Classifier) -> Dict[str, Any]:
    """What a result's ``classifier`` field holds for ``task`` under ``--classifier`` (or
    the baseline's estimator): the ``record()`` (from ``get_params()``) of the estimator its
    protocol trains; protocols that train a regressor record it under the classifier's name;
    protocols that train nothing record the estimator's ``untrained_record()``. Raises
    :class:`OptionError` / :class:`TaskError` for an unknown classifier or a bad task
    override."""
    est = _classifier(task, classifier)
    trains = get_protocol(task.protocol).trains
    if trains == Role.REGRESSOR and est.trains_regressor:
        return resolve_regressor(task.spec.score_range).record(name=est.name)
    if trains != Role.CLASSIFIER:
        return est.untrained_record()
    return est.record()


def chance_levels(task: TaskData) -> Optional[Dict[str, Any]]:
    """``{"n_classes", "majority"}`` of the examples a classification protocol scores (the
    majority-class rate in %, what always answering the commonest label gets); None for
    correlation protocols. Reports draw it as the floor a probe must beat."""
    scored = get_protocol(task.protocol).scored_split
    split = task.splits.get(scored) if scored else None
    if split is None or len(split) == 0:
        return None
    counts = np.bincount(np.asarray(split.labels, dtype=np.int64), minlength=len(task.labels))
    return {"n_classes": len(task.labels),
            "majority": round(100.0 * float(counts.max()) / len(split), 2)}


def evaluate_cells(task: TaskData, vectors: np.ndarray, states: Sequence[StatePosition],
                   seeds: Sequence[int], config: ProbeConfig, *,
                   device: Union[str, "torch.device", None] = None,
                   on_seed: Optional[SeedSink] = None,
                   l2_grid: Optional[Sequence[float]] = None,
                   given: Optional[GivenFeatures] = None,
                   erase: Optional[Concept] = None) -> List[List[CellOutcome]]:
    """Train and evaluate the cells (layer spec x seed) of one task as the run's ``config``
    says (its classifier, features, control, MDL, sequential training); outer list: seeds,
    inner: ``states`` in order.

    ``vectors`` are the task's sentence vectors ``(len(task.sentences), n_read, D)``;
    ``states`` are positions along its second axis (or ``"avg"``, the mean of every state
    read). ``config.classifier``: a registered name (``--classifier``) or an estimator whose
    parameters the task's overrides start from; ``config.sequential`` trains every model
    alone (same numbers, for checks and timing); ``config.control`` ``label-shuffle``
    trains on shuffled labels (a control task arrives as a task of its own).

    ``device``: where the tensor programs run (:func:`resolve_probe_device`; None: the
    config's; the grid places each unit on a device of its own). On a GPU, the seeds of a
    protocol whose seeds share the data (``split``, ``relatedness``) train as one program
    (layer specs x L2 values x seeds); on the CPU they train one after the other, so a
    cell's numbers never depend on which other seeds ran (docs/probe.md, "Devices").
    ``on_seed`` and ``l2_grid``: see :func:`evaluate_groups`.

    ``given`` (``probe --given``): conditional cells (:mod:`estratos.probe.conditional`):
    the probes train on B alone first (each distinct B once, no MDL), then on [B; R] for each
    layer spec R, both choosing L2 by dev cross-entropy from
    :data:`~estratos.vocab.CONDITIONAL_L2_GRID`; the outcomes on [B; R] gain B's
    log-probabilities and the ``conditional`` record;
    each seed's cells are reported with the seconds of both.

    ``erase`` (``probe --erase``): the concept is erased from each layer spec's features
    (:mod:`estratos.probe.erasure`, fitted on the training split) before anything trains;
    each outcome gains its layer spec's ``erasure`` record.
    """
    spec = task.spec
    torch_device = resolve_probe_device(config.device if device is None else device)
    states = list(states)
    built: Dict[Tuple[str, str], Any] = {}

    def group_features(split: str) -> np.ndarray:
        key = ("features", split)
        if key not in built:
            built[key] = build_features(vectors, states, task.splits[split], spec.combiner)
        return built[key]

    def pairs(split: str) -> Tuple[np.ndarray, np.ndarray]:
        key = ("pairs", split)
        if key not in built:
            slots = task.splits[split].slots
            layers = [layer_matrix(vectors, s) for s in states]
            built[key] = tuple(np.stack([slot_vectors(m, refs) for m in layers])
                               for refs in slots[:2])
        return built[key]

    def run(features: Callable[[str], Any], n_groups: int, mdl: bool,
            sink: Optional[SeedSink], select: str = SELECT_ACCURACY,
            grid: Optional[Sequence[float]] = l2_grid) -> List[List[CellOutcome]]:
        return evaluate_groups(task, features, pairs, n_groups, seeds, config.classifier,
                               sequential=config.sequential, device=torch_device,
                               features=config.features,
                               shuffle_labels=config.control == LABEL_SHUFFLE, mdl=mdl,
                               on_seed=sink, l2_grid=grid, select=select)

    if erase is not None:
        erased = ErasedFeatures(task, erase, group_features)
        report_erased = on_seed or (lambda seed, outcomes, seconds: None)

        def with_erasure(seed: int, outcomes: List[CellOutcome], seconds: float) -> None:
            t0 = time.perf_counter()
            attach_erasure(outcomes, erased.describe())
            report_erased(seed, outcomes, seconds + time.perf_counter() - t0)

        return run(erased, len(states), config.mdl, with_erasure)
    if given is None:
        return run(group_features, len(states), config.mdl, on_seed)

    def given_features(split: str) -> np.ndarray:
        key = ("given", split)
        if key not in built:
            built[key] = np.asarray(given.features(split), dtype=np.float32)
        return built[key]

    def joint_features(split: str) -> np.ndarray:
        # [B; R] per layer spec; the B part is its own group's (a view per distinct B)
        b = given_features(split)[list(given.of_group)]
        return np.concatenate([b, group_features(split)], axis=2)

    took_alone: Dict[int, float] = {}

    def heard_alone(seed: int, outcomes: List[CellOutcome], seconds: float) -> None:
        took_alone[seed] = seconds

    # both probes choose L2 on dev cross-entropy from the conditional grid (vocab: why)
    alone = run(given_features, len(given.layers), False, heard_alone, SELECT_CROSS_ENTROPY,
                CONDITIONAL_L2_GRID)
    alone_of = {int(seed): outcomes for seed, outcomes in zip(seeds, alone)}
    report = on_seed or (lambda seed, outcomes, seconds: None)

    def with_given(seed: int, outcomes: List[CellOutcome], seconds: float) -> None:
        for outcome, g in zip(outcomes, given.of_group):
            add_given(outcome, alone_of[int(seed)][g], given.layers[g])
        report(seed, outcomes, seconds + took_alone.get(int(seed), 0.0))

    return run(joint_features, len(states), config.mdl, with_given, SELECT_CROSS_ENTROPY,
               CONDITIONAL_L2_GRID)


def evaluate_groups(task: TaskData, group_features: Callable[[str], Any],
                    pairs: Callable[[str], Tuple[Any, Any]], n_groups: int,
                    seeds: Sequence[int], classifier: Classifier, *, sequential: bool = False,
                    device: Optional["torch.device"] = None, features: Optional[str] = None,
                    shuffle_labels: bool = False, mdl: bool = False,
                    on_seed: Optional[SeedSink] = None,
                    l2_grid: Optional[Sequence[float]] = None,
                    select: str = SELECT_ACCURACY) -> List[List[CellOutcome]]:
    """The cells of one task over ``n_groups`` feature groups (outer list: seeds, inner:
    groups), whatever the features are: ``group_features(split)`` gives the G groups of a split's
    examples (a ``(G, n, F)`` stack or a list of G matrices, sparse ones included),
    ``pairs(split)`` the two slots' groups (similarity protocols). ``device``: a resolved
    torch device for estimators that take one (None: they run where they run, and torch is
    not imported). A relatedness task trains the regressor only if the estimator
    ``trains_regressor``; otherwise the protocol scores the untrained cosine.

    ``features``: how trained estimators read the features (``raw`` or ``standardized``,
    :mod:`estratos.probe.estimators.scaling`; None: the estimator's default). ``shuffle_labels``:
    every model trains on shuffled training and dev labels (the label-shuffle control,
    :mod:`estratos.probe.controls`; seeds then train one after the other, each with its
    own permutation). A control task is a task of its own
    (:func:`estratos.probe.controls.control_task`), evaluated like any other. ``mdl``: each
    classification outcome gets ``extra["mdl"]``, the online code of its training labels
    (:mod:`estratos.probe.mdl`). ``on_seed(seed, outcomes, seconds)`` hears each seed's
    final outcomes as soon as they are (seeds that train one after the other: each in turn;
    fused seeds: all at the end, each with an equal share of the time), so a caller can
    store them before the next seed trains. ``l2_grid``: the L2 values to choose from
    instead of the estimator's (after the task's overrides; one value fixes it:
    ``probe --control-l2 task``); estimators without an L2 grid ignore it. ``select``: what
    a protocol that chooses L2 on dev chooses it by (:class:`~estratos.protocols.Inputs`).
    """
    protocol = get_protocol(task.protocol)
    if not n_groups or not seeds:
        return [[] for _ in seeds]
    run = _TaskCells(task, protocol, group_features, pairs, classifier, sequential=sequential,
                     device=device, features=features, shuffle_labels=shuffle_labels,
                     l2_grid=l2_grid, select=select)
    report = on_seed or (lambda seed, outcomes, seconds: None)
    if run.trains is None:  # nothing trained: every seed gets the same numbers
        t0 = time.perf_counter()
        once = protocol.evaluate(run.inputs(seeds[0]))
        share = (time.perf_counter() - t0) / len(seeds)
        out = [list(once) for _ in seeds]
        for seed, outcomes in zip(seeds, out):
            report(int(seed), outcomes, share)
        return out
    seeds = [int(s) for s in seeds]

    def finish(seed: int, outcomes: List[CellOutcome], seconds: float) -> List[CellOutcome]:
        t0 = time.perf_counter()
        if mdl and run.trains == Role.CLASSIFIER:
            _add_online_codes(task, protocol, run.inputs(seed), run.clf, seed, outcomes,
                              shuffle_labels, device)
        report(seed, outcomes, seconds + time.perf_counter() - t0)
        return outcomes

    if run.fuses(seeds):
        t0 = time.perf_counter()
        together = protocol.evaluate(run.inputs(tuple(seeds)))  # seed-major groups
        share = (time.perf_counter() - t0) / len(seeds)
        return [finish(seed, together[i * n_groups:(i + 1) * n_groups], share)
                for i, seed in enumerate(seeds)]
    out = []
    for seed in seeds:
        t0 = time.perf_counter()
        outcomes = protocol.evaluate(run.inputs(seed))
        out.append(finish(seed, outcomes, time.perf_counter() - t0))
    return out


class _TaskCells:
    """What :func:`evaluate_groups` hands the protocol for one task: the estimator with the
    task's overrides and the run's feature reading and L2 grid, what the protocol trains
    (a classifier, a regressor, or nothing when the estimator trains no regressor for a
    relatedness task), and each seed's (or fused seeds') :class:`Inputs`."""

    def __init__(self, task: TaskData, protocol: Any, group_features: Callable[[str], Any],
                 pairs: Callable[[str], Tuple[Any, Any]], classifier: Classifier, *,
                 sequential: bool, device: Optional["torch.device"], features: Optional[str],
                 shuffle_labels: bool, l2_grid: Optional[Sequence[float]],
                 select: str = SELECT_ACCURACY) -> None:
        self.task, self.protocol = task, protocol
        self.select = select
        self.group_features, self.pairs = group_features, pairs
        self.sequential, self.device, self.shuffle_labels = sequential, device, shuffle_labels
        clf = _classifier(task, classifier)
        if features is not None and "features" in clf.get_params():  # not the baselines
            clf = clf.set_params(features=features)
        if l2_grid is not None and "l2_grid" in clf.get_params():
            clf = clf.set_params(l2_grid=[float(v) for v in l2_grid])
        self.clf = clf
        self.params = clf.get_params()
        # the relatedness regressor always reads features like the classifier (None: its
        # default)
        self.reading = {} if features is None else {"features": features}
        spec = task.spec
        self.positive = positive_class(spec.id, spec.metric, spec.extra_metrics, task.labels)
        trains = protocol.trains
        if trains == Role.REGRESSOR and not clf.trains_regressor:
            trains = None
        self.trains = trains
        self.label_dtype = np.float64 if protocol.scores else np.int64

    def labels(self, split: str) -> np.ndarray:
        return np.asarray(self.task.splits[split].labels, dtype=self.label_dtype)

    def fuses(self, seeds: Sequence[int]) -> bool:
        """Whether ``seeds`` train as one program: several seeds sharing the data, on a
        device that fuses them, with an estimator that runs there, not one at a time and
        not label-shuffled (each seed has its own labels then)."""
        return bool(self.protocol.seeds_share_data and not self.sequential and len(seeds) > 1
                    and not self.shuffle_labels and self.device is not None
                    and self.device.type in FUSED_SEED_DEVICES
                    and (self.trains == Role.REGRESSOR or "device" in self.params))

    def _factory(self, template: Any, seed: Union[int, Tuple[int, ...]]) -> Callable[[], Any]:
        def make() -> Any:
            return template.fresh()
        if self.shuffle_labels:
            if isinstance(seed, tuple):  # fusion is off for control cells: one seed each
                raise ValueError("a label-shuffle cell trains one seed at a time")
            make = shuffled_labels_factory(make, int(seed))
        return (lambda: OneAtATime(make)) if self.sequential else make

    def inputs(self, seed: Union[int, Tuple[int, ...]]) -> Inputs:
        on: Dict[str, Any] = {"seed": seed}
        if self.device is not None:
            on["device"] = self.device
        clf_on = {k: v for k, v in on.items() if k in self.params}  # lbfgs runs on the CPU
        spec, params = self.task.spec, self.params
        return Inputs(
            labels=self.labels, splits=tuple(self.task.splits), features=self.group_features,
            pairs=self.pairs,
            classifier=(self._factory(self.clf.fresh(**clf_on), seed)
                        if self.trains == Role.CLASSIFIER else None),
            regressor=(self._factory(resolve_regressor(spec.score_range, **on,
                                                       **self.reading), seed)
                       if self.trains == Role.REGRESSOR else None),
            seed=int(seed if isinstance(seed, int) else seed[0]),
            l2_grid=tuple(params["l2_grid"]), kfold=int(params["kfold"]),
            validation_split=float(params["validation_split"]), positive=self.positive,
            score_range=spec.score_range, select=self.select)


def _add_online_codes(task: TaskData, protocol: Any, inputs: Inputs, clf: Any, seed: int,
                      outcomes: List[CellOutcome], shuffle_labels: bool,
                      device: Optional["torch.device"]) -> None:
    """``extra["mdl"]`` of each outcome: the online code of the protocol's training labels
    (shuffled ones for a label-shuffle cell) with the cell's probe, its features and its
    chosen L2."""
    data = protocol.code_data(inputs)
    if data is None:
        return
    (X, y), (X_dev, y_dev) = data
    if shuffle_labels:  # the labels the cell's probe was trained on
        y, y_dev = permuted(y, seed), permuted(y_dev, seed, DEV_PART)
    template = clf.fresh()
    if device is not None and "device" in template.get_params():
        template = template.set_params(device=device)
    l2 = [o.l2 for o in outcomes]
    if any(value is None for value in l2):  # classification protocols always choose one
        raise ValueError("an online code needs the L2 each cell chose")
    codes = online_codes(template, (X, y), (X_dev, y_dev), [float(v) for v in l2 if v is not None],
                         seed, max(2, len(task.labels)))
    for outcome, code in zip(outcomes, codes):
        outcome.extra["mdl"] = code


__all__ = ["AVG", "Classifier", "StatePosition", "chance_levels", "classifier_record",
           "evaluate_cells", "evaluate_groups", "resolve_probe_device"]

