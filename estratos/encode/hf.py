"""Hugging Face transformers encoder: every hidden state's first-token and masked-mean vectors.

Pooling choices (see docs/encode.md):
- ``cls``: position 0 of each hidden state, whatever the tokenizer puts there ([CLS], ``<s>``...);
  special tokens come from the tokenizer, never hard-coded.
- ``mean``: sum(h * mask) / sum(mask) over the real tokens, special tokens included, padding
  excluded, computed in float32 so the vector does not depend on the batch it was in.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from pathlib import Path
from typing import Dict, Iterator, Optional, Sequence, Tuple

import numpy as np
import torch

from estratos.encode import devices, tokens
from estratos.errors import OptionError
from estratos.vocab import POOLINGS

log = logging.getLogger(__name__)

#: longest input we ever feed (DESIGN: the model's limit, capped at 512)
MAX_LENGTH_CAP = 512
#: files whose bytes define a model's weights (hashed when no hub commit is known)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")


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
    if not folder.is_dir():
        try:  # a hub id resolved from the local cache: .../snapshots/<commit>/config.json
            from transformers.utils import cached_file
            folder = Path(cached_file(model, "config.json")).parent
        except Exception as exc:  # noqa: BLE001 - any failure means "no folder to hash"
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


def _check_model_folder(folder: Path) -> None:
    """A local ``--model`` must be a folder with a ``config.json`` (say so, naming the folder,
    instead of the tokenizer backend's unrelated complaint about sentencepiece)."""
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


class HFEncoder:
    """Encodes sentences with an AutoTokenizer/AutoModel, returning all hidden states pooled.

    The constructor reads only the tokenizer and the config (enough for the settings a cache
    records); :meth:`load` reads the weights, so a run with nothing to encode never does.
    """

    kind = "transformers"

    def __init__(self, model: str, *, device: Optional[str] = None,
                 max_length: Optional[int] = None, lowercase: bool = False,
                 poolings: Sequence[str] = POOLINGS, threads: Optional[int] = None) -> None:
        from transformers import AutoConfig, AutoTokenizer

        bad = [p for p in poolings if p not in POOLINGS]
        if bad or not poolings:
            raise OptionError(f"--pooling: unknown pooling {bad or poolings!r}; choose from {POOLINGS}")
        local = Path(str(model)).expanduser()
        # a local folder is recorded by its absolute path, so reruns from elsewhere still match
        self.model_name = str(local.resolve()) if local.is_dir() else str(model)
        self.poolings = tuple(dict.fromkeys(poolings))
        self.lowercase = bool(lowercase)
        self.device = devices.select_device(device)
        self.threads = threads
        looks_local = self.model_name.startswith(("/", "./", "../", "~")) or Path(self.model_name).exists()
        if looks_local:
            _check_model_folder(Path(self.model_name).expanduser())
        try:
            self.config = AutoConfig.from_pretrained(self.model_name)
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_name)
        except (OSError, ValueError, KeyError) as exc:
            raise OptionError(f"--model: cannot load {self.model_name!r} with transformers "
                              f"AutoTokenizer/AutoModel: {exc}") from exc
        self.model = None
        self._tokenize = None
        #: hidden states to store (true indices; None: all), set by the run from --states
        self.states: Optional[Tuple[int, ...]] = None
        # position 0 must be the first real token and padding must sit after the sentence
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token is None:  # GPT-style tokenizers: padding is masked anyway
            fill = self.tokenizer.eos_token or self.tokenizer.unk_token
            if fill is None:
                raise OptionError(f"--model: the tokenizer of {self.model_name!r} has no padding, "
                                  "end or unknown token to pad batches with")
            self.tokenizer.pad_token = fill
        config = self.config
        limit = default_max_length(self.tokenizer, config)
        if max_length is None:
            max_length = limit
        elif not 2 <= int(max_length) <= limit:
            raise OptionError(f"--max-length: {max_length} outside [2, {limit}] for {self.model_name}")
        self.max_length = int(max_length)
        self.revision = model_revision(self.model_name, config)
        self.n_states = int(config.num_hidden_layers) + 1 if hasattr(config, "num_hidden_layers") else None
        self.dim = int(config.hidden_size) if hasattr(config, "hidden_size") else None

    def load(self, *, progress: bool = False) -> None:
        """Read the weights and move the model to its device (once)."""
        if self.model is not None:
            return
        from transformers import AutoModel

        devices.prepare_cpu_threads(self.device, self.threads)
        try:
            with transformers_progress(progress):
                model = AutoModel.from_pretrained(self.model_name, config=self.config)
        except (OSError, ValueError, KeyError) as exc:
            raise OptionError(f"--model: cannot load {self.model_name!r} with transformers "
                              f"AutoModel: {exc}") from exc
        self.model = model.eval().to(self.device)

    def settings(self) -> Dict[str, object]:
        """Attributes that define the vectors (compared when resuming or extending a cache)."""
        return {"encoder": self.kind, "model": self.model_name, "revision": self.revision,
                "tokenizer": f"{type(self.tokenizer).__name__}:{self.tokenizer.name_or_path}",
                "max_length": self.max_length, "lowercase": self.lowercase,
                "poolings": self.poolings}

    def info(self) -> Dict[str, object]:
        """Descriptive attributes (not compared)."""
        return {"compute": devices.compute_label(self.device),
                "model_type": str(getattr(self.config, "model_type", ""))}

    def _prep(self, texts: Sequence[str]) -> list:
        return [t.lower() for t in texts] if self.lowercase else list(texts)

    # -- the pipeline's stages (estratos.encode.run) ---------------------------------------
    def tokenize(self, texts: Sequence[str]) -> tokens.TokenizedTexts:
        """Every text's ids, once (Rust tokenizer when it is exact; see :mod:`tokens`)."""
        if self._tokenize is None:
            self._tokenize = tokens.for_tokenizer(self.tokenizer, self.max_length)
        return self._tokenize(self._prep(texts))

    def collate(self, toks: tokens.TokenizedTexts, rows: np.ndarray,
                texts: Sequence[str]) -> Dict[str, torch.Tensor]:
        """Host tensors of one batch (pinned on CUDA, so the copy to the GPU is asynchronous)."""
        input_ids, mask = toks.padded(rows, self.tokenizer.pad_token_id)
        batch = {"input_ids": torch.from_numpy(input_ids),
                 "attention_mask": torch.from_numpy(mask)}
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
        out_dtype = getattr(torch, dtype)
        with torch.inference_mode():
            with devices.autocast(self.device):
                hidden = self.model(**inputs, output_hidden_states=True).hidden_states
            # pooling in float32, outside autocast (which would run the matmul in 16 bits)
            maskf = inputs["attention_mask"].to(torch.float32).unsqueeze(1)  # (B, 1, T)
            counts = maskf.sum(dim=2).clamp(min=1.0)  # (B, 1)
            pooled, averages, finite = {}, {}, []
            for pooling in self.poolings:
                if pooling == "cls":
                    states = [h[:, 0].float() for h in hidden]
                else:  # masked mean: padding gets weight 0, so the batch does not matter
                    states = [torch.bmm(maskf, h.float()).squeeze(1) / counts for h in hidden]
                full = torch.stack(states, dim=1)  # (B, L+1, D)
                # checked on the device, read back with the vectors: were the model's own
                # outputs finite (before the cast to the stored precision)?
                finite.append(torch.isfinite(full).all())
                # the paper's avg: the mean over ALL hidden states, whatever --states stores
                averages[pooling] = full.mean(dim=1).to(out_dtype)
                if self.states is not None:
                    full = full[:, list(self.states)]
                pooled[pooling] = full.to(out_dtype)
        return HostVectors(pooled, averages, self.device, torch.stack(finite).all())

    def auto_batch_tokens(self) -> int:
        """``--batch-tokens auto`` for this model on its device (after :meth:`load`)."""
        return devices.auto_batch_tokens(self.device, self.config)


#: marks the mean over all states among the tensors copied back (not a pooling name)
AVERAGE_PREFIX = "\0avg:"


class HostVectors:
    """Pooled vectors on their way to the host: on CUDA a non-blocking copy into pinned
    memory followed by an event; :meth:`numpy` waits for that event only."""

    def __init__(self, pooled: Dict[str, torch.Tensor], averages: Dict[str, torch.Tensor],
                 device: torch.device, finite: torch.Tensor) -> None:
        self._event = None
        pooled = {**pooled, **{AVERAGE_PREFIX + name: t for name, t in averages.items()}}
        # numpy has no bfloat16: its 16-bit words travel as int16 and are read as uint16
        pooled = {name: t.view(torch.int16) if t.dtype == torch.bfloat16 else t
                  for name, t in pooled.items()}
        pooled["\0finite"] = finite.reshape(1)
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
        self._finite = self._host.pop("\0finite")
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
        return bool(self._finite.item())
