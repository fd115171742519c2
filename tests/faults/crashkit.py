"""Helpers shared by the crash tests: run a fork-server child, kill it, compare caches."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Dict, Optional

import h5py
import numpy as np

from estratos.cache import schema


def run_child(ctx, target, args, *, kill_after: Optional[float] = None,
              timeout: float = 300.0) -> int:
    """Run ``target(*args)`` in a fork-server child; SIGKILL it after ``kill_after`` seconds
    (if still running). Returns the exit code (-9 when killed)."""
    proc = ctx.Process(target=target, args=args)
    proc.start()
    if kill_after is not None:
        proc.join(kill_after)
        if proc.exitcode is None:
            os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        raise AssertionError(f"child {target.__name__}{args[:1]} did not finish in {timeout}s")
    return proc.exitcode


def rows_by_key(path: Path) -> Dict[bytes, dict]:
    """Every trusted row of a cache read with plain h5py, keyed by sentence key."""
    with h5py.File(path, "r") as f:
        n = int(f.attrs["n_done"])
        keys = schema.keys_as_bytes(f["keys"][:n])
        texts = f["sentences"].asstr()[:n]
        n_tokens = f["n_tokens"][:n]
        vectors = {p: f["vectors"][p][:n] for p in f["vectors"]}
    return {k: {"text": texts[i], "n_tokens": int(n_tokens[i]),
                **{p: v[i] for p, v in vectors.items()}} for i, k in enumerate(keys)}


def compare_caches(got: Path, want: Path) -> int:
    """Rows of ``want`` missing from ``got`` (0 when equal); asserts every shared row is the
    same text, token count and vectors within float16 tolerance, and no extra rows."""
    a, b = rows_by_key(got), rows_by_key(want)
    extra = set(a) - set(b)
    assert not extra, f"{got}: {len(extra)} rows not in the uninterrupted run"
    for k in set(a) & set(b):
        assert a[k]["text"] == b[k]["text"]
        assert a[k]["n_tokens"] == b[k]["n_tokens"]
        for p in ("cls", "mean"):
            np.testing.assert_allclose(a[k][p].astype(np.float32), b[k][p].astype(np.float32),
                                       rtol=1e-3, atol=1e-3, err_msg=f"{p} of {a[k]['text']!r}")
    return len(set(b) - set(a))


def wait_for(pred, timeout: float = 60.0, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return False


WORDS = ("el la los un una perro gato casa niño niña hombre mujer come corre lee escribe "
         "grande pequeño de que y en por con para no su al lo como más pero sus le ya "
         "este porque esta entre cuando muy sin sobre también me hasta hay donde").split()


def make_sentences(n: int, seed: int = 0, max_words: int = 20) -> list:
    """``n`` distinct-ish Spanish-looking sentences (deterministic)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, max_words))]
        out.append(" ".join(words).capitalize() + f" {i}.")
    return out
