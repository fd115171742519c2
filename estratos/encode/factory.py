"""The encoder behind a run: a transformers model (``--model``) or a SentEval-style batcher
(``--encoder``); both expose the stages the pipeline calls (tokenize, collate, forward)."""

from __future__ import annotations

from typing import Optional, Sequence

from estratos.errors import OptionError
from estratos.vocab import POOLINGS


def build_encoder(model: Optional[str], encoder: Optional[str], *, device: Optional[str],
                  max_length: Optional[int], lowercase: bool, poolings: Sequence[str],
                  threads: Optional[int] = None):
    """An :class:`HFEncoder` for ``model``, or a :class:`BatcherEncoder` for ``encoder``."""
    if encoder:
        from estratos.encode.batcher import POOLING, BatcherEncoder

        if model:
            raise OptionError("--encoder and --model: give one of them")
        if tuple(poolings) not in ((POOLING,), POOLINGS):
            raise OptionError(f"--pooling: an --encoder function gives one vector kind, "
                              f"stored as {POOLING!r}")
        if max_length is not None:
            raise OptionError("--max-length: not used with --encoder (the function truncates)")
        return BatcherEncoder(encoder, lowercase=lowercase)
    if not model:
        raise OptionError("--model: required (or --encoder MODULE:FUNCTION)")
    from estratos.encode.hf import HFEncoder

    return HFEncoder(model, device=device, max_length=max_length, lowercase=lowercase,
                     poolings=poolings, threads=threads)
