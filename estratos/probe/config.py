"""A probe run's configuration: one frozen, typed object built once by the option checks.

Why one object: a probe run is configured by a dozen choices (which layers and seeds, the
classifier and how it reads features, controls, MDL, where and how parallel it runs).
:meth:`ProbeConfig.build` checks every one of them without torch or the cache (so a mistake
is reported at once, naming its option) and everything below it (the runner, each worker's
:class:`~estratos.probe.grid.units.GridContext`, the cell pipeline) reads the same object instead
of re-checking loose arguments. Light imports only (no numpy until the syntax checks have
passed): the CLI builds it before torch loads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

from estratos.clitypes import integer
from estratos.devices import PROBE_DEVICES, check_device, default_jobs, device_help
from estratos.options import (
    AUTO_SHARD,
    parse_baselines,
    parse_erase,
    parse_given,
    parse_layers,
    parse_seeds,
    positive,
    resolve_shard,
)
from estratos.optiontable import OptionPair, Role, check_fields, flatten, option, reject, to_options
from estratos.probe.estimators.registry import (
    DEFAULT_CLASSIFIER,
    RecordedEstimator,
    check_features,
)
from estratos.vocab import (
    ALL_BASELINES,
    ALL_LAYERS,
    CACHE_POOLINGS,
    CONTROL_KINDS,
    CONTROL_L2,
    CONTROL_L2_OWN,
    CONTROL_L2_TASK,
    DEFAULT_BASELINE,
    DEFAULT_POOLING,
    DEFAULT_SEED,
    FEATURES,
    RAW_FEATURES,
    SURFACE_BASELINES,
    LayerSpec,
)

#: ``--classifier``: a registered name, or an estimator whose parameters start each task's
Classifier = Union[str, RecordedEstimator]


def _layers(value: Union[str, Sequence[LayerSpec]]) -> Union[str, Tuple[LayerSpec, ...]]:
    parse_layers(value)  # syntax (indices are checked against the cache by the runner)
    return value if isinstance(value, str) else tuple(value)


def _layers_text(value: Union[str, Sequence[LayerSpec]]) -> str:
    return value if isinstance(value, str) else ",".join(str(layer) for layer in value)


def _seeds_text(value: Sequence[int]) -> str:
    return ",".join(str(seed) for seed in value)


def _names_text(value: Sequence[str]) -> str:
    return ",".join(value)


def _classifier_text(value: Classifier) -> str:
    return value if isinstance(value, str) else value.name


def _probe_device(value: str) -> str:
    return check_device(value, kinds=PROBE_DEVICES)


def _one_pooling() -> Any:
    from estratos.clitypes import one_of

    return one_of(CACHE_POOLINGS, one_per_run=(
        "probe takes one pooling per run; run it once with --pooling cls and once with "
        "--pooling mean (same --out: the cells of both go in one results file)"))


def _classifier_names() -> Sequence[str]:
    from estratos.probe.estimators.classifiers import estimator_names

    return estimator_names("classifier")


def _classifier_choice() -> Any:
    from estratos.clitypes import lazy_choice

    return lazy_choice(_classifier_names)


def grid_shard_option() -> Any:
    """``--shard``: the share of a grid one run computes (probe and baseline alike)."""
    return option(None, "--shard", "Run shard I (0-based) of N of the grid, written to "
                  "RESULTS.shard-I-of-N.jsonl (auto: the SLURM array variables if set).",
                  role=Role.PLACEMENT, check=resolve_shard, metavar="I/N",
                  cli_default=AUTO_SHARD)


def overwrite_option() -> Any:
    """``--overwrite``: redo the cells a results file holds (probe and baseline alike)."""
    return option(False, "--overwrite", "Redo cells already in --out.", role=Role.PLACEMENT,
                  is_flag=True)


@dataclass(frozen=True)
class ProbeConfig:
    """Every choice of a probe run, checked (:meth:`build`); each field is one option of
    ``estratos probe`` (and of ``estratos slurm``), declared here once
    (:mod:`estratos.optiontable`): its flag, check, help and role.

    What names a cell (:attr:`~estratos.optiontable.Role.IDENTITY`): ``layers`` (``"all"``
    or layer specs, checked against the cache by the runner), ``pooling`` (None: the
    cache's first), ``seeds``, ``classifier`` (a registered name or an estimator),
    ``features`` (``raw`` or ``standardized``; None resolves to the classifier's own),
    ``control`` and ``control_l2`` (:mod:`estratos.probe.controls`), ``given``
    (conditional probing, :mod:`estratos.probe.conditional`), ``erase`` (concept erasure,
    :mod:`estratos.probe.erasure`), ``mdl``. How the same
    numbers are computed (``EXECUTION``): ``sequential``, ``device``. How one run is placed
    (``PLACEMENT``): ``jobs`` (None: :func:`estratos.devices.default_jobs`), ``threads``,
    ``shard``, ``overwrite``, ``expect_model`` (refuse a cache of another model).
    """

    layers: Union[str, Tuple[LayerSpec, ...]] = option(
        ALL_LAYERS, "--layers", "all, or hidden-state indices and avg, comma-separated "
        "(e.g. 0,3,6,avg).", check=_layers, text=_layers_text, always=True)
    pooling: Optional[str] = option(
        DEFAULT_POOLING, "--pooling", "Cached vectors to probe; one pooling per run (run again "
        "with the same --out for the other).", choices=CACHE_POOLINGS,
        click_type=_one_pooling, default_help="the cache's first: cls for encoders, last for "
        "decoder-only models")
    seeds: Tuple[int, ...] = option(
        (DEFAULT_SEED,), "--seeds", "Comma-separated seeds.", check=parse_seeds,
        text=_seeds_text, always=True)
    classifier: Classifier = option(
        DEFAULT_CLASSIFIER, "--classifier", "The probe: senteval (SentEval's, faithful to "
        "published numbers) or another registered estimator (lbfgs: fast exploration).",
        text=_classifier_text, click_type=_classifier_choice, always=True)
    features: Optional[str] = option(
        None, "--features", "How the probe reads the cached vectors: raw (SentEval's "
        "protocol, paper parity) or standardized with the training data's mean and std "
        "(both readings live in one results file).", choices=FEATURES, always=True,
        check=check_features, default_help="the classifier's own: raw for senteval, "
        "standardized for lbfgs")
    control: Optional[str] = option(
        None, "--control", "Control cells beside the ordinary ones: control-task (labels a "
        "fixed random function of each example's words, scored on them: selectivity = "
        "score - control; Hewitt & Liang 2019) or label-shuffle (shuffled training labels, "
        "tested on the true ones: a majority-rate floor).", choices=CONTROL_KINDS)
    control_l2: str = option(
        CONTROL_L2_OWN, "--control-l2", "With --control: own (a control cell chooses its L2 "
        "on its own dev labels) or task (it reuses the L2 its task cell chose, which must be "
        "in --out; Hewitt & Liang fix the hyper-parameters across the pair).",
        choices=CONTROL_L2)
    given: Optional[str] = option(
        None, "--given", "Conditional probing (Hewitt et al. 2021): also train on B alone and "
        "on [B; layer], and record what the layer adds over B in bits, H(Y|B) - H(Y|B,R). B: "
        "a hidden-state index (0: the embeddings), avg, prev (the stored state below each "
        "probed one) or a surface baseline (e.g. length-tokens). Classification tasks only.",
        check=parse_given, metavar="B")
    erase: Optional[str] = option(
        None, "--erase", "Erase a concept from the features with LEACE (Belrose et al. 2023; "
        "fitted on the train split only) before probing: length (token-count bins), words "
        "(word-count bins), labels (the task's own: the sanity check) or random:RANK (a "
        "random subspace of that rank: the control). Classification tasks only.",
        check=parse_erase, metavar="CONCEPT")
    mdl: bool = option(
        False, "--mdl", "Also record each classification cell's online code length, its "
        "compression against the uniform code and against a code of the labels alone "
        "(Voita & Titov 2020).", is_flag=True)
    sequential: bool = option(
        False, "--sequential", "Train one cell at a time (parity checks, timing).",
        role=Role.EXECUTION, is_flag=True)
    device: str = option(
        "auto", "--device", f"Where the probes train: {device_help(PROBE_DEVICES)} (auto: a "
        "GPU when there is one, else cpu).", role=Role.EXECUTION, check=_probe_device,
        always=True)
    jobs: Optional[int] = option(
        None, "--jobs", "Processes kept busy with work units (task x layer specs x seeds), "
        "longest first.", role=Role.PLACEMENT, check=positive("--jobs"), click_type=integer,
        default_help="1; with --device auto on a machine with a GPU, every core: the GPU and "
        "the cores train at once")
    threads: Optional[int] = option(
        None, "--threads", "Torch threads per process [default: 1; use --jobs for more "
        "cores].", role=Role.PLACEMENT, check=positive("--threads"), click_type=integer)
    shard: Optional[Tuple[int, int]] = grid_shard_option()
    overwrite: bool = overwrite_option()
    expect_model: Optional[str] = option(
        None, "--expect-model", "Fail unless the cache was made with this model.",
        role=Role.PLACEMENT)

    @classmethod
    def build(cls, **given: Any) -> "ProbeConfig":
        """Check every option given by field name (an :class:`OptionError` names the first
        bad one; None or an absent key: the default) and return the configuration. Needs
        neither torch nor the cache."""
        values = check_fields(cls, given)
        for name, flag in (("given", "--given"), ("erase", "--erase")):
            if values[name] is not None and values["control"] is not None:
                raise reject(flag, f"{values[name]}: not with --control (a control cell's "
                             "labels are another task's; run the control without it)")
        if values["given"] is not None and values["erase"] is not None:
            raise reject("--given", "not with --erase: run them as two probe commands "
                         "(same --out)")
        if values["control_l2"] == CONTROL_L2_TASK and values["control"] is None:
            raise reject("--control-l2", "task: only with --control (it fixes a control "
                         "cell's L2 to its task cell's)")
        if values["jobs"] is None:
            values["jobs"] = default_jobs(values["device"])
        # the estimator registry imports numpy: after the checks that need none
        from estratos.probe.estimators.classifiers import get_estimator

        classifier = values["classifier"]
        estimator = get_estimator(classifier) if isinstance(classifier, str) else classifier
        if values["features"] is None:
            values["features"] = _default_features(estimator)
        if values["mdl"] and not hasattr(estimator, "fit_subsets"):
            raise reject("--mdl", f"the {estimator.name} classifier cannot train MDL's block "
                         "models; use --classifier senteval")
        return cls(**values)

    @property
    def control_identity(self) -> Optional[str]:
        """The control part of this run's cell identities
        (:func:`estratos.results.record.control_identity`)."""
        from estratos.results.record import control_identity

        return control_identity(self.control, self.control_l2)

    @property
    def classifier_name(self) -> str:
        """The classifier's registered name (what results record and cell keys hold)."""
        return self.classifier if isinstance(self.classifier, str) else self.classifier.name

    def replace(self, **changes: Any) -> "ProbeConfig":
        """A copy with ``changes`` (field values, not checked again)."""
        return dataclasses.replace(self, **changes)

    def to_options(self) -> List[OptionPair]:
        """The ``estratos probe`` options that select this configuration's cells and how
        they are computed, as ``(flag, value)`` pairs (:func:`estratos.optiontable.to_options`:
        what names a cell always, the rest when not the default); how one run is placed
        (``--jobs``, ``--threads``, ``--shard``, ``--overwrite``, ``--expect-model``) is left to
        the command that runs it. Parsed back by :meth:`build`, they give the same
        configuration."""
        return to_options(self)

    def to_argv(self) -> List[str]:
        """:meth:`to_options` as command-line words."""
        return flatten(self.to_options())


@dataclass(frozen=True)
class BaselineConfig:
    """Every choice of an ``estratos baseline`` run, checked (:meth:`build`), each field one
    option declared once (:mod:`estratos.optiontable`): which surface baselines
    (:data:`~estratos.vocab.SURFACE_BASELINES`) and seeds name the cells; ``jobs``,
    ``shard`` and ``overwrite`` place the run."""

    baselines: Tuple[str, ...] = option(
        (DEFAULT_BASELINE,), "--baseline", f"Which baselines: "
        f"{', '.join(SURFACE_BASELINES)}, or {ALL_BASELINES}.", check=parse_baselines,
        text=_names_text, metavar="NAME[,NAME...]", always=True)
    seeds: Tuple[int, ...] = option(
        (DEFAULT_SEED,), "--seeds", "Comma-separated seeds (folds and held-out parts).",
        check=parse_seeds, text=_seeds_text, always=True)
    jobs: int = option(
        1, "--jobs", "Processes kept busy with work units (task x baselines x seeds), "
        "longest first.", role=Role.PLACEMENT, check=positive("--jobs"), click_type=integer)
    shard: Optional[Tuple[int, int]] = grid_shard_option()
    overwrite: bool = overwrite_option()

    @classmethod
    def build(cls, **given: Any) -> "BaselineConfig":
        """Check every option given by field name (an :class:`OptionError` names the first
        bad one) and return the configuration; imports neither numpy nor scikit-learn."""
        return cls(**check_fields(cls, given))

    def to_options(self) -> List[OptionPair]:
        """The ``estratos baseline`` options naming this configuration's cells."""
        return to_options(self)


def _default_features(estimator: Any) -> str:
    """The features mode an estimator (class or instance) reads when none is asked for: its
    ``features`` (a registered class's default: every parameter has one), raw when it has
    none."""
    instance = estimator() if isinstance(estimator, type) else estimator
    return str(getattr(instance, "features", RAW_FEATURES))


__all__ = ["BaselineConfig", "Classifier", "ProbeConfig"]
