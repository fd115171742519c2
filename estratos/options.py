"""Command-line forms shared by several commands, parsed and checked in one place.

Why one module: ``--seeds``, ``--layers``, ``--states``, ``--baseline``, ``--shard`` and
``--jobs``/``--threads`` are taken by encode, probe, baseline, slurm and the demo: one parser
each, so they cannot drift apart (the configurations' option tables name them as their
checks, :mod:`estratos.optiontable`). Standard library only, so the CLI checks options before
it imports numpy, torch or transformers (an option error answers at once). Each function
raises :class:`~estratos.errors.OptionError` naming the option. ``--device`` is
:mod:`estratos.devices`; output paths :mod:`estratos.outputs`; ``--model``'s identity
:mod:`estratos.model_source`; task selection (``--tasks``, ``--task-file``, ``--data-dir``)
:func:`estratos.tasks.selection.select_specs`.
"""

from __future__ import annotations

import os
from typing import (
    Any,
    Callable,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

from estratos.errors import OptionError
from estratos.registry import unknown_name
from estratos.vocab import (
    ALL_BASELINES,
    ALL_LAYERS,
    AVG,
    DEFAULT_SEED,
    ERASE_CONCEPTS,
    ERASE_RANDOM,
    GIVEN_PREVIOUS,
    SURFACE_BASELINES,
    LayerSpec,
)

#: ``--seeds`` default as the CLI shows it
DEFAULT_SEEDS_TEXT = str(DEFAULT_SEED)
#: ``--shard`` value that reads the SLURM array variables
AUTO_SHARD = "auto"
#: a shard as given: ``"I/N"``, ``(I, N)``, ``"auto"`` or None
ShardSpec = Union[None, str, Tuple[int, int]]
def parse_seeds(seeds: Union[str, int, Iterable[Any]]) -> Tuple[int, ...]:
    """``"1111,1,2"`` (or an int, or integers) -> (1111, 1, 2), duplicates dropped in order;
    bad values raise :class:`OptionError` naming ``--seeds``."""
    if isinstance(seeds, str):
        items: List[Any] = [t for t in seeds.split(",") if t.strip()]
    elif isinstance(seeds, Iterable):
        items = list(seeds)
    else:
        items = [seeds]
    out: List[int] = []
    for item in items:
        if isinstance(item, bool):
            raise OptionError(f"--seeds: {item!r} is not an integer seed")
        try:
            value = int(str(item).strip())
        except ValueError:
            raise OptionError(f"--seeds: {item!r} is not an integer seed") from None
        if value < 0:
            raise OptionError(f"--seeds: seeds must be >= 0, got {value}")
        if value not in out:
            out.append(value)
    if not out:
        raise OptionError("--seeds: give at least one seed")
    return tuple(out)


def parse_baselines(baselines: Union[str, Iterable[str]]) -> Tuple[str, ...]:
    """``"tfidf,length-tokens"`` (or names) -> ('tfidf', 'length-tokens'), duplicates dropped
    in order; ``all`` is every surface baseline (:data:`estratos.vocab.SURFACE_BASELINES`).
    An unknown or missing name raises :class:`OptionError` naming ``--baseline``."""
    items = baselines.split(",") if isinstance(baselines, str) else list(baselines)
    names = [str(item).strip().lower() for item in items if str(item).strip()]
    out: List[str] = []
    for name in names:
        if name == ALL_BASELINES:
            out.extend(SURFACE_BASELINES)
        elif name in SURFACE_BASELINES:
            out.append(name)
        else:
            raise unknown_name("baseline", name, (*SURFACE_BASELINES, ALL_BASELINES),
                               "--baseline")
    if not out:
        raise OptionError(f"--baseline: give at least one baseline ({', '.join(SURFACE_BASELINES)}"
                          f" or {ALL_BASELINES})")
    return tuple(dict.fromkeys(out))


def parse_given(value: Union[str, int]) -> str:
    """``probe --given``: a hidden-state index, ``avg``, ``prev`` (the stored state below
    each probed one) or a surface baseline's name (:data:`~estratos.vocab.SURFACE_BASELINES`),
    as its canonical text; anything else raises :class:`OptionError` naming ``--given``.
    Whether the cache holds that state is checked against the cache by the runner."""
    text = str(value).strip().lower()
    if text.isdigit():
        return str(int(text))
    if text in (AVG, GIVEN_PREVIOUS) or text in SURFACE_BASELINES:
        return text
    raise unknown_name("value", text,
                       (AVG, GIVEN_PREVIOUS, *SURFACE_BASELINES, "a hidden-state index"),
                       "--given")


def parse_erase(value: str) -> str:
    """``probe --erase``: a concept (:data:`~estratos.vocab.ERASE_CONCEPTS`) or
    ``random:RANK`` (RANK >= 1), as its canonical text; anything else raises
    :class:`OptionError` naming ``--erase``."""
    text = str(value).strip().lower()
    if text in ERASE_CONCEPTS:
        return text
    kind, _, rank = text.partition(":")
    if kind == ERASE_RANDOM:
        if rank.isdigit() and int(rank) >= 1:
            return f"{ERASE_RANDOM}:{int(rank)}"
        raise OptionError(f"--erase: {text!r}: random erasure takes a rank, e.g. "
                          f"{ERASE_RANDOM}:4 (an integer >= 1)")
    raise unknown_name("concept", text, (*ERASE_CONCEPTS, f"{ERASE_RANDOM}:RANK"), "--erase")


def parse_layers(layers: Union[str, Sequence[LayerSpec]],
                 n_states: Optional[int] = None,
                 stored: Optional[Sequence[int]] = None) -> Tuple[LayerSpec, ...]:
    """``--layers`` (``all`` or a comma list of indices and ``avg``) -> ordered unique specs.

    ``all`` means every hidden state the cache stores (0..L, or the ``stored`` subset an
    ``encode --states`` cache holds) then ``avg``. With ``n_states`` None (no cache yet,
    e.g. ``estratos slurm``) only the syntax is checked and ``all`` stays the word
    :data:`~estratos.vocab.ALL_LAYERS`. Unknown specs, indices outside 0..n_states-1 and
    indices the cache does not store raise :class:`OptionError` naming ``--layers``.
    """
    every: Tuple[LayerSpec, ...] = (ALL_LAYERS,)
    if n_states is not None:
        if stored is None:
            stored = range(n_states)
        every = (*stored, AVG)
    if isinstance(layers, str):
        items: Sequence[LayerSpec] = [t.strip() for t in layers.strip().split(",")]
    else:
        items = list(layers)
    span = "a hidden-state index" if n_states is None else f"a hidden-state index 0..{n_states - 1}"
    out: List[LayerSpec] = []
    for item in items:
        if isinstance(item, str) and item.lower() == AVG:
            specs: Tuple[LayerSpec, ...] = (AVG,)
        elif isinstance(item, str) and item.lower() == ALL_LAYERS:
            specs = every
        else:
            try:
                if isinstance(item, (bool, float)):
                    raise ValueError
                spec = int(item)
            except (TypeError, ValueError):
                raise OptionError(f"--layers: unknown layer spec {item!r} (use {ALL_LAYERS}, "
                                  f"{AVG} or {span})") from None
            if spec < 0 or (n_states is not None and spec >= n_states):
                where = ("indices start at 0" if n_states is None
                         else f"the cache has hidden states 0..{n_states - 1}")
                raise OptionError(f"--layers: layer index {spec} is out of range: {where}")
            if stored is not None and spec not in stored:
                raise OptionError(f"--layers: hidden state {spec} is not in the cache: it "
                                  f"stores {', '.join(map(str, stored))} (encode --states) and "
                                  f"{AVG}; pick from those or re-encode with it")
            specs = (spec,)
        out += [s for s in specs if s not in out]
    if not out:
        raise OptionError("--layers: no layer spec given")
    return tuple(out)


def parse_states(states: Union[str, Sequence[Union[int, str]], None],
                 n_states: Optional[int] = None) -> Optional[Tuple[int, ...]]:
    """``encode --states``: which hidden states a cache stores, as sorted true indices.

    A comma list of items: a hidden-state index (0 = embedding output), ``every:K`` (0, K,
    2K, ... and always the last state L), ``last:N`` (the last N states, L-N+1..L) or
    ``all`` (0..L, the default). With ``n_states`` (L+1) None only the syntax is checked and
    None is returned; otherwise bad values raise :class:`OptionError` naming ``--states``.
    The mean over ALL states (``avg``) is stored whatever is picked.
    """
    if states is None:
        states = ALL_LAYERS
    items: List[Any] = ([t.strip() for t in states.split(",")] if isinstance(states, str)
                        else list(states))
    if not items or items == [""]:
        raise OptionError("--states: no hidden state given")
    picked: List[int] = []
    last = None if n_states is None else n_states - 1
    for item in items:
        text = str(item).strip().lower()
        kind, colon, arg = text.partition(":")
        try:
            if isinstance(item, (bool, float)):
                raise ValueError
            if text == ALL_LAYERS:
                picked += [] if last is None else list(range(last + 1))
                continue
            if colon and kind in ("every", "last"):
                k = int(arg)
                if k < 1:
                    raise OptionError(f"--states: {item!r}: the number after {kind}: must be >= 1")
                if last is not None:
                    picked += (list(range(0, last + 1, k)) + [last] if kind == "every"
                               else list(range(max(0, last + 1 - k), last + 1)))
                continue
            index = int(text)
        except ValueError:
            raise OptionError(f"--states: unknown item {item!r} (use all, a hidden-state "
                              "index, every:K or last:N, comma-separated)") from None
        if index < 0 or (last is not None and index > last):
            span = ("indices start at 0" if last is None
                    else f"the model has hidden states 0..{last}")
            raise OptionError(f"--states: hidden state {index} is out of range: {span}")
        picked.append(index)
    return None if n_states is None else tuple(sorted(set(picked)))


def resolve_shard(shard: ShardSpec, environ: Optional[Mapping[str, str]] = None
                  ) -> Optional[Tuple[int, int]]:
    """``(index, count)`` with a 0-based index, or None.

    ``shard`` is ``"I/N"``, a tuple, None (no sharding) or ``"auto"``: SLURM array variables
    when set (``SLURM_ARRAY_TASK_ID`` minus ``SLURM_ARRAY_TASK_MIN``, of
    ``SLURM_ARRAY_TASK_COUNT``), else no sharding.
    """
    environ = os.environ if environ is None else environ
    if shard is None:
        return None
    if isinstance(shard, str) and shard == AUTO_SHARD:
        task_id = environ.get("SLURM_ARRAY_TASK_ID")
        if task_id is None:
            return None
        array_count = environ.get("SLURM_ARRAY_TASK_COUNT")
        if array_count is None:
            raise OptionError("--shard: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT "
                              "is not; pass --shard I/N")
        try:
            index = int(task_id) - int(environ.get("SLURM_ARRAY_TASK_MIN", "0"))
            shard = (index, int(array_count))
        except ValueError as exc:
            raise OptionError(f"--shard: bad SLURM array variables ({exc})") from exc
        where = "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT"
    elif isinstance(shard, str):
        where = f"--shard {shard!r}"
        parts = shard.split("/")
        try:
            if len(parts) != 2:
                raise ValueError
            shard = (int(parts[0]), int(parts[1]))
        except ValueError as exc:
            raise OptionError(f"{where}: expected I/N with integers, e.g. 0/4") from exc
    else:
        where = f"--shard {shard!r}"
    index, count = int(shard[0]), int(shard[1])
    if count < 1 or not 0 <= index < count:
        raise OptionError(f"{where}: need N >= 1 and 0 <= I < N (shards are numbered from 0)")
    return index, count


@overload
def positive_int(option: str, value: Any, *, allow_none: Literal[False] = False) -> int: ...


@overload
def positive_int(option: str, value: Any, *, allow_none: bool) -> Optional[int]: ...


def positive_int(option: str, value: Any, *, allow_none: bool = False) -> Optional[int]:
    """``value`` as an integer >= 1 (``--jobs``, ``--threads``...); None passes with
    ``allow_none``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(f"{option}: must be a positive integer, got {value!r}")
    return int(value)



def positive(option: str) -> Callable[[Any], int]:
    """The check of an option that takes a positive integer (an option table's ``check``):
    :func:`positive_int` naming ``option``."""
    def check(value: Any) -> int:
        return positive_int(option, value)
    return check


__all__ = ["AUTO_SHARD", "DEFAULT_SEEDS_TEXT", "ShardSpec", "parse_baselines", "parse_layers",
           "parse_seeds", "parse_states", "positive", "positive_int", "resolve_shard"]
