"""Tokenize every sentence once, into flat integer arrays, and build padded batches from them.

The fast (Rust) tokenizer behind a transformers tokenizer encodes whole chunks of sentences in
parallel (``encode_batch_fast``, truncation done in Rust); its ids go straight into one flat
numpy array with offsets (no per-sentence lists kept, no Python-side padding or tensor
conversion). The length plan reads the lengths from the same arrays, and each batch is cut
from them with a few numpy operations. Memory: 2 bytes per token (4 for vocabularies over
65,536), at most ``max_length`` tokens per sentence.

Tokenizers whose Rust backend does not reproduce what the transformers tokenizer returns for
a single sentence (a slow Python tokenizer, token type ids that are not all 0, a wrapper that
adds tokens itself) are tokenized through the transformers tokenizer instead, with the same
result arrays, so everything after this module is the same.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Union

import numpy as np

log = logging.getLogger(__name__)

#: sentences per tokenizer call (bounds the Encoding objects alive at once)
CHUNK = 4096
#: probe sentences: the backend must give exactly the wrapper's output for these
PROBES = ("Hola, ¿qué tal? El perro come en la casa.",
          " ".join(["La niña lee un libro muy grande con su abuela."] * 80), "x")


@dataclass
class TokenizedTexts:
    """Ids of many sentences in one flat array, cut at ``max_length`` (special tokens kept).

    ``ids[offsets[i]:offsets[i + 1]]`` are sentence i's ids; ``lengths[i]`` its token count
    before truncation (what sorting uses); ``truncated`` whether it was cut.
    """

    ids: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def capped(self) -> np.ndarray:
        """Tokens fed to the model per sentence (after truncation)."""
        return np.diff(self.offsets)

    @property
    def truncated(self) -> np.ndarray:
        return self.lengths > self.capped

    def subset(self, rows: Union[Sequence[int], np.ndarray]) -> "TokenizedTexts":
        """The sentences ``rows``, in that order (a copy)."""
        index = np.asarray(rows, dtype=np.int64)
        capped = self.capped[index]
        offsets = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(capped, out=offsets[1:])
        return TokenizedTexts(self.ids[_gather_index(self.offsets[index], capped)], offsets,
                              self.lengths[index].copy())

    def padded(self, rows: Union[Sequence[int], np.ndarray], pad_id: int) -> tuple:
        """``(input_ids, attention_mask)``, int64 (B, longest) arrays for the sentences
        ``rows`` (padding on the right, after each sentence's last token)."""
        index = np.asarray(rows, dtype=np.int64)
        capped = self.capped[index]
        width = int(capped.max(initial=1))
        mask = np.arange(width)[None, :] < capped[:, None]
        input_ids = np.full((len(index), width), pad_id, dtype=np.int64)
        input_ids[mask] = self.ids[_gather_index(self.offsets[index], capped)]
        return input_ids, mask.astype(np.int64)


def _gather_index(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Flat positions ``starts[i] + 0..counts[i]-1`` for every i, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    base = np.repeat(starts - (ends - counts), counts)
    return base + np.arange(total, dtype=np.int64)


def _id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def _assemble(pieces: List[tuple], n: int) -> TokenizedTexts:
    ids = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.uint16)
    capped = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int64)
    lengths = np.concatenate([p[2] for p in pieces]) if pieces else np.zeros(0, np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(capped, out=offsets[1:])
    return TokenizedTexts(ids, offsets, lengths)


class FastTokenizer:
    """Tokenizes with the transformers tokenizer's Rust backend (see the module docstring);
    :func:`for_tokenizer` picks it or :class:`WrapperTokenizer`."""

    def __init__(self, tokenizer, max_length: int) -> None:
        self.backend = tokenizer.backend_tokenizer
        self.max_length = max_length
        self.direction = getattr(tokenizer, "truncation_side", "right")
        self.n_special = self.backend.num_special_tokens_to_add(False)
        self.dtype = _id_dtype(self.backend.get_vocab_size(with_added_tokens=True))

    def _configure(self) -> None:
        # the transformers tokenizer sets these on the same backend before each of its own
        # calls, so setting ours before each of ours is enough (and cheaper than a copy)
        self.backend.no_padding()
        self.backend.enable_truncation(self.max_length, stride=0, strategy="longest_first",
                                       direction=self.direction)

    def __call__(self, texts: Sequence[str]) -> TokenizedTexts:
        pieces = []
        for start in range(0, len(texts), CHUNK):
            self._configure()
            encodings = self.backend.encode_batch_fast(list(texts[start:start + CHUNK]),
                                                       add_special_tokens=True)
            capped = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
            ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings),
                              self.dtype, int(capped.sum()))
            lengths = capped.copy()
            for i, e in enumerate(encodings):  # only the truncated ones have overflow pieces
                if e.overflowing:
                    lengths[i] += sum(len(o.ids) - self.n_special for o in e.overflowing)
            pieces.append((ids, capped, lengths))
        return _assemble(pieces, len(texts))


class WrapperTokenizer:
    """Tokenizes through the transformers tokenizer itself (slow tokenizers, odd backends)."""

    def __init__(self, tokenizer, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.dtype = _id_dtype(len(tokenizer))

    def __call__(self, texts: Sequence[str]) -> TokenizedTexts:
        pieces = []
        for start in range(0, len(texts), CHUNK):
            chunk = list(texts[start:start + CHUNK])
            full = self.tokenizer(chunk, truncation=False, padding=False, verbose=False,
                                  return_attention_mask=False,
                                  return_token_type_ids=False)["input_ids"]
            long = [i for i, ids in enumerate(full) if len(ids) > self.max_length]
            if long:
                cut = self.tokenizer([chunk[i] for i in long], truncation=True,
                                     max_length=self.max_length, padding=False,
                                     return_attention_mask=False,
                                     return_token_type_ids=False)["input_ids"]
            kept = list(full)
            for i, ids in zip(long, cut if long else ()):
                kept[i] = ids
            capped = np.fromiter((len(ids) for ids in kept), np.int64, len(kept))
            ids = np.fromiter(itertools.chain.from_iterable(kept), self.dtype, int(capped.sum()))
            pieces.append((ids, capped, np.fromiter((len(x) for x in full), np.int64, len(full))))
        return _assemble(pieces, len(texts))


def _backend_matches(tokenizer, fast: FastTokenizer) -> bool:
    """True when the backend's ids (with a mask of ones, type ids of zeros) are exactly what
    the transformers tokenizer gives for single sentences, truncated or not."""
    for text in PROBES:
        want = tokenizer(text, truncation=True, max_length=fast.max_length)
        fast._configure()
        got = fast.backend.encode(text, add_special_tokens=True).ids
        if list(want["input_ids"]) != list(got):
            return False
        if any(v != 1 for v in want.get("attention_mask", [1])):
            return False
        if any(v != 0 for v in want.get("token_type_ids", [0])):
            return False
        untruncated = tokenizer(text, truncation=False, verbose=False)["input_ids"]
        if len(untruncated) != int(fast([text]).lengths[0]):  # the overflow arithmetic
            return False
    return True


def for_tokenizer(tokenizer, max_length: int) -> Callable[[Sequence[str]], TokenizedTexts]:
    """The fastest exact way to tokenize for ``tokenizer`` (a transformers tokenizer)."""
    reason: Optional[str] = None
    if getattr(tokenizer, "is_fast", False) and hasattr(tokenizer, "backend_tokenizer"):
        try:
            fast = FastTokenizer(tokenizer, max_length)
            if _backend_matches(tokenizer, fast):
                return fast
            reason = "its Rust backend gives other ids than the tokenizer"
        except Exception as exc:  # noqa: BLE001 - any backend quirk means: use the wrapper
            reason = f"its Rust backend cannot be used ({exc})"
    else:
        reason = "it is not a fast (Rust) tokenizer"
    log.info("tokenizing through %s: %s", type(tokenizer).__name__, reason)
    return WrapperTokenizer(tokenizer, max_length)
