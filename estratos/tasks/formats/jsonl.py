"""JSON-lines task files (custom tasks): one JSON object per line.

Each object holds either ``"sentence": "..."`` (one-slot combiners) or ``"sentences": [...]``
(one entry per combiner slot; an entry may itself be a list of sentences whose vectors are
averaged), and either ``"label"`` (string or integer class) or ``"score"`` (number, for the
``cosine`` and ``relatedness`` protocols). ``files``: ``splits`` (split -> path).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Union

from estratos.errors import InputError
from estratos.tasks.building import TaskBuilder
from estratos.tasks.formats.base import Format, Source, register_format, split_paths
from estratos.tasks.reading import LoadContext, parse_score, read_lines
from estratos.tasks.types import TaskSpec


class JsonlFormat(Format):
    name = "jsonl"

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        return {split: Source(split, (path,)) for split, path in split_paths(spec, root).items()}

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        path = source.paths[0]
        for number, text in read_lines(path):
            with ctx.guard():
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})",
                                     path, number) from None
                if not isinstance(obj, dict):
                    raise InputError("expected a JSON object", path, number)
                if "sentences" in obj:
                    slots = obj["sentences"]
                elif "sentence" in obj:
                    slots = [obj["sentence"]]
                else:
                    raise InputError("missing 'sentence' or 'sentences'", path, number)
                if not isinstance(slots, list) or not all(
                        isinstance(s, str) or (isinstance(s, list) and all(
                            isinstance(t, str) for t in s)) for s in slots):
                    raise InputError("'sentences' must be a list of strings (or of lists of "
                                     "strings)", path, number)
                if builder.scores:
                    if "score" not in obj:
                        raise InputError("missing 'score'", path, number)
                    raw = obj["score"]
                    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
                        raise InputError(f"score is not a number: {raw!r}", path, number)
                    label: Union[float, str] = parse_score(str(raw), path, number,
                                                           spec.score_range)
                else:
                    if "label" not in obj or obj["label"] is None:
                        raise InputError("missing 'label'", path, number)
                    raw = obj["label"]
                    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
                        raise InputError(f"label must be a string or an integer, found "
                                         f"{raw!r}", path, number)
                    label = str(raw)
                builder.add(source.split, slots, label, path, number)


register_format(JsonlFormat())
