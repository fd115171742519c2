"""The encoder behind a run: a transformers model (``--model``) or a SentEval-style batcher
(``--encoder``); both expose the stages the pipeline calls (tokenize, collate, forward)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from estratos.errors import OptionError


def build_encoder(model: Optional[str], encoder: Optional[str], *, device: Optional[str],
                  max_length: Optional[int], lowercase: bool,
                  poolings: Optional[Sequence[str]], threads: Optional[int] = None,
                  **model_options: Any):
    """An :class:`HFEncoder` for ``model``, or a :class:`BatcherEncoder` for ``encoder``.
    ``poolings`` None: the model's default. ``model_options``: how the model is loaded
    (``model_dtype``, ``device_map``, ``trust_remote_code``, ``random_init``; see
    :class:`HFEncoder`)."""
    if encoder:
        from estratos.encode.models.batcher import POOLING, BatcherEncoder

        if model:
            raise OptionError("--encoder and --model: give one of them")
        given = [k for k, v in model_options.items() if v not in (None, False, "auto")]
        if given:
            raise OptionError(f"--{given[0].replace('_', '-')}: only for --model (an --encoder "
                              "function loads its own model)")
        if poolings and tuple(poolings) != (POOLING,):
            raise OptionError(f"--pooling: an --encoder function gives one vector kind, "
                              f"stored as {POOLING!r}")
        if max_length is not None:
            raise OptionError("--max-length: not used with --encoder (the function truncates)")
        return BatcherEncoder(encoder, lowercase=lowercase)
    if not model:
        raise OptionError("--model: required (or --encoder MODULE:FUNCTION)")
    from estratos.encode.models.hf import HFEncoder

    return HFEncoder(model, device=device, max_length=max_length, lowercase=lowercase,
                     poolings=poolings, threads=threads, **model_options)
