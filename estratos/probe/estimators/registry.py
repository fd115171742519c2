"""The probe estimators' base class and their registry (name -> class).

Why a registry: ``--classifier`` choices, the slurm checks, the grid's cost estimates and
:func:`estratos.probe.cells.evaluate_cells` all need "which estimators exist and what do they
cost", and one list answers them all. An estimator class declares
its ``name``, its ``role`` (``"classifier"``: trained by classification protocols and chosen
with ``--classifier``; ``"regressor"``: trained by the relatedness protocol) and its cost model
(:meth:`RecordedEstimator.cost_per_example`), and registers itself with
:func:`register_estimator`; everything else asks the registry. The built-in estimators are
registered by :mod:`estratos.probe.estimators.classifiers`, which re-exports these functions: import
them from there to see the built-ins (this module never imports its estimators).

Why our own parameter methods rather than scikit-learn's ``BaseEstimator``: this module and
the estimator classes are imported by the CLI to list and check ``--classifier``, and
``sklearn.base`` pulls in scipy.stats (seconds). ``get_params``/``set_params`` follow
scikit-learn's contract (every hyper-parameter a constructor argument stored under its own
name), so ``sklearn.base.clone`` and ``set_params`` work on them as on any estimator.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

from estratos.registry import Registry, unknown_name
from estratos.vocab import FEATURES, SEED_FREE_OPTIMIZERS, Role

#: roles an estimator can play (see the module docstring)
ROLES: Tuple[Role, ...] = tuple(Role)
#: ``--classifier`` when none is given
DEFAULT_CLASSIFIER = "senteval"

#: every registered estimator class, in registration order
_REGISTRY: Registry[Type["RecordedEstimator"]] = Registry("estimator")
E = TypeVar("E", bound=Type["RecordedEstimator"])


class RecordedEstimator:
    """An estimator whose hyper-parameters are its constructor arguments (scikit-learn's
    contract: ``get_params``/``set_params``/``sklearn.base.clone``), plus :meth:`record`, the
    ``classifier`` object of a result record, and a cost model for planning.

    Subclasses set ``name``, ``role``, ``_recorded`` (parameters results record, in order) and
    ``_facts`` (what the method fixes but results record, e.g. ``optim: "lbfgs"``).
    """

    name = ""
    role: Role = Role.CLASSIFIER
    #: one line for ``--help`` and error messages
    summary = ""
    _recorded: Tuple[str, ...] = ()
    _facts: Mapping[str, Any] = {}
    #: the task overrides (``spec.classifier`` keys) this estimator takes; None: every one it
    #: has a parameter for (the surface baselines keep their own L2 grid and take ``kfold``
    #: only)
    task_overrides: Optional[Tuple[str, ...]] = None
    #: whether the relatedness protocol trains its regressor on this estimator's features;
    #: False: it scores their untrained cosine (the surface baselines)
    trains_regressor = True
    #: whether a fit depends on nothing but its data and parameters (the seed changes
    #: nothing): on a protocol whose data do not depend on the seed either
    #: (``Protocol.seeds_share_data``), every seed trains the same model. Derived, never
    #: set: the ``optim`` the class records as a fact (``_facts``) is one of
    #: :data:`estratos.vocab.SEED_FREE_OPTIMIZERS`, the rule a report applies to a results
    #: line (:func:`estratos.results.record.seed_free_fit`), so the two cannot disagree
    deterministic = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "deterministic" in vars(cls):
            raise TypeError(f"{cls.__name__}: 'deterministic' follows from the optim it "
                            "records (_facts['optim'] in estratos.vocab.SEED_FREE_OPTIMIZERS); "
                            "do not set it")
        cls.deterministic = cls._facts.get("optim") in SEED_FREE_OPTIMIZERS

    @classmethod
    def _param_names(cls) -> List[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def get_params(self, deep: bool = True) -> Dict[str, Any]:
        """Constructor parameters and their current values (scikit-learn's contract)."""
        out: Dict[str, Any] = {}
        for key in self._param_names():
            value = getattr(self, key)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{key}__{k}", v) for k, v in value.get_params().items())
            out[key] = value
        return out

    def set_params(self, **params: Any) -> "RecordedEstimator":
        """Set constructor parameters; an unknown name is a ``ValueError`` (as in
        scikit-learn), so a typo never passes silently."""
        valid = set(self._param_names())
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"invalid parameter {key!r} for estimator "
                                 f"{type(self).__name__}; valid parameters: {sorted(valid)}")
            setattr(self, key, value)
        return self

    def fresh(self, **params: Any) -> "RecordedEstimator":
        """A new unfitted estimator with the same parameters (and ``params`` set).

        What ``sklearn.base.clone(self).set_params(**params)`` gives for these estimators
        (their parameters are never changed in place), without importing scikit-learn: a
        second of start-up in every probe process that trains none of its models."""
        return type(self)(**{**self.get_params(deep=False), **params})

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params(deep=False).items())
        return f"{type(self).__name__}({args})"

    def record(self, name: Optional[str] = None) -> Dict[str, Any]:
        """``{"name": name or self.name, <recorded parameters>}`` (docs/contracts.md)."""
        params = self.get_params()
        out: Dict[str, Any] = {"name": name or self.name}
        for key in self._recorded:
            value = self._facts[key] if key in self._facts else params[key]
            out[key] = [float(v) for v in value] if key == "l2_grid" else value
        return out

    def untrained_record(self) -> Dict[str, Any]:
        """The ``classifier`` object of a cell whose protocol trains nothing with this
        estimator (cosine similarity): its :meth:`record` unless a subclass says otherwise."""
        return self.record()

    # ---- cost model (planning only: it orders and balances work, never changes a result) --
    def cost_per_example(self, n_features: int, n_classes: int) -> float:
        """Estimated cost (arbitrary units, roughly floating-point operations) of one training
        example seen by ONE fit of this estimator, all its passes included."""
        raise NotImplementedError(f"{type(self).__name__} has no cost model")

    def step_work(self, n_features: int, n_classes: int) -> Optional[Tuple[float, float]]:
        """``(optimizer steps, floating-point operations)`` per training example seen by ONE
        fit (all its passes), for estimators that train a minibatch program on any device;
        None for the others (they train on the CPU). Why apart from
        :meth:`cost_per_example`: a step's fixed cost differs by device far more than a
        flop's does, so placing work on a GPU or the CPU needs the two apart
        (:mod:`estratos.probe.grid.placement`)."""
        return None

    def fits_per_cell(self) -> Tuple[int, int]:
        """``(L2 values, folds)`` a protocol trains per cell with this estimator (what
        :meth:`estratos.protocols.Protocol.examples_trained` multiplies)."""
        return len(getattr(self, "l2_grid", (0.0,))), int(getattr(self, "kfold", 1))


def register_estimator(cls: E) -> E:
    """Class decorator: add an estimator class to the registry under its ``name``. A class
    in any module registers itself when that module is imported; nothing else names it."""
    if not cls.name or cls.role not in ROLES:
        raise ValueError(f"{cls.__name__}: an estimator needs a name and a role in {ROLES}")
    _REGISTRY.register(cls.name, cls)
    return cls


def estimator_names(role: str = Role.CLASSIFIER) -> Tuple[str, ...]:
    """Registered estimator names of a role, in registration order."""
    return tuple(name for name, cls in _REGISTRY.items() if cls.role == role)


def get_estimator(name: str, role: str = Role.CLASSIFIER,
                  option: str = "--classifier") -> Type[RecordedEstimator]:
    """The class registered as ``name`` for ``role``; an unknown name (or one of another
    role) is the registries' lookup error, an :class:`OptionError` naming ``option``, the
    closest names and the choices (:func:`estratos.registry.unknown_name`)."""
    cls = _REGISTRY.find(name)
    if cls is None or cls.role != role:
        raise unknown_name(str(role), name, estimator_names(role), option)
    return cls


def check_features(value: Any, option: str = "--features") -> str:
    """``value`` if it is a features mode (:data:`estratos.vocab.FEATURES`: how an
    estimator's ``features`` parameter reads its input, :mod:`.scaling`), else an
    :class:`OptionError` naming ``option``. Here, beside the estimators' base, because
    :class:`~estratos.probe.config.ProbeConfig` checks ``--features`` with it before numpy is
    imported."""
    if value not in FEATURES:
        raise unknown_name("features", value, FEATURES, option)
    return str(value)


__all__ = ["DEFAULT_CLASSIFIER", "ROLES", "RecordedEstimator", "check_features",
           "estimator_names", "get_estimator", "register_estimator"]
