"""Sentence vectors from a transformer's hidden states, and which of them fit which model.

Why poolings depend on the architecture (docs/encode.md, "What is stored"):
- in an encoder every position attends to the whole sentence, so position 0 (``cls``: [CLS],
  ``<s>``) can summarise it; in a decoder-only (causal) model position 0 sees only itself, so
  its state is the same vector for every sentence. Decoders get ``last`` instead: the state of
  the last real token, the only one that has seen the whole sentence;
- ``mean`` averages the real tokens (padding excluded, special tokens included). In a decoder
  the first token's state is the "attention sink" with huge values that would dominate the
  mean, whether it is a BOS token or, for tokenizers that add none (GPT-2, Qwen2, SmolLM2),
  the first word; so a decoder's mean leaves its first token out by default
  (``--mean-first-token``, recorded in the cache as ``mean_first_token``); an input whose
  only token is the first keeps it. Inside a prompt (``--prompt``) ``mean`` averages the
  sentence's own tokens only.

Every pooling here is computed in float32 from the positions the attention mask marks as
real, wherever the padding is (right or left), so a sentence's vector does not depend on the
batch it was padded in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from estratos.cache.architecture import cls_refusal, decoder_only_type
from estratos.errors import OptionError
from estratos.registry import Registry
from estratos.vocab import (
    DECODER_DEFAULT_POOLINGS,
    ENCODER_DEFAULT_POOLINGS,
    MEAN_FIRST_DEFAULT,
    POOLINGS,
)

if TYPE_CHECKING:  # torch is imported where vectors are computed, not to check options
    import torch

def is_decoder_only(config: object) -> bool:
    """True for a causal (decoder-only) language model such as GPT-2, Llama, Qwen or Gemma:
    a BERT-style config with ``is_decoder`` set runs causally; otherwise its model type and
    architecture names decide (:func:`estratos.cache.architecture.decoder_only_type`, the rule
    a cache's recorded model type is read by too)."""
    if getattr(config, "is_encoder_decoder", False):
        return False
    if getattr(config, "is_decoder", False):
        return True
    model_type = str(getattr(config, "model_type", "") or "")
    return decoder_only_type(model_type, tuple(getattr(config, "architectures", None) or ()))


def resolve_poolings(poolings: Optional[Sequence[str]], *, decoder: bool,
                     model: str) -> Tuple[str, ...]:
    """The poolings to store for this architecture: ``poolings`` (names checked by
    :class:`~estratos.encode.config.EncodeConfig`), or the architecture's default; ``cls``
    is refused on a decoder, whose first position sees only itself."""
    if not poolings:
        return DECODER_DEFAULT_POOLINGS if decoder else ENCODER_DEFAULT_POOLINGS
    chosen = tuple(dict.fromkeys(poolings))
    if decoder and "cls" in chosen:
        raise cls_refusal(model)
    return chosen


def mean_first_policy(choice: str, *, decoder: bool) -> str:
    """``--mean-first-token`` resolved for the architecture: ``skip`` or ``keep``.

    ``auto``: a decoder skips its first token (:data:`~estratos.vocab.MEAN_FIRST_DEFAULT`),
    an encoder keeps it. Skipping is refused on an encoder: its first token ([CLS], ``<s>``)
    attends to the whole sentence and is part of the mean its own pooling computes.
    """
    if choice == "auto":
        return MEAN_FIRST_DEFAULT if decoder else "keep"
    if choice == "skip" and not decoder:
        raise OptionError("--mean-first-token skip: only for decoder-only models; an encoder's "
                          "first token attends to the whole sentence and stays in its mean")
    return choice


def pool(hidden: Sequence[torch.Tensor], mask: torch.Tensor, poolings: Sequence[str], *,
         mean_mask: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
    """``{pooling: (B, n_states, dim) float32}`` from every hidden state ``(B, T, dim)``.

    ``mask`` (B, T) marks the real tokens, on either side of the padding. ``mean_mask``
    (B, T): the positions ``mean`` averages (default: ``mask``), e.g. without a decoder's
    first token or a prompt's tokens; a row it leaves empty falls back to ``mask``. Hidden
    states may live on several devices (``--device-map``): each is pooled where it is and
    the result moved to ``mask``'s device.
    """
    import torch

    device = mask.device
    real = mask.to(torch.bool)
    batch, width = real.shape
    positions = torch.arange(width, device=device).expand(batch, width)
    first = torch.where(real, positions, width).min(dim=1).values.clamp(max=width - 1)
    last = torch.where(real, positions, -1).max(dim=1).values.clamp(min=0)
    weights = real.to(torch.float32)
    if mean_mask is not None and "mean" in poolings:
        chosen = weights * mean_mask.to(device=device, dtype=torch.float32)
        weights = torch.where(chosen.sum(dim=1, keepdim=True) > 0, chosen, weights)
    weights = weights.unsqueeze(1)  # (B, 1, T)
    counts = weights.sum(dim=2).clamp(min=1.0)  # (B, 1)

    where = _Positions(hidden, first, last, weights, counts, device)
    pooled: Dict[str, torch.Tensor] = {}
    for name in poolings:
        pooled[name] = torch.stack(POOLERS.get(name)(where), dim=1)
    return pooled


class _Positions:
    """What each pooling reads from one batch: its hidden states, each row's first and last
    real position, the weights ``mean`` gives each position and their sums, and the device
    the pooled vectors go to."""

    def __init__(self, hidden: Sequence[torch.Tensor], first: torch.Tensor,
                 last: torch.Tensor, weights: torch.Tensor, counts: torch.Tensor,
                 device: torch.device) -> None:
        self.hidden, self.first, self.last = hidden, first, last
        self.weights, self.counts, self.device = weights, counts, device

    def gather(self, index: torch.Tensor) -> List[torch.Tensor]:
        """Each state's vector at position ``index[b]`` of row b, in float32."""
        import torch

        out = []
        for h in self.hidden:
            at = index.to(h.device)
            out.append(h[torch.arange(len(at), device=h.device), at].float().to(self.device))
        return out


def _cls(at: _Positions) -> List[torch.Tensor]:
    """The first real token's state (an encoder's [CLS] / ``<s>``)."""
    return at.gather(at.first)


def _last(at: _Positions) -> List[torch.Tensor]:
    """The last real token's state (a decoder's only position that saw the whole input)."""
    return at.gather(at.last)


def _mean(at: _Positions) -> List[torch.Tensor]:
    """The weighted mean over positions: padding (and positions ``mean_mask`` leaves out)
    weigh 0."""
    import torch

    out = []
    for h in at.hidden:
        w = at.weights.to(h.device)
        out.append((torch.bmm(w, h.float()).squeeze(1) / at.counts.to(h.device)).to(at.device))
    return out


#: how each pooling is computed, under the names and in the order
#: :data:`~estratos.vocab.POOLINGS` declares (a declared registry: a pooling named there
#: without a computation here, or the reverse, fails when this module is imported)
POOLERS: Registry[Callable[[_Positions], List[torch.Tensor]]] = Registry(
    "pooling", {"cls": _cls, "mean": _mean, "last": _last}, names=POOLINGS)

