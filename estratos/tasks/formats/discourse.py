"""DiscoEval formats that are not one example per line: BSO pairs and RST pickles.

BSO (binary sentence ordering): each line is a pair in its true order, ``a<TAB>b``. Each pair
gives two examples, ``[a, b] -> 1`` and ``[b, a] -> 0``, shuffled with a fixed seed (as
DiscoEval does) so classes are not in blocks. A line may also carry a leading order label,
``label<TAB>s1<TAB>s2`` with 1 = (s1, s2) is the true order and 0 = swapped; it is turned
into the true-order pair first, so both layouts give the same examples.

RST: ``RST_{TRAIN,DEV,TEST}.pkl`` hold lists of ``[relation, left EDUs, right EDUs]`` records
(lists in the Spanish files, tuples in DiscoEval's English ones). They are read with the
restricted unpickler; the example's two slots are the EDU lists (averaged by the probe).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from estratos.errors import InputError
from estratos.tasks.building import SHUFFLE_SEED, TaskBuilder
from estratos.tasks.formats.base import Format, Source, register_format, split_paths
from estratos.tasks.reading import LoadContext, count_lines, read_lines
from estratos.tasks.safe_pickle import load_pickle
from estratos.tasks.types import TaskSpec


class BsoFormat(Format):
    """``files``: ``splits`` (split -> path)."""

    name = "bso"

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        return {split: Source(split, (path,)) for split, path in split_paths(spec, root).items()}

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        path = source.paths[0]
        pairs: List[Tuple[str, str, int]] = []
        for number, text in read_lines(path):
            with ctx.guard():
                fields = text.split("\t")
                if len(fields) == 2:
                    first, second = fields
                elif len(fields) == 3:
                    given = fields[0].strip()
                    if given not in ("0", "1"):
                        raise InputError(f"order label {given!r} is not 0 or 1", path, number)
                    first, second = (fields[1], fields[2]) if given == "1" else (
                        fields[2], fields[1])
                else:
                    raise InputError(f"expected 2 TAB-separated columns (or 3 with a leading "
                                     f"order label), found {len(fields)}", path, number)
                for text_ in (first, second):
                    if not text_.strip():
                        raise InputError("empty sentence", path, number)
                pairs.append((first, second, number))
        examples = [(a, b, "1", n) for a, b, n in pairs] + [(b, a, "0", n) for a, b, n in pairs]
        order = np.random.default_rng(SHUFFLE_SEED).permutation(len(examples))
        for i in order:
            a, b, label, number = examples[i]
            with ctx.guard():
                builder.add(source.split, [a, b], label, path, number)

    def count(self, spec: TaskSpec, source: Source) -> Optional[int]:
        return 2 * count_lines(source.paths[0])


def _edus(value: object, path: Path, record: int, side: str) -> List[str]:
    if isinstance(value, (str, bytes)):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise InputError(f"record {record}: {side} EDUs must be a non-empty list of strings",
                         path)
    out = []
    for edu in value:
        if isinstance(edu, bytes):
            try:
                edu = edu.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"record {record}: {side} EDU is not UTF-8", path) from None
        if not isinstance(edu, str):
            raise InputError(f"record {record}: {side} EDU is a {type(edu).__name__}, "
                             "not a string", path)
        if not edu.strip():
            raise InputError(f"record {record}: empty {side} EDU", path)
        out.append(edu)
    return out


class RstFormat(Format):
    """``files``: ``splits`` (split -> pickle path)."""

    name = "rst"

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        return {split: Source(split, (path,)) for split, path in split_paths(spec, root).items()}

    def _records(self, path: Path) -> list:
        data = load_pickle(path)
        if not isinstance(data, (list, tuple)):
            raise InputError(f"expected a list of records, found a {type(data).__name__}",
                             path)
        if not data:
            raise InputError("empty file (no records)", path)
        return list(data)

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        path = source.paths[0]
        for number, record in enumerate(self._records(path), start=1):
            with ctx.guard():
                # DiscoEval reads fields 0-2 only; extra trailing fields are ignored likewise
                if not isinstance(record, (list, tuple)) or len(record) < 3:
                    raise InputError(f"record {number}: expected [relation, left EDUs, "
                                     "right EDUs]", path)
                relation = record[0]
                if isinstance(relation, bytes):
                    relation = relation.decode("utf-8", "replace")
                if not isinstance(relation, str) or not relation.strip():
                    raise InputError(f"record {number}: missing relation label", path)
                left = _edus(record[1], path, number, "left")
                right = _edus(record[2], path, number, "right")
                try:
                    builder.add(source.split, [left, right], relation, path, None)
                except InputError as exc:
                    raise InputError(f"record {number}: {exc.message}", path) from None

    def count(self, spec: TaskSpec, source: Source) -> Optional[int]:
        return len(self._records(source.paths[0]))


register_format(BsoFormat())
register_format(RstFormat())
