"""The shared vocabulary: names, defaults and formats several parts of estratos must agree on.

Why one module: a pooling name, the default seed or a metric's scale written in several
places drifts (a new pooling added to the encoder but not to the probe's choices, a seed
default changed in one command only). Everything here is plain data with no dependency
(standard library only, and :mod:`estratos.registry` for the tables looked up by name), so
any module may import it, the CLI included, without loading numpy or torch. Extend a name
here, and every command, check and help text follows.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Mapping, Optional, Tuple, Union

from estratos.registry import Registry

# ---- seeds -----------------------------------------------------------------------------------
#: the seed SentEval fixes, and estratos' default everywhere a seed is taken (probe seeds,
#: data generators, the shuffles of a built task, inner k-fold folds)
DEFAULT_SEED = 1111
#: examples per task of the built-in synthetic suite, for `estratos tasks build` and
#: `estratos demo` alike (one size, so the README's step-by-step commands make the demo's data)
SYNTHETIC_N_PER_TASK = 1000
#: the bootstrap's resampling seed (``report --ci`` / ``--significance``, and ``compare``'s
#: default ``--seed``): a name apart from :data:`DEFAULT_SEED`, which seeds the probes and
#: the data
BOOTSTRAP_SEED = 0
#: the demo's probe seeds (``estratos demo --seeds``)
DEMO_SEEDS = (DEFAULT_SEED, 1, 2)

# ---- layer specs -----------------------------------------------------------------------------
#: the layer spec "mean of every hidden state"
AVG = "avg"
#: ``--layers`` word for every hidden state 0..L then :data:`AVG`
ALL_LAYERS = "all"
#: a layer spec: a hidden-state index (0 = embedding output) or :data:`AVG`
LayerSpec = Union[int, str]

# ---- poolings --------------------------------------------------------------------------------
#: poolings a transformers model's hidden states are reduced with (``last``: the last real
#: token, the sentence vector of decoder-only models), in this order: the one declaration of
#: their names (CLI choices, slurm checks and docs read this tuple, before torch is
#: imported). Each one's computation is registered under its name in
#: ``estratos.encode.models.pooling.POOLERS``, a registry declared with these names (a name
#: here without a computation there, or the reverse, fails when that module is imported)
POOLINGS: Tuple[str, ...] = ("cls", "mean", "last")
#: what encode stores when ``--pooling`` is not given, by architecture (in this order: the
#: first is what probe uses when ``--pooling`` is not given): an encoder's first position
#: sees the whole sentence, a decoder's only itself (docs/encode.md, "What is stored")
ENCODER_DEFAULT_POOLINGS: Tuple[str, ...] = ("cls", "mean")
DECODER_DEFAULT_POOLINGS: Tuple[str, ...] = ("last", "mean")
#: the pooling probe and slurm use when none is given: None, the cache's first pooling (the
#: first of its architecture's defaults above, or the one pooling of an --encoder cache)
DEFAULT_POOLING: Optional[str] = None
#: the one pooling of a cache made by ``encode --encoder`` (a SentEval batcher's own vectors)
ENCODER_POOLING = "encoder"
#: every pooling a cache may hold (what ``probe --pooling`` accepts)
CACHE_POOLINGS: Tuple[str, ...] = POOLINGS + (ENCODER_POOLING,)
#: ``encode --mean-first-token``: what a decoder's ``mean`` does with each input's first
#: token (the attention sink of causal LLMs: a BOS token, or the first word when the
#: tokenizer adds none). ``auto``: :data:`MEAN_FIRST_DEFAULT` for decoders, ``keep`` for
#: encoders (whose first token sees the whole sentence); recorded as ``mean_first_token``
MEAN_FIRST_CHOICES: Tuple[str, ...] = ("auto", "skip", "keep")
MEAN_FIRST_DEFAULT = "skip"
#: the placeholder of ``encode --prompt`` (the sentence goes there, as in str.format)
PROMPT_SLOT = "{}"
#: a prompted cache's ``prompt_kind``: the text of ``--prompt`` (tokenized with the
#: tokenizer's special tokens around it) or the tokenizer's chat template (``--chat-template``,
#: which holds its own)
TEXT_PROMPT_KIND, CHAT_TEMPLATE_KIND = "text", "chat-template"
#: what ``mean`` averages in a prompted cache (recorded as ``mean_tokens``): the sentence's
#: own tokens, never the prompt's, which are the same for every sentence
MEAN_TOKENS_PROMPTED = "sentence"
#: the encode settings that change a vector without changing a cell's identity (model,
#: revision, random-init seed and prompt are identity), as cache attribute -> the encode
#: option that sets it: a results line records them (``encoding``, from the cache) and
#: resume and report refuse to take a cell of other settings for this one. ``avg``: what a
#: cell of the ``avg`` layer spec averaged (``all`` stored at encode time, else the states
#: a cache without it stores, averaged at probe time: ``--states``)
VECTOR_SETTINGS: Mapping[str, str] = MappingProxyType({
    "encoder": "--encoder", "max_length": "--max-length", "lowercase": "--lowercase",
    "dtype": "--dtype", "model_dtype": "--model-dtype", "mean_first_token": "--mean-first-token",
    "prompt_kind": "--chat-template", "mean_tokens": "--prompt", "avg": "--states"})
#: ``encoding["avg"]`` of a cache that stores the mean over every state
AVG_OF_ALL = "all"

#: the precisions a cache stores vectors in (``encode --dtype``; the cache's layout per
#: precision is estratos.cache.schema's)
VECTOR_DTYPES: Tuple[str, ...] = ("float16", "bfloat16", "float32")

# ---- control models --------------------------------------------------------------------------
#: the ``revision`` of a control model (``encode --random-init SEED``) is this prefix + SEED:
#: its weights were never read, and its cells never share an identity with the trained model's
RANDOM_INIT_PREFIX = "random-init:"

# ---- what is trained --------------------------------------------------------------------------


class Role(str, Enum):
    """What a protocol trains (``Protocol.trains``) and what an estimator is for
    (``RecordedEstimator.role``): one name for both, so neither compares strings."""

    CLASSIFIER = "classifier"
    REGRESSOR = "regressor"

    def __str__(self) -> str:
        return self.value


# ---- how a probe reads features, and its controls -------------------------------------------
#: ``probe --features``: ``raw``, the cached vectors as stored (SentEval's protocol: paper
#: parity), or ``standardized``, each feature centred and scaled by the mean and standard
#: deviation of the data the probe is fitted on (dev and test use the training statistics;
#: a constant feature is zero). Why both: a linear probe trained by SGD on raw features can
#: miss what a standardized one reads (a few huge dimensions, or vectors that vary little
#: around a large mean), so a layer is never called empty on the raw reading alone.
FEATURES: Tuple[str, ...] = ("raw", "standardized")
RAW_FEATURES, STANDARDIZED_FEATURES = FEATURES
#: ``probe --control``: a control task in the sense of Hewitt & Liang (2019), labels that are
#: a fixed random function of the words of each example (estratos.probe.controls), scored
#: against its own test labels: what selectivity subtracts
CONTROL_TASK = "control-task"
#: ``probe --control``: training and dev labels shuffled, tested on the true labels: a floor
#: at the majority rate whatever the probe's capacity (not a measure of selectivity)
LABEL_SHUFFLE = "label-shuffle"


@dataclass(frozen=True)
class ControlKind:
    """A kind of control cell (``probe --control``): its name and what it is, in one line
    (help texts)."""

    name: str
    summary: str


#: the control kinds a cell may be (``probe --control``, ``ResultRecord.control["kind"]``),
#: in this order; ``CONTROLS.check(name, "--control")`` is the check of a typed name
CONTROLS: Registry[ControlKind] = Registry("control", {c.name: c for c in (
    ControlKind(CONTROL_TASK, "labels a fixed random function of each example's words, "
                              "scored on them: selectivity = score - control (Hewitt & Liang "
                              "2019)"),
    ControlKind(LABEL_SHUFFLE, "shuffled training and dev labels, tested on the true ones: a "
                               "majority-rate floor"),
)})
#: the names of :data:`CONTROLS`
CONTROL_KINDS: Tuple[str, ...] = CONTROLS.names()
#: ``probe --control-l2``: a control cell chooses its own L2 on its own dev labels (``own``,
#: the same probe family and selection rule as its task cell), or reuses the L2 its task
#: cell chose (``task``: the hyper-parameters fixed across the pair, as Hewitt & Liang do)
CONTROL_L2: Tuple[str, ...] = ("own", "task")
CONTROL_L2_OWN, CONTROL_L2_TASK = CONTROL_L2
#: ``probe --given prev``: each probed layer is given the stored hidden state below it
GIVEN_PREVIOUS = "prev"
#: how a protocol picks a model's L2 on dev: its accuracy (SentEval's rule, every ordinary
#: cell) or its cross-entropy (conditional cells: the gain is a difference of
#: cross-entropies, and a model chosen for accuracy can be far from the family's best log
#: loss, e.g. MiniLM's layer 6 on Length: 2.65 bits against 1.61)
SELECT_ACCURACY = "accuracy"
SELECT_CROSS_ENTROPY = "cross-entropy"
#: the L2 values a conditional cell chooses from on dev cross-entropy: half decades from
#: SentEval's smallest to 1. Past SentEval's largest (1e-2) because [B; R] has twice the
#: columns of B and each column's penalty then counts half (on SICK-E the best log loss of
#: B alone was at 0.1, of [B; B] at 0.3); in half decades because a layer given itself is
#: best at twice B's L2, which a grid of decades misses (Length, layer 0: a "gain" of 0.083
#: bits over itself with decades, 0.007 with half decades)
CONDITIONAL_L2_GRID: Tuple[float, ...] = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1,
                                          0.3, 1.0)
#: ``probe --erase``: the concepts LEACE erases from a probe's features
#: (:mod:`estratos.probe.erasure`): ``length`` (bins of the example's token count under the
#: model's tokenizer), ``words`` (bins of its whitespace word count), ``labels`` (the task's
#: own labels: the sanity check, after which the task must be at its majority class)
ERASE_CONCEPTS: Tuple[str, ...] = ("length", "words", "labels")
ERASE_LENGTH, ERASE_WORDS, ERASE_LABELS = ERASE_CONCEPTS
#: ``probe --erase random:RANK``: a random subspace of that rank erased, the control of an
#: erasure of the same rank
ERASE_RANDOM = "random"
#: a classification cell whose test predictions fall in one class at least this often is
#: flagged one-class: its score is (nearly) that class's rate, not what the layer encodes
ONE_CLASS_SHARE = 0.99

# ---- feature combiners -----------------------------------------------------------------------


@dataclass(frozen=True)
class Combiner:
    """A feature combiner's shape: ``slots`` sentence positions per example, output ``width``
    in sentence-vector widths (the algebra itself is in :mod:`estratos.probe.features`)."""

    name: str
    slots: int
    width: int


#: the feature combiners (docs/tasks.md): single ``x``; pair ``[|x1-x2|, x1*x2]``;
#: pair4 ``[x1, x2, x1*x2, |x1-x2|]``; sp ``[x1, x1-x2 .. x1-x5]``; bso ``[x1, x2, x1-x2]``;
#: dc ``[x1..x6]``; rst ``[xl, xr, xl*xr, |xl-xr|]`` over subtree means
COMBINERS: Registry[Combiner] = Registry("combiner", {c.name: c for c in (
    Combiner("single", 1, 1), Combiner("pair", 2, 2), Combiner("pair4", 2, 4),
    Combiner("sp", 5, 5), Combiner("bso", 2, 3), Combiner("dc", 6, 6), Combiner("rst", 2, 4),
)})

# ---- metrics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """A metric's name and scales. ``raw_scale``: the factor from the value results store in
    ``dev``/``test`` to the paper's scale of ``score`` (accuracy and F1 are stored in percent
    already: 1; correlations in [-1, 1]: 100). ``unit``: how tables and plots label it. The
    computations are in :mod:`estratos.protocols.metrics` (one value) and
    :mod:`estratos.stats.metrics` (a batch of resamples), both keyed by these names."""

    name: str
    raw_scale: float
    unit: str


#: the metrics a task may report (``TaskSpec.metric`` / ``extra_metrics``), in this order
METRIC_INFO: Registry[Metric] = Registry("metric", {m.name: m for m in (
    Metric("accuracy", 1.0, "accuracy (%)"), Metric("f1", 1.0, "F1 (%)"),
    Metric("pearson", 100.0, "Pearson r x100"), Metric("spearman", 100.0, "Spearman rho x100"),
)})
METRICS: Tuple[str, ...] = METRIC_INFO.names()
#: decimals of a result's ``score``
SCORE_DECIMALS = 2

# ---- SentEval's classifier settings ----------------------------------------------------------
#: the L2 grid of SentEval's PyTorch classifiers: 10**-5 .. 10**-2
DEFAULT_L2_GRID: Tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)
#: what SentEval uses when a task sets ``noreg`` (NLI, DC, SSP, RST)
NOREG_GRID: Tuple[float, ...] = (1e-9,)
#: folds of SentEval's k-fold protocols
DEFAULT_KFOLD = 10
#: share of a training split held out for early stopping when a task has no dev split
VALIDATION_SPLIT = 0.05
#: the keys a task spec's ``classifier`` mapping (a task's overrides) may set
OVERRIDE_KEYS: Tuple[str, ...] = ("nhid", "dropout", "optim", "batch_size", "tenacity",
                                  "epoch_size", "max_epoch", "l2_grid", "kfold")
#: the ``optim`` values (what a results line's ``classifier`` object records) whose fits draw
#: no random numbers: full-batch L-BFGS from a zero start gives the same model whatever the
#: seed. The one statement of it: a report reads it from a record's ``optim``
#: (``estratos.results.record.seed_free_fit``) and an estimator's ``deterministic`` is
#: derived from the ``optim`` it records (``RecordedEstimator.deterministic``)
SEED_FREE_OPTIMIZERS: Tuple[str, ...] = ("lbfgs",)

# ---- surface baselines (``estratos baseline --baseline``) -----------------------------------
#: the baselines that read only a task's text, in the order ``all`` runs them: the one
#: declaration of their names (the CLI lists them before numpy is imported); each one's
#: computation is registered under its name in ``estratos.probe.baseline.BASELINES``, a
#: registry declared with these names
SURFACE_BASELINES: Tuple[str, ...] = ("tfidf", "word-counts", "length-tokens", "length-chars",
                                      "char-ngrams", "word-bigrams", "word-position",
                                      "first-last-word", "function-words")
#: ``--baseline`` when none is given: ODESIA's bag of words
#: the benchmarks `estratos tasks download` fetches (estratos.tasks.download.DOWNLOADERS)
DOWNLOADABLE: Tuple[str, ...] = ("es",)
DEFAULT_BASELINE = "tfidf"
#: ``--baseline`` word for every surface baseline
ALL_BASELINES = "all"
#: a baseline's cells have model ``baseline:<name>``
BASELINE_MODEL_PREFIX = "baseline:"

# ---- timestamps ------------------------------------------------------------------------------
#: the one timestamp format of files estratos writes (results ``created``, cache attributes)
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_now() -> str:
    """Now, in UTC, as :data:`TIMESTAMP_FORMAT` (e.g. ``2026-11-22T10:00:00Z``)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime(TIMESTAMP_FORMAT)
