"""Where each suite's data lives: ``--data-dir DIR`` / ``--data-dir SUITE=DIR`` / ``ESTRATOS_DATA``.

A bare ``DIR`` is a benchmark's own data folder and serves every suite not named explicitly
(``senteval/`` + ``discoeval/`` for the Spanish suites, DiscoEval's ``data/`` for en-discoeval,
SentEval's ``data/`` for en-senteval). ``SUITE=DIR`` entries mix folders of several
benchmarks in one run. Lookup order for a suite: its ``SUITE=DIR``, the bare ``DIR``, the
environment variable, then the suite's own default folder (synthetic suites only).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Mapping, Optional

from estratos.errors import OptionError
from estratos.tasks import registry

ENV_VAR = "ESTRATOS_DATA"
_SUITE_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class DataDirs:
    """Data folder per suite (``by_suite``) plus an optional folder for all others."""

    default: Optional[Path] = None
    by_suite: Mapping[str, Path] = field(default_factory=dict)

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
                    known = ", ".join(s.name for s in registry.suites())
                    raise OptionError(f"{source}: unknown suite {name!r} in {value!r} "
                                      f"(suites: {known})")
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
        return cls(default, by_suite)

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

    def has_suite(self, suite: str) -> bool:
        """Whether :meth:`for_suite` would find a folder for ``suite``."""
        try:
            self.for_suite(suite)
        except OptionError:
            return False
        return True
