"""Command-line forms shared by several commands, parsed and checked in one place.

Why one module: ``--seeds``, ``--layers``, ``--shard``, ``--jobs``/``--threads`` and
``--device`` are taken by encode, probe, baseline, slurm and the demo: one parser each, so
they cannot drift apart. Everything here is standard library only (:func:`resolve_device`
imports torch when called), so the CLI checks options before it imports numpy, torch or
transformers (an option error answers at once). Each function raises
:class:`~estratos.errors.OptionError` naming the option. Task selection (``--tasks``,
``--task-file``, ``--data-dir``) is :func:`estratos.tasks.selection.select_specs`.
"""

from __future__ import annotations

import os
from pathlib import Path
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
    SURFACE_BASELINES,
    LayerSpec,
)

#: ``--seeds`` default as the CLI shows it
DEFAULT_SEEDS_TEXT = str(DEFAULT_SEED)
#: ``--shard`` value that reads the SLURM array variables
AUTO_SHARD = "auto"
#: a shard as given: ``"I/N"``, ``(I, N)``, ``"auto"`` or None
ShardSpec = Union[None, str, Tuple[int, int]]
#: ``--device`` words besides ``cuda:N``
DEVICE_WORDS = ("auto", "cpu", "cuda", "mps")
#: the device types each stage runs on: encode's forward pass runs on Apple's MPS too; the
#: probes do not (training and scoring use float64, which MPS lacks)
ENCODE_DEVICES = ("cpu", "cuda", "mps")
PROBE_DEVICES = ("cpu", "cuda")


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


#: files that exist where a GPU driver torch can use as ``cuda`` is installed (NVIDIA, the
#: WSL2 GPU bridge, AMD ROCm)
_GPU_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def gpu_driver_present() -> bool:
    """Whether this machine may have a CUDA device, known without importing torch: a GPU
    driver's file, or ``nvidia-smi`` on the PATH (True off Linux, where this cannot tell)."""
    import shutil
    import sys

    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(p) for p in _GPU_DRIVER_FILES) or bool(shutil.which("nvidia-smi"))


def default_jobs(device: Optional[str]) -> int:
    """``--jobs`` when not given: 1, or every usable core under ``--device auto`` on a
    machine with a GPU driver, where the probe trains on the GPU and the cores at once (the
    GPU's process is one of them)."""
    if (device or "auto") == "auto" and gpu_driver_present():
        return available_cores()
    return 1


def device_help(kinds: Sequence[str] = ENCODE_DEVICES) -> str:
    """The ``--device`` values a stage running on ``kinds`` takes, for help and errors."""
    words = ["auto", *kinds]
    words.insert(words.index("cuda") + 1, "cuda:N")
    return ", ".join(words)


def check_device(text: Optional[str], option: str = "--device",
                 kinds: Sequence[str] = ENCODE_DEVICES, *, driver: bool = True) -> str:
    """The syntax of ``--device`` for a stage that runs on ``kinds`` (``auto``, a kind, or
    ``cuda:N``), lower-cased, without importing torch; CUDA where no GPU driver is installed
    (:func:`gpu_driver_present`; ``driver=False``: not looked for) is refused at once, since
    torch takes seconds to load and say so; whether the device exists is
    :func:`resolve_device`'s check."""
    value = "auto" if text is None else str(text).strip().lower()
    kind, colon, index = value.partition(":")
    if (kind not in DEVICE_WORDS or (colon and (kind != "cuda" or not index.isdigit()))
            or (kind != "auto" and kind not in kinds)):
        raise OptionError(f"{option}: {text!r} is not a device here (use {device_help(kinds)})")
    if driver and kind == "cuda" and not gpu_driver_present():  # known without torch
        raise OptionError(f"{option}: {text!r} asks for a GPU but CUDA is not available on "
                          "this machine (no GPU driver: no NVIDIA driver, nvidia-smi or "
                          "ROCm; use cpu or auto)")
    return value


def resolve_device(text: Any, option: str = "--device",
                   kinds: Sequence[str] = ENCODE_DEVICES) -> Any:
    """The ``torch.device`` that ``--device`` names on this machine: ``auto`` is CUDA when
    present, else the CPU. Asking for CUDA or MPS where there is none, or a GPU index the
    machine lacks, is an :class:`OptionError` naming the option. The one device rule of
    encode and probe (``kinds``: :data:`ENCODE_DEVICES`, :data:`PROBE_DEVICES`); imports
    torch."""
    import torch

    value = check_device(str(text) if isinstance(text, torch.device) else text, option, kinds,
                         driver=False)  # torch itself says whether CUDA is there
    if value == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, _, index = value.partition(":")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise OptionError(f"{option}: {text!r} asks for a GPU but CUDA is not available "
                              "on this machine (use cpu or auto)")
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            raise OptionError(f"{option}: {text!r}: this machine has {count} CUDA device(s) "
                              f"(cuda:0..cuda:{count - 1})")
    elif kind == "mps" and not (hasattr(torch.backends, "mps")
                                and torch.backends.mps.is_available()):
        raise OptionError(f"{option}: {text!r} asks for Apple's MPS but it is not available "
                          "on this machine (use cpu or auto)")
    return torch.device(value)


def available_cores() -> int:
    """CPU cores this process may use (affinity-aware: taskset, cgroups, SLURM)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def _creatable_below(target: str, fail: Callable[[str], OptionError]) -> str:
    """The nearest existing folder at or above ``target``, checked to be a folder in which
    files can be created (what ``os.access`` cannot tell too: a read-only file system, an
    ACL, a full quota); raises ``fail(reason)``. Writes nothing that stays."""
    import errno
    import tempfile

    parent = target
    while not os.path.exists(parent):
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    if not os.path.isdir(parent):
        raise fail(f"{os.strerror(errno.ENOTDIR)} ({parent} is a file)")
    try:
        with tempfile.TemporaryFile(dir=parent, prefix=".estratos-check-"):
            pass
    except OSError as exc:
        raise fail(f"{exc.strerror or exc} (cannot create files in {parent})") from None
    return parent


def check_output_file(path: Union[str, os.PathLike], option: str = "--out") -> None:
    """Check, before any work, that results can be written at ``path`` (a file created with
    its parent folders as needed): an existing ``path`` must be a writable file, and the
    nearest existing folder above it writable, with no file on the way ("Not a directory").
    Raises :class:`OptionError` naming ``option``; writes nothing."""
    import errno

    target = os.path.abspath(os.path.expanduser(os.fspath(path)))
    shown = os.fspath(path)

    def fail(reason: str) -> OptionError:
        return OptionError(f"{option} {shown}: {reason}")

    if os.path.isdir(target):
        raise fail("is a folder; give a results file such as run.jsonl")
    if os.path.exists(target):  # appended to: its folder need not take new files
        if not os.access(target, os.W_OK):
            raise fail(f"{os.strerror(errno.EACCES)} (the file cannot be written)")
        return
    _creatable_below(os.path.dirname(target), fail)


def check_output_folder(path: Union[str, os.PathLike], option: str = "--out") -> None:
    """Check, before any work, that a folder of outputs can be made at ``path`` (created with
    its parents as needed): an existing ``path`` must be a folder, and the nearest existing
    folder at or above it must let files be created, with no file on the way ("Not a
    directory"): a read-only folder, a path under a file, /proc. Raises
    :class:`OptionError` naming ``option``; writes nothing."""
    target = os.path.abspath(os.path.expanduser(os.fspath(path)))
    shown = os.fspath(path)

    def fail(reason: str) -> OptionError:
        return OptionError(f"{option} {shown}: {reason}")

    if os.path.exists(target) and not os.path.isdir(target):
        raise fail("exists and is not a folder")
    _creatable_below(target, fail)


def is_local_model(model: Union[str, os.PathLike]) -> bool:
    """Whether ``--model`` names a local folder rather than a hub id: a path written as one
    (``/``, ``./``, ``../``, ``~``) or anything that exists on disk. The one rule: a hub id
    (``org/name``) that is not also a path here is fetched from the hub."""
    text = os.fspath(model)
    return text.startswith(("/", "./", "../", "~")) or Path(text).exists()


def model_identity(model: Union[str, os.PathLike]) -> str:
    """What a cache records as its ``model``: a local folder by its absolute resolved path (a
    rerun from another folder, or through a link, still matches), a hub id as given."""
    text = os.fspath(model)
    return str(Path(text).expanduser().resolve()) if is_local_model(text) else text


__all__ = ["AUTO_SHARD", "DEFAULT_SEEDS_TEXT", "DEVICE_WORDS", "ENCODE_DEVICES", "PROBE_DEVICES",
           "ShardSpec", "available_cores", "check_device", "check_output_file", "default_jobs",
           "device_help",
           "gpu_driver_present", "parse_baselines", "parse_layers", "parse_seeds",
           "parse_states", "positive_int", "resolve_device", "resolve_shard"]
