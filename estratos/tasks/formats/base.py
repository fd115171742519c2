"""The data-format registry: :class:`Format` (the base class), :class:`Source` and the
lookups, apart from the formats themselves so that each format module imports it without an
import circle (the package imports the formats, which register themselves here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from estratos.errors import TaskError
from estratos.registry import Registry
from estratos.tasks.building import TaskBuilder
from estratos.tasks.reading import LoadContext, count_lines
from estratos.tasks.types import TaskSpec


@dataclass(frozen=True)
class Source:
    """The files one published split is read from, plus format-specific options."""

    split: str
    paths: Tuple[Path, ...]
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        return all(p.is_file() for p in self.paths)

    @property
    def missing(self) -> Tuple[Path, ...]:
        return tuple(p for p in self.paths if not p.is_file())


class Format:
    """Base class of data formats; subclasses set ``name`` and implement the three methods."""

    name = ""
    #: files that precede data (header lines), skipped by :meth:`count`
    header_lines = 0

    def sources(self, spec: TaskSpec, root: Path) -> Dict[str, Source]:
        """Published split name -> :class:`Source`, in reading order (only stats files)."""
        raise NotImplementedError

    def read(self, spec: TaskSpec, source: Source, builder: TaskBuilder,
             ctx: LoadContext) -> None:
        """Add the examples of ``source`` to ``builder`` under ``source.split``."""
        raise NotImplementedError

    def read_many(self, spec: TaskSpec, sources: Sequence[Source], builder: TaskBuilder,
                  ctx: LoadContext) -> None:
        """Read several splits (formats whose splits share a file override this)."""
        for source in sources:
            self.read(spec, source, builder, ctx)

    def note(self, spec: TaskSpec, root: Path) -> Optional[str]:
        """A format-level remark on how the data is read (e.g. an alternative layout)."""
        return None

    def count(self, spec: TaskSpec, source: Source) -> Optional[int]:
        """Cheap example count of ``source`` (a line count); None when unknown."""
        header = 1 if spec.files.get("header") else self.header_lines
        return max(0, count_lines(source.paths[0]) - header)


#: the registered formats, in registration order (:class:`estratos.registry.Registry`)
DATA_FORMATS: Registry[Format] = Registry("data format")


def register_format(fmt: Format) -> Format:
    """Make ``fmt`` available to specs whose ``format`` is ``fmt.name``."""
    return DATA_FORMATS.register(fmt.name, fmt)


def get_format(name: str) -> Format:
    """The format registered as ``name``; an unknown one is the registries' lookup error
    (:func:`estratos.registry.unknown_name`: a :class:`TaskError` with the closest names)."""
    return DATA_FORMATS.get(name)


def format_names() -> Tuple[str, ...]:
    """Names of all registered formats, in registration order."""
    return DATA_FORMATS.names()


def split_paths(spec: TaskSpec, root: Path, key: str = "splits") -> Dict[str, Path]:
    """``spec.files[key]`` (split -> relative path) resolved under ``root``."""
    try:
        table = spec.files[key]
    except KeyError:
        raise TaskError(f"{spec.id}: spec has no files[{key!r}]") from None
    return {split: root / rel for split, rel in table.items()}

