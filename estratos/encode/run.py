"""``encode_sentences``: dedup, shard, plan, encode and append to a crash-safe cache.

One call turns any iterable of sentences into rows of a cache (docs/cache.md):

1. sentences are normalized and keyed (:mod:`estratos.encode.keys`); each key is encoded once;
2. with a shard ``i/n`` only the keys whose hash falls in shard ``i`` are kept
   (:func:`estratos.encode.keys.in_shard`, ``--shard`` read by
   :func:`estratos.options.resolve_shard`);
3. rows already in the cache are skipped (incremental cache); a killed run's ``.partial`` is
   resumed from its ``n_done`` rows (:mod:`estratos.cache.session`);
4. the rest is sorted by token length and cut into token-budget batches. The plan depends
   only on the inputs, so a resumed run continues with exactly the batches it would have run;
5. the batches go through the three-stage stream (:mod:`estratos.encode.stream`), which
   appends blocks of rows, each flushed before ``n_done`` moves; the end is an fsync and an
   atomic rename.

This module is the orchestration only: the configuration (:mod:`~estratos.encode.config`), the
encoder (:mod:`~estratos.encode.models.factory`), what the cache records about the software
(:mod:`~estratos.encode.environment`) and the summary (:mod:`~estratos.encode.summary`) live
in their own modules.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from estratos import __version__
from estratos.cache import schema
from estratos.cache.session import CacheSession, open_for_writing
from estratos.encode.config import BatchTokens, EncodeConfig
from estratos.encode.environment import library_versions
from estratos.encode.keys import dedupe_sentences, in_shard, input_digest
from estratos.encode.models.factory import build_encoder
from estratos.encode.models.token_batches import length_order, token_budget_batches
from estratos.encode.pipeline import Background
from estratos.encode.space import SHRINK_HINT, SpacePlan, plan_space
from estratos.encode.stream import run_stream
from estratos.encode.summary import EncodeSummary
from estratos.errors import DiskFull, EstratosError, InputError, Interrupted, OptionError
from estratos.faultpoints import fault_point
from estratos.files import disk_full
from estratos.options import parse_states
from estratos.vocab import utc_now

log = logging.getLogger(__name__)

__all__ = ["EncodeSummary", "encode_sentences"]


def encode_sentences(sentences: Iterable[str], config: Union[EncodeConfig, str, None],
                     out: os.PathLike | str, *, progress: Optional[bool] = None,
                     notify: Optional[Callable[[str], None]] = None,
                     **options: Any) -> EncodeSummary:
    """Encode the unique ``sentences`` as ``config`` says into the cache ``out``.

    ``config``: an :class:`~estratos.encode.config.EncodeConfig`, or a model id or folder
    (None with ``encoder=``) and its ``options`` as keywords, checked by
    :meth:`EncodeConfig.build <estratos.encode.config.EncodeConfig.build>` (``dtype``,
    ``max_length``, ``states``, ``prompt``, ``shard``, ...; docs/encode.md).

    Creates ``out``, resumes ``out.partial`` left by a killed run with the same settings, or
    adds the missing sentences to an existing complete cache made with the same settings.
    With a shard ``(I, N)`` the rows go to ``<stem>.shard-I-of-N<suffix>`` beside ``out``.
    ``progress``: tqdm bar (None: if stderr is a terminal). The mean over ALL states
    (``avg``) is stored whatever ``states`` picks. ``notify(line)`` is called with the
    cache's expected size and the free space before anything is written (the command prints
    it); too little free space raises :class:`DiskFull` naming the options that shrink the
    cache, and so does a disk that fills up while writing (the ``.partial`` is kept and
    resumes).
    """
    started = time.perf_counter()
    config = _as_config(config, options)
    out = Path(out)
    if not out.parent.is_dir():
        raise OptionError(f"--out: folder {out.parent} does not exist")
    shard_sel = config.shard
    target = schema.shard_path(out, *shard_sel) if shard_sel else out
    show = sys.stderr.isatty() if progress is None else bool(progress)

    texts, keys, n_input = dedupe_sentences(sentences)
    if not texts:
        raise InputError("no sentences to encode (the input is empty or blank)")
    n_unique = len(texts)
    digest = input_digest(keys)
    if shard_sel:
        picked = [i for i, k in enumerate(keys) if in_shard(k, shard_sel)]
        texts, keys = [texts[i] for i in picked], [keys[i] for i in picked]

    # the lock and the refusal of foreign files come before the (slow) model load
    with open_for_writing(target, shard=shard_sel) as session:
        fault_point("model-load")
        enc = build_encoder(config)
        want = {**enc.settings(), "dtype": config.dtype,
                "schema_version": schema.SCHEMA_VERSION, **_stored_states(enc, config.states)}
        shard_attrs = ({"shard_index": shard_sel[0], "shard_count": shard_sel[1],
                        "input_digest": digest} if shard_sel else {})
        session.check_settings(want)
        if session.holds_all(keys, digest):  # checked before the weights are read
            return EncodeSummary(str(target), n_input, n_unique, len(keys), len(keys), 0, 0, 0,
                                 len(keys), enc.max_length, time.perf_counter() - started,
                                 shard_sel, n_truncated_total=session.count_truncated())
        space = _space(session, enc, texts, keys, config.dtype, notify)
        attrs = {**want, **enc.info(), **shard_attrs,
                 "estratos_version": __version__, "library_versions": library_versions(),
                 "created": utc_now(),
                 "batch_tokens": 0 if config.batch_tokens == "auto" else config.batch_tokens,
                 "stored_avg": True}
        if enc.n_states is not None:
            attrs.update(n_states=enc.n_states, dim=enc.dim)
        counts, plan = _write(session, enc, texts, keys, config, attrs, space,
                              notify=notify, show=show)
        n_cached, n_resumed, n_encoded, n_truncated, encode_seconds = counts
        n_rows = session.open_writer.n_done
        n_truncated_total = session.open_writer.count_truncated()
        session.finish(shard_attrs)
    return EncodeSummary(str(target), n_input, n_unique, len(keys), n_cached, n_resumed,
                         n_encoded, n_truncated, n_rows, enc.max_length,
                         time.perf_counter() - started, shard_sel,
                         n_truncated_total=n_truncated_total,
                         expected_bytes=plan.expected if plan else None,
                         encode_seconds=encode_seconds)


def _as_config(config: Union[EncodeConfig, str, None], options: Dict[str, Any]) -> EncodeConfig:
    """``config`` checked (built again: one made by hand passes the same checks), or the
    configuration that ``model`` and ``options`` build."""
    if isinstance(config, EncodeConfig):
        if options:
            raise TypeError(f"encode_sentences: options ({', '.join(sorted(options))}) go in "
                            "the EncodeConfig, not beside it")
        return config.replace()
    return EncodeConfig.build(model=config, **options)


def _write(session: CacheSession, enc: Any, texts: List[str], keys: List[bytes],
           config: EncodeConfig, attrs: Dict[str, Any], space: Optional[SpacePlan], *,
           notify: Optional[Callable[[str], None]], show: bool
           ) -> Tuple[tuple, Optional[SpacePlan]]:
    """Start the cache file, encode into it and say what was kept when it fails:
    ``(counts of :func:`_run`, the space plan)``.

    Bad input (e.g. an ``--encoder`` returning the wrong shape) leaves nothing behind; a
    crash or a full disk keeps the ``.partial``, resumable, and so does an error while
    resuming one. An ``--encoder`` cache's free-space check comes with its first batch,
    before any row of this run is written: what that failure created goes too."""
    late_space: List[Optional[SpacePlan]] = []
    early_full: List[bool] = []

    def first_batch() -> None:
        """An ``--encoder`` cache's shape is known now: say its size and check the free
        space before anything is written."""
        if space is None:
            try:
                late_space.append(_space(session, enc, texts, keys, config.dtype, notify))
            except DiskFull:
                early_full.append(True)
                raise

    try:
        if space is not None:
            # held from now on: a disk that others fill meanwhile stops them, not us
            session.reserve(space.needed, SHRINK_HINT)
        session.start(attrs)
        # _run loads the weights while the tokenizer runs in the background
        counts = _run(enc, session, texts, keys, batch_tokens=config.batch_tokens,
                      dtype=config.dtype, show=show, first_batch=first_batch)
    except KeyboardInterrupt as exc:
        raise _interrupted(session) from exc
    except BaseException as exc:
        early = isinstance(exc, DiskFull) and bool(early_full)
        full = not early and (isinstance(exc, DiskFull)
                              or (isinstance(exc, OSError) and disk_full(exc)))
        session.abandon(discard=isinstance(exc, EstratosError) and not full)
        if full and not isinstance(exc, DiskFull):
            raise DiskFull(f"{session.partial}: the disk is full ({exc}); free space in "
                           f"{session.target.parent} and run the same command again to resume"
                           ) from exc
        raise
    return counts, space or (late_space[0] if late_space else None)


def _space(session: CacheSession, enc, texts: List[str], keys: List[bytes], dtype: str,
           notify: Optional[Callable[[str], None]]) -> Optional[SpacePlan]:
    """Tell the expected size and check the free space before anything is written (an
    ``--encoder`` cache's shape is known only from its first batch: said then, and checked
    before that batch is written)."""
    if enc.n_states is None:
        if notify:
            notify("expected cache size: unknown until the --encoder function's first batch "
                   "(said and checked then)")
        return None
    have, size = session.existing_rows()
    space = plan_space(session.target.parent, new_texts=[t for t, k in zip(texts, keys)
                                                         if k not in have],
                       existing_rows=len(have), existing_bytes=size,
                       resuming=session.resuming,
                       n_stored=len(getattr(enc, "states", None) or range(enc.n_states)),
                       dim=enc.dim,
                       dtype=dtype, n_poolings=len(enc.poolings))
    if notify:
        notify(space.describe())
    space.check()
    return space


def _stored_states(enc: Any, states: Union[str, Sequence[int]]) -> dict:
    """``{"states": (...)}`` the cache stores, and the encoder told to keep only those; an
    ``--encoder`` function decides its own states (its shape is known only from its output;
    the configuration allows it only ``all``)."""
    if enc.n_states is None:
        return {}
    stored = parse_states(states, enc.n_states)
    enc.states = None if stored == tuple(range(enc.n_states)) else stored
    return {"states": stored}


def _interrupted(session: CacheSession) -> Interrupted:
    """Close the cache after Ctrl-C and say what was kept and how to go on."""
    writer = session.writer
    kept = writer.n_done if writer is not None else 0
    new = kept - writer.n_base if writer is not None else 0
    session.abandon(discard=False)
    if writer is None or not session.partial.exists():
        return Interrupted("interrupted before any sentence was written; nothing was kept")
    return Interrupted(f"interrupted: {session.partial} keeps {kept} rows ({new} encoded by "
                       "this run or an earlier interrupted one); run the same command again "
                       "to resume from there")


def _plan(toks, keys: List[bytes], batch_tokens: int):
    """``(order, batches)``: rows longest first (ties by key), cut by the token budget."""
    order = length_order(toks.lengths, keys)
    return order, token_budget_batches(toks.capped[order], batch_tokens)


def _budget(enc, session: CacheSession, batch_tokens: BatchTokens) -> int:
    """The token budget: the number given, or for ``auto`` the one a resumed ``.partial``
    recorded (so its plan is the same), else the encoder's choice for its device."""
    if batch_tokens != "auto":
        return int(batch_tokens)
    if session.resuming:
        stored = session.open_writer.attrs.get("batch_tokens")
        if isinstance(stored, int) and stored >= 1:
            return stored
    return int(enc.auto_batch_tokens())


def _run(enc, session: CacheSession, texts: List[str], keys: List[bytes], *,
         batch_tokens: BatchTokens, dtype: str, show: bool,
         first_batch: Optional[Callable[[], None]] = None):
    writer = session.open_writer
    base, done = session.rows()
    n_cached = sum(1 for k in keys if k in base)
    todo = [i for i, k in enumerate(keys) if k not in base]
    t_texts, t_keys = [texts[i] for i in todo], [keys[i] for i in todo]

    if hasattr(enc, "prepare"):
        enc.prepare(t_texts)
    # tokenize (Rust, releases the GIL) while the weights load
    t0 = time.perf_counter()
    tokenizing = Background(enc.tokenize, t_texts, name="tokenize")
    enc.load(progress=show)
    log.debug("model loaded in %.2fs", time.perf_counter() - t0)
    budget = _budget(enc, session, batch_tokens)
    writer.set_attrs({"batch_tokens": budget})  # what a resumed "auto" run will reuse
    toks = tokenizing.result()
    log.debug("%d sentences tokenized (with the model load) in %.2fs", len(t_texts),
              time.perf_counter() - t0)
    order, batches = _plan(toks, t_keys, budget)
    n_resumed = len(done)
    skip = 0
    if done:
        prefix = [t_keys[i] for i in order[: len(done)]]
        boundaries = {stop for _, stop in batches}
        if prefix == done and len(done) in boundaries:
            skip = len(done)
            log.info("resuming %s after %d rows", writer.path, skip)
        else:
            # the partial was made from other sentences: keep its rows, plan the rest anew
            log.warning("%s: rows from an interrupted run with other sentences; keeping them",
                        writer.path)
            have = set(done)
            keep = [i for i, k in enumerate(t_keys) if k not in have]
            t_texts, t_keys = [t_texts[i] for i in keep], [t_keys[i] for i in keep]
            toks = toks.subset(keep)
            n_cached += len(todo) - len(keep)
            n_resumed = 0
            session.forget_resumed()
            order, batches = _plan(toks, t_keys, budget)
    batches = [(a, b) for a, b in batches if b > skip]
    encoded = order[skip:]
    n_encoded = len(encoded)
    n_truncated = int(toks.truncated[encoded].sum())

    from tqdm.auto import tqdm

    bar = tqdm(total=len(order), initial=skip, unit="sent", desc="encode", disable=not show,
               smoothing=0.1)
    t0 = time.perf_counter()
    try:
        run_stream(enc, writer, toks, t_texts, t_keys, order, batches, dtype=dtype, bar=bar,
                   first_batch=first_batch)
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    log.debug("%d batches encoded and written in %.2fs", len(batches), seconds)
    if n_truncated:
        log.warning("%d of %d sentences were truncated at %d tokens", n_truncated, n_encoded,
                    enc.max_length)
    return n_cached, n_resumed, n_encoded, n_truncated, seconds
