"""Linguistic probing tasks: SentEval's single-file format, or X-Probe's per-split files.

SentEval format: one file, ``split<TAB>label<TAB>sentence`` with split ``tr``/``va``/``te``
(the sentence is the last column, as SentEval reads it). X-Probe format: a folder with
``tr.txt``/``va.txt``/``te.txt``, each ``sentence<TAB>label``. The SentEval file wins when it
exists; otherwise the X-Probe folder is used (and when its ``tr.txt`` is missing, the generic
fallback of :mod:`estratos.tasks.loading` trains on ``va`` minus a held-out dev part).

``files``: ``file`` (SentEval-format path), optional ``xprobe`` (folder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Sequence

from estratos.errors import InputError
from estratos.tasks.building import TaskBuilder
from estratos.tasks.formats.base import Format, Source, register_format
from estratos.tasks.reading import (
    LoadContext,
    count_first_column,
    count_lines,
    read_lines,
    split_columns,
)
from estratos.tasks.types import TaskSpec

#: SentEval's split tokens
TOKENS = {"tr": "train", "va": "dev", "te": "test"}


class ProbingFormat(Format):
    name = "probing"

    def _senteval_file(self, spec: TaskSpec, root: Path) -> Path:
        return root / spec.files["file"]

    def _uses_xprobe(self, spec: TaskSpec, root: Path) -> bool:
        return "xprobe" in spec.files and not self._senteval_file(spec, root).is_file()

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        if self._uses_xprobe(spec, root):
            folder = root / spec.files["xprobe"]
            return {split: Source(split, (folder / f"{token}.txt",), {"xprobe": True})
                    for token, split in TOKENS.items()}
        path = self._senteval_file(spec, root)
        return {split: Source(split, (path,), {"token": token})
                for token, split in TOKENS.items()}

    def note(self, spec: TaskSpec, root: Path) -> Optional[str]:
        """Say so when the X-Probe folder replaces the missing SentEval-format file."""
        if self._uses_xprobe(spec, root):
            return (f"no SentEval-format file {spec.files['file']}: read X-Probe files from "
                    f"{spec.files['xprobe']}/")
        return None

    def read_many(self, spec: TaskSpec, sources: Sequence[Source], builder: TaskBuilder,
                  ctx: LoadContext) -> None:
        xprobe = [s for s in sources if s.options.get("xprobe")]
        for source in xprobe:
            self._read_xprobe(source, builder, ctx)
        wanted = {s.options["token"]: s.split for s in sources if "token" in s.options}
        if wanted:
            self._read_senteval(sources[0].paths[0], wanted, builder, ctx)

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        self.read_many(spec, [source], builder, ctx)

    def _read_xprobe(self, source: Source, builder: TaskBuilder, ctx: LoadContext) -> None:
        path = source.paths[0]
        for number, text in read_lines(path):
            with ctx.guard():
                sentence, label = split_columns(text, path, number, 2)
                builder.add(source.split, [sentence], label, path, number)

    def _read_senteval(self, path: Path, wanted: Dict[str, str], builder: TaskBuilder,
                       ctx: LoadContext) -> None:
        seen = set()
        for number, text in read_lines(path):
            with ctx.guard():
                fields = split_columns(text, path, number, 3, at_least=True)
                token = fields[0].strip()
                if token not in TOKENS:
                    raise InputError(f"unknown split {token!r} (expected tr, va or te)",
                                     path, number)
                seen.add(token)
                if token in wanted:
                    builder.add(wanted[token], [fields[-1]], fields[1], path, number)
        for token in wanted:
            if token not in seen:
                ctx.report(InputError(f"no {token!r} lines (split {TOKENS[token]})", path))

    def count(self, spec: TaskSpec, source: Source) -> Optional[int]:
        if "token" in source.options:
            return count_first_column(source.paths[0]).get(source.options["token"], 0)
        return count_lines(source.paths[0])


register_format(ProbingFormat())
