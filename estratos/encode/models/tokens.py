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
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

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
    before truncation (what sorting uses); ``truncated`` whether it was cut. ``mean_start[i]``
    and ``mean_stop[i]``: the positions ``mean`` averages (None: all of them), e.g. the
    sentence's own tokens inside a prompt, or all but the first token of a decoder.
    """

    ids: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    mean_start: Optional[np.ndarray] = None
    mean_stop: Optional[np.ndarray] = None

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
                              self.lengths[index].copy(),
                              None if self.mean_start is None else self.mean_start[index].copy(),
                              None if self.mean_stop is None else self.mean_stop[index].copy())

    def mean_span(self) -> tuple:
        """``(start, stop)`` per sentence: the positions ``mean`` averages."""
        start = np.zeros(len(self), np.int64) if self.mean_start is None else self.mean_start
        stop = self.capped if self.mean_stop is None else self.mean_stop
        return start, stop

    def skip_first(self) -> "TokenizedTexts":
        """The same sentences with position 0 left out of ``mean`` wherever the span starts
        there and holds another token (a decoder's first token, the attention sink)."""
        start, stop = self.mean_span()
        start = np.where((start == 0) & (stop > 1), 1, start)
        return TokenizedTexts(self.ids, self.offsets, self.lengths, start, stop.copy())

    def mean_mask(self, rows: Union[Sequence[int], np.ndarray], width: int) -> np.ndarray:
        """(B, width) int64: 1 where ``mean`` reads a position of the sentences ``rows``
        (padded on the right as :meth:`padded` pads them)."""
        index = np.asarray(rows, dtype=np.int64)
        start, stop = self.mean_span()
        pos = np.arange(width)[None, :]
        return ((pos >= start[index][:, None]) & (pos < stop[index][:, None])).astype(np.int64)

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


class PromptTokenizer:
    """Tokenizes each sentence inside a prompt, ``prefix + sentence + suffix``, and records
    which tokens are the sentence's (``mean`` averages those; ``last`` reads the prompt's last
    token). The sentence's tokens are found from the character offsets of the Rust tokenizer:
    every non-special token that overlaps the sentence's characters (a token merged across
    the boundary, such as a final period and a closing quote, counts as the sentence's).
    Too long a prompted sentence loses tokens from the end of the sentence, never from the
    prompt, so the prompt's last token is always there.
    """

    def __init__(self, tokenizer, max_length: int, prefix: str, suffix: str,
                 add_special_tokens: bool) -> None:
        from estratos.errors import OptionError

        if not (getattr(tokenizer, "is_fast", False) and hasattr(tokenizer, "backend_tokenizer")):
            raise OptionError(f"--prompt: {type(tokenizer).__name__} is not a fast (Rust) "
                              "tokenizer, which is needed to tell the sentence's tokens from "
                              "the prompt's")
        self.backend = tokenizer.backend_tokenizer
        self.max_length = max_length
        self.prefix, self.suffix = prefix, suffix
        self.special = bool(add_special_tokens)
        self.dtype = _id_dtype(self.backend.get_vocab_size(with_added_tokens=True))
        probe = self._one("x")
        if probe is None:
            raise OptionError("--prompt: the tokenizer gives the sentence no token of its own "
                              f"in {prefix + '{}' + suffix!r}")
        _, (a, b) = probe
        overhead = len(probe[0]) - (b - a)
        if overhead + 1 > max_length:
            raise OptionError(f"--prompt: the prompt alone takes {overhead} tokens, which leaves "
                              f"no room for the sentence within --max-length {max_length}")

    def _one(self, text: str):
        """``(ids, (start, stop))`` of one prompted sentence, untruncated (None: the sentence
        has no token of its own)."""
        return self._spans([text])[0]

    def _spans(self, texts: Sequence[str]) -> list:
        self.backend.no_padding()
        self.backend.no_truncation()
        full = [self.prefix + t + self.suffix for t in texts]
        encodings = self.backend.encode_batch(full, add_special_tokens=self.special)
        lo = len(self.prefix)
        out: List[Optional[Tuple[Any, Tuple[int, int]]]] = []
        for text, e in zip(texts, encodings):
            hi = lo + len(text)
            offsets = np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2)
            special = np.asarray(e.special_tokens_mask, dtype=bool)
            inside = np.flatnonzero((offsets[:, 1] > lo) & (offsets[:, 0] < hi) & ~special)
            if not len(inside):
                out.append(None)
                continue
            out.append((e.ids, (int(inside[0]), int(inside[-1]) + 1)))
        return out

    def __call__(self, texts: Sequence[str]) -> TokenizedTexts:
        from estratos.errors import InputError

        pieces, starts, stops = [], [], []
        for chunk_start in range(0, len(texts), CHUNK):
            chunk = list(texts[chunk_start:chunk_start + CHUNK])
            kept, capped, lengths = [], [], []
            for text, got in zip(chunk, self._spans(chunk)):
                if got is None:
                    raise InputError(f"--prompt: the sentence {text[:60]!r} gets no token of "
                                     "its own inside the prompt")
                ids, (a, b) = got
                n = len(ids)
                lengths.append(n)
                if n > self.max_length:  # cut the sentence's end, keep the prompt
                    keep = self.max_length - (n - (b - a))
                    ids = list(ids[:a + keep]) + list(ids[b:])
                    b = a + keep
                kept.append(ids)
                capped.append(len(ids))
                starts.append(a)
                stops.append(b)
            ids = np.fromiter(itertools.chain.from_iterable(kept), self.dtype, int(sum(capped)))
            pieces.append((ids, np.asarray(capped, np.int64), np.asarray(lengths, np.int64)))
        out = _assemble(pieces, len(texts))
        out.mean_start = np.asarray(starts, np.int64)
        out.mean_stop = np.asarray(stops, np.int64)
        return out
