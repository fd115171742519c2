"""MDL probing: the online code length of a cell's training labels (``probe --mdl``).

Why: two layers whose accuracies tie may still differ in how *easily* a probe finds the
labels in them. Voita & Titov (2020, "Information-Theoretic Probing with Minimum Description
Length") measure that with the online (prequential) code: order the training examples
randomly; send the first block with the uniform code (log2 K bits a label); then, for each
later block, train the probe on everything sent so far and send the block's labels with
that model's probabilities (-log2 p bits each). The total is the online code length; the
uniform code sends all n labels at n log2 K bits; their ratio is the compression (about 1:
the labels are not in the representation any more than chance; large: a probe recovers
them from few examples).

Blocks: the standard prefixes of 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50 and 100 %
of the training examples (:data:`BLOCK_FRACTIONS`; each at least one example, repeats
dropped on small sets). Each block model is the cell's own probe (same classifier settings,
the L2 the protocol chose for the cell, the cell's seed) early-stopping on the protocol's dev
data (:meth:`estratos.protocols.Protocol.code_data`). The block models of a cell are
independent, so they are trained together as streams of one batched program
(:meth:`estratos.probe.estimators.classifiers.SentEvalClassifier.fit_subsets`), for every
layer spec of the program at once; each equals the model trained alone on its block up to
float rounding.
The example order is drawn from ``(seed, MDL_STREAM)``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from estratos.protocols.estimators import n_groups

#: the training shares of Voita & Titov's blocks
BLOCK_FRACTIONS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)
#: keeps the MDL example order apart from every other use of the seed
MDL_STREAM = 0x3D1
_LN2 = math.log(2.0)


def block_ends(n: int, fractions: Sequence[float] = BLOCK_FRACTIONS) -> List[int]:
    """Sizes of the transmitted prefixes for ``n`` examples (increasing, the last = n)."""
    if n < 1:
        raise ValueError("an online code needs at least one training example")
    ends = sorted({min(n, max(1, int(round(f * n)))) for f in fractions} | {n})
    return ends


def code_order(n: int, seed: int) -> np.ndarray:
    """The random order in which the training examples are transmitted."""
    return np.random.default_rng((int(seed), MDL_STREAM)).permutation(n)


def label_code_bits(labels: Sequence[int], ends: Sequence[int], n_classes: int) -> float:
    """The online code length of ``labels`` (in transmission order) that ignores the
    features: the first block uniform, each later block with the add-one label frequencies
    of the labels sent before it (the MDL floor, module docstring)."""
    y = np.asarray(labels, dtype=np.int64)
    k = max(2, int(n_classes))
    bits = ends[0] * math.log2(k) if n_classes > 1 else 0.0
    for start, stop in itertools.pairwise(ends):
        counts = np.bincount(y[:start], minlength=k).astype(np.float64)
        p = (counts + 1.0) / (start + k)
        bits -= float(np.log2(p[y[start:stop]]).sum())
    return bits


def online_code(ends: Sequence[int], n_classes: int, block_bits: Sequence[float],
                floor_bits: Optional[float] = None) -> Dict[str, Any]:
    """The record's ``mdl`` object from the bits of each later block.

    ``block_bits[i]`` is the code length of examples ``ends[i]..ends[i+1]`` under the model
    trained on the first ``ends[i]``; the first block is sent uniformly. ``floor_bits``: the
    labels-only code length (:func:`label_code_bits`), recorded with the compression over it
    when given."""
    if len(block_bits) != len(ends) - 1:
        raise ValueError("one code length per block after the first")
    per_label = math.log2(n_classes) if n_classes > 1 else 0.0
    first = ends[0] * per_label
    bits = [first] + [float(b) for b in block_bits]
    online = float(sum(bits))
    uniform = ends[-1] * per_label
    out: Dict[str, Any] = {
        "online_bits": round(online, 3), "uniform_bits": round(uniform, 3),
        "compression": round(uniform / online, 4) if online > 0 else 1.0}
    if floor_bits is not None:
        out["floor_bits"] = round(float(floor_bits), 3)
        out["floor_compression"] = (round(float(floor_bits) / online, 4) if online > 0
                                    else 1.0)
    out["blocks"] = [int(e) for e in ends]
    out["block_bits"] = [round(b, 3) for b in bits]
    return out


def online_codes(template: Any, train: Any, dev: Any, l2: Sequence[float], seed: int,
                 n_classes: int) -> List[Dict[str, Any]]:
    """The ``mdl`` object of each feature group (layer spec) of ``train = (X, y)``.

    ``template``: the cell's estimator (cloned; it must have ``fit_subsets`` and
    ``log_proba``, as :class:`~estratos.probe.estimators.classifiers.SentEvalClassifier` does);
    ``dev = (X_dev, y_dev)`` its early-stopping data; ``l2``: the L2 chosen for each group.
    """
    X, y = train
    X_dev, y_dev = dev
    y = np.asarray(y, dtype=np.int64)
    X = np.asarray(X, dtype=np.float32)
    G, n = n_groups(X), len(y)
    ends = block_ends(n)
    order = code_order(n, seed)
    models = ends[:-1]
    floor = label_code_bits(y[order], ends, n_classes)
    if not models:  # a single example: nothing is coded by a model
        return [online_code(ends, n_classes, [], floor) for _ in range(G)]
    est = template.fresh(seed=int(seed), n_classes=n_classes)
    subsets = [order[:e] for e in reversed(models)]  # longest first
    est.fit_subsets(X, y, X_dev, y_dev, np.asarray(l2, dtype=np.float64)[:, None], subsets,
                    stop_on="likelihood")
    log_p = est.log_proba(X[:, order])[:, 0]  # (blocks x G, n, C), blocks longest first
    y_ord = y[order]
    out = []
    for g in range(G):
        bits = []
        for i, (start, stop) in enumerate(itertools.pairwise(ends)):
            row = (len(models) - 1 - i) * G + g
            nats = -log_p[row, np.arange(start, stop), y_ord[start:stop]].sum()
            bits.append(float(nats) / _LN2)
        record = online_code(ends, n_classes, bits, floor)
        record["order_seed"] = int(seed)
        out.append(record)
    return out
