"""What a cache's model architecture means for its vectors: encoder or decoder-only.

Why in the cache: encode records the architecture when it writes a cache
(``architecture``: :data:`ENCODER` or :data:`DECODER`) and the probes read it back from the
cache alone (``cls`` is refused on a decoder's cache, raw features draw a warning), so the
fact and its one message live where both stages meet; the probes never import the encoder.

Why ``cls`` is no sentence vector of a decoder-only (causal) model: position 0 attends only to
itself (docs/encode.md, "What is stored"), so :func:`cls_refusal` is the one error for it,
raised by encode (``--pooling``) and by probe alike.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from estratos.errors import OptionError

#: values of the cache attribute ``architecture``
ENCODER, DECODER = "encoder", "decoder"


def decoder_only_type(model_type: str, architectures: Sequence[str] = ()) -> bool:
    """Whether a transformers model type (and its architecture names), as a cache records
    them, is a decoder-only (causal) language model.

    transformers lists every model type with a causal-LM head and every one with a masked-LM
    head; an encoder (BERT, RoBERTa, XLM-R, ELECTRA) has a masked-LM head even when it also
    offers a causal one, a decoder-only model has only the causal one. Remote-code models
    unknown to those lists are judged by their ``architectures`` names."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return False
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return True
    names = [str(a) for a in architectures]
    causal = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in names)
    return causal and not any(a.endswith("ForMaskedLM") for a in names)


def cache_is_decoder(attrs: Mapping[str, Any]) -> bool:
    """Whether a cache's vectors come from a decoder-only model: its ``architecture``
    attribute, as :func:`estratos.cache.schema.read_attrs` gives it (an older cache's
    migration tells it from the recorded ``model_type``)."""
    return attrs.get("architecture") == DECODER


def cls_refusal(model: str, where: str = "--pooling") -> OptionError:
    """The error for ``cls`` on a decoder-only model, saying why (encode and probe)."""
    return OptionError(
        f"{where}: cls is not a sentence vector of {model}, a decoder-only (causal) model: "
        "position 0 attends only to itself. With a BOS token its state is the same for every "
        "sentence; without one (GPT-2, Qwen2, SmolLM2 tokenizers add none) it is the first "
        "word's state, which has seen only that word and nothing after it. Use last (the last "
        "real token, which has seen the whole sentence) or mean")


__all__ = ["DECODER", "ENCODER", "cache_is_decoder", "cls_refusal", "decoder_only_type"]
