"""Hugging Face transformers encoder: every hidden state, pooled (see :mod:`.pooling`).

Special tokens come from the model's tokenizer, never hard-coded. The model is loaded as the
options say (docs/encode.md, "Big models"): weights in ``--model-dtype``, spread over the GPUs
with ``--device-map auto`` (through ``accelerate``), remote code only with
``--trust-remote-code``, or freshly initialised from a seed with ``--random-init`` (a control
model: same architecture and tokenizer, untrained weights).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np
import torch

from estratos.cache import schema
from estratos.cache.architecture import DECODER, ENCODER
from estratos.devices import ENCODE_DEVICES, resolve_device
from estratos.encode.config import MIN_MAX_LENGTH, MODEL_DTYPES, EncodeConfig, check_accelerate
from estratos.encode.models import devices, hub, pooling, tokens
from estratos.errors import OptionError
from estratos.model_source import is_local_model, model_identity
from estratos.registry import unknown_name
from estratos.vocab import (
    CHAT_TEMPLATE_KIND,
    MEAN_TOKENS_PROMPTED,
    PROMPT_SLOT,
    RANDOM_INIT_PREFIX,
    TEXT_PROMPT_KIND,
)

log = logging.getLogger(__name__)

#: longest input we ever feed (DESIGN: the model's limit, capped at 512)
MAX_LENGTH_CAP = 512
#: files whose bytes define a model's weights (hashed when no hub commit is known)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")
#: weights of task heads and poolers that no hidden state depends on: missing ones are fine
UNUSED_WEIGHTS = ("pooler.",)
#: the collated batch's key for the positions ``mean`` averages (not a model input)
MEAN_MASK = "mean_mask"
#: stands for the sentence while a chat template is rendered (then split around)
_SLOT_MARK = "estratos-sentence-slot-7f3a"


def chat_framing(tokenizer: Any, inner: Optional[Tuple[str, str]] = None) -> Tuple[str, str]:
    """``(prefix, suffix)`` of the tokenizer's chat template around one user turn whose
    content is the sentence (inside ``inner``'s prefix and suffix when ``--prompt`` is given
    too), ending with the assistant's turn opened, as for generation."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        name = getattr(tokenizer, "name_or_path", "")
        raise OptionError(f"--chat-template: the tokenizer {name!r} has no chat template")
    before, after = inner or ("", "")
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": before + _SLOT_MARK + after}], tokenize=False,
            add_generation_prompt=True)
    except Exception as exc:  # a template may fail in any way: said as an option error
        raise OptionError(f"--chat-template: the tokenizer's chat template fails: {exc}") from exc
    if not isinstance(text, str) or text.count(_SLOT_MARK) != 1:
        raise OptionError("--chat-template: the tokenizer's chat template does not put the user "
                          "turn's text into the prompt once, as written")
    prefix, suffix = text.split(_SLOT_MARK)
    return prefix, suffix


def weights_hash(folder: Path) -> str:
    """sha256 over the names and bytes of the weight files under ``folder`` (sorted)."""
    h = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    for p in files:
        h.update(p.relative_to(folder).as_posix().encode("utf-8") + b"\0")
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def model_revision(model: str, config: object) -> str:
    """The hub commit when the model came from the hub cache, else a hash of its weights."""
    commit = getattr(config, "_commit_hash", None)
    if commit:
        return str(commit)
    folder = Path(model)
    if not is_local_model(model):
        try:  # a hub id resolved from the local cache: .../snapshots/<commit>/config.json
            from transformers.utils import cached_file
            config_file = cached_file(model, "config.json")
            if config_file is None:
                raise FileNotFoundError("config.json is not in the hub cache")
            folder = Path(config_file).parent
        except Exception as exc:  # any failure means "no folder to hash"
            raise OptionError(f"--model: cannot locate the files of {model!r} ({exc})") from exc
        if folder.parent.name == "snapshots":
            return folder.name
    return weights_hash(folder)


def default_max_length(tokenizer: object, config: object) -> int:
    """The model's input limit, capped at 512 (tokenizers sometimes report a huge sentinel)."""
    limits = [MAX_LENGTH_CAP]
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        limits.append(tok_max)
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        model_type = str(getattr(config, "model_type", ""))
        # RoBERTa-style position ids start after the padding index
        offset = 2 if ("roberta" in model_type or model_type == "camembert") else 0
        limits.append(positions - offset)
    return min(limits)


@contextlib.contextmanager
def transformers_progress(show: bool) -> Iterator[None]:
    """transformers' own progress bars ("Loading weights", downloads) on or off for a while."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if show == was:
        yield
        return
    (hf_logging.enable_progress_bar if show else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def _torch_dtype(name: Any) -> Optional[torch.dtype]:
    """A floating torch dtype from a config's ``dtype`` / ``torch_dtype`` (str or dtype)."""
    if isinstance(name, torch.dtype):
        return name if name in (torch.float32, torch.float16, torch.bfloat16) else None
    if isinstance(name, str) and name.replace("torch.", "") in MODEL_DTYPES[1:]:
        return getattr(torch, name.replace("torch.", ""))
    return None


def weights_dtype(choice: str, config: object, device: torch.device,
                  device_map: Optional[str] = None) -> torch.dtype:
    """The dtype the weights are loaded in: ``choice``, or for ``auto`` the checkpoint's own
    dtype when the model runs on GPUs (a 7B model in float32 would double its memory) and
    float32 on CPU/MPS (half precision there is slow and inexact; vectors as before)."""
    if choice not in MODEL_DTYPES:
        raise unknown_name("model dtype", choice, MODEL_DTYPES, "--model-dtype")
    if choice != "auto":
        return getattr(torch, choice)
    on_gpu = device.type == "cuda" or (device_map is not None and torch.cuda.is_available())
    if not on_gpu:
        return torch.float32
    stored = getattr(config, "dtype", None) or config.__dict__.get("torch_dtype")
    return _torch_dtype(stored) or torch.float32


def _dtype_kwargs(dtype: torch.dtype) -> Dict[str, Any]:
    """The weights dtype keyword of ``from_pretrained``/``from_config`` (``dtype`` since
    transformers 4.56, ``torch_dtype`` before)."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dtype}


class _LoadReport(logging.Filter):
    """Drops transformers' own report of missing/unexpected checkpoint weights while a model
    loads: it always lists the pooler, which estratos never uses. :func:`explain_missing`
    says instead, once, what matters."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not ("LOAD REPORT" in text or "were not initialized from the model checkpoint"
                    in text or "were not used when initializing" in text)


@contextlib.contextmanager
def quiet_load_report() -> Iterator[None]:
    """Silence the load report of ``transformers.modeling_utils`` for a while."""
    logger = logging.getLogger("transformers.modeling_utils")
    flt = _LoadReport()
    logger.addFilter(flt)
    try:
        yield
    finally:
        logger.removeFilter(flt)


def explain_missing(model: str, missing: Sequence[str]) -> None:
    """Warn once when checkpoint weights that the hidden states depend on were missing (and
    therefore randomly initialised by transformers); a missing pooler is no concern."""
    used = [k for k in missing if not any(k.startswith(p) or f".{p}" in k for p in UNUSED_WEIGHTS)]
    if len(used) < len(missing):
        log.debug("%s: the checkpoint has no pooler weights; estratos never uses the pooler",
                  model)
    if used:
        shown = ", ".join(used[:5]) + (", ..." if len(used) > 5 else "")
        log.warning("%s: %d weights are missing from the checkpoint and were randomly "
                    "initialised by transformers (%s); the hidden states depend on them, so "
                    "the vectors are partly random", model, len(used), shown)


class HFEncoder:
    """Encodes sentences with an AutoTokenizer/AutoModel, returning all hidden states pooled.

    Built from a checked :class:`~estratos.encode.config.EncodeConfig` (``options``; the
    transformers config is ``config``). The constructor reads only the tokenizer and the
    model's config, and resolves what depends on them (the length limit, decoder or encoder
    poolings, the prompt's framing): enough for the settings a cache records. :meth:`load`
    reads the weights, so a run with nothing to encode never does; with ``random_init`` it
    builds the model from its config with weights initialised under that seed (never read).
    """

    kind = "transformers"

    def __init__(self, config: EncodeConfig) -> None:
        from transformers import AutoConfig, AutoTokenizer

        self.options = config  # the run's choices; ``self.config`` is the model's own
        self.model_name = model_identity(str(config.model))
        self.device = resolve_device(config.device, kinds=ENCODE_DEVICES)
        if config.device_map is not None:
            check_accelerate()  # an optional extra, looked for when a model is to be spread
        self._source = self._sources(config)
        try:
            self.config = AutoConfig.from_pretrained(self.model_name, **self._source)
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_name, **self._source)
        except (OSError, ValueError, KeyError) as exc:
            hint = (" (the model ships its own code: pass --trust-remote-code if you trust it)"
                    if "trust_remote_code" in str(exc) else "")
            raise OptionError(f"--model: cannot load {self.model_name!r} with transformers "
                              f"AutoTokenizer/AutoModel: {exc}{hint}") from exc
        self.model = None
        self._tokenize: Optional[Callable[[Sequence[str]], tokens.TokenizedTexts]] = None
        #: hidden states to store (true indices; None: all), set by the run from --states
        self.states: Optional[Tuple[int, ...]] = None
        self.decoder = pooling.is_decoder_only(self.config)
        self.poolings = pooling.resolve_poolings(config.poolings, decoder=self.decoder,
                                                 model=self.model_name)
        self.dtype = weights_dtype(config.model_dtype, self.config, self.device,
                                   config.device_map)
        self.mean_first = pooling.mean_first_policy(config.mean_first_token,
                                                    decoder=self.decoder)
        self._pad_right()
        self.max_length = self._max_length(config.max_length)
        #: ``(prefix, suffix)`` around each sentence, and what made it (``prompt_kind``)
        self.framing, self.prompt_kind = self._framing(config)
        if self.framing is not None:
            # a text prompt is tokenized with the tokenizer's special tokens around it; a
            # chat template holds its own
            self._tokenize = tokens.PromptTokenizer(
                self.tokenizer, self.max_length, *self.framing,
                add_special_tokens=self.prompt_kind == TEXT_PROMPT_KIND)
        self.revision = (f"{RANDOM_INIT_PREFIX}{config.random_init}"
                         if config.random_init is not None
                         else model_revision(self.model_name, self.config))
        self.n_states = (int(self.config.num_hidden_layers) + 1
                         if hasattr(self.config, "num_hidden_layers") else None)
        self.dim = (int(self.config.hidden_size) if hasattr(self.config, "hidden_size")
                    else None)

    def _sources(self, config: EncodeConfig) -> Dict[str, Any]:
        """``from_pretrained``'s keywords saying where files may come from: a local folder
        (checked to be a model folder), or the hub, read offline when the hub cache already
        holds the model."""
        source: Dict[str, Any] = {"trust_remote_code": config.trust_remote_code}
        if is_local_model(self.model_name):
            config.check_model()
        elif hub.local_files_only(self.model_name):
            source["local_files_only"] = True
        return source

    def _pad_right(self) -> None:
        """Batches are padded on the right: a sentence's real tokens then keep positions
        0..n-1 and, in a causal model, never see the padding, so its vectors do not depend on
        the batch (the poolings themselves work with padding on either side). GPT-style
        tokenizers without a padding token pad with their end token (masked anyway)."""
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token is None:
            fill = self.tokenizer.eos_token or self.tokenizer.unk_token
            if fill is None:
                raise OptionError(f"--model: the tokenizer of {self.model_name!r} has no "
                                  "padding, end or unknown token to pad batches with")
            self.tokenizer.pad_token = fill

    def _max_length(self, asked: Optional[int]) -> int:
        """``--max-length`` within the model's limit (:func:`default_max_length`), or the
        limit itself when none was asked for."""
        limit = default_max_length(self.tokenizer, self.config)
        if asked is None:
            return limit
        if not asked <= limit:
            raise OptionError(f"--max-length: {asked} outside [{MIN_MAX_LENGTH}, {limit}] "
                              f"for {self.model_name}")
        return int(asked)

    def _framing(self, config: EncodeConfig) -> Tuple[Optional[Tuple[str, str]],
                                                      Optional[str]]:
        """``(framing, prompt_kind)``: the chat template's turn around the sentence (inside
        ``--prompt``'s text when both are given), ``--prompt``'s text alone, or nothing."""
        if config.chat_template:
            return chat_framing(self.tokenizer, config.framing), CHAT_TEMPLATE_KIND
        if config.framing is not None:
            return config.framing, TEXT_PROMPT_KIND
        return None, None

    def load(self, *, progress: bool = False) -> None:
        """Read the weights (or initialise them, with ``random_init``) and place the model
        (once)."""
        if self.model is not None:
            return
        from transformers import AutoModel

        devices.prepare_cpu_threads(self.device, self.options.threads)
        kwargs = {**_dtype_kwargs(self.dtype), "trust_remote_code": self.options.trust_remote_code}
        if self.options.random_init is not None:
            # seeded on the CPU generator, then moved: the same weights on every device
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.options.random_init)
                model = AutoModel.from_config(self.config, **kwargs)
            self.model = model.eval().to(self.device)
            return
        if self.options.device_map is not None:
            kwargs["device_map"] = self.options.device_map
        kwargs.update(self._source)
        try:
            with transformers_progress(progress), quiet_load_report():
                model, info = AutoModel.from_pretrained(self.model_name, config=self.config,
                                                        output_loading_info=True, **kwargs)
        except (OSError, ValueError, KeyError) as exc:
            raise OptionError(f"--model: cannot load {self.model_name!r} with transformers "
                              f"AutoModel: {exc}") from exc
        explain_missing(self.model_name, list(info.get("missing_keys") or ()))
        if self.options.device_map is None:
            model = model.to(self.device)
        else:  # inputs go where the embeddings are; the rest was placed by accelerate
            self.device = model.get_input_embeddings().weight.device
        self.model = model.eval()

    def settings(self) -> Dict[str, object]:
        """Attributes that define the vectors (compared when resuming or extending a cache).
        ``mean_first_token`` exists for decoder-only models, ``prompt``, ``prompt_kind`` and
        ``mean_tokens`` for prompted caches, ``random_init`` for control models only (absent
        elsewhere, which matches absent). ``model_dtype`` (the weights' dtype as loaded):
        rows of other weight precisions never share a cache; a cache that does not record it
        matches any (:data:`estratos.cache.schema.UNRECORDED`)."""
        out: Dict[str, object] = {
            "encoder": self.kind, "model": self.model_name, "revision": self.revision,
            "tokenizer": f"{type(self.tokenizer).__name__}:{self.tokenizer.name_or_path}",
            "max_length": self.max_length, "lowercase": self.options.lowercase,
            "poolings": self.poolings, "model_dtype": self.weights_dtype_name}
        if self.decoder:
            out["mean_first_token"] = self.mean_first
        if self.framing is not None:
            out.update(prompt=PROMPT_SLOT.join(self.framing), prompt_kind=self.prompt_kind,
                       mean_tokens=MEAN_TOKENS_PROMPTED)
        if self.options.random_init is not None:
            out["random_init"] = self.options.random_init
        return out

    @property
    def weights_dtype_name(self) -> str:
        """The dtype the weights were loaded in, as the cache records it (``bfloat16``)."""
        return str(self.dtype).replace("torch.", "")

    def _autocasts(self) -> bool:
        """Autocast on CUDA only for float32 weights loaded with ``--model-dtype auto`` (as
        before the option existed); weights asked for in float32 run in float32, half
        weights in their own dtype."""
        return self.options.model_dtype == "auto" and self.dtype == torch.float32

    def info(self) -> Dict[str, object]:
        """Descriptive attributes (not compared)."""
        if self._autocasts():
            compute = devices.compute_label(self.device)
        else:
            compute = f"{self.device.type}/{str(self.dtype).replace('torch.', '')}"
        out: Dict[str, object] = {
            "compute": compute, "model_type": str(getattr(self.config, "model_type", "")),
            "architecture": DECODER if self.decoder else ENCODER,
            "model_dtype": self.weights_dtype_name,
            "trust_remote_code": self.options.trust_remote_code}
        if self.options.device_map is not None:
            out["device_map"] = self.options.device_map
        return out

    def _prep(self, texts: Sequence[str]) -> list:
        return [t.lower() for t in texts] if self.options.lowercase else list(texts)

    # -- the pipeline's stages (estratos.encode.run) ---------------------------------------
    def tokenize(self, texts: Sequence[str]) -> tokens.TokenizedTexts:
        """Every text's ids, once (Rust tokenizer when it is exact; see :mod:`tokens`)."""
        if self._tokenize is None:
            self._tokenize = tokens.for_tokenizer(self.tokenizer, self.max_length)
        toks = self._tokenize(self._prep(texts))
        return toks.skip_first() if self.mean_first == "skip" else toks

    def collate(self, toks: tokens.TokenizedTexts, rows: np.ndarray,
                texts: Sequence[str]) -> Dict[str, torch.Tensor]:
        """Host tensors of one batch (pinned on CUDA, so the copy to the GPU is asynchronous)."""
        input_ids, mask = toks.padded(rows, self.tokenizer.pad_token_id)
        batch = {"input_ids": torch.from_numpy(input_ids),
                 "attention_mask": torch.from_numpy(mask)}
        if "mean" in self.poolings:
            batch[MEAN_MASK] = torch.from_numpy(toks.mean_mask(rows, input_ids.shape[1]))
        if "token_type_ids" in self.tokenizer.model_input_names:
            batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
        if self.device.type == "cuda":
            batch = {k: v.pin_memory() for k, v in batch.items()}
        return batch

    def forward(self, batch: Dict[str, torch.Tensor], dtype: str) -> "HostVectors":
        """Run one batch and pool it on the device; the vectors come back in the cache's
        ``dtype`` through :class:`HostVectors` (asynchronously on CUDA)."""
        if self.model is None:
            raise RuntimeError("HFEncoder.load() must be called before forward()")
        inputs = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        mean_mask = inputs.pop(MEAN_MASK, None)
        out_dtype = getattr(torch, dtype)
        cast = devices.autocast(self.device) if self._autocasts() else contextlib.nullcontext()
        with torch.inference_mode():
            with cast:
                hidden = self.model(**inputs, output_hidden_states=True).hidden_states
            # pooling in float32, outside autocast (which would run the matmul in 16 bits)
            pooled, averages, peaks = {}, {}, []
            for name, full in pooling.pool(hidden, inputs["attention_mask"], self.poolings,
                                           mean_mask=mean_mask).items():  # (B, L+1, D)
                # the paper's avg: the mean over ALL hidden states, whatever --states stores
                average = full.mean(dim=1)
                # one reduction on the device, read back with the vectors: the largest
                # magnitude (NaN if any value is NaN) says whether the model's own outputs
                # were finite and whether they (and their mean, whose float32 sum can
                # overflow near float32's maximum) fit the stored precision
                peaks.append(torch.maximum(full.abs().amax(), average.abs().amax()))
                averages[name] = average.to(out_dtype)
                if self.states is not None:
                    full = full[:, list(self.states)]
                pooled[name] = full.to(out_dtype)
            peak = torch.stack(peaks).amax()
        return HostVectors(pooled, averages, self.device, peak, schema.DTYPE_MAX[dtype])

    def auto_batch_tokens(self) -> int:
        """``--batch-tokens auto`` for this model on its device (after :meth:`load`)."""
        if self.model is None:
            raise RuntimeError("HFEncoder.load() must be called before auto_batch_tokens()")
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        return devices.auto_batch_tokens(self.device, self.config, weights)


#: marks the mean over all states among the tensors copied back (not a pooling name)
AVERAGE_PREFIX = "\0avg:"


class HostVectors:
    """Pooled vectors on their way to the host: on CUDA a non-blocking copy into pinned
    memory followed by an event; :meth:`numpy` waits for that event only."""

    def __init__(self, pooled: Dict[str, torch.Tensor], averages: Dict[str, torch.Tensor],
                 device: torch.device, peak: torch.Tensor, limit: float) -> None:
        self._event = None
        pooled = {**pooled, **{AVERAGE_PREFIX + name: t for name, t in averages.items()}}
        # numpy has no bfloat16: its 16-bit words travel as int16 and are read as uint16
        pooled = {name: t.view(torch.int16) if t.dtype == torch.bfloat16 else t
                  for name, t in pooled.items()}
        pooled["\0peak"] = peak.reshape(1)
        if device.type == "cuda":
            self._host = {}
            for name, tensor in pooled.items():
                host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
                host.copy_(tensor, non_blocking=True)
                self._host[name] = host
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(device))
        else:
            self._host = {name: tensor.cpu() for name, tensor in pooled.items()}
        self._peak = self._host.pop("\0peak")
        self._limit = limit
        self.averages: Dict[str, np.ndarray] = {}

    def numpy(self) -> Dict[str, np.ndarray]:
        """``{pooling: (B, stored states, D)}`` in the stored dtype; :attr:`averages` (``{pooling:
        (B, D)}``, the mean over all states) is filled by this call."""
        if self._event is not None:
            self._event.synchronize()
        out = {name: t.numpy().view(np.uint16) if t.dtype == torch.int16 else t.numpy()
               for name, t in self._host.items()}
        self.averages = {name[len(AVERAGE_PREFIX):]: out.pop(name) for name in list(out)
                         if name.startswith(AVERAGE_PREFIX)}
        return out

    @property
    def source_finite(self) -> bool:
        """Whether the model's pooled outputs were all finite before the cast to the stored
        precision (call after :meth:`numpy`)."""
        return bool(torch.isfinite(self._peak).all())

    @property
    def within_range(self) -> bool:
        """Whether every pooled value is finite and at most the stored precision's largest
        magnitude, so that nothing stored is inf or NaN (call after :meth:`numpy`). False
        only asks for the exact check: a value just above the maximum may still round to
        it."""
        return self.source_finite and float(self._peak.item()) <= self._limit
