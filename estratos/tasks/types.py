"""The data model every task is turned into, whatever its file format.

A :class:`TaskSpec` is declarative metadata registered by name (no behaviour). Loading a
spec's files gives a :class:`TaskData`: the unique sentences the task needs (what ``encode``
caches) and, per split, examples as references into those sentences plus labels (what
``probe`` trains on). Probe never sees file formats, and loaders never see vectors.

An example has one *slot* per sentence position of its feature combiner (1 for ``single``,
2 for ``pair``/``pair4``/``bso``, 5 for ``sp``, 6 for ``dc``, 2 for ``rst``). A slot refers
to one sentence, or to several whose vectors are averaged (an RST subtree = the mean of its
EDUs), so slot references are stored CSR-style: ``indices[offsets[i]:offsets[i+1]]``.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from estratos.errors import TaskError
from estratos.protocols import PROTOCOLS, get_protocol
from estratos.vocab import COMBINERS, METRIC_INFO, METRICS

#: sentence positions each feature combiner takes (:data:`estratos.vocab.COMBINERS`)
COMBINER_SLOTS: Mapping[str, int] = MappingProxyType({c.name: c.slots
                                                     for c in COMBINERS.values()})
__all__ = ["COMBINER_SLOTS", "PROTOCOLS", "METRICS", "GROUPS", "TaskSpec", "SlotRefs", "Split",
           "TaskData"]
#: hex characters of a task's data digest (:attr:`TaskData.digest`)
DIGEST_CHARS = 16
GROUPS: Tuple[str, ...] = ("SC", "SPC", "SS", "LPT", "SP", "BSO", "DC", "SSP", "DR")


@dataclass(frozen=True)
class TaskSpec:
    """Declarative description of one dataset; registered by ``id`` = ``suite:name``.

    ``format`` names the registered data format that reads the files (``tsv``, ``probing``...;
    not ``loader``, which names ``run_probe``'s callable),
    ``files`` holds format-specific paths relative to the suite's data folder, ``classifier``
    per-task overrides of the probe's classifier settings (read-only, so no task can change
    another's settings), ``labels`` the sorted label names when known in advance (``None``:
    taken from the data, sorted).

    ``extra_metrics`` are reported beside ``metric`` (e.g. ``("f1",)`` for binary paraphrase
    tasks, as the benchmark reports F1 for PAWS and MRPC); ``score_range`` is the (low, high)
    range of gold scores for ``cosine``/``relatedness`` tasks (SICK-R: 1..5), used to validate
    files and by the relatedness protocol to build its score distribution.
    """

    suite: str
    name: str
    group: str
    language: str
    format: str
    combiner: str
    protocol: str
    metric: str
    files: Mapping[str, Any] = field(default_factory=dict)
    labels: Optional[Tuple[str, ...]] = None
    classifier: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    extra_metrics: Tuple[str, ...] = ()
    score_range: Optional[Tuple[float, float]] = None
    #: the TOML file a custom task was read from (``--task-file``); None for registered tasks
    source: Optional[str] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", MappingProxyType(dict(self.files)))
        object.__setattr__(self, "classifier", MappingProxyType(dict(self.classifier)))
        if self.labels is not None:
            object.__setattr__(self, "labels", tuple(sorted(self.labels)))
        object.__setattr__(self, "extra_metrics", tuple(self.extra_metrics))
        try:  # the registries' one lookup error, naming the task
            COMBINERS.get(self.combiner)
            get_protocol(self.protocol)
            for metric in (self.metric, *self.extra_metrics):
                METRIC_INFO.get(metric)
        except TaskError as exc:
            raise exc.in_context(self.id) from None
        if self.score_range is not None:
            low, high = (float(v) for v in self.score_range)
            if not low < high:
                raise ValueError(f"{self.id}: empty score range {self.score_range!r}")
            object.__setattr__(self, "score_range", (low, high))

    @property
    def id(self) -> str:
        return f"{self.suite}:{self.name}"

    @property
    def n_slots(self) -> int:
        return COMBINER_SLOTS[self.combiner]


@dataclass(frozen=True)
class SlotRefs:
    """Sentence references of one slot for every example of a split (CSR layout)."""

    indices: np.ndarray  # int64 (nnz,): indices into TaskData.sentences
    offsets: np.ndarray  # int64 (n_examples + 1,)

    @classmethod
    def single(cls, ids: Sequence[int]) -> "SlotRefs":
        """One sentence per example."""
        idx = np.asarray(ids, dtype=np.int64)
        return cls(idx, np.arange(len(idx) + 1, dtype=np.int64))

    @classmethod
    def ragged(cls, groups: Sequence[Union[Sequence[int], np.ndarray]]) -> "SlotRefs":
        """Several sentences per example (their vectors are averaged), e.g. RST subtrees."""
        lengths = np.fromiter((len(g) for g in groups), dtype=np.int64, count=len(groups))
        if (lengths == 0).any():
            raise ValueError("every slot needs at least one sentence")
        offsets = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        indices = np.fromiter((i for g in groups for i in g), dtype=np.int64,
                              count=int(offsets[-1]))
        return cls(indices, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def is_single(self) -> bool:
        return len(self.indices) == len(self)

    def take(self, rows: np.ndarray) -> "SlotRefs":
        """The references of the examples ``rows`` (for folds and held-out parts)."""
        rows = np.asarray(rows, dtype=np.int64)
        groups = [self.indices[self.offsets[r]:self.offsets[r + 1]] for r in rows]
        if self.is_single:
            return SlotRefs.single([g[0] for g in groups])
        return SlotRefs.ragged(groups)


@dataclass(frozen=True)
class Split:
    """Examples of one split: ``slots`` (one :class:`SlotRefs` per position) and labels.

    ``labels`` are int64 class ids into :attr:`TaskData.labels` for classification, float64
    scores for ``cosine`` and ``relatedness``.
    """

    name: str
    slots: Tuple[SlotRefs, ...]
    labels: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.labels)
        if any(len(s) != n for s in self.slots):
            raise ValueError(f"split {self.name}: slots and labels differ in length")

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, rows: np.ndarray, name: Optional[str] = None) -> "Split":
        rows = np.asarray(rows, dtype=np.int64)
        return Split(name or self.name, tuple(s.take(rows) for s in self.slots),
                     self.labels[rows])


@dataclass(frozen=True)
class TaskData:
    """A loaded task: unique sentences + splits of examples referring to them.

    Split names are the protocol's (:meth:`estratos.protocols.Protocol.plan`): ``split`` and
    ``relatedness``: train/dev/test; ``kfold``: train/test; ``inner-kfold``: all; ``cosine``:
    one split per subset (e.g. news, wikipedia). ``protocol`` is the effective one (a
    fallback may change the spec's);
    ``fallback`` says in words which fallback was applied (None: as published).
    """

    spec: TaskSpec
    sentences: Tuple[str, ...]
    splits: Mapping[str, Split]
    labels: Tuple[str, ...]
    protocol: str
    fallback: Optional[str] = None
    sources: Mapping[str, str] = field(default_factory=dict)

    def example_texts(self, split: str, separator: str = " | ",
                      limit: Optional[int] = None) -> List[str]:
        """Each example of ``split`` as text: the sentences of each slot (joined by a
        space), slots joined by ``separator``; ``limit``: at most that many characters,
        a cut text ending in "…" (what a report shows of an example)."""
        out = []
        for i in range(len(self.splits[split])):
            parts = [" ".join(self.sentences[j]
                              for j in slot.indices[slot.offsets[i]:slot.offsets[i + 1]])
                     for slot in self.splits[split].slots]
            text = separator.join(parts)
            if limit is not None and len(text) > limit:
                text = text[:limit - 1] + "…"
            out.append(text)
        return out

    @property
    def sizes(self) -> Dict[str, int]:
        return {name: len(split) for name, split in self.splits.items()}

    @functools.cached_property
    def digest(self) -> str:
        """A fingerprint of the examples themselves (:data:`DIGEST_CHARS` hex characters of
        a sha256): the sentences, every split's references and labels, the label names and
        the protocol, whatever files or builder they came from. Results record it
        (``data_digest``, as a dataset revision), so a cell computed on other data (a
        rebuilt or changed task folder, another fallback) is never taken for this data's.
        Computed once per loaded task."""
        h = hashlib.sha256()

        def part(tag: str, payload: bytes) -> None:
            h.update(b"%s %d\n" % (tag.encode(), len(payload)))
            h.update(payload)

        part("protocol", self.protocol.encode())
        part("labels", "\n".join(self.labels).encode())
        for sentence in self.sentences:
            part("s", sentence.encode())
        for name in sorted(self.splits):
            split = self.splits[name]
            part("split", name.encode())
            for slot in split.slots:
                part("offsets", np.ascontiguousarray(slot.offsets, dtype="<i8").tobytes())
                part("indices", np.ascontiguousarray(slot.indices, dtype="<i8").tobytes())
            dtype = "<i8" if split.labels.dtype.kind in "iub" else "<f8"
            part("y", np.ascontiguousarray(split.labels, dtype=dtype).tobytes())
        return h.hexdigest()[:DIGEST_CHARS]
