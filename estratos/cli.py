"""The ``estratos`` command line: parses options and calls library code, nothing else.

Every command is a thin wrapper over a documented Python function (named in its help), so
anything the CLI does can be scripted. User errors (``EstratosError``) become one line on
stderr and a non-zero exit code; nothing half-written is left behind by the library.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import click

from estratos import __version__
from estratos.errors import EstratosError


class _UserError(click.ClickException):
    """An :class:`EstratosError` shown as ``Error: message`` with the error's exit code."""

    def __init__(self, exc: EstratosError) -> None:
        super().__init__(str(exc))
        self.exit_code = exc.exit_code


class _Group(click.Group):
    """A click group that reports user errors without a traceback (also under CliRunner)."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except EstratosError as exc:
            raise _UserError(exc) from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="estratos")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """What each layer of a sentence encoder knows: encode once, probe every layer."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


@cli.group("tasks")
def tasks_group() -> None:
    """List, inspect, check, build and download benchmark tasks."""


@cli.group("cache")
def cache_group() -> None:
    """Inspect, verify and merge embedding caches."""


# ---- encode (stage one) ------------------------------------------------------------------

# ---- cache subcommands -------------------------------------------------------------------

# ---- tasks subcommands -------------------------------------------------------------------

# ---- probe (stage two) -------------------------------------------------------------------

# ---- report and baseline -----------------------------------------------------------------

# ---- demo --------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Console-script entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="estratos")


if __name__ == "__main__":  # python -m estratos.cli
    main()
