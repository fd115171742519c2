"""The sentences of a run as cache keys: normalized, non-blank, each key once, and which
shard of a cluster array each key belongs to.

Keys come from :func:`estratos.text.sentence_key` (the only way to key a sentence); the
digest of all keys identifies the full input of a sharded run, so merge can tell shards of
one input from shards of another. The shard of a key depends on the key alone
(:func:`in_shard`), so every array task agrees on it without talking to the others.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, List, Tuple

from estratos.errors import InputError
from estratos.text import normalize_sentence, sentence_key


def dedupe_sentences(sentences: Iterable[str]) -> Tuple[List[str], List[bytes], int]:
    """``(texts, keys, n_input)`` of encode's input: normalized, non-blank, the first
    occurrence of each key (a task selection's sentences are
    :func:`estratos.tasks.unique_sentences`)."""
    texts, keys, seen, n_input = [], [], set(), 0
    for raw in sentences:
        if not isinstance(raw, str):
            raise InputError(f"sentence {n_input + 1} is {type(raw).__name__}, not str")
        text = normalize_sentence(raw)
        if not text:
            continue
        n_input += 1
        key = sentence_key(text)
        if key not in seen:
            seen.add(key)
            texts.append(text)
            keys.append(key)
    return texts, keys, n_input


def input_digest(keys: Iterable[bytes]) -> str:
    """sha256 over the sorted keys: identifies the full input of a sharded run."""
    h = hashlib.sha256()
    for k in sorted(keys):
        h.update(k)
    return h.hexdigest()


def in_shard(key: bytes, shard: Tuple[int, int]) -> bool:
    """Whether ``key`` belongs to shard ``(index, count)`` (``--shard I/N``)."""
    return int.from_bytes(key[:8], "big") % shard[1] == shard[0]
