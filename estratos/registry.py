"""Named tables that other modules add to and look up by name: one shape for every registry.

Why one class: the task formats, the protocols, the estimators and the fixed tables of names
(combiners, metrics, surface baselines, control kinds) are all "a name -> a thing" table that
users reach by typing a name (in a task spec, a task file or an option). Each answers the
same way:

- :meth:`Registry.names` lists the names in **registration order** (the order the modules
  registered them, or the order a fixed table declares them); help texts, error messages and
  listings show that order, never a sorted one.
- :meth:`Registry.get` on an unknown name raises the one lookup error,
  :func:`unknown_name`: an :class:`~estratos.errors.OptionError` naming the option when the
  name was typed as an option (``--classifier: unknown classifier 'sentevl' (closest:
  senteval); choose from senteval, lbfgs``), else a :class:`~estratos.errors.TaskError` (a
  name in a task spec), with the same message. The near-miss hint is :func:`closest`, which
  task selection uses too.
- a name is registered once: registering another object under a taken name is a
  ``ValueError`` (a programming error, not user input).
- a table whose names the vocabulary declares (``Registry(what, entries, names=...)``: the
  poolings, the surface baselines, which the command line lists before numpy or torch is
  imported) takes its names and their order from that one declaration: an entry under an
  undeclared name, or a declared name left without an entry, is a ``ValueError`` when the
  module that builds it is imported, so the two can never drift apart.
- :meth:`Registry.check` is the check of a name that needs no object (a configuration's
  value): the name back, or the one lookup error.

This module is a shared leaf (standard library and :mod:`estratos.errors` only), so every part,
:mod:`estratos.vocab` included, may import it (docs/contracts.md).
"""

from __future__ import annotations

import difflib
from typing import (
    Dict,
    Generic,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

from estratos.errors import EstratosError, OptionError, TaskError

T = TypeVar("T")

#: how many near misses a hint shows at most
HINTS = 5


def closest(word: str, candidates: Sequence[str],
            expand: Optional[Mapping[str, Sequence[str]]] = None) -> List[str]:
    """The names of ``candidates`` nearest to ``word`` (case ignored), best first: the close
    spellings (:func:`difflib.get_close_matches`), else the candidates that contain
    ``word``; at most :data:`HINTS`. A match found in ``expand`` is given as what it maps
    to (task selection: a bare name shared by several tasks stands for their ids)."""
    by_lower: Dict[str, str] = {}
    for candidate in candidates:
        by_lower.setdefault(candidate.lower(), candidate)
    matches = [by_lower[m] for m in
               difflib.get_close_matches(word.lower(), list(by_lower), n=HINTS, cutoff=0.5)]
    if not matches:
        lowered = word.lower()
        matches = [c for c in candidates if lowered and lowered in c.lower()][:HINTS]
    return list(dict.fromkeys(m for match in matches
                              for m in (expand or {}).get(match, [match])))


def closest_hint(word: str, candidates: Sequence[str],
                 expand: Optional[Mapping[str, Sequence[str]]] = None) -> str:
    """`` (closest: a, b)`` for :func:`closest`'s matches, or ``""`` when there are none."""
    shown = closest(word, candidates, expand)
    return f" (closest: {', '.join(shown)})" if shown else ""


def unknown_message(what: str, name: object, choices: Sequence[str]) -> str:
    """The one text of an unknown name: ``unknown WHAT 'NAME' (closest: ...); choose from
    A, B, C`` (choices in the order given: the registry's order)."""
    hint = closest_hint(name, choices) if isinstance(name, str) else ""
    listed = f"; choose from {', '.join(choices)}" if choices else "; none is registered"
    return f"unknown {what} {name!r}{hint}{listed}"


def unknown_name(what: str, name: object, choices: Sequence[str],
                 option: Optional[str] = None) -> EstratosError:
    """The one lookup error (returned, for the caller to raise): an
    :class:`~estratos.errors.OptionError` written naming ``option`` (exit 2) when the name
    was typed as that option, else a :class:`~estratos.errors.TaskError` (a task spec's
    name); the message is :func:`unknown_message` either way."""
    message = unknown_message(what, name, choices)
    if option is not None:
        return OptionError(f"{option}: {message}")
    return TaskError(message)


class Registry(Generic[T]):
    """A name -> object table in registration order (see the module docstring).

    ``what`` names one entry in messages (``"protocol"``, ``"data format"``). Mapping-like
    for reading: ``name in reg``, ``reg[name]`` (:meth:`get`), ``iter(reg)`` (names),
    ``len(reg)``, :meth:`items`,
    :meth:`values`, :meth:`find` (None when unknown).
    """

    def __init__(self, what: str, entries: Optional[Mapping[str, T]] = None, *,
                 names: Optional[Sequence[str]] = None) -> None:
        """``entries``: name -> object, in listing order. ``names``: the declared names
        (a tuple of :mod:`estratos.vocab`): the registry then holds exactly those, in that
        order, whatever order ``entries`` has; a missing or undeclared one is a
        ``ValueError``, and nothing may be registered or unregistered later."""
        self.what = what
        self._declared: Optional[Tuple[str, ...]] = None if names is None else tuple(names)
        self._entries: Dict[str, T] = {}
        given = dict(entries or {})
        if self._declared is not None:
            missing = [n for n in self._declared if n not in given]
            if missing:
                raise ValueError(f"{what} {', '.join(map(repr, missing))}: declared but not "
                                 "given")
            undeclared = [n for n in given if n not in self._declared]
            if undeclared:
                raise ValueError(f"{what} {', '.join(map(repr, undeclared))}: not declared "
                                 f"(declared: {', '.join(self._declared)})")
            given = {n: given[n] for n in self._declared}
        for name, item in given.items():
            self._add(name, item)

    def register(self, name: str, item: T) -> T:
        """Add ``item`` under ``name`` and return it. Registering the same object again is
        a no-op (a module imported twice); another object under a taken name, or an empty
        name, is a ``ValueError``, as is a name a declared table does not declare."""
        if self._declared is not None and name not in self._declared:
            raise ValueError(f"{self.what} {name!r}: not declared (declared: "
                             f"{', '.join(self._declared)})")
        return self._add(name, item)

    def _add(self, name: str, item: T) -> T:
        if not name:
            raise ValueError(f"a {self.what} needs a name")
        if name in self._entries and self._entries[name] is not item \
                and self._entries[name] != item:
            raise ValueError(f"{self.what} {name!r} registered twice")
        self._entries[name] = item
        return item

    def unregister(self, name: str) -> None:
        """Remove ``name`` (unknown names are ignored): for code that registers entries for
        a while, such as tests of a plugin estimator. A declared table keeps its names (a
        ``ValueError``)."""
        if self._declared is not None and name in self._declared:
            raise ValueError(f"{self.what} {name!r} is declared: it cannot be unregistered")
        self._entries.pop(name, None)

    def get(self, name: str, option: Optional[str] = None) -> T:
        """The object registered as ``name``; an unknown name raises :func:`unknown_name`
        (an :class:`OptionError` naming ``option`` when given, else a :class:`TaskError`)."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.unknown(name, option) from None

    def __getitem__(self, name: str) -> T:
        """``reg[name]`` is :meth:`get` without an option (a :class:`TaskError` when unknown,
        not a ``KeyError``)."""
        return self.get(name)

    def check(self, name: object, option: Optional[str] = None) -> str:
        """``name`` when it is registered, else the lookup error :meth:`get` raises (an
        :class:`OptionError` naming ``option`` when given): for a value that is checked now
        and looked up later, e.g. ``CONTROLS.check(value, "--control")``."""
        if isinstance(name, str) and name in self._entries:
            return name
        raise self.unknown(name, option)

    def find(self, name: str) -> Optional[T]:
        """The object registered as ``name``, or None."""
        return self._entries.get(name)

    def unknown(self, name: object, option: Optional[str] = None) -> EstratosError:
        """The error :meth:`get` raises for ``name`` (for callers that check before they
        look up, or that wrap the message, e.g. a task file's ``path: message``)."""
        return unknown_name(self.what, name, self.names(), option)

    def names(self) -> Tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._entries)

    def items(self) -> List[Tuple[str, T]]:
        return list(self._entries.items())

    def values(self) -> List[T]:
        return list(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<Registry of {self.what}: {', '.join(self._entries)}>"


__all__ = ["HINTS", "Registry", "closest", "closest_hint", "unknown_message", "unknown_name"]
