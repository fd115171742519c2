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

This module is the orchestration only: options (:mod:`~estratos.encode.options`), the
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
from typing import Callable, Iterable, List, Optional, Sequence, Union

from estratos import __version__
from estratos.cache import schema
from estratos.cache.session import CacheSession, open_for_writing
from estratos.encode.environment import library_versions
from estratos.encode.keys import dedupe_sentences, in_shard, input_digest
from estratos.encode.models.factory import build_encoder
from estratos.encode.models.token_batches import length_order, token_budget_batches
from estratos.encode.options import BatchTokens, parse_batch_tokens
from estratos.encode.pipeline import Background
from estratos.encode.space import SHRINK_HINT, SpacePlan, plan_space
from estratos.encode.stream import run_stream
from estratos.encode.summary import EncodeSummary
from estratos.errors import DiskFull, EstratosError, InputError, Interrupted, OptionError
from estratos.faultpoints import fault_point
from estratos.files import disk_full
from estratos.options import ShardSpec, parse_states, resolve_shard
from estratos.vocab import ALL_LAYERS, utc_now

log = logging.getLogger(__name__)

__all__ = ["EncodeSummary", "encode_sentences"]


def encode_sentences(sentences: Iterable[str], model: Optional[str], out: os.PathLike | str, *,
                     poolings: Optional[Sequence[str]] = None, dtype: str = "float16",
                     max_length: Optional[int] = None, batch_tokens: BatchTokens = "auto",
                     device: Optional[str] = None, shard: ShardSpec = None,
                     lowercase: bool = False, encoder: Optional[str] = None,
                     progress: Optional[bool] = None,
                     threads: Optional[int] = None,
                     states: Union[str, Sequence[int], None] = ALL_LAYERS,
                     notify: Optional[Callable[[str], None]] = None,
                     model_dtype: str = "auto", device_map: Optional[str] = None,
                     trust_remote_code: bool = False,
                     random_init: Optional[int] = None, prompt: Optional[str] = None,
                     chat_template: bool = False,
                     mean_first_token: str = "auto") -> EncodeSummary:
    """Encode the unique ``sentences`` with ``model`` (or ``encoder``) into the cache ``out``.

    Creates ``out``, resumes ``out.partial`` left by a killed run with the same arguments, or
    adds the missing sentences to an existing complete cache made with the same settings.
    With ``shard`` (``"I/N"``, ``(I, N)`` or ``"auto"`` for SLURM arrays) the rows go to
    ``<stem>.shard-I-of-N<suffix>`` beside ``out``. ``progress``: tqdm bar (None: if stderr is
    a terminal). ``threads``: CPU threads (None: ``OMP_NUM_THREADS`` if set, else all cores).
    ``states``: the hidden states to store (``--states``: ``all``, ``0,8,16``, ``every:4``,
    ``last:8``; :func:`estratos.options.parse_states`); the mean over ALL states (``avg``) is
    stored whatever is picked. ``notify(line)`` is called with the cache's expected size
    and the free space before anything is written (the command prints it); too little free
    space raises :class:`DiskFull` naming the options that shrink the cache, and so does a
    disk that fills up while writing (the ``.partial`` is kept and resumes).
    ``poolings`` None: the model's default (cls and mean for encoders, last and mean for
    decoder-only models). ``model_dtype``, ``device_map``, ``trust_remote_code`` and
    ``random_init`` say how the model is loaded (docs/encode.md, "Big models" and "Control
    models"). ``prompt`` (a template whose ``{}`` is the sentence) and ``chat_template`` (the
    tokenizer's chat template around a user turn) wrap each sentence before tokenizing; the
    cache is still keyed by the sentence, and ``mean`` averages the sentence's tokens only.
    ``mean_first_token`` (``auto``, ``skip``, ``keep``): whether a decoder's ``mean`` leaves
    out each input's first token, the attention sink (docs/encode.md, "What is stored").
    """
    started = time.perf_counter()
    if dtype not in schema.VECTOR_DTYPES:
        raise OptionError(f"--dtype: {dtype!r} is not one of {schema.VECTOR_DTYPES}")
    batch_tokens = parse_batch_tokens(batch_tokens)
    parse_states(states)  # the syntax, before anything is read
    poolings = tuple(dict.fromkeys(poolings)) if poolings else None
    shard_sel = resolve_shard(shard)
    out = Path(out)
    if not out.parent.is_dir():
        raise OptionError(f"--out: folder {out.parent} does not exist")
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
        enc = build_encoder(model, encoder, device=device, max_length=max_length,
                            lowercase=lowercase, poolings=poolings, threads=threads,
                            model_dtype=model_dtype, device_map=device_map,
                            trust_remote_code=trust_remote_code, random_init=random_init,
                            prompt=prompt, chat_template=chat_template,
                            mean_first_token=mean_first_token)
        want = {**enc.settings(), "dtype": dtype, "schema_version": schema.SCHEMA_VERSION,
                **_stored_states(enc, states)}
        shard_attrs = ({"shard_index": shard_sel[0], "shard_count": shard_sel[1],
                        "input_digest": digest} if shard_sel else {})
        session.check_settings(want)
        if session.holds_all(keys, digest):  # checked before the weights are read
            return EncodeSummary(str(target), n_input, n_unique, len(keys), len(keys), 0, 0, 0,
                                 len(keys), enc.max_length, time.perf_counter() - started,
                                 shard_sel, n_truncated_total=session.count_truncated())
        space = _space(session, enc, texts, keys, dtype, notify)
        attrs = {**want, **enc.info(), **shard_attrs,
                 "estratos_version": __version__, "library_versions": library_versions(),
                 "created": utc_now(),
                 "batch_tokens": 0 if batch_tokens == "auto" else batch_tokens,
                 "stored_avg": True}
        if enc.n_states is not None:
            attrs.update(n_states=enc.n_states, dim=enc.dim)
        late_space: List[Optional[SpacePlan]] = []
        early_full: List[bool] = []

        def first_batch() -> None:
            """An ``--encoder`` cache's shape is known now: say its size and check the
            free space before anything is written."""
            if space is None:
                try:
                    late_space.append(_space(session, enc, texts, keys, dtype, notify))
                except DiskFull:
                    early_full.append(True)
                    raise

        try:
            if space is not None:
                # held from now on: a disk that others fill meanwhile stops them, not us
                session.reserve(space.needed, SHRINK_HINT)
            session.start(attrs)
            # _run loads the weights while the tokenizer runs in the background
            summary = _run(enc, session, texts, keys, batch_tokens=batch_tokens, dtype=dtype,
                           show=show, first_batch=first_batch)
        except KeyboardInterrupt as exc:
            raise _interrupted(session) from exc
        except BaseException as exc:
            # bad input (e.g. an --encoder returning the wrong shape): leave nothing behind. A
            # crash or a full disk keeps the .partial, resumable; so does an error while
            # resuming one.
            # the free-space check of an --encoder's first batch comes before any row of this
            # run is written: what it created goes, as for a new cache's check
            early = isinstance(exc, DiskFull) and bool(early_full)
            full = not early and (isinstance(exc, DiskFull)
                                  or (isinstance(exc, OSError) and disk_full(exc)))
            session.abandon(discard=isinstance(exc, EstratosError) and not full)
            if full and not isinstance(exc, DiskFull):
                raise DiskFull(f"{session.partial}: the disk is full ({exc}); free space in "
                               f"{target.parent} and run the same command again to resume"
                               ) from exc
            raise
        n_cached, n_resumed, n_encoded, n_truncated, encode_seconds = summary
        n_rows = session.open_writer.n_done
        n_truncated_total = session.open_writer.count_truncated()
        session.finish(shard_attrs)
    plan = space or (late_space[0] if late_space else None)
    return EncodeSummary(str(target), n_input, n_unique, len(keys), n_cached, n_resumed,
                         n_encoded, n_truncated, n_rows, enc.max_length,
                         time.perf_counter() - started, shard_sel,
                         n_truncated_total=n_truncated_total,
                         expected_bytes=plan.expected if plan else None,
                         encode_seconds=encode_seconds)


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


def _stored_states(enc, states: Union[str, Sequence[int], None]) -> dict:
    """``{"states": (...)}`` the cache stores, and the encoder told to keep only those; an
    ``--encoder`` function decides its own states (its shape is known only from its output),
    so it takes only ``all``."""
    if enc.n_states is None:
        if not (states is None or (isinstance(states, str)
                                   and states.strip().lower() == ALL_LAYERS)):
            raise OptionError("--states: not with --encoder (the function returns the states "
                              "it has; all are stored)")
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
