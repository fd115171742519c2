"""Accumulating examples into a :class:`TaskData`: sentence interning, labels, held-out parts.

Every loader hands examples to one :class:`TaskBuilder`, so the rules that the cache and the
probe rely on live in one place: sentences are normalized with
:func:`estratos.text.normalize_sentence` and stored once, in first-seen order (an empty one is
a data error), class labels are checked against the spec's label set and mapped through the
*sorted* label list, and scores are floats.
"""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from estratos.errors import InputError
from estratos.protocols import get_protocol
from estratos.tasks.types import COMBINER_SLOTS, SlotRefs, Split, TaskData, TaskSpec
from estratos.text import normalize_sentence
from estratos.vocab import DEFAULT_SEED

#: seed of the permutation that picks held-out dev parts (fixed: same part on every run)
HOLDOUT_SEED = 20240
#: share of the pool that becomes the held-out dev part
HOLDOUT_FRACTION = 0.1
#: share of a pool that becomes the test split when the files give no usable test split
TEST_FRACTION = 0.2
#: a training pool sharing more than this share of its examples with the test split is the
#: test set itself (e.g. X-Probe's tree_depth va.txt == te.txt): training on it is forbidden
MAX_POOL_TEST_OVERLAP = 0.5
#: seed of the BSO pair shuffle
SHUFFLE_SEED = DEFAULT_SEED

Slot = Union[str, Sequence[str]]


class TaskBuilder:
    """Collects examples split by split, then builds the :class:`TaskData`."""

    def __init__(self, spec: TaskSpec, scores: Optional[bool] = None) -> None:
        self.spec = spec
        self.scores = get_protocol(spec.protocol).scores if scores is None else scores
        self.n_slots = COMBINER_SLOTS[spec.combiner]
        self._index: Dict[str, int] = {}
        self._labels_allowed = None if spec.labels is None else frozenset(spec.labels)
        self._splits: Dict[str, Tuple[List[List[List[int]]], List[Union[float, str]]]] = {}
        #: per split, what a loader wants users to know (e.g. lines skipped as published)
        self.notes: Dict[str, str] = {}

    # -- adding ------------------------------------------------------------------------------
    def sentence(self, text: str, path: os.PathLike | str, line: Optional[int]) -> int:
        """Index of the normalized ``text``; empty sentences are a data error."""
        norm = normalize_sentence(text)
        if not norm:
            raise InputError("empty sentence", path, line)
        index = self._index.get(norm)
        if index is None:
            index = len(self._index)
            self._index[norm] = index
        return index

    def check_label(self, label: str, path: os.PathLike | str, line: Optional[int]) -> str:
        """A stripped class label, checked against the spec's label set when it has one."""
        label = str(label).strip()
        if not label:
            raise InputError("missing label", path, line)
        if self._labels_allowed is not None and label not in self._labels_allowed:
            allowed = ", ".join(sorted(self._labels_allowed)[:12])
            more = "" if len(self._labels_allowed) <= 12 else ", ..."
            raise InputError(f"label {label!r} is not in the label set ({allowed}{more})",
                             path, line)
        return label

    def add(self, split: str, slots: Sequence[Slot], label: Union[float, str],
            path: os.PathLike | str, line: Optional[int]) -> None:
        """Add one example: ``slots`` holds one sentence (or a list to average) per position.

        Everything is validated before anything is stored, so a rejected example leaves no
        stray sentence behind.
        """
        if len(slots) != self.n_slots:
            raise InputError(f"{len(slots)} sentences for combiner {self.spec.combiner!r}, "
                             f"which takes {self.n_slots}", path, line)
        value: Union[float, str]
        if self.scores:
            value = float(label)  # loaders parse and range-check scores
        else:
            value = self.check_label(str(label), path, line)
        texts: List[List[str]] = []
        for slot in slots:
            group = [slot] if isinstance(slot, str) else list(slot)
            if not group:
                raise InputError("empty list of sentences", path, line)
            normed = [normalize_sentence(t) for t in group]
            if not all(normed):
                raise InputError("empty sentence", path, line)
            texts.append(normed)
        index = self._index
        refs = [[index.setdefault(t, len(index)) for t in group] for group in texts]
        examples, labels = self._splits.setdefault(split, ([], []))
        examples.append(refs)
        labels.append(value)

    def count(self, split: str) -> int:
        """Examples added so far to ``split``."""
        return len(self._splits.get(split, ([], []))[1])

    # -- building ----------------------------------------------------------------------------
    def label_list(self) -> Tuple[str, ...]:
        """The sorted label list: the spec's when declared, else every label seen."""
        if self.scores:
            return ()
        if self.spec.labels is not None:
            return tuple(self.spec.labels)
        seen = {str(lab) for _, labels in self._splits.values() for lab in labels}
        return tuple(sorted(seen))

    def _split(self, name: str, label_ids: Mapping[str, int]) -> Split:
        examples, labels = self._splits.get(name, ([], []))
        slots = []
        for position in range(self.n_slots):
            groups = [ex[position] for ex in examples]
            if all(len(g) == 1 for g in groups):
                slots.append(SlotRefs.single([g[0] for g in groups]))
            else:
                slots.append(SlotRefs.ragged(groups))
        y: np.ndarray
        if self.scores:
            y = np.asarray(labels, dtype=np.float64)
        else:
            y = np.fromiter((label_ids[str(lab)] for lab in labels), dtype=np.int64,
                            count=len(labels))
        return Split(name, tuple(slots), y)

    def build(self, protocol: str, split_names: Sequence[str], fallback: Optional[str] = None,
              sources: Optional[Mapping[str, str]] = None) -> TaskData:
        """The :class:`TaskData` with ``split_names`` in that order."""
        labels = self.label_list()
        label_ids = {lab: i for i, lab in enumerate(labels)}
        splits = {name: self._split(name, label_ids) for name in split_names}
        sentences = tuple(self._index)  # dicts keep insertion order: first-seen order
        return TaskData(self.spec, sentences, splits, labels, protocol, fallback,
                        dict(sources or {}))


def holdout(split: Split, fraction: float = HOLDOUT_FRACTION, stratify: bool = True,
            seed: int = HOLDOUT_SEED) -> Tuple[Split, Split]:
    """Split ``split`` into (rest, held-out part) deterministically.

    The held-out part has exactly ``round(len(split) * fraction)`` examples (so sizes can be
    predicted from line counts alone). The permutation uses a fixed seed, so every run (and
    every seed of the probe) sees the same parts. For class labels the part is stratified:
    each class gives its proportional share (largest remainders get the leftover places,
    ties to the smaller class id). Both parts keep the original example order.
    """
    n = len(split)
    k = int(round(n * fraction))
    rng = np.random.default_rng(seed)
    if stratify and split.labels.dtype.kind in "iu" and n:
        classes, counts = np.unique(split.labels, return_counts=True)  # sorted: deterministic
        exact = counts * (k / n)
        quota = np.floor(exact).astype(np.int64)
        order = sorted(range(len(classes)), key=lambda i: (-(exact[i] - quota[i]), i))
        for i in order[:k - int(quota.sum())]:
            quota[i] += 1
        chosen: List[np.ndarray] = []
        for cls, q in zip(classes, quota):
            members = np.flatnonzero(split.labels == cls)
            chosen.append(members[rng.permutation(len(members))[:q]])
        held = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
    else:
        held = np.sort(rng.permutation(n)[:k])
    mask = np.ones(n, dtype=bool)
    mask[held] = False
    rest = np.flatnonzero(mask)
    return split.take(rest, "train"), split.take(held, "dev")


def example_signatures(split: Split) -> List[Tuple[Tuple[int, ...], ...]]:
    """Each example's sentence references as a hashable tuple (to compare splits)."""
    per_slot = [[tuple(s.indices[s.offsets[i]:s.offsets[i + 1]]) for i in range(len(s))]
                for s in split.slots]
    return list(zip(*per_slot))


def overlap_share(pool: Split, test: Split) -> float:
    """Share of ``pool``'s examples whose sentences also form an example of ``test``."""
    if len(pool) == 0:
        return 0.0
    in_test = set(example_signatures(test))
    return sum(sig in in_test for sig in example_signatures(pool)) / len(pool)


def three_way(split: Split, test_fraction: float = TEST_FRACTION) -> Tuple[Split, Split, Split]:
    """Split one pool into (train, dev, test): test_fraction for test, then
    :data:`HOLDOUT_FRACTION` of the whole for dev, the rest for train (fixed seed,
    stratified)."""
    rest, test = holdout(split, test_fraction)
    train, dev = holdout(rest, HOLDOUT_FRACTION / (1.0 - test_fraction))
    return train, dev, Split("test", test.slots, test.labels)


def holdout_sizes(n: int, fraction: float = HOLDOUT_FRACTION) -> Tuple[int, int]:
    """(train, dev) sizes :func:`holdout` gives for a pool of ``n`` examples."""
    k = int(round(n * fraction))
    return n - k, k
