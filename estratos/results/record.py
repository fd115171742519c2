"""One result cell: the record type every writer and reader of results files shares.

Why one type: probe, baseline and report all meet at the JSON-lines results file, so its
layout (field names and order, the schema version, how a score is rounded, what identifies a
cell) is written here once. Writers build a :class:`ResultRecord` and call
:meth:`~ResultRecord.to_json`; readers get one back from :meth:`~ResultRecord.from_json`,
which validates a decoded line and names the file and line of anything wrong.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from estratos.errors import ResultsFileError
from estratos.registry import unknown_message
from estratos.vocab import (
    CONTROL_L2_TASK,
    CONTROLS,
    FEATURES,
    LABEL_SHUFFLE,
    METRIC_INFO,
    RAW_FEATURES,
    SCORE_DECIMALS,
    SEED_FREE_OPTIMIZERS,
)

#: the results schema version this estratos writes (docs/contracts.md); older lines are read
#: through :func:`migrate` (version 1: no ``features``, label-shuffle controls called
#: ``permuted-labels``, one-class marks without their share)
SCHEMA_VERSION = 2
#: the versions this estratos reads (older ones migrated on reading; one file may hold
#: lines of several: a resumed run appends current lines to an older file)
READABLE_SCHEMAS: Tuple[int, ...] = (1, SCHEMA_VERSION)
#: what produced a record: a probe on cached vectors, or one of the surface baselines
#: (:data:`estratos.vocab.SURFACE_BASELINES`)
KINDS = ("probe", "baseline")

Layer = Union[int, str, None]
#: the tag of a prompted cell's last part in a key's JSON form (``["prompt", TEMPLATE]``)
PROMPT_TAG = "prompt"
#: the tags of a conditional and of an erased cell's parts in a key's JSON form
#: (``["given", B]``, ``["erase", CONCEPT]``)
GIVEN_TAG = "given"
ERASE_TAG = "erase"
#: the tagged parts a key's JSON form may end with, in the order it writes them
_TAGS = (PROMPT_TAG, GIVEN_TAG, ERASE_TAG)
#: how many parts every key's JSON form starts with (task .. revision)
_BASE_PARTS = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class CellKey:
    """The identity of a cell: what resume, sharding, de-duplication and the predictions
    store compare. Built by field name only (``CellKey(task=..., layer=..., ...)``), by
    :attr:`ResultRecord.key` and by writers that skip done cells before building a record;
    hashable, equal field by field.

    ``classifier``: its name (a baseline's: the baseline's); ``features``: how the probe
    read them (None: no probe features, the baseline); ``control``: the control part
    (:func:`control_identity`; None: an ordinary cell); ``prompt``: the template the
    cache's sentences were encoded in (None: the sentence alone); ``given``: what a
    conditional cell's probe was also given (``probe --given``: a layer spec, ``prev`` or a
    surface baseline; None: nothing); ``erase``: the concept erased from its features
    (``probe --erase``; None: nothing).

    Its one JSON form (:meth:`to_json`, the ``key`` attribute of a predictions file and the
    text its cell id hashes) is the list ``[task, layer, pooling, seed, classifier,
    features, model, revision]``, then the control part when set, then ``["prompt",
    TEMPLATE]``, ``["given", B]`` and ``["erase", CONCEPT]``, each when set."""

    task: str
    layer: Layer
    pooling: Optional[str]
    seed: int
    classifier: Optional[str]
    features: Optional[str] = None
    model: str
    revision: Optional[str]
    control: Optional[str] = None
    prompt: Optional[str] = None
    given: Optional[str] = None
    erase: Optional[str] = None

    @classmethod
    def selector_keys(cls) -> Tuple[str, ...]:
        """What ``compare --a/--b`` select on: every field but the task (``--task``), and
        what produced the cell (``kind``)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "task") + ("kind",)

    def as_dict(self) -> Dict[str, Any]:
        """The fields by name, in field order (what ``compare`` selects on)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_json(self) -> List[Any]:
        """The key's JSON form (see the class docstring)."""
        out: List[Any] = [self.task, self.layer, self.pooling, self.seed, self.classifier,
                          self.features, self.model, self.revision]
        if self.control is not None:
            out.append(self.control)
        for tag in _TAGS:
            value = getattr(self, tag)
            if value is not None:
                out.append([tag, value])
        return out

    @classmethod
    def from_json(cls, obj: Any) -> "CellKey":
        """The key whose :meth:`to_json` is ``obj`` (a decoded list); anything else is a
        ``ValueError``."""
        if not isinstance(obj, (list, tuple)) or len(obj) < _BASE_PARTS:
            raise ValueError(f"not a cell key: {obj!r}")
        task, layer, pooling, seed, classifier, features, model, revision = obj[:_BASE_PARTS]
        control: Optional[str] = None
        tagged: Dict[str, str] = {}
        rest = list(obj[_BASE_PARTS:])
        if rest and isinstance(rest[0], str):
            control = rest.pop(0)
        order = list(_TAGS)
        for part in rest:  # tagged parts, each at most once, in the order to_json writes
            if not (isinstance(part, (list, tuple)) and len(part) == 2
                    and part[0] in order and isinstance(part[1], str)):
                raise ValueError(f"not a cell key: {obj!r}")
            tagged[part[0]] = part[1]
            del order[:order.index(part[0]) + 1]
        return cls(task=task, layer=layer, pooling=pooling, seed=seed, classifier=classifier,
                   features=features, model=model, revision=revision, control=control,
                   prompt=tagged.get(PROMPT_TAG), given=tagged.get(GIVEN_TAG),
                   erase=tagged.get(ERASE_TAG))


#: the JSON form of a key as it is in a predictions file: :meth:`CellKey.to_json`, or for a
#: line of schema version 1 the form its predictions were filed under then (:func:`migrate`)
KeyJson = Sequence[Any]


def primary_score(metric: str, test: Mapping[str, Any]) -> Optional[float]:
    """The primary test metric on the paper's scale (accuracy/F1 in %, correlations x100),
    rounded; None when undefined (e.g. a correlation of constant predictions), so reports
    show "undefined" instead of a fake 0."""
    value = test.get(metric)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    info = METRIC_INFO.find(metric)
    factor = 100.0 if info is None else info.raw_scale  # other metrics: correlations
    return round(factor * float(value), SCORE_DECIMALS)


def seed_free_fit(classifier: Any) -> bool:
    """Whether a record's ``classifier`` object says its fit draws no random numbers: its
    ``optim`` is one of :data:`estratos.vocab.SEED_FREE_OPTIMIZERS`. What a report reads to
    know that a cell's seeds could not differ (with
    :func:`estratos.protocols.seeds_cannot_differ`), from the record alone."""
    return isinstance(classifier, Mapping) and classifier.get("optim") in SEED_FREE_OPTIMIZERS


def classifier_name(classifier: Any) -> Optional[str]:
    """The name inside a record's ``classifier`` (an object, a bare name or null)."""
    if isinstance(classifier, Mapping):
        name = classifier.get("name")
        return None if name is None else str(name)
    return None if classifier is None else str(classifier)


#: the vector settings (``encoding``) a probe line's ``cache`` object has always recorded
_ENCODING_IN_CACHE = ("dtype", "max_length")
#: control kinds of schema version 1 -> their names now
_CONTROL_RENAMED = {"permuted-labels": LABEL_SHUFFLE}
#: the record field that holds the key an older line's predictions were filed under; set by
#: :func:`migrate` only, never read from nor written to a line
FILED_UNDER = "filed_under"


def migrate(obj: Dict[str, Any]) -> Dict[str, Any]:
    """A decoded results line of an older schema version as the current version reads it
    (a new dict; the one place that knows older layouts). Version 1: ``features`` from
    the classifier's record (``lbfgs`` recorded ``standardized`` there) or ``raw`` for a
    probe, none for a baseline; ``permuted-labels`` controls are ``label-shuffle``; a
    one-class mark meant every prediction (``share`` 1.0); its predictions were filed under
    the key it had then (no ``features``, the control kind as then named), kept as
    :data:`FILED_UNDER` (:attr:`ResultRecord.predictions_key`). A probe line of any version
    written before ``encoding`` existed gets the vector settings its ``cache`` object
    recorded (``dtype``, ``max_length``); the others are unknown and match any."""
    obj = {k: v for k, v in obj.items() if k != FILED_UNDER}
    if obj.get("schema") == 1:
        # version 1's key form: no ``features``, the control kind as then named
        filed = (obj.get("task"), obj.get("layer"), obj.get("pooling"), obj.get("seed"),
                 classifier_name(obj.get("classifier")), obj.get("model"), obj.get("revision"))
        control_part = control_kind(obj.get("control"))
        obj[FILED_UNDER] = filed if control_part is None else filed + (control_part,)
        classifier = obj.get("classifier")
        if obj.get("kind") == "probe":
            named = classifier.get("features") if isinstance(classifier, Mapping) else None
            obj["features"] = named if named in FEATURES else RAW_FEATURES
        control = obj.get("control")
        if isinstance(control, Mapping) and control.get("kind") in _CONTROL_RENAMED:
            obj["control"] = {**control, "kind": _CONTROL_RENAMED[control["kind"]]}
        one = obj.get("degenerate")
        if isinstance(one, Mapping) and "share" not in one:
            obj["degenerate"] = {**one, "share": 1.0}
    cache = obj.get("cache")
    if obj.get("kind") == "probe" and "encoding" not in obj and isinstance(cache, Mapping):
        # written before ``encoding``: the settings its ``cache`` object recorded
        obj["encoding"] = {name: cache[name] for name in _ENCODING_IN_CACHE
                           if cache.get(name) is not None}
    return obj


def control_identity(kind: Optional[str], l2: Optional[str] = None) -> Optional[str]:
    """What a control cell's identity holds of its control: its kind, with ``/task-l2``
    when it reused its task cell's L2 (``probe --control-l2 task``), so that the two
    readings of one control are two cells (None: an ordinary cell)."""
    if kind is None:
        return None
    return f"{kind}/task-l2" if l2 == CONTROL_L2_TASK else str(kind)


def control_kind(control: Any) -> Optional[str]:
    """The control part of a record's identity (:func:`control_identity` of its ``control``
    object; None: an ordinary cell)."""
    if isinstance(control, Mapping):
        kind = control.get("kind")
        return control_identity(None if kind is None else str(kind), control.get("l2"))
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResultRecord:
    """One (task, layer spec, pooling, seed) cell of one system, as written to a results file.

    Field order is the JSON order. ``layer`` is a hidden-state index, ``"avg"``, or None for
    baselines; ``score`` is :func:`primary_score` of ``test`` (None when undefined).
    ``device`` is where the probe ran (None when not recorded). ``chance`` (classification
    tasks; None for correlations and older results): ``{"n_classes": K, "majority": %}``,
    the label count and the majority-class rate of the evaluated examples, what a report
    draws as the floor a probe must beat. ``ci`` is the bootstrap interval of ``score`` over
    test examples (:mod:`estratos.results.predictions`; None when the cell has no stored
    predictions). ``random_init`` is the seed of a control model's random weights (``encode
    --random-init``; its ``revision`` is then ``random-init:SEED``), None for trained weights.
    ``prompt`` is the template the cache's sentences were encoded in (``encode --prompt`` /
    ``--chat-template``; ``{}`` is the sentence), None for the sentence alone; it is part of
    :attr:`key`, so a model's prompted and plain cells live in one file.

    ``features`` is how the probe read the cached vectors (``raw`` or ``standardized``,
    :mod:`estratos.probe.estimators.scaling`; None for a baseline, whose features are its
    own); it is part of :attr:`key`, so both readings of a cell live in one file.

    Optional fields (left out of the JSON when unset): ``control`` marks a control cell,
    ``{"kind": KIND, "seed": S}``: ``control-task`` (trained and scored on a control task's
    labels drawn from seed S, :mod:`estratos.probe.controls`) or ``label-shuffle`` (trained
    on training and dev labels shuffled with seed S, tested on the true labels); it is part
    of :attr:`key`, so a control cell and the ordinary cell of the same (task, layer,
    seed...) coexist in one file. ``given`` (``probe --given``) names what a conditional
    cell's probe was given beside the layer, part of :attr:`key`; its ``conditional``
    holds what the layer adds over it in bits (Hewitt et al. 2021,
    :func:`estratos.protocols.information.conditional`): ``{"given_layer",
    "given_cross_entropy": H(Y|B), "cross_entropy": H(Y|B,R), "gain": H(Y|B) - H(Y|B,R),
    "given_test", "given_l2"}``, where ``test`` and ``information`` are those of the probe on
    [B; R]. ``erase`` (``probe --erase``) names the concept erased from the features with
    LEACE before probing, part of :attr:`key`; its ``erasure`` says how
    (:mod:`estratos.probe.erasure`). ``mdl`` is the online code of the cell's labels
    (:mod:`estratos.probe.mdl`): ``{"online_bits", "uniform_bits", "compression",
    "floor_bits", "floor_compression", "blocks", "block_bits", "order_seed"}``.
    ``information`` (classification cells) is the usable information in bits
    (:mod:`estratos.protocols.information`): ``{"cross_entropy": H(Y|X), "prior_cross_entropy":
    H(Y|0), "v_information": H(Y|0) - H(Y|X)}``, the probe's held-out cross-entropy on the
    scored examples, that of the training labels' class prior, and their difference (Xu et
    al. 2020; Pimentel et al. 2020), negative when the probe does worse than the prior.
    ``degenerate`` is ``{"class": LABEL, "share": S}`` when a share S of at least
    :data:`estratos.vocab.ONE_CLASS_SHARE` of the test predictions is that one class (the
    probe barely left it), so reports show the cell as one-class instead of as a score like
    any other. ``capped`` is ``{"max_iter": N}`` when the model behind the test predictions
    stopped at its iteration cap N instead of converging (``lbfgs``), left out otherwise.
    ``data_digest`` fingerprints the task's loaded examples the cell was computed on
    (:attr:`estratos.tasks.types.TaskData.digest`, like a dataset revision): resume, report
    and compare tell cells of other data apart with it (None: not recorded). ``encoding``
    (probe cells) holds the encode settings that made the vectors without being part of
    the identity (:data:`estratos.vocab.VECTOR_SETTINGS`: ``max_length``, ``dtype``,
    ``model_dtype``...; :func:`estratos.results.provenance.cell_encoding`), checked like
    ``data_digest``: resume refuses to skip a cell of other settings and report refuses to
    take one file's copy for another's (a setting absent on either side is not checked).
    """

    kind: str
    task: str
    suite: Optional[str] = None
    name: str
    group: str
    language: Optional[str] = None
    layer: Layer
    pooling: Optional[str] = None
    features: Optional[str] = None
    seed: int
    protocol: Optional[str] = None
    fallback: Optional[str] = None
    classifier: Any = None
    metric: str
    score: Optional[float]
    l2: Any = None
    dev: Optional[Mapping[str, Any]] = None
    test: Optional[Mapping[str, Any]] = None
    ci: Optional[Mapping[str, Any]] = None
    sizes: Optional[Mapping[str, int]] = None
    chance: Optional[Mapping[str, Any]] = None
    epochs: Any = None
    seconds: Optional[float] = None
    model: str
    revision: Optional[str] = None
    random_init: Optional[int] = None
    prompt: Optional[str] = None
    cache: Optional[Mapping[str, Any]] = None
    estratos_version: Optional[str] = None
    created: Optional[str] = None
    device: Optional[str] = None
    control: Optional[Mapping[str, Any]] = None
    given: Optional[str] = None
    conditional: Optional[Mapping[str, Any]] = None
    erase: Optional[str] = None
    erasure: Optional[Mapping[str, Any]] = None
    mdl: Optional[Mapping[str, Any]] = None
    information: Optional[Mapping[str, float]] = None
    degenerate: Optional[Mapping[str, Any]] = None
    capped: Optional[Mapping[str, Any]] = None
    data_digest: Optional[str] = None
    encoding: Optional[Mapping[str, Any]] = None
    schema: int = SCHEMA_VERSION
    #: the JSON form of the key an older line's predictions were filed under
    #: (:func:`migrate`; None: its :attr:`key`'s); never written to a line, not part of the
    #: record's value
    filed_under: Optional[Tuple[Any, ...]] = dataclasses.field(default=None, compare=False,
                                                                repr=False)

    # ------------------------------------------------------------------ identity
    @property
    def key(self) -> CellKey:
        """The identity of a cell: what resume, sharding and de-duplication compare."""
        return CellKey(task=self.task, layer=self.layer, pooling=self.pooling, seed=self.seed,
                       classifier=classifier_name(self.classifier), features=self.features,
                       model=self.model, revision=self.revision,
                       control=control_kind(self.control), prompt=self.prompt,
                       given=self.given, erase=self.erase)

    @property
    def identity(self) -> Dict[str, Any]:
        """The named parts of :attr:`key` (:meth:`CellKey.as_dict`), what tells two cells
        apart: ``compare`` offers each one as a selector and names the ones in which two
        matching cells differ."""
        return self.key.as_dict()

    @property
    def predictions_key(self) -> KeyJson:
        """The JSON form of the key this cell's predictions are filed under: its
        :attr:`key`'s (:meth:`CellKey.to_json`), or the form an older line's key had when
        its predictions were written (:attr:`filed_under`, from :func:`migrate`)."""
        return self.key.to_json() if self.filed_under is None else list(self.filed_under)

    @property
    def control_kind(self) -> Optional[str]:
        return control_kind(self.control)

    @property
    def classifier_name(self) -> Optional[str]:
        return classifier_name(self.classifier)

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> Dict[str, Any]:
        """The JSON object of one results line (``schema`` first; optional fields that are
        not set are left out)."""
        out: Dict[str, Any] = {"schema": self.schema}
        for f in dataclasses.fields(self):
            if f.name in ("schema", FILED_UNDER):
                continue
            value = getattr(self, f.name)
            if f.name in _OMITTED_WHEN_NONE and value is None:
                continue
            out[f.name] = _plain(value)
        return out

    @classmethod
    def from_json(cls, obj: Any, path: Optional[str] = None,
                  line: Optional[int] = None) -> "ResultRecord":
        """Validate a decoded results line; raises :class:`ResultsFileError` naming path:line."""
        if not isinstance(obj, dict):
            raise ResultsFileError("a results line must be a JSON object", path, line)
        if "schema" not in obj:
            raise ResultsFileError("missing field 'schema' (not an estratos results line?)",
                             path, line)
        obj = migrate(obj)
        for key, types in _REQUIRED.items():
            if key not in obj:
                raise ResultsFileError(f"missing field {key!r}", path, line)
            value = obj[key]
            if not isinstance(value, types) or isinstance(value, bool):
                raise ResultsFileError(f"field {key!r} must be {types[0].__name__}, got {value!r}",
                                 path, line)
        for key in _OPTIONAL_STR:
            if obj.get(key) is not None and not isinstance(obj[key], str):
                raise ResultsFileError(f"field {key!r} must be a string or null, got {obj[key]!r}",
                                 path, line)
        seed = obj.get("random_init")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ResultsFileError(f"field 'random_init' must be an integer seed or null, got "
                                   f"{seed!r}", path, line)
        if obj["kind"] not in KINDS:
            raise ResultsFileError(unknown_message("kind", obj["kind"], KINDS), path, line)
        if "layer" not in obj:
            raise ResultsFileError("missing field 'layer'", path, line)
        layer = obj["layer"]
        if not (layer is None or layer == "avg" or (isinstance(layer, int)
                                                     and not isinstance(layer, bool)
                                                     and layer >= 0)):
            raise ResultsFileError("field 'layer' must be a hidden-state index >= 0, \"avg\" or "
                             f"null, got {layer!r}", path, line)
        if obj["kind"] == "probe" and layer is None:
            raise ResultsFileError("a probe result needs a layer (only baselines have layer null)",
                             path, line)
        if "score" not in obj:
            raise ResultsFileError("missing field 'score'", path, line)
        score = obj["score"]
        if score is not None and not (isinstance(score, (int, float))
                                      and not isinstance(score, bool)):
            raise ResultsFileError(f"field 'score' must be a number or null, got {score!r}",
                             path, line)
        for key in ("test", "dev", "chance", "ci", "control", "mdl", "information",
                    "degenerate", "capped", "encoding", "conditional", "erasure"):
            if obj.get(key) is not None and not isinstance(obj[key], dict):
                raise ResultsFileError(f"field {key!r} must be an object or null", path, line)
        if obj.get("features") is not None and obj["features"] not in FEATURES:
            raise ResultsFileError("field 'features': " + unknown_message(
                "features", obj["features"], FEATURES), path, line)
        control = obj.get("control")
        if control is not None and control.get("kind") not in CONTROLS:
            raise ResultsFileError("field 'control': " + unknown_message(
                CONTROLS.what, control.get("kind"), CONTROLS.names()), path, line)
        mdl = obj.get("mdl")
        if mdl is not None:
            for key in ("online_bits", "uniform_bits", "compression"):
                value = mdl.get(key)
                if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                        and math.isfinite(value)):
                    raise ResultsFileError(f"field 'mdl': {key!r} must be a finite number, "
                                           f"got {value!r}", path, line)
        for part, keys in (("information", INFORMATION_FIELDS),
                           ("conditional", CONDITIONAL_FIELDS)):
            numbers = obj.get(part)
            for key in keys if numbers is not None else ():
                value = numbers.get(key)
                if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                        and math.isfinite(value)):
                    raise ResultsFileError(f"field {part!r}: {key!r} must be a finite "
                                           f"number, got {value!r}", path, line)
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in obj.items() if k in known}
        if score is not None and not math.isfinite(score):
            values["score"] = None
        return cls(**values)

    def replace(self, **changes: Any) -> "ResultRecord":
        return dataclasses.replace(self, **changes)


#: the numbers of a cell's ``information`` (bits), in the order results files write them
INFORMATION_FIELDS: Tuple[str, ...] = ("cross_entropy", "prior_cross_entropy", "v_information")
_REQUIRED: Mapping[str, Tuple[type, ...]] = {
    "kind": (str,), "task": (str,), "name": (str,), "group": (str,), "metric": (str,),
    "model": (str,), "seed": (int,),
}
_OPTIONAL_STR = ("suite", "language", "protocol", "fallback", "revision", "pooling", "device",
                 "prompt", "data_digest", "features", "given", "erase")
_OMITTED_WHEN_NONE = ("device", "chance", "ci", "random_init", "prompt", "control", "given",
                      "conditional", "erase", "erasure", "mdl", "information", "degenerate",
                      "capped", "data_digest", "encoding")
#: the numbers of a conditional cell's ``conditional`` (bits)
CONDITIONAL_FIELDS: Tuple[str, ...] = ("given_cross_entropy", "cross_entropy", "gain")


def _plain(value: Any) -> Any:
    """JSON-ready copies of mappings (read-only mapping proxies are not serialisable)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
