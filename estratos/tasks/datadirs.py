"""Where each suite's data lives: ``--data-dir DIR`` / ``--data-dir SUITE=DIR`` / ``ESTRATOS_DATA``.

A bare ``DIR`` is a benchmark's own data folder and serves every suite not named explicitly
(``senteval/`` + ``discoeval/`` for the Spanish suites, DiscoEval's ``data/`` for en-discoeval,
SentEval's ``data/`` for en-senteval). ``SUITE=DIR`` entries mix folders of several
benchmarks in one run. Lookup order for a suite: its ``SUITE=DIR``, the bare ``DIR``, the
environment variable, then the suite's own default folder (synthetic suites only).

:meth:`DataDirs.check` looks at the folders a command is about to read before any work: a
folder that does not exist, or that holds none of its suites' files but whose parent or a
sub-folder does (``.../data`` for ``.../data/es``, ``.../es/senteval`` for ``.../es``), is named
with the folder that would work: an error where the command cannot work, a warning otherwise.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from estratos.errors import OptionError
from estratos.registry import unknown_message
from estratos.tasks import registry
from estratos.tasks.types import TaskSpec

log = logging.getLogger(__name__)

ENV_VAR = "ESTRATOS_DATA"
_SUITE_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class DataDirs:
    """Data folder per suite (``by_suite``) plus an optional folder for all others."""

    default: Optional[Path] = None
    by_suite: Mapping[str, Path] = field(default_factory=dict)
    source: str = "--data-dir"  # where the folders came from, for messages

    @classmethod
    def parse(cls, values: Iterable[str] = (), env: Optional[Mapping[str, str]] = None,
              option: str = "--data-dir") -> "DataDirs":
        """Parse ``--data-dir`` values; when there are none, read ``ESTRATOS_DATA``.

        ``ESTRATOS_DATA`` holds the same kind of entries separated by ``os.pathsep``.
        A ``SUITE=DIR`` whose suite is unknown is an error (a typo would otherwise silently
        fall back to the default folder).
        """
        values = [v for v in values if v is not None and str(v).strip()]
        source = option
        if not values:
            environ = os.environ if env is None else env
            raw = environ.get(ENV_VAR, "")
            values = [v for v in raw.split(os.pathsep) if v.strip()]
            source = ENV_VAR
        default: Optional[Path] = None
        by_suite: Dict[str, Path] = {}
        for value in values:
            value = str(value).strip()
            name, sep, rest = value.partition("=")
            if sep and _SUITE_LIKE.match(name) and "/" not in name:
                if registry.suite_info(name) is None:
                    known = [s.name for s in registry.suites()]
                    raise OptionError(f"{source}: {value!r}: "
                                      + unknown_message("suite", name, known))
                if not rest.strip():
                    raise OptionError(f"{source}: empty folder in {value!r}")
                if name in by_suite:
                    raise OptionError(f"{source}: suite {name!r} given twice")
                by_suite[name] = Path(rest).expanduser()
            else:
                if default is not None:
                    raise OptionError(f"{source}: more than one folder without a suite "
                                      f"({default} and {value}); use SUITE=DIR to mix suites")
                default = Path(value).expanduser()
        return cls(default, by_suite, source if source == option else f"${ENV_VAR}")

    def for_suite(self, suite: str) -> Path:
        """The data folder of ``suite`` (raises :class:`OptionError` naming --data-dir)."""
        if suite in self.by_suite:
            return self.by_suite[suite]
        if self.default is not None:
            return self.default
        info = registry.suite_info(suite)
        if info is not None and info.default_dir is not None:
            return info.default_dir
        raise OptionError(f"--data-dir: no data folder for suite {suite!r}; pass "
                          f"--data-dir DIR or --data-dir {suite}=DIR (or set {ENV_VAR})")


    def given_for(self, suite: str) -> Optional[Path]:
        """The folder the user gave for ``suite`` (option or environment), if any."""
        return self.by_suite.get(suite, self.default)

    def suites_present(self) -> List[str]:
        """The registered suites whose given folder holds some of their files (what a
        selection's unknown-task hint lists first)."""
        out = []
        for info in registry.suites():
            folder = self.given_for(info.name)
            if folder is not None and _fits(folder, info.name):
                out.append(info.name)
        return out

    def check(self, specs: Sequence[TaskSpec], *, survey: bool = False) -> None:
        """Name a missing or wrong-level data folder before a command reads ``specs``.

        Only folders the user gave are checked (a suite's default folder is not), and only
        for built-in specs (a ``--task-file`` spec carries its own folder). With ``survey``
        (``tasks list``, ``tasks check`` without ids: the command works with whatever is
        there) a folder is wrong only when it fits none of the suites it serves, and that is
        a warning unless no folder fits; otherwise every selected suite must find its own
        data in its folder. Raises :class:`OptionError` naming the folder and the fix.
        """
        suites = list(dict.fromkeys(s.suite for s in specs if "root" not in s.files))
        served: Dict[Path, List[str]] = {}
        for suite in suites:
            folder = self.given_for(suite)
            if folder is not None:
                served.setdefault(folder, []).append(suite)
        problems: List[str] = []
        fitting = 0
        for folder, its_suites in served.items():
            wrong = [s for s in its_suites if not _fits(folder, s)]
            if survey and len(wrong) < len(its_suites):
                fitting += 1
                continue
            if survey:
                problems.append(self._describe(folder, its_suites))
            else:
                problems.extend(self._describe(folder, [s]) for s in wrong)
        if not problems:
            return
        if survey and fitting:
            for problem in problems:
                log.warning("%s", problem)
            return
        raise OptionError("; ".join(problems))

    def _describe(self, folder: Path, suites: Sequence[str]) -> str:
        """Why ``folder`` serves none of ``suites``, with the folder that would work if near."""
        named = f"{suites[0]}=" if suites[0] in self.by_suite else ""
        where = f"{self.source} {named}{folder}"
        if not folder.exists():
            return f"{where}: no such folder"
        if not folder.is_dir():
            return f"{where}: not a folder"
        what = (f"{suites[0]} data" if len(suites) == 1
                else "data of any of " + ", ".join(suites))
        for candidate, level in _neighbours(folder):
            if any(_fits(candidate, s) for s in suites):
                fix = (f"--data-dir {named}{candidate}" if self.source == "--data-dir"
                       else f"{ENV_VAR}={named}{candidate}")
                return f"{where}: no {what} here; one level too {level}? {fix} would work"
        example = _example_file(suites[0])
        hint = f" (expected e.g. {example})" if example else ""
        if not named and len(suites) == 1 and self.source == "--data-dir":
            hint += f"; give {suites[0]}'s own folder as --data-dir {suites[0]}=DIR"
        return f"{where}: no {what} here{hint}"


def _relative_paths(value: Any) -> List[str]:
    """The strings of a spec's ``files`` (relative paths, plus harmless non-path values)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, MappingABC):
        return [p for v in value.values() for p in _relative_paths(v)]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in _relative_paths(v)]
    return []


def _suite_paths(suite: str) -> List[str]:
    return [p for spec in registry.all_specs() if spec.suite == suite
            for p in _relative_paths(spec.files)]


def _fits(folder: Path, suite: str) -> bool:
    """Whether ``folder`` holds at least one file or folder a task of ``suite`` names."""
    try:
        return folder.is_dir() and any((folder / p).exists() for p in _suite_paths(suite))
    except OSError:
        return False


def _example_file(suite: str) -> Optional[str]:
    paths = [p for p in _suite_paths(suite) if "/" in p or "." in p]
    return paths[0] if paths else None


_MAX_SUBFOLDERS = 200


def _neighbours(folder: Path) -> Iterable[Tuple[Path, str]]:
    """The parent (folder one level too low) and sub-folders (one level too high)."""
    resolved = folder.resolve()
    if resolved.parent != resolved:
        yield folder.parent if folder.name not in ("", ".", "..") else resolved.parent, "low"
    try:
        children = sorted(p for p in folder.iterdir() if p.is_dir())[:_MAX_SUBFOLDERS]
    except OSError:
        children = []
    for child in children:
        yield child, "high"
