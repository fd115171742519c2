"""``estratos similarity`` and ``estratos geometry`` as functions: options checked, caches
opened and joined on the sentence key, the passes over chunks run, records appended.

Why this order: every option and input a user can get wrong (measures, features,
``--max-sentences``, ``--out``, the sentence selection, a cache that is missing, lacks the
pooling or a layer, or lacks some sentences) is checked before the first chunk is read,
and every record is computed in memory before the one append, so a failed run writes
nothing. A rerun with the same options skips the measures whose records are all in
``--out`` (``overwrite`` redoes them; readers keep the last copy).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from estratos import __version__
from estratos.devices import available_cores
from estratos.errors import OptionError
from estratos.options import parse_layers
from estratos.outputs import check_output_file
from estratos.results.similarity import (
    Layer,
    MapRecord,
    append_maps,
    cache_part,
    done_map_keys,
)
from estratos.similarity import measures as M
from estratos.similarity.bootstrap import LEVEL, cka_intervals, resample_weights, resampled_cka
from estratos.similarity.config import MapConfig
from estratos.similarity.geometry import GEOMETRY_MEASURES, GeometryAccumulator
from estratos.similarity.residualize import Residualizer, length_covariates, orthonormal_basis
from estratos.similarity.sentences import SentenceSet, cache_rows, select_sentences
from estratos.similarity.streaming import CrossProducts, Moments, layer_moments
from estratos.vocab import AVG, STANDARDIZED_FEATURES, LayerSpec, utc_now

log = logging.getLogger(__name__)

#: measures computed from streamed d x d cross-products over every sentence
STREAMED = ("linear-cka", "debiased-cka", "procrustes")
#: measures computed on the seeded subsample (sentence x sentence matrices)
SAMPLED = ("rsa", "mutual-knn")
#: sentences per chunk of the streamed passes (the memory of a chunk: rows x layers x dim)
CHUNK_ROWS = 4096
#: the most working memory :func:`_each` gives items running at once (a subsample's RDM
#: or neighbour search holds about 32 bytes per sentence pair: 128 MB at 2,000 sentences)
PARALLEL_BYTES = 1 << 30

PathLike = Union[str, os.PathLike]


@dataclass
class Side:
    """One cache's part of a run: the reader, its layer specs and each sentence's row; with
    ``residual`` (``--residualize``, fitted), every read gives the layers' residuals."""

    reader: Any
    layers: Tuple[LayerSpec, ...]
    rows: np.ndarray
    residual: Optional[Residualizer] = None

    @property
    def part(self) -> Dict[str, Any]:
        return cache_part(self.reader.identity())

    def read(self, positions: np.ndarray, pooling: str) -> List[np.ndarray]:
        """The layers' (c, d) float32 rows of the sentences at ``positions`` (their
        residuals when ``residual`` is set)."""
        block = self.reader.read(self.rows[positions], pooling, states=list(self.layers))
        xs = [block[:, i, :] for i in range(len(self.layers))]
        return xs if self.residual is None else self.residual.apply(positions, xs)


def _layers(reader: Any, text: str, option: str) -> Tuple[LayerSpec, ...]:
    """``--layers`` against a cache: its stored states and avg (dropped from ``all`` when the
    cache does not store it; named as an error when asked for)."""
    try:
        specs = parse_layers(text, reader.n_states, reader.states)
    except OptionError as exc:
        raise OptionError(str(exc.cli_text()).replace("--layers", option, 1)
                          + f" ({reader.path})") from None
    if AVG in specs and not reader.has_avg:
        if AVG in [t.strip().lower() for t in str(text).split(",")]:
            raise OptionError(f"{option}: {reader.path} does not store {AVG}")
        specs = tuple(s for s in specs if s != AVG)
    return specs


def _pooling(readers: Sequence[Any], pooling: Optional[str]) -> str:
    """The pooling every cache holds: the one asked for, else the first cache's first
    pooling the others hold too."""
    if pooling is None:
        common = [p for p in readers[0].poolings if all(p in r.poolings for r in readers[1:])]
        if not common:
            raise OptionError("--pooling: the caches share no pooling ("
                              + "; ".join(f"{r.path}: {', '.join(r.poolings)}" for r in readers)
                              + ")")
        return common[0]
    for r in readers:
        if pooling not in r.poolings:
            raise OptionError(f"--pooling: {r.path} has no pooling {pooling!r} (it has "
                              f"{', '.join(r.poolings)})")
    return pooling


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """BLAS, LAPACK and torch on one thread: the many small decompositions (an SVD per
    layer pair, an eigendecomposition per layer) took 10 to 30 times longer on two threads
    of a busy two-core machine than on one, and geometry's per-layer 4,096 x 384 products
    twice as long; :func:`_each` runs such work on every core, one thread each."""
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(before)


def _each(fn: Callable[[Any], Any], items: Sequence[Any], item_bytes: int = 0) -> List[Any]:
    """``fn`` of each item, in the items' order, on every core this process may use (one
    BLAS thread each), but no more at once than :data:`PARALLEL_BYTES` allows for items of
    ``item_bytes`` working memory each: the RDMs' sorts, the neighbour searches and the SVDs
    release the GIL, so two cores run two items at once. Each item's result does not depend
    on the others or on the threads' timing."""
    from concurrent.futures import ThreadPoolExecutor

    fits = PARALLEL_BYTES // item_bytes if item_bytes else len(items)
    workers = max(1, min(len(items), available_cores(), fits))
    with _one_thread(), ThreadPoolExecutor(workers, thread_name_prefix="estratos-map") as pool:
        return list(pool.map(fn, items))


def _chunks(n: int, order: np.ndarray) -> Iterator[np.ndarray]:
    for lo in range(0, n, CHUNK_ROWS):
        yield order[lo:lo + CHUNK_ROWS]


def _stream(sides: Sequence[Optional[Side]], n: int, order: np.ndarray, pool: str
            ) -> Iterator[List[Optional[List[np.ndarray]]]]:
    """Each chunk's layers from each side (None for an absent side), in ``order``; the next
    chunk is read in a helper thread while the caller works on this one (the products run
    in BLAS, outside the GIL, so reading and multiplying overlap: about a third less time
    on two cores)."""
    from concurrent.futures import ThreadPoolExecutor

    def read(positions: np.ndarray) -> List[Optional[List[np.ndarray]]]:
        return [None if side is None else side.read(positions, pool) for side in sides]

    chunks = list(_chunks(n, order))
    if not chunks:
        return
    with ThreadPoolExecutor(1, thread_name_prefix="estratos-read") as reader:
        pending = reader.submit(read, chunks[0])
        for following in [*chunks[1:], None]:
            current = pending.result()
            if following is not None:
                pending = reader.submit(read, following)
            yield current


@dataclass
class MapRun:
    """What a similarity or geometry run did."""

    out: str
    kind: str
    n_sentences: int
    written: List[MapRecord] = field(default_factory=list)
    already_done: int = 0
    seconds: float = 0.0
    timings: Dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """What the CLI prints."""
        parts = [f"wrote {len(self.written)} {self.kind} record(s) to {self.out} over "
                 f"{self.n_sentences} sentences in {self.seconds:.1f} s"]
        if self.already_done:
            parts.append(f"{self.already_done} already there (skipped; --overwrite redoes "
                         "them)")
        undefined = sum(r.value is None for r in self.written)
        if undefined:
            parts.append(f"{undefined} undefined (null, with the reason in `undefined`)")
        return "; ".join(parts)


@contextlib.contextmanager
def _open_all(paths: Sequence[PathLike]) -> Iterator[List[Any]]:
    from estratos.cache import open_cache

    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(open_cache(p)) for p in paths]


class _Records:
    """Builds the run's records (all sharing the caches, pooling and sentence set)."""

    def __init__(self, kind: str, a: Side, b: Optional[Side], pooling: str,
                 sentences: SentenceSet) -> None:
        self.kind, self.pooling = kind, pooling
        self.a = a.part
        # a map within one cache pairs the cache with itself; geometry has no second cache
        self.b = (b or a).part if kind == "similarity" else None
        self.sentences = {"digest": sentences.digest, "n": len(sentences)}
        self.created = utc_now()

    def make(self, measure: str, la: Layer, lb: Layer, features: str,
             value: Optional[M.Value], settings: Dict[str, Any],
             sample: Optional[Dict[str, Any]], seconds: Optional[float] = None) -> MapRecord:
        v = value or M.Value(None, "not computed")
        return MapRecord(kind=self.kind, measure=measure, value=v.value, layer_a=la,
                         layer_b=lb, pooling=self.pooling, features=features, a=self.a,
                         b=self.b, sentences=self.sentences, settings=settings, sample=sample,
                         undefined=v.undefined, detail=dict(v.detail), seconds=seconds,
                         estratos_version=__version__, created=self.created)


def similarity_maps(cache: PathLike, out: PathLike, config: Optional[MapConfig] = None, *,
                    other: Optional[PathLike] = None, tasks: Optional[str] = None,
                    sentences_file: Optional[PathLike] = None, data_dirs: Sequence[str] = (),
                    task_files: Sequence[str] = ()) -> MapRun:
    """``estratos similarity``: every layer x layer map of ``cache`` with itself, or with
    ``other`` (layers ``config.other_layers``, default ``config.layers``), over the
    sentences of ``tasks``/``task_files`` or ``sentences_file``; records appended to
    ``out``. ``config``: :class:`~estratos.similarity.config.MapConfig` (None: the
    defaults)."""
    started = time.perf_counter()
    config = config or MapConfig()
    check_output_file(out)
    chosen, feats, k = config.measures, config.features, config.k
    size, seed, products, overwrite = (config.max_sentences, config.seed, config.products,
                                       config.overwrite)
    layers, other_layers, pooling = config.layers, config.other_layers, config.pooling
    sentences = select_sentences(sentences_file, tasks, data_dirs, task_files)
    paths = [cache] if other is None else [cache, other]
    with _open_all(paths) as readers:
        pool = _pooling(readers, pooling)
        a = Side(readers[0], _layers(readers[0], layers, "--layers"), cache_rows(readers[0],
                                                                                 sentences))
        b = None if other is None else Side(
            readers[1], _layers(readers[1], other_layers or layers, "--other-layers"),
            cache_rows(readers[1], sentences))
        n = len(sentences)
        if n < 4 and any(m in STREAMED for m in chosen):
            raise OptionError(f"--tasks/--sentences: {n} sentence(s); the measures need at "
                              "least 4")
        pair = _Pair(a, b, pool, n, feats)
        builder = _Records("similarity", a, b, pool, sentences)
        sample_pos = sentences.subsample(size, seed)
        sample = {"size": len(sample_pos), "of": n, "seed": seed}
        resampling = _Resampling(config.bootstrap, config.bootstrap_seed, len(sample_pos),
                                 seed)
        planned = [builder.make(m, i, j, f, None,
                                _settings(m, products, k, resampling, config.residualize),
                                sample if m in SAMPLED else None)
                   for m in chosen for f in feats for i in a.layers for j in pair.lb]
        done: Set[Any] = set() if overwrite else done_map_keys(out)
        todo = {r.measure for r in planned if r.key not in done}
        run = MapRun(os.fspath(out), "similarity", n)
        values = _similarity_values(
            pair, [m for m in chosen if m in STREAMED and m in todo],
            [m for m in chosen if m in SAMPLED and m in todo], sample_pos, products, k,
            run.timings, resampling, config.residualize)
        records = [builder.make(r.measure, r.layer_a, r.layer_b, r.features,
                                values.get((r.measure, r.features, r.layer_a, r.layer_b)),
                                r.settings, r.sample)
                   for r in planned if r.measure in todo]
    return _finish(run, out, records, overwrite, started, len(planned))


@dataclass(frozen=True)
class _Resampling:
    """``--bootstrap`` resamples (0: none) of the subsample (``size`` sentences drawn with
    ``sample_seed``) with ``seed``: linear CKA's intervals and ties
    (:mod:`estratos.similarity.bootstrap`)."""

    resamples: int
    seed: int
    size: int
    sample_seed: int

    def settings(self) -> Dict[str, Any]:
        """What a linear CKA record holds of it (its interval depends on all of it)."""
        return {"resamples": self.resamples, "seed": self.seed, "level": LEVEL,
                "size": self.size, "sample_seed": self.sample_seed}


def _settings(measure: str, products: str, k: int, resampling: Optional[_Resampling] = None,
              residualize: Optional[str] = None) -> Dict[str, Any]:
    """The settings a similarity record of ``measure`` holds (what its value and its
    interval depend on beyond the layers and features)."""
    found: Dict[str, Any] = {}
    if measure in STREAMED:
        found["products"] = products
        if measure == "linear-cka" and resampling is not None and resampling.resamples:
            found["bootstrap"] = resampling.settings()
    elif measure == "mutual-knn":
        found["k"] = k
    if residualize is not None:
        found["residualize"] = residualize
    return found


@dataclass
class _Pair:
    """The two sides a similarity run compares (``b`` None: ``a`` with itself), the pooling,
    the sentence count and the features, as every pass over them reads them."""

    a: Side
    b: Optional[Side]
    pool: str
    n: int
    feats: Tuple[str, ...]
    #: the sentences in the first cache's row order (reads go forward through the file)
    order: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.order = np.argsort(self.a.rows, kind="stable")

    @property
    def lb(self) -> Tuple[LayerSpec, ...]:
        """The layers of the second side (the first's when it is compared with itself)."""
        return self.a.layers if self.b is None else self.b.layers

    def stream(self) -> Iterator[List[Optional[List[np.ndarray]]]]:
        """One pass over every sentence, chunk by chunk, both sides (:func:`_stream`)."""
        return _stream([self.a, self.b], self.n, self.order, self.pool)


@contextlib.contextmanager
def _timed(timings: Dict[str, float], step: str) -> Iterator[None]:
    """Record the block's wall-clock seconds as ``timings[step]`` (logged by
    :func:`_finish`)."""
    t = time.perf_counter()
    yield
    timings[step] = time.perf_counter() - t


class _Subsample:
    """The seeded subsample's rows of each side, picked out of the chunks of a pass that
    reads every sentence anyway, so that they need no scattered read of their own (3 s for
    2,000 of 50,000 sentences of two wide caches); the rows equal ``Side.read(positions)``."""

    def __init__(self, positions: np.ndarray, n: int) -> None:
        self.positions = positions
        self.slot = np.full(n, -1, dtype=np.int64)
        self.slot[positions] = np.arange(len(positions))
        self.rows: List[Optional[List[np.ndarray]]] = []
        self.picked = 0

    def picking(self, order: np.ndarray, chunks: Iterator[List[Optional[List[np.ndarray]]]]
                ) -> Iterator[List[Optional[List[np.ndarray]]]]:
        """``chunks`` (a pass in ``order``) unchanged, keeping the subsample's rows."""
        for at, chunk in zip(_chunks(len(order), order), chunks):
            slots = self.slot[at]
            hit = slots >= 0
            if not self.rows:
                self.rows = [None if side is None else
                             [np.empty((len(self.positions), x.shape[1]), dtype=x.dtype)
                              for x in side] for side in chunk]
            for side, kept in zip(chunk, self.rows):
                if side is not None and kept is not None:
                    for x, rows in zip(side, kept):
                        rows[slots[hit]] = x[hit]
            self.picked += int(hit.sum())
            yield chunk

    def read(self, side: int, reader: Side, pool: str) -> List[np.ndarray]:
        """The rows of side ``side``: those picked when the pass went through every chunk,
        else read from its cache."""
        picked = self.rows[side] if self.rows and self.picked == len(self.positions) else None
        return picked if picked is not None else reader.read(self.positions, pool)


def _similarity_values(pair: _Pair, streamed: Sequence[str], sampled: Sequence[str],
                       sample_pos: np.ndarray, products: str, k: int,
                       timings: Dict[str, float], resampling: Optional[_Resampling] = None,
                       residualize: Optional[str] = None) -> Dict[Tuple[Any, ...], M.Value]:
    """The value of every (measure, features, layer, layer) still to do: a first pass for
    each layer's moments (needed by the streamed measures, and by the sampled ones to
    standardize; it picks the subsample's rows on its way), then the streamed measures'
    cross-products, linear CKA's intervals from resamples of the subsample (``resampling``),
    then the sampled measures on the subsample ``sample_pos``. With ``residualize``, a pass
    before them all fits the covariates' regression (:func:`_residualize`), and every read
    after it gives residuals."""
    values: Dict[Tuple[Any, ...], M.Value] = {}
    if residualize is not None and (streamed or sampled):
        with _timed(timings, "residualize"):
            _residualize(pair)
    moments_a: Optional[List[Moments]] = None
    moments_b: Optional[List[Moments]] = None
    subsample = _Subsample(sample_pos, pair.n)
    boot = resampling is not None and resampling.resamples > 0 and "linear-cka" in streamed
    if streamed or (sampled and STANDARDIZED_FEATURES in pair.feats):
        with _timed(timings, "moments"):
            chunks = pair.stream()
            if sampled or boot:
                chunks = subsample.picking(pair.order, chunks)
            moments_a, moments_b = _moments(chunks,
                                            None if pair.b is None else len(pair.a.layers))
    if streamed and moments_a is not None:
        _streamed(values, pair, streamed, moments_a, moments_b, products, timings)
    if boot and resampling is not None:
        with _timed(timings, "bootstrap"):
            rows_a = subsample.read(0, pair.a, pair.pool)
            rows_b = None if pair.b is None else subsample.read(1, pair.b, pair.pool)
            _intervals(values, pair, resampling, rows_a, rows_b, moments_a, moments_b)
    if sampled:
        with _timed(timings, "sampled measures"):
            rows_a = subsample.read(0, pair.a, pair.pool)
            rows_b = None if pair.b is None else subsample.read(1, pair.b, pair.pool)
            _sampled(values, sampled, pair.feats, pair.a.layers, pair.lb, rows_a, rows_b,
                     moments_a, moments_b, k)
    if pair.a.residual is not None:
        _explained(values, pair)
    return values


def _residualize(pair: _Pair) -> None:
    """``--residualize length``: each side's token counts (both sides' between two caches)
    as covariates, one pass over every sentence to fit each layer's regression on them
    (:class:`estratos.similarity.residualize.Residualizer`), then each side reads
    residuals."""
    sides = [side for side in (pair.a, pair.b) if side is not None]
    basis = orthonormal_basis(length_covariates(
        [side.reader.token_counts(side.rows) for side in sides]))
    fits = [Residualizer(basis, len(side.layers)) for side in sides]
    for positions, chunk in zip(_chunks(pair.n, pair.order),
                                _stream(sides, pair.n, pair.order, pair.pool)):
        for f, xs in zip(fits, chunk):
            assert xs is not None
            f.add(positions, xs)
    for side, f in zip(sides, fits):
        f.finish()
        side.residual = f


def _explained(values: Dict[Tuple[Any, ...], M.Value], pair: _Pair) -> None:
    """Each value's ``detail.residualized``: the share of each side's layer variance the
    covariates explained (what was taken out before measuring)."""
    ra = pair.a.residual
    rb = ra if pair.b is None else pair.b.residual
    assert ra is not None and rb is not None
    index_a = {la: i for i, la in enumerate(pair.a.layers)}
    index_b = {lb: j for j, lb in enumerate(pair.lb)}
    for key, v in list(values.items()):
        _, _, la, lb = key
        values[key] = M.Value(v.value, v.undefined, {**v.detail, "residualized": {
            "explained_a": ra.explained[index_a[la]],
            "explained_b": rb.explained[index_b[lb]],
            "covariates": int(ra.basis.shape[1])}})


def _streamed(values: Dict[Tuple[Any, ...], M.Value], pair: _Pair, measures: Sequence[str],
              moments_a: List[Moments], moments_b: Optional[List[Moments]], products: str,
              timings: Dict[str, float]) -> None:
    """Linear CKA, debiased CKA and Procrustes of every layer pair from one more pass over
    every sentence: the d x d cross-products of each pair (centred, or standardized, with
    the first pass's moments), from which each measure is a small computation."""
    with _timed(timings, "products"):
        acc = CrossProducts(moments_a, moments_b, products)
        for xs, ys in pair.stream():
            assert xs is not None
            acc.add(xs, ys)
    fns: Dict[str, Callable[[M.PairStats], M.Value]] = {
        "linear-cka": M.linear_cka_stats, "debiased-cka": M.debiased_cka_stats,
        "procrustes": partial(M.procrustes_stats, exact=products == "float64")}
    pairs = [(f, i, j) for f in pair.feats for i in range(len(pair.a.layers))
             for j in range(len(pair.lb))]

    def measured(at: Tuple[str, int, int]) -> List[M.Value]:
        stats = acc.pair(at[1], at[2], standardized=at[0] == STANDARDIZED_FEATURES)
        return [fns[m](stats) for m in measures]

    with _timed(timings, "streamed measures"):
        for (f, i, j), found in zip(pairs, _each(measured, pairs)):
            for m, v in zip(measures, found):
                values[(m, f, pair.a.layers[i], pair.lb[j])] = v


def _intervals(values: Dict[Tuple[Any, ...], M.Value], pair: _Pair, resampling: _Resampling,
               rows_a: List[np.ndarray], rows_b: Optional[List[np.ndarray]],
               moments_a: Optional[Sequence[Moments]], moments_b: Optional[Sequence[Moments]]
               ) -> None:
    """Linear CKA's interval and ties (:func:`estratos.similarity.bootstrap.cka_intervals`)
    added to the detail of each linear CKA value, per reading, from resamples of the
    subsample's rows (standardized with the whole set's statistics)."""
    weights = resample_weights(len(rows_a[0]), resampling.resamples, resampling.seed)
    for f in pair.feats:
        std = f == STANDARDIZED_FEATURES
        xs = _scaled(rows_a, moments_a, std)
        ys = None if rows_b is None else _scaled(rows_b, moments_b, std)
        drawn = resampled_cka(xs, ys, weights, _each)
        full = np.full(drawn.shape[1:], np.nan)
        for i, la in enumerate(pair.a.layers):
            for j, lb in enumerate(pair.lb):
                v = values.get(("linear-cka", f, la, lb))
                if v is not None and v.value is not None:
                    full[i, j] = v.value
        found = cka_intervals(full, drawn, len(rows_a[0]), pair.n, pair.b is None)
        for i, la in enumerate(pair.a.layers):
            for j, lb in enumerate(pair.lb):
                v = values.get(("linear-cka", f, la, lb))
                if v is not None and found[i][j] is not None:
                    values[("linear-cka", f, la, lb)] = M.Value(
                        v.value, v.undefined, {**v.detail, "bootstrap": found[i][j]})


def _moments(chunks: Iterator[List[Optional[List[np.ndarray]]]], split: Optional[int]
             ) -> Tuple[List[Moments], Optional[List[Moments]]]:
    """Pass one over both sides at once (their layers side by side): each layer's
    :class:`Moments`, the first ``split`` for the first side, the rest for the other (None:
    one side)."""
    found = layer_moments([x for side in chunk if side is not None for x in side]
                          for chunk in chunks)
    if split is None:
        return found, None
    return found[:split], found[split:]


def _scaled(xs: List[np.ndarray], moments: Optional[Sequence[Moments]], standardized: bool
            ) -> List[np.ndarray]:
    if not standardized or moments is None:
        return [np.asarray(x, dtype=np.float64) for x in xs]
    return [(np.asarray(x, dtype=np.float64) - m.mean) * m.inverse_scale
            for x, m in zip(xs, moments)]


def _sampled(values: Dict[Tuple[Any, ...], M.Value], measures: Sequence[str],
             feats: Sequence[str], layers_a: Sequence[LayerSpec], lb: Sequence[LayerSpec],
             rows_a: List[np.ndarray], rows_b: Optional[List[np.ndarray]],
             moments_a: Optional[Sequence[Moments]], moments_b: Optional[Sequence[Moments]],
             k: int) -> None:
    """RSA and mutual k-NN of every layer pair on the subsample's rows (``rows_b`` None:
    the first side with itself), standardized with the whole set's statistics."""
    same = rows_b is None
    pair_bytes = 32 * len(rows_a[0]) ** 2  # an RDM's or a neighbour search's working memory
    for f in feats:
        std = f == STANDARDIZED_FEATURES
        xs = _scaled(rows_a, moments_a, std)
        ys = xs if rows_b is None else _scaled(rows_b, moments_b, std)
        if "rsa" in measures:
            ranks_x = np.stack(_each(M.rdm_ranks, xs, pair_bytes))
            ranks_y = ranks_x if same else np.stack(_each(M.rdm_ranks, ys, pair_bytes))
            found = M.rsa_matrix(ranks_x, ranks_y)
            del ranks_x, ranks_y
            for i, la in enumerate(layers_a):
                for j, lj in enumerate(lb):
                    values[("rsa", f, la, lj)] = found[i][j]
        if "mutual-knn" in measures:
            if len(rows_a[0]) < k + 1:
                for la in layers_a:
                    for lj in lb:
                        values[("mutual-knn", f, la, lj)] = M.Value(
                            None, f"fewer than k + 1 = {k + 1} sentences")
                continue
            sets_x = _each(lambda x: M.knn_sets(x, k), xs, pair_bytes)
            sets_y = sets_x if same else _each(lambda y: M.knn_sets(y, k), ys, pair_bytes)
            for i, la in enumerate(layers_a):
                for j, lj in enumerate(lb):
                    values[("mutual-knn", f, la, lj)] = M.knn_overlap(sets_x[i], sets_y[j], k)


def _finish(run: MapRun, out: PathLike, records: List[MapRecord], overwrite: bool,
            started: float, planned: int) -> MapRun:
    run.written = append_maps(out, records, skip_done=not overwrite) if records else []
    run.already_done = planned - len(run.written)
    run.seconds = time.perf_counter() - started
    log.info("%s: %s", run.kind, ", ".join(f"{k} {v:.1f} s" for k, v in run.timings.items()))
    return run


def geometry_maps(cache: PathLike, out: PathLike, config: Optional[MapConfig] = None, *,
                  tasks: Optional[str] = None, sentences_file: Optional[PathLike] = None,
                  data_dirs: Sequence[str] = (), task_files: Sequence[str] = ()) -> MapRun:
    """``estratos geometry``: each layer's shape (:mod:`estratos.similarity.geometry`) over
    the sentences of ``tasks``/``task_files`` or ``sentences_file``, raw and standardized;
    records appended to ``out``. ``config``: :class:`~estratos.similarity.config.MapConfig`
    (its similarity-only fields unused; None: the defaults)."""
    started = time.perf_counter()
    config = config or MapConfig()
    check_output_file(out)
    feats, size, seed, products, overwrite = (config.features, config.max_sentences,
                                              config.seed, config.products, config.overwrite)
    layers, pooling = config.layers, config.pooling
    sentences = select_sentences(sentences_file, tasks, data_dirs, task_files)
    with _open_all([cache]) as readers:
        pool = _pooling(readers, pooling)
        a = Side(readers[0], _layers(readers[0], layers, "--layers"),
                 cache_rows(readers[0], sentences))
        n = len(sentences)
        builder = _Records("geometry", a, None, pool, sentences)
        sample_pos = sentences.subsample(size, seed)
        sample = {"size": len(sample_pos), "of": n, "seed": seed}

        def plan() -> List[MapRecord]:
            return [builder.make(m, la, None, f, None, {"products": products}, sample)
                    for m in GEOMETRY_MEASURES for f in feats for la in a.layers]

        done: Set[Any] = set() if overwrite else done_map_keys(out)
        pending = [r for r in plan() if r.key not in done]
        run = MapRun(os.fspath(out), "geometry", n)
        values: Dict[Tuple[Any, ...], M.Value] = {}
        if pending:
            order = np.argsort(a.rows, kind="stable")
            t = time.perf_counter()
            moments, _ = _moments(_stream([a], n, order, pool), None)
            run.timings["moments"] = time.perf_counter() - t
            t = time.perf_counter()
            acc = GeometryAccumulator(moments, products)
            with _one_thread():  # one small product per layer: faster on one BLAS thread,
                for (xs,) in _stream([a], n, order, pool):  # the reader on the other core
                    assert xs is not None
                    acc.add(xs)
            rows = a.read(sample_pos, pool)
            with _one_thread():
                for f in feats:
                    for i, la in enumerate(a.layers):
                        found = acc.measures(i, f == STANDARDIZED_FEATURES, rows[i])
                        for m, v in found.items():
                            values[(m, f, la)] = v
            run.timings["geometry"] = time.perf_counter() - t
        records = [builder.make(r.measure, r.layer_a, None, r.features,
                                values.get((r.measure, r.features, r.layer_a)), r.settings,
                                sample)
                   for r in pending]
    return _finish(run, out, records, overwrite, started, len(plan()))


__all__ = ["CHUNK_ROWS", "SAMPLED", "STREAMED", "MapRun", "geometry_maps", "similarity_maps"]
