"""Benchmark: `estratos similarity` and `estratos geometry` over a MiniLM-shaped cache.

    python bench/similarity.py [--n 212000] [--states 7] [--dim 384] [--keep DIR]
                               [--other-states 31 --other-dim 576 --other-n 50000]

Writes a synthetic cache of N sentences x STATES hidden states (+ the stored avg: 8 layer
specs for MiniLM's 7 states) x DIM dims, float16, one pooling (es-senteval's 212k unique
sentences through all-MiniLM-L6-v2 has this shape), whose layers share a low-rank signal
that drifts from layer to layer, plus noise and one large "rogue" dimension, so the maps
are not trivial. Then runs, each in a fresh process, and prints wall time and peak RSS:

1. ``estratos similarity`` of the cache with itself: every layer pair, all five measures,
   raw and standardized (targets: under 60 s and 2 GB on the 2-core machine);
2. ``estratos geometry`` of the cache;
3. with ``--other-states``: a second cache of that shape (SmolLM2-135M: 31 states x 576)
   over the first ``--other-n`` sentences, and ``estratos similarity`` between the two.
"""

from __future__ import annotations

import argparse
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
from estratos.cache.writer import CacheWriter  # noqa: E402
from estratos.files import human_bytes  # noqa: E402
from estratos.text import sentence_key  # noqa: E402


def texts(n: int) -> list:
    return [f"frase número {i} del banco de similitud." for i in range(n)]


def build(path: Path, n: int, n_states: int, dim: int, seed: int, model: str) -> None:
    """A cache whose layers share a 32-dimensional signal rotated a little per layer."""
    rng = np.random.default_rng(seed)
    rank = 32
    maps = [rng.standard_normal((rank, dim)).astype(np.float32)]
    for _ in range(n_states - 1):
        maps.append(0.85 * maps[-1] + 0.5 * rng.standard_normal((rank, dim)).astype(np.float32))
    writer = CacheWriter.create(schema.partial_path(path), {
        "dtype": "float16", "poolings": ["mean"], "stored_avg": True, "n_states": n_states,
        "dim": dim, "states": list(range(n_states)), "model": model, "revision": "bench"})
    sentences = texts(n)
    step = schema.CHUNK_ROWS
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        latent = rng.standard_normal((hi - lo, rank), dtype=np.float32)
        block = np.empty((hi - lo, n_states, dim), dtype=np.float32)
        for s in range(n_states):
            block[:, s] = latent @ maps[s] * 0.2 + rng.standard_normal((hi - lo, dim),
                                                                        dtype=np.float32)
        block[:, :, 7] += 25.0  # a rogue dimension, large and nearly constant
        writer.append([sentence_key(t) for t in sentences[lo:hi]], sentences[lo:hi],
                      [9] * (hi - lo), [False] * (hi - lo), {"mean": block},
                      {"mean": block.mean(axis=1)})
    writer.finish(path)


#: runs the command line in the child and prints the child's own peak RSS (KB) last
CHILD = ("import resource, sys\nfrom estratos.cli import main\ntry:\n    main(sys.argv[1:])\n"
         "finally:\n    u = resource.getrusage(resource.RUSAGE_SELF)\n"
         "    sys.stderr.write('PEAK_KB %d CPU_S %.1f\\n' % (u.ru_maxrss, u.ru_utime + u.ru_stime))\n")


def run(words: list) -> tuple:
    """Run ``estratos WORDS`` in a fresh process: (seconds, its peak RSS in MB, its last
    output line, its logged timings and CPU time)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, "-v", *words], check=False,
                          capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"estratos {words[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = proc.stderr.splitlines()
    last = next(x.split() for x in reversed(lines) if x.startswith("PEAK_KB"))
    # CPU seconds (user + system) say what the run costs whatever else the cores are doing
    timings = [x for x in lines if "similarity.run" in x] + [f"CPU time {last[3]} s"]
    return seconds, int(last[1]) / 1024, proc.stdout.strip().splitlines()[-1], timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=212_000)
    parser.add_argument("--states", type=int, default=7)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--other-states", type=int, default=None)
    parser.add_argument("--other-dim", type=int, default=576)
    parser.add_argument("--other-n", type=int, default=50_000)
    parser.add_argument("--keep", type=Path, default=None,
                        help="build in (and keep) this folder instead of a temporary one")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="similarity-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        cache = folder / f"minilm-like-{args.n}.h5"
        t0 = time.perf_counter()
        if not cache.exists():
            build(cache, args.n, args.states, args.dim, 0, "bench/minilm-like")
        sentences = folder / f"sentences-{args.n}.txt"
        sentences.write_text("\n".join(texts(args.n)) + "\n", encoding="utf-8")
        print(f"cache: {args.n:,} sentences x {args.states} states + avg x {args.dim} dims, "
              f"float16, {human_bytes(cache.stat().st_size)} "
              f"(ready in {time.perf_counter() - t0:.0f} s)")
        out = folder / "similarity.jsonl"
        out.unlink(missing_ok=True)
        seconds, peak, line, timings = run(["similarity", "--cache", str(cache), "--sentences",
                                            str(sentences), "--out", str(out)])
        print(f"similarity, {args.states + 1} x {args.states + 1} layer specs, 5 measures, "
              f"raw + standardized: {seconds:.1f} s, peak RSS {peak:,.0f} MB "
              f"({'under' if seconds < 60 and peak < 2048 else 'OVER'} the 60 s / 2 GB "
              f"target)\n  {line}\n  " + "\n  ".join(timings))
        out = folder / "geometry.jsonl"
        out.unlink(missing_ok=True)
        seconds, peak, line, timings = run(["geometry", "--cache", str(cache), "--sentences",
                                            str(sentences), "--out", str(out)])
        print(f"geometry, {args.states + 1} layer specs, raw + standardized: {seconds:.1f} s"
              f"\n  {line}\n  " + "\n  ".join(timings))
        if args.other_states:
            other = folder / f"other-{args.other_n}.h5"
            if not other.exists():
                build(other, args.other_n, args.other_states, args.other_dim, 1,
                      "bench/smollm2-like")
            part = folder / f"sentences-{args.other_n}.txt"
            part.write_text("\n".join(texts(args.other_n)) + "\n", encoding="utf-8")
            out = folder / "pair.jsonl"
            out.unlink(missing_ok=True)
            seconds, peak, line, timings = run(["similarity", "--cache", str(other), "--other",
                                             str(cache), "--sentences", str(part), "--out",
                                             str(out)])
            print(f"similarity, {args.other_states + 1} x {args.states + 1} layer specs over "
                  f"{args.other_n:,} sentences, 5 measures, raw + standardized: "
                  f"{seconds:.1f} s, peak RSS {peak:,.0f} MB "
                  f"({'under' if seconds < 60 else 'OVER'} 60 s)\n  {line}"
                  "\n  " + "\n  ".join(timings))
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
