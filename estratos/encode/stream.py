"""The encode stream: collate, forward and write as three stages in threads.

See docs/encode.md, "The pipeline": the collate thread pads the next batches, the caller's
thread runs the forward passes, the write thread appends blocks to the cache, with bounded
queues between them (:mod:`estratos.encode.pipeline`), so the slowest stage sets the pace.
"""

from __future__ import annotations

import logging
import time
from queue import Queue
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from estratos.cache import schema
from estratos.encode.pipeline import END, Stages, Stopped
from estratos.errors import EncodeError, OptionError
from estratos.faultpoints import fault_point
from estratos.vocab import AVG

log = logging.getLogger(__name__)

#: rows buffered before a write+flush: one chunk's worth, so chunks are written whole
BLOCK_ROWS = schema.CHUNK_ROWS
#: batches in flight between two stages (bounded: memory does not grow with the corpus)
PIPELINE_DEPTH = 2
PIPELINE_DEPTH_CUDA = 4
#: ...unless this many seconds passed since the last flush (bounds the work a kill loses)
FLUSH_SECONDS = 5.0


def refuse_nonfinite(vectors: Mapping[str, np.ndarray], averages: Mapping[str, np.ndarray],
                     dtype: str, source_finite: bool, texts: Sequence[str],
                     states: Optional[Sequence[int]] = None) -> None:
    """Stop the run before a batch holding NaN or inf reaches the cache.

    A cache never holds a non-finite value written by us: probing would refuse those rows
    only after the whole encode. Two causes, two fixes: the stored precision overflowed
    (float16 ends at 65,504; hidden states of some LLMs go beyond), or the model itself
    gave NaN/inf (whatever the precision).
    """
    columns = [(pooling, stored) for pooling, stored in vectors.items()]
    columns += [(pooling, avg[:, None, :]) for pooling, avg in averages.items()]
    for i, (pooling, stored) in enumerate(columns):
        bad = schema.nonfinite_rows(stored, dtype)
        if not bad.any() and (source_finite or i < len(columns) - 1):
            continue
        row = int(np.flatnonzero(bad)[0]) if bad.any() else 0
        at = int(np.flatnonzero(schema.nonfinite_rows(np.swapaxes(stored[row:row + 1], 0, 1),
                                                      dtype))[0]) if bad.any() else 0
        where = (f"the {AVG} of all hidden states" if i >= len(vectors) else
                 f"hidden state {at if states is None else states[at]}")
        example = f"{where}, {pooling} pooling, sentence {texts[row][:60]!r}"
        if not source_finite:
            raise EncodeError(f"the model gave NaN or infinite hidden states ({example}); "
                              "nothing of this batch was stored. Check the model's weights and "
                              "--model-dtype, or encode on another device")
        raise OptionError(f"--dtype {dtype}: hidden-state values beyond {dtype}'s range "
                          f"(+-{schema.DTYPE_MAX[dtype]:g}) at {example}; nothing of this batch "
                          "was stored. Encode with --dtype bfloat16 (float32's range in 16 "
                          "bits) or --dtype float32")


def run_stream(enc, writer, toks, texts: List[str], keys: List[bytes], order: np.ndarray,
              batches: List[Tuple[int, int]], *, dtype: str, bar,
              first_batch: Optional[Callable[[], None]] = None) -> None:
    """Encode ``batches`` (ranges of ``order``) and append them in order. Three stages (see
    docs/encode.md, "The pipeline"):

    collate (thread): padded host arrays of the next batches, pinned on CUDA;
    compute (this thread): forward pass + pooling on the device, copy back started;
    write (thread): waits for each batch's copy, refuses it if it would store NaN or inf
    (the batch's largest magnitude, reduced on the device, is compared with the stored
    precision's; only a batch beyond it is checked row by row, :func:`refuse_nonfinite`,
    which names the sentence or lets a value that rounds to the maximum pass), buffers
    blocks of >= BLOCK_ROWS rows (or FLUSH_SECONDS), appends them (n_done moves only after
    each flushed block).

    ``first_batch()`` is called after the first forward pass, before its rows go to the write
    stage (an ``--encoder`` function's shape is known only then: its size check).
    """
    depth = PIPELINE_DEPTH_CUDA if getattr(enc, "device", None) is not None and \
        enc.device.type == "cuda" else PIPELINE_DEPTH
    capped = toks.capped
    truncated = toks.truncated

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
            _write_stage(stages, to_write, writer, keys, texts, capped, truncated,
                         dtype=dtype, bar=bar, states=getattr(enc, "states", None))

        stages.spawn("collate", collate)
        writing = stages.spawn("write", write)
        try:
            while True:
                item = stages.get(to_compute)
                if item is END:
                    break
                rows, batch = item
                pending = enc.forward(batch, dtype)
                if first_batch is not None:
                    first_batch()
                    first_batch = None
                fault_point("batch")
                stages.put(to_write, (rows, pending))
            stages.put(to_write, END)
            stages.wait(writing)
        except Stopped:
            pass
    stages.raise_error()


def _write_stage(stages: Stages, to_write: "Queue[Any]", writer, keys: List[bytes],
                 texts: List[str], capped: np.ndarray, truncated: np.ndarray, *, dtype: str,
                 bar, states: Optional[Sequence[int]]) -> None:
    """The write stage of :func:`run_stream`: each batch's copy waited for and checked for
    NaN/inf, rows buffered into blocks of >= :data:`BLOCK_ROWS` (or
    :data:`FLUSH_SECONDS`) and appended, until the end marker."""
    block: List[tuple] = []
    last_flush = time.monotonic()
    while True:
        item = stages.get(to_write)
        if item is not END:
            rows, pending = item
            vectors = pending.numpy()
            if not pending.within_range:  # the exact check, row by row, only then
                refuse_nonfinite(vectors, pending.averages, dtype, pending.source_finite,
                                 [texts[i] for i in rows], states)
            block.append((rows, vectors, pending.averages))
            bar.update(len(rows))
        n_block = sum(len(b[0]) for b in block)
        if block and (item is END or n_block >= BLOCK_ROWS
                      or time.monotonic() - last_flush >= FLUSH_SECONDS):
            _append_block(writer, block, keys, texts, capped, truncated)
            block, last_flush = [], time.monotonic()
        if item is END:
            return


def _append_block(writer, block: List[tuple], keys: List[bytes], texts: List[str],
                  capped: np.ndarray, truncated: np.ndarray) -> None:
    """Append a block of batches ``(rows, vectors, averages)`` as one write (``n_done``
    moves once it is flushed)."""
    rows = np.concatenate([b[0] for b in block])
    writer.append([keys[i] for i in rows], [texts[i] for i in rows], capped[rows],
                  truncated[rows],
                  {p: np.concatenate([b[1][p] for b in block]) for p in block[0][1]},
                  {p: np.concatenate([b[2][p] for b in block]) for p in block[0][2]})
    log.debug("n_done=%d", writer.n_done)
