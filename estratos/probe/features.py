"""From cached sentence vectors to the feature matrices the probes train on.

Why here and not in the tasks: a task only says which sentences fill which slot of an example
(``SlotRefs``) and which combiner joins them; the vectors exist only at probe time, once per
layer spec. A slot may hold several sentences (an RST subtree = the mean of its EDUs), averaged
with ``np.add.reduceat`` so ragged slots cost one vectorised pass.

Combiners: single ``x``; pair ``[|x1-x2|, x1*x2]``; pair4 ``[x1, x2, x1*x2,
|x1-x2|]``; sp ``[x1, x1-x2, x1-x3, x1-x4, x1-x5]``; bso ``[x1, x2, x1-x2]``; dc ``[x1..x6]``;
rst ``[xl, xr, xl*xr, |xl-xr|]``.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import numpy as np

from estratos.tasks.types import COMBINER_SLOTS, SlotRefs, Split
from estratos.vocab import AVG, LayerSpec
from estratos.vocab import COMBINERS as COMBINER_SHAPES


def layer_matrix(vectors: np.ndarray, spec: LayerSpec) -> np.ndarray:
    """(S, L+1, D) sentence vectors -> (S, D) float32 for one layer spec."""
    if spec == AVG:
        return vectors.mean(axis=1, dtype=np.float64).astype(np.float32)
    return np.ascontiguousarray(vectors[:, int(spec), :], dtype=np.float32)


def slot_vectors(sentence_vectors: np.ndarray, refs: SlotRefs) -> np.ndarray:
    """(S, D) vectors -> (n_examples, D): each slot's sentence, or the mean of its sentences."""
    if refs.is_single:
        return sentence_vectors[refs.indices]
    gathered = sentence_vectors[refs.indices].astype(np.float64)
    sums = np.add.reduceat(gathered, refs.offsets[:-1], axis=0)
    counts = np.diff(refs.offsets).astype(np.float64)[:, None]
    return (sums / counts).astype(np.float32)


def _single(x: List[np.ndarray]) -> List[np.ndarray]:
    return [x[0]]


def _pair(x: List[np.ndarray]) -> List[np.ndarray]:
    return [np.abs(x[0] - x[1]), x[0] * x[1]]


def _pair4(x: List[np.ndarray]) -> List[np.ndarray]:
    return [x[0], x[1], x[0] * x[1], np.abs(x[0] - x[1])]


def _sp(x: List[np.ndarray]) -> List[np.ndarray]:
    return [x[0]] + [x[0] - x[i] for i in range(1, 5)]


def _bso(x: List[np.ndarray]) -> List[np.ndarray]:
    return [x[0], x[1], x[0] - x[1]]


def _dc(x: List[np.ndarray]) -> List[np.ndarray]:
    return list(x)


#: combiner name -> its algebra (the parts it joins); the combiners' shapes (slots, width)
#: are :data:`estratos.vocab.COMBINERS`
COMBINER_FUNCTIONS: Dict[str, Callable[[List[np.ndarray]], List[np.ndarray]]] = {
    "single": _single, "pair": _pair, "pair4": _pair4, "sp": _sp, "bso": _bso, "dc": _dc,
    "rst": _pair4,  # [xl, xr, xl*xr, |xl-xr|] over subtree means: same algebra as pair4
}
#: how many sentence-vector widths each combiner's output spans
COMBINER_WIDTH: Dict[str, int] = {c.name: c.width for c in COMBINER_SHAPES.values()}


def combine(combiner: str, slots: Sequence[np.ndarray]) -> np.ndarray:
    """Join per-slot vectors ``(n, D)`` into features ``(n, F)`` with a named combiner (an
    unknown name is the combiner registry's :class:`~estratos.errors.TaskError`)."""
    COMBINER_SHAPES.get(combiner)
    if len(slots) != COMBINER_SLOTS[combiner]:
        raise ValueError(f"combiner {combiner} takes {COMBINER_SLOTS[combiner]} slots, "
                         f"got {len(slots)}")
    parts = COMBINER_FUNCTIONS[combiner]([np.asarray(s, dtype=np.float32) for s in slots])
    return np.concatenate(parts, axis=1)


def split_features(sentence_vectors: np.ndarray, split: Split, combiner: str) -> np.ndarray:
    """Features ``(n_examples, F)`` of one split from one layer's ``(S, D)`` vectors."""
    return combine(combiner, [slot_vectors(sentence_vectors, refs) for refs in split.slots])


def build_features(vectors: np.ndarray, layers: Sequence[LayerSpec], split: Split,
                   combiner: str) -> np.ndarray:
    """``(S, L+1, D)`` cached vectors -> ``(len(layers), n_examples, F)`` float32 features."""
    n, d = len(split), vectors.shape[2]
    out = np.empty((len(layers), n, COMBINER_WIDTH[combiner] * d), dtype=np.float32)
    for g, spec in enumerate(layers):
        out[g] = split_features(layer_matrix(vectors, spec), split, combiner)
    return out
