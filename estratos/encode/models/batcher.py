"""Any encoder as a SentEval-style ``batcher(params, batch)`` function.

Users of sent2vec, ELMo or their own models already have SentEval batchers. ``--encoder
module:function`` imports ``function`` from ``module`` (a dotted module name, or a path to a
``.py`` file) and calls it as SentEval does: ``params`` is a dict-like object with attribute
access, ``batch`` a list of sentences each split into words on whitespace (an empty sentence
becomes ``["."]``). It returns a (B, D) array (one vector per sentence: one "state") or a
(B, layers, D) array. If the module defines ``prepare(params, samples)``, it is called once
with all the sentences to encode before the first batch. The vectors are stored under the
pooling name ``encoder`` (the function does its own pooling).

Batches are planned in tokens, as for ``--model``: the module's ``count_tokens(params,
sentences)`` (the model's own token count of each sentence, a sequence of ints) when it has
one, else :data:`TOKENS_PER_WORD` per whitespace word (a subword tokenizer splits a Spanish
word into about that many pieces: 1.83 for SmolLM2's BPE on TASS1).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from estratos.cache import schema
from estratos.errors import OptionError

POOLING = "encoder"
#: subword tokens assumed per whitespace word when the module cannot count its tokens (a
#: round number above SmolLM2's BPE on Spanish, 1.83; WordPiece vocabularies split less)
TOKENS_PER_WORD = 2


class Params(dict):
    """SentEval's ``params``: a dict whose keys are also attributes (batchers use both)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


def _import_module(spec: str):
    if spec.endswith(".py"):
        path = Path(spec)
        if not path.is_file():
            raise OptionError(f"--encoder: no such file {spec!r}")
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        name = "estratos_user_encoder_" + digest
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise OptionError(f"--encoder: cannot load {spec!r} as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        return module
    added = False
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # console scripts do not see the cwd otherwise
        added = True
    try:
        return importlib.import_module(spec)
    finally:
        if added:
            sys.path.remove(str(Path.cwd()))


def load_batcher(target: str) -> Tuple[Callable, Optional[Callable], Optional[Callable], str]:
    """``(batcher, prepare or None, count_tokens or None, source hash)`` for
    ``module:function``."""
    module_name, sep, func_name = target.rpartition(":")
    if not sep or not module_name or not func_name:
        raise OptionError(f"--encoder: expected MODULE:FUNCTION, got {target!r}")
    try:
        module = _import_module(module_name)
    except OptionError:
        raise
    except Exception as exc:  # user code may raise anything on import
        raise OptionError(f"--encoder: cannot import {module_name!r}: {exc}") from exc
    batcher = getattr(module, func_name, None)
    if not callable(batcher):
        raise OptionError(f"--encoder: {module_name!r} has no function {func_name!r}")
    prepare = getattr(module, "prepare", None)
    if prepare is batcher or not callable(prepare):
        prepare = None
    count = getattr(module, "count_tokens", None)
    if count is batcher or not callable(count):
        count = None
    try:
        source = inspect.getsource(module).encode("utf-8")
        digest = "sha256:" + hashlib.sha256(source).hexdigest()
    except (OSError, TypeError):
        digest = "unknown"
    return batcher, prepare, count, digest


def _words(text: str) -> list:
    return text.split() or ["."]


class BatcherEncoder:
    """Wraps a SentEval-style batcher in the interface :mod:`estratos.encode.run` uses."""

    kind = "batcher"

    def __init__(self, target: str, *, lowercase: bool = False,
                 params: Optional[Dict[str, Any]] = None) -> None:
        self.target = target
        self.batcher, self._prepare, self._count, self.revision = load_batcher(target)
        self.lowercase = bool(lowercase)
        self.params = Params(params or {})
        self.poolings = (POOLING,)
        self.max_length = 0
        self.n_states: Optional[int] = None
        self.dim: Optional[int] = None

    def settings(self) -> Dict[str, object]:
        return {"encoder": self.kind, "model": self.target, "revision": self.revision,
                "tokenizer": "whitespace", "max_length": self.max_length,
                "lowercase": self.lowercase, "poolings": self.poolings}

    def info(self) -> Dict[str, object]:
        return {"compute": "external"}

    def load(self, *, progress: bool = False) -> None:
        """Nothing to load: the module was imported by the constructor."""

    def _prep(self, texts: Sequence[str]) -> list:
        return [_words(t.lower() if self.lowercase else t) for t in texts]

    def prepare(self, texts: Sequence[str]) -> None:
        """Call the module's ``prepare(params, samples)`` once, if it has one."""
        if self._prepare is not None:
            self._prepare(self.params, self._prep(texts))

    # -- the pipeline's stages (estratos.encode.run) ---------------------------------------
    def tokenize(self, texts: Sequence[str]) -> "WordCounts":
        """Each sentence's tokens, what the length plan sorts and budgets by: the module's
        ``count_tokens`` when it has one, else :data:`TOKENS_PER_WORD` per word."""
        words = self._prep(texts)
        if self._count is None:
            return WordCounts(np.array([TOKENS_PER_WORD * len(w) for w in words], np.int64))
        try:
            counts = np.asarray(self._count(self.params, words))
        except Exception as exc:  # user code may raise anything: said, naming the function
            raise OptionError(f"--encoder: {self.target}'s count_tokens failed: {exc}") from exc
        if counts.shape != (len(words),) or not np.issubdtype(counts.dtype, np.integer) \
                or (counts < 0).any():
            raise OptionError(f"--encoder: {self.target}'s count_tokens must return one "
                              f"integer >= 0 per sentence ({len(words)}), got shape "
                              f"{counts.shape} of {counts.dtype}")
        return WordCounts(np.maximum(counts.astype(np.int64), 1))

    def collate(self, toks: "WordCounts", rows: np.ndarray, texts: Sequence[str]) -> list:
        return self._prep(texts)

    def forward(self, words: list, dtype: str) -> "BatchVectors":
        out = np.asarray(self.batcher(self.params, words), dtype=np.float32)
        if out.ndim == 2:
            out = out[:, None, :]
        if out.ndim != 3 or out.shape[0] != len(words):
            raise OptionError(f"--encoder: {self.target} returned shape {out.shape} for a batch "
                              f"of {len(words)}; expected ({len(words)}, D) or "
                              f"({len(words)}, layers, D)")
        if self.n_states is None:
            self.n_states, self.dim = int(out.shape[1]), int(out.shape[2])
        elif out.shape[1:] != (self.n_states, self.dim):
            raise OptionError(f"--encoder: {self.target} returned {out.shape[1:]} per sentence, "
                              f"earlier batches gave {(self.n_states, self.dim)}")
        average = out.mean(axis=1)
        # NaN if any value is NaN; the mean's float32 sum can overflow near float32's maximum
        peak = float(np.max([np.abs(out).max(initial=0.0), np.abs(average).max(initial=0.0)]))
        return BatchVectors({POOLING: schema.to_storage(out, dtype)},
                            {POOLING: schema.to_storage(average, dtype)},
                            bool(np.isfinite(peak)),
                            bool(np.isfinite(peak)) and peak <= schema.DTYPE_MAX[dtype])

    def auto_batch_tokens(self) -> int:
        from estratos.encode.models.devices import CPU_BATCH_TOKENS

        return CPU_BATCH_TOKENS


class WordCounts:
    """The batcher's tokens per sentence, counted or estimated (never truncated)."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def capped(self) -> np.ndarray:
        return self.lengths

    @property
    def truncated(self) -> np.ndarray:
        return np.zeros(len(self.lengths), dtype=bool)

    def subset(self, rows: Sequence[int]) -> "WordCounts":
        return WordCounts(self.lengths[np.asarray(rows, dtype=np.int64)])


class BatchVectors:
    """A batcher's output, already on the host."""

    def __init__(self, vectors: Dict[str, np.ndarray], averages: Dict[str, np.ndarray],
                 source_finite: bool, within_range: bool) -> None:
        self._vectors = vectors
        #: the mean over every state the function returned, per pooling (B, D)
        self.averages = averages
        #: whether the function's own values were finite (before the cast to the stored dtype)
        self.source_finite = source_finite
        #: whether they were also within the stored dtype's range (False: check each row)
        self.within_range = within_range

    def numpy(self) -> Dict[str, np.ndarray]:
        return self._vectors
