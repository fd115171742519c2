"""Sentence normalization and the stable key that identifies a sentence everywhere.

The cache is a sentence -> vectors store shared by all tasks, so encode (which writes rows)
and probe (which looks them up) must agree on what "the same sentence" means. Both call
:func:`normalize_sentence` and :func:`sentence_key`; nothing else may build keys.

Normalization is deliberately light, so the model sees the text as published: Unicode NFC
(the same characters typed two ways become one sentence) and stripped surrounding whitespace.
Case, punctuation and inner spacing are kept.

:func:`surface_length` is what a sentence's length means for the length baselines
(``estratos baseline``) and for the synthetic tasks built to give length away to none.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Tuple

KEY_BYTES = 16


def normalize_sentence(text: str) -> str:
    """NFC-normalize and strip surrounding whitespace."""
    return unicodedata.normalize("NFC", text).strip()


def sentence_key(text: str) -> bytes:
    """First 16 bytes of sha256 of the normalized sentence's UTF-8 (stable across runs)."""
    return hashlib.sha256(normalize_sentence(text).encode("utf-8")).digest()[:KEY_BYTES]


def surface_length(text: str) -> Tuple[int, int]:
    """(whitespace tokens, characters) of a sentence as given: ``len(text.split())`` and
    ``len(text)`` (Unicode code points, spaces included)."""
    return len(text.split()), len(text)
