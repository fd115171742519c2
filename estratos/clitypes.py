"""Click parameter types that the option tables (:mod:`estratos.optiontable`) name.

Why apart from the CLI: a configuration declares its options once, including the click type
that parses one (:attr:`estratos.optiontable.Option.click_type` holds a factory from here), and
the configurations are imported by the library, which must not import the command line.
Click is imported by these factories only, when a command is built.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence


def lazy_choice(names: Callable[[], Sequence[str]]) -> Any:
    """A choice whose words ``names()`` gives when first needed (a registry whose module
    imports numpy is not imported to build the command line). The value is returned as
    typed: the configuration's ``build`` checks it against the registry (one unknown-name
    error) after the options that need no import."""
    import click

    class LazyChoice(click.Choice):  # type: ignore[type-arg]
        def __init__(self) -> None:
            super().__init__([])
            self._names: Optional[Sequence[str]] = None

        @property  # type: ignore[override]
        def choices(self) -> Sequence[str]:
            if self._names is None:
                self._names = names()
            return self._names

        @choices.setter
        def choices(self, value: Sequence[str]) -> None:
            self._names = list(value) or None

        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            return value

    return LazyChoice()


def one_of(choices: Sequence[str], *, one_per_run: str = "") -> Any:
    """A click choice whose comma list is refused with ``one_per_run`` (probe reads one
    pooling per run: the message says to run once per pooling)."""
    import click

    class OneChoice(click.Choice):  # type: ignore[type-arg]
        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            if one_per_run and isinstance(value, str) and "," in value:
                self.fail(f"{value!r}: {one_per_run}", param, ctx)
            return super().convert(value, param, ctx)

    return OneChoice(list(choices))


def integer() -> Any:
    """A plain integer option (``--jobs``, ``--threads``, ``--max-length``): click parses it,
    the configuration checks its range."""
    return int


def int_at_least(minimum: int) -> Any:
    """An integer option of at least ``minimum`` (``--random-init SEED``)."""
    import click

    return click.IntRange(min=minimum)


__all__ = ["int_at_least", "integer", "lazy_choice", "one_of"]
