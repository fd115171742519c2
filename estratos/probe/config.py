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

from estratos.errors import OptionError
from estratos.options import (
    PROBE_DEVICES,
    ShardSpec,
    check_device,
    default_jobs,
    parse_layers,
    parse_seeds,
    positive_int,
    resolve_shard,
)
from estratos.probe.estimators.registry import (
    DEFAULT_CLASSIFIER,
    RecordedEstimator,
    check_features,
)
from estratos.registry import unknown_name
from estratos.vocab import (
    CACHE_POOLINGS,
    CONTROL_KINDS,
    CONTROL_L2,
    CONTROL_L2_OWN,
    CONTROL_L2_TASK,
    DEFAULT_POOLING,
    DEFAULT_SEED,
    RAW_FEATURES,
    LayerSpec,
)

#: ``--classifier``: a registered name, or an estimator whose parameters start each task's
Classifier = Union[str, RecordedEstimator]


@dataclass(frozen=True)
class ProbeConfig:
    """Every choice of a probe run, checked (:meth:`build`).

    - ``layers``: ``"all"`` or layer specs (indices and ``"avg"``; checked against the
      cache by the runner); ``pooling``: the cached vectors (None: the cache's first);
      ``seeds``: one cell per seed.
    - ``classifier``: a registered estimator name or an estimator; ``features``: ``raw`` or
      ``standardized`` (:mod:`estratos.probe.estimators.scaling`), resolved from the
      classifier's own default when not given (``senteval``: raw, ``lbfgs``: standardized).
    - ``control``: None (ordinary cells), ``"control-task"`` or ``"label-shuffle"``
      (:mod:`estratos.probe.controls`); ``control_l2``: ``"own"`` (a control cell chooses
      its L2 on its own dev labels) or ``"task"`` (it reuses its task cell's, which must be
      in the results); ``mdl``: also record online code lengths.
    - ``sequential``: train every model alone; ``device``: ``auto``, ``cpu``, ``cuda[:N]``;
      ``jobs``: processes (None: :func:`estratos.options.default_jobs`); ``threads``: torch
      threads per process (None: 1); ``shard``: ``(I, N)`` or None; ``overwrite``: redo cells
      already stored.
    """

    layers: Union[str, Tuple[LayerSpec, ...]] = "all"
    pooling: Optional[str] = DEFAULT_POOLING
    seeds: Tuple[int, ...] = (DEFAULT_SEED,)
    classifier: Classifier = DEFAULT_CLASSIFIER
    features: str = RAW_FEATURES
    control: Optional[str] = None
    control_l2: str = CONTROL_L2_OWN
    mdl: bool = False
    sequential: bool = False
    device: str = "auto"
    jobs: int = 1
    threads: Optional[int] = None
    shard: Optional[Tuple[int, int]] = None
    overwrite: bool = False

    @classmethod
    def build(cls, *, layers: Union[str, Sequence[LayerSpec]] = "all",
              pooling: Optional[str] = DEFAULT_POOLING,
              seeds: Union[str, int, Sequence[int]] = (DEFAULT_SEED,),
              classifier: Optional[Classifier] = None, features: Optional[str] = None,
              control: Optional[str] = None, control_l2: Optional[str] = None,
              mdl: bool = False, sequential: bool = False,
              device: Optional[str] = "auto", jobs: Optional[int] = None,
              threads: Optional[int] = None,
              shard: ShardSpec = None, overwrite: bool = False) -> "ProbeConfig":
        """Check every option (an :class:`OptionError` names the first bad one) and return
        the configuration. Needs neither torch nor the cache."""
        seeds_t = parse_seeds(seeds)
        jobs_n = (default_jobs(device) if jobs is None else
                  int(positive_int("--jobs", jobs) or 1))
        threads_n = positive_int("--threads", threads, allow_none=True)
        parse_layers(layers)  # syntax (indices are checked against the cache by the runner)
        if pooling is not None and pooling not in CACHE_POOLINGS:
            raise OptionError(f"--pooling: {pooling!r} is not one of "
                              f"{', '.join(CACHE_POOLINGS)}")
        if features is not None:
            check_features(features)
        if control is not None and control not in CONTROL_KINDS:
            raise unknown_name("control", control, CONTROL_KINDS, "--control")
        control_l2 = control_l2 or CONTROL_L2_OWN
        if control_l2 not in CONTROL_L2:
            raise OptionError(f"--control-l2: {control_l2!r} is not one of "
                              f"{', '.join(CONTROL_L2)}")
        if control_l2 == CONTROL_L2_TASK and control is None:
            raise OptionError("--control-l2 task: only with --control (it fixes a control "
                              "cell's L2 to its task cell's)")
        device_t = check_device(device, kinds=PROBE_DEVICES)
        shard_t = resolve_shard(shard)
        # the estimator registry imports numpy: after the checks that need none
        from estratos.probe.estimators.classifiers import get_estimator

        if classifier is None:
            classifier = DEFAULT_CLASSIFIER
        estimator = get_estimator(classifier) if isinstance(classifier, str) else classifier
        if features is None:
            features = _default_features(estimator)
        if mdl and not hasattr(estimator, "fit_subsets"):
            raise OptionError(f"--mdl: the {estimator.name} classifier cannot train MDL's "
                              "block models; use --classifier senteval")
        return cls(layers=layers if isinstance(layers, str) else tuple(layers),
                   pooling=pooling, seeds=seeds_t, classifier=classifier, features=features,
                   control=control, control_l2=control_l2, mdl=bool(mdl),
                   sequential=bool(sequential),
                   device=device_t, jobs=jobs_n, threads=threads_n, shard=shard_t,
                   overwrite=bool(overwrite))

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
        return dataclasses.replace(self, **changes)

    def to_argv(self) -> List[str]:
        """The ``estratos probe`` options that select this configuration's cells and how
        they are computed (``--layers`` ... ``--device``), as command-line words; what only
        says how a run is spread (``--jobs``, ``--threads``, ``--shard``) or whether it
        redoes cells (``--overwrite``, ``--sequential``) is left to the command that runs it.
        The one writer of these words (SLURM job scripts use it): parsed back by
        :meth:`build`, they give the same configuration."""
        layers = self.layers if isinstance(self.layers, str) else ",".join(
            str(layer) for layer in self.layers)
        words = ["--layers", layers]
        if self.pooling is not None:
            words += ["--pooling", self.pooling]
        words += ["--seeds", ",".join(str(s) for s in self.seeds),
                  "--classifier", self.classifier_name, "--features", self.features]
        if self.control is not None:
            words += ["--control", self.control]
        if self.control_l2 != CONTROL_L2_OWN:
            words += ["--control-l2", self.control_l2]
        if self.mdl:
            words.append("--mdl")
        return words + ["--device", self.device]


def _default_features(estimator: Any) -> str:
    """The features mode an estimator (class or instance) reads when none is asked for: its
    ``features`` (a registered class's default: every parameter has one), raw when it has
    none."""
    instance = estimator() if isinstance(estimator, type) else estimator
    return str(getattr(instance, "features", RAW_FEATURES))


__all__ = ["Classifier", "ProbeConfig"]
