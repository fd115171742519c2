"""The encoder behind a run: a transformers model (``--model``) or a SentEval-style batcher
(``--encoder``); both expose the stages the pipeline calls (tokenize, collate, forward)."""

from __future__ import annotations

from typing import Any

from estratos.encode.config import EncodeConfig


def build_encoder(config: EncodeConfig) -> Any:
    """An :class:`HFEncoder` for ``config.model``, or a :class:`BatcherEncoder` for
    ``config.encoder`` (the config has checked that exactly one is given)."""
    if config.encoder is not None:
        from estratos.encode.models.batcher import BatcherEncoder

        return BatcherEncoder(config.encoder, lowercase=config.lowercase)
    from estratos.encode.models.hf import HFEncoder

    return HFEncoder(config)
