"""Benchmark: peak memory of probing a wide, deep cache.

    python bench/probe_memory.py [--n 20000] [--states 33] [--dim 4096]
                                 [--layers 0,8,16,24,32,avg] [--classifier lbfgs] [--keep DIR]

Writes a cache of N sentences x STATES hidden states x DIM dims (float16, one pooling, the
stored avg; a 7-8B LLM's shape: 20,000 x 33 x 4,096 is 5.6 GB), with a class signal along a
few dimensions, and a custom two-class task over those sentences (70/15/15 split), then runs
``estratos probe --layers LAYERS`` in a fresh process and prints its peak RSS.

What bounds the memory: the probe trains a unit's layer specs in chunks whose cached
vectors, features and trainer's copy stay under ``FEATURE_BUDGET_BYTES`` (1 GB;
``estratos.probe.grid.units.layer_bytes``), and reads each chunk's
hidden states from the cache for that chunk alone (the stored avg is one more column, never
"every state"). Without that, reading every hidden state of 20,000 sentences at 4,096 dims as
float32 is 10.8 GB. Target: peak RSS under 4 GB.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from estratos.cache import schema  # noqa: E402
from estratos.files import human_bytes  # noqa: E402
from estratos.cache.writer import CacheWriter  # noqa: E402
from estratos.text import sentence_key  # noqa: E402


def build(folder: Path, n: int, n_states: int, dim: int, seed: int = 0) -> Path:
    """The cache and the task files; returns the task's TOML."""
    rng = np.random.default_rng(seed)
    texts = [f"frase número {i} del banco de memoria." for i in range(n)]
    labels = rng.integers(0, 2, n)
    cache = folder / "wide.h5"
    writer = CacheWriter.create(schema.partial_path(cache), {
        "dtype": "float16", "poolings": ["cls"], "stored_avg": True, "n_states": n_states,
        "dim": dim, "states": list(range(n_states)), "model": "bench/wide"})
    step = schema.CHUNK_ROWS
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        block = rng.standard_normal((hi - lo, n_states, dim), dtype=np.float32)
        block[:, :, :8] += (labels[lo:hi, None, None] * 2 - 1) * 0.5  # a weak class signal
        writer.append([sentence_key(t) for t in texts[lo:hi]], texts[lo:hi], [9] * (hi - lo),
                      [False] * (hi - lo), {"cls": block}, {"cls": block.mean(axis=1)})
    writer.finish(cache)
    cut = {"train": (0, int(0.7 * n)), "dev": (int(0.7 * n), int(0.85 * n)),
           "test": (int(0.85 * n), n)}
    for split, (a, b) in cut.items():
        (folder / f"{split}.tsv").write_text(
            "".join(f"{'ab'[labels[i]]}\t{texts[i]}\n" for i in range(a, b)), encoding="utf-8")
    toml = folder / "wide.toml"
    toml.write_text('name = "Wide"\nsuite = "custom"\ngroup = "SC"\nlanguage = "es"\n'
                    'format = "tsv"\ncombiner = "single"\nprotocol = "split"\n[files]\n'
                    'train = "train.tsv"\ndev = "dev.tsv"\ntest = "test.tsv"\n[columns]\n'
                    'label = 0\nsentences = [1]\nheader = false\n', encoding="utf-8")
    return toml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--states", type=int, default=33)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--layers", default="0,8,16,24,32,avg")
    parser.add_argument("--classifier", default="lbfgs", choices=("lbfgs", "senteval"))
    parser.add_argument("--keep", type=Path, default=None,
                        help="build in (and keep) this folder instead of a temporary one")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="probe-memory-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        toml = folder / "wide.toml"
        if not (folder / "wide.h5").exists():
            toml = build(folder, args.n, args.states, args.dim)
        size = (folder / "wide.h5").stat().st_size
        print(f"cache: {args.n:,} sentences x {args.states} states (+ avg) x {args.dim} dims, "
              f"float16: {human_bytes(size)} (built in {time.perf_counter() - t0:.0f}s); "
              f"all states as float32 would be "
              f"{human_bytes(args.n * args.states * args.dim * 4)} in memory")
        out = folder / "r.jsonl"
        out.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "estratos", "probe", "--cache",
                               str(folder / "wide.h5"), "--task-file", str(toml), "--out",
                               str(out), "--layers", args.layers, "--classifier",
                               args.classifier, "--threads", "1", "--no-progress"],
                              env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"probe failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        cells = len(out.read_text().splitlines())
        print(f"probe --layers {args.layers} ({cells} cells, {args.classifier}): "
              f"{seconds:.0f}s, peak RSS {peak_mb:,.0f} MB "
              f"({'under' if peak_mb < 4096 else 'OVER'} the 4 GB target)")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
