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
@tasks_group.command("build")
@click.argument("suite", type=click.Choice(["synthetic-es"]))
@click.option("--out", metavar="DIR", default=None,
              help="Output folder [default: ~/.cache/estratos/synthetic-es, where the "
                   "registry looks without --data-dir].")
@click.option("--seed", type=int, default=1111, show_default=True, help="Generator seed.")
@click.option("--n-per-task", type=int, default=3000, show_default=True,
              help="Examples per task (train/dev/test = 80/10/10).")
@click.option("--task", "task_names", multiple=True, metavar="NAME",
              help="Build only this task (repeatable) [default: all eight].")
def tasks_build_cmd(suite: str, out: Optional[str], seed: int, n_per_task: int,
                    task_names: Sequence[str]) -> None:
    """Generate a built-in suite (estratos.tasks.synthetic.build_synthetic_es)."""
    from estratos.tasks.synthetic import build_synthetic_es

    paths = build_synthetic_es(out, seed=seed, n_per_task=n_per_task,
                               tasks=task_names or None)
    for name, path in paths.items():
        click.echo(f"{suite}:{name}\t{path}")


@tasks_group.command("download")
@click.argument("benchmark", type=click.Choice(["es"]))
@click.option("--data-dir", metavar="DIR", default="~/.cache/estratos/es", show_default=True,
              help="Folder to fill with senteval/ and discoeval/ (pass it to --data-dir later).")
@click.option("--base-url", default="https://github.com", show_default=True,
              help="Where the GitHub repositories are served from (a mirror).")
@click.option("--timeout", type=float, default=10.0, show_default=True,
              help="Seconds to wait to connect and for each read.")
@click.option("--no-xprobe", is_flag=True, help="Skip the Spanish X-Probe files.")
@click.option("--keep-archive", is_flag=True, help="Keep the downloaded repository archive.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bars [default: when stderr is a terminal].")
def tasks_download_cmd(benchmark: str, data_dir: str, base_url: str, timeout: float,
                       no_xprobe: bool, keep_archive: bool, progress: Optional[bool]) -> None:
    """Download and unpack a benchmark's data (estratos.tasks.download.download_es)."""
    import sys

    from estratos.tasks.download import download_es

    show = sys.stderr.isatty() if progress is None else progress
    report = download_es(data_dir, base_url=base_url, timeout=timeout, xprobe=not no_xprobe,
                         keep_archive=keep_archive, progress=show)
    for line in report.lines():
        click.echo(line)
    if not report.complete:
        raise click.ClickException(f"{len(report.missing)} expected files are missing")


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Console-script entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="estratos")


if __name__ == "__main__":  # python -m estratos.cli
    main()
