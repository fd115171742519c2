"""The probe grid runner: every (task, layer spec, pooling, seed) cell, from the cache alone.

Why it is organised this way: the cost of a layer sweep is dominated by per-model overhead,
so cells are grouped by (task, seed) and all their layer specs and L2 values are trained as
one batched program (:mod:`estratos.probe.classifiers`). Each task's cache rows are read
once (contiguous block reads) and reused for every layer spec and seed. Before any training,
every task is checked against the cache (complete, every sentence present, no NaN), so a
long run never dies half-way on a missing sentence. Results are appended cell by cell to a
JSON-lines store (:mod:`estratos.results`), which makes a killed run resumable.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from estratos import __version__
from estratos import errors as _errors
from estratos.errors import CacheError, EstratosError, MissingSentences, OptionError
from estratos.probe.cells import chance_levels, classifier_record, evaluate_cells
from estratos.probe.classifiers import torch_runtime
from estratos.probe.features import AVG, COMBINER_WIDTH, LayerSpec, parse_layers
from estratos.probe.predictions import outcome_predictions
from estratos.probe.settings import check_classifier, parse_seeds, task_overrides
from estratos.protocols import CellOutcome
from estratos.results import ResultRecord, ResultsStore, primary_score
from estratos.results.predictions import write_predictions
from estratos.results.record import utc_now

log = logging.getLogger(__name__)

#: features of one (task, seed) program are kept under this many bytes by splitting the
#: layer specs into groups trained one after the other (results do not depend on it); the
#: trainer holds one more (example-major) copy of the training features
FEATURE_BUDGET_BYTES = 1_000_000_000
_CHECK_ROWS = 8192
#: task vectors read by the pre-training check and kept for training (in-process runs)
VECTOR_BUDGET_BYTES = 1_500_000_000


def available_cores() -> int:
    """CPU cores this process may use (affinity-aware)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class _RunOptions:
    cache_path: str
    out: str
    layers: Tuple[LayerSpec, ...]
    pooling: str
    seeds: Tuple[int, ...]
    classifier: str
    sequential: bool
    overwrite: bool
    expect_model: Optional[str]
    threads: int


def _encode_hint(cache_path: Path, model: Any, specs: Sequence[Any], data_dirs: Any) -> str:
    dirs = []
    for spec in specs:
        try:
            d = str(data_dirs.for_suite(spec.suite))
        except (EstratosError, AttributeError):  # no DataDirs (tasks built in memory)
            continue
        if d not in dirs:
            dirs.append(d)
    data = " ".join(f"--data-dir {d}" for d in dirs) or "--data-dir DIR"
    ids = ",".join(s.id for s in specs)
    return f"estratos encode --model {model} --out {cache_path} --tasks {ids} {data}"


def _check_vectors(cache_path: Path, spec_id: str, vectors: np.ndarray,
                   sentences: Sequence[str], pooling: str) -> None:
    bad = ~np.isfinite(vectors).all(axis=(1, 2))
    if bad.any():
        first = sentences[int(np.flatnonzero(bad)[0])]
        raise CacheError(f"{cache_path}: {int(bad.sum())} row(s) needed by {spec_id} hold NaN "
                         f"or infinite {pooling} vectors, e.g. {first[:60]!r}; the cache is "
                         "corrupted: re-encode these sentences (`estratos cache verify` lists "
                         "them)")


def _layer_chunks(layers: Sequence[LayerSpec], n_examples: int, n_features: int
                  ) -> List[List[LayerSpec]]:
    per_layer = max(1, n_examples * n_features * 4)
    size = max(1, FEATURE_BUDGET_BYTES // per_layer)
    return [list(layers[i:i + size]) for i in range(0, len(layers), size)]


def _record(task: Any, layer: LayerSpec, pooling: str, seed: int, classifier: Dict[str, Any],
            outcome: CellOutcome, seconds: float, identity: Mapping[str, Any]) -> ResultRecord:
    spec = task.spec
    return ResultRecord(
        kind="probe", task=spec.id, suite=spec.suite, name=spec.name, group=spec.group,
        language=spec.language, layer=layer if layer == AVG else int(layer), pooling=pooling,
        seed=int(seed), protocol=task.protocol, fallback=task.fallback, classifier=classifier,
        metric=spec.metric, score=primary_score(spec.metric, outcome.test),
        l2=outcome.l2, dev=outcome.dev, test=outcome.test, sizes=dict(task.sizes),
        chance=chance_levels(task), epochs=outcome.epochs, seconds=round(seconds, 3),
        model=identity.get("model"), revision=identity.get("revision"),
        cache={k: identity.get(k) for k in ("path", "dtype", "max_length", "n_states", "dim",
                                             "tokenizer")},
        estratos_version=__version__, created=utc_now())


def _todo(spec: Any, opts: _RunOptions, identity: Mapping[str, Any], done: set
          ) -> Dict[int, List[LayerSpec]]:
    """Layer specs still to run, per seed (all of them with ``overwrite``)."""
    def key(layer: LayerSpec, seed: int) -> tuple:
        return (spec.id, layer, opts.pooling, seed, opts.classifier, identity.get("model"),
                identity.get("revision"))
    return {seed: [l for l in opts.layers if opts.overwrite or key(l, seed) not in done]
            for seed in opts.seeds}


def _read_vectors(cache: Any, spec: Any, task: Any, opts: _RunOptions,
                  todo: Mapping[int, Sequence[LayerSpec]]) -> Tuple[np.ndarray, List[int]]:
    """One read of the task's rows, only the hidden states its pending cells need (all of
    them when ``avg`` is pending); NaN/inf rows raise :class:`CacheError`."""
    rows = cache.rows_for(task.sentences)
    needed = {layer for layers in todo.values() for layer in layers}
    if AVG in needed:
        states = list(range(cache.n_states))
    else:
        states = sorted(int(layer) for layer in needed)
    t0 = time.perf_counter()
    vectors = cache.read(rows, opts.pooling, states)
    log.info("%s: read %d rows x %d states in %.2fs", spec.id, len(rows), len(states),
             time.perf_counter() - t0)
    _check_vectors(Path(opts.cache_path), spec.id, vectors, task.sentences, opts.pooling)
    return vectors, states


def _probe_task(cache: Any, spec: Any, task: Any, opts: _RunOptions, done: set,
                preread: Optional[Tuple[np.ndarray, List[int]]] = None) -> List[ResultRecord]:
    """All cells of one task: its rows read once, then one batched program per seed."""
    classifier = classifier_record(task, opts.classifier)
    identity = cache.identity()
    todo = _todo(spec, opts, identity, done)
    if not any(todo.values()):
        log.info("%s: every cell already in %s; skipped", spec.id, opts.out)
        return []
    vectors, states = preread or _read_vectors(cache, spec, task, opts, todo)
    # the vectors hold ``states`` only; "avg" always comes with every state
    position: Dict[Any, Any] = {s: i for i, s in enumerate(states)}
    position[AVG] = AVG
    store = ResultsStore(opts.out)
    written: List[ResultRecord] = []
    n_examples = sum(len(s) for s in task.splits.values())
    n_features = COMBINER_WIDTH[spec.combiner] * vectors.shape[2]
    for seed in opts.seeds:
        for chunk in _layer_chunks(todo[seed], n_examples, n_features):
            t0 = time.perf_counter()
            outcomes = evaluate_cells(task, vectors, [position[layer] for layer in chunk],
                                      [seed], opts.classifier, sequential=opts.sequential)[0]
            seconds = (time.perf_counter() - t0) / len(chunk)
            records = [_record(task, layer, opts.pooling, seed, classifier, o, seconds,
                               identity)
                       for layer, o in zip(chunk, outcomes)]
            # predictions first (with each record's ci): a line never lacks its predictions
            records = write_predictions(opts.out, records,
                                        [outcome_predictions(task, o) for o in outcomes])
            written += store.append(records, skip_done=not opts.overwrite)
            log.info("%s seed %d: %d cell(s) in %.1fs", spec.id, seed, len(chunk),
                     seconds * len(chunk))
    return written


def _spec_state(spec: Any) -> Dict[str, Any]:
    """A picklable copy of a TaskSpec's fields (its read-only mappings are not picklable)."""
    state = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        state[f.name] = dict(value) if isinstance(value, Mapping) else value
    return state


def _default_loader() -> Callable[[Any, Any], Any]:
    from estratos.tasks import load_task

    return load_task


def _worker(spec_state: Dict[str, Any], data_dirs: Any, opts: _RunOptions,
            done: set, loader: Optional[Callable[[Any, Any], Any]]) -> Tuple[str, Any]:
    """Process-pool entry point: one task; user errors come back as (class name, message)."""
    from estratos.tasks.types import TaskSpec

    load_task = loader or _default_loader()

    try:
        spec = TaskSpec(**spec_state)
        with torch_runtime(opts.threads):
            from estratos.cache import open_cache
            with open_cache(opts.cache_path) as cache:
                task = load_task(spec, data_dirs)
                return "ok", _probe_task(cache, spec, task, opts, done)
    except EstratosError as exc:
        return "error", (type(exc).__name__, str(exc))


def _reraise(name: str, message: str) -> None:
    cls = getattr(_errors, name, None)
    if cls is _errors.MissingSentences:
        raise MissingSentences(message, missing=0)
    if cls is _errors.InputError:
        raise _errors.InputError(message)
    if isinstance(cls, type) and issubclass(cls, EstratosError):
        raise cls(message)
    raise EstratosError(message)


def run_probe(cache_path: os.PathLike | str, specs: Sequence[Any], data_dirs: Any,
              out: os.PathLike | str, *, layers: Union[str, Sequence[LayerSpec]] = "all",
              pooling: str = "cls", seeds: Sequence[int] = (1111,),
              classifier: str = "senteval", sequential: bool = False, jobs: int = 1,
              overwrite: bool = False, expect_model: Optional[str] = None,
              threads: Optional[int] = None,
              loader: Optional[Callable[[Any, Any], Any]] = None) -> List[ResultRecord]:
    """Probe every (task, layer spec, pooling, seed) cell; returns the records written.

    ``layers``: ``"all"`` (every hidden state + ``avg``) or a comma list / sequence of
    indices and ``"avg"``. ``jobs`` runs tasks in that many processes, each pinned to
    ``threads`` torch threads (default 1: the probes are small, so extra threads gain little
    and lose a lot on shared cores; use ``jobs`` for more cores). Cells already in ``out`` are
    skipped unless ``overwrite``. Raises :class:`OptionError`, :class:`CacheError`
    (incomplete cache, NaN rows), :class:`MissingSentences` (with the ``estratos encode``
    command that adds them) or :class:`SettingsMismatch` (``expect_model``) before training.
    ``loader(spec, data_dirs) -> TaskData`` replaces :func:`estratos.tasks.load_task` (for
    data built in memory; with ``jobs > 1`` it must be a picklable module-level function).
    """
    from estratos.cache import open_cache

    load_task = loader or _default_loader()

    seeds_t = parse_seeds(seeds)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise OptionError(f"--jobs: must be a positive integer, got {jobs!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise OptionError(f"--threads: must be a positive integer, got {threads!r}")
    specs = list(specs)
    if not specs:
        raise OptionError("--tasks: no task selected")
    check_classifier(classifier)
    for spec in specs:  # bad overrides fail before any reading
        task_overrides(spec.classifier, task=spec.id)
    cache_path = Path(cache_path)
    expect = {"model": expect_model} if expect_model else None
    out_path = Path(out)
    with open_cache(cache_path, expect=expect) as cache:
        if pooling not in cache.poolings:
            raise OptionError(f"--pooling: {pooling!r} is not in the cache {cache_path} "
                              f"(it has {', '.join(cache.poolings)})")
        layer_specs = parse_layers(layers, cache.n_states)
        tasks = {}
        missing: Dict[str, int] = {}
        for spec in specs:
            task = load_task(spec, data_dirs)
            try:
                cache.rows_for(task.sentences)
            except MissingSentences as exc:
                missing[spec.id] = exc.missing
            tasks[spec.id] = task
        if missing:
            total = sum(missing.values())
            short = [s for s in specs if s.id in missing]
            detail = ", ".join(f"{k}: {v}" for k, v in missing.items())
            raise MissingSentences(
                f"{cache_path}: {total} sentence(s) the tasks need are not in the cache "
                f"({detail}); add them with: "
                f"{_encode_hint(cache_path, cache.attrs.get('model'), short, data_dirs)}",
                missing=total)
        n_jobs = min(jobs, len(specs))
        opts = _RunOptions(str(cache_path), str(out_path), layer_specs, pooling, seeds_t,
                           classifier, bool(sequential), bool(overwrite), expect_model,
                           threads or 1)
        if opts.threads * n_jobs > available_cores():
            log.warning("--jobs %d x --threads %d exceeds the %d available cores; expect "
                        "slow-downs", n_jobs, opts.threads, available_cores())
        store = ResultsStore(out_path)
        done = set() if overwrite else store.done_keys()
        written: List[ResultRecord] = []
        pending = [spec for spec in specs
                   if any(_todo(spec, opts, cache.identity(), done).values())]
        # NaN/inf rows are found before any training starts. In-process runs keep what this
        # check read (up to a budget) so each task's rows are read once.
        kept: Dict[str, Tuple[np.ndarray, List[int]]] = {}
        kept_bytes = 0
        for spec in pending:
            todo = _todo(spec, opts, cache.identity(), done)
            if n_jobs == 1:
                vectors, states = _read_vectors(cache, spec, tasks[spec.id], opts, todo)
                if kept_bytes + vectors.nbytes <= VECTOR_BUDGET_BYTES:
                    kept[spec.id] = (vectors, states)
                    kept_bytes += vectors.nbytes
                continue
            rows = cache.rows_for(tasks[spec.id].sentences)
            for i in range(0, len(rows), _CHECK_ROWS):
                _check_vectors(cache_path, spec.id, cache.read(rows[i:i + _CHECK_ROWS], pooling),
                               tasks[spec.id].sentences[i:i + _CHECK_ROWS], pooling)
        if n_jobs == 1:
            with torch_runtime(opts.threads):
                for spec in specs:
                    written += _probe_task(cache, spec, tasks[spec.id], opts, done,
                                           kept.pop(spec.id, None))
            return written
    del tasks
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=ctx) as pool:
        futures = [pool.submit(_worker, _spec_state(spec), data_dirs, opts, done, loader)
                   for spec in specs]
        errors = []
        for fut in futures:
            status, payload = fut.result()
            if status == "ok":
                written += payload
            else:
                errors.append(payload)
    if errors:
        _reraise(*errors[0])
    return written


def probe_tasks(cache: os.PathLike | str, tasks: str, out: os.PathLike | str, *,
                data_dir: Sequence[str] = (), task_files: Sequence[str] = (),
                layers: str = "all", pooling: str = "cls",
                seeds: Union[str, Sequence[int]] = "1111",
                classifier: str = "senteval", sequential: bool = False, jobs: int = 1,
                overwrite: bool = False, expect_model: Optional[str] = None,
                threads: Optional[int] = None) -> List[ResultRecord]:
    """``estratos probe`` as a function: resolve task ids (plus ``--task-file`` specs) and
    data folders from their command-line forms, then :func:`run_probe`."""
    from estratos.tasks import DataDirs, load_task_file, select_tasks

    extra = [load_task_file(p) for p in task_files]
    if not tasks or not str(tasks).strip():
        if not extra:
            raise OptionError("--tasks: give task ids, suites or suite:GROUP (or --task-file)")
        specs = extra
    else:
        specs = select_tasks(str(tasks), extra=extra)
    seed_list = parse_seeds(seeds)
    dirs = DataDirs.parse(list(data_dir))
    dirs.check(specs)
    return run_probe(cache, specs, dirs, out, layers=layers,
                     pooling=pooling, seeds=seed_list, classifier=classifier,
                     sequential=sequential, jobs=jobs, overwrite=overwrite,
                     expect_model=expect_model, threads=threads)


def summarize(records: Sequence[ResultRecord], out: os.PathLike | str) -> str:
    """A few lines for the terminal: cells written, and each task's best layer spec.

    A cell whose score is undefined (null, e.g. a correlation of constant cosines) is left
    out of the best-layer mean; a task with no defined score says so."""
    if not records:
        return f"nothing to do: every cell is already in {out} (use --overwrite to redo)"
    lines = [f"wrote {len(records)} cell(s) to {out}"]
    by_task: Dict[str, Dict[Any, List[float]]] = {}
    for r in records:
        scores = by_task.setdefault(r.task, {}).setdefault(r.layer, [])
        if r.score is not None:
            scores.append(float(r.score))
    for task, layers in by_task.items():
        means = {layer: sum(v) / len(v) for layer, v in layers.items() if v}
        if not means:
            lines.append(f"  {task}: every score undefined")
            continue
        best = max(means, key=lambda k: means[k])
        undefined = [str(layer) for layer, v in layers.items() if not v]
        note = f"; undefined at layer {', '.join(undefined)}" if undefined else ""
        lines.append(f"  {task}: best layer {best} ({means[best]:.2f}, mean over seeds){note}")
    return "\n".join(lines)
