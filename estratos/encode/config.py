"""An encode run's configuration: one frozen, typed object built once by the option checks.

Why one object: an encode run is configured by some twenty choices (the model or batcher,
which states and poolings are stored and in what precision, how the model is loaded and
prompted, where it runs). :meth:`EncodeConfig.build` checks every one that can be checked
without the model, the sentences or torch, naming the option, so a mistake is reported
before anything slow starts; the encoders (:mod:`estratos.encode.models`) and the run
(:func:`estratos.encode.encode_sentences`) read the same object instead of re-checking loose
arguments. What only the model can answer (its length limit, whether it is a decoder, its
chat template) is checked once the tokenizer and config are read, by the encoder.

Standard library and the package's leaf modules only (:meth:`EncodeConfig.for_cache`
reads the cache's layout when called): the CLI builds it before numpy, torch or transformers
load, and the probes, which never import the encoder, may use it. :meth:`EncodeConfig.to_argv`
is the one writer of ``estratos encode`` options (SLURM job scripts, the demo's printed
commands, the command that adds missing sentences to a cache).
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from estratos.clitypes import int_at_least, integer
from estratos.devices import ENCODE_DEVICES, check_device, device_help
from estratos.errors import OptionError
from estratos.model_source import is_local_model
from estratos.options import AUTO_SHARD, parse_states, positive, resolve_shard
from estratos.optiontable import (
    OptionPair,
    Role,
    check_fields,
    default_of,
    flatten,
    option,
    options_of,
    to_options,
)
from estratos.registry import unknown_name
from estratos.vocab import (
    ALL_LAYERS,
    CHAT_TEMPLATE_KIND,
    DECODER_DEFAULT_POOLINGS,
    ENCODER_DEFAULT_POOLINGS,
    ENCODER_POOLING,
    MEAN_FIRST_CHOICES,
    MEAN_FIRST_DEFAULT,
    POOLINGS,
    PROMPT_SLOT,
    TEXT_PROMPT_KIND,
    VECTOR_DTYPES,
)

#: ``--batch-tokens``: a positive token budget or ``"auto"``
BatchTokens = Union[int, str]
#: ``--model-dtype`` choices (auto: the checkpoint's own dtype on a GPU, float32 elsewhere)
MODEL_DTYPES: Tuple[str, ...] = ("auto", "bfloat16", "float16", "float32")
#: ``--device-map`` choices (None: the whole model on ``--device``)
DEVICE_MAPS: Tuple[str, ...] = ("auto",)
ACCELERATE_HINT = 'pip install "estratos[accelerate]"'
#: the options only a ``--model`` run reads (an ``--encoder`` function loads its own model)
MODEL_ONLY: Tuple[str, ...] = ("model_dtype", "device_map", "trust_remote_code", "random_init",
                               "prompt", "chat_template", "mean_first_token")
#: the shortest ``--max-length`` (a special token and one word); the longest is the model's
MIN_MAX_LENGTH = 2


def _check_poolings(poolings: Optional[Sequence[str]], *,
                    batcher: bool) -> Optional[Tuple[str, ...]]:
    """``--pooling``: known names, each once in the order given (None: the default); a
    batcher's one kind (:data:`~estratos.vocab.ENCODER_POOLING`) only with ``--encoder``."""
    if not poolings:
        return None
    chosen = tuple(dict.fromkeys(str(p) for p in poolings))
    if batcher and chosen == (ENCODER_POOLING,):
        return None  # the only kind a batcher gives: the default, written nowhere
    bad = [p for p in chosen if p not in POOLINGS + ((ENCODER_POOLING,) if batcher else ())]
    if bad:
        raise unknown_name("pooling", bad[0], POOLINGS, "--pooling")
    return chosen


def _states(states: Union[str, Sequence[Union[int, str]], None]) -> str:
    """``--states`` with its syntax checked (the indices are checked against the model), as
    the option's text (items of a sequence joined by commas, ``all`` when it means every
    state): one form per choice, so a configuration equals the one its words build."""
    parse_states(states)
    text = ALL_LAYERS if states is None else (
        states.strip() if isinstance(states, str) else ",".join(str(s).strip() for s in states))
    return ALL_LAYERS if text.lower() == ALL_LAYERS else text


def _max_length(value: Optional[int]) -> Optional[int]:
    """``--max-length``: None (the model's limit) or at least :data:`MIN_MAX_LENGTH`."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or (
            value < MIN_MAX_LENGTH):
        raise OptionError(f"--max-length: must be an integer >= {MIN_MAX_LENGTH}, "
                          f"got {value!r}")
    return int(value)


def _seed(random_init: Optional[int]) -> Optional[int]:
    if random_init is not None and (isinstance(random_init, bool)
                                    or not isinstance(random_init, numbers.Integral)
                                    or random_init < 0):
        raise OptionError(f"--random-init: the seed must be an integer >= 0, got "
                          f"{random_init!r}")
    return None if random_init is None else int(random_init)


def parse_batch_tokens(value: BatchTokens) -> BatchTokens:
    """``--batch-tokens``: a positive integer (also as text) or ``"auto"``."""
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return "auto"
        try:
            value = int(value)
        except ValueError:
            raise OptionError(f"--batch-tokens: expected a positive integer or auto, got "
                              f"{value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise OptionError(f"--batch-tokens: must be >= 1 or auto, got {value!r}")
    return int(value)


def parse_prompt(template: Optional[str]) -> Optional[Tuple[str, str]]:
    """``--prompt TEMPLATE``: ``(prefix, suffix)`` around the one ``{}`` where the sentence
    goes (None without a template). Other braces are kept as written."""
    if template is None:
        return None
    if template.count(PROMPT_SLOT) != 1:
        raise OptionError(f"--prompt: the template must hold {PROMPT_SLOT} exactly once (where "
                          f"the sentence goes), got {template!r}")
    prefix, suffix = template.split(PROMPT_SLOT)
    return prefix, suffix


def check_accelerate() -> None:
    """``--device-map`` needs accelerate, an optional extra: say how to get it."""
    try:
        import accelerate  # noqa: F401 - only whether it is installed
    except ImportError as exc:
        raise OptionError(f"--device-map auto needs the accelerate package, which is not "
                          f"installed: {ACCELERATE_HINT}") from exc


def check_model_folder(model: Optional[str]) -> None:
    """A local ``--model`` must be a folder with a ``config.json``: say so, naming the folder
    (instead of the tokenizer backend's unrelated complaint about sentencepiece), before
    torch and transformers are imported. Hub ids and ``None`` (``--encoder``) pass."""
    if model is None or not is_local_model(model):
        return
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise OptionError(f"--model: {str(folder)!r} is not a model folder (no such directory)")
    if (folder / "config.json").is_file():
        return
    inside = sorted(p.parent for p in folder.glob("*/config.json"))
    hint = (f"; a model folder inside it: {inside[0]}" if len(inside) == 1 else
            f"; model folders inside it: {', '.join(map(str, inside[:3]))}" if inside else
            "; point --model at the folder that holds config.json and the weights")
    raise OptionError(f"--model: {folder} has no config.json, so it is not a Hugging Face "
                      f"model folder{hint}")


def _encode_device(value: str) -> str:
    return check_device(value, kinds=ENCODE_DEVICES)


def _prompt(value: str) -> str:
    parse_prompt(value)
    return value


@dataclass(frozen=True)
class EncodeConfig:
    """Every choice of an encode run, checked (:meth:`build`); each field is one option of
    ``estratos encode`` (and of ``estratos slurm``), declared here once
    (:mod:`estratos.optiontable`): its flag, check, help and role.

    - ``model``: a Hugging Face id or local folder, or ``encoder``: a SentEval-style
      ``MODULE:FUNCTION`` batcher (exactly one of them).
    - What is stored (:attr:`~estratos.optiontable.Role.IDENTITY`): ``poolings`` (None: the
      architecture's default), ``states`` (``--states``: ``all``, ``0,8,16``, ``every:4``,
      ``last:8``), ``dtype`` (the vectors' precision), ``max_length`` (None: the model's
      limit, at most 512), ``lowercase``, ``prompt`` (a template whose ``{}`` is the
      sentence), ``chat_template``, ``mean_first_token`` (``auto``, ``skip``, ``keep``); how
      the model is loaded: ``model_dtype``, ``device_map``, ``trust_remote_code``,
      ``random_init`` (a control model's seed).
    - How it runs (``EXECUTION``): ``device`` (``auto``, ``cpu``, ``cuda[:N]``, ``mps``),
      ``batch_tokens`` (a token budget or ``auto``); where (``PLACEMENT``): ``threads``
      (None: ``OMP_NUM_THREADS`` if set, else every core), ``shard`` (``(I, N)`` or None).
    """

    model: Optional[str] = option(
        None, "--model", "Hugging Face model id or local folder (AutoModel).",
        check=lambda value: str(value) or None)
    encoder: Optional[str] = option(
        None, "--encoder", "Or: a SentEval-style batcher, MODULE:FUNCTION (a function from a "
        "list of sentences to vectors, or to a list of per-state arrays).",
        metavar="MODULE:FUNCTION", check=lambda value: str(value) or None)
    poolings: Optional[Tuple[str, ...]] = option(
        None, "--pooling", "Poolings to store (repeatable) [default: cls and mean for "
        "encoders, last and mean for decoder-only models].", choices=POOLINGS, multiple=True,
        check=lambda value: tuple(dict.fromkeys(str(p) for p in value)) or None)
    states: str = option(
        ALL_LAYERS, "--states", "Hidden states to store: all, indices (0,8,16), every:K (and "
        "the last), last:N; the mean over all states (avg) is stored whatever is picked.",
        check=_states, metavar="SPEC")
    dtype: str = option(
        "float16", "--dtype", "Stored vector precision (readers always give float32); "
        "bfloat16 has float32's range, for models whose hidden states overflow float16.",
        choices=VECTOR_DTYPES)
    max_length: Optional[int] = option(
        None, "--max-length", "Truncate inputs to this many tokens [default: model limit, max "
        "512].", check=_max_length, click_type=integer)
    lowercase: bool = option(
        False, "--lowercase", "Lower-case sentences before tokenizing.", is_flag=True)
    prompt: Optional[str] = option(
        None, "--prompt", "Wrap each sentence in TEMPLATE, {} being the sentence (e.g. 'This "
        "sentence : \"{}\" means in one word:\"'); the cache stays keyed by the sentence, "
        "last reads the prompt's last token, mean the sentence's tokens.", check=_prompt,
        metavar="TEMPLATE")
    chat_template: bool = option(
        False, "--chat-template", "Wrap each sentence (or --prompt's text) in the tokenizer's "
        "chat template as a user turn, the assistant's turn opened.", is_flag=True)
    mean_first_token: str = option(
        "auto", "--mean-first-token", "Whether a decoder's mean leaves out each input's first "
        "token (the attention sink: BOS, or the first word without one); auto: skip for "
        "decoders, keep for encoders.", choices=MEAN_FIRST_CHOICES)
    model_dtype: str = option(
        "auto", "--model-dtype", "Dtype of the model's weights; auto: the checkpoint's own on "
        "a GPU, float32 on CPU.", choices=MODEL_DTYPES)
    device_map: Optional[str] = option(
        None, "--device-map", "auto: spread a model too large for one GPU over the GPUs "
        'present (needs pip install "estratos[accelerate]").', choices=DEVICE_MAPS)
    trust_remote_code: bool = option(
        False, "--trust-remote-code", "Run the model's own Python code from its folder or hub "
        "repo (off by default; only for models you trust).", is_flag=True)
    random_init: Optional[int] = option(
        None, "--random-init", "Control model: same architecture and tokenizer, weights "
        "freshly initialised with this seed (the trained weights are never read).",
        check=_seed, metavar="SEED",
        click_type=lambda: int_at_least(0))
    device: str = option(
        "auto", "--device", f"Where the model runs: {device_help(ENCODE_DEVICES)}.",
        role=Role.EXECUTION, check=_encode_device)
    batch_tokens: BatchTokens = option(
        "auto", "--batch-tokens", "Token budget per batch (batch size x padded length); auto: "
        "fill the GPU's free memory; on CPU at most 8192, less for deep, wide models.",
        role=Role.EXECUTION, check=parse_batch_tokens, metavar="N|auto")
    threads: Optional[int] = option(
        None, "--threads", "Torch threads [default: OMP_NUM_THREADS if set, else every "
        "core].", role=Role.PLACEMENT, check=positive("--threads"), click_type=integer)
    shard: Optional[Tuple[int, int]] = option(
        None, "--shard", "Encode shard I (0-based) of N of the sentences, written to "
        "CACHE.shard-I-of-N.h5 (auto: the SLURM array variables if set); merge with "
        "`estratos cache merge`.", role=Role.PLACEMENT, check=resolve_shard, metavar="I/N",
        cli_default=AUTO_SHARD)

    @classmethod
    def build(cls, **given: Any) -> "EncodeConfig":
        """Check every option that needs neither the model nor torch, given by field name
        (an :class:`OptionError` names the first bad one; None or absent: the default), and
        return the configuration. ``shard`` ``"auto"``: the SLURM array's task, if any. A
        local ``model`` folder is checked separately (:meth:`check_model`): the CLI names a
        wrong data folder first. ``--max-length``'s bound is checked after the source: a
        batcher takes none at all."""
        max_length = given.pop("max_length", None)
        values = check_fields(cls, given)
        values["poolings"] = _check_poolings(values["poolings"],
                                             batcher=values["encoder"] is not None)
        config = cls(**{**values, "max_length": max_length})
        config._check_source()
        return dataclasses.replace(config, max_length=_max_length(max_length))

    def _check_source(self) -> None:
        """The options that depend on what encodes: exactly one of ``--model`` and
        ``--encoder``; a batcher loads its own model and gives one vector kind, so the
        model-loading options, other poolings and ``--max-length`` are refused with it;
        ``--device-map`` places the model itself."""
        if self.encoder is not None:
            if self.model is not None:
                raise OptionError("--encoder and --model: give one of them")
            for option, value, default in self._model_only():
                if value != default:
                    raise OptionError(f"{option}: only for --model (an --encoder function "
                                      "loads its own model)")
            if self.poolings:
                raise OptionError(f"--pooling: an --encoder function gives one vector kind, "
                                  f"stored as {ENCODER_POOLING!r}")
            if self.max_length is not None:
                raise OptionError("--max-length: not used with --encoder (the function "
                                  "truncates)")
            if self.states != ALL_LAYERS:
                raise OptionError("--states: not with --encoder (the function returns the "
                                  "states it has; all are stored)")
            return
        if not self.model:
            raise OptionError("--model: required (or --encoder MODULE:FUNCTION)")
        if self.device_map is not None:
            if self.device != "auto":
                raise OptionError("--device-map auto places the model itself; leave --device "
                                  "at auto")
            if self.random_init is not None:
                raise OptionError("--device-map and --random-init: a random-init model is "
                                  "built on one device; use --device")

    def _model_only(self) -> List[Tuple[str, Any, Any]]:
        """``(option, value, default)`` of the options only a ``--model`` run reads (flags
        and defaults from the table)."""
        table = {field.name: (field, spec) for field, spec in options_of(self)}
        return [(table[name][1].flag, getattr(self, name), default_of(table[name][0]))
                for name in MODEL_ONLY]

    @classmethod
    def for_cache(cls, attrs: Mapping[str, Any]) -> "EncodeConfig":
        """The configuration that adds rows to the cache whose (migrated) root attributes
        are ``attrs``: its model (or batcher) and every setting it records that a vector
        depends on (what ``encode`` would otherwise refuse as other settings), each at its
        default when it is the default. A cache's own record cannot say which ``--prompt``
        a chat template wrapped: that case keeps the chat template alone."""
        from estratos.cache.architecture import cache_is_decoder
        from estratos.cache.schema import UNRECORDED

        unrecorded = set(attrs.get(UNRECORDED, ()))
        if attrs.get("encoder") == "batcher":
            return cls.build(encoder=str(attrs.get("model")),
                             lowercase=bool(attrs.get("lowercase", False)),
                             dtype=str(attrs.get("dtype", "float16")))
        decoder = cache_is_decoder(attrs)
        poolings = tuple(attrs.get("poolings") or ())
        default = DECODER_DEFAULT_POOLINGS if decoder else ENCODER_DEFAULT_POOLINGS
        states = tuple(attrs.get("states") or ())
        n_states = attrs.get("n_states")
        every = not states or (n_states is not None and states == tuple(range(int(n_states))))
        mean_first = attrs.get("mean_first_token") or "auto"
        kind = attrs.get("prompt_kind")
        max_length = attrs.get("max_length")
        return cls.build(
            model=str(attrs.get("model")), poolings=None if poolings == default else poolings,
            states=ALL_LAYERS if every else ",".join(str(int(s)) for s in states),
            dtype=str(attrs.get("dtype", "float16")),
            max_length=int(max_length) if max_length else None,
            lowercase=bool(attrs.get("lowercase", False)),
            prompt=attrs.get("prompt") if kind == TEXT_PROMPT_KIND else None,
            chat_template=kind == CHAT_TEMPLATE_KIND,
            mean_first_token=("auto" if decoder and mean_first == MEAN_FIRST_DEFAULT
                              else mean_first),
            model_dtype=("auto" if "model_dtype" in unrecorded
                         else str(attrs.get("model_dtype") or "auto")),
            random_init=attrs.get("random_init"))

    def check_model(self) -> None:
        """A local ``--model`` must be a folder with a ``config.json``
        (:func:`check_model_folder`); hub ids and ``--encoder`` runs pass."""
        check_model_folder(self.model)

    @property
    def framing(self) -> Optional[Tuple[str, str]]:
        """``(prefix, suffix)`` of ``--prompt`` around the sentence (None without one)."""
        return parse_prompt(self.prompt)

    def replace(self, **changes: Any) -> "EncodeConfig":
        """A copy with ``changes``, checked again."""
        return type(self).build(**{**self._fields(), **changes})

    def _fields(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_options(self) -> List[OptionPair]:
        """The ``estratos encode`` options of this configuration that differ from the
        defaults, ``--model`` or ``--encoder`` first, as ``(option, value)`` pairs (a flag's
        value is None; ``--pooling`` repeats); the run's placement (``--threads``,
        ``--shard``) is left to the command that runs it. The one writer of encode options
        (:func:`estratos.optiontable.to_options`): parsed back by :meth:`build`, they give
        the same configuration."""
        return to_options(self)

    def to_argv(self) -> List[str]:
        """:meth:`to_options` as command-line words."""
        return flatten(self.to_options())


def options_for_cache(attrs: Mapping[str, Any]) -> List[OptionPair]:
    """The ``estratos encode`` options that add rows to the cache whose root attributes are
    ``attrs`` (:meth:`EncodeConfig.for_cache`), or its model alone where the attributes are
    not a whole configuration (a cache written by other means)."""
    try:
        return EncodeConfig.for_cache(attrs).to_options()
    except (OptionError, TypeError, ValueError):
        return [("--model", str(attrs.get("model") or "MODEL"))]


__all__ = ["BatchTokens", "EncodeConfig", "MODEL_DTYPES", "options_for_cache", "check_model_folder",
           "parse_batch_tokens", "parse_prompt"]
