"""The encode stream: collate, forward and write as three stages in threads.

See docs/encode.md, "The pipeline": the collate thread pads the next batches, the caller's
thread runs the forward passes, the write thread appends blocks to the cache, with bounded
queues between them (:mod:`estratos.encode.pipeline`), so the slowest stage sets the pace.
"""

from __future__ import annotations

import logging
import time
from typing import List, Tuple

import numpy as np

from estratos.cache import schema
from estratos.encode.pipeline import END, Stages, Stopped
from estratos.faultpoints import fault_point

log = logging.getLogger(__name__)

#: rows buffered before a write+flush: one chunk's worth, so chunks are written whole
BLOCK_ROWS = schema.CHUNK_ROWS
#: batches in flight between two stages (bounded: memory does not grow with the corpus)
PIPELINE_DEPTH = 2
PIPELINE_DEPTH_CUDA = 4
#: ...unless this many seconds passed since the last flush (bounds the work a kill loses)
FLUSH_SECONDS = 5.0


def run_stream(enc, writer, toks, texts: List[str], keys: List[bytes], order: np.ndarray,
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
