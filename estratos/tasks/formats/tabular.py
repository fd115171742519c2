"""Line-based SentEval formats: TSV columns, one file per class, TREC questions, aligned
files (s1/s2/labels) and STS input + gold pairs.

Each format reads what its spec's ``files`` declare, so one class serves many datasets
(TASS, SICK, PAWS, SP, DC, SSP, PDTB, STS Benchmark... are all ``tsv`` with different
column numbers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Union

from estratos.errors import InputError, TaskError
from estratos.tasks.building import TaskBuilder
from estratos.tasks.formats.base import Format, Source, register_format, split_paths
from estratos.tasks.reading import LoadContext, count_lines, parse_score, read_lines, split_columns
from estratos.tasks.types import TaskSpec


def _encoding(spec: TaskSpec) -> str:
    return str(spec.files.get("encoding", "utf-8"))


def _score_bounds(spec: TaskSpec):
    return spec.score_range


class TsvFormat(Format):
    """One file per split, one example per line, TAB-separated columns.

    ``files``: ``splits`` (split -> path), ``sentences`` (column numbers, one per combiner
    slot), ``label`` (column of the class) or ``score`` (column of a float score),
    optional ``header`` (skip the first line), ``columns`` (expected count; default: just
    enough for the declared columns) and ``min_columns`` (true: more columns are allowed,
    as in the STS Benchmark files), ``encoding``.
    """

    name = "tsv"

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        return {split: Source(split, (path,)) for split, path in split_paths(spec, root).items()}

    def _layout(self, spec: TaskSpec):
        files = spec.files
        sentences = [int(c) for c in files["sentences"]]
        if "score" in files:
            target, is_score = int(files["score"]), True
        elif "label" in files:
            target, is_score = int(files["label"]), False
        else:
            raise TaskError(f"{spec.id}: tsv spec needs files['label'] or files['score']")
        n_columns = int(files.get("columns", max(sentences + [target]) + 1))
        return sentences, target, is_score, n_columns, bool(files.get("min_columns", False))

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        self._read_rows(spec, source, builder, ctx, lambda raw, path, line: raw)

    def _read_rows(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
                   ctx: LoadContext, label_of: Callable[[str, Path, int], str]) -> None:
        """Read the rows; ``label_of`` turns a label field into a class name."""
        sentences, target, is_score, n_columns, at_least = self._layout(spec)
        path = source.paths[0]
        skip_header = bool(spec.files.get("header", False))
        for number, text in read_lines(path, _encoding(spec)):
            if skip_header:
                skip_header = False
                continue
            with ctx.guard():
                fields = split_columns(text, path, number, n_columns, at_least)
                if is_score:
                    label: Union[float, str] = parse_score(fields[target], path, number,
                                                           _score_bounds(spec))
                else:
                    raw = fields[target].strip()
                    if not raw:
                        raise InputError("missing label", path, number)
                    label = label_of(raw, path, number)
                builder.add(source.split, [fields[c] for c in sentences], label, path, number)


class PdtbFormat(TsvFormat):
    """DiscoEval's PDTB files: ``label<TAB>s1<TAB>s2`` where label is a line number (0-based)
    of ``labelset.txt``; labels are reported by name."""

    name = "pdtb"

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        labelset = root / spec.files["labelset"]
        return {split: Source(split, (path, labelset))
                for split, path in split_paths(spec, root).items()}

    def _names(self, path: Path) -> List[str]:
        names = [text.strip() for _, text in read_lines(path)]
        if len(set(names)) != len(names):
            raise InputError("duplicate label names", path)
        return names

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        labelset = self._names(source.paths[1])

        def label_of(raw: str, path: Path, line: int) -> str:
            try:
                index = int(raw)
            except ValueError:
                raise InputError(f"label {raw!r} is not a label number", path, line) from None
            if not 0 <= index < len(labelset):
                raise InputError(f"label {index} is not in the label set (0.."
                                 f"{len(labelset) - 1} in labelset.txt)", path, line)
            return labelset[index]

        self._read_rows(spec, source, builder, ctx, label_of)


class ClassFilesFormat(Format):
    """One file per class, one sentence per line (SentEval MR/CR/SUBJ/MPQA, MC, FAC).

    ``files``: ``classes`` (label -> path), ``encoding``. Everything is one pool, ``all``.
    """

    name = "class-files"

    def _classes(self, spec: TaskSpec, root: Path) -> Dict[str, Path]:
        return {label: root / rel for label, rel in sorted(spec.files["classes"].items())}

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        classes = self._classes(spec, root)
        return {"all": Source("all", tuple(classes.values()), {"labels": tuple(classes)})}

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        for label, path in zip(source.options["labels"], source.paths):
            for number, text in read_lines(path, _encoding(spec)):
                with ctx.guard():
                    builder.add(source.split, [text], label, path, number)

    def count(self, spec: TaskSpec, source: Source) -> Optional[int]:
        return sum(count_lines(p) for p in source.paths)


class QuestionFormat(Format):
    """TREC-style questions: ``COARSE:fine question`` (the label is the coarse class).

    ``files``: ``splits`` (split -> path), ``encoding``.
    """

    name = "question"

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        return {split: Source(split, (path,)) for split, path in split_paths(spec, root).items()}

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        path = source.paths[0]
        for number, text in read_lines(path, _encoding(spec)):
            with ctx.guard():
                head, _, question = text.strip().partition(" ")
                coarse, colon, _fine = head.partition(":")
                if not colon or not coarse:
                    raise InputError(f"expected 'COARSE:fine question', found {head!r}",
                                     path, number)
                builder.add(source.split, [question], coarse, path, number)


class AlignedFormat(Format):
    """Parallel files with one field per line: sentence files plus a label file (SentEval NLI).

    ``files``: ``splits`` (split -> {"sentences": [path, ...], "labels": path}),
    ``encoding``. All files of a split must have the same number of lines.
    """

    name = "aligned"

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        out = {}
        for split, parts in spec.files["splits"].items():
            paths = tuple(root / p for p in parts["sentences"]) + (root / parts["labels"],)
            out[split] = Source(split, paths)
        return out

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        columns = []
        for path in source.paths:
            columns.append(list(read_lines(path, _encoding(spec), skip_blank=False)))
        lengths = [len(c) for c in columns]
        if len(set(lengths)) != 1:
            shortest = lengths.index(min(lengths))
            others = ", ".join(f"{p.name}: {n}" for p, n in zip(source.paths, lengths))
            raise InputError(f"aligned files differ in length ({others})",
                             source.paths[shortest], min(lengths) + 1)
        label_path = source.paths[-1]
        for row in zip(*columns):
            number = row[0][0]
            with ctx.guard():
                label = row[-1][1].strip()
                if not label:
                    raise InputError("missing label", label_path, number)
                for path, (_, text) in zip(source.paths[:-1], row[:-1]):
                    if not text.strip():
                        raise InputError("empty sentence", path, number)
                builder.check_label(label, label_path, number)
                builder.add(source.split, [text for _, text in row[:-1]], label,
                            source.paths[0], number)

    def count(self, spec: TaskSpec, source: Source) -> Optional[int]:
        return count_lines(source.paths[-1])


class StsFormat(Format):
    """STS shared-task files: per subset ``STS.input.<subset>.txt`` (``s1<TAB>s2``) and
    ``STS.gs.<subset>.txt`` (one gold score per line; an empty line means the pair has no
    gold score and is skipped, as the official scorer does).

    ``files``: ``dir``, ``subsets`` (names, in order), optional ``input``/``gold`` name
    patterns with ``{}`` for the subset, ``encoding``. Each subset is one split.
    """

    name = "sts"

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        folder = root / spec.files["dir"]
        inp = spec.files.get("input", "STS.input.{}.txt")
        gold = spec.files.get("gold", "STS.gs.{}.txt")
        return {name: Source(name, (folder / inp.format(name), folder / gold.format(name)))
                for name in spec.files["subsets"]}

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        input_path, gold_path = source.paths
        pairs = list(read_lines(input_path, _encoding(spec), skip_blank=False))
        golds = list(read_lines(gold_path, _encoding(spec), skip_blank=False))
        # trailing blank lines carry nothing: ignore them before comparing lengths
        while pairs and not pairs[-1][1].strip():
            pairs.pop()
        while golds and len(golds) > len(pairs) and not golds[-1][1].strip():
            golds.pop()
        if len(pairs) != len(golds):
            raise InputError(f"{len(golds)} gold scores for {len(pairs)} sentence pairs in "
                             f"{input_path.name}", gold_path)
        skipped = 0
        for (number, text), (_, gold) in zip(pairs, golds):
            with ctx.guard():
                if not gold.strip():
                    skipped += 1
                    continue
                score = parse_score(gold, gold_path, number, _score_bounds(spec), "gold score")
                fields = split_columns(text, input_path, number, 2,
                                       bool(spec.files.get("min_columns", False)))
                builder.add(source.split, fields[:2], score, input_path, number)
        if skipped:
            builder.notes[source.split] = f"{skipped} pairs without gold score skipped"

    def count(self, spec: TaskSpec, source: Source) -> Optional[int]:
        return count_lines(source.paths[1])


for _fmt in (TsvFormat(), PdtbFormat(), ClassFilesFormat(), QuestionFormat(), AlignedFormat(),
             StsFormat()):
    register_format(_fmt)
