"""Conditional probing (``probe --given B``): what a layer adds to a baseline B, in bits.

Why: a probe's V-information says how much of the label a classifier reads from a layer R,
not how much of it R adds to what a simpler representation already gives (the embedding
layer, the layer below, sentence length). Hewitt, Ethayarajh, Liang & Manning (EMNLP 2021)
answer with two probes of one family: one trained on B alone, one on the concatenation
[B; R]; the layer's conditional V-information is ``H(Y|B) - H(Y|B,R)``
(:func:`estratos.protocols.information.conditional`).

Both probes are trained by the task's protocol with the run's estimator and its feature
reading (``--features standardized`` standardizes every column on the training split, B's
and R's alike), and both choose their L2 the same way: by dev cross-entropy from
:data:`~estratos.vocab.CONDITIONAL_L2_GRID` (the vocabulary says why not SentEval's rule of
dev accuracy on its grid), so tasks without a dev split of their own (k-fold protocols) are
refused. The B-alone probes of one program train first, once per distinct B (a fixed B is
shared by every layer, ``prev`` is one per layer). What B can be:

- a hidden-state index or ``avg`` of the same cache (its vectors go through the task's
  combiner like the layer's);
- ``prev``: the stored hidden state below each probed one (with ``encode --states``, the
  previous stored state); layer 0 and ``avg`` have none;
- a surface baseline (:data:`estratos.vocab.SURFACE_BASELINES`): its features fitted on the
  protocol's training split (:func:`estratos.probe.baseline.given_features`), made dense.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from estratos.errors import OptionError
from estratos.protocols import CellOutcome
from estratos.protocols.information import conditional
from estratos.vocab import (
    ALL_LAYERS,
    AVG,
    GIVEN_PREVIOUS,
    SELECT_CROSS_ENTROPY,
    SURFACE_BASELINES,
    LayerSpec,
)


@dataclass(frozen=True)
class GivenFeatures:
    """B for one program of conditional cells: ``features(split)`` gives the distinct B
    groups' example features ``(n_given, n, F_B)``; ``of_group[i]`` is the group the i-th
    probed layer spec is given; ``layers[j]`` is the j-th group's layer spec (None: a
    surface baseline's features)."""

    name: str
    features: Callable[[str], np.ndarray]
    of_group: Tuple[int, ...]
    layers: Tuple[Optional[LayerSpec], ...]


def is_baseline(given: str) -> bool:
    """Whether ``--given`` names a surface baseline (else a layer spec of the cache)."""
    return given in SURFACE_BASELINES


def given_layer(given: str, layer: LayerSpec, stored: Sequence[int]) -> Optional[LayerSpec]:
    """The layer spec that ``layer`` is given under ``--given`` (None: a surface baseline,
    or ``prev`` of a layer with none below). ``stored``: the cache's hidden states."""
    if is_baseline(given):
        return None
    if given == GIVEN_PREVIOUS:
        if layer == AVG:
            return None
        below = [s for s in stored if s < int(layer)]
        return below[-1] if below else None
    return AVG if given == AVG else int(given)


def given_layers(given: str, layers: Sequence[LayerSpec], requested: object,
                 n_states: int, stored: Sequence[int]) -> Tuple[LayerSpec, ...]:
    """The layer specs a ``--given`` run probes, checked against the cache: a given hidden
    state the cache lacks is an :class:`OptionError` naming ``--given``; under ``prev``,
    layer specs with no stored state below (0, ``avg``) are left out of ``--layers all``
    and refused when asked for by name (``requested``: the ``--layers`` value)."""
    fixed_state = not is_baseline(given) and given not in (AVG, GIVEN_PREVIOUS)
    if fixed_state and (int(given) >= n_states or int(given) not in stored):
        raise OptionError(f"--given: hidden state {given} is not in the cache: it stores "
                          f"{', '.join(map(str, stored))} and {AVG}")
    if given != GIVEN_PREVIOUS:
        return tuple(layers)
    kept = tuple(layer for layer in layers if given_layer(given, layer, stored) is not None)
    left = [str(layer) for layer in layers if layer not in kept]
    if left and requested != ALL_LAYERS:
        raise OptionError(f"--given {GIVEN_PREVIOUS}: layer spec(s) {', '.join(left)} have no "
                          "stored hidden state below them; leave them out of --layers")
    if not kept:
        raise OptionError(f"--given {GIVEN_PREVIOUS}: no layer spec of --layers has a stored "
                          "hidden state below it")
    return kept


def group_given(given: str, layers: Sequence[LayerSpec], stored: Sequence[int]
                ) -> Tuple[Tuple[Optional[LayerSpec], ...], Tuple[int, ...]]:
    """``(distinct B layer specs, index of each probed layer's B)`` for a layer-spec
    ``--given`` (a baseline: one group, ``(None,)``)."""
    distinct: List[Optional[LayerSpec]] = []
    index: Dict[Optional[LayerSpec], int] = {}
    of_group = []
    for layer in layers:
        b = given_layer(given, layer, stored)
        if b not in index:
            index[b] = len(distinct)
            distinct.append(b)
        of_group.append(index[b])
    return tuple(distinct), tuple(of_group)


def add_given(outcome: CellOutcome, alone: CellOutcome, layer: Optional[LayerSpec]) -> None:
    """Give a probe-on-[B; R] ``outcome`` what the probe on B ``alone`` scored: its
    per-example log2-probabilities (``given_log2p``) and the ``conditional`` record
    (``extra["conditional"]``: the given layer spec when B is one, H(Y|B), H(Y|B,R), the gain,
    B's own test metrics and L2, and how both L2 were chosen)."""
    if outcome.gold_log2p is None or alone.gold_log2p is None:
        raise OptionError("--given: the classifier gives no class probabilities, so no "
                          "cross-entropy (use senteval or lbfgs)")
    outcome.given_log2p = alone.gold_log2p
    record: Dict[str, object] = {} if layer is None else {"given_layer": layer}
    record.update(conditional(outcome.gold_log2p, alone.gold_log2p))
    record["given_test"] = dict(alone.test)
    record["given_l2"] = alone.l2
    record["selection"] = SELECT_CROSS_ENTROPY
    outcome.extra["conditional"] = record


__all__ = ["GivenFeatures", "add_given", "given_layer", "given_layers", "group_given",
           "is_baseline"]
