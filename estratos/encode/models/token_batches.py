"""Length-sorted, token-budget batches.

Sorting by token length means each batch pads to nearly its own length, and a token budget
(batch size x padded length <= ``batch_tokens``) keeps memory flat whether sentences are short
or long. Attention scores grow with the square of the length, so long batches also obey
batch size x length^2 <= ``batch_tokens`` x :data:`ATTENTION_SPAN` (binding only above that
many tokens: e.g. 4 sentences of 512 tokens instead of 16 with the default budget). Longest
first, so an out-of-memory error shows up in the first batch, not at the end.
The plan depends only on the sentences and settings, so a resumed run makes the same batches.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

#: length from which the quadratic (attention) budget binds before the linear one
ATTENTION_SPAN = 128


def length_order(lengths: Sequence[int], keys: Sequence[bytes]) -> np.ndarray:
    """Indices sorted by decreasing length, ties broken by key (deterministic)."""
    length = np.asarray(lengths, dtype=np.int64)
    tie = np.argsort(np.asarray(keys, dtype=object), kind="stable")
    rank = np.empty(len(tie), dtype=np.int64)
    rank[tie] = np.arange(len(tie))
    return np.lexsort((rank, -length))


def token_budget_batches(sorted_lengths: Sequence[int], batch_tokens: int,
                         max_batch: int = 4096) -> List[Tuple[int, int]]:
    """``(start, stop)`` ranges over lengths sorted in decreasing order.

    A batch's cost is its size times its first (longest) length, and for long sentences its
    size times that length squared (see the module docstring); a sentence longer than the
    budget gets a batch of its own.
    """
    if batch_tokens < 1:
        raise ValueError("batch_tokens must be >= 1")
    lengths = np.asarray(sorted_lengths, dtype=np.int64)
    out = []
    start, n = 0, len(lengths)
    while start < n:
        longest = max(int(lengths[start]), 1)
        by_attention = (batch_tokens * ATTENTION_SPAN) // (longest * longest)
        size = max(1, min(batch_tokens // longest, by_attention, max_batch, n - start))
        out.append((start, start + size))
        start += size
    return out
