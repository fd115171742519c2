"""``encode_sentences``: dedup, shard, plan, encode and append to a crash-safe cache.

One call turns any iterable of sentences into rows of a cache (DESIGN.md, "The cache"):

1. sentences are normalized and keyed with :mod:`estratos.text`; each key is encoded once;
2. with a shard ``i/n`` only the keys whose hash falls in shard ``i`` are kept (the split
   depends on the key alone, so every array task agrees without talking to the others);
3. rows already in the cache are skipped (incremental cache); a killed run's ``.partial`` is
   resumed from its ``n_done`` rows;
4. the rest is sorted by token length and cut into token-budget batches. The plan depends
   only on the inputs, so a resumed run continues with exactly the batches it would have run;
5. rows are appended in blocks of at least :data:`BLOCK_ROWS` (or every few seconds), each
   block flushed before ``n_done`` moves; the end is an fsync and an atomic rename.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from estratos import __version__
from estratos.cache import schema
from estratos.cache.session import CacheSession, open_for_writing
from estratos.encode.batching import length_order, token_budget_batches
from estratos.encode.pipeline import END, Background, Stages, Stopped
from estratos.errors import EstratosError, InputError, Interrupted, OptionError
from estratos.faultpoints import fault_point
from estratos.text import normalize_sentence, sentence_key

log = logging.getLogger(__name__)

#: rows buffered before a write+flush: one chunk's worth, so chunks are written whole
BLOCK_ROWS = schema.CHUNK_ROWS
#: batches in flight between two stages (bounded: memory does not grow with the corpus)
PIPELINE_DEPTH = 2
PIPELINE_DEPTH_CUDA = 4
#: ...unless this many seconds passed since the last flush (bounds the work a kill loses)
FLUSH_SECONDS = 5.0

ShardSpec = Union[None, str, Tuple[int, int]]
BatchTokens = Union[int, str]


@dataclass(frozen=True)
class EncodeSummary:
    """What one ``encode_sentences`` call did."""

    path: str
    n_input: int          # sentences given (after dropping blank ones)
    n_unique: int         # unique normalized sentences
    n_selected: int       # of those, in this shard (== n_unique without shards)
    n_cached: int         # already in the cache before this call (complete rows)
    n_resumed: int        # rows recovered from an interrupted run's .partial
    n_encoded: int        # encoded by this call
    n_truncated: int      # of the encoded ones, cut at max_length
    n_rows: int           # rows in the cache now
    max_length: int
    seconds: float
    shard: Optional[Tuple[int, int]] = None

    @property
    def sentences_per_second(self) -> float:
        return self.n_encoded / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def headline(self) -> str:
        """What was encoded, in one line (or that everything was already cached)."""
        if self.n_encoded == 0 and self.n_resumed == 0 and self.n_cached == self.n_selected:
            return f"all {self.n_selected} sentences already cached; the model was not loaded"
        return (f"{self.n_encoded} sentences encoded in {self.seconds:.1f}s, "
                f"{self.n_cached} already cached, {self.n_resumed} resumed")

    def describe(self) -> str:
        """A few human-readable lines for the command line."""
        lines = [f"cache: {self.path} ({self.n_rows} rows)"]
        if self.shard:
            lines.append(f"shard {self.shard[0]}/{self.shard[1]}: {self.n_selected} of "
                         f"{self.n_unique} unique sentences")
        lines.append(f"sentences: {self.n_input} given, {self.n_unique} unique, "
                     f"{self.n_cached} already cached, {self.n_resumed} resumed, "
                     f"{self.n_encoded} encoded in {self.seconds:.1f}s "
                     f"({self.sentences_per_second:.1f} sentences/s)")
        if self.n_encoded == 0 and self.n_resumed == 0 and self.n_cached == self.n_selected:
            lines.append(self.headline())
        elif self.max_length:
            lines.append(f"truncated at {self.max_length} tokens: {self.n_truncated}")
        return "\n".join(lines)


# -- inputs --------------------------------------------------------------------------------
def unique_sentences(sentences: Iterable[str]) -> Tuple[List[str], List[bytes], int]:
    """``(texts, keys, n_input)``: normalized, non-blank, first occurrence of each key."""
    texts, keys, seen, n_input = [], [], set(), 0
    for raw in sentences:
        if not isinstance(raw, str):
            raise InputError(f"sentence {n_input + 1} is {type(raw).__name__}, not str")
        text = normalize_sentence(raw)
        if not text:
            continue
        n_input += 1
        key = sentence_key(text)
        if key not in seen:
            seen.add(key)
            texts.append(text)
            keys.append(key)
    return texts, keys, n_input


def input_digest(keys: Iterable[bytes]) -> str:
    """sha256 over the sorted keys: identifies the full input of a sharded run."""
    h = hashlib.sha256()
    for k in sorted(keys):
        h.update(k)
    return h.hexdigest()


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
    if isinstance(shard, str) and shard == "auto":
        task_id = environ.get("SLURM_ARRAY_TASK_ID")
        if task_id is None:
            return None
        count = environ.get("SLURM_ARRAY_TASK_COUNT")
        if count is None:
            raise OptionError("--shard: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT "
                              "is not; pass --shard I/N")
        try:
            index = int(task_id) - int(environ.get("SLURM_ARRAY_TASK_MIN", "0"))
            shard = (index, int(count))
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


def in_shard(key: bytes, shard: Tuple[int, int]) -> bool:
    """Deterministic assignment of a key to one of ``count`` shards."""
    return int.from_bytes(key[:8], "big") % shard[1] == shard[0]


def parse_batch_tokens(value: BatchTokens) -> BatchTokens:
    """``--batch-tokens``: a positive integer (also as text) or ``"auto"``."""
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return "auto"
        try:
            value = int(value)
        except ValueError:
            raise OptionError(f"--batch-tokens: expected a positive integer or auto, got "
                              f"{value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise OptionError(f"--batch-tokens: must be >= 1 or auto, got {value!r}")
    return int(value)


# -- encoders ------------------------------------------------------------------------------
def build_encoder(model: Optional[str], encoder: Optional[str], *, device: Optional[str],
                  max_length: Optional[int], lowercase: bool, poolings: Sequence[str],
                  threads: Optional[int] = None):
    """An :class:`HFEncoder` for ``model``, or a :class:`BatcherEncoder` for ``encoder``."""
    if encoder:
        from estratos.encode.batcher import POOLING, BatcherEncoder

        if model:
            raise OptionError("--encoder and --model: give one of them")
        if tuple(poolings) not in ((POOLING,), ("cls", "mean")):
            raise OptionError(f"--pooling: an --encoder function gives one vector kind, "
                              f"stored as {POOLING!r}")
        if max_length is not None:
            raise OptionError("--max-length: not used with --encoder (the function truncates)")
        return BatcherEncoder(encoder, lowercase=lowercase)
    if not model:
        raise OptionError("--model: required (or --encoder MODULE:FUNCTION)")
    from estratos.encode.hf import HFEncoder

    return HFEncoder(model, device=device, max_length=max_length, lowercase=lowercase,
                     poolings=poolings, threads=threads)


def _library_versions() -> Dict[str, str]:
    import h5py
    import torch
    import transformers

    return {"python": platform.python_version(), "numpy": np.__version__,
            "h5py": h5py.version.version, "hdf5": h5py.version.hdf5_version,
            "torch": torch.__version__, "transformers": transformers.__version__}


# -- the run -------------------------------------------------------------------------------
def encode_sentences(sentences: Iterable[str], model: Optional[str], out: os.PathLike | str, *,
                     poolings: Sequence[str] = ("cls", "mean"), dtype: str = "float16",
                     max_length: Optional[int] = None, batch_tokens: BatchTokens = "auto",
                     device: Optional[str] = None, shard: ShardSpec = None,
                     lowercase: bool = False, encoder: Optional[str] = None,
                     progress: Optional[bool] = None,
                     threads: Optional[int] = None) -> EncodeSummary:
    """Encode the unique ``sentences`` with ``model`` (or ``encoder``) into the cache ``out``.

    Creates ``out``, resumes ``out.partial`` left by a killed run with the same arguments, or
    adds the missing sentences to an existing complete cache made with the same settings.
    With ``shard`` (``"I/N"``, ``(I, N)`` or ``"auto"`` for SLURM arrays) the rows go to
    ``<stem>.shard-I-of-N<suffix>`` beside ``out``. ``progress``: tqdm bar (None: if stderr is
    a terminal). ``threads``: CPU threads (None: ``OMP_NUM_THREADS`` if set, else all cores).
    """
    started = time.perf_counter()
    if dtype not in schema.VECTOR_DTYPES:
        raise OptionError(f"--dtype: {dtype!r} is not one of {schema.VECTOR_DTYPES}")
    batch_tokens = parse_batch_tokens(batch_tokens)
    poolings = tuple(dict.fromkeys(poolings))
    if not poolings:
        raise OptionError("--pooling: at least one pooling is needed")
    shard_sel = resolve_shard(shard)
    out = Path(out)
    if not out.parent.is_dir():
        raise OptionError(f"--out: folder {out.parent} does not exist")
    target = schema.shard_path(out, *shard_sel) if shard_sel else out
    show = sys.stderr.isatty() if progress is None else bool(progress)

    texts, keys, n_input = unique_sentences(sentences)
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
                            lowercase=lowercase, poolings=poolings, threads=threads)
        want = {**enc.settings(), "dtype": dtype, "schema_version": schema.SCHEMA_VERSION}
        shard_attrs = ({"shard_index": shard_sel[0], "shard_count": shard_sel[1],
                        "input_digest": digest} if shard_sel else {})
        session.check_settings(want)
        if session.holds_all(keys, digest):  # checked before the weights are read
            return EncodeSummary(str(target), n_input, n_unique, len(keys), len(keys), 0, 0, 0,
                                 len(keys), enc.max_length, time.perf_counter() - started,
                                 shard_sel)
        attrs = {**want, **enc.info(), **shard_attrs,
                 "estratos_version": __version__, "library_versions": _library_versions(),
                 "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "batch_tokens": 0 if batch_tokens == "auto" else batch_tokens}
        if enc.n_states is not None:
            attrs.update(n_states=enc.n_states, dim=enc.dim)
        try:
            session.start(attrs)
            enc.load(progress=show)
            summary = _run(enc, session, texts, keys, batch_tokens=batch_tokens, dtype=dtype,
                           show=show)
        except KeyboardInterrupt as exc:
            raise _interrupted(session) from exc
        except BaseException as exc:
            # bad input (e.g. an --encoder returning the wrong shape): leave nothing behind. A
            # crash keeps the .partial, resumable; so does an error while resuming one.
            session.abandon(discard=isinstance(exc, EstratosError))
            raise
        n_cached, n_resumed, n_encoded, n_truncated = summary
        n_rows = session.writer.n_done
        session.finish(shard_attrs)
    return EncodeSummary(str(target), n_input, n_unique, len(keys), n_cached, n_resumed,
                         n_encoded, n_truncated, n_rows, enc.max_length,
                         time.perf_counter() - started, shard_sel)


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
        stored = session.writer.attrs.get("batch_tokens")
        if isinstance(stored, int) and stored >= 1:
            return stored
    return int(enc.auto_batch_tokens())


def _run(enc, session: CacheSession, texts: List[str], keys: List[bytes], *,
         batch_tokens: BatchTokens, dtype: str, show: bool):
    writer = session.writer
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
        n_nonfinite = _pipeline(enc, writer, toks, t_texts, t_keys, order, batches,
                                dtype=dtype, bar=bar)
    finally:
        bar.close()
    log.debug("%d batches encoded and written in %.2fs", len(batches), time.perf_counter() - t0)
    if n_nonfinite:
        log.warning("%d vectors contain NaN or inf (float16 overflow? try --dtype float32)",
                    n_nonfinite)
    if n_truncated:
        log.warning("%d of %d sentences were truncated at %d tokens", n_truncated, n_encoded,
                    enc.max_length)
    return n_cached, n_resumed, n_encoded, n_truncated


def _pipeline(enc, writer, toks, texts: List[str], keys: List[bytes], order: np.ndarray,
              batches: List[Tuple[int, int]], *, dtype: str, bar) -> int:
    """Encode ``batches`` (ranges of ``order``) and append them in order; returns the number
    of vectors with NaN/inf. Three stages (see docs/encode.md, "The pipeline"):

    collate (thread): padded host arrays of the next batches, pinned on CUDA;
    compute (this thread): forward pass + pooling on the device, copy back started;
    write (thread): waits for each batch's copy, buffers blocks of >= BLOCK_ROWS rows (or
    FLUSH_SECONDS), appends them (n_done moves only after each flushed block).
    """
    depth = PIPELINE_DEPTH_CUDA if getattr(enc, "device", None) is not None and \
        enc.device.type == "cuda" else PIPELINE_DEPTH
    capped = toks.capped
    truncated = toks.truncated
    nonfinite = [0]

    with Stages() as stages:
        to_compute, to_write = stages.queue(depth), stages.queue(depth)

        def collate() -> None:
            for start, stop in batches:
                rows = order[start:stop]
                batch = enc.collate(toks, rows, [texts[i] for i in rows])
                fault_point("collate")
                stages.put(to_compute, (rows, batch))
            stages.put(to_compute, END)

        def write() -> None:
            block: List[tuple] = []
            last_flush = time.monotonic()
            while True:
                item = stages.get(to_write)
                if item is not END:
                    rows, pending = item
                    vectors = pending.numpy()
                    nonfinite[0] += sum(int((~np.isfinite(v)).any(axis=(1, 2)).sum())
                                        for v in vectors.values())
                    block.append((rows, vectors))
                    bar.update(len(rows))
                n_block = sum(len(b[0]) for b in block)
                if block and (item is END or n_block >= BLOCK_ROWS
                              or time.monotonic() - last_flush >= FLUSH_SECONDS):
                    rows = np.concatenate([b[0] for b in block])
                    writer.append([keys[i] for i in rows], [texts[i] for i in rows],
                                  capped[rows], truncated[rows],
                                  {p: np.concatenate([b[1][p] for b in block])
                                   for p in block[0][1]})
                    log.debug("n_done=%d", writer.n_done)
                    block, last_flush = [], time.monotonic()
                if item is END:
                    return

        stages.spawn("collate", collate)
        writing = stages.spawn("write", write)
        try:
            while True:
                item = stages.get(to_compute)
                if item is END:
                    break
                rows, batch = item
                pending = enc.forward(batch, dtype)
                fault_point("batch")
                stages.put(to_write, (rows, pending))
            stages.put(to_write, END)
            stages.wait(writing)
        except Stopped:
            pass
    stages.raise_error()
    return nonfinite[0]
