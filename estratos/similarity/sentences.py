"""Which sentences a similarity or geometry run reads, and where each cache holds them.

Why by key: two caches hold their rows in the order they were encoded, so rows are joined
through :func:`estratos.text.sentence_key` (the one way to key a sentence), never by
position; a cache that lacks some of the sentences is refused with the count and the
``estratos encode`` command that adds them. The set is sorted by key, so its digest and
its seeded subsample do not depend on the order the tasks listed the sentences in.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from estratos.commandline import Command, task_options
from estratos.encode.config import options_for_cache
from estratos.errors import MissingSentences, OptionError
from estratos.optiontable import OptionPair
from estratos.text import normalize_sentence, sentence_key

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class SentenceSet:
    """Unique normalized sentences sorted by key, their digest and the words that name them
    on a command line as options (for the ``encode`` hint)."""

    sentences: List[str]
    digest: str
    source: Tuple[OptionPair, ...]

    def __len__(self) -> int:
        return len(self.sentences)

    def subsample(self, size: int, seed: int) -> np.ndarray:
        """Positions (sorted) of a seeded sample of ``size`` sentences (all when fewer)."""
        n = len(self.sentences)
        if size >= n:
            return np.arange(n)
        return np.sort(np.random.default_rng(seed).choice(n, size, replace=False))


def select_sentences(sentences_file: Optional[PathLike] = None, tasks: Optional[str] = None,
                     data_dirs: Sequence[str] = (), task_files: Sequence[str] = ()
                     ) -> SentenceSet:
    """``--sentences FILE`` or ``--tasks``/``--task-file`` (exactly one, as for encode:
    :func:`estratos.encode.inputs.gather_sentences`) -> a :class:`SentenceSet`."""
    from estratos.encode.inputs import gather_sentences

    raw = gather_sentences(sentences_file, tasks, data_dirs, task_files)
    keyed: Dict[bytes, str] = {}
    for s in raw:
        text = normalize_sentence(s)
        if text:
            keyed.setdefault(sentence_key(text), text)
    if not keyed:
        which = "--sentences" if sentences_file is not None else "--tasks"
        raise OptionError(f"{which}: no sentences to compare")
    keys = sorted(keyed)
    digest = hashlib.sha256(b"".join(keys)).hexdigest()[:16]
    source = ([("--sentences", os.fspath(sentences_file))] if sentences_file is not None
              else task_options(tasks, task_files, data_dirs))
    return SentenceSet([keyed[k] for k in keys], digest, tuple(source))


def cache_rows(reader: Any, sentences: SentenceSet) -> np.ndarray:
    """Each sentence's row in the cache ``reader``; a cache lacking any is refused with the
    count and the ``estratos encode`` command that adds them (nothing is joined by
    position)."""
    have = reader.contains(sentences.sentences)
    missing = int((~have).sum())
    if missing:
        command = Command.of("encode", options_for_cache(reader.attrs), sentences.source,
                             [("--out", str(reader.path))])
        raise MissingSentences(
            f"{reader.path}: {missing} of the {len(sentences)} sentences are not in this "
            f"cache; add them with: {command.shell()}", missing=missing)
    return reader.rows_for(sentences.sentences)


__all__ = ["SentenceSet", "cache_rows", "select_sentences"]
